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
//  - Per client, a few *watches* (a thread with its own connection each, at most kMaxWatches)
//    look for all of the client's waiting receivers, whatever their channel (a topic's group).
//    A watch registers one row per channel it watches in txmq_waiters (connection id, channel;
//    a MEMORY table: connection ids mean nothing after a server restart, when it starts empty),
//    then runs
//        SELECT IF(EXISTS(<claimable in channel 1>) OR EXISTS(<channel 2>) ..., 2, SLEEP(1))
//    in a loop: one statement a second while idle, however many channels and threads wait on
//    it. Why shared: a thread and a connection per channel cost a server that long-polls 1,000
//    queues 1,000 connections, past max_connections.
//  - When that look returns 2 or is interrupted, a pass of statements
//        SELECT CONCAT_WS(',', IF(EXISTS(<channel 1>), '0', NULL), IF(..., '1', NULL), ...)
//    (32 channels each) says which channels have something claimable: only their receivers are
//    woken, the others are known empty. Short statements, and a pass that a KILL restarts from
//    where it was, because KILLs come every 5 ms while senders send: one statement for hundreds
//    of channels could be interrupted every time, and wake nobody.
//  - After a sender's commit, the client's announcer thread runs
//        DELETE FROM txmq_waiters WHERE topic = ? ORDER BY registered_at LIMIT n RETURNING ...
//    (one cheap statement on a tiny in-memory table; it deletes nothing when nobody waits),
//    KILL QUERY once on each connection returned, however many of its channels were announced,
//    and puts their registrations back at the end of the order: up to one watch per message
//    made claimable, the least recently woken first, and two senders never pick the same
//    registration (on MySQL, which has no RETURNING, a SELECT and a DELETE: two may, and a
//    wake-up is spent twice; take_registrations). The announcements of concurrent senders
//    share one such round every 5 ms.
//  - No wake-up is lost: a watch registers a channel *before* a look covers it, and the sender
//    reads the registrations *after* its commit. Either the look sees the message, or the sender
//    sees the registration and interrupts the watch. Whatever statement a KILL interrupts (the
//    SLEEP, or the statements that handle an earlier KILL: a second sender, on another channel,
//    may kill the watch meanwhile), the watch then registers its channels again and runs a
//    pass, which starts after the sender's commit and so sees its message, whichever channel
//    it is on. A KILL QUERY that lands between two statements is dropped by the server:
//    harmless before a look, which comes after the commit, so every statement that sleeps looks
//    at every channel, but at hot ones (below), which are checked again within 250 ms. And
//    the sender puts the registration back itself: a watch whose own re-registration would have
//    to follow a KILL it never saw would otherwise sleep through the next sends, unregistered,
//    until a look found them (up to a second).
//  - A send by the SQL interface's routine (txmq_send, docs/design/sql-calls.md) runs inside
//    its caller's transaction and can do nothing after the caller's COMMIT: it reads the
//    channel's oldest registrations (it takes none) and KILLs those watches *before* the
//    commit, so the pass after that KILL finds nothing. So after a KILL a *fence* comes before
//    the look: a statement that, when nothing is claimable, reads with a shared lock the first
//    row above the highest committed id of each channel's tables (pending()). That read waits
//    on the uncommitted message's row lock and returns at the sender's COMMIT (3: a pass wakes
//    the channel's receivers, a millisecond after the commit) or ROLLBACK (0: the look sleeps
//    as any other); with nothing pending it costs two index lookups per table. The watch's
//    session waits at most a second on a lock (kFenceLockWaitSeconds): a sender that stays
//    open fails the fence after a second, as long as a look's SLEEP, and the watch fences
//    again, for kFenceFor at most. So an open sender costs no more statements than an idle
//    watch and holds up the watch's other channels at most a second: a library send KILLs the
//    fence after its commit as it KILLs a SLEEP; what waits is only a second routine's COMMIT
//    behind the open one (seen at the timeout). One fence is owed per KILL (at least two:
//    KILLs that land in one statement count once), and one that finds nothing pending pays
//    them all: so a library send's KILL costs one statement more, or a fence and a pass more
//    when its fence finds another send in flight. A pause leaves hot channels out of its fence
//    as out of its look (they are fenced after their pass). The fence is a statement of its
//    own, prepared at its first use: MariaDB goes on with a statement after a lock wait times
//    out in it (a SLEEP would run first), and optimises every subquery of a statement at each
//    execution, even those an IF skips. Not fenced: an uncommitted message below a committed
//    one (two routines' senders, the later committing first), and a routine's KILL that lands
//    between two statements; the next look sees them, within a second.
//  - Channels join a watch when a receiver first waits on them, and leave it 10 s after their
//    last receiver; the statements are prepared again only then. Until a watch registered and
//    looks for a new channel, its receivers poll every quarter second; the announcer interrupts
//    the watch's look (only its look, which the watch does not start while a channel waits to
//    join: a burst of joins would interrupt every rebuild), so that this lasts milliseconds.
//    A channel that leaves deletes its row; a row a sender put back meanwhile is deleted at the
//    next renewal (10 s); until then it may cost another process's receiver a wake-up, which
//    its next look makes up for.
//  - Rows locked by an exactly-once transaction look claimable, and so do messages nobody is
//    waiting for on a channel that lingers: after a pass found such *hot* channels, the next
//    look leaves them out (a parameter per channel) and sleeps only 10 ms, doubling up to
//    250 ms, and the pass after it checks them again, so that they neither spin nor keep the
//    watch from looking at the other channels.
//  - Messages that become claimable by time alone (a delay that falls due, a lease that runs
//    out, an exactly-once transaction rolled back) and sends nobody announced (an Outbox on the
//    application's connection, another program's INSERT) are seen by the next look: within a
//    second.
//  - Receivers skip their own claim while the watch's last look found nothing on their channel
//    and nothing was announced since, so a loop of receive(wait) calls costs no statements while
//    idle. A woken receiver that gets a full batch wakes another, so one message wakes one
//    receiver.
//  - On MariaDB a look does not SLEEP: it waits for a user lock (GET_LOCK) that a second
//    connection of the watch, its *holder*, keeps for as long as the watch lives. SLEEP() is not
//    safe to KILL there: every SLEEP of the server waits under one shared mutex, and a KILL
//    QUERY that lands as a sleep times out meets the sleeper holding that mutex while it waits
//    for the killer's lock; the killer retries for two seconds (THD::awake), and meanwhile no
//    KILL returns and no SLEEP of the server ends (measured: 4 KILLs of 9,532 took 2.0 s against
//    SLEEP(0.01) loops; none of 12,279 against GET_LOCK waits, whose wait mutex is each
//    session's own). GET_LOCK's wait ends at its timeout (0), at a KILL (NULL), or when it gets
//    the lock because the holder's connection went (the watch lets go and starts another
//    holder). A wait in the statement's select list, as SLEEP's, not in a subquery: a locking
//    read in a constant subquery, tried first, crashed MariaDB 10.11 at a KILL during
//    optimisation. MySQL's KILL takes the sleeper's mutex without that race: SLEEP stays, and
//    so where GET_LOCK is refused (1235: MariaDB Galera builds that forbid it).
//  - KILL needs the same MySQL user or the CONNECTION ADMIN privilege. Without it the sender
//    warns once, and watches still see new messages within a second.
//  - If a watch cannot run its statements (server down), the receivers of its channels fall back
//    to claiming every quarter second until it can. A dropped topic fails the whole look (a
//    table is missing): the watch finds the channels whose tables are gone and retires only
//    them.
//  - Subscribers (Client::subscribe: a callback instead of a blocked thread, for servers that
//    hold thousands of long polls) count as waiting receivers of their channel's waiter: they
//    keep it watched, and take wake-ups as blocked threads do (after them). A woken subscriber
//    leaves the waiter's list and its wake function is called once, from the client's
//    dispatcher thread; it then claims and subscribes again. So 1,000 subscriptions on 1,000
//    topics cost no thread and no connection each: a client runs at most kMaxWatches watches.
#include "wait/waiters.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <numeric>
#include <utility>

#include "db/pool.h"
#include "db/sql.h"
#include "txmq/error.h"

namespace txmq::internal {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kLook = std::chrono::seconds(1);             // longest SLEEP between looks
constexpr auto kLinger = std::chrono::seconds(10);          // keep watching after the last receiver
constexpr auto kPollWhileUnhealthy = std::chrono::milliseconds(250);
constexpr auto kFirstPauseAfterReady = std::chrono::milliseconds(10);
// Also the longest a wake-up can wait when a sender's KILL lands just before a pause's SLEEP.
constexpr auto kMaxPauseAfterReady = std::chrono::milliseconds(250);
constexpr auto kReregister = std::chrono::seconds(10);      // renew the registrations this often
// A client's watches: a new channel starts a watch while there are fewer than kMaxWatches and
// all have kChannelsPerWatch, else joins the least loaded (each costs a statement a second).
constexpr std::size_t kMaxWatches = 4;
constexpr std::size_t kChannelsPerWatch = 64;
// Channels per statement that finds which are claimable: short, so that a KILL seldom lands in
// one (each channel costs about 40 us).
constexpr std::size_t kChannelsPerCheck = 32;
constexpr unsigned kQueryInterrupted = 1317;  // ER_QUERY_INTERRUPTED: a sender's KILL QUERY
constexpr unsigned kNotOwner = 1095;          // ER_KILL_DENIED_ERROR
constexpr unsigned kNoSuchThread = 1094;      // ER_NO_SUCH_THREAD: the watch went away
constexpr unsigned kLockWaitTimeout = 1205;   // ER_LOCK_WAIT_TIMEOUT: a fence's sender is still open
constexpr unsigned kLockDeadlock = 1213;      // ER_LOCK_DEADLOCK: a fence chosen as the victim
constexpr unsigned kNotSupportedYet = 1235;   // GET_LOCK refused (MariaDB Galera, some builds)
// ER_CHECKREAD: MariaDB 11.6+ (innodb_snapshot_isolation, on by default) ends a fence that waited
// for a sender with this at the sender's COMMIT, where older servers return the row: committed.
constexpr unsigned kRecordChanged = 1020;
// A fenced look waits at most this long on one uncommitted message, and is then repeated (a
// look's SLEEP is as long): an open sender never keeps the watch from looking at its channels.
constexpr int kFenceLockWaitSeconds = 1;
// Fenced looks owed after KILLs: one per KILL, at least two (KILLs that land in one statement
// count once), at most kMaxFences; none are owed once fencing lasted kFenceFor.
constexpr int kMaxFences = 8;
constexpr auto kFenceFor = std::chrono::seconds(30);
constexpr std::size_t kMaxWakesPerAnnounce = 64;
constexpr auto kAnnounceEvery = std::chrono::milliseconds(5);

double seconds(std::chrono::microseconds d) { return static_cast<double>(d.count()) / 1e6; }

// Whether any of a channel's tables holds a claimable message.
std::string claimable(const std::vector<WatchedQueue>& tables) {
  if (tables.empty()) return "FALSE";  // never a syntax error that stops the whole watch
  std::string any;
  for (const WatchedQueue& t : tables) {
    if (!any.empty()) any += " OR ";
    any += fmt::format("EXISTS(SELECT 1 FROM {} WHERE {}visible_at <= NOW(6))", t.table, t.scope);
  }
  return any;
}

// The first message above the highest committed id in any of a channel's tables, read with a
// shared lock in READ COMMITTED (no gap locks, so no sender waits on it): it waits on the row
// lock of a message inserted but not committed yet and returns at the sender's COMMIT (its id)
// or ROLLBACK (NULL); with nothing pending it returns at once.
std::string pending(const std::vector<WatchedQueue>& tables) {
  if (tables.empty()) return "NULL";
  std::string first;
  for (const WatchedQueue& t : tables) {
    if (!first.empty()) first += ", ";
    first += fmt::format(
        "(SELECT id FROM {0}{3} WHERE {1}id > (SELECT COALESCE(MAX(id), 0) FROM {0}{2}) ORDER BY "
        "id LIMIT 1 LOCK IN SHARE MODE)",
        t.table, t.scope,
        t.scope.empty() ? std::string() : " WHERE " + t.scope.substr(0, t.scope.size() - 5),
        // A shared table: its primary key from (qid, MAX), never KEY ids over other queues' rows
        // (whose uncommitted inserts it would wait for).
        t.scope.empty() ? "" : " FORCE INDEX (PRIMARY)");
  }
  return tables.size() == 1 ? first : "COALESCE(" + first + ")";
}

// What a look waits on, on MariaDB (see the top of this file): a user lock that a connection of
// its own keeps, named after that connection, so that no two holders of the server share one.
class Holder {
 public:
  // Takes the lock on a new connection of `pool`; nullptr where the server refuses GET_LOCK.
  static std::unique_ptr<Holder> start(Pool& pool) {
    auto holder = std::unique_ptr<Holder>(new Holder(pool.connect()));
    const std::uint64_t id = holder->c_->execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0);
    holder->name_ = fmt::format("txmq.wait.{}", id);
    try {
      Result r = holder->c_->execute("SELECT GET_LOCK(?, 0)", {std::string_view(holder->name_)});
      if (r.rows.at(0).i64(0) != 1) return nullptr;  // held already: never, ids are unique
    } catch (const Error& e) {
      if (e.server_errno() == kNotSupportedYet) return nullptr;
      throw;
    }
    return holder;
  }
  const std::string& name() const { return name_; }
  Connection& connection() { return *c_; }

 private:
  explicit Holder(std::unique_ptr<Connection> c) : c_(std::move(c)) {}

  std::unique_ptr<Connection> c_;
  std::string name_;
};

// A look: 2 when any channel has something claimable, else it waits: 0 when the wait ran out,
// 1 when a KILL cut it short, and with a holder 5 when the lock was had (the holder is gone).
std::string look_sql(const std::string& any, bool holder) {
  if (!holder) return fmt::format("SELECT IF({}, 2, SLEEP(?))", any);
  return fmt::format("SELECT IF({}, 2, CASE GET_LOCK(?, ?) WHEN 0 THEN 0 WHEN 1 THEN 5 ELSE 1 END)",
                     any);
}

}  // namespace

TopicWaiter::TopicWaiter(std::string channel, std::vector<WatchedQueue> tables,
                         std::shared_ptr<WakeDispatcher> dispatcher)
    : channel_(std::move(channel)),
      tables_(std::move(tables)),
      last_receiver_(SteadyClock::now()),
      dispatcher_(std::move(dispatcher)) {}

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

std::uint64_t TopicWaiter::watching() {
  std::lock_guard lock(mutex_);
  healthy_ = true;
  return generation_;
}

bool TopicWaiter::retire_if_idle(SteadyClock::duration linger) {
  std::lock_guard lock(mutex_);
  if (!retiring_ && (entered_ != 0 || SteadyClock::now() - last_receiver_ <= linger)) {
    return false;
  }
  retiring_ = true;
  healthy_ = false;
  woken_.notify_all();
  return true;
}

void TopicWaiter::retire() {
  std::lock_guard lock(mutex_);
  retiring_ = true;
  healthy_ = false;
  woken_.notify_all();
}

void TopicWaiter::watch_failed(bool dropped) {
  Woken subscribers;
  {
    std::lock_guard lock(mutex_);
    healthy_ = false;
    known_empty_ = false;
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
  // Subscribers poll on their own, as blocked receivers do, until the watch runs again.
  dispatch(std::move(subscribers),
           dropped ? WakeDispatcher::Kind::kWoken : WakeDispatcher::Kind::kIfUnhealthy);
}

void TopicWaiter::stop() {
  std::list<std::shared_ptr<Subscriber>> dropped;  // released after the lock
  std::lock_guard lock(mutex_);
  stopping_ = true;
  woken_.notify_all();
  // The client is going: its subscriptions are never woken.
  for (auto& s : subscribers_) s->listed = false;
  entered_ -= subscribers_.size();
  dropped.swap(subscribers_);
}

Watch::Watch(Pool& pool, std::shared_ptr<TopicWaiter> first,
             std::function<void(std::uint64_t)> poke)
    : pool_(pool), poke_(std::move(poke)) {
  joining_.push_back(std::move(first));
  channels_ = 1;
  thread_ = std::thread([this] { run(); });
}

Watch::~Watch() {
  stop(false);
  if (thread_.joinable()) thread_.join();
}

bool Watch::add(std::shared_ptr<TopicWaiter> waiter) {
  std::uint64_t running = 0;
  {
    std::lock_guard lock(mutex_);
    if (ending_ || stopping_) return false;
    joining_.push_back(std::move(waiter));
    ++channels_;
    if (connection_ != nullptr && looking_) {
      running = connection_id_;
      looking_ = false;  // one KILL ends the look
    }
  }
  // The look it sleeps in does not cover the new channel: interrupt it. (Not its other
  // statements: joins that come fast would interrupt every rebuild of the statements. The watch
  // takes joins in before each look.)
  if (running != 0) poke_(running);
  return true;
}

std::size_t Watch::channels() {
  std::lock_guard lock(mutex_);
  return channels_;
}

bool Watch::ended() {
  std::lock_guard lock(mutex_);
  return ending_;
}

void Watch::stop(bool interrupted) {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  stopped_.notify_all();
  if (!interrupted && connection_ != nullptr) connection_->cancel();
}

std::uint64_t Watch::connection_id() {
  std::lock_guard lock(mutex_);
  return connection_ != nullptr ? connection_id_ : 0;
}

void Watch::pause(std::chrono::milliseconds how_long) {
  std::unique_lock lock(mutex_);
  stopped_.wait_for(lock, how_long, [this] { return stopping_; });
}

void Watch::run() {
  std::vector<std::shared_ptr<TopicWaiter>> watched;
  std::unique_ptr<Connection> c;
  // Owned rather than cached by the connection: each set of channels prepares its own, large
  // statements, which go when the set changes.
  std::unique_ptr<Statement> look;     // IF(any claimable, 2, <wait>): look_sql()
  // MariaDB: the lock the looks wait on (Holder); SLEEP where the server refuses it.
  std::unique_ptr<Holder> holder;
  bool use_holder = false;
  bool no_holder = false;
  // IF(any claimable, 2, IF(a pending message committed, 3, 0)): prepared at its first use
  // (MariaDB optimises every subquery of a statement at each execution, even those an IF skips).
  std::unique_ptr<Statement> fenced;
  std::string fenced_sql;
  // Per chunk of kChannelsPerCheck channels: the indexes of its claimable channels.
  std::vector<std::unique_ptr<Statement>> which;
  std::unique_ptr<Statement> enroll;   // registers every channel
  std::unique_ptr<Statement> unenroll; // deletes this connection's rows of other channels
  std::vector<Param> channel_params;
  // The statements go before the connection they were prepared on, and stop() no longer sees
  // a connection to cancel.
  const auto forget_statements = [&] {
    look.reset();
    fenced.reset();
    which.clear();
    enroll.reset();
    unenroll.reset();
    std::lock_guard lock(mutex_);
    connection_ = nullptr;
  };
  const auto drop_connection = [&] {
    forget_statements();
    c.reset();
    holder.reset();
  };
  bool changed = true;       // the statements do not match `watched`
  bool registered = false;   // every channel's row is (believed) in txmq_waiters
  bool left = false;         // channels left: delete their rows (now and at the next renewal)
  bool left_before_renewal = false;
  // Chunks to check before the next look: all of them after a KILL or a look that found
  // something, from where the last pass was, so that KILLs that come faster than a pass (one
  // every 5 ms while senders send) do not stop it from getting round.
  constexpr std::size_t kAll = SIZE_MAX;
  std::size_t pass_left = 0;
  std::size_t next_chunk = 0;
  // Channels the last check found claimable: the look after a pass that found some leaves
  // them out and sleeps only a pause, after which they are checked again.
  std::vector<bool> hot;
  std::vector<Param> look_params;
  SteadyClock::time_point registered_at;
  auto pause_after_ready = std::chrono::duration_cast<std::chrono::microseconds>(
      kFirstPauseAfterReady);
  std::chrono::microseconds pause_next{0};  // the next look's SLEEP when channels are hot
  // Fenced looks owed (see the top of this file): a KILL whose pass finds nothing may come from
  // a routine's send whose message is not committed yet.
  int fences = 0;
  SteadyClock::time_point fencing_since;
  bool fenced_look = false;     // the running statement is a fenced look
  bool fenced_nothing = false;  // the last one found nothing pending: sleep next
  const auto interrupted = [&] {
    pass_left = kAll;
    registered = false;
    pause_next = {};
    if (fences == 0) fencing_since = SteadyClock::now();
    fences = std::min(std::max(fences + 1, 2), kMaxFences);
  };
  int failures = 0;
  std::vector<std::uint64_t> generations;
  for (;;) {
    std::vector<std::shared_ptr<TopicWaiter>> joining;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      joining.swap(joining_);
    }
    for (std::shared_ptr<TopicWaiter>& waiter : joining) {
      // A channel's new waiter (its tables changed) takes its predecessor's place and row.
      auto same = std::find_if(watched.begin(), watched.end(), [&](const auto& w) {
        return w->channel() == waiter->channel();
      });
      if (same != watched.end()) {
        *same = std::move(waiter);
      } else {
        watched.push_back(std::move(waiter));
      }
      changed = true;
    }
    const std::size_t before = watched.size();
    std::erase_if(watched, [](const auto& w) { return w->retire_if_idle(kLinger); });
    if (watched.size() != before) changed = left = true;
    {
      std::lock_guard lock(mutex_);
      if (watched.empty() && joining_.empty()) {
        ending_ = true;  // Waiters starts another watch for channels that come later
        break;
      }
      channels_ = watched.size() + joining_.size();
      if (watched.empty()) continue;
    }
    try {
      // A cluster's writer moved: watch where the senders now announce (KILL QUERY and the
      // MEMORY registrations are local to a node), registering again there.
      if (c && (!pool_.is_current(*c) || (holder && !pool_.is_current(holder->connection())))) {
        drop_connection();
      }
      if (!c) {
        auto fresh = pool_.connect();
        const std::uint64_t id = fresh->execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0);
        fresh->query(fmt::format("SET SESSION innodb_lock_wait_timeout = {}",
                                 kFenceLockWaitSeconds));
        std::lock_guard lock(mutex_);
        if (stopping_) break;
        c = std::move(fresh);
        connection_ = c.get();
        connection_id_ = id;
        changed = true;
      }
      // Its holder, on the same node.
      if (!holder && !no_holder && !c->server().mysql) {
        holder = Holder::start(pool_);
        no_holder = holder == nullptr;
        if (holder && !pool_.is_current(holder->connection())) continue;  // the writer moved
        if (use_holder != (holder != nullptr)) changed = true;
        use_holder = holder != nullptr;
      }
      if (changed) {
        look.reset();
        fenced.reset();
        which.clear();
        enroll.reset();
        unenroll.reset();
        std::string any;
        std::string fence;
        std::string each;
        std::string rows;
        channel_params.clear();
        for (std::size_t i = 0; i < watched.size(); ++i) {
          const std::string claimable_here = claimable(watched[i]->tables());
          any += fmt::format("{}(? = 0 AND ({}))", i == 0 ? "" : " OR ", claimable_here);
          fence += fmt::format("{}IF(? = 0, {}, NULL)", i == 0 ? "" : ", ",
                               pending(watched[i]->tables()));
          each += fmt::format(", IF({}, '{}', NULL)", claimable_here, i);
          if ((i + 1) % kChannelsPerCheck == 0 || i + 1 == watched.size()) {
            which.push_back(
                std::make_unique<Statement>(*c, fmt::format("SELECT CONCAT_WS(','{})", each)));
            each.clear();
          }
          rows += i == 0 ? "(CONNECTION_ID(), ?, NOW(6))" : ", (CONNECTION_ID(), ?, NOW(6))";
          channel_params.emplace_back(std::string_view(watched[i]->channel()));
        }
        look = std::make_unique<Statement>(*c, look_sql(any, use_holder));
        // 2: something is claimable; 3: a pending message was committed (or one committed
        // meanwhile); 0: nothing pending.
        fenced_sql = fmt::format("SELECT IF({}, 2, IF(COALESCE({}) IS NOT NULL, 3, 0))", any,
                                 fence);
        next_chunk = 0;
        if (pass_left != 0) pass_left = kAll;
        hot.assign(watched.size(), false);
        pause_next = {};
        // IGNORE: a row that is there keeps its place in the order of wake-ups.
        enroll = std::make_unique<Statement>(
            *c, "INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at) VALUES " +
                    rows);
        unenroll = std::make_unique<Statement>(
            *c, fmt::format("DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND "
                            "topic NOT IN {}",
                            placeholders(watched.size())));
        generations.assign(watched.size(), 0);
        changed = false;
        registered = false;
      }
      const bool renewal = SteadyClock::now() - registered_at > kReregister;
      if (!registered || renewal) {
        enroll->execute(channel_params);
        // A row a sender put back after the channel left comes back only once: the next
        // renewal deletes it for good.
        if (left || (renewal && left_before_renewal)) {
          unenroll->execute(channel_params);
          left_before_renewal = left;
          left = false;
        }
        registered = true;
        registered_at = SteadyClock::now();
      }
      for (std::size_t i = 0; i < watched.size(); ++i) generations[i] = watched[i]->watching();
      failures = 0;
      if (pass_left != 0) {
        pass_left = std::min(pass_left, which.size());
        const std::size_t chunk = next_chunk % which.size();
        const std::string found = which[chunk]->execute({}).rows.at(0).bytes(0);
        const std::size_t first = chunk * kChannelsPerCheck;
        const std::size_t last = std::min(first + kChannelsPerCheck, watched.size());
        std::vector<bool> is_claimable(watched.size(), false);
        for (std::size_t at = 0; at < found.size();) {
          std::size_t index = 0;
          const auto [end, error] = std::from_chars(found.data() + at, found.data() + found.size(),
                                                    index);
          if (error == std::errc() && index < is_claimable.size()) is_claimable[index] = true;
          at = static_cast<std::size_t>(end - found.data()) + 1;
        }
        for (std::size_t i = first; i < last; ++i) {
          hot[i] = is_claimable[i];
          if (is_claimable[i]) {
            watched[i]->saw_claimable();
          } else {
            watched[i]->set_empty(generations[i]);
          }
        }
        next_chunk = chunk + 1;
        if (--pass_left == 0) {
          if (std::find(hot.begin(), hot.end(), true) != hot.end()) {
            // Rows locked by an exactly-once transaction look claimable too: check them again
            // after a pause, longer each time, so that they do not spin.
            pause_next = pause_after_ready;
            pause_after_ready = std::min<std::chrono::microseconds>(pause_after_ready * 2,
                                                                    kMaxPauseAfterReady);
          } else {
            pause_after_ready = kFirstPauseAfterReady;
            pause_next = {};
          }
        }
        continue;
      }
      {
        // A channel joined since the top of the loop: its poke may have landed between two
        // statements, and been dropped. Take it in before sleeping.
        std::lock_guard lock(mutex_);
        if (!joining_.empty()) continue;
        looking_ = true;
      }
      // Every statement that sleeps looks, at every channel but the hot ones during a pause:
      // see the top of this file.
      const bool pausing = pause_next.count() != 0;
      const bool hot_left_out =
          pausing && std::find(hot.begin(), hot.end(), true) != hot.end();
      if (fences > 0 && SteadyClock::now() - fencing_since > kFenceFor) fences = 0;
      fenced_look = fences > 0 && !fenced_nothing;
      look_params.clear();
      for (std::size_t i = 0; i < watched.size(); ++i) {
        look_params.emplace_back(std::int64_t{pausing && hot[i] ? 1 : 0});
      }
      if (fenced_look) {
        for (std::size_t i = 0; i < watched.size(); ++i) {
          look_params.emplace_back(std::int64_t{pausing && hot[i] ? 1 : 0});
        }
        if (!fenced) fenced = std::make_unique<Statement>(*c, fenced_sql);
      } else {
        if (use_holder) look_params.emplace_back(std::string_view(holder->name()));
        look_params.emplace_back(seconds(pausing ? pause_next : kLook));
      }
      Result r = (fenced_look ? fenced : look)->execute(look_params);
      const bool was_fenced = std::exchange(fenced_look, false);
      {
        std::lock_guard lock(mutex_);
        looking_ = false;
      }
      const std::int64_t outcome = r.rows.at(0).i64(0);
      if (!was_fenced && outcome == 5) {
        // The holder's connection went and the look took its lock: let go, start another.
        c->execute("DO RELEASE_LOCK(?)", {std::string_view(holder->name())});
        holder.reset();
        continue;
      }
      fenced_nothing = was_fenced && outcome == 0;
      if (fenced_nothing) {
        // Nothing pending (a rollback, or committed before the look): the look sleeps next.
        // The hot channels a pause leaves out are fenced after their pass.
        if (!hot_left_out) fences = 0;
        continue;
      }
      pause_next = {};
      if (outcome == 1) {
        // SLEEP interrupted without an error: a sender's KILL QUERY or a poke.
        interrupted();
      } else if (outcome == 3) {
        // A pending message was committed: which channels? Others may still be pending.
        pass_left = kAll;
        --fences;
      } else if (outcome == 2 || pausing) {
        pass_left = kAll;  // which channels? (after a pause: are the hot ones still?)
        if (outcome == 0) {
          for (std::size_t i = 0; i < watched.size(); ++i) {
            if (!hot[i]) watched[i]->set_empty(generations[i]);
          }
        }
      } else {
        for (std::size_t i = 0; i < watched.size(); ++i) watched[i]->set_empty(generations[i]);
      }
    } catch (const Error& e) {
      const bool was_fenced = std::exchange(fenced_look, false);
      fenced_nothing = false;
      {
        std::lock_guard lock(mutex_);
        looking_ = false;
        if (stopping_) break;
      }
      if (e.server_errno() == kQueryInterrupted) {
        // A sender's KILL QUERY or a poke: on any statement.
        interrupted();
        continue;
      }
      if (was_fenced && e.server_errno() == kRecordChanged) {
        pause_next = {};
        pass_left = kAll;  // as outcome 3: which channels?
        --fences;
        continue;
      }
      if (was_fenced &&
          (e.server_errno() == kLockWaitTimeout || e.server_errno() == kLockDeadlock)) {
        // The sender is still open: nothing was claimable (it waits only then), as after a
        // look that slept. Look and wait again. (MariaDB evaluates the rest of the statement
        // after the timeout: a SLEEP in it would run first, hence a fence without one.)
        for (std::size_t i = 0; i < watched.size(); ++i) {
          if (pause_next.count() == 0 || !hot[i]) watched[i]->set_empty(generations[i]);
        }
        if (pause_next.count() != 0) pass_left = kAll;  // are the hot ones still?
        pause_next = {};
        continue;
      }
      if (e.code() == Errc::kNotFound && c && !c->broken()) {
        // A dropped topic fails the whole statement: find the channels whose tables are gone,
        // first those the error names (one statement each: a watch may have hundreds).
        try {
          const std::string message = e.what();
          const auto named = [&](const std::shared_ptr<TopicWaiter>& w) {
            return std::any_of(w->tables().begin(), w->tables().end(), [&](const WatchedQueue& t) {
              std::string name = t.table;
              std::erase(name, '`');
              return message.find("." + name + "'") != std::string::npos;
            });
          };
          std::vector<std::size_t> order(watched.size());
          std::iota(order.begin(), order.end(), std::size_t{0});
          std::stable_partition(order.begin(), order.end(),
                                [&](std::size_t i) { return named(watched[i]); });
          const auto exists = [&](const WatchedQueue& table) {
            try {
              c->query(fmt::format("SELECT 1 FROM {} LIMIT 0", table.table));
              return true;
            } catch (const Error& missing) {
              if (missing.code() != Errc::kNotFound) throw;
              return false;
            }
          };
          const auto gone = std::find_if(order.begin(), order.end(), [&](std::size_t i) {
            return !std::all_of(watched[i]->tables().begin(), watched[i]->tables().end(), exists);
          });
          if (gone != order.end()) {
            // Others, if any, are found when the next statement fails.
            watched[*gone]->watch_failed(true);
            watched.erase(watched.begin() + static_cast<std::ptrdiff_t>(*gone));
            changed = left = true;
            continue;
          }
        } catch (const Error& probe) {
          if (probe.server_errno() == kQueryInterrupted) {
            pass_left = kAll;
            registered = false;
            continue;
          }
        }
      }
      for (const auto& w : watched) w->watch_failed(false);
      drop_connection();
      pause(std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(100 << std::min(failures, 6)), std::chrono::seconds(5)));
      ++failures;
    }
  }
  forget_statements();
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
  std::vector<std::shared_ptr<TopicWaiter>> waiters;
  std::vector<std::shared_ptr<Watch>> watches;
  {
    std::lock_guard lock(mutex_);
    for (auto& [channel, waiter] : waiters_) waiters.push_back(waiter);
    waiters_.clear();
    watches.swap(watches_);
  }
  for (auto& waiter : waiters) waiter->stop();
  // Unregister and interrupt the running watches from a pooled connection, so that they end
  // at once and leave no registration behind; cancel their connections if that fails.
  std::vector<std::uint64_t> ids;
  for (auto& watch : watches) {
    if (const std::uint64_t id = watch->connection_id(); id != 0) ids.push_back(id);
  }
  bool interrupted = ids.empty();
  if (!ids.empty()) {
    try {
      Pool::Handle c = pool_.acquire();
      for (std::uint64_t id : ids) {
        c->execute("DELETE FROM txmq_waiters WHERE connection_id = ?", {id});
      }
      for (auto& watch : watches) watch->stop(true);
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
  for (auto& watch : watches) watch->stop(interrupted);
  watches.clear();  // joins the threads
}

std::shared_ptr<TopicWaiter> Waiters::enter(std::string_view channel,
                                            const std::vector<WatchedQueue>& tables) {
  std::shared_ptr<TopicWaiter> replaced;
  std::shared_ptr<TopicWaiter> waiter;
  {
    std::lock_guard lock(mutex_);
    auto it = waiters_.find(channel);
    if (it != waiters_.end()) {
      // A waiter that watches other tables (the topic gained partitions) retires.
      if (it->second->tables() == tables && it->second->enter()) return it->second;
      replaced = std::move(it->second);
      waiters_.erase(it);
    }
    waiter = std::make_shared<TopicWaiter>(std::string(channel), tables, dispatcher_);
    waiter->enter();
    // Where the channel's row is: the watch swaps the new waiter in for the old one.
    place_locked(waiter, replaced ? replaced->watch : nullptr);
    waiters_.emplace(std::string(channel), waiter);
  }
  if (replaced) {
    // Its receivers claim on their own, its subscribers subscribe again, to the new waiter.
    replaced->retire();
    replaced->release_subscribers();
  }
  return waiter;
}

void Waiters::place_locked(const std::shared_ptr<TopicWaiter>& waiter, const Watch* preferred) {
  // Ended watches' threads have finished or are finishing: join them now.
  std::erase_if(watches_, [](const std::shared_ptr<Watch>& w) { return w->ended(); });
  Watch* least = nullptr;
  std::size_t fewest = 0;
  for (const std::shared_ptr<Watch>& w : watches_) {
    if (w.get() == preferred && w->add(waiter)) {
      waiter->watch = w.get();
      return;
    }
    const std::size_t channels = w->channels();
    if (least == nullptr || channels < fewest) {
      least = w.get();
      fewest = channels;
    }
  }
  if (least != nullptr &&
      (fewest < kChannelsPerWatch || watches_.size() >= kMaxWatches) && least->add(waiter)) {
    waiter->watch = least;
    return;
  }
  auto poke = [this](std::uint64_t connection_id) { this->poke(connection_id); };
  watches_.push_back(std::make_shared<Watch>(pool_, waiter, std::move(poke)));
  waiter->watch = watches_.back().get();
}

std::shared_ptr<Subscriber> Waiters::subscribe(std::string_view channel,
                                               const std::vector<WatchedQueue>& tables,
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

void Waiters::poke(std::uint64_t connection_id) {
  std::lock_guard lock(announce_mutex_);
  if (announcer_stop_) return;
  pokes_.insert(connection_id);
  if (!announcer_.joinable()) announcer_ = std::thread([this] { run_announcer(); });
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
    std::set<std::uint64_t> pokes;
    {
      std::unique_lock lock(announce_mutex_);
      announcer_idle_ = true;
      announce_cv_.wait(lock, [this] {
        return announcer_stop_ || !pending_.empty() || !pokes_.empty();
      });
      announcer_idle_ = false;
      if (pending_.empty() && announcer_stop_) break;  // stopping, nothing left to say
      const auto next = last_round + kAnnounceEvery;
      if (!announcer_stop_ && SteadyClock::now() < next) {
        announce_cv_.wait_until(lock, next, [this] { return announcer_stop_; });
      }
      round.swap(pending_);
      pokes.swap(pokes_);
    }
    last_round = SteadyClock::now();
    try {
      if (c && !pool_.is_current(*c)) c.reset();  // the cluster's writer moved
      if (!c) c = pool_.connect();
      wake_waiters(*c, std::move(round), std::move(pokes));
    } catch (const Error&) {
      c.reset();  // the watches see these messages within a second anyway
    }
  }
}

namespace {

// Takes the `wanted` oldest registrations on `topic` out of txmq_waiters: their connection ids,
// and whether each is a SQL take's (txmq_take_wait, routines.sql: registered_at 1000-01-01,
// which wakes it before the watches). MariaDB: one DELETE ... RETURNING, so two senders never
// take the same one. MySQL has no RETURNING: a SELECT, then a DELETE of what it found. Two
// senders may then take the same registration, and one of them kills a watch the other kills
// too: a wake-up spent twice, none lost (the watch that is woken runs a pass that sees both
// senders' messages).
Result take_registrations(Connection& c, const std::string& topic, std::size_t wanted) {
  const Param params[] = {std::string_view(topic), static_cast<std::int64_t>(wanted)};
  if (c.server().returning()) {
    return c.execute(
        "DELETE FROM txmq_waiters WHERE topic = ? ORDER BY registered_at LIMIT ? "
        "RETURNING connection_id, registered_at < '1001-01-01'",
        params);
  }
  Result r = c.execute(
      "SELECT connection_id, registered_at < '1001-01-01' FROM txmq_waiters WHERE topic = ? "
      "ORDER BY registered_at LIMIT ?",
      params);
  if (r.rows.empty()) return r;
  std::vector<Param> ids;
  for (const Row& row : r.rows) ids.emplace_back(row.u64(0));
  const std::size_t n = in_list_size(ids.size());
  pad_ids(ids, 0, n);
  ids.insert(ids.begin(), std::string_view(topic));
  c.execute(fmt::format("DELETE FROM txmq_waiters WHERE topic = ? AND connection_id IN {}",
                        placeholders(n)),
            ids);
  return r;
}

}  // namespace

void Waiters::wake_waiters(Connection& c, std::map<std::string, std::size_t, std::less<>> round,
                           std::set<std::uint64_t> pokes) {
  std::set<std::uint64_t> killed;  // one KILL per connection, however many channels it watches
  std::set<std::uint64_t> gone;
  std::set<std::uint64_t> refused;
  const auto kill = [&](std::uint64_t id) {
    if (killed.contains(id) || gone.contains(id) || refused.contains(id)) return;
    try {
      // An id the server gave out, not user input.
      c.query(fmt::format("KILL QUERY {}", id));
      killed.insert(id);
    } catch (const Error& e) {
      if (e.server_errno() == kNoSuchThread) {
        gone.insert(id);
      } else if (e.server_errno() == kNotOwner) {
        refused.insert(id);
      } else {
        throw;
      }
    }
  };
  for (std::uint64_t id : pokes) kill(id);
  // A registration whose connection is gone (its process was killed) wastes a wake-up: take
  // the next one instead, a few rounds at most.
  for (int pass = 0; pass < 4 && !round.empty(); ++pass) {
    std::vector<std::pair<std::uint64_t, const std::string*>> woken;
    std::map<std::string, std::size_t, std::less<>> again;
    for (const auto& [topic, wanted] : round) {
      Result r = take_registrations(c, topic, wanted);
      std::size_t lost = 0;
      for (const Row& row : r.rows) {
        const std::uint64_t id = row.u64(0);
        kill(id);
        if (killed.contains(id)) {
          // A SQL take drops its registration when woken and registers again if it waits on:
          // put back, it would outlive the take, and a later send would interrupt whatever the
          // application's connection runs then.
          if (row.i64(1) == 0) woken.emplace_back(id, &topic);
        } else if (gone.contains(id)) {
          ++lost;
        } else if (warn) {
          warn(fmt::format("cannot wake consumers waiting on topic '{}' that connect as another "
                           "MySQL user (KILL QUERY needs the CONNECTION ADMIN privilege); they "
                           "will see new messages within a second",
                           topic));
        }
      }
      // Fewer rows than wanted: nobody else waits.
      if (r.rows.size() == wanted && lost > 0) again.emplace(topic, lost);
    }
    if (!woken.empty()) {
      // Back at the end of the order: a KILL that lands between two of the watch's statements
      // is dropped, and a watch that does not know it was woken must stay registered. (IGNORE:
      // the watch may have registered again already.)
      std::string rows;
      std::vector<Param> params;
      for (const auto& [id, topic] : woken) {
        rows += rows.empty() ? "(?, ?, NOW(6))" : ", (?, ?, NOW(6))";
        params.emplace_back(id);
        params.emplace_back(std::string_view(*topic));
      }
      c.execute("INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at) VALUES " +
                    rows,
                params);
    }
    round.swap(again);
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

}  // namespace txmq::internal
