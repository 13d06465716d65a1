// Long polling: how a receiver waits for a message without hammering the database, and how a
// send wakes it at once.
//
// Why this design. The targets are a wake-up within milliseconds of a committed send, across
// processes, and a bounded cost for idle consumers (16 together under 50 statements a second).
// Polling cannot do both: 16 consumers in 16 processes polling within 50 statements a second
// poll each about every 300 ms. MariaDB has no LISTEN/NOTIFY, and a commit wakes only sessions
// blocked on the committing transaction's locks, which an idle consumer cannot be. What one
// session can do to another is interrupt its statement (KILL QUERY). So:
//
//  - Per client and topic, one *waiter* thread with its own connection watches for all of the
//    client's waiting receivers. It registers its connection id in txmq_waiters (a MEMORY table:
//    connection ids mean nothing after a server restart, when it starts empty), then runs
//        SELECT IF(EXISTS(SELECT 1 FROM <queue> WHERE visible_at <= NOW(6)), 2, SLEEP(1))
//    in a loop: one statement a second while idle, however many threads wait on it.
//  - After a sender's commit, the client's announcer thread runs
//        DELETE FROM txmq_waiters WHERE topic = ? ORDER BY registered_at LIMIT n RETURNING ...
//    (one cheap statement on a tiny in-memory table; it deletes nothing when nobody waits),
//    KILL QUERY on each connection returned, and puts their registrations back at the end of
//    the order: up to one waiter per message made claimable, the least recently woken first,
//    and two senders never pick the same one. The announcements of concurrent senders share
//    one such round every 5 ms.
//  - No wake-up is lost: the waiter registers *before* its EXISTS looks, and the sender reads
//    the registrations *after* its commit. Either the look sees the message, or the sender sees
//    the registration and interrupts the SLEEP. A KILL QUERY that lands between two of the
//    waiter's statements is dropped by the server (it only interrupts a running statement):
//    that is harmless before a look, which comes after the commit and sees the message, so the
//    waiter looks in every statement that sleeps, whether or not someone waits (a look that
//    finds something while nobody waits wakes no one), but a pause after a busy look (below),
//    which is at most 250 ms. And the sender puts the registration back itself: when the
//    waiter's own re-registration had to follow a KILL it never saw, the waiter used to sleep
//    through the next sends, unregistered, until a look found them (up to a second; 4 of
//    1,000 wake-ups under ASan).
//  - Messages that become claimable by time alone (a delay that falls due, a lease that runs
//    out, an exactly-once transaction rolled back) and sends nobody announced (an Outbox on the
//    application's connection, another program's INSERT) are seen by the next look: within a
//    second.
//  - Receivers skip their own claim while the waiter's last look found nothing and nothing was
//    announced since, so a loop of receive(wait) calls costs no statements while idle. A woken
//    receiver that gets a full batch wakes another, so one message wakes one receiver.
//  - KILL needs the same MySQL user or the CONNECTION ADMIN privilege. Without it the sender
//    warns once, and waiters still see new messages within a second.
//  - If the waiter cannot run its statement (server down), receivers fall back to claiming every
//    quarter second until it can.
//  - Subscribers (Client::subscribe: a callback instead of a blocked thread, for servers that
//    hold thousands of long polls) count as waiting receivers of the waiter: they keep it
//    looking, and take wake-ups as blocked threads do (after them). A woken subscriber leaves
//    the waiter's list and its wake function is called once, from the client's dispatcher
//    thread; it then claims and subscribes again. So 1,000 subscriptions cost no thread and no
//    connection each, only the waiter's one statement a second per topic and group.
#include "queue/waiting.h"

#include <fmt/format.h>

#include <algorithm>

#include "queue/operations.h"

namespace txmq::internal {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kLook = std::chrono::seconds(1);             // longest SLEEP between looks
constexpr auto kLinger = std::chrono::seconds(10);          // keep watching after the last receiver
constexpr auto kPollWhileUnhealthy = std::chrono::milliseconds(250);
constexpr auto kFirstPauseAfterReady = std::chrono::milliseconds(10);
// Also the longest a wake-up can wait when a sender's KILL lands just before a pause's SLEEP.
constexpr auto kMaxPauseAfterReady = std::chrono::milliseconds(250);
constexpr auto kReregister = std::chrono::seconds(10);      // renew the registration this often
constexpr unsigned kQueryInterrupted = 1317;  // ER_QUERY_INTERRUPTED: a sender's KILL QUERY
constexpr unsigned kNotOwner = 1095;          // ER_KILL_DENIED_ERROR
constexpr unsigned kNoSuchThread = 1094;      // ER_NO_SUCH_THREAD: the waiter went away
constexpr std::size_t kMaxWakesPerAnnounce = 64;
constexpr auto kAnnounceEvery = std::chrono::milliseconds(5);

double seconds(std::chrono::microseconds d) { return static_cast<double>(d.count()) / 1e6; }

}  // namespace

TopicWaiter::TopicWaiter(Pool& pool, std::string channel, std::vector<std::string> tables,
                         std::shared_ptr<WakeDispatcher> dispatcher)
    : pool_(pool),
      topic_(std::move(channel)),
      tables_(std::move(tables)),
      last_receiver_(SteadyClock::now()),
      dispatcher_(std::move(dispatcher)) {
  thread_ = std::thread([this] { run(); });
}

TopicWaiter::~TopicWaiter() {
  stop(false);
  if (thread_.joinable()) thread_.join();
}

bool TopicWaiter::enter() {
  std::lock_guard lock(mutex_);
  if (retiring_ || stopping_) return false;
  ++entered_;
  return true;
}

void TopicWaiter::leave() {
  std::lock_guard lock(mutex_);
  --entered_;
  last_receiver_ = SteadyClock::now();
}

bool TopicWaiter::worth_claiming() {
  std::lock_guard lock(mutex_);
  return !(healthy_ && known_empty_ && permits_ == 0);
}

bool TopicWaiter::await(SteadyClock::time_point deadline) {
  std::unique_lock lock(mutex_);
  ++waiting_;
  bool woken = false;
  for (;;) {
    if (permits_ > 0) {
      --permits_;
      woken = true;
      break;
    }
    if (stopping_ || retiring_) {
      woken = true;  // claim on our own rather than wait on a waiter that is going away
      break;
    }
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    if (!healthy_) {
      // Nobody watches: look ourselves every so often.
      const auto until = std::min(deadline, now + kPollWhileUnhealthy);
      woken_.wait_until(lock, until);
      if (permits_ == 0 && SteadyClock::now() >= until && until < deadline) {
        woken = true;
        break;
      }
      continue;
    }
    woken_.wait_until(lock, deadline);
  }
  --waiting_;
  last_receiver_ = SteadyClock::now();
  return woken;
}

void TopicWaiter::wake_locked(std::size_t n, Woken& woken) {
  ++generation_;
  known_empty_ = false;
  // Blocked receivers that hold no wake-up yet come first, then subscribers.
  const std::size_t idle_threads = waiting_ > permits_ ? waiting_ - permits_ : 0;
  const std::size_t for_threads = std::min(n, idle_threads);
  Woken subscribers = take_subscribers_locked(n - for_threads);
  const std::size_t left = n - for_threads - subscribers.size();
  for (auto& s : subscribers) woken.push_back(std::move(s));
  if (for_threads + left == 0) return;
  // More permits than waiting receivers would only cost empty claims later; one is kept for a
  // receiver or subscriber about to wait.
  permits_ = std::min(permits_ + for_threads + left, std::max<std::size_t>(waiting_, 1));
  if (for_threads + left == 1) {
    woken_.notify_one();
  } else {
    woken_.notify_all();
  }
}

TopicWaiter::Woken TopicWaiter::take_subscribers_locked(std::size_t n) {
  Woken taken;
  while (taken.size() < n && !subscribers_.empty()) {
    taken.push_back(std::move(subscribers_.front()));
    subscribers_.pop_front();
    taken.back()->listed = false;
    --entered_;
  }
  if (!taken.empty()) last_receiver_ = SteadyClock::now();
  return taken;
}

void TopicWaiter::dispatch(Woken woken, WakeDispatcher::Kind kind) {
  if (woken.empty()) return;
  const auto due = kind == WakeDispatcher::Kind::kWoken ? SteadyClock::now()
                                                        : SteadyClock::now() + kPollWhileUnhealthy;
  dispatcher_->post(std::move(woken), kind, due);
}

void TopicWaiter::notify(std::size_t n) {
  if (n == 0) return;
  Woken woken;
  {
    std::lock_guard lock(mutex_);
    wake_locked(n, woken);
  }
  dispatch(std::move(woken), WakeDispatcher::Kind::kWoken);
}

void TopicWaiter::subscribe(const std::shared_ptr<Subscriber>& subscriber) {
  Woken now;
  bool poll_later = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      --entered_;  // the client is going: its subscriptions are never woken
      return;
    }
    if (permits_ > waiting_ || retiring_) {
      // A wake-up nobody took (it came between this subscriber's last claim and now), or a
      // waiter going away: claim at once.
      if (permits_ > waiting_) --permits_;
      --entered_;
      last_receiver_ = SteadyClock::now();
      now.push_back(subscriber);
    } else {
      subscribers_.push_back(subscriber);
      subscriber->place = std::prev(subscribers_.end());
      subscriber->listed = true;
      poll_later = !healthy_;  // nobody watches (yet): poll unless the watch starts meanwhile
    }
  }
  dispatch(std::move(now), WakeDispatcher::Kind::kWoken);
  if (poll_later) dispatch({subscriber}, WakeDispatcher::Kind::kIfUnhealthy);
}

bool TopicWaiter::forget(Subscriber& subscriber) {
  std::lock_guard lock(mutex_);
  if (!subscriber.listed) return false;
  subscriber.listed = false;
  // The caller holds the subscriber: erasing does not destroy it under the lock.
  subscribers_.erase(subscriber.place);
  --entered_;
  last_receiver_ = SteadyClock::now();
  return true;
}

void TopicWaiter::release_subscribers() {
  Woken all;
  {
    std::lock_guard lock(mutex_);
    all = take_subscribers_locked(subscribers_.size());
  }
  dispatch(std::move(all), WakeDispatcher::Kind::kWoken);
}

bool TopicWaiter::healthy() {
  std::lock_guard lock(mutex_);
  return healthy_;
}

void TopicWaiter::saw_claimable() {
  Woken woken;
  {
    std::lock_guard lock(mutex_);
    if (entered_ == 0) {
      ++generation_;
      known_empty_ = false;
      return;
    }
    wake_locked(1, woken);
  }
  dispatch(std::move(woken), WakeDispatcher::Kind::kWoken);
}

void TopicWaiter::set_empty(std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  if (generation_ == generation) known_empty_ = true;
}

void TopicWaiter::stop(bool interrupted) {
  std::list<std::shared_ptr<Subscriber>> dropped;  // released after the lock
  std::lock_guard lock(mutex_);
  stopping_ = true;
  woken_.notify_all();
  if (!interrupted && connection_ != nullptr) connection_->cancel();
  // The client is going: its subscriptions are never woken.
  for (auto& s : subscribers_) s->listed = false;
  entered_ -= subscribers_.size();
  dropped.swap(subscribers_);
}

std::uint64_t TopicWaiter::connection_id() {
  std::lock_guard lock(mutex_);
  return connection_ != nullptr ? connection_id_ : 0;
}

void TopicWaiter::pause(std::chrono::milliseconds how_long) {
  std::unique_lock lock(mutex_);
  woken_.wait_for(lock, how_long, [this] { return stopping_; });
}

void TopicWaiter::run() {
  // One look covers the group's partitions.
  std::string any_claimable;
  for (const std::string& table : tables_) {
    if (!any_claimable.empty()) any_claimable += " OR ";
    any_claimable +=
        fmt::format("EXISTS(SELECT 1 FROM {} WHERE visible_at <= NOW(6))", table);
  }
  const std::string look_sql = fmt::format("SELECT IF({}, 2, SLEEP(?))", any_claimable);
  std::unique_ptr<Connection> c;
  bool registered = false;
  SteadyClock::time_point registered_at;
  auto pause_after_ready = std::chrono::duration_cast<std::chrono::microseconds>(
      kFirstPauseAfterReady);
  std::chrono::microseconds pause_next{0};  // a plain SLEEP before the next look
  int failures = 0;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      if (entered_ == 0 && SteadyClock::now() - last_receiver_ > kLinger) {
        retiring_ = true;
        woken_.notify_all();
        break;
      }
    }
    try {
      // A cluster's writer moved: watch where the senders now announce (KILL QUERY and the
      // MEMORY registrations are local to a node), registering again there.
      if (c && !pool_.is_current(*c)) {
        {
          std::lock_guard lock(mutex_);
          connection_ = nullptr;
        }
        c.reset();
      }
      if (!c) {
        auto fresh = pool_.connect();
        const std::uint64_t id = fresh->execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0);
        std::lock_guard lock(mutex_);
        if (stopping_) break;
        c = std::move(fresh);
        connection_ = c.get();
        connection_id_ = id;
        registered = false;
      }
      if (!registered || SteadyClock::now() - registered_at > kReregister) {
        c->execute(
            "REPLACE INTO txmq_waiters (connection_id, topic, registered_at) "
            "VALUES (CONNECTION_ID(), ?, NOW(6))",
            {std::string_view(topic_)});
        registered = true;
        registered_at = SteadyClock::now();
      }
      std::uint64_t generation;
      {
        std::lock_guard lock(mutex_);
        generation = generation_;
        healthy_ = true;
      }
      failures = 0;
      // Every statement that sleeps looks, but a pause: see the top of this file.
      const bool look = pause_next.count() == 0;
      Result r = look ? c->execute(look_sql, {seconds(kLook)})
                      : c->execute("SELECT SLEEP(?)", {seconds(pause_next)});
      const std::int64_t outcome = r.rows.at(0).i64(0);
      if (outcome == 2) {
        // Something looks claimable. Rows locked by an exactly-once transaction look so too:
        // pause between such looks, longer each time, so that they do not spin.
        saw_claimable();
        pause_next = pause_after_ready;
        pause_after_ready = std::min<std::chrono::microseconds>(pause_after_ready * 2,
                                                                kMaxPauseAfterReady);
      } else if (outcome == 1) {  // SLEEP interrupted without an error
        notify(1);
        registered = false;
        pause_next = {};
      } else {
        if (look) {
          set_empty(generation);
          pause_after_ready = kFirstPauseAfterReady;
        }
        pause_next = {};
      }
    } catch (const Error& e) {
      {
        std::lock_guard lock(mutex_);
        if (stopping_) break;
      }
      if (e.server_errno() == kQueryInterrupted) {
        notify(1);  // a sender's KILL QUERY: it deleted our registration
        registered = false;
        pause_next = {};
        continue;
      }
      const bool dropped = e.code() == Errc::kNotFound;
      Woken subscribers;
      {
        std::lock_guard lock(mutex_);
        healthy_ = false;
        known_empty_ = false;
        connection_ = nullptr;
        woken_.notify_all();
        if (dropped) {
          // The topic was dropped: let the receivers find out from their own claims (and
          // subscribers that come back get a new waiter).
          retiring_ = true;
          subscribers = take_subscribers_locked(subscribers_.size());
        } else {
          subscribers.assign(subscribers_.begin(), subscribers_.end());  // they stay listed
        }
      }
      c.reset();
      if (dropped) {
        dispatch(std::move(subscribers), WakeDispatcher::Kind::kWoken);
        break;
      }
      // Subscribers poll on their own, as blocked receivers do, until the watch runs again.
      dispatch(std::move(subscribers), WakeDispatcher::Kind::kIfUnhealthy);
      pause(std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(100 << std::min(failures, 6)), std::chrono::seconds(5)));
      ++failures;
    }
  }
  {
    std::lock_guard lock(mutex_);
    connection_ = nullptr;
    healthy_ = false;
  }
  if (c && !c->broken()) {
    try {
      c->execute("DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID()", {});
    } catch (const Error&) {
    }
  }
}

Waiters::~Waiters() {
  dispatcher_->stop();  // no wake function is called once the client is going
  {
    std::lock_guard lock(announce_mutex_);
    announcer_stop_ = true;  // it says what is pending, then ends
    announce_cv_.notify_all();
  }
  if (announcer_.joinable()) announcer_.join();
  std::vector<std::shared_ptr<TopicWaiter>> all;
  {
    std::lock_guard lock(mutex_);
    for (auto& [topic, waiter] : waiters_) all.push_back(waiter);
    for (auto& waiter : retired_) all.push_back(waiter);
    waiters_.clear();
    retired_.clear();
  }
  // Unregister and interrupt the running waiters from a pooled connection, so that they end
  // at once and leave no registration behind; cancel their connections if that fails.
  std::vector<std::uint64_t> ids;
  for (auto& waiter : all) {
    if (const std::uint64_t id = waiter->connection_id(); id != 0) ids.push_back(id);
  }
  bool interrupted = ids.empty();
  if (!ids.empty()) {
    try {
      Pool::Handle c = pool_.acquire();
      for (std::uint64_t id : ids) {
        c->execute("DELETE FROM txmq_waiters WHERE connection_id = ?", {id});
      }
      for (auto& waiter : all) waiter->stop(true);
      for (std::uint64_t id : ids) {
        try {
          c->query(fmt::format("KILL QUERY {}", id));
        } catch (const Error& e) {
          if (e.server_errno() != kNoSuchThread) throw;
        }
      }
      interrupted = true;
    } catch (const Error&) {
    }
  }
  for (auto& waiter : all) waiter->stop(interrupted);
  all.clear();  // joins the threads
}

std::shared_ptr<TopicWaiter> Waiters::enter(std::string_view topic,
                                            const std::vector<std::string>& tables) {
  std::shared_ptr<TopicWaiter> replaced;
  std::shared_ptr<TopicWaiter> waiter;
  {
    std::lock_guard lock(mutex_);
    auto it = waiters_.find(topic);
    if (it != waiters_.end()) {
      // A waiter that watches other tables (the topic gained partitions) retires.
      if (it->second->tables() == tables && it->second->enter()) return it->second;
      replaced = it->second;
      retired_.push_back(std::move(it->second));
      waiters_.erase(it);
    }
    // Threads of retired waiters have finished or are finishing: join them now.
    std::erase_if(retired_,
                  [](const std::shared_ptr<TopicWaiter>& w) { return w.use_count() == 1; });
    waiter = std::make_shared<TopicWaiter>(pool_, std::string(topic), tables, dispatcher_);
    waiter->enter();
    waiters_.emplace(std::string(topic), waiter);
  }
  // Its subscribers claim and subscribe again, to the new waiter.
  if (replaced) replaced->release_subscribers();
  return waiter;
}

std::shared_ptr<Subscriber> Waiters::subscribe(std::string_view channel,
                                               const std::vector<std::string>& tables,
                                               std::function<void()> wake) {
  std::shared_ptr<TopicWaiter> waiter = enter(channel, tables);
  std::shared_ptr<Subscriber> subscriber;
  try {
    subscriber = std::make_shared<Subscriber>(std::move(wake), waiter);
  } catch (...) {
    waiter->leave();
    throw;
  }
  waiter->subscribe(subscriber);
  return subscriber;
}

std::shared_ptr<TopicWaiter> Waiters::find(std::string_view topic) {
  std::lock_guard lock(mutex_);
  auto it = waiters_.find(topic);
  return it == waiters_.end() ? nullptr : it->second;
}

void Waiters::announce(std::string_view topic, std::size_t count) {
  if (count == 0) return;
  if (auto local = find(topic)) local->notify(count);
  std::lock_guard lock(announce_mutex_);
  if (announcer_stop_) return;
  std::size_t& pending = pending_[std::string(topic)];
  pending = std::min(pending + count, kMaxWakesPerAnnounce);
  if (!announcer_.joinable()) announcer_ = std::thread([this] { run_announcer(); });
  // Wake the thread only when it waits for work: a wake-up per send cost a tenth of the send
  // rate at 16 threads on 2 cores.
  if (announcer_idle_) {
    announcer_idle_ = false;
    announce_cv_.notify_one();
  }
}

// Why a thread: every send paid a statement for its announcement, which cost a fifth of the
// send rate at 4 threads and 40% at 16 (txmq bench). Coalesced here, concurrent senders share
// one statement every 5 ms, and a send returns without waiting for it; the first
// announcement after a quiet spell goes out at once.
void Waiters::run_announcer() {
  std::unique_ptr<Connection> c;
  SteadyClock::time_point last_round;
  for (;;) {
    std::map<std::string, std::size_t, std::less<>> round;
    {
      std::unique_lock lock(announce_mutex_);
      announcer_idle_ = true;
      announce_cv_.wait(lock, [this] { return announcer_stop_ || !pending_.empty(); });
      announcer_idle_ = false;
      if (pending_.empty()) break;  // stopping, nothing left to say
      const auto next = last_round + kAnnounceEvery;
      if (!announcer_stop_ && SteadyClock::now() < next) {
        announce_cv_.wait_until(lock, next, [this] { return announcer_stop_; });
      }
      round.swap(pending_);
    }
    last_round = SteadyClock::now();
    try {
      if (c && !pool_.is_current(*c)) c.reset();  // the cluster's writer moved
      if (!c) c = pool_.connect();
      for (const auto& [topic, count] : round) wake_waiters(*c, topic, count);
    } catch (const Error&) {
      c.reset();  // the waiters see these messages within a second anyway
    }
  }
}

void Waiters::wake_waiters(Connection& c, const std::string& topic, std::size_t count) {
  // A registration whose connection is gone (its process was killed) wastes a wake-up: take
  // the next one instead, a few rounds at most.
  std::size_t wanted = count;
  for (int round = 0; round < 4 && wanted > 0; ++round) {
    Result r = c.execute(
        "DELETE FROM txmq_waiters WHERE topic = ? ORDER BY registered_at LIMIT ? "
        "RETURNING connection_id",
        {std::string_view(topic), static_cast<std::int64_t>(wanted)});
    std::size_t gone = 0;
    std::vector<Param> woken;
    for (const Row& row : r.rows) {
      try {
        // An id the server gave out, not user input.
        c.query(fmt::format("KILL QUERY {}", row.u64(0)));
        woken.push_back(row.u64(0));
      } catch (const Error& e) {
        if (e.server_errno() == kNoSuchThread) {
          ++gone;
        } else if (e.server_errno() == kNotOwner) {
          if (warn) {
            warn(fmt::format("cannot wake consumers waiting on topic '{}' that connect as another "
                             "MySQL user (KILL QUERY needs the CONNECTION ADMIN privilege); they "
                             "will see new messages within a second",
                             topic));
          }
        } else {
          throw;
        }
      }
    }
    if (!woken.empty()) {
      // Back at the end of the order: a KILL that lands between two of the waiter's statements
      // is dropped, and a waiter that does not know it was woken must stay registered. (IGNORE:
      // the waiter may have registered again already.)
      std::string rows;
      std::vector<Param> params;
      for (const Param& id : woken) {
        rows += rows.empty() ? "(?, ?, NOW(6))" : ", (?, ?, NOW(6))";
        params.push_back(id);
        params.push_back(std::string_view(topic));
      }
      c.execute("INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at) VALUES " +
                    rows,
                params);
    }
    if (r.rows.size() < wanted) break;  // nobody else waits
    wanted = gone;
  }
}

void WakeDispatcher::post(std::vector<std::shared_ptr<Subscriber>> subscribers, Kind kind,
                          SteadyClock::time_point due) {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  for (auto& s : subscribers) due_.emplace(due, Entry{std::move(s), kind});
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  changed_.notify_one();
}

void WakeDispatcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    changed_.notify_one();
  }
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    // Only when a wake function destroys its client, which client.h forbids: rather than
    // deadlock on a self-join, let the thread go.
    thread_.detach();
  } else {
    thread_.join();
  }
  std::lock_guard lock(mutex_);
  due_.clear();
}

void WakeDispatcher::run() {
  std::unique_lock lock(mutex_);
  std::vector<Entry> ready;
  for (;;) {
    if (stopping_) break;
    if (due_.empty()) {
      changed_.wait(lock);
      continue;
    }
    const auto now = SteadyClock::now();
    if (due_.begin()->first > now) {
      changed_.wait_until(lock, due_.begin()->first);
      continue;
    }
    const auto end = due_.upper_bound(now);
    for (auto it = due_.begin(); it != end; ++it) ready.push_back(std::move(it->second));
    due_.erase(due_.begin(), end);
    lock.unlock();
    for (Entry& entry : ready) {
      Subscriber& s = *entry.subscriber;
      if (entry.kind == Kind::kWoken) {
        // A cancelled subscriber was given a wake-up that another receiver should have.
        if (!s.fire() && s.cancelled()) s.waiter->notify(1);
      } else if (!s.waiter->healthy() && s.waiter->forget(s)) {
        s.fire();
      }
    }
    ready.clear();  // the last references may go here, outside the lock
    lock.lock();
  }
}

std::shared_ptr<Subscriber> subscribe(QueueContext& q, std::string_view topic,
                                      std::string_view group, std::function<void()> wake) {
  if (!wake) throw Error(Errc::kInvalidArgument, "subscribe needs a wake function");
  const TopicLayout layout = q.catalog.layout(topic);
  // All partitions of the group: the same waiter as receive's without a partition choice.
  std::vector<Unit> units = claim_units(layout, layout.group(group), {});
  // A spread topic with no partition on this server (any more): the channel still wakes.
  if (units.empty()) units.push_back(unit_of(topic, layout.group(group).number, 0));
  return q.waiters.subscribe(units.front().channel, queue_tables_of(units), std::move(wake));
}

void announce(QueueContext& q, const TopicLayout& layout, std::size_t count) {
  if (count == 0) return;
  // Every group got the messages.
  for (const GroupEntry& g : layout.groups) {
    q.waiters.announce(wait_channel(layout.info.name, g.number), count);
  }
}

void announce(QueueContext& q, std::string_view topic, std::size_t count) {
  if (count == 0) return;
  try {
    announce(q, q.catalog.layout(topic), count);
  } catch (const Error&) {
    // The topic went, or the catalog cannot be read now: waiters see the messages within 1 s.
  }
}

void made_claimable(QueueContext& q, const Unit& unit, const std::vector<std::uint64_t>& ids) {
  if (ids.empty()) return;
  q.hints.lower(unit.tables.queue, *std::min_element(ids.begin(), ids.end()));
  q.waiters.announce(unit.channel, ids.size());
}

}  // namespace txmq::internal

namespace txmq {

bool Client::Subscription::Impl::fire() {
  std::function<void()> call;
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kArmed) return false;
    state_ = State::kCalling;
    caller_ = std::this_thread::get_id();
    call.swap(wake_);
  }
  try {
    call();
  } catch (...) {
    // wake must not throw (client.h); one that does must not stop the calls of the others.
  }
  call = nullptr;  // its captures go before cancel() may return
  {
    std::lock_guard lock(mutex_);
    state_ = State::kCalled;
  }
  called_.notify_all();
  return true;
}

void Client::Subscription::Impl::cancel() {
  std::function<void()> never_called;  // its captures go after the lock is released
  std::unique_lock lock(mutex_);
  // A call on this thread is the wake function destroying its own subscription: no waiting.
  if (state_ == State::kCalling && caller_ != std::this_thread::get_id()) {
    called_.wait(lock, [this] { return state_ != State::kCalling; });
  }
  if (state_ == State::kArmed) {
    state_ = State::kCancelled;
    never_called.swap(wake_);
  }
}

bool Client::Subscription::Impl::cancelled() {
  std::lock_guard lock(mutex_);
  return state_ == State::kCancelled;
}

Client::Subscription::Subscription(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::Subscription::Subscription(Subscription&&) noexcept = default;

Client::Subscription& Client::Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    Subscription ended(std::move(*this));
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Client::Subscription::~Subscription() {
  if (!impl_) return;
  impl_->cancel();
  if (impl_->waiter) impl_->waiter->forget(*impl_);
  for (const std::shared_ptr<Impl>& part : impl_->parts) {
    part->cancel();
    part->waiter->forget(*part);
  }
}

}  // namespace txmq
