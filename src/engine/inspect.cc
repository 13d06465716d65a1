// Read-side views (stats, in-flight, dead letters) and the requeue of dead letters.
#include "engine/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include "engine/attributes.h"
#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/archive.h"
#include "engine/claim.h"
#include "catalog/keys.h"
#include "engine/queue_context.h"

namespace txmq::internal {
namespace {

// fn(Connection&, const Attempt&) on the topic's tables, retried like any read.
template <typename F>
auto run_on_topic(QueueContext& q, std::string_view topic, F&& fn) {
  q.catalog.get(topic);  // a clear "does not exist" before any statement
  return on_topic(q, topic, [&] { return q.pool.run(OnLostConnection::kRetry, fn); });
}

constexpr std::size_t kRequeueChunk = 1000;


// The group's queues, one per partition.
std::vector<QueueRef> group_units(QueueContext& q, std::string_view topic,
                                        std::string_view group) {
  const Topic resolved = q.catalog.resolve(topic);
  std::vector<QueueRef> units;
  for (const QueueRef* unit : resolved->claim_order(resolved->layout.group(group), {})) {
    units.push_back(*unit);
  }
  return units;
}

// The `limit` lowest ids of a group over its partitions: read(c, tables) lists one partition's
// lowest, sorted by id.
template <typename Read>
auto lowest_of_group(QueueContext& q, std::string_view topic, std::string_view group,
                     std::size_t limit, Read&& read) {
  decltype(read(std::declval<Connection&>(), std::declval<const TopicTables&>())) all;
  for (const QueueRef& unit : group_units(q, topic, group)) {
    auto part = run_on_topic(q, topic, [&](Connection& c, const Attempt&) {
      return read(c, unit.tables);
    });
    std::move(part.begin(), part.end(), std::back_inserter(all));
    // Kept at `limit` as the partitions come: never limit x partitions rows at once.
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    if (all.size() > limit) all.resize(limit);
  }
  return all;
}

// A queue table's rows by state: all of them (limit 0), or the `limit` with the lowest or the
// highest ids.
struct QueueSample {
  std::uint64_t rows = 0;
  std::uint64_t ready = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t delayed = 0;
  double oldest_ready_age = 0;  // seconds; 0 when none is ready
  double oldest_age = 0;
  std::uint64_t first_id = 0;
  std::uint64_t last_id = 0;
};

double age_of(const Row& row, std::size_t i) {
  return row.null(i) ? 0.0 : static_cast<double>(row.i64(i)) / 1e6;
}

// `scope`: "qid = N AND " for a queue in shared storage (TopicTables::q_and), else "".
QueueSample sample_queue(Connection& c, const std::string& table, const std::string& scope,
                         std::uint64_t limit, bool highest) {
  const std::string from =
      limit == 0 && scope.empty()
          ? table
          : fmt::format("(SELECT id, visible_at, lease_token, enqueued_at FROM {}{} WHERE {}TRUE "
                        "ORDER BY id {}{}) AS s",
                        table, scope.empty() ? "" : " FORCE INDEX (PRIMARY)", scope,
                        highest ? "DESC" : "ASC", limit == 0 ? "" : " LIMIT ?");
  std::vector<Param> params;
  if (limit != 0) params.push_back(limit);
  Result r = c.execute(
      fmt::format("SELECT COUNT(*), CAST(COALESCE(SUM(visible_at <= n.now), 0) AS UNSIGNED),"
                  " CAST(COALESCE(SUM(visible_at > n.now AND lease_token <> 0), 0) AS UNSIGNED),"
                  " CAST(COALESCE(SUM(visible_at > n.now AND lease_token = 0), 0) AS UNSIGNED),"
                  " TIMESTAMPDIFF(MICROSECOND, MIN(IF(visible_at <= n.now, enqueued_at, NULL)),"
                  " n.now), TIMESTAMPDIFF(MICROSECOND, MIN(enqueued_at), n.now),"
                  " CAST(COALESCE(MIN(id), 0) AS UNSIGNED), CAST(COALESCE(MAX(id), 0) AS UNSIGNED)"
                  " FROM {} CROSS JOIN (SELECT NOW(6) AS now) AS n",
                  from),
      params);
  const Row& row = r.rows.at(0);
  return {row.u64(0), row.u64(1), row.u64(2), row.u64(3), age_of(row, 4), age_of(row, 5),
          row.u64(6),  row.u64(7)};
}

// Rows of a table keyed by an increasing number (`key`), with the age of the oldest: all of them
// (limit 0), or the `limit` lowest or highest keys.
struct KeySample {
  std::uint64_t rows = 0;
  double oldest_age = 0;
  std::uint64_t first = 0;
  std::uint64_t last = 0;
};

KeySample sample_keys(Connection& c, const std::string& table, const std::string& scope,
                      std::string_view key, std::uint64_t limit, bool highest) {
  const std::string from =
      limit == 0 && scope.empty()
          ? table
          : fmt::format("(SELECT {0}, enqueued_at FROM {1} WHERE {3}TRUE ORDER BY {0} {2}{4}) AS s",
                        key, table, highest ? "DESC" : "ASC", scope, limit == 0 ? "" : " LIMIT ?");
  std::vector<Param> params;
  if (limit != 0) params.push_back(limit);
  Result r = c.execute(fmt::format("SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(enqueued_at), "
                                   "NOW(6)), CAST(COALESCE(MIN({0}), 0) AS UNSIGNED), "
                                   "CAST(COALESCE(MAX({0}), 0) AS UNSIGNED) FROM {1}",
                                   key, from),
                       params);
  const Row& row = r.rows.at(0);
  return {row.u64(0), age_of(row, 1), row.u64(2), row.u64(3)};
}

// The rows between two samples of at most `limit` rows each (lowest, highest), from the density
// of the keys in them; nullopt when the samples overlap or touch (the table has at most
// 2 * limit rows: count them).
std::optional<double> rows_between(std::uint64_t low_rows, std::uint64_t low_first,
                                   std::uint64_t low_last, std::uint64_t high_rows,
                                   std::uint64_t high_first, std::uint64_t high_last) {
  if (high_first <= low_last + 1) return std::nullopt;
  const double spans = static_cast<double>(low_last - low_first + 1) +
                       static_cast<double>(high_last - high_first + 1);
  const double density = std::min(1.0, static_cast<double>(low_rows + high_rows) / spans);
  return static_cast<double>(high_first - low_last - 1) * density;
}

// A table's row count and oldest age, exact up to 2 * limit rows (limit 0: always).
std::pair<KeySample, bool> count_keys(Connection& c, const std::string& table,
                                      const std::string& scope, std::string_view key,
                                      std::uint64_t limit) {
  KeySample low = sample_keys(c, table, scope, key, limit, false);
  if (limit == 0 || low.rows < limit) return {low, false};
  const KeySample high = sample_keys(c, table, scope, key, limit, true);
  const std::optional<double> middle =
      rows_between(low.rows, low.first, low.last, high.rows, high.first, high.last);
  if (!middle) return {sample_keys(c, table, scope, key, 0, false), false};
  low.rows += high.rows + static_cast<std::uint64_t>(std::llround(*middle));
  return {low, true};
}

// As run_on_topic, for reads that find a topic without tables (made at its first use) empty:
// nothing is made for them, so that metrics and dashboards over thousands of unused topics
// leave them as cheap as they are. `empty`: the result then.
template <typename F, typename T>
T read_on_topic(QueueContext& q, std::string_view topic, F&& fn, T empty) {
  q.catalog.get(topic);
  try {
    return q.pool.run(OnLostConnection::kRetry, fn);
  } catch (const Error& e) {
    if (!is_missing_table(e.server_errno())) rethrow_for_topic(q.catalog, e, topic);
  }
  q.catalog.forget(topic);
  q.catalog.get(topic);  // kNotFound when it was dropped meanwhile
  return empty;
}

TopicStats stats_of(QueueContext& q, std::string_view topic, const QueueRef& unit,
                    std::uint64_t exact_up_to) {
  const TopicTables& t = unit.tables;
  TopicStats none;
  none.topic = std::string(topic);
  return read_on_topic(q, topic, [&](Connection& c, const Attempt&) {
    TopicStats s;
    s.topic = std::string(topic);
    QueueSample low = sample_queue(c, t.queue, t.q_and, exact_up_to, false);
    if (exact_up_to != 0 && low.rows >= exact_up_to) {
      const QueueSample high = sample_queue(c, t.queue, t.q_and, exact_up_to, true);
      const std::optional<double> middle = rows_between(low.rows, low.first_id, low.last_id,
                                                        high.rows, high.first_id, high.last_id);
      if (!middle) {
        low = sample_queue(c, t.queue, t.q_and, 0, false);
      } else {
        // The ids between are taken as the highest ones are: not yet reached by consumers
        // (claims go in id order), so in the same mix of ready and delayed.
        const auto share = [&](std::uint64_t n) {
          return n + static_cast<std::uint64_t>(
                         std::llround(*middle * static_cast<double>(n) /
                                      static_cast<double>(std::max<std::uint64_t>(high.rows, 1))));
        };
        low.ready += share(high.ready);
        low.in_flight += share(high.in_flight);
        low.delayed += share(high.delayed);
        if (low.oldest_ready_age == 0) low.oldest_ready_age = high.oldest_ready_age;
        s.estimated = true;
      }
    }
    s.ready = low.ready;
    s.in_flight = low.in_flight;
    s.delayed = low.delayed;
    s.oldest_ready_age_seconds = low.oldest_ready_age;
    const auto [dead, dead_estimated] = count_keys(c, t.dead, t.q_and, "id", exact_up_to);
    const auto [parked, parked_estimated] =
        count_keys(c, t.parked, t.q_and, "park_id", exact_up_to);
    s.dead = dead.rows;
    s.waiting_on_key = parked.rows;
    s.estimated = s.estimated || dead_estimated || parked_estimated;
    s.lag_seconds = std::max(low.oldest_age, parked.oldest_age);
    // The id counter (InnoDB's, read live): ids start at the partition's first id. (Shared
    // storage: one counter for every queue, which says nothing of this one.)
    if (t.shared()) return s;
    Result a = c.execute(
        "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = ?",
        {t.queue.substr(1, t.queue.size() - 2)});
    if (!a.rows.empty() && !a.rows[0].null(0)) {
      const std::uint64_t next = a.rows[0].u64(0);
      const std::uint64_t first = first_id_of(unit.partition);
      s.ids_taken = next > first ? next - first : 0;
    }
    return s;
  }, none);
}

}  // namespace

TopicStats stats(QueueContext& q, std::string_view topic, std::string_view group,
                 std::uint64_t exact_up_to) {
  TopicStats total;
  total.topic = std::string(topic);
  total.group = std::string(group.empty() ? kDefaultGroup : group);
  for (const QueueRef& unit : group_units(q, topic, group)) {
    const TopicStats s = stats_of(q, topic, unit, exact_up_to);
    total.ready += s.ready;
    total.in_flight += s.in_flight;
    total.delayed += s.delayed;
    total.dead += s.dead;
    total.ids_taken += s.ids_taken;
    total.waiting_on_key += s.waiting_on_key;
    total.estimated = total.estimated || s.estimated;
    total.oldest_ready_age_seconds =
        std::max(total.oldest_ready_age_seconds, s.oldest_ready_age_seconds);
    total.lag_seconds = std::max(total.lag_seconds, s.lag_seconds);
  }
  return total;
}

std::vector<InFlightMessage> in_flight(QueueContext& q, std::string_view topic,
                                       std::string_view group, std::size_t limit) {
  return lowest_of_group(q, topic, group, limit, [&](Connection& c, const TopicTables& t) {
    Result r = c.execute(fmt::format("SELECT q.id, COALESCE(c.name, CONCAT('consumer #', q.owner_id)),"
                                     " q.attempts, {} FROM {} AS q{} LEFT JOIN txmq_consumers AS c ON"
                                     " c.id = q.owner_id WHERE {}q.lease_token <> 0 AND q.visible_at >"
                                     " NOW(6) ORDER BY q.id LIMIT ?",
                                     micros_of("q.visible_at"), t.queue,
                                     t.shared() ? " FORCE INDEX (PRIMARY)" : "",
                                     t.shared() ? "q." + t.q_and : ""),
                         {static_cast<std::uint64_t>(limit)});
    std::vector<InFlightMessage> out;
    for (const Row& row : r.rows) {
      out.push_back({row.u64(0), row.bytes(1), static_cast<int>(row.i64(2)),
                     time_from_micros(row.i64(3))});
    }
    return out;
  });
}

std::vector<DeadLetter> dead_letters(QueueContext& q, std::string_view topic,
                                     std::string_view group, std::size_t limit,
                                     std::size_t payload_bytes) {
  // A preview reads only its bytes from the server: 1,000 dead letters of 1 MiB are 1 GiB.
  const bool whole = payload_bytes >= (std::size_t{1} << 32);
  return lowest_of_group(q, topic, group, limit, [&](Connection& c, const TopicTables& t) {
    std::vector<Param> params;
    if (!whole) params.emplace_back(static_cast<std::uint64_t>(payload_bytes));
    params.emplace_back(static_cast<std::uint64_t>(limit));
    Result r = c.execute(
        fmt::format("SELECT id, msg_key, {}, attempts, last_owner, {}, {}, attributes, "
                    "LENGTH(payload) FROM {} WHERE {}TRUE ORDER BY id LIMIT ?",
                    whole ? "payload" : "SUBSTRING(payload, 1, ?)", micros_of("enqueued_at"),
                    micros_of("died_at"), t.dead, t.q_and),
        params);
    std::vector<DeadLetter> out;
    for (Row& row : r.rows) {
      DeadLetter d;
      d.id = row.u64(0);
      d.key = row.opt_bytes(1);
      d.payload = row.take_bytes(2);
      d.attempts = static_cast<int>(row.i64(3));
      d.last_owner = row.null(4) ? "" : row.bytes(4);
      d.enqueued_at = time_from_micros(row.i64(5));
      d.died_at = time_from_micros(row.i64(6));
      if (!row.null(7)) d.attributes = decode_attributes(row.bytes(7));
      d.payload_size = static_cast<std::size_t>(row.u64(8));
      out.push_back(std::move(d));
    }
    return out;
  });
}

namespace {

std::size_t requeue_in(QueueContext& q, std::string_view topic, const QueueRef& unit,
                       std::span<const std::uint64_t> ids) {
  const TopicTables& t = unit.tables;
  std::size_t total = 0;
  std::size_t next = 0;  // position in ids when ids are given
  for (;;) {
    if (!ids.empty() && next >= ids.size()) break;
    std::vector<Param> wanted;
    if (!ids.empty()) {
      std::size_t to = std::min(ids.size(), next + kRequeueChunk);
      for (std::size_t i = next; i < to; ++i) wanted.push_back(ids[i]);
      next = to;
    }
    // Bounded transactions: lock a chunk of dead letters, move them, commit.
    std::size_t moved = run_on_topic(q, topic, [&](Connection& c, const Attempt&) -> std::size_t {
      c.begin();
      Result locked;
      if (wanted.empty()) {
        locked = c.execute(
            fmt::format("SELECT id, msg_key FROM {} WHERE {}TRUE ORDER BY id LIMIT ? FOR UPDATE",
                        t.dead, t.q_and),
            {static_cast<std::uint64_t>(kRequeueChunk)});
      } else {
        std::vector<Param> params = wanted;
        std::size_t n = in_list_size(params.size());
        pad_ids(params, 0, n);
        locked = c.execute(fmt::format("SELECT id, msg_key FROM {} FORCE INDEX (PRIMARY) WHERE "
                                       "{}id IN {} FOR UPDATE",
                                       t.dead, t.q_and, placeholders(n)),
                           params);
      }
      if (locked.rows.empty()) {
        c.commit();
        return 0;
      }
      std::vector<Param> found;
      for (const Row& row : locked.rows) found.push_back(row.u64(0));
      std::size_t count = found.size();
      std::size_t n = in_list_size(found.size());
      pad_ids(found, 0, n);
      // The message keeps its id (and so its place in id order) and starts again at attempt 1.
      c.execute(fmt::format("INSERT INTO {} ({}id, visible_at, attempts, lease_token, owner_id, "
                            "enqueued_at, msg_key, payload, attributes) SELECT {}id, NOW(6), 0, "
                            "0, 0, enqueued_at, msg_key, payload, attributes FROM {} WHERE {}id IN "
                            "{}",
                            t.queue, t.q_col, t.q_val, t.dead, t.q_and, placeholders(n)),
                found);
      delete_in_lists(c, t.dead, "id", std::vector<Param>(found.begin(), found.begin() + count),
                      t.q_and);
      // A keyed message goes back in line behind its key's messages, as a new send would.
      std::vector<std::pair<std::string_view, std::uint64_t>> keyed;
      for (const Row& row : locked.rows) {
        if (!row.null(1)) keyed.emplace_back(row.bytes(1), row.u64(0));
      }
      order_keyed(c, t, keyed);
      c.commit();
      q.waiters.announce(unit.channel, count);
      return count;
    });
    total += moved;
    if (ids.empty() && moved == 0) break;
  }
  // Requeued rows keep their old ids, below where this client's claims start: sweep next time.
  if (total > 0) q.hints.forget(t.rows_key);
  return total;
}

}  // namespace

namespace {

// Runs fn(unit, ids) on each of the group's partitions with the ids that live in it (all of
// them, empty, when ids is empty; a partition none of the ids live in is skipped). Returns the
// sum of what fn returns.
template <typename F>
std::size_t by_partition(QueueContext& q, std::string_view topic, std::string_view group,
                         std::span<const std::uint64_t> ids, F&& fn) {
  std::size_t total = 0;
  for (const QueueRef& unit : group_units(q, topic, group)) {
    if (ids.empty()) {
      total += fn(unit, ids);
      continue;
    }
    std::vector<std::uint64_t> mine;
    for (std::uint64_t id : ids) {
      if (partition_of(id) == unit.partition) mine.push_back(id);
    }
    if (!mine.empty()) total += fn(unit, std::span<const std::uint64_t>(mine));
  }
  return total;
}

}  // namespace

std::size_t requeue_dead(QueueContext& q, std::string_view topic, std::string_view group,
                         std::span<const std::uint64_t> ids) {
  return by_partition(q, topic, group, ids,
                      [&](const QueueRef& unit, std::span<const std::uint64_t> mine) {
                        return requeue_in(q, topic, unit, mine);
                      });
}

namespace {

// Deletes one partition's dead letters with the given ids (all of them when ids is empty), in
// autocommit statements of at most kRequeueChunk rows, so that no lock is held long.
std::size_t delete_dead_in(QueueContext& q, std::string_view topic, const QueueRef& unit,
                           std::span<const std::uint64_t> ids) {
  const TopicTables& t = unit.tables;
  std::size_t total = 0;
  if (ids.empty()) {
    for (;;) {
      const std::size_t gone = run_on_topic(q, topic, [&](Connection& c, const Attempt&) {
        return static_cast<std::size_t>(
            c.execute(fmt::format("DELETE FROM {} WHERE {}TRUE ORDER BY id LIMIT {}", t.dead,
                                  t.q_and, kRequeueChunk),
                      {})
                .affected_rows);
      });
      total += gone;
      if (gone < kRequeueChunk) return total;
    }
  }
  for (std::size_t from = 0; from < ids.size(); from += kRequeueChunk) {
    const std::size_t to = std::min(ids.size(), from + kRequeueChunk);
    std::vector<Param> wanted(ids.begin() + static_cast<std::ptrdiff_t>(from),
                              ids.begin() + static_cast<std::ptrdiff_t>(to));
    total += run_on_topic(q, topic, [&](Connection& c, const Attempt&) {
      return static_cast<std::size_t>(
          delete_in_lists(c, t.dead, "id", wanted, t.q_and).affected_rows);
    });
  }
  return total;
}

}  // namespace

std::size_t delete_dead(QueueContext& q, std::string_view topic, std::string_view group,
                        std::span<const std::uint64_t> ids) {
  return by_partition(q, topic, group, ids,
                      [&](const QueueRef& unit, std::span<const std::uint64_t> mine) {
                        return delete_dead_in(q, topic, unit, mine);
                      });
}

std::vector<ArchivedMessage> archived(QueueContext& q, std::string_view topic,
                                      std::uint64_t from_id, std::size_t limit) {
  const TopicTables t = q.catalog.layout(topic).tables();
  return run_on_topic(q, topic, [&](Connection& c, const Attempt&) {
    Result r = c.execute(fmt::format("SELECT id, msg_key, payload, {}, {}, attributes FROM {} "
                                     "WHERE {}id >= ? ORDER BY id LIMIT ?",
                                     micros_of("enqueued_at"), micros_of("acked_at"), t.archive,
                                     t.s_and),
                         {from_id, static_cast<std::uint64_t>(limit)});
    std::vector<ArchivedMessage> out;
    for (Row& row : r.rows) {
      ArchivedMessage m;
      m.id = row.u64(0);
      m.key = row.opt_bytes(1);
      m.payload = row.take_bytes(2);
      m.enqueued_at = time_from_micros(row.i64(3));
      m.acked_at = time_from_micros(row.i64(4));
      if (!row.null(5)) m.attributes = decode_attributes(row.bytes(5));
      out.push_back(std::move(m));
    }
    return out;
  });
}

std::uint64_t purge_archive_rows(Connection& c, const TopicTables& t, Micros keep) {
  return c
      .execute(fmt::format("DELETE FROM {} WHERE {}acked_at < NOW(6) - INTERVAL ? MICROSECOND "
                           "ORDER BY acked_at LIMIT {}",
                           t.archive, t.s_and, kArchivePurgeRows),
               {static_cast<std::int64_t>(keep.count())})
      .affected_rows;
}

std::uint64_t purge_archive(QueueContext& q, std::string_view topic) {
  const TopicLayout layout = q.catalog.layout(topic);
  const TopicInfo& info = layout.info;
  const TopicTables t = layout.tables();
  // With no retention (archive off), everything archived earlier is past it.
  std::uint64_t total = 0;
  for (;;) {
    const std::uint64_t gone = run_on_topic(q, topic, [&](Connection& c, const Attempt&) {
      return purge_archive_rows(c, t, info.options.archive);
    });
    total += gone;
    if (gone < kArchivePurgeRows) return total;
  }
}

}  // namespace txmq::internal
