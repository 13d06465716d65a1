// Reading a topic's state: counts, messages in flight, dead letters and their handling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/queue_context.h"

namespace txmq::internal {

// exact_up_to 0: counts every row; else reads about 2 * exact_up_to rows per table and
// estimates beyond (Client::stats).
TopicStats stats(QueueContext& q, std::string_view topic, std::string_view group,
                 std::uint64_t exact_up_to);
std::vector<InFlightMessage> in_flight(QueueContext& q, std::string_view topic,
                                       std::string_view group, std::size_t limit);
std::vector<DeadLetter> dead_letters(QueueContext& q, std::string_view topic,
                                     std::string_view group, std::size_t limit,
                                     std::size_t payload_bytes);
std::size_t requeue_dead(QueueContext& q, std::string_view topic, std::string_view group,
                         std::span<const std::uint64_t> ids);
std::size_t delete_dead(QueueContext& q, std::string_view topic, std::string_view group,
                        std::span<const std::uint64_t> ids);

}  // namespace txmq::internal
