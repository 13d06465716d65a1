#pragma once

#include <chrono>
#include <cstdint>
#include <atomic>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "db/pool.h"
#include "queue/metrics.h"
#include "queue/names.h"
#include "queue/waiting.h"
#include "queue/xa.h"
#include "txmq/client.h"

namespace txmq::internal {

// Expression giving a DATETIME(6) column (UTC) as microseconds since the epoch.
std::string micros_of(std::string_view column);
Clock::time_point time_from_micros(std::int64_t micros);

// "(?,?,?)" padded to a power of two so that the number of distinct prepared statements stays
// small; pad_ids repeats the last id to fill it (a repeated id in IN changes nothing).
std::size_t in_list_size(std::size_t n);
std::string placeholders(std::size_t n);
void pad_ids(std::vector<Param>& params, std::size_t from, std::size_t n);
// Runs `sql` (which holds one "{}" for an IN list) over `values` (keys or ids) in chunks of at
// most 1,000; returns all rows and the total of affected rows.
Result in_lists(Connection& c, std::string_view sql, std::vector<Param> values);

// A topic's group, by the number its tables carry.
struct GroupEntry {
  std::string name;
  unsigned number = 0;
  Clock::time_point created_at;
};

// A topic's settings, groups and partitions. `version` changes with every change of groups or
// partitions; sends check it inside their statement or transaction (send.cc), so that no send
// misses a group created since this copy was read.
// Whether a placement mask (TopicLayout::placed, txmq_topics.placed) holds `partition`.
inline bool placed_in(std::uint64_t placed, unsigned partition) {
  return partition < 64 && ((placed >> partition) & 1) != 0;
}

struct TopicLayout {
  TopicInfo info;
  std::vector<GroupEntry> groups;  // by number; never empty
  std::uint64_t version = 0;
  // The partitions that live on this server, one bit each: all of them unless the topic is
  // spread over several servers (placement.h), where each server holds some.
  std::uint64_t placed = ~std::uint64_t{0};
  // Whether single sends try the topic's send fences first (catalog.cc, "Send fences"): false
  // in the cached copy once a send found them missing, until the layout is read again.
  bool send_fences = true;

  bool is_placed(unsigned partition) const { return placed_in(placed, partition); }
  // Throws kNotFound naming the topic. Empty: the default group.
  const GroupEntry& group(std::string_view name) const;
  // The group whose queue tables allocate the ids (the lowest number); the others get copies.
  const GroupEntry& allocator() const { return groups.front(); }
  unsigned partitions() const { return static_cast<unsigned>(info.options.partitions); }
};

// Topic settings, cached for a few seconds so that sends do not read the catalog each time.
class TopicCatalog {
 public:
  explicit TopicCatalog(Pool& pool) : pool_(pool) {}

  // Creates txmq_schema and txmq_topics when missing; refuses a newer schema version.
  void bootstrap();
  // Throws kNotFound when the topic does not exist, kInvalidArgument for a bad name.
  TopicInfo get(std::string_view name) { return layout(name).info; }
  TopicLayout layout(std::string_view name);
  // The same, read through c when not cached: for a caller that holds a connection of the pool
  // (a transaction), which must not wait for a second one (a pool of one would wait forever).
  TopicLayout layout(std::string_view name, Connection& c);
  // Reads the layout through c (inside the caller's transaction) and caches it.
  TopicLayout reload(Connection& c, std::string_view name);
  // `placed`: the partitions that live on this server (a spread topic's member, placement.h).
  bool create(std::string_view name, const TopicOptions& options,
              std::uint64_t placed = ~std::uint64_t{0});
  void update(std::string_view name, const TopicOptions& options,
              std::optional<std::uint64_t> placed = std::nullopt);
  // Changes which partitions live on this server, fenced against sends in progress (they hold
  // the topic row's shared lock) and bumping the layout version, which sends check: a send that
  // read the old placement reads it again.
  void set_placed(std::string_view name, std::uint64_t placed);
  void drop(std::string_view name);
  std::vector<TopicInfo> list();
  void forget(std::string_view name);
  // A send found the topic's send fences missing: the cached layout says so (send_fences false)
  // until it is read again, so that the next sends go straight to the checked statement.
  void no_send_fences(std::string_view name);

  // Consumer groups (catalog.cc). create_group returns false when the group existed.
  bool create_group(std::string_view topic, std::string_view group, GroupStart start);
  void drop_group(std::string_view topic, std::string_view group);

 private:
  // A dead-letter topic must exist and not be the topic itself.
  void check_dead_letter_topic(std::string_view name, const TopicOptions& options);
  // The layout when cached and fresh.
  std::optional<TopicLayout> cached(std::string_view name);

  static constexpr auto kCacheFor = std::chrono::seconds(5);
  struct Cached {
    TopicLayout layout;
    std::chrono::steady_clock::time_point fetched;
  };
  std::optional<TopicLayout> load(Connection& c, std::string_view name);

  Pool& pool_;
  std::mutex mutex_;
  std::unordered_map<std::string, Cached> cache_;
};

// This client's row in txmq_consumers. In-flight rows name their holder by this id: a fixed-width
// column keeps claims in place (catalog.cc). Registered at the first claim, refreshed daily.
class ConsumerRegistration {
 public:
  std::uint64_t id(Pool& pool, const std::string& name);

 private:
  std::mutex mutex_;
  std::uint64_t id_ = 0;
  std::chrono::steady_clock::time_point registered_;
};

// Where this client's claims of each queue table (a topic's group's partition; keyed by its
// quoted name) start walking the primary key (claim.cc): past the
// ids it already claimed, so that thousands of messages in flight at the head of a topic are not
// walked by every claim. Lower ids (expired leases, nacks, due delays) are swept regularly.
class ScanHints {
 public:
  struct Start {
    std::uint64_t from_id = 0;
    bool sweep = true;  // from the lowest id
  };
  Start start(std::string_view topic);
  // After a claim that swept from the lowest id or started at the hint, and took ids up to
  // max_id (0: none).
  void claimed(std::string_view topic, bool swept, std::uint64_t max_id);
  // An id of the topic may be claimable below the hint again (this client nacked it).
  void lower(std::string_view topic, std::uint64_t id);
  void forget(std::string_view topic);

 private:
  static constexpr auto kSweepEvery = std::chrono::seconds(1);
  struct Hint {
    std::uint64_t next_id = 0;
    std::chrono::steady_clock::time_point swept_at;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, Hint> hints_;
};

// When this client last purged each topic's expired rows, at most every 10 s per topic: dedup
// keys (send.cc) and archived messages (settle.cc).
class PurgeSchedule {
 public:
  bool due(std::string_view topic);
  // more_left: the purge took as many rows as it may; the next one is due at once.
  void done(std::string_view topic, bool more_left);

 private:
  static constexpr auto kEvery = std::chrono::seconds(10);
  std::mutex mutex_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> next_;
};

// One queue: a group's partition of a topic, with its own tables.
struct Unit {
  std::string topic;
  unsigned group = 0;
  unsigned partition = 0;
  TopicTables tables;
  std::string channel;  // where the group's waiting consumers register
};
Unit unit_of(std::string_view topic, unsigned group, unsigned partition);

struct QueueContext;

// Partition choice (send.cc): a key's partition is a jump consistent hash of its FNV-1a hash,
// so raising the partition count moves as few keys as possible.
unsigned partition_of_key(std::string_view key, unsigned partitions);
// The partition of an unkeyed send (in turn among those placed on this server) and of a keyed
// one; both throw not_placed_here() when the server holds none or not the key's: the caller's
// placement of a spread topic is out of date (placement.h).
unsigned unkeyed_partition(QueueContext& q, const TopicLayout& layout);
unsigned keyed_partition(const TopicLayout& layout, std::string_view key);
// An error's server_errno that says "not on this server": a private number, never a server's.
constexpr unsigned kNotPlacedHere = 99001;
Error not_placed_here(const TopicLayout& layout, unsigned partition);
inline bool is_not_placed_here(const Error& e) { return e.server_errno() == kNotPlacedHere; }

// Messages a transaction sent to a topic: all of them, and those claimable at once.
struct SentCount {
  std::size_t total = 0;
  std::size_t claimable = 0;
};

// What every queue operation needs.
struct QueueContext {
  QueueContext(Dsn dsn, int pool_size, std::string owner_name, bool record_metrics)
      : pool(std::move(dsn), pool_size),
        metrics(pool, record_metrics),
        catalog(pool),
        owner(std::move(owner_name)) {}

  Pool pool;
  MetricsRecorder metrics;  // after pool: its last flush runs before the pool goes
  TopicCatalog catalog;
  std::string owner;
  ConsumerRegistration registration;
  ScanHints hints;
  PurgeSchedule dedup_purges;
  PurgeSchedule archive_purges;  // settle.cc
  // Rotates partitions between sends and between claims; from a random start, so that
  // short-lived processes do not all begin with partition 0.
  std::atomic<std::uint64_t> turn{std::random_device{}()};
  std::size_t max_statement_bytes = 8 << 20;  // from the server's max_allowed_packet
  Waiters waiters{pool};  // after pool: stopped before the pool goes
  XaSites xa;             // process_xa's resources (xa_process.cc)
};

// Rethrows `error`; when it says the topic's table is gone (the topic was dropped), as kNotFound
// naming the topic, after forgetting the topic's cached settings.
[[noreturn]] void rethrow_for_topic(TopicCatalog& catalog, const Error& error,
                                    std::string_view topic);

// Runs fn() on the topic's tables, turning "table does not exist" into "topic does not exist".
template <typename F>
auto on_topic(QueueContext& q, std::string_view topic, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    rethrow_for_topic(q.catalog, e, topic);
  }
}

// Whether a message with `attempts` deliveries so far is dead-lettered rather than delivered
// again (max_attempts 0: never).
inline bool past_max_attempts(const TopicOptions& options, std::int64_t attempts) {
  return options.max_attempts > 0 && attempts >= options.max_attempts;
}

constexpr int kSchemaVersion = 12;
constexpr std::uint64_t kAllPartitions = ~std::uint64_t{0};
constexpr std::size_t kMaxKeyBytes = 255;
constexpr int kMaxReceive = 10000;
// Set in the lease token of a keyed message: its receipt says that acknowledging it must also
// move its key's next message in (keys.cc), which needs a transaction; others need none.
constexpr std::uint64_t kKeyedTokenBit = std::uint64_t{1} << 63;

}  // namespace txmq::internal
