#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace txmq::internal {

// Topic names become parts of table names: [a-z][a-z0-9_]{0,47}. Anything else is refused with
// Error(kInvalidArgument) before it can reach a statement. Group names follow the same rule
// (they are stored, not put in table names: a group's tables carry its number).
constexpr std::size_t kMaxTopicName = 48;
bool is_valid_topic_name(std::string_view name) noexcept;
void check_topic_name(std::string_view name);
void check_group_name(std::string_view name);

// The group every topic starts with, used by calls that name none (group number 0).
constexpr std::string_view kDefaultGroup = "default";

// Limits that keep every table name within MariaDB's 64 characters: group numbers (never
// reused within a topic) up to 999, partitions up to 64.
constexpr unsigned kMaxGroupNumber = 999;
constexpr int kMaxPartitions = 64;

// A message id carries its partition in its top 16 bits: partition p's tables allocate ids from
// p << 48, so ids are unique across a topic's partitions and a receipt finds its table.
constexpr int kPartitionShift = 48;
constexpr unsigned partition_of(std::uint64_t id) {
  return static_cast<unsigned>(id >> kPartitionShift);
}
constexpr std::uint64_t first_id_of(unsigned partition) {
  return (std::uint64_t{partition} << kPartitionShift) + 1;
}

// Quoted table names of one queue: a (validated) topic's group and partition. Group 0 and
// partition 0 use the names of schema version 4 (`txmq_q_NAME`); others add `$GROUP_PARTITION`
// (`txmq_q_NAME$2_15`). Dedup keys and the archive belong to the topic.
struct TopicTables {
  std::string queue;    // `txmq_q_NAME`: messages waiting or in flight
  std::string dead;     // `txmq_dlq_NAME`: dead letters
  std::string dedup;    // `txmq_dd_NAME`: deduplication keys of recent sends
  std::string keys;     // `txmq_k_NAME`: message keys with messages not yet finished
  std::string parked;   // `txmq_kp_NAME`: keyed messages waiting behind an earlier one
  std::string archive;  // `txmq_a_NAME`: acknowledged messages kept for the topic's retention

  // Shared storage (docs/design/shared-queues.md): a queue without tables of its own keeps its
  // rows in the shared tables `txmq_sh_*` under its qid (queue, dead, keys, parked) and its
  // topic's sid (dedup, archive). Every statement on them names those first: the fragments
  // below are empty for a topic with its own tables, so that its statements stay as they were.
  std::uint64_t qid = 0;
  std::uint64_t sid = 0;
  std::string q_and;  // "qid = N AND ": every condition on queue, dead, keys and parked starts so
  std::string s_and;  // "sid = N AND ": on dedup and archive
  std::string q_col;  // "qid, ": the first column an INSERT into queue, dead, keys, parked names
  std::string q_val;  // "N, ": its value
  std::string s_col;  // "sid, ", for dedup and archive
  std::string s_val;  // "N, "
  std::string id_order;  // "id", or "qid, id": the primary key's order of a queue's rows
  // Names this queue's rows in per-queue state (scan hints): the queue table, or
  // "`txmq_sh_q`#QID".
  std::string rows_key;
  bool shared() const { return qid != 0; }
};
TopicTables topic_tables(std::string_view name, unsigned group = 0, unsigned partition = 0);

// Shared storage: the topic's sid names its rows; a queue's qid adds its group and partition, so
// that a qid is computed, never looked up, and a topic's rows are one range of qids.
constexpr int kSharedGroupShift = 6;   // partitions below 64
constexpr int kSharedTopicShift = 16;  // groups below 1024
constexpr std::uint64_t shared_qid(std::uint64_t sid, unsigned group, unsigned partition) {
  return sid << kSharedTopicShift | std::uint64_t{group} << kSharedGroupShift | partition;
}
// The tables of one queue of a topic in shared storage.
TopicTables shared_tables(std::uint64_t sid, unsigned group = 0, unsigned partition = 0);
// The shared tables' names (schema version 16, docs/schema.md).
inline constexpr std::string_view kSharedQueue = "txmq_sh_q";
inline constexpr std::string_view kSharedDead = "txmq_sh_dlq";
inline constexpr std::string_view kSharedDedup = "txmq_sh_dd";
inline constexpr std::string_view kSharedKeys = "txmq_sh_k";
inline constexpr std::string_view kSharedParked = "txmq_sh_kp";
inline constexpr std::string_view kSharedArchive = "txmq_sh_a";

// The column of a queue table that single sends and one-statement batches name while the topic
// has one group and the partition is placed on this server: its existence is their guard
// against a change of groups or shard map (the catalog, "Send fences"). Always NULL.
inline constexpr std::string_view kSendFence = "send_fence";

// The view over a partition's queue table that schema version 10 guarded sends with
// (`txmq_sv_NAME`, `txmq_sv_NAME$PARTITION`): named only to drop it when migrating.
std::string send_view(std::string_view topic, unsigned partition);

// What waiting consumers of one group register under (waiters.cc): the topic's name for group
// 0, NAME$GROUP for others.
std::string wait_channel(std::string_view topic, unsigned group);

// Quotes an identifier for MariaDB; REQUIRES: it contains no backtick (validated names never do).
std::string quote_identifier(std::string_view identifier);

// A quoted identifier without its backquotes.
inline std::string unquoted(const std::string& quoted) {
  return quoted.substr(1, quoted.size() - 2);
}

}  // namespace txmq::internal
