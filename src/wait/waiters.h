// wait: long polling: how receivers wait for messages and how a commit wakes them (waiters.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "db/connection.h"
#include "db/dsn.h"
#include "wait/subscriber.h"

namespace txmq::internal {

class Watch;
class Pool;

// Calls subscribers' wake functions on a thread of the client's: right away for those a waiter
// woke, or after a pause for those whose waiter cannot watch (they poll, as await() does). One
// per client, its thread started at the first subscription; waiters share it.
class WakeDispatcher {
 public:
  enum class Kind {
    kWoken,        // call now; if the subscription was cancelled, pass the wake-up on
    kIfUnhealthy,  // call if the subscriber's waiter still cannot watch when due
  };
  WakeDispatcher() = default;
  ~WakeDispatcher() { stop(); }
  WakeDispatcher(const WakeDispatcher&) = delete;
  WakeDispatcher& operator=(const WakeDispatcher&) = delete;

  void post(std::vector<std::shared_ptr<Subscriber>> subscribers, Kind kind,
            std::chrono::steady_clock::time_point due);
  // Joins the thread; posts after it are dropped.
  void stop();

 private:
  struct Entry {
    std::shared_ptr<Subscriber> subscriber;
    Kind kind;
  };
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::multimap<std::chrono::steady_clock::time_point, Entry> due_;
  bool stopping_ = false;
  std::thread thread_;
};

// One queue that a channel's consumers claim from: its table and, for a queue in shared storage,
// the condition that picks its rows ("qid = N AND "; empty for a table of its own).
struct WatchedQueue {
  std::string table;
  std::string scope;
  bool operator==(const WatchedQueue&) const = default;
};

// Long polling (waiters.cc explains the design). One TopicWaiter per channel (a topic's group)
// and client keeps the books of the client's receivers of that channel that are waiting; a
// Watch, shared by up to a few hundred channels, looks at the database for them.
class TopicWaiter {
 public:
  // Waits on `tables` (a group's queue tables) for the consumers registered under `channel`;
  // subscribers' wake functions are called through `dispatcher`.
  TopicWaiter(std::string channel, std::vector<WatchedQueue> tables,
              std::shared_ptr<WakeDispatcher> dispatcher);
  TopicWaiter(const TopicWaiter&) = delete;
  TopicWaiter& operator=(const TopicWaiter&) = delete;

  // Counts a receiver in; false when the waiter is retiring (ask Waiters for a new one).
  bool enter();
  void leave();
  // Whether a receiver about to wait should first try a claim: false only while the watch's
  // last look found nothing claimable here and nothing was announced since.
  bool worth_claiming();
  // Blocks until this receiver is woken (true: claim now) or the deadline passes (false).
  bool await(std::chrono::steady_clock::time_point deadline);
  // Wakes up to n waiting receivers, blocked threads first, then subscribers in the order they
  // subscribed (messages were announced, or a receiver got a full batch and there may be more).
  void notify(std::size_t n);

  // Client::subscribe. REQUIRES: enter() counted the subscriber in; it stays counted until it
  // is woken or forgotten. A wake-up that no receiver took yet wakes it at once.
  void subscribe(const std::shared_ptr<Subscriber>& subscriber);
  // Takes the subscriber off the list (it was cancelled, or is woken by the dispatcher); false
  // when it was no longer on it.
  bool forget(Subscriber& subscriber);
  // Wakes every subscriber now (the waiter is replaced: they subscribe to the new one).
  void release_subscribers();
  bool healthy();
  // The client is going: subscribers are never woken, blocked receivers return.
  void stop();
  const std::string& channel() const { return channel_; }
  const std::vector<WatchedQueue>& tables() const { return tables_; }

  // For its watch. Retires the waiter when it had no receiver for `linger`, or was retired
  // (replaced); true when it is retired.
  bool retire_if_idle(std::chrono::steady_clock::duration linger);
  void retire();
  // The watch is registered and about to look: receivers rely on it. Returns the count of
  // wake-ups so far, for set_empty.
  std::uint64_t watching();
  // A look that started after wake-up number `generation` found nothing claimable.
  void set_empty(std::uint64_t generation);
  // A look found something claimable: wakes one waiting receiver; with none waiting, only
  // stops receivers from skipping their claim (a permit would wake the next one for what a
  // receiver woken before is about to claim).
  void saw_claimable();
  // The watch cannot look: `dropped` when the channel's tables are gone (the waiter retires and
  // its receivers find out from their own claims), else receivers poll until it can.
  void watch_failed(bool dropped);

  // The watch it was put on; only Waiters reads or writes it, under its mutex.
  Watch* watch = nullptr;

 private:
  using Woken = std::vector<std::shared_ptr<Subscriber>>;
  // Hands out n wake-ups; the subscribers in `woken` are off the list, to be dispatched.
  void wake_locked(std::size_t n, Woken& woken);
  Woken take_subscribers_locked(std::size_t n);
  void dispatch(Woken woken, WakeDispatcher::Kind kind);

  const std::string channel_;
  const std::vector<WatchedQueue> tables_;
  std::mutex mutex_;
  std::condition_variable woken_;
  std::size_t waiting_ = 0;   // receivers in await()
  std::size_t entered_ = 0;   // receivers between enter() and leave(), and subscribers
  std::size_t permits_ = 0;   // wake-ups not yet taken by a receiver
  std::uint64_t generation_ = 0;  // counts wake-ups, so a look that started before one is void
  bool known_empty_ = false;
  bool healthy_ = false;      // the watch looks for it; else receivers poll on their own
  bool stopping_ = false;
  bool retiring_ = false;
  std::chrono::steady_clock::time_point last_receiver_;
  // Subscribers not yet woken, oldest first; each knows its place (Subscriber::place).
  std::list<std::shared_ptr<Subscriber>> subscribers_;
  const std::shared_ptr<WakeDispatcher> dispatcher_;
};

// One thread and one database connection that look for claimable messages on behalf of a set
// of channels (their TopicWaiters), registered once per channel in txmq_waiters.
class Watch {
 public:
  // `poke` interrupts the watch's look from another connection (a channel joined).
  Watch(Pool& pool, std::shared_ptr<TopicWaiter> first,
        std::function<void(std::uint64_t connection_id)> poke);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Adds a channel; a waiter for a channel the watch has replaces the one it has. False when
  // the watch is ending (it had no channel left).
  bool add(std::shared_ptr<TopicWaiter> waiter);
  std::size_t channels();
  bool ended();
  // Stops the thread: `interrupted` when the caller has unregistered and KILLed the running
  // statement itself (then the connection stays usable); else its connection is cancelled.
  void stop(bool interrupted);
  // The watch connection's id on the server; 0 while it has none.
  std::uint64_t connection_id();

 private:
  void run();
  void pause(std::chrono::milliseconds how_long);

  Pool& pool_;  // its connect(): the node the senders use
  const std::function<void(std::uint64_t)> poke_;
  std::mutex mutex_;
  std::condition_variable stopped_;
  std::vector<std::shared_ptr<TopicWaiter>> joining_;  // added, not looked for yet
  std::size_t channels_ = 0;  // watched and joining
  bool stopping_ = false;
  bool ending_ = false;
  bool looking_ = false;  // in its look, which sleeps: a join must interrupt it
  Connection* connection_ = nullptr;  // the running watch connection, for stop() to cancel
  std::uint64_t connection_id_ = 0;
  std::thread thread_;
};

// The client's waiters, by channel, and the watches that look for them.
class Waiters {
 public:
  explicit Waiters(Pool& pool) : pool_(pool), dispatcher_(std::make_shared<WakeDispatcher>()) {}
  ~Waiters();

  // A running waiter for the topic, with the caller counted in (leave() when done).
  std::shared_ptr<TopicWaiter> enter(std::string_view channel,
                                     const std::vector<WatchedQueue>& tables);
  // The topic's waiter if one runs (for announcements made by this client).
  std::shared_ptr<TopicWaiter> find(std::string_view topic);
  // Client::subscribe: the channel's waiter with the subscriber on its list.
  std::shared_ptr<Subscriber> subscribe(std::string_view channel,
                                        const std::vector<WatchedQueue>& tables,
                                        std::function<void()> wake);
  // Wakes up to `count` of the topic's waiting consumers: this client's at once, those of every
  // client (other processes too) from the announcer thread, which coalesces the announcements
  // of concurrent senders into one statement at most every 5 ms.
  void announce(std::string_view topic, std::size_t count);

  // Receives warnings (KILL refused); set by the client.
  std::function<void(std::string_view)> warn;

 private:
  // Puts the waiter on a watch: `preferred` (its predecessor's) if it still runs, else the
  // least loaded, or a new one while there are few.
  void place_locked(const std::shared_ptr<TopicWaiter>& waiter, const Watch* preferred);
  // Interrupts a watch's statement from the announcer thread (a channel joined it).
  void poke(std::uint64_t connection_id);
  void run_announcer();
  void wake_waiters(Connection& c, std::map<std::string, std::size_t, std::less<>> round,
                    std::set<std::uint64_t> pokes);

  Pool& pool_;
  const std::shared_ptr<WakeDispatcher> dispatcher_;
  std::mutex announce_mutex_;
  std::condition_variable announce_cv_;
  std::map<std::string, std::size_t, std::less<>> pending_;
  std::set<std::uint64_t> pokes_;
  bool announcer_stop_ = false;
  bool announcer_idle_ = false;  // waiting for work (not coalescing): announce() must notify
  std::thread announcer_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<TopicWaiter>, std::less<>> waiters_;
  std::vector<std::shared_ptr<Watch>> watches_;
};

}  // namespace txmq::internal
