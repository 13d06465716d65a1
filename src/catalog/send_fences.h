// Send fences: the column whose existence lets a single send skip the layout check.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "catalog/topic_catalog.h"
#include "db/connection.h"
#include "txmq/error.h"

namespace txmq::internal {

// Renews the caller's lock on the topic's layout (LayoutLock::renew): false when another
// client overtook it.
using RenewLock = std::function<bool()>;

// The error of a change whose lock on the topic another client took. `where`: the table waited
// for, or the topic.
Error lock_lost(const std::string& where);

// Drops the send fences of the topic's queue tables on this server (send_fences.cc says when and
// why). Throws when a fence could not be dropped or the lock was lost.
void drop_send_fences(Connection& c, const TopicLayout& layout, const RenewLock& renew);
// Adds the send fences of a topic whose only group has number `group` to the partitions placed
// here. Best effort.
void add_send_fences(Connection& c, std::string_view topic, unsigned group, unsigned partitions,
                     std::uint64_t placed, const RenewLock& renew);
void add_send_fences(Connection& c, const std::optional<TopicLayout>& layout,
                     const RenewLock& renew);

}  // namespace txmq::internal
