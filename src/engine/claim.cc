#include "engine/claim.h"

#include <fmt/format.h>

#include <thread>

#include "engine/attributes.h"
#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/announce.h"
#include "engine/inspect.h"
#include "engine/queue_context.h"
#include "engine/retry.h"
#include "engine/settle.h"
#include "util/random.h"

namespace txmq::internal {
namespace {

// 64 random bits from the kernel's cryptographic generator: a lease token is the secret half of
// a receipt, so it must not be guessable from the tokens a consumer saw before (a Mersenne
// Twister's output is, from 312 of them).
std::uint64_t secure_random() {
  std::uint64_t value = 0;
  if (!util::fill_random(&value, sizeof(value))) {
    throw Error(Errc::kInternal, "getrandom failed: no secure lease token");
  }
  return value;
}

// A random token without the keyed bit (claim_once sets it for keyed messages).
std::uint64_t new_lease_token() {
  std::uint64_t token = 0;
  while (token == 0) token = secure_random() & ~kKeyedTokenBit;
  return token;
}

}  // namespace

Message message_from_row(Row& row) {
  Message m;
  m.id = row.u64(0);
  m.attempt = static_cast<int>(row.i64(1)) + 1;
  m.enqueued_at = time_from_micros(row.i64(2));
  m.key = row.opt_bytes(4);
  m.payload = row.take_bytes(5);
  if (!row.null(6)) m.attributes = decode_attributes(row.bytes(6), &m.dead_lettered_from);
  // A first delivery is this claim's (whose statement stamps it); NOW(6) is column 3.
  m.first_received_at = time_from_micros(m.attempt == 1 ? row.i64(3) : row.i64(7));
  m.tenant = row.opt_bytes(9);
  return m;
}

std::uint64_t write_leases(QueueContext& q, Connection& c, const TopicInfo& topic,
                           const TopicTables& t, const std::vector<std::uint64_t>& ids,
                           Micros lease, std::int64_t now_us) {
  const std::uint64_t owner_id = q.registration.id(q.pool, q.owner);
  const std::uint64_t token = new_lease_token();
  const std::uint64_t keyed_token = token | kKeyedTokenBit;
  std::vector<Param> params = {static_cast<std::int64_t>(lease.count())};
  bind_retry_delay(params, topic.options.retry);
  // A first delivery's time is the claim's NOW(6), the one its receiver is told.
  params.insert(params.end(), {now_us, token, keyed_token, owner_id});
  const std::size_t first_id = params.size();
  for (std::uint64_t id : ids) params.push_back(id);
  const std::size_t n = in_list_size(ids.size());
  pad_ids(params, first_id, n);
  // visible_at first: it reads attempts before the increment (assignments run in order).
  c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL (? + {}) MICROSECOND, "
                        "first_claimed_at = IF(attempts = 0, TIMESTAMP'1970-01-01 00:00:00' + "
                        "INTERVAL ? MICROSECOND, first_claimed_at), "
                        "attempts = attempts + 1, lease_token = IF(msg_key IS NULL, ?, ?), "
                        "owner_id = ? WHERE {}id IN {}",
                        t.queue, retry_delay_sql("attempts"), t.q_and, placeholders(n)),
            params);
  return token;
}

namespace {

// One claim: a short READ COMMITTED transaction that locks the lowest claimable ids from the
// scan hint on (skipping rows other claimers hold), moves those past max_attempts to the
// dead-letter table and stamps the rest with a fresh lease token, owner, attempts+1 and the time
// peers may take it again: the lease's end plus the retry delay for this attempt, so that a
// lease that runs out is retried with the topic's backoff.
struct ClaimResult {
  std::vector<Message> messages;
  std::size_t dead_lettered = 0;  // and deleted past the topic's retention
  std::size_t dead_letters = 0;    // of them, dead-lettered
  std::size_t lease_expiries = 0;  // of the messages: their last lease ended unsettled
  std::vector<std::uint64_t> promoted;  // keyed messages moved in behind dead letters
};

// `riding`: acknowledgements to apply first, in the claim's transaction (ack_and_receive).
ClaimResult claim_once(QueueContext& q, const TopicInfo& topic, const QueueRef& unit,
                       int max_messages, Micros lease, RidingAcks* riding) {
  const TopicTables& t = unit.tables;
  q.registration.id(q.pool, q.owner);  // registered outside the claim's transaction
  try {
    return q.pool.run(
        OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
          ClaimResult result;
          // Acknowledgements riding here count as done the moment the transaction commits,
          // whatever happens after (a retry of this function must not apply them again).
          const auto commit = [&] {
            c.commit();
            if (riding != nullptr) riding->committed();
          };
          c.begin();
          if (riding != nullptr && riding->pending()) riding->apply(c);
          Result r = select_claimable(q, c, t, max_messages, topic.options.fair);
          if (r.rows.empty()) {
            commit();
            return result;
          }
          const std::int64_t now_us = r.rows[0].i64(3);
          std::vector<Param> dead_ids;
          std::vector<Param> expired_ids;
          std::vector<Row*> live;
          const std::int64_t retention_us = topic.options.retention.count();
          for (Row& row : r.rows) {
            if (retention_us > 0 && now_us - row.i64(2) > retention_us) {
              expired_ids.push_back(row.u64(0));  // kept longer than the topic keeps messages
            } else if (past_max_attempts(topic.options, row.i64(1))) {
              dead_ids.push_back(row.u64(0));
            } else {
              live.push_back(&row);
            }
          }
          result.dead_lettered = dead_ids.size() + expired_ids.size();
          result.dead_letters = dead_ids.size();
          if (!dead_ids.empty()) result.promoted = move_to_dead_letters(q, c, topic, t, std::move(dead_ids));
          if (!expired_ids.empty()) {
            // Kept longer than the topic keeps messages: deleted, their keys moved on.
            std::vector<std::uint64_t> moved_in = delete_finished(c, t, std::move(expired_ids));
            result.promoted.insert(result.promoted.end(), moved_in.begin(), moved_in.end());
          }
          if (live.empty()) {
            commit();
            return result;
          }
          std::vector<std::uint64_t> ids;
          ids.reserve(live.size());
          for (const Row* row : live) ids.push_back(row->u64(0));
          const std::uint64_t token = write_leases(q, c, topic, t, ids, lease, now_us);
          const std::uint64_t keyed_token = token | kKeyedTokenBit;
          commit();
          result.messages.reserve(live.size());
          for (Row* row : live) {
            if (row->i64(8) != 0) ++result.lease_expiries;
            Message m = message_from_row(*row);
            m.receipt = Receipt{m.id, m.key ? keyed_token : token, unit.group}.str();
            // The expiry is counted from the claim's first statement: never later than the
            // server's.
            m.lease_expires_at = time_from_micros(now_us + lease.count());
            result.messages.push_back(std::move(m));
          }
          return result;
        });
  } catch (const Error& e) {
    // Not the caller's concern: a claim that did commit leased messages no one received, and
    // they are delivered again when the lease ends. Trying again is safe.
    if (e.code() != Errc::kCommitUnknown) throw;
    if (riding != nullptr && riding->pending()) {
      throw Error(Errc::kCommitUnknown,
                  fmt::format("the connection broke while a claim and the acknowledgements it "
                              "carried committed: they may or may not have been applied (messages "
                              "not acknowledged, and any the claim leased, are delivered again "
                              "when their leases end): {}",
                              e.what()),
                  e.server_errno());
    }
    throw Error(Errc::kUnavailable,
                fmt::format("the connection broke while a claim committed (messages it may have "
                            "leased are delivered again when their lease ends): {}",
                            e.what()),
                e.server_errno());
  }
}

}  // namespace

Result select_claimable(QueueContext& q, Connection& c, const TopicTables& t, int max_messages,
                        bool fair) {
  const auto limit = static_cast<std::int64_t>(max_messages);
  const std::string& hint_key = t.rows_key;  // scan hints are per queue
  const std::string columns =
      fmt::format("id, attempts, {}, {}, msg_key, payload, attributes, {}, lease_token <> 0",
                  micros_of("enqueued_at"), micros_of("NOW(6)"), micros_of("first_claimed_at"));
  std::string sql;
  if (fair) {
    // Fair order (send.cc, fair_places): messages without a tenant first (fair_seq 0, by id),
    // then the tenants' places. Only the first band has a scan hint: its ids only grow, as a
    // plain topic's do, while a tenant's place may be at the head of the line. Ranges of one
    // index read in its order: rows are locked only as they are taken, with no sort.
    sql = fmt::format(
        "SELECT {}, tenant, fair_seq = 0 FROM {} FORCE INDEX (fair_order) WHERE (fair_seq = 0 "
        "AND id >= ? OR fair_seq > 0) AND visible_at <= NOW(6) ORDER BY fair_seq, id LIMIT ? FOR "
        "UPDATE SKIP LOCKED",
        columns, t.queue);
  } else {
    // FORCE INDEX (PRIMARY): walking the primary key in order means rows are locked only as
    // they are taken; a plan that sorted a range first would lock every row it sorted.
    sql = fmt::format(
        "SELECT {}, NULL, TRUE FROM {} FORCE INDEX (PRIMARY) WHERE {}id >= ? AND visible_at <= "
        "NOW(6) ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
        columns, t.queue, t.q_and);
  }
  ScanHints::Start start = q.hints.start(hint_key);
  Result r = c.execute(sql, {start.sweep ? std::uint64_t{0} : start.from_id, limit});
  if (r.rows.empty() && !start.sweep) {
    start.sweep = true;
    r = c.execute(sql, {std::uint64_t{0}, limit});
  }
  // The hint moves past the last row of the hinted band (which comes first).
  std::uint64_t last_hinted = 0;
  for (const Row& row : r.rows) {
    if (row.i64(10) != 0) last_hinted = row.u64(0);
  }
  q.hints.claimed(hint_key, start.sweep, last_hinted);
  return r;
}

std::uint64_t ConsumerRegistration::id(Pool& pool, const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (id_ != 0 && now - registered_ < std::chrono::hours(24)) return id_;
  id_ = pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    // One row per consumer name; the same name gets its id back (LAST_INSERT_ID(id)).
    Result r = c.execute(
        "INSERT INTO txmq_consumers (name, seen_at) VALUES (?, NOW(6)) "
        "ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), seen_at = NOW(6)",
        {std::string_view(name)});
    // Names unseen for 30 days (old pids) go, a bounded number at a time.
    c.execute("DELETE FROM txmq_consumers WHERE seen_at < NOW(6) - INTERVAL 30 DAY LIMIT 100", {});
    return r.insert_id;
  });
  registered_ = now;
  return id_;
}

ScanHints::Start ScanHints::start(std::string_view topic) {
  std::lock_guard lock(mutex_);
  auto it = hints_.find(std::string(topic));
  if (it == hints_.end()) return {};
  if (std::chrono::steady_clock::now() - it->second.swept_at >= kSweepEvery) return {};
  return {it->second.next_id, false};
}

void ScanHints::claimed(std::string_view topic, bool swept, std::uint64_t max_id) {
  std::lock_guard lock(mutex_);
  Hint& h = hints_[std::string(topic)];
  if (swept) {
    // A sweep saw the whole topic: its last id is where the next claim may start (the topic may
    // even have been dropped and created again, with ids from 1).
    h.swept_at = std::chrono::steady_clock::now();
    if (max_id != 0) h.next_id = max_id + 1;
  } else {
    h.next_id = std::max(h.next_id, max_id + 1);
  }
}

void ScanHints::lower(std::string_view topic, std::uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = hints_.find(std::string(topic));
  if (it != hints_.end()) it->second.next_id = std::min(it->second.next_id, id);
}

void ScanHints::forget(std::string_view topic) {
  std::lock_guard lock(mutex_);
  hints_.erase(std::string(topic));
}

void check_claim_options(int max_messages, Micros wait) {
  if (max_messages < 1 || max_messages > kMaxReceive) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("max messages must be from 1 to {}", kMaxReceive));
  }
  if (wait < Micros{0} || wait > std::chrono::hours(1)) {
    throw Error(Errc::kInvalidArgument, "wait must be from 0 to 1 hour");
  }
}

std::vector<WatchedQueue> queue_tables_of(const std::vector<const QueueRef*>& units) {
  std::vector<WatchedQueue> tables;
  tables.reserve(units.size());
  for (const QueueRef* u : units) tables.push_back({u->tables.queue, u->tables.q_and});
  return tables;
}

namespace {

}  // namespace

void check_lease(Micros lease) {
  if (lease < std::chrono::milliseconds(1) || lease > std::chrono::hours(12)) {
    throw Error(Errc::kInvalidArgument, "lease must be from 1 ms to 12 hours");
  }
}

std::vector<Message> receive(QueueContext& q, std::string_view topic,
                             const ReceiveOptions& options) {
  check_claim_options(options.max_messages, options.wait);
  return receive(q, *q.catalog.resolve(topic), options);
}

std::vector<Message> receive(QueueContext& q, const ResolvedTopic& resolved,
                             const ReceiveOptions& options, RidingAcks* riding) {
  const std::string& topic = resolved.name();
  const TopicInfo& info = resolved.info();
  const GroupEntry& group = resolved.layout.group(options.group);
  Micros lease = options.lease.value_or(info.options.lease);
  check_lease(lease);
  const std::vector<const QueueRef*> units = resolved.claim_order(group, options.partitions);
  if (units.empty()) {  // none of them on this server
    if (riding != nullptr) riding->alone();
    return {};
  }
  const auto wanted = static_cast<std::size_t>(options.max_messages);
  std::vector<Message> messages;
  claim_within(q, units.front()->channel, queue_tables_of(units), options.wait, [&] {
    // Partitions in turn, from a different one each time, until the batch is full.
    const std::size_t first = q.turn.fetch_add(1) % units.size();
    std::size_t dead_lettered = 0;
    for (std::size_t i = 0; i < units.size() && messages.size() < wanted; ++i) {
      const QueueRef& unit = *units[(first + i) % units.size()];
      const auto start = std::chrono::steady_clock::now();
      ClaimResult claimed = on_topic(q, topic, [&] {
        return claim_once(q, info, unit, static_cast<int>(wanted - messages.size()), lease,
                          riding);
      });
      riding = nullptr;  // they rode in this claim's transaction, which committed
      q.metrics.count(topic, group.name, Counter::kDeadLettered, claimed.dead_letters);
      if (!claimed.messages.empty()) {
        q.metrics.observe(topic, group.name, Histogram::kClaim,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                              .count());
        q.metrics.count(topic, group.name, Counter::kReceived, claimed.messages.size());
        q.metrics.count(topic, group.name, Counter::kLeaseExpired, claimed.lease_expiries);
      }
      made_claimable(q, unit, claimed.promoted);
      dead_lettered += claimed.dead_lettered;
      for (Message& m : claimed.messages) messages.push_back(std::move(m));
    }
    if (!messages.empty()) return messages.size() == wanted ? ClaimTry::kGotAll : ClaimTry::kGot;
    return dead_lettered > 0 ? ClaimTry::kAgainNow : ClaimTry::kEmpty;
  }, riding != nullptr && riding->pending());
  if (riding != nullptr) riding->alone();  // a safeguard: the first try carries them
  return messages;
}

std::vector<Message> ack_and_receive(QueueContext& q, std::string_view topic,
                                     std::span<const std::string> receipts,
                                     const ReceiveOptions& options, std::vector<Settle>& settled) {
  // The options (partitions and group included) are checked before anything is acknowledged.
  check_claim_options(options.max_messages, options.wait);
  if (options.lease) check_lease(*options.lease);
  // One resolution for the whole call: the check, the acknowledgements and the claim.
  const Topic resolved = q.catalog.resolve(topic);
  (void)resolved->claim_order(resolved->layout.group(options.group), options.partitions);
  RidingAcks riding(q, *resolved, receipts);
  std::vector<Message> messages;
  try {
    messages = receive(q, *resolved, options, &riding);
  } catch (const Error& e) {
    // Not applied (or, for kCommitUnknown, not known to be): the caller's to send again.
    if (riding.pending() || e.code() == Errc::kCommitUnknown) throw;
    // Applied, and a claim after them failed (another partition, a try after a wait): their
    // outcomes are the answer; messages that claim leased come back when their leases end.
    messages.clear();
  }
  settled = std::move(riding.results());
  return messages;
}

}  // namespace txmq::internal
