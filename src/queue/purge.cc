// Purging a group's messages (SQS's PurgeQueue) and forgetting a topic's dedup keys.
#include <fmt/format.h>

#include "queue/operations.h"

namespace txmq::internal {
namespace {

// Rows per DELETE: each statement is its own short transaction, so that purging millions of
// messages never holds one huge transaction (nor its undo log).
constexpr int kPurgeChunk = 1000;

std::uint64_t delete_all(QueueContext& q, const std::string& table) {
  std::uint64_t total = 0;
  for (;;) {
    const std::uint64_t n = q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      return c.execute(fmt::format("DELETE FROM {} LIMIT {}", table, kPurgeChunk), {}).affected_rows;
    });
    total += n;
    if (n < static_cast<std::uint64_t>(kPurgeChunk)) return total;
  }
}

}  // namespace

std::uint64_t purge(QueueContext& q, std::string_view topic, std::string_view group) {
  const TopicLayout layout = q.catalog.layout(topic);
  const GroupEntry& g = layout.group(group);
  std::uint64_t purged = 0;
  on_topic(q, topic, [&] {
    for (unsigned p = 0; p < layout.partitions(); ++p) {
      const TopicTables t = topic_tables(topic, g.number, p);
      // Waiting keyed messages first, then the queue, then the keys' bookkeeping: a keyed
      // message sent meanwhile may find its key gone and start a new chain, never wait on a
      // head that was purged.
      purged += delete_all(q, t.parked);
      purged += delete_all(q, t.queue);
      delete_all(q, t.keys);
    }
  });
  return purged;
}

void forget_dedup_keys(QueueContext& q, std::string_view topic) {
  q.catalog.get(topic);  // kNotFound for a topic that does not exist
  on_topic(q, topic, [&] { delete_all(q, topic_tables(topic).dedup); });
}

}  // namespace txmq::internal
