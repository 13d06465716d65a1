// Visits of one call to several servers of a sharded topic, each on a thread of its own, so
// that a server that accepts but never answers (SIGSTOPped, a host gone dark without resets)
// holds up only its own visit: the call goes on without it (docs/shards.md, "A server that
// stops answering").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "db/pool.h"

namespace txmq::internal {

// How long a call waits for one server before it goes on without it. A claim, a settle or a
// count on a healthy server takes milliseconds; one that takes a second is on a server that
// stopped answering (or is about to be skipped for a moment at no cost: an abandoned claim's
// messages are given back when it ends, engine/settle.h release). Only the wait on the server
// counts: from the moment the visit got a pooled connection (or began to connect), not the
// wait for a free connection of a busy pool (Pool::note_acquisitions).
inline constexpr auto kSlowVisit = std::chrono::milliseconds(1000);

// Nanoseconds of steady_clock since a visit began to wait on its server; 0 while it has not.
using ServerWait = std::atomic<std::int64_t>;

// A visit that has not begun to wait on its server (no free connection, no thread) is given
// up on only after this long.
inline constexpr auto kVisitNotBegun = std::chrono::seconds(10);

// Whether a visit made at `made` that began to wait on its server at `since` (ServerWait)
// waited `budget` there (or `not_begun` before); else the time to look again (its deadline,
// or soon while it has not begun).
inline bool waited_past(const ServerWait& since, std::chrono::steady_clock::time_point made,
                        std::chrono::nanoseconds budget,
                        std::chrono::steady_clock::time_point& look_again,
                        std::chrono::nanoseconds not_begun = kVisitNotBegun) {
  const auto now = std::chrono::steady_clock::now();
  const std::int64_t at = since.load();
  if (at == 0) {
    if (now >= made + not_begun) return true;
    look_again = std::min(look_again, now + std::chrono::milliseconds(20));
    return false;
  }
  const std::chrono::steady_clock::time_point deadline{std::chrono::nanoseconds(at) + budget};
  if (now >= deadline) return true;
  look_again = std::min(look_again, deadline);
  return false;
}

// Threads for visits, made as needed (at most kMaxThreads; beyond that visits queue) and kept
// for the next ones. The destructor waits for the visits that still run.
class VisitPool {
 public:
  VisitPool() = default;
  VisitPool(const VisitPool&) = delete;
  VisitPool& operator=(const VisitPool&) = delete;
  ~VisitPool();

  void run(std::function<void()> task);

 private:
  static constexpr std::size_t kMaxThreads = 256;
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

// The visits of one call: fn(server) -> T on the pool for each server, waited for together.
// A visit still running when the call stops waiting is abandoned: `late` gets its result when
// it ends (to give back what it claimed), and `stalled` / `unstalled` bracket the wait for it
// (the registry skips the server meanwhile).
template <typename T>
class Visits {
 public:
  struct Hooks {
    std::function<void(const std::string& server)> stalled, unstalled;
    std::function<void(const std::string& server, T&& late)> late;  // may be empty
  };

  Visits(VisitPool& pool, Hooks hooks)
      : pool_(pool), shared_(std::make_shared<Shared>()) {
    shared_->hooks = std::move(hooks);
  }
  Visits(const Visits&) = delete;
  Visits& operator=(const Visits&) = delete;
  ~Visits() { abandon(); }

  // Starts fn() for `server`; returns its index.
  std::size_t start(std::string server, std::function<T()> fn) {
    std::size_t index;
    auto since = std::make_shared<ServerWait>(0);
    {
      std::lock_guard lock(shared_->mutex);
      index = shared_->slots.size();
      Slot& slot = shared_->slots.emplace_back();
      slot.server = std::move(server);
      slot.since = since;
      slot.made = std::chrono::steady_clock::now();
    }
    try {
      pool_.run([shared = shared_, index, since, fn = std::move(fn)] {
        std::optional<T> value;
        std::exception_ptr error;
        Pool::note_acquisitions(since.get());
        try {
          value.emplace(fn());
        } catch (...) {
          error = std::current_exception();
        }
        Pool::note_acquisitions(nullptr);
        finish(*shared, index, std::move(value), error);
      });
    } catch (...) {  // no thread to run it: it ended, failed
      finish(*shared_, index, std::nullopt, std::current_exception());
    }
    return index;
  }

  // Waits until every visit ended, or one waited `budget` on its server (or `not_begun` for a
  // connection or a thread). True when all ended.
  bool wait(std::chrono::nanoseconds budget,
            std::chrono::nanoseconds not_begun = kVisitNotBegun) {
    std::unique_lock lock(shared_->mutex);
    for (;;) {
      bool all = true;
      auto look_again = std::chrono::steady_clock::time_point::max();
      for (const Slot& s : shared_->slots) {
        if (s.done || s.abandoned) continue;
        all = false;
        if (waited_past(*s.since, s.made, budget, look_again, not_begun)) return false;
      }
      if (all) return true;
      shared_->done.wait_until(lock, look_again);
    }
  }

  // Gives up on the visits still running (the servers are reported stalled). Returns the
  // servers given up on.
  std::vector<std::string> abandon() {
    std::vector<std::string> servers;
    // Under the lock: a visit that ends meanwhile reports `unstalled` only after `stalled`.
    std::lock_guard lock(shared_->mutex);
    for (Slot& s : shared_->slots) {
      if (s.done || s.abandoned) continue;
      s.abandoned = true;
      servers.push_back(s.server);
      shared_->hooks.stalled(s.server);
    }
    return servers;
  }

  std::size_t size() const {
    std::lock_guard lock(shared_->mutex);
    return shared_->slots.size();
  }
  const std::string& server(std::size_t i) const { return shared_->slots[i].server; }
  // After wait_until: whether visit i ended (false: still running, or abandoned).
  bool done(std::size_t i) const {
    std::lock_guard lock(shared_->mutex);
    return shared_->slots[i].done && !shared_->slots[i].abandoned;
  }
  // The result of an ended visit; rethrows its exception.
  T take(std::size_t i) {
    std::lock_guard lock(shared_->mutex);
    Slot& s = shared_->slots[i];
    if (s.error) std::rethrow_exception(s.error);
    return std::move(*s.value);
  }

 private:
  struct Slot {
    std::string server;
    std::shared_ptr<ServerWait> since;
    std::chrono::steady_clock::time_point made;
    bool done = false, abandoned = false;
    std::optional<T> value;
    std::exception_ptr error;
  };
  struct Shared {
    mutable std::mutex mutex;
    std::condition_variable done;
    std::deque<Slot> slots;  // a deque: a running visit's slot stays where it is
    Hooks hooks;
  };

  // A visit ended: its result for the caller, or, when the caller gave up on it, for `late`.
  static void finish(Shared& shared, std::size_t index, std::optional<T> value,
                     std::exception_ptr error) {
    std::unique_lock lock(shared.mutex);
    Slot& slot = shared.slots[index];
    slot.done = true;
    if (!slot.abandoned) {
      slot.value = std::move(value);
      slot.error = error;
      lock.unlock();
      shared.done.notify_all();
      return;
    }
    const std::string name = slot.server;
    lock.unlock();
    try {
      if (value && shared.hooks.late) shared.hooks.late(name, std::move(*value));
    } catch (...) {  // best effort: what is not given back comes back when its lease ends
    }
    shared.hooks.unstalled(name);
  }

  VisitPool& pool_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace txmq::internal
