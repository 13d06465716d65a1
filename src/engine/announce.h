// Waking waiting consumers after a commit, and Client::subscribe's registration with a waiter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/queue_context.h"
#include "wait/subscriber.h"

namespace txmq::internal {

// After a commit that made messages claimable: wakes up to `count` waiting consumers
// (waiters.cc), this client's at once and others' from a background thread. Never throws: the
// commit succeeded, whatever happens here.
void announce(QueueContext& q, std::string_view topic, std::size_t count);
// The same, with the topic already resolved (its groups are announced to).
void announce(QueueContext& q, const ResolvedTopic& topic, std::size_t count);
// After a commit that moved keyed messages into the queue table (or made others claimable
// below this client's scan hint): lowers the hint and announces them.
void made_claimable(QueueContext& q, const QueueRef& unit,
                    const std::vector<std::uint64_t>& ids);

// Client::subscribe (waiters.cc): a subscription to the group's waiter; Client::Subscription's
// members (also in waiters.cc) cancel it when destroyed.
std::shared_ptr<Subscriber> subscribe(QueueContext& q, std::string_view topic,
                                                      std::string_view group,
                                                      std::function<void()> wake);

}  // namespace txmq::internal
