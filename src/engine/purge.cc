// Purging a group's messages (SQS's PurgeQueue) and forgetting a topic's dedup keys.
#include "engine/purge.h"

#include <fmt/format.h>

#include <map>

#include "catalog/topic_catalog.h"
#include "catalog/keys.h"
#include "db/sql.h"
#include "engine/queue_context.h"

namespace txmq::internal {
namespace {

// Rows per DELETE: each statement is its own short transaction, so that purging millions of
// messages never holds one huge transaction (nor its undo log).
constexpr int kPurgeChunk = 1000;

// `scope`: "sid = N AND " for a topic in shared storage (TopicTables), else "".
std::uint64_t delete_all(QueueContext& q, const std::string& table, const std::string& scope) {
  std::uint64_t total = 0;
  const std::string sql = fmt::format("DELETE FROM {} WHERE {}TRUE LIMIT {}", table, scope,
                                      kPurgeChunk);
  for (;;) {
    const std::uint64_t n = q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      return c.execute(sql, {}).affected_rows;
    });
    total += n;
    if (n < static_cast<std::uint64_t>(kPurgeChunk)) return total;
  }
}

// Purges one queue (a group's partition) of what it held when the purge began: parked keyed
// messages first (their keys' counts go down with them), then the queue's rows, whose keys
// move on as after an acknowledgement (finish_keyed), so that a keyed message sent meanwhile is
// never left waiting behind a key that was purged. Each chunk is its own short transaction.
std::uint64_t purge_queue(QueueContext& q, const TopicTables& t) {
  const Result bounds = q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    // MAX alone, not COALESCE(MAX, 0): that would come back as a DECIMAL.
    return c.execute(fmt::format("SELECT (SELECT MAX(id) FROM {} WHERE {}TRUE), (SELECT "
                                 "MAX(park_id) FROM {} WHERE {}TRUE)",
                                 t.queue, t.q_and, t.parked, t.q_and),
                     {});
  });
  const Row& highest = bounds.rows.at(0);
  const std::uint64_t last_id = highest.null(0) ? 0 : highest.u64(0);
  const std::uint64_t last_park_id = highest.null(1) ? 0 : highest.u64(1);
  std::uint64_t total = 0;
  for (std::uint64_t n = kPurgeChunk; n == kPurgeChunk;) {
    n = q.pool.run(OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
      c.begin();
      const Param bound[] = {last_park_id};
      Result r = delete_returning(
          c, t.parked,
          fmt::format("WHERE {}park_id <= ? ORDER BY park_id LIMIT {}", t.q_and, kPurgeChunk),
          bound, "msg_key", "park_id", t.q_and);
      std::map<std::string, std::int64_t> per_key;
      for (const Row& row : r.rows) per_key[row.bytes(0)]++;
      for (const auto& [key, count] : per_key) {
        c.execute(fmt::format("UPDATE {} SET parked = parked - LEAST(parked, ?) WHERE {}msg_key "
                              "= ?",
                              t.keys, t.q_and),
                  {count, std::string_view(key)});
      }
      c.commit();
      return static_cast<std::uint64_t>(r.rows.size());
    });
    total += n;
  }
  for (std::uint64_t n = kPurgeChunk; n == kPurgeChunk;) {
    n = q.pool.run(OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
      c.begin();
      const Param bound[] = {last_id};
      Result r = delete_returning(
          c, t.queue,
          fmt::format("WHERE {}id <= ? ORDER BY {} LIMIT {}", t.q_and, t.id_order, kPurgeChunk),
          bound, "msg_key", "id", t.q_and);
      std::vector<std::string> keys;
      for (Row& row : r.rows) {
        if (!row.null(0)) keys.push_back(row.take_bytes(0));
      }
      finish_keyed(c, t, keys);
      c.commit();
      return static_cast<std::uint64_t>(r.rows.size());
    });
    total += n;
  }
  return total;
}

}  // namespace

std::uint64_t purge(QueueContext& q, std::string_view topic, std::string_view group) {
  const TopicLayout layout = q.catalog.layout(topic);
  const GroupEntry& g = layout.group(group);
  std::uint64_t purged = 0;
  on_topic(q, topic, [&] {
    for (unsigned p = 0; p < layout.partitions(); ++p) {
      purged += purge_queue(q, layout.tables(g.number, p));
    }
  });
  return purged;
}

void forget_dedup_keys(QueueContext& q, std::string_view topic) {
  const TopicTables t = q.catalog.layout(topic).tables();  // kNotFound for a topic that does not exist
  on_topic(q, topic, [&] { delete_all(q, t.dedup, t.s_and); });
}

}  // namespace txmq::internal
