// ack, nack and extend: each applies only while the receipt's lease token is still the row's.
#include "engine/settle.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_set>

#include "engine/attributes.h"
#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/announce.h"
#include "engine/archive.h"
#include "catalog/keys.h"
#include "engine/queue_context.h"
#include "engine/retry.h"
#include "engine/send.h"

namespace txmq::internal {
namespace {

// Why a fenced statement touched no row: the row is gone, or another lease holds it.
Settle classify_miss(Connection& c, const TopicTables& t, std::uint64_t id) {
  Result r = c.execute(fmt::format("SELECT lease_token FROM {} WHERE {}id = ?", t.queue, t.q_and),
                       {id});
  return r.rows.empty() ? Settle::kNotFound : Settle::kLeaseLost;
}

}  // namespace

std::string archive_sql(const TopicTables& t, std::string_view where) {
  return fmt::format("INSERT INTO {} ({}id, enqueued_at, acked_at, msg_key, payload, attributes) "
                     "SELECT {}id, enqueued_at, NOW(6), msg_key, payload, attributes FROM {} {} ON "
                     "DUPLICATE KEY UPDATE acked_at = VALUES(acked_at)",
                     t.archive, t.s_col, t.s_val, t.queue, where);
}

std::vector<std::uint64_t> move_to_dead_letters(QueueContext& q, Connection& c,
                                                const TopicInfo& topic, const TopicTables& t,
                                                std::vector<Param> ids) {
  const std::size_t n = in_list_size(ids.size());
  pad_ids(ids, 0, n);
  if (!topic.options.dead_letter_topic.empty()) {
    // Sent into the target in this transaction: it commits with their delete, or neither does.
    Result rows = c.execute(fmt::format("SELECT id, msg_key, payload, attributes FROM {} WHERE "
                                        "{}id IN {} ORDER BY id",
                                        t.queue, t.q_and, placeholders(n)),
                            ids);
    std::vector<OutgoingMessage> messages;
    messages.reserve(rows.rows.size());
    for (Row& row : rows.rows) {
      OutgoingMessage m;
      m.key = row.opt_bytes(1);
      m.payload = row.take_bytes(2);
      std::optional<MessageOrigin> origin;
      if (!row.null(3)) m.attributes = decode_attributes(row.bytes(3), &origin);
      // A message dead-lettered twice keeps its first origin.
      if (!origin) origin = MessageOrigin{topic.name, row.u64(0)};
      add_origin(m.attributes, *origin);
      messages.push_back(std::move(m));
    }
    const TopicInfo target = q.catalog.get(topic.options.dead_letter_topic);
    insert_messages(q, c, target, messages);
  } else {
    c.execute(
      fmt::format("INSERT INTO {} ({}id, attempts, last_owner, enqueued_at, died_at, msg_key, "
                  "payload, attributes) SELECT {}q.id, q.attempts, c.name, q.enqueued_at, NOW(6), "
                  "q.msg_key, q.payload, q.attributes FROM {} AS q LEFT JOIN txmq_consumers AS c "
                  "ON c.id = q.owner_id WHERE {}q.id IN {}",
                  t.dead, t.q_col, t.q_val, t.queue, t.shared() ? "q." + t.q_and : "",
                  placeholders(n)),
      ids);
  }
  return delete_finished(c, t, std::move(ids));
}

std::vector<std::uint64_t> delete_finished(Connection& c, const TopicTables& t,
                                           std::vector<Param> ids) {
  const std::size_t count = ids.size();
  const std::size_t n = in_list_size(count);
  pad_ids(ids, 0, n);
  ids.emplace_back(static_cast<std::int64_t>(count));
  Result deleted = delete_returning(
      c, t.queue,
      fmt::format("WHERE {}id IN {}{}", t.q_and, placeholders(n), walk_keys(t.id_order)),
      ids, "msg_key", "id", t.q_and);
  std::vector<std::string> keys;
  for (Row& row : deleted.rows) {
    if (!row.null(0)) keys.push_back(row.take_bytes(0));
  }
  return finish_keyed(c, t, keys);
}

namespace {

// The acknowledgements of receipts[which] (one queue table), fenced: each deletes its row only
// while the row's lease token is still the receipt's.
class FencedAck {
 public:
  FencedAck(const TopicTables& t, const std::vector<Receipt>& parsed,
            std::vector<std::size_t> which)
      : t_(t), parsed_(parsed), which_(std::move(which)) {
    const std::size_t count = which_.size();
    const std::size_t n = in_list_size(count);
    // id IN (...) lets the server walk the primary key; the lease token is the fence. Receipts
    // of one claim share its token (the usual acknowledgement: a consumer's batch): then one
    // `lease_token = ?` fences them all, which costs the server and the client less than a list
    // of (id, token) pairs (bench/experiments/claim_variants.cc, 't'). Receipts of several
    // claims (serve's grouped DeleteMessage) are fenced pair by pair: a row must match its own
    // receipt's token, not any of the group's.
    for (std::size_t i : which_) params_.push_back(parsed_[i].id);
    pad_ids(params_, 0, n);
    const std::uint64_t first_token = parsed_[which_.front()].token;
    const bool one_token = std::all_of(which_.begin(), which_.end(), [&](std::size_t i) {
      return parsed_[i].token == first_token;
    });
    // walk_keys: the primary key to just these rows, never a scan that waits on others' rows.
    if (one_token) {
      params_.push_back(first_token);
      params_.emplace_back(static_cast<std::int64_t>(count));
      where_ = fmt::format("WHERE {}id IN {} AND lease_token = ?{}", t_.q_and, placeholders(n),
                           walk_keys(t_.id_order));
      return;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const Receipt& r = parsed_[which_[std::min(i, count - 1)]];
      params_.push_back(r.id);
      params_.push_back(r.token);
    }
    std::string pairs = "(";
    for (std::size_t i = 0; i < n; ++i) pairs += i == 0 ? "(?,?)" : ",(?,?)";
    pairs += ")";
    params_.emplace_back(static_cast<std::int64_t>(count));
    where_ = fmt::format("WHERE {}id IN {} AND (id, lease_token) IN {}{}", t_.q_and,
                         placeholders(n), pairs, walk_keys(t_.id_order));
  }

  const TopicTables& tables() const { return t_; }

  // Locks the fenced rows and copies them into the archive (in the caller's transaction).
  void archive(Connection& c) const {
    // Lock the rows this lease holds, then copy them: a consistent read could copy a row
    // another consumer leases before the delete.
    c.execute(fmt::format("SELECT id FROM {} {} FOR UPDATE", t_.queue, where_), params_);
    c.execute(archive_sql(t_, where_), params_);
  }

  // Deletes the fenced rows; returns the deleted ones' id, key and end-to-end latency.
  Result delete_returning(Connection& c) const {
    return internal::delete_returning(c, t_.queue, where_, params_, kAcked, "id", t_.q_and);
  }

  // As delete_returning, where the rows have no key (or, in autocommit, where a key's move
  // may follow in a transaction of its own). MySQL has no DELETE ... RETURNING: there a plain
  // SELECT reads what the DELETE will take (ids, keys, latencies), then the DELETE runs: two
  // statements, where delete_returning's locking SELECT, DELETE and COMMIT cost a round trip and
  // a statement more in autocommit (docs/benchmarks.md, "MySQL 9.7 beside MariaDB 10.11"). Rows
  // only ever leave the condition (a lease token never comes back), so a DELETE that took as
  // many rows as the SELECT saw took exactly those. One that took fewer (a lease changed hands
  // in between) leaves unknown which: then none counts as deleted here, and classify names each
  // as it finds it (gone: kNotFound, held: kLeaseLost), never kOk for a row it may not have
  // deleted.
  Result delete_unkeyed(Connection& c) const {
    if (c.server().returning()) return delete_returning(c);
    Result seen = c.execute(fmt::format("SELECT {} FROM {} {}", kAcked, t_.queue, where_), params_);
    const Result deleted = c.execute(fmt::format("DELETE FROM {} {}", t_.queue, where_), params_);
    if (deleted.affected_rows != seen.rows.size()) seen.rows.clear();
    return seen;
  }

  // Sets results[i] for the receipts whose rows `deleted` does not hold: the row is gone, or
  // another lease holds it.
  void classify(Connection& c, const Result& deleted, std::vector<Settle>& results) const {
    if (deleted.rows.size() == which_.size()) return;
    std::unordered_set<std::uint64_t> ids;
    for (const Row& row : deleted.rows) ids.insert(row.u64(0));
    for (std::size_t i : which_) {
      if (ids.count(parsed_[i].id) > 0) continue;
      // Never "ok" for a row that is gone on a retry: the pool retries only what did not take
      // effect (a rolled-back transaction, a statement never sent or refused by a node), so
      // another consumer's lease acknowledged or dead-lettered it. (Counting such a miss as
      // ours let an ack whose node froze report ok after a peer took the message over.)
      results[i] = classify_miss(c, t_, parsed_[i].id);
    }
  }

  // The end-to-end latencies, in seconds, of the deleted rows.
  static std::vector<double> latencies(const Result& deleted) {
    std::vector<double> seconds;
    seconds.reserve(deleted.rows.size());
    for (const Row& row : deleted.rows) seconds.push_back(static_cast<double>(row.i64(2)) / 1e6);
    return seconds;
  }

  // The keys of the deleted rows (theirs to move on).
  static std::vector<std::string> keys(Result& deleted) {
    std::vector<std::string> keys;
    for (Row& row : deleted.rows) {
      if (!row.null(1)) keys.push_back(row.take_bytes(1));
    }
    return keys;
  }

 private:
  // What an ack reads of each row it deletes: id, key, end-to-end latency.
  static constexpr std::string_view kAcked =
      "id, msg_key, TIMESTAMPDIFF(MICROSECOND, enqueued_at, NOW(6))";

  const TopicTables& t_;
  const std::vector<Receipt>& parsed_;
  const std::vector<std::size_t> which_;
  std::vector<Param> params_;
  std::string where_;
};

// Acknowledges receipts[which] in one DELETE: in autocommit for messages without a key; in a
// transaction that also moves each key's next message in for keyed ones (kKeyedTokenBit).
// Returns the ids moved in. `acked` gets the end-to-end latency, in seconds, of each message
// deleted.
std::vector<std::uint64_t> ack_chunk(QueueContext& q, const TopicTables& t,
                                     const std::vector<Receipt>& parsed,
                                     std::vector<std::size_t> which, bool keyed, bool archive,
                                     std::vector<Settle>& results, std::vector<double>& acked) {
  const FencedAck fenced(t, parsed, std::move(which));
  if (keyed || archive) {
    return q.pool.run(OnLostConnection::kRetry, Work::kTransaction,
                      [&](Connection& c, const Attempt&) {
                        c.begin();
                        if (archive) fenced.archive(c);
                        Result r = fenced.delete_returning(c);
                        fenced.classify(c, r, results);
                        acked = FencedAck::latencies(r);
                        std::vector<std::uint64_t> promoted = finish_keyed(c, t, FencedAck::keys(r));
                        c.commit();
                        return promoted;
                      });
  }
  std::vector<std::string> stray_keys;
  // In autocommit: a reply lost after the DELETE was sent leaves its outcome unknown:
  // kCommitUnknown, not a guess (the message comes back if the delete did not happen).
  q.pool.run(OnLostConnection::kCommitUnknown, [&](Connection& c, const Attempt&) {
    Result r = fenced.delete_unkeyed(c);
    fenced.classify(c, r, results);
    acked = FencedAck::latencies(r);
    stray_keys = FencedAck::keys(r);
  });
  if (stray_keys.empty()) return {};
  // A keyed message acknowledged with a receipt that does not say so: one handed out before
  // schema version 4. Its key still moves on, in a transaction of its own.
  return q.pool.run(OnLostConnection::kRetry, Work::kTransaction,
                    [&](Connection& c, const Attempt&) {
                      c.begin();
                      std::vector<std::uint64_t> promoted = finish_keyed(c, t, stray_keys);
                      c.commit();
                      return promoted;
                    });
}

// The queue a receipt's message is in; none when its group or partition is not in the topic (a
// dropped group's receipts find nothing to settle).
const QueueRef* unit_of_receipt(const ResolvedTopic& topic, const Receipt& r) {
  return topic.queue(r.group, partition_of(r.id));
}

// Deletes a bounded batch of archive rows past the topic's retention, at most every 10 s per
// client and topic (at once again when it found a full batch). Never throws: the acks are done.
void purge_archive_now_and_then(QueueContext& q, const TopicInfo& topic, const TopicTables& wide) {
  if (topic.options.archive == Micros{0} || !q.archive_purges.due(topic.name)) return;
  try {
    q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      const std::uint64_t gone =
          purge_archive_rows(c, wide, topic.options.archive);
      q.archive_purges.done(topic.name, gone == kArchivePurgeRows);
    });
  } catch (const Error&) {
  }
}

}  // namespace

std::vector<AckChunk> ack_chunks(const ResolvedTopic& topic, const std::vector<Receipt>& parsed,
                                 const std::vector<std::size_t>& indices) {
  constexpr std::size_t kChunk = 512;
  std::map<std::tuple<unsigned, unsigned, bool>, std::vector<std::size_t>> by_queue;
  for (std::size_t i : indices) {
    const bool keyed = (parsed[i].token & kKeyedTokenBit) != 0;
    by_queue[{parsed[i].group, partition_of(parsed[i].id), keyed}].push_back(i);
  }
  std::vector<AckChunk> chunks;
  for (const auto& [where, which] : by_queue) {
    const auto [group, partition, keyed] = where;
    for (std::size_t from = 0; from < which.size(); from += kChunk) {
      AckChunk& chunk = chunks.emplace_back();
      chunk.unit = topic.queue(group, partition);
      chunk.group = topic.group_name(group);
      chunk.keyed = keyed;
      chunk.which.assign(which.begin() + static_cast<std::ptrdiff_t>(from),
                         which.begin() + static_cast<std::ptrdiff_t>(
                                             std::min(which.size(), from + kChunk)));
    }
  }
  return chunks;
}

void count_acked(QueueContext& q, std::string_view topic, std::string_view group,
                 const std::vector<double>& acked) {
  q.metrics.count(topic, group, Counter::kAcked, acked.size());
  for (double seconds : acked) q.metrics.observe(topic, group, Histogram::kEndToEnd, seconds);
}

std::vector<Settle> ack(QueueContext& q, std::string_view topic,
                        std::span<const std::string> receipts) {
  return ack(q, *q.catalog.resolve(topic), receipts);
}

std::vector<Settle> ack(QueueContext& q, const ResolvedTopic& resolved,
                        std::span<const std::string> receipts) {
  const std::string& topic = resolved.name();
  const bool archive = resolved.options().archive > Micros{0};
  std::vector<Receipt> parsed;
  parsed.reserve(receipts.size());
  for (const std::string& r : receipts) parsed.push_back(Receipt::parse(r));
  std::vector<Settle> results(parsed.size(), Settle::kOk);
  if (parsed.empty()) return results;
  std::vector<std::size_t> known;
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    if (unit_of_receipt(resolved, parsed[i]) != nullptr) {
      known.push_back(i);
    } else {
      results[i] = Settle::kNotFound;
    }
  }
  const std::vector<AckChunk> chunks = ack_chunks(resolved, parsed, known);
  std::vector<double> acked;
  on_topic(q, topic, [&] {
    for (const AckChunk& chunk : chunks) {
      made_claimable(q, *chunk.unit,
                     ack_chunk(q, chunk.unit->tables, parsed, chunk.which, chunk.keyed, archive,
                               results, acked));
      count_acked(q, topic, chunk.group, acked);
    }
  });
  purge_archive_now_and_then(q, resolved.info(), resolved.topic_wide);
  return results;
}

RidingAcks::RidingAcks(QueueContext& q, const ResolvedTopic& topic,
                       std::span<const std::string> receipts)
    : q_(q), topic_(topic) {
  const bool archive = topic.options().archive > Micros{0};
  parsed_.reserve(receipts.size());
  for (const std::string& r : receipts) parsed_.push_back(Receipt::parse(r));
  results_.assign(parsed_.size(), Settle::kOk);
  std::vector<std::string> now;  // acknowledged at once: keyed, archived, not in the layout
  std::vector<std::size_t> now_at;
  std::vector<std::size_t> riding;
  for (std::size_t i = 0; i < parsed_.size(); ++i) {
    const Receipt& r = parsed_[i];
    if (archive || (r.token & kKeyedTokenBit) != 0 || unit_of_receipt(topic, r) == nullptr) {
      now.push_back(receipts[i]);
      now_at.push_back(i);
    } else {
      riding.push_back(i);
    }
  }
  if (!now.empty()) {
    const std::vector<Settle> settled = ack(q, topic, now);
    for (std::size_t k = 0; k < now_at.size(); ++k) results_[now_at[k]] = settled[k];
  }
  for (AckChunk& chunk : ack_chunks(topic, parsed_, riding)) {
    chunks_.push_back(Chunk{std::move(chunk), {}, {}});
  }
}

void RidingAcks::apply(Connection& c) {
  for (Chunk& chunk : chunks_) {
    const AckChunk& receipts = chunk.receipts;
    for (std::size_t i : receipts.which) results_[i] = Settle::kOk;
    const FencedAck fenced(receipts.unit->tables, parsed_, receipts.which);
    Result r = fenced.delete_returning(c);
    fenced.classify(c, r, results_);
    chunk.acked = FencedAck::latencies(r);
    // Keys only of receipts handed out before schema version 4, which do not say so.
    chunk.promoted = finish_keyed(c, receipts.unit->tables, FencedAck::keys(r));
  }
}

void RidingAcks::committed() {
  for (const Chunk& chunk : chunks_) {
    made_claimable(q_, *chunk.receipts.unit, chunk.promoted);
    count_acked(q_, topic_.name(), chunk.receipts.group, chunk.acked);
  }
  chunks_.clear();
}

void RidingAcks::alone() {
  if (!pending()) return;
  on_topic(q_, topic_.name(), [&] {
    q_.pool.run(OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
      c.begin();
      apply(c);
      c.commit();
    });
  });
  committed();
}

Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt,
            std::optional<Micros> delay) {
  if (delay && (*delay < Micros{0} || *delay > std::chrono::hours(24 * 366))) {
    throw Error(Errc::kInvalidArgument, "nack delay must be from 0 to 366 days");
  }
  const Receipt r = Receipt::parse(receipt);
  const Topic resolved = q.catalog.resolve(topic);
  const TopicInfo& info = resolved->info();
  const QueueRef* unit = unit_of_receipt(*resolved, r);
  if (unit == nullptr) return Settle::kNotFound;
  const TopicTables& t = unit->tables;
  std::vector<std::uint64_t> promoted;
  Micros applied{0};
  bool dead_lettered = false;
  const Settle settle = on_topic(q, topic, [&] {
    return q.pool.run(
        OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
          promoted.clear();
          dead_lettered = false;
          c.begin();
          Result row = c.execute(
              fmt::format("SELECT attempts, lease_token FROM {} WHERE {}id = ? FOR UPDATE",
                          t.queue, t.q_and),
              {r.id});
          if (row.rows.empty()) {
            c.commit();
            return Settle::kNotFound;
          }
          if (row.rows[0].u64(1) != r.token) {
            c.commit();
            return Settle::kLeaseLost;
          }
          const std::int64_t attempts = row.rows[0].i64(0);
          if (past_max_attempts(info.options, attempts)) {
            promoted = move_to_dead_letters(q, c, info, t, {r.id});
            dead_lettered = true;
          } else {
            // This was delivery number `attempts`, the attempts - 1 before it failed too.
            applied = delay ? *delay : retry_delay(info.options.retry, attempts - 1);
            c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL ? MICROSECOND, "
                                  "lease_token = 0, owner_id = 0 WHERE {}id = ?",
                                  t.queue, t.q_and),
                      {static_cast<std::int64_t>(applied.count()), r.id});
          }
          c.commit();
          return Settle::kOk;
        });
  });
  if (settle == Settle::kOk) {
    const std::string_view group = resolved->group_name(r.group);
    q.metrics.count(topic, group, Counter::kNacked, 1);
    if (dead_lettered) q.metrics.count(topic, group, Counter::kDeadLettered, 1);
    q.hints.lower(t.rows_key, r.id);
    made_claimable(q, *unit, promoted);
    // Claimable at once: wake a waiting consumer (a delayed one is seen when it falls due).
    if (applied == Micros{0} && promoted.empty()) q.waiters.announce(unit->channel, 1);
  }
  return settle;
}

void release(QueueContext& q, std::string_view topic, std::span<const std::string> receipts) {
  if (receipts.empty()) return;
  const Topic resolved = q.catalog.resolve(topic);
  for (const std::string& text : receipts) {
    const Receipt r = Receipt::parse(text);
    const QueueRef* unit = unit_of_receipt(*resolved, r);
    if (unit == nullptr) continue;
    const Result u = q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      return c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6), attempts = "
                                   "GREATEST(attempts, 1) - 1, lease_token = 0, owner_id = 0 "
                                   "WHERE {}id = ? AND lease_token = ?",
                                   unit->tables.queue, unit->tables.q_and),
                       {r.id, r.token});
    });
    if (u.affected_rows == 0) continue;
    q.hints.lower(unit->tables.rows_key, r.id);
    q.waiters.announce(unit->channel, 1);
  }
}

namespace {

void check_lease(Micros lease) {
  if (lease < Micros{0} || lease > std::chrono::hours(12)) {
    throw Error(Errc::kInvalidArgument, "lease must be from 0 to 12 hours");
  }
}

// The UPDATE that moves the lease end of the rows `ids` picks ("id = ?", "id IN (...)"; the ids,
// then the token, bound after the lease's parameters). As at the claim: peers may take a message
// at the new lease end plus the retry delay. A lease of 0 gives it back now, with no retry delay
// and no failure counted (SQS's visibility 0); its token stays, so the receipt still settles it
// until someone claims it again.
std::string extend_sql(const TopicTables& t, Micros lease, std::string_view ids) {
  return lease > Micros{0}
             ? fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL (? + {}) MICROSECOND "
                           "WHERE {}{} AND lease_token = ?",
                           t.queue, retry_delay_sql("GREATEST(attempts, 1) - 1"), t.q_and, ids)
             : fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL ? MICROSECOND WHERE {}{} "
                           "AND lease_token = ?",
                           t.queue, t.q_and, ids);
}

std::vector<Param> extend_params(const TopicInfo& info, Micros lease) {
  std::vector<Param> params = {static_cast<std::int64_t>(lease.count())};
  if (lease > Micros{0}) bind_retry_delay(params, info.options.retry);
  return params;
}

}  // namespace

Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease) {
  check_lease(lease);
  const Receipt r = Receipt::parse(receipt);
  const Topic resolved = q.catalog.resolve(topic);
  const QueueRef* unit = unit_of_receipt(*resolved, r);
  if (unit == nullptr) return Settle::kNotFound;
  const TopicTables& t = unit->tables;
  std::vector<Param> params = extend_params(resolved->info(), lease);
  params.push_back(r.id);
  params.push_back(r.token);
  const std::string sql = extend_sql(t, lease, "id = ?");
  return on_topic(q, topic, [&] {
    return q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      Result u = c.execute(sql, params);
      return u.affected_rows == 1 ? Settle::kOk : classify_miss(c, t, r.id);
    });
  });
}

std::vector<Settle> extend(QueueContext& q, std::string_view topic,
                           std::span<const std::string> receipts, Micros lease) {
  check_lease(lease);
  std::vector<Settle> results(receipts.size(), Settle::kNotFound);
  if (receipts.empty()) return results;
  const Topic resolved = q.catalog.resolve(topic);
  std::vector<Receipt> parsed;
  parsed.reserve(receipts.size());
  for (const std::string& receipt : receipts) parsed.push_back(Receipt::parse(receipt));
  // Receipts by queue table and lease token, in order; a receipt of no queue stays kNotFound.
  std::map<std::pair<const QueueRef*, std::uint64_t>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    if (const QueueRef* unit = unit_of_receipt(*resolved, parsed[i]); unit != nullptr) {
      groups[{unit, parsed[i].token}].push_back(i);
    }
  }
  on_topic(q, topic, [&] {
    for (const auto& [group, which] : groups) {
      const TopicTables& t = group.first->tables;
      std::vector<Param> ids;
      ids.reserve(which.size());
      for (std::size_t i : which) ids.push_back(parsed[i].id);
      std::size_t from = 0;  // the chunk's first place in `which`
      for_in_lists(ids, [&](const std::string& list, std::vector<Param>& chunk, std::size_t count) {
        std::vector<Param> params = extend_params(resolved->info(), lease);
        params.insert(params.end(), chunk.begin(), chunk.end());
        params.push_back(group.second);
        const std::string sql = extend_sql(t, lease, "id IN " + list);
        q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
          const Result u = c.execute(sql, params);
          if (u.affected_rows == count) {
            for (std::size_t k = from; k < from + count; ++k) results[which[k]] = Settle::kOk;
            return;
          }
          // Some missed: the rows that still hold this token were extended by the UPDATE; the
          // others are gone or leased by another claim.
          std::vector<Param> fenced = chunk;
          fenced.push_back(group.second);
          std::unordered_set<std::uint64_t> held;
          for (const Row& row :
               c.execute(fmt::format("SELECT id FROM {} WHERE {}id IN {} AND lease_token = ?",
                                     t.queue, t.q_and, list),
                         fenced)
                   .rows) {
            held.insert(row.u64(0));
          }
          for (std::size_t k = from; k < from + count; ++k) {
            const std::uint64_t id = parsed[which[k]].id;
            results[which[k]] = held.count(id) > 0 ? Settle::kOk : classify_miss(c, t, id);
          }
        });
        from += count;
        return Result{};
      });
    }
  });
  return results;
}

}  // namespace txmq::internal
