#include "db/sql.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "txmq/error.h"

namespace txmq::internal {

std::string micros_of(std::string_view column) {
  // A datetime literal, not a string: a string is parsed again for every row (SELECT
  // BENCHMARK: 116 ns an evaluation against 96, three of them a claimed row).
  return fmt::format("TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', {})", column);
}

Clock::time_point time_from_micros(std::int64_t micros) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(Micros(micros)));
}

std::size_t in_list_size(std::size_t n) { return n <= 1 ? 1 : std::bit_ceil(n); }

std::string placeholders(std::size_t n) {
  std::string out = "(";
  for (std::size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ",?";
  return out + ")";
}

void pad_ids(std::vector<Param>& params, std::size_t from, std::size_t n) {
  Param last = params.back();
  while (params.size() - from < n) params.push_back(last);
}

Result in_lists(Connection& c, std::string_view sql, std::vector<Param> values) {
  return for_in_lists(values, [&](const std::string& list, const std::vector<Param>& params) {
    return c.execute(fmt::vformat(sql, fmt::make_format_args(list)), params);
  });
}

std::string walk_keys(std::string_view key) { return fmt::format(" ORDER BY {} LIMIT ?", key); }

Result delete_in_lists(Connection& c, std::string_view table, std::string_view key,
                       std::vector<Param> values, std::string_view scope) {
  // A shared table's rows are walked by its leading column too ("qid = N AND " scopes "qid,
  // id"): by `key` alone, the server may take a secondary index on it (txmq_sh_q's KEY ids)
  // and lock other queues' rows that share the ids (a topic's groups' copies).
  const std::string order =
      scope.empty() ? std::string(key) : fmt::format("{}, {}", scope.substr(0, 3), key);
  const std::string sql =
      fmt::format("DELETE FROM {} WHERE {}{} IN {{}}{}", table, scope, key, walk_keys(order));
  return for_in_lists(values, [&](const std::string& list, std::vector<Param>& params,
                                  std::size_t count) {
    params.emplace_back(static_cast<std::int64_t>(count));
    return c.execute(fmt::vformat(sql, fmt::make_format_args(list)), params);
  });
}

std::vector<std::uint64_t> insert_returning_ids(Connection& c, const std::string& insert,
                                                std::span<const Param> params, std::size_t rows) {
  std::vector<std::uint64_t> ids;
  ids.reserve(rows);
  if (c.server().returning()) {
    Result r = c.execute(insert + " RETURNING id", params);
    for (const Row& row : r.rows) ids.push_back(row.u64(0));
  } else {
    Result r = c.execute(insert, params);
    const std::uint64_t step = rows > 1 ? c.auto_increment_step() : 1;
    for (std::size_t i = 0; i < r.affected_rows; ++i) ids.push_back(r.insert_id + i * step);
  }
  if (ids.size() != rows) {
    throw Error(Errc::kInternal, fmt::format("an INSERT of {} rows inserted {}", rows, ids.size()));
  }
  return ids;
}

std::uint64_t delete_in_chunks(Connection& c, std::string_view table, std::string_view where,
                               std::span<const Param> params, std::uint64_t chunk) {
  const std::string sql = fmt::format("DELETE FROM {} WHERE {} LIMIT {}", table, where, chunk);
  std::uint64_t total = 0;
  for (;;) {
    const std::uint64_t gone = c.execute(sql, params).affected_rows;
    total += gone;
    if (gone < chunk) return total;
  }
}

Result delete_returning(Connection& c, std::string_view table, std::string_view where,
                        std::span<const Param> params, std::string_view columns,
                        std::string_view key, std::string_view scope) {
  if (c.server().returning()) {
    return c.execute(fmt::format("DELETE FROM {} {} RETURNING {}", table, where, columns), params);
  }
  // A transaction of its own when the caller has none: the SELECT's locks must last until the
  // DELETE. An application's connection (borrowed) may be in one that txmq did not open.
  const bool own = c.borrowed() ? !c.session_in_transaction() : !c.in_transaction();
  if (own) {
    if (c.borrowed()) {
      c.query("START TRANSACTION");  // back to the application's autocommit at COMMIT
    } else {
      c.begin();
    }
  }
  try {
    Result picked = c.execute(
        fmt::format("SELECT {}, {} FROM {} {} FOR UPDATE", key, columns, table, where), params);
    Result out;
    if (!picked.rows.empty()) {
      std::vector<Param> keys;
      keys.reserve(picked.rows.size());
      for (const Row& row : picked.rows) keys.emplace_back(row.u64(0));
      out.affected_rows = delete_in_lists(c, table, key, std::move(keys), scope).affected_rows;
      out.rows.reserve(picked.rows.size());
      for (const Row& row : picked.rows) {
        std::vector<Row::Cell> cells;
        cells.reserve(row.size() - 1);
        for (std::size_t i = 1; i < row.size(); ++i) cells.push_back(row.cell(i));
        out.rows.emplace_back(std::move(cells));
      }
    }
    if (own) {
      if (c.borrowed()) {
        c.query("COMMIT");
      } else {
        c.commit();
      }
    }
    return out;
  } catch (...) {
    if (own) {
      if (!c.borrowed()) {
        c.rollback();
      } else if (!c.broken()) {
        try {
          c.query("ROLLBACK");
        } catch (const Error&) {  // the connection failed: the server rolls back
        }
      }
    }
    throw;
  }
}

}  // namespace txmq::internal
