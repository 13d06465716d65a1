// ack, nack and extend: each applies only while the receipt's lease token is still the row's.
#include <fmt/format.h>

#include <unordered_set>

#include "queue/operations.h"

namespace txmq::internal {
namespace {

// Why a fenced statement touched no row: the row is gone, or another lease holds it.
Settle classify_miss(Connection& c, const TopicTables& t, std::uint64_t id) {
  Result r = c.execute(fmt::format("SELECT lease_token FROM {} WHERE id = ?", t.queue), {id});
  return r.rows.empty() ? Settle::kNotFound : Settle::kLeaseLost;
}

}  // namespace

void move_to_dead_letters(Connection& c, const TopicTables& t, std::vector<Param> ids) {
  const std::size_t n = in_list_size(ids.size());
  pad_ids(ids, 0, n);
  c.execute(
      fmt::format("INSERT INTO {} (id, attempts, last_owner, enqueued_at, died_at, msg_key, "
                  "payload) SELECT q.id, q.attempts, c.name, q.enqueued_at, NOW(6), q.msg_key, "
                  "q.payload FROM {} AS q LEFT JOIN txmq_consumers AS c ON c.id = q.owner_id "
                  "WHERE q.id IN {}",
                  t.dead, t.queue, placeholders(n)),
      ids);
  c.execute(fmt::format("DELETE FROM {} WHERE id IN {}", t.queue, placeholders(n)), ids);
}

std::vector<Settle> ack(QueueContext& q, std::string_view topic,
                        std::span<const std::string> receipts) {
  const TopicTables t = topic_tables(topic);
  std::vector<Receipt> parsed;
  parsed.reserve(receipts.size());
  for (const std::string& r : receipts) parsed.push_back(Receipt::parse(r));
  std::vector<Settle> results(parsed.size(), Settle::kOk);
  if (parsed.empty()) return results;
  constexpr std::size_t kChunk = 512;
  return on_topic(q, topic, [&] {
    for (std::size_t from = 0; from < parsed.size(); from += kChunk) {
      std::size_t to = std::min(parsed.size(), from + kChunk);
      std::size_t n = in_list_size(to - from);
      // id IN (...) lets the server walk the primary key; the row IN (...) is the fence.
      std::vector<Param> params;
      for (std::size_t i = from; i < to; ++i) params.push_back(parsed[i].id);
      pad_ids(params, 0, n);
      for (std::size_t i = 0; i < n; ++i) {
        const Receipt& r = parsed[std::min(from + i, to - 1)];
        params.push_back(r.id);
        params.push_back(r.token);
      }
      std::string pairs = "(";
      for (std::size_t i = 0; i < n; ++i) pairs += i == 0 ? "(?,?)" : ",(?,?)";
      pairs += ")";
      q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt& attempt) {
        Result r = c.execute(fmt::format("DELETE FROM {} WHERE id IN {} AND (id, lease_token) IN {}"
                                         " RETURNING id",
                                         t.queue, placeholders(n), pairs),
                             params);
        if (r.rows.size() == to - from) return;
        // Some were not ours any more: say which. A fenced row still there is another lease's.
        std::unordered_set<std::uint64_t> deleted;
        for (const Row& row : r.rows) deleted.insert(row.u64(0));
        for (std::size_t i = from; i < to; ++i) {
          if (deleted.count(parsed[i].id) > 0) continue;
          Settle s = classify_miss(c, t, parsed[i].id);
          // A retry after a lost reply finds its own earlier delete: that ack did land.
          if (s == Settle::kNotFound && attempt.after_connection_loss) s = Settle::kOk;
          results[i] = s;
        }
      });
    }
    return results;
  });
}

Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt, Micros delay) {
  if (delay < Micros{0} || delay > std::chrono::hours(24 * 366)) {
    throw Error(Errc::kInvalidArgument, "nack delay must be from 0 to 366 days");
  }
  const Receipt r = Receipt::parse(receipt);
  const TopicInfo info = q.catalog.get(topic);
  const TopicTables t = topic_tables(topic);
  return on_topic(q, topic, [&] {
    return q.pool.run(
        OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
          c.begin();
          Result row = c.execute(
              fmt::format("SELECT attempts, lease_token FROM {} WHERE id = ? FOR UPDATE", t.queue),
              {r.id});
          if (row.rows.empty()) {
            c.commit();
            return Settle::kNotFound;
          }
          if (row.rows[0].u64(1) != r.token) {
            c.commit();
            return Settle::kLeaseLost;
          }
          if (row.rows[0].i64(0) >= info.options.max_attempts) {
            move_to_dead_letters(c, t, {r.id});
          } else {
            c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL ? MICROSECOND, "
                                  "lease_token = 0, owner_id = 0 WHERE id = ?",
                                  t.queue),
                      {static_cast<std::int64_t>(delay.count()), r.id});
          }
          c.commit();
          q.hints.lower(topic, r.id);
          return Settle::kOk;
        });
  });
}

Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease) {
  if (lease < std::chrono::milliseconds(1) || lease > std::chrono::hours(12)) {
    throw Error(Errc::kInvalidArgument, "lease must be from 1 ms to 12 hours");
  }
  const Receipt r = Receipt::parse(receipt);
  const TopicTables t = topic_tables(topic);
  return on_topic(q, topic, [&] {
    return q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      Result u = c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL ? MICROSECOND"
                                       " WHERE id = ? AND lease_token = ?",
                                       t.queue),
                           {static_cast<std::int64_t>(lease.count()), r.id, r.token});
      return u.affected_rows == 1 ? Settle::kOk : classify_miss(c, t, r.id);
    });
  });
}

}  // namespace txmq::internal
