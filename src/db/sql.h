// SQL helpers over a connection: IN lists, multi-row statements, DATETIME(6) as microseconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.h"
#include "txmq/types.h"

namespace txmq::internal {

// Expression giving a DATETIME(6) column (UTC) as microseconds since the epoch.
std::string micros_of(std::string_view column);
Clock::time_point time_from_micros(std::int64_t micros);

// "(?,?,?)" padded to a power of two so that the number of distinct prepared statements stays
// small; pad_ids repeats the last id to fill it (a repeated id in IN changes nothing).
std::size_t in_list_size(std::size_t n);
std::string placeholders(std::size_t n);
void pad_ids(std::vector<Param>& params, std::size_t from, std::size_t n);
// Runs `sql` (which holds one "{}" for an IN list) over `values` (keys or ids) in chunks of at
// most 1,000; returns all rows and the total of affected rows.
Result in_lists(Connection& c, std::string_view sql, std::vector<Param> values);

// Rows per multi-row statement: large enough that a batch costs few round trips, small enough
// that the statement stays well inside max_allowed_packet and the 65,535 placeholder limit.
constexpr std::size_t kMaxRowsPerStatement = 1000;

// Runs `sql_head` followed by `rows` copies of `row` (and `sql_tail`) in statements of at most
// kMaxRowsPerStatement rows; bind(i, params) binds row i.
template <typename Bind>
void in_chunks(Connection& c, std::size_t rows, std::string_view sql_head, std::string_view row,
               std::string_view sql_tail, Bind&& bind) {
  std::vector<Param> params;
  for (std::size_t from = 0; from < rows; from += kMaxRowsPerStatement) {
    const std::size_t to = std::min(rows, from + kMaxRowsPerStatement);
    std::string sql(sql_head);
    for (std::size_t i = from; i < to; ++i) {
      if (i > from) sql += ',';
      sql += row;
    }
    sql += sql_tail;
    params.clear();
    for (std::size_t i = from; i < to; ++i) bind(i, params);
    c.execute(sql, params);
  }
}

}  // namespace txmq::internal
