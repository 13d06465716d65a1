// SQL helpers over a connection: IN lists, multi-row statements, DATETIME(6) as microseconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
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
// Cuts `values` (keys or ids) into chunks of at most 1,000, each padded as above, and calls
// run(placeholders, params) for each, or run(placeholders, params, count) with the number of
// values the chunk holds before its padding; returns all rows and the total of affected rows.
inline constexpr std::size_t kInListChunk = 1000;
template <typename Run>
Result for_in_lists(const std::vector<Param>& values, Run&& run) {
  Result all;
  for (std::size_t from = 0; from < values.size(); from += kInListChunk) {
    const std::size_t to = std::min(values.size(), from + kInListChunk);
    const std::size_t n = in_list_size(to - from);
    std::vector<Param> params(values.begin() + from, values.begin() + to);
    pad_ids(params, 0, n);
    Result r;
    if constexpr (std::is_invocable_v<Run, const std::string&, std::vector<Param>&,
                                      std::size_t>) {
      r = run(placeholders(n), params, to - from);
    } else {
      r = run(placeholders(n), params);
    }
    all.affected_rows += r.affected_rows;
    for (Row& row : r.rows) all.rows.push_back(std::move(row));
  }
  return all;
}
// Runs `sql` (which holds one "{}" for an IN list) over `values` in such chunks.
Result in_lists(Connection& c, std::string_view sql, std::vector<Param> values);

// " ORDER BY key LIMIT ?", for a DELETE (or a locking read) of the rows of a list of `key`s,
// bound to the list's length: it makes MariaDB walk the primary key to just those rows. Without
// it the server scans the whole table once the list holds a good part of it (EXPLAIN: type ALL
// for 9 ids of 20 rows, 50 of 200), and a locking scan waits on every row that another
// transaction holds: a held batch's for up to a second, a frozen holder's until its idle bound
// ends it, and deletes that wait on each other so deadlock or queue up behind one holder. (An
// UPDATE is spared: it reads a locked row's last committed version to see whether it is wanted.)
std::string walk_keys(std::string_view key);
// DELETE FROM table WHERE key IN (values) in chunks, each walking the key (walk_keys).
// `scope`: a condition on the key's leading columns, "qid = N AND " (shared storage), or "".
Result delete_in_lists(Connection& c, std::string_view table, std::string_view key,
                       std::vector<Param> values, std::string_view scope = "");

// DELETE FROM table WHERE `where` (a condition) in statements of at most `chunk` rows, each in
// autocommit when the caller holds no transaction, until one takes fewer: no statement holds
// many locks or much undo. Returns how many went.
std::uint64_t delete_in_chunks(Connection& c, std::string_view table, std::string_view where,
                               std::span<const Param> params, std::uint64_t chunk = 1000);

// Deletes the rows of `table` that `where` picks ("WHERE ...", maybe with "ORDER BY ... LIMIT n";
// bound by `params`) and returns `columns` (an expression list over them) of each. MariaDB: one
// DELETE ... RETURNING. MySQL has no RETURNING: a SELECT ... FOR UPDATE of the rows' `key` and
// columns, then a DELETE of those keys (the locks keep the two the same rows); in the caller's
// transaction, or in one of its own when the connection is in none.
Result delete_returning(Connection& c, std::string_view table, std::string_view where,
                        std::span<const Param> params, std::string_view columns,
                        std::string_view key = "id", std::string_view scope = "");

// Runs `insert` (an INSERT ... VALUES of `rows` rows into a table with an AUTO_INCREMENT id) and
// returns the ids given to its rows, in order. MariaDB: the statement with RETURNING id. MySQL:
// from the first id and the session's auto_increment_increment: InnoDB reserves the ids of an
// INSERT ... VALUES, whose number of rows is known before it runs, in one block under its
// auto-increment mutex, in every innodb_autoinc_lock_mode (only INSERT ... SELECT and LOAD DATA
// take them one at a time).
std::vector<std::uint64_t> insert_returning_ids(Connection& c, const std::string& insert,
                                                std::span<const Param> params, std::size_t rows);

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
