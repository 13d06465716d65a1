#include "engine/announce.h"

#include <algorithm>

#include "engine/claim.h"

namespace txmq::internal {

std::shared_ptr<Subscriber> subscribe(QueueContext& q, std::string_view topic,
                                      std::string_view group, std::function<void()> wake) {
  if (!wake) throw Error(Errc::kInvalidArgument, "subscribe needs a wake function");
  const Topic resolved = q.catalog.resolve(topic);
  const GroupEntry& entry = resolved->layout.group(group);
  // All partitions of the group: the same waiter as receive's without a partition choice.
  std::vector<const QueueRef*> units = resolved->claim_order(entry, {});
  // A sharded topic with no partition on this server (any more): the channel still wakes.
  if (units.empty()) units.push_back(resolved->queue(entry.number, 0));
  return q.waiters.subscribe(units.front()->channel, queue_tables_of(units), std::move(wake));
}

void announce(QueueContext& q, const ResolvedTopic& topic, std::size_t count) {
  if (count == 0) return;
  // Every group got the messages; a group's partitions share its channel.
  const std::size_t partitions = topic.layout.partitions();
  for (std::size_t i = 0; i < topic.queues.size(); i += partitions) {
    q.waiters.announce(topic.queues[i].channel, count);
  }
}

void announce(QueueContext& q, std::string_view topic, std::size_t count) {
  if (count == 0) return;
  try {
    announce(q, *q.catalog.resolve(topic), count);
  } catch (const Error&) {
    // The topic went, or the catalog cannot be read now: waiters see the messages within 1 s.
  }
}

void made_claimable(QueueContext& q, const QueueRef& unit,
                    const std::vector<std::uint64_t>& ids) {
  if (ids.empty()) return;
  q.hints.lower(unit.tables.rows_key, *std::min_element(ids.begin(), ids.end()));
  q.waiters.announce(unit.channel, ids.size());
}

}  // namespace txmq::internal
