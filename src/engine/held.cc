// Held claims: the exactly-once claim (rows locked by the transaction, no lease written) for a
// consumer that settles each message on its own. A batch of short handlers costs one claim and
// one commit and no UPDATE of every row; a batch that runs long is leased (lease_rest), and goes
// on as a received one. If the process dies or the connection drops first, the server rolls back
// and the messages are claimable again at once.
#include "engine/held.h"

#include <algorithm>

#include <fmt/format.h>

#include "db/sql.h"
#include "engine/announce.h"
#include "engine/claim.h"
#include "engine/retry.h"
#include "engine/settle.h"

namespace txmq::internal {

HeldClaim::HeldClaim(QueueContext& q, Topic topic, const QueueRef& unit, std::string group,
                     Pool::Handle connection, ClaimedBatch batch)
    : q_(q),
      topic_(std::move(topic)),
      unit_(unit),
      group_(std::move(group)),
      connection_(std::move(connection)),
      messages_(std::move(batch.messages)),
      marks_(messages_.size(), Mark::kHeld),
      end_to_end_(std::move(batch.end_to_end)),
      claimed_at_(batch.claimed_at),
      claimed_now_us_(batch.now_us) {}

HeldClaim::~HeldClaim() { rollback(); }

void HeldClaim::mark(std::size_t i, Mark mark) { marks_.at(i) = mark; }

void HeldClaim::rollback() noexcept {
  if (!open_) return;
  open_ = false;
  try {
    (*connection_)->rollback();
  } catch (...) {
    // A connection that cannot roll back is closed by the pool; the server rolls back.
  }
  connection_.reset();
  q_.hints.lower(unit_.tables.rows_key, messages_.empty() ? 0 : messages_.front().id);
  q_.waiters.announce(unit_.channel, messages_.size());
}

namespace {

// What broke a connection, in words for the caller: the pool's outage report names the
// server's error (1047 or 1180 when a cluster node left the cluster).
std::string_view why_broken(const Error& e) {
  return is_node_unavailable(e.server_errno()) ? "its database node left the cluster"
                                               : "the connection to the database was lost";
}

// A batch whose connection broke was rolled back by the server.
Error rolled_back(const Error& e) {
  return Error(Errc::kUnavailable,
               fmt::format("{} while the batch was held; it rolled back, and its messages are "
                           "claimable again",
                           why_broken(e)),
               e.server_errno());
}

}  // namespace

void HeldClaim::end_with(const Error& e) {
  const bool broke = (*connection_)->broken();
  if (broke) q_.pool.connection_broke(**connection_, e);
  rollback();
  if (broke && e.code() != Errc::kCommitUnknown) throw rolled_back(e);
  throw e;
}

void HeldClaim::apply_marks(HeldOutcome& outcome, std::vector<std::uint64_t>& promoted) {
  Connection& c = **connection_;
  const TopicInfo& info = topic_->info();
  const TopicTables& t = unit_.tables;
  std::vector<Message> done;
  std::vector<Param> dead;
  for (std::size_t i = 0; i < messages_.size(); ++i) {
    const Message& m = messages_[i];
    if (marks_[i] == Mark::kDone) {
      done.push_back(m);
    } else if (marks_[i] == Mark::kFailed) {
      ++outcome.failed;
      // This was delivery number m.attempt; the ones before it failed too.
      if (past_max_attempts(info.options, m.attempt)) {
        dead.push_back(m.id);
        continue;
      }
      const Micros delay = retry_delay(info.options.retry, m.attempt - 1);
      c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL ? MICROSECOND, "
                            "attempts = attempts + 1, lease_token = 0, owner_id = 0 WHERE {}id = ?",
                            t.queue, t.q_and),
                {static_cast<std::int64_t>(delay.count()), m.id});
    }
  }
  if (!done.empty()) {
    std::vector<std::uint64_t> moved_in = acknowledge_batch(c, info, t, done);
    promoted.insert(promoted.end(), moved_in.begin(), moved_in.end());
    outcome.done = done.size();
  }
  if (!dead.empty()) {
    outcome.dead_lettered = dead.size();
    std::vector<std::uint64_t> moved_in = move_to_dead_letters(q_, c, info, t, std::move(dead));
    promoted.insert(promoted.end(), moved_in.begin(), moved_in.end());
  }
}

void HeldClaim::finish(const HeldOutcome& outcome, const std::vector<std::uint64_t>& promoted) {
  open_ = false;
  try {
    (*connection_)->commit();
    connection_.reset();
  } catch (const Error& e) {
    const bool broke = (*connection_)->broken();
    if (broke) q_.pool.connection_broke(**connection_, e);
    connection_.reset();
    if (e.code() == Errc::kCommitUnknown) throw;
    // Rolled back on the server: every message is claimable again.
    q_.hints.lower(unit_.tables.rows_key, messages_.front().id);
    q_.waiters.announce(unit_.channel, messages_.size());
    if (broke) throw rolled_back(e);
    throw;
  }
  const std::string& name = topic_->name();
  q_.metrics.count(name, group_, Counter::kAcked, outcome.done);
  q_.metrics.count(name, group_, Counter::kNacked, outcome.failed);
  q_.metrics.count(name, group_, Counter::kDeadLettered, outcome.dead_lettered);
  // From send to the acknowledgement's commit, as Client::process counts it.
  const double handled =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - claimed_at_).count();
  for (std::size_t i = 0; i < messages_.size() && i < end_to_end_.size(); ++i) {
    if (marks_[i] == Mark::kDone) {
      q_.metrics.observe(name, group_, Histogram::kEndToEnd, end_to_end_[i] + handled);
    }
  }
  made_claimable(q_, unit_, promoted);
  if (outcome.released > 0) {
    q_.hints.lower(unit_.tables.rows_key, messages_.front().id);
    q_.waiters.announce(unit_.channel, outcome.released);
  }
}

HeldOutcome HeldClaim::commit() {
  if (!open_) throw Error(Errc::kInvalidArgument, "this held batch has ended");
  HeldOutcome outcome;
  std::vector<std::uint64_t> promoted;
  try {
    apply_marks(outcome, promoted);
  } catch (const Error& e) {
    end_with(e);
  } catch (...) {
    rollback();
    throw;
  }
  for (Mark m : marks_) {
    if (m == Mark::kHeld) ++outcome.released;
  }
  finish(outcome, promoted);
  return outcome;
}

std::vector<HeldClaim::Leased> HeldClaim::lease_rest(Micros lease, HeldOutcome& outcome,
                                                     Clock::time_point& expires_at) {
  if (!open_) throw Error(Errc::kInvalidArgument, "this held batch has ended");
  std::vector<std::size_t> rest;
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < messages_.size(); ++i) {
    if (marks_[i] != Mark::kHeld) continue;
    rest.push_back(i);
    ids.push_back(messages_[i].id);
  }
  std::vector<std::uint64_t> promoted;
  std::uint64_t token = 0;
  // The expiry as the client's clock sees it from before the statement: never later than the
  // server's.
  expires_at = Clock::now() + lease;
  try {
    apply_marks(outcome, promoted);
    if (!ids.empty()) {
      token = write_leases(q_, **connection_, topic_->info(), unit_.tables, ids, lease,
                           claimed_now_us_);
    }
  } catch (const Error& e) {
    end_with(e);
  } catch (...) {
    rollback();
    throw;
  }
  outcome.leased = rest.size();
  finish(outcome, promoted);
  std::vector<Leased> leased;
  leased.reserve(rest.size());
  for (std::size_t i : rest) {
    const Message& m = messages_[i];
    leased.push_back(
        Leased{i, Receipt{m.id, m.key ? token | kKeyedTokenBit : token, unit_.group}.str()});
  }
  return leased;
}

std::unique_ptr<HeldClaim> hold(QueueContext& q, std::string_view topic,
                                const ReceiveOptions& options) {
  check_claim_options(options.max_messages, options.wait);
  const Topic resolved = q.catalog.resolve(topic);
  const TopicInfo& info = resolved->info();
  const GroupEntry& group = resolved->layout.group(options.group);
  const Micros lease = options.lease.value_or(info.options.lease);
  check_lease(lease);
  // A process that freezes (or a host that drops off the network) while it holds a batch is not
  // there to lease it: the server closes its connection after a lease without a statement, and
  // the rows come back, as a lease would. A live Worker commits or leases within hold_up_to
  // (at most a third of the lease).
  const int idle_bound = static_cast<int>(std::max<std::int64_t>(
      kHeldIdleBound.count(), std::chrono::ceil<std::chrono::seconds>(lease).count()));
  const std::vector<const QueueRef*> units = resolved->claim_order(group, options.partitions);
  if (units.empty()) return nullptr;  // none of them on this server
  // Registered now, outside the held transaction: a lease_rest must not wait for a second
  // connection of the pool.
  q.registration.id(q.pool, q.owner);
  std::unique_ptr<HeldClaim> held;
  claim_within(q, units.front()->channel, queue_tables_of(units), options.wait, [&] {
    const std::size_t first = q.turn.fetch_add(1) % units.size();
    bool dead_lettered = false;
    for (std::size_t i = 0; i < units.size(); ++i) {
      const QueueRef& unit = *units[(first + i) % units.size()];
      const auto start = std::chrono::steady_clock::now();
      // A lost connection before anything is held is tried again on a new one.
      std::optional<ClaimedBatch> claimed;
      std::optional<Pool::Handle> handle;
      for (int attempt = 1; !claimed; ++attempt) {
        handle.emplace(q.pool.acquire(Work::kTransaction));
        try {
          claimed = on_topic(q, topic, [&] {
            (*handle)->bound_idle(idle_bound);
            (*handle)->begin();
            std::vector<Param> handed;
            try {
              return claim_batch(q, **handle, info, unit.tables, options.max_messages, handed);
            } catch (...) {
              try {
                (*handle)->rollback();
              } catch (...) {
              }
              throw;
            }
          });
        } catch (const Error& e) {
          // A commit whose reply was lost ended a claim that held nothing (it found nothing, or
          // moved dead letters, which a repeat finds moved or moves): as safe to repeat as a
          // lost connection.
          const bool unknown = e.code() == Errc::kCommitUnknown;
          if (!(e.retryable() || unknown)) throw;
          // As run() does: the outage is reported and a cluster moves off a node that left it.
          const bool broke = (*handle)->broken();
          if (broke) q.pool.connection_broke(**handle, e);
          if (attempt >= 3) {
            if (broke && !unknown) {
              throw Error(Errc::kUnavailable,
                          fmt::format("no claim after {} connections; the last: {}", attempt,
                                      why_broken(e)),
                          e.server_errno());
            }
            if (!unknown) throw;
            throw Error(Errc::kUnavailable,
                        fmt::format("the connection broke while a claim committed: {}", e.what()),
                        e.server_errno());
          }
        }
      }
      if (claimed->done) {  // committed: dead letters moved, or nothing claimable
        q.metrics.count(topic, group.name, Counter::kDeadLettered, claimed->done->dead_letters);
        made_claimable(q, unit, claimed->done->promoted);
        dead_lettered = dead_lettered || claimed->done->dead_lettered;
        continue;
      }
      q.metrics.observe(topic, group.name, Histogram::kClaim,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                            .count());
      q.metrics.count(topic, group.name, Counter::kReceived, claimed->messages.size());
      const bool all = claimed->messages.size() == static_cast<std::size_t>(options.max_messages);
      held = std::make_unique<HeldClaim>(q, resolved, unit, group.name, std::move(*handle),
                                         std::move(*claimed));
      return all ? ClaimTry::kGotAll : ClaimTry::kGot;
    }
    return dead_lettered ? ClaimTry::kAgainNow : ClaimTry::kEmpty;
  });
  return held;
}

}  // namespace txmq::internal
