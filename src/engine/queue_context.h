// engine: one server's queue algorithms (send, claim, settle, keys, retry, purge, inspect,
// archive, exactly-once, transactions, attributes, metrics); QueueContext is what they share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>

#include "catalog/topic_catalog.h"
#include "db/pool.h"
#include "engine/metrics.h"
#include "wait/waiters.h"

namespace txmq::internal {

// This client's row in txmq_consumers. In-flight rows name their holder by this id: a fixed-width
// column keeps claims in place (the catalog). Registered at the first claim, refreshed daily.
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
};

// Runs fn() on the topic's tables, turning "table does not exist" into "topic does not exist".
// A topic created without its tables gets them here, at its first use, and fn() runs again:
// whatever fn() did before it met the missing table is undone or harmless to repeat (its
// transaction rolled back, or, in a caller's transaction, statements on tables made before the
// queue table: none of a send's rows but a dedup key, which a repeat finds as its own).
// `in_transaction`: fn() runs in the caller's transaction (TopicCatalog::make_tables).
template <typename F>
auto on_topic(QueueContext& q, std::string_view topic, F&& fn, bool in_transaction = false)
    -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    if (!q.catalog.made_missing_tables(e, topic, in_transaction)) {
      rethrow_for_topic(q.catalog, e, topic);
    }
  }
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

constexpr std::size_t kMaxKeyBytes = 255;
constexpr int kMaxReceive = 10000;
// Set in the lease token of a keyed message: its receipt says that acknowledging it must also
// move its key's next message in (keys.cc), which needs a transaction; others need none.
constexpr std::uint64_t kKeyedTokenBit = std::uint64_t{1} << 63;

}  // namespace txmq::internal
