// Which partition a send goes to, and the refusal of a partition this server does not hold.
#pragma once

#include <string_view>

#include "catalog/topic_catalog.h"
#include "engine/queue_context.h"

namespace txmq::internal {

// Partition choice (send.cc): a key's partition is a jump consistent hash of its FNV-1a hash,
// so raising the partition count moves as few keys as possible.
unsigned partition_of_key(std::string_view key, unsigned partitions);
// The partition of an unkeyed send (in turn among those placed on this server) and of a keyed
// one; both throw not_placed_here() when the server holds none or not the key's: the caller's
// shard map of a sharded topic is out of date (shard_map.h).
unsigned unkeyed_partition(QueueContext& q, const TopicLayout& layout);
unsigned keyed_partition(const TopicLayout& layout, std::string_view key);
// An error's server_errno that says "not on this server": a private number, never a server's.
constexpr unsigned kNotPlacedHere = 99001;
Error not_placed_here(const TopicLayout& layout, unsigned partition);
inline bool is_not_placed_here(const Error& e) { return e.server_errno() == kNotPlacedHere; }

}  // namespace txmq::internal
