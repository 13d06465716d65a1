// Keyed FIFO, an invariant of a group's queue tables: one message per key in the queue table,
// the others parked behind it (catalog/ keeps it when it copies messages into a new group).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "catalog/names.h"
#include "db/connection.h"

namespace txmq::internal {

// Keyed FIFO (keys.cc), inside the caller's transaction. order_keyed takes the (key, id) pairs
// of messages just inserted into the queue table, in send order, and parks those whose key
// already has a message. finish_keyed takes the keys of messages just deleted from the queue
// table (acknowledged or dead-lettered), one entry per message, and moves each key's next
// parked message in; returns the ids moved in.
void order_keyed(Connection& c, const TopicTables& t,
                 const std::vector<std::pair<std::string_view, std::uint64_t>>& keyed);
std::vector<std::uint64_t> finish_keyed(Connection& c, const TopicTables& t,
                                        const std::vector<std::string>& finished_keys);

}  // namespace txmq::internal
