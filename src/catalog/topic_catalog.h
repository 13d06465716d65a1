// catalog: the schema and what it records of topics: settings, groups, partitions, migrations,
// send fences and the locks on catalog rows that serialise changes between clients.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "catalog/names.h"
#include "db/pool.h"
#include "txmq/error.h"
#include "txmq/types.h"

namespace txmq::internal {

constexpr int kSchemaVersion = 16;
constexpr std::uint64_t kAllPartitions = ~std::uint64_t{0};

// A topic's group, by the number its tables carry.
struct GroupEntry {
  std::string name;
  unsigned number = 0;
  Clock::time_point created_at;
};

// A topic's settings, groups and partitions. `version` changes with every change of groups or
// partitions; sends check it inside their statement or transaction (send.cc), so that no send
// misses a group created since this copy was read.
// Whether a shard map mask (TopicLayout::placed, txmq_topics.placed) holds `partition`.
inline bool placed_in(std::uint64_t placed, unsigned partition) {
  return partition < 64 && ((placed >> partition) & 1) != 0;
}

struct TopicLayout {
  TopicInfo info;
  std::vector<GroupEntry> groups;  // by number; never empty
  std::uint64_t version = 0;
  // The partitions that live on this server, one bit each: all of them unless the topic is
  // sharded over several servers (shard_map.h), where each server holds some.
  std::uint64_t placed = ~std::uint64_t{0};
  // Whether single sends try the topic's send fences first (the catalog, "Send fences"): false
  // in the cached copy once a send found them missing, until the layout is read again.
  bool send_fences = true;
  // Shared storage (TableCreation::kShared): the topic's rows are in the shared tables under
  // its sid (names.h), and it has no send fences, no send procedures and no tables of its own.
  bool shared = false;
  std::uint64_t sid = 0;

  bool is_placed(unsigned partition) const { return placed_in(placed, partition); }
  // Throws kNotFound naming the topic. Empty: the default group.
  const GroupEntry& group(std::string_view name) const;
  // The group whose queue tables allocate the ids (the lowest number); the others get copies.
  const GroupEntry& allocator() const { return groups.front(); }
  unsigned partitions() const { return static_cast<unsigned>(info.options.partitions); }
  // The tables of a group's partition, wherever its rows are (group 0, partition 0: the
  // topic-wide dedup and archive tables too).
  TopicTables tables(unsigned group = 0, unsigned partition = 0) const;
};

// One queue: a group's partition of a topic, with its own tables.
struct QueueRef {
  unsigned group = 0;
  unsigned partition = 0;
  TopicTables tables;
  std::string channel;  // where the group's waiting consumers register
};
QueueRef partition_queue(const TopicLayout& layout, unsigned group, unsigned partition);

// A topic as one call uses it: its layout, and the tables and wait channel of every group's
// partition, made once when the catalog is read (not per statement). Immutable and shared: a
// call resolves its topic once (TopicCatalog::resolve) and hands this down, so that it sees one
// layout throughout and never looks the name up again.
struct ResolvedTopic {
  explicit ResolvedTopic(TopicLayout layout);

  TopicLayout layout;
  TopicTables topic_wide;        // the tables of group 0, partition 0: the dedup and archive tables
  std::vector<QueueRef> queues;  // by group (layout order), then partition

  const std::string& name() const { return layout.info.name; }
  const TopicInfo& info() const { return layout.info; }
  const TopicOptions& options() const { return layout.info.options; }
  // None when the group or partition is not in the layout (a dropped group's receipt).
  const QueueRef* queue(unsigned group, unsigned partition) const;
  // The group's partitions placed on this server, in order (all when `only` is empty);
  // kInvalidArgument for a partition the topic does not have.
  std::vector<const QueueRef*> claim_order(const GroupEntry& group,
                                           const std::vector<int>& only) const;
  // Empty when the layout has no such group.
  std::string_view group_name(unsigned number) const;
};
using Topic = std::shared_ptr<const ResolvedTopic>;

// Topic settings, cached for a few seconds so that sends do not read the catalog each time.
class TopicCatalog {
 public:
  explicit TopicCatalog(Pool& pool) : pool_(pool) {}

  // Creates txmq_schema and txmq_topics when missing; refuses a newer schema version.
  void bootstrap();
  // Throws kNotFound when the topic does not exist, kInvalidArgument for a bad name.
  TopicInfo get(std::string_view name) { return resolve(name)->info(); }
  TopicLayout layout(std::string_view name) { return resolve(name)->layout; }
  // The topic as one call uses it (ResolvedTopic): from the cache when fresh, else read.
  Topic resolve(std::string_view name);
  // The same, read through c when not cached: for a caller that holds a connection of the pool
  // (a transaction), which must not wait for a second one (a pool of one would wait forever).
  Topic resolve(std::string_view name, Connection& c);
  // Reads the layout through c (inside the caller's transaction) and caches it.
  Topic reload(Connection& c, std::string_view name);
  // How many times a topic was resolved (resolve, get, layout): one call should resolve once.
  std::uint64_t resolutions() const { return resolutions_.load(std::memory_order_relaxed); }
  // `placed`: the partitions that live on this server (a sharded topic's member, shard_map.h).
  // `tables_now` false: only the catalog rows; make_tables makes the tables at first use.
  bool create(std::string_view name, const TopicOptions& options,
              std::uint64_t placed = ~std::uint64_t{0}, TableCreation tables = TableCreation::kNow);
  // Makes every table of the topic's groups and partitions that is missing (a topic created
  // without them, or a make cut short), with its send fences, under the topic's layout lock:
  // several clients may make them at once. False when the topic does not exist. Runs DDL on a
  // connection of its own: never inside a caller's transaction. `in_transaction`: the caller
  // holds a transaction that sent to the topic (and so its row's shared lock): the tables
  // without the lock and the fences.
  bool make_tables(std::string_view name, bool in_transaction = false);
  // Whether `error` says a table is missing (1146) and the topic exists, its tables now made:
  // the caller runs its statement again, once.
  bool made_missing_tables(const Error& error, std::string_view topic,
                           bool in_transaction = false);
  void update(std::string_view name, const TopicOptions& options,
              std::optional<std::uint64_t> placed = std::nullopt);
  // Changes which partitions live on this server, fenced against sends in progress (they hold
  // the topic row's shared lock) and bumping the layout version, which sends check: a send that
  // read the old shard map reads it again.
  void set_placed(std::string_view name, std::uint64_t placed);
  void drop(std::string_view name);
  // Deletes the rows of dropped topics in shared storage (txmq_dropped): drop does, after its
  // topic is gone, for it and any an earlier drop left (a client that stopped midway).
  void reap_dropped();
  std::vector<TopicInfo> list();
  // Names and has_tables only, by name: two statements that read no topic's settings.
  std::vector<TopicName> list_names();
  void forget(std::string_view name);
  // A send found the topic's send fences missing: the cached layout says so (send_fences false)
  // until it is read again, so that the next sends go straight to the checked statement.
  void no_send_fences(std::string_view name);

  // Makes every topic's fast send procedure (send_procedures.h) say what its layout says: after
  // the SQL interface's routines were installed. Topics without tables get theirs when made.
  void refresh_send_procedures();

  // Consumer groups (the catalog). create_group returns false when the group existed.
  bool create_group(std::string_view topic, std::string_view group, GroupStart start);
  void drop_group(std::string_view topic, std::string_view group);

 private:
  // A dead-letter topic must exist and not be the topic itself.
  void check_dead_letter_topic(std::string_view name, const TopicOptions& options);
  // The topic when cached and fresh.
  Topic cached(std::string_view name);

  static constexpr auto kCacheFor = std::chrono::seconds(5);
  // Past this many cached topics, a new entry first drops the stale ones.
  static constexpr std::size_t kCacheSweepAt = 4096;
  struct Cached {
    Topic topic;
    std::chrono::steady_clock::time_point fetched;
  };
  void remember(std::string_view name, const Topic& topic);
  std::optional<TopicLayout> load(Connection& c, std::string_view name);

  Pool& pool_;
  std::mutex mutex_;
  std::unordered_map<std::string, Cached> cache_;
  std::atomic<std::uint64_t> resolutions_{0};
};



// Whether the topic has all its tables (for its layout when they were made): a topic created
// without them (TopicCatalog::create) gets them at first use, the allocating group's first
// queue table last.
bool has_tables(Connection& c, const TopicLayout& layout);
// Whether it has any: the first made (its dedup table) or the last.
bool has_some_tables(Connection& c, const TopicLayout& layout);
// Every table of the topic's groups and partitions that is missing, the allocating group's
// first queue table last. REQUIRES: the topic's layout lock (LayoutLock) is held.
void create_all_tables(Connection& c, const TopicLayout& layout);

// Rethrows `error`; when it says the topic's table is gone (the topic was dropped), as kNotFound
// naming the topic, after forgetting the topic's cached settings.
[[noreturn]] void rethrow_for_topic(TopicCatalog& catalog, const Error& error,
                                    std::string_view topic);

}  // namespace txmq::internal
