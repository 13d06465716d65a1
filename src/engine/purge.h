// Client::purge and Client::forget_dedup_keys.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/queue_context.h"

namespace txmq::internal {

// Client::purge and Client::forget_dedup_keys.
std::uint64_t purge(QueueContext& q, std::string_view topic, std::string_view group);
void forget_dedup_keys(QueueContext& q, std::string_view topic);

}  // namespace txmq::internal
