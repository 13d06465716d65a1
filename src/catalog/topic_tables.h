// The tables of a topic's groups and partitions (docs/schema.md specifies them).
#pragma once

#include <cstdint>

#include "catalog/names.h"
#include "db/connection.h"

namespace txmq::internal {

// A group's partition's dead-letter, keys, parked and queue tables (the queue table last), its
// ids starting at first_id; a fair topic's queue table has its tenants' columns (fair order,
// engine/send.cc).
void create_queue_tables(Connection& c, const TopicTables& t, std::uint64_t first_id,
                         bool fair = false);
// Gives an existing queue table a fair topic's columns and indexes (unless it has them).
void make_fair(Connection& c, const TopicTables& t);
// The tables a topic's groups share (its keys' dedup and archive tables).
void create_topic_wide_tables(Connection& c, const TopicTables& t);
// The tables of every topic in shared storage, made once (schema version 16).
void create_shared_storage_tables(Connection& c);
// Both, for a topic's first group and partition (the queue table last).
void create_topic_tables(Connection& c, const TopicTables& t);

}  // namespace txmq::internal
