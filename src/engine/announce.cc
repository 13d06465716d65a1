#include "engine/announce.h"

#include <algorithm>

#include "engine/claim.h"

namespace txmq::internal {

std::shared_ptr<Subscriber> subscribe(QueueContext& q, std::string_view topic,
                                      std::string_view group, std::function<void()> wake) {
  if (!wake) throw Error(Errc::kInvalidArgument, "subscribe needs a wake function");
  const TopicLayout layout = q.catalog.layout(topic);
  // All partitions of the group: the same waiter as receive's without a partition choice.
  std::vector<PartitionQueue> units = claim_order(layout, layout.group(group), {});
  // A sharded topic with no partition on this server (any more): the channel still wakes.
  if (units.empty()) units.push_back(partition_queue(topic, layout.group(group).number, 0));
  return q.waiters.subscribe(units.front().channel, queue_tables_of(units), std::move(wake));
}

void announce(QueueContext& q, const TopicLayout& layout, std::size_t count) {
  if (count == 0) return;
  // Every group got the messages.
  for (const GroupEntry& g : layout.groups) {
    q.waiters.announce(wait_channel(layout.info.name, g.number), count);
  }
}

void announce(QueueContext& q, std::string_view topic, std::size_t count) {
  if (count == 0) return;
  try {
    announce(q, q.catalog.layout(topic), count);
  } catch (const Error&) {
    // The topic went, or the catalog cannot be read now: waiters see the messages within 1 s.
  }
}

void made_claimable(QueueContext& q, const PartitionQueue& unit,
                    const std::vector<std::uint64_t>& ids) {
  if (ids.empty()) return;
  q.hints.lower(unit.tables.queue, *std::min_element(ids.begin(), ids.end()));
  q.waiters.announce(unit.channel, ids.size());
}

}  // namespace txmq::internal
