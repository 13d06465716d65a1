// Exactly-once across two databases (docs/design/exactly-once-across-databases.md, section 7).
// The queue's database A runs ordinary transactions; the resource B runs the handler's work in
// an XA branch. Per batch:
//   A: claim the messages, insert the batch's decision row ('commit', uncommitted: its key is a
//      lock that A's transaction holds for as long as the consumer lives);
//   B: XA START, the handler's statements, XA END, XA PREPARE;
//   A: delete (or archive) the messages, COMMIT — this commit decides the batch;
//   B: XA COMMIT.
// A crash anywhere leaves at most a prepared branch. Recovery commits it when A has a 'commit'
// row, and otherwise fences: it inserts an 'abort' row for the token, which succeeds only once
// the consumer's A transaction has ended uncommitted (a live consumer holds the key: the insert
// times out; a committed one makes it a duplicate), then rolls the branch back.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "xa/xa_process.h"

#include "catalog/names.h"
#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/exactly_once.h"
#include "engine/queue_context.h"
#include "engine/transaction_impl.h"
#include "xa/xa.h"

namespace txmq::internal {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kRecoverEvery = std::chrono::seconds(10);
// How long a consumer whose commit broke off keeps trying to learn its outcome, holding its
// branch, before it leaves the branch to recovery.
constexpr auto kResolveFor = std::chrono::seconds(30);
// The resource's sessions: a handler blocked by a crashed consumer's prepared branch gives up
// after this and runs recovery, rather than waiting the server's default 50 s.
constexpr int kResourceLockWaitSeconds = 10;
constexpr unsigned kXaNotFound = 1397;     // XAER_NOTA: unknown xid, or held by a live session
constexpr unsigned kXaReadOnlyGone = 1402;  // XA_RBROLLBACK: a read-only branch, finished
constexpr unsigned kGaleraRefusesXa = 1235;
constexpr unsigned kDuplicateKey = 1062;
constexpr unsigned kLockWaitTimeout = 1205;

std::uint64_t random_nonzero() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uint64_t value = 0;
  while (value == 0) value = rng();
  return value;
}

void warn(QueueContext& q, const std::string& text) {
  if (q.waiters.warn) {
    q.waiters.warn(text);
  } else {
    std::fprintf(stderr, "txmq: %s\n", text.c_str());
  }
}

// --- Crash injection for tests: TXMQ_XA_FAULT=<step>[@N] kills the process (SIGKILL) when the
// N-th batch (default the first) reaches the step.

enum class XaStep { kStarted, kPrepared, kDecided, kCommitted };

struct FaultPlan {
  std::optional<XaStep> step;
  std::uint64_t nth = 1;
};

FaultPlan read_fault_plan() {
  FaultPlan plan;
  const char* text = std::getenv("TXMQ_XA_FAULT");
  if (text == nullptr || *text == '\0') return plan;
  std::string_view spec(text);
  if (const std::size_t at = spec.find('@'); at != std::string_view::npos) {
    plan.nth = std::strtoull(std::string(spec.substr(at + 1)).c_str(), nullptr, 10);
    spec = spec.substr(0, at);
  }
  if (spec == "started") plan.step = XaStep::kStarted;
  if (spec == "prepared") plan.step = XaStep::kPrepared;
  if (spec == "decided") plan.step = XaStep::kDecided;
  if (spec == "committed") plan.step = XaStep::kCommitted;
  if (!plan.step || plan.nth == 0) {
    std::fprintf(stderr, "txmq: TXMQ_XA_FAULT=%s not understood (started|prepared|decided|"
                 "committed[@N])\n", text);
    plan.step.reset();
  }
  return plan;
}

void fault_point(XaStep step) {
  static const FaultPlan plan = read_fault_plan();
  if (!plan.step || *plan.step != step) return;
  static std::atomic<std::uint64_t> reached{0};
  if (++reached == plan.nth) ::raise(SIGKILL);
}

// --- A's side ----------------------------------------------------------------------------------

std::uint64_t instance_of(QueueContext& q, XaSites& sites) {
  std::lock_guard lock(sites.instance_mutex);
  if (sites.instance != 0) return sites.instance;
  sites.instance = q.pool.run(OnLostConnection::kRetry, [](Connection& a, const Attempt&) {
    const auto read = [&] {
      return a.execute("SELECT instance_id FROM txmq_schema WHERE singleton = 1", {});
    };
    Result r = read();
    if (r.rows.empty() || r.rows[0].null(0)) {
      // Written once, by whichever client comes first.
      a.execute("UPDATE txmq_schema SET instance_id = ? WHERE singleton = 1 AND instance_id IS NULL",
                {random_nonzero()});
      r = read();
    }
    return r.rows.at(0).u64(0);
  });
  return sites.instance;
}

enum class Fenced { kCommitted, kAborted, kLive };

// Decides a batch that has no decision row yet, on `a` (autocommit): an 'abort' row goes in
// unless the consumer's transaction committed the 'commit' row (duplicate key), or still holds
// it (lock wait timeout after 1 s: the consumer is alive).
Fenced fence(Connection& a, const XaSite& site, std::uint64_t token) {
  a.query("SET SESSION innodb_lock_wait_timeout = 1");
  const auto restore = [&] {
    try {
      a.query("SET SESSION innodb_lock_wait_timeout = @@GLOBAL.innodb_lock_wait_timeout");
    } catch (const Error&) {
    }
  };
  try {
    a.execute(
        "INSERT INTO txmq_xa (token, outcome, resource, owner_id, topic, grp, first_id, messages, "
        "created_at) VALUES (?, 'abort', ?, 0, '', '', 0, 0, NOW(6))",
        {token, site.name()});
    restore();
    return Fenced::kAborted;
  } catch (const Error& e) {
    restore();
    if (e.server_errno() == kLockWaitTimeout) return Fenced::kLive;
    if (e.server_errno() != kDuplicateKey) throw;
  }
  Result r = a.execute("SELECT outcome FROM txmq_xa WHERE token = ?", {token});
  if (r.rows.empty()) return Fenced::kLive;  // purged meanwhile: its branch was finished; look again
  return r.rows[0].bytes(0) == "commit" ? Fenced::kCommitted : Fenced::kAborted;
}

void delete_decision(Connection& a, std::uint64_t token) {
  a.execute("DELETE FROM txmq_xa WHERE token = ?", {token});
}

// --- B's side of one batch ---------------------------------------------------------------------

Error galera_refuses(const XaSite& site) {
  return Error(Errc::kFailedPrecondition,
               fmt::format("XA resource '{}' ({}) is a Galera node, and Galera refuses XA "
                           "transactions (error 1235): give process_xa a standalone MariaDB or "
                           "MySQL server",
                           site.name(), site.dsn().describe()),
               kGaleraRefusesXa);
}

class Branch {
 public:
  Branch(QueueContext& q, XaSite& site) : q_(q), site_(site) {}
  Branch(Branch&&) = default;
  ~Branch() { rollback(); }

  void start(XaBranchName name) {
    for (int tries = 1;; ++tries) {
      x_ = site_.acquire([this](std::string_view text) { warn(q_, std::string(text)); });
      name.connection = x_.id;
      xid_ = name.sql();
      try {
        x_.connection->query("XA START " + xid_);
        state_ = State::kActive;
        return;
      } catch (const Error& e) {
        const bool broken = x_.connection->broken();
        if (broken) site_.release(std::move(x_));  // drops it, and its idle siblings
        x_.connection.reset();
        if (e.server_errno() == kGaleraRefusesXa) throw galera_refuses(site_);
        // An idle connection the server dropped meanwhile (a restart): one more, new one.
        if (broken && tries == 1) continue;
        throw;
      }
    }
  }

  Connection& connection() { return *x_.connection; }

  void prepare() {
    x_.connection->query("XA END " + xid_);
    state_ = State::kIdle;
    try {
      x_.connection->query("XA PREPARE " + xid_);
    } catch (const Error&) {
      // Lost during PREPARE: the branch may be prepared. A rolls back; recovery fences it.
      if (x_.connection->broken()) state_ = State::kMaybePrepared;
      throw;
    }
    state_ = State::kPrepared;
  }

  // After A's commit decided the batch. If B cannot be told now, recovery will tell it.
  void commit() noexcept {
    try {
      x_.connection->query("XA COMMIT " + xid_);
      state_ = State::kDone;
      site_.release(std::move(x_));
    } catch (...) {
      leave();
    }
  }

  // A did not commit and never will: undo B's work.
  void rollback() noexcept {
    if (!x_.connection) return;
    if (state_ == State::kDone || state_ == State::kNone) {
      site_.release(std::move(x_));
      return;
    }
    if (state_ == State::kMaybePrepared || x_.connection->broken()) {
      leave();
      return;
    }
    try {
      if (state_ == State::kActive) {
        try {
          x_.connection->query("XA END " + xid_);
        } catch (const Error&) {
          // A deadlock left the branch rollback-only: XA END refuses, XA ROLLBACK works.
        }
      }
      x_.connection->query("XA ROLLBACK " + xid_);
      state_ = State::kDone;
      site_.release(std::move(x_));
    } catch (...) {
      leave();
    }
  }

  // Closes the connection (never resets it): the server rolls back a branch that is not
  // prepared and keeps a prepared one, which recovery then finishes.
  void leave() noexcept {
    x_.connection.reset();
    state_ = State::kNone;
  }

 private:
  enum class State { kNone, kActive, kIdle, kPrepared, kMaybePrepared, kDone };
  QueueContext& q_;
  XaSite& site_;
  XaConnection x_;
  std::string xid_;
  State state_ = State::kNone;
};

// --- Recovery ----------------------------------------------------------------------------------

enum class Finished { kDone, kAttached };

// XA COMMIT or XA ROLLBACK of a branch another session prepared.
Finished finish(Connection& b, std::string_view verb, const XaBranchName& name) {
  try {
    b.query(fmt::format("XA {} {}", verb, name.sql()));
    return Finished::kDone;
  } catch (const Error& e) {
    // Still attached to its consumer's live session (MariaDB), or finished meanwhile: the next
    // pass tells which.
    if (e.server_errno() == kXaNotFound) return Finished::kAttached;
    if (e.server_errno() == kXaReadOnlyGone) return Finished::kDone;  // read-only: nothing to do
    throw;
  }
}

struct Seen {
  std::map<std::uint64_t, XaDecision> decisions;
  std::vector<XaBranchStatus> rows;  // the decision rows, for status (prepared, action unset)
  std::map<std::uint64_t, XaBranchName> listed;  // txmq branches of this queue database
};

// A's decision rows first, then B's prepared branches: a 'commit' row read before the list
// whose branch is not listed is finished (the reverse order could miss one just prepared).
Seen look(Connection& a, Connection& b, const XaSite& site, std::uint64_t instance) {
  Seen seen;
  Result rows = a.execute(
      fmt::format("SELECT token, outcome, owner_id, topic, grp, first_id, messages, {} FROM "
                  "txmq_xa WHERE resource = ? ORDER BY created_at",
                  micros_of("created_at")),
      {site.name()});
  for (Row& row : rows.rows) {
    XaBranchStatus s;
    s.token = row.u64(0);
    s.decision = row.bytes(1);
    s.owner_id = row.u64(2);
    s.topic = row.bytes(3);
    s.group = row.bytes(4);
    s.first_id = row.u64(5);
    s.messages = row.u64(6);
    s.decided_at = time_from_micros(row.i64(7));
    seen.decisions[s.token] = s.decision == "commit" ? XaDecision::kCommit : XaDecision::kAbort;
    seen.rows.push_back(std::move(s));
  }
  Result recovered = b.query_rows("XA RECOVER");  // MySQL will not prepare it
  for (Row& row : recovered.rows) {
    std::optional<XaBranchName> name =
        XaBranchName::from_recovered(row.i64(0), row.i64(1), row.i64(2), row.bytes(3));
    if (name && name->instance == instance && name->resource == xa_resource_hash(site.name())) {
      seen.listed[name->token] = *name;
    }
  }
  return seen;
}

std::string action_name(XaAction action) {
  switch (action) {
    case XaAction::kCommit:
      return "commit";
    case XaAction::kRollback:
      return "rollback";
    case XaAction::kFence:
    case XaAction::kWait:
      return "fence";
    case XaAction::kPurge:
      return "purge";
    case XaAction::kNothing:
      break;
  }
  return "none";
}

// One pass (design section 7.4). `force`: fence branches without a decision however young
// (a consumer's first pass, an explicit recover): the fence itself tells a live consumer apart.
// REQUIRES: the caller holds site.recovering.
XaRecovery recovery_pass(QueueContext& q, XaSite& site, Connection& a, std::uint64_t instance,
                         bool force) {
  XaRecovery done;
  XaConnection b = site.acquire([&](std::string_view text) { warn(q, std::string(text)); });
  const Seen seen = look(a, *b.connection, site, instance);
  const auto now = SteadyClock::now();
  std::map<std::uint64_t, SteadyClock::time_point> still_undecided;
  // Commits or rolls back a listed branch; its decision row goes once the branch is finished.
  const auto settle = [&](std::uint64_t token, bool commit, const XaBranchName& name) {
    if (finish(*b.connection, commit ? "COMMIT" : "ROLLBACK", name) == Finished::kAttached) {
      ++done.live;
      return;
    }
    delete_decision(a, token);
    ++(commit ? done.committed : done.rolled_back);
  };
  const auto apply = [&](std::uint64_t token, XaAction action, const XaBranchName* name) {
    switch (action) {
      case XaAction::kCommit:
      case XaAction::kRollback:
        settle(token, action == XaAction::kCommit, *name);
        return;
      case XaAction::kFence: {
        const Fenced fenced = fence(a, site, token);
        if (fenced == Fenced::kLive) {
          ++done.live;
        } else {
          settle(token, fenced == Fenced::kCommitted, *name);
        }
        return;
      }
      case XaAction::kWait:
        ++done.live;
        return;
      case XaAction::kPurge:
        delete_decision(a, token);
        ++done.purged;
        return;
      case XaAction::kNothing:
        return;
    }
  };
  for (const auto& [token, decision] : seen.decisions) {
    if (!seen.listed.contains(token)) apply(token, recovery_action(false, decision, {}), nullptr);
  }
  for (const auto& [token, name] : seen.listed) {
    const auto row = seen.decisions.find(token);
    const XaDecision decision = row == seen.decisions.end() ? XaDecision::kNone : row->second;
    std::chrono::microseconds age = std::chrono::microseconds::max();
    if (decision == XaDecision::kNone) {
      const auto first = site.first_seen.try_emplace(token, now).first->second;
      still_undecided[token] = first;
      if (!force) age = std::chrono::duration_cast<std::chrono::microseconds>(now - first);
    }
    apply(token, recovery_action(true, decision, age), &name);
  }
  site.first_seen = std::move(still_undecided);
  site.last_pass = now;
  site.release(std::move(b));
  return done;
}

// At a consumer's first call for a resource (fencing every undecided branch) and every 10 s.
void maybe_recover(QueueContext& q, XaSite& site, std::uint64_t instance) {
  std::unique_lock lock(site.recovering, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread of this process is at it
  const bool first = !site.last_pass;
  if (!first && SteadyClock::now() - *site.last_pass < kRecoverEvery) return;
  try {
    q.pool.run(OnLostConnection::kRetry, [&](Connection& a, const Attempt&) {
      return recovery_pass(q, site, a, instance, first);
    });
  } catch (const Error& e) {
    site.last_pass = SteadyClock::now();
    warn(q, fmt::format("XA recovery for resource '{}' failed, tried again in 10 s: {}",
                        site.name(), e.what()));
  }
}

// After A's COMMIT broke off: learns the outcome from A (fence) and finishes the branch.
// Returns whether the batch committed; throws kUnavailable, the branch left to recovery, when A
// stays unreachable.
bool resolve_in_doubt(QueueContext& q, XaSite& site, Branch& branch, std::uint64_t token) {
  const auto deadline = SteadyClock::now() + kResolveFor;
  for (;;) {
    try {
      const Fenced f = q.pool.run(OnLostConnection::kRetry, [&](Connection& a, const Attempt&) {
        return fence(a, site, token);
      });
      if (f == Fenced::kCommitted) {
        branch.commit();
        site.finished(token);
        return true;
      }
      if (f == Fenced::kAborted) {
        branch.rollback();
        return false;
      }
      // kLive: the server has not rolled back the broken session's transaction yet.
    } catch (const Error& e) {
      if (!e.retryable()) {
        branch.leave();
        throw;
      }
    }
    if (SteadyClock::now() >= deadline) {
      branch.leave();
      throw Error(Errc::kUnavailable,
                  fmt::format("the queue's database broke off the commit of an XA batch and "
                              "could not be asked its outcome for {} s; the batch is left to XA "
                              "recovery, which commits or rolls back its branch on '{}'",
                              kResolveFor.count(), site.name()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

ProcessOutcome process_xa_once(QueueContext& q, XaSite& site, std::uint64_t instance,
                               std::uint64_t owner, const TopicLayout& layout,
                               const std::string& group, const TopicTables& t, int max_messages,
                               const TransactionalHandler& handler, bool& handler_failed) {
  const TopicInfo& topic = layout.info;
  std::vector<Param> handed;              // ids the handler was given last
  std::vector<std::uint64_t> purging;     // earlier batches' decision rows, deleted here
  std::optional<Branch> in_doubt;         // the branch of a batch whose commit broke off
  std::uint64_t token = 0;
  ProcessOutcome pending;                 // what the batch did, if its commit took
  std::map<std::string, SentCount, std::less<>> sent;
  handler_failed = false;
  try {
    return q.pool.run(
        OnLostConnection::kRetry, Work::kTransaction,
        [&](Connection& a, const Attempt&) -> ProcessOutcome {
          handed.clear();
          handler_failed = false;
          site.give_back(purging);
          purging = site.take_finished();
          a.unbound_idle();  // the handler may take its time
          a.begin();
          if (!purging.empty()) {
            std::vector<Param> tokens(purging.begin(), purging.end());
            in_lists(a, "DELETE FROM txmq_xa WHERE token IN {}", std::move(tokens));
          }
          ClaimedBatch batch = claim_batch(q, a, topic, t, max_messages, handed);
          if (batch.done) {
            purging.clear();  // committed with it
            return std::move(*batch.done);
          }
          const std::vector<Message>& messages = batch.messages;
          token = random_nonzero();
          a.execute(
              "INSERT INTO txmq_xa (token, outcome, resource, owner_id, topic, grp, first_id, "
              "messages, created_at) VALUES (?, 'commit', ?, ?, ?, ?, ?, ?, NOW(6))",
              {token, site.name(), owner, topic.name, group, messages.front().id,
               static_cast<std::uint64_t>(messages.size())});
          // The messages go first, before the branch takes any lock in the resource: such a
          // DELETE may scan and wait on rows other consumers claimed (a small table's plan), and
          // a consumer waiting here must not hold rows another consumer's handler waits for in
          // the resource (a cycle neither server sees, broken only by a lock wait timeout).
          std::vector<std::uint64_t> promoted = acknowledge_batch(a, topic, t, messages);
          Branch branch(q, site);
          branch.start(XaBranchName{instance, token, owner, 0, xa_resource_hash(site.name())});
          fault_point(XaStep::kStarted);
          try {
            sent = lend_transaction(
                q, a,
                [&](Transaction& tx) {
                  try {
                    handler(tx, std::span<const Message>(messages));
                  } catch (...) {
                    handler_failed = true;
                    throw;
                  }
                },
                &branch.connection());
          } catch (const Error& e) {
            if (handler_failed && e.code() == Errc::kAborted) {
              // A lock wait or deadlock in the handler's work: the rows may be held by the
              // prepared branch of a consumer that crashed. Recover on this connection before
              // the pool claims again.
              branch.rollback();
              a.rollback();
              // (try_lock: a thread already recovering may be waiting for this connection.)
              std::unique_lock lock(site.recovering, std::try_to_lock);
              if (lock.owns_lock()) {
                try {
                  recovery_pass(q, site, a, instance, true);
                } catch (const Error&) {
                }
              }
            }
            throw;
          }
          branch.prepare();
          fault_point(XaStep::kPrepared);
          pending = std::move(batch).processed(std::move(promoted));
          try {
            a.commit();  // the decision
          } catch (const Error& e) {
            if (e.code() == Errc::kCommitUnknown) in_doubt.emplace(std::move(branch));
            throw;
          }
          purging.clear();
          fault_point(XaStep::kDecided);
          branch.commit();
          fault_point(XaStep::kCommitted);
          site.finished(token);
          announce_sent(q, sent);
          return std::move(pending);
        });
  } catch (const Error& e) {
    site.give_back(purging);
    if (in_doubt) {
      if (resolve_in_doubt(q, site, *in_doubt, token)) {
        announce_sent(q, sent);
        return pending;
      }
      throw Error(Errc::kUnavailable,
                  fmt::format("the queue's database broke off the commit of an XA batch, which "
                              "was rolled back on both sides; its messages will be processed "
                              "again ({})",
                              e.what()),
                  e.server_errno());
    }
    if (handler_failed && !e.retryable()) count_failed_attempt(q, topic, t, std::move(handed));
    throw;
  } catch (...) {
    site.give_back(purging);
    if (handler_failed) count_failed_attempt(q, topic, t, std::move(handed));
    throw;
  }
}

}  // namespace

// --- XaSite, XaSites -----------------------------------------------------------------------------

XaConnection XaSite::acquire(const std::function<void(std::string_view)>& warn_fn) {
  {
    std::lock_guard lock(mutex_);
    while (!idle_.empty()) {
      XaConnection x = std::move(idle_.back());
      idle_.pop_back();
      // One idle for a while may have been dropped by a restart of the resource: a ping
      // (about 0.1 ms) rather than a failed batch. Then its idle siblings go too.
      if (SteadyClock::now() - x.connection->last_used() < std::chrono::seconds(1) ||
          x.connection->ping()) {
        return x;
      }
      idle_.clear();
    }
  }
  XaConnection x;
  x.connection = std::make_unique<Connection>(dsn_);
  Connection& c = *x.connection;
  bool galera = false;
  try {
    Result w = c.execute("SELECT @@wsrep_on", {});
    galera = !w.rows.empty() && w.rows[0].i64(0) == 1;
  } catch (const Error& e) {
    if (c.broken()) throw;  // MySQL has no such variable: not Galera
  }
  if (galera) throw galera_refuses(*this);
  Result r = c.execute(
      "SELECT CONNECTION_ID(), @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog", {});
  c.query(fmt::format("SET SESSION innodb_lock_wait_timeout = {}", kResourceLockWaitSeconds));
  const Row& row = r.rows.at(0);
  x.id = row.u64(0);
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = !checked_;
    checked_ = true;
  }
  if (first && warn_fn) {
    if (row.i64(1) != 1) {
      warn_fn(fmt::format("XA resource '{}' ({}) runs with innodb_flush_log_at_trx_commit={}: "
                          "a crash of it can lose work that process_xa reported committed (set "
                          "it to 1)",
                          name_, dsn_.describe(), row.i64(1)));
    }
    if (row.i64(2) != 0 && row.i64(3) != 1) {
      warn_fn(fmt::format("XA resource '{}' ({}) writes a binary log with sync_binlog={}: set "
                          "it to 1, or a crash can lose prepared branches from the binlog",
                          name_, dsn_.describe(), row.i64(3)));
    }
  }
  return x;
}

void XaSite::release(XaConnection connection) {
  if (!connection.connection || connection.connection->broken()) {
    // Its idle siblings most likely went with it (a restart of the resource).
    std::lock_guard lock(mutex_);
    idle_.clear();
    return;
  }
  connection.connection->touch();
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(connection));
}

void XaSite::finished(std::uint64_t token) {
  std::lock_guard lock(mutex_);
  finished_.push_back(token);
}

std::vector<std::uint64_t> XaSite::take_finished() {
  std::lock_guard lock(mutex_);
  // Bounded so that one batch's transaction stays short.
  const std::size_t n = std::min<std::size_t>(finished_.size(), 1000);
  std::vector<std::uint64_t> out(finished_.end() - static_cast<std::ptrdiff_t>(n),
                                 finished_.end());
  finished_.resize(finished_.size() - n);
  return out;
}

void XaSite::give_back(const std::vector<std::uint64_t>& tokens) {
  if (tokens.empty()) return;
  std::lock_guard lock(mutex_);
  finished_.insert(finished_.end(), tokens.begin(), tokens.end());
}

XaSite& XaSites::get(const XaResource& resource) {
  if (!is_valid_topic_name(resource.name)) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("XA resource name '{}' is not valid: [a-z][a-z0-9_]{{0,47}}",
                            resource.name));
  }
  std::lock_guard lock(mutex_);
  auto it = sites_.find(resource.name);
  if (it != sites_.end()) {
    if (it->second.first != resource.dsn) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("XA resource '{}' was used with another DSN by this client: one "
                              "name per database",
                              resource.name));
    }
    return *it->second.second;
  }
  Dsn dsn = parse_dsn(resource.dsn);
  if (dsn.is_host_list()) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("XA resource '{}' lists several hosts: it must be one server (Galera "
                            "clusters refuse XA)",
                            resource.name));
  }
  auto site = std::make_unique<XaSite>(resource.name, std::move(dsn));
  XaSite& ref = *site;
  sites_.emplace(resource.name, std::make_pair(resource.dsn, std::move(site)));
  return ref;
}

// --- Entry points --------------------------------------------------------------------------------

std::size_t process_xa(QueueContext& q, XaSites& sites, std::string_view topic, const XaResource& resource,
                       const ProcessOptions& options, const TransactionalHandler& handler) {
  if (!handler) throw Error(Errc::kInvalidArgument, "process_xa needs a handler");
  XaSite& site = sites.get(resource);
  const std::uint64_t instance = instance_of(q, sites);
  const std::uint64_t owner = q.registration.id(q.pool, q.owner);
  maybe_recover(q, site, instance);
  return process_units(
      q, topic, options,
      [&](const TopicLayout& layout, const QueueRef& unit, bool& handler_failed) {
        return process_xa_once(q, site, instance, owner, layout,
                               layout.group(options.group).name, unit.tables,
                               options.max_messages, handler, handler_failed);
      });
}

XaRecovery recover_xa(QueueContext& q, XaSites& sites, const XaResource& resource) {
  XaSite& site = sites.get(resource);
  const std::uint64_t instance = instance_of(q, sites);
  std::lock_guard lock(site.recovering);
  return q.pool.run(OnLostConnection::kRetry, [&](Connection& a, const Attempt&) {
    return recovery_pass(q, site, a, instance, true);
  });
}

std::vector<XaBranchStatus> xa_status(QueueContext& q, XaSites& sites, const XaResource& resource) {
  XaSite& site = sites.get(resource);
  const std::uint64_t instance = instance_of(q, sites);
  return q.pool.run(OnLostConnection::kRetry, [&](Connection& a, const Attempt&) {
    XaConnection b = site.acquire([&](std::string_view text) { warn(q, std::string(text)); });
    Seen seen = look(a, *b.connection, site, instance);
    site.release(std::move(b));
    std::vector<XaBranchStatus> out = std::move(seen.rows);
    for (XaBranchStatus& s : out) {
      s.prepared = seen.listed.contains(s.token);
      s.action = action_name(recovery_action(s.prepared, seen.decisions.at(s.token), {}));
    }
    for (const auto& [token, name] : seen.listed) {
      if (seen.decisions.contains(token)) continue;
      XaBranchStatus s;
      s.token = token;
      s.prepared = true;
      s.owner_id = name.owner;
      s.action = action_name(XaAction::kFence);
      out.push_back(std::move(s));
    }
    return out;
  });
}

}  // namespace txmq::internal
