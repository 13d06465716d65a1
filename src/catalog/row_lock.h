// Locks on catalog rows, which serialise between clients what must not run twice at once.
#pragma once

#include <chrono>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "db/connection.h"
#include "txmq/error.h"

namespace txmq::internal {

// What must not run twice at once between clients (a schema migration; a change of one topic's
// groups or partitions) is serialised by a lock on a catalog row: a random token and an expiry
// written in autocommit, won when the UPDATE finds the row unlocked or its lock run out, and
// released by the token. Unlike a named user lock (node-local on Galera) the lock is a
// replicated row write: on Galera two nodes racing for it fail certification except one (1213,
// kAborted), which counts as "not won, look again". A holder that died is overtaken when its
// lock runs out. Same code on a single server.

// A row that holds a lock. Identifiers only; values are bound.
struct LockedRow {
  std::string_view table;
  std::string_view key;    // its primary key column
  std::string_view by;     // the holder's token, NULL when free
  std::string_view until;  // when the lock runs out (server time)
};
inline constexpr LockedRow kSchemaLock{"txmq_schema", "singleton", "claimed_by", "claimed_until"};
inline constexpr LockedRow kLayoutLockRow{"txmq_topics", "name", "layout_claimed_by",
                                         "layout_claimed_until"};
// How long a lock lasts unless renewed, and how long a client waits for one held by another
// before kUnavailable. The same: a lock older than this is its dead holder's.
inline constexpr int kLockSeconds = 60;

std::mt19937_64& lock_random();

// A new holder's token: random, 32 hex digits.
std::string lock_token();

// One try, in autocommit: true when `token` now holds the lock. Also renews the token's own
// lock. A deadlock, lock-wait timeout or certification failure means another client's write
// won: not won.
bool try_lock_row(Connection& c, const LockedRow& row, const Param& key, std::string_view token);

enum class Locked { kWon, kNotNeeded, kTimedOut };

// Tries to lock every 100-200 ms for up to kLockSeconds; `not_needed` is asked after each
// try that lost (the holder may have done the work, or the row gone).
template <typename F>
Locked lock_row(Connection& c, const LockedRow& row, const Param& key, std::string_view token,
                F&& not_needed) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kLockSeconds);
  for (;;) {
    if (try_lock_row(c, row, key, token)) return Locked::kWon;
    if (not_needed()) return Locked::kNotNeeded;
    if (std::chrono::steady_clock::now() >= deadline) return Locked::kTimedOut;
    std::this_thread::sleep_for(std::chrono::milliseconds(
        100 + static_cast<int>(lock_random()() % 101)));
  }
}

// Releases the token's lock (in autocommit, after rolling back what the connection left open).
// Failures are left alone: the lock then runs out by itself.
void release_row_lock(Connection& c, const LockedRow& row, const Param& key,
                      std::string_view token) noexcept;

// Serialises changes of one topic's groups and partitions between clients: a lock on the
// topic's row, held from construction to destruction. Holds nothing when the topic does not
// exist (the caller's load() then finds it missing). A change that outlives the lock (a minute)
// can be overtaken only while it does not hold the row's lock: the part of a group change that
// bumps the layout holds it (with_topic_fenced), and a lock waits for it.
class LayoutLock {
 public:
  LayoutLock(Connection& c, std::string_view topic)
      : c_(c), topic_(topic), token_(lock_token()) {
    const Param key{std::string_view(topic_)};
    const Locked got = lock_row(c_, kLayoutLockRow, key, token_, [&] {
      return c_.execute("SELECT 1 FROM txmq_topics WHERE name = ?", {key}).rows.empty();
    });
    if (got == Locked::kTimedOut) {
      throw Error(Errc::kUnavailable,
                  fmt::format("another client has been changing the groups or partitions of "
                              "topic '{}' for over a minute",
                              topic));
    }
    held_ = got == Locked::kWon;
  }
  ~LayoutLock() {
    if (held_) release_row_lock(c_, kLayoutLockRow, Param{std::string_view(topic_)}, token_);
  }
  // Renews the lock for another kLockSeconds: false when none was held or another client has
  // overtaken it (this one ran out). Read the layout after it, not before.
  bool renew() {
    return held_ && try_lock_row(c_, kLayoutLockRow, Param{std::string_view(topic_)}, token_);
  }
  LayoutLock(const LayoutLock&) = delete;
  LayoutLock& operator=(const LayoutLock&) = delete;

 private:
  Connection& c_;
  std::string topic_;
  std::string token_;
  bool held_ = false;
};

}  // namespace txmq::internal
