#include "reference.h"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "db/connection.h"

namespace txmq::bench {

using internal::Connection;
using internal::Dsn;
using internal::Param;

namespace {

constexpr const char* kRawTable = "txmq_bench_raw";
constexpr const char* kSeedTable = "txmq_bench_seed";

std::string row_placeholders(int rows) {
  std::string s;
  s.reserve(static_cast<std::size_t>(rows) * 4);
  for (int i = 0; i < rows; ++i) s += i == 0 ? "(?)" : ",(?)";
  return s;
}

// INSERTs rows_per_txn rows per transaction into `table`'s `column`.
void insert_rows(Connection& c, const char* table, const char* column, int rows, int rows_per_txn,
                 std::size_t payload, Latencies* latencies) {
  // Made before the first statement, as txmq's side makes its batch before the clock starts.
  const std::vector<std::string> payloads =
      make_payloads(payload, 1, static_cast<std::size_t>(rows_per_txn));
  std::vector<Param> params(payloads.begin(), payloads.end());
  for (int done = 0; done < rows; done += rows_per_txn) {
    const int n = std::min(rows_per_txn, rows - done);
    params.resize(static_cast<std::size_t>(n));
    const std::string sql =
        fmt::format("INSERT INTO {} ({}) VALUES {}", table, column, row_placeholders(n));
    const auto start = SteadyClock::now();
    c.begin();
    c.execute(sql, params);
    c.commit();
    if (latencies != nullptr) latencies->add_since(start);
  }
}

}  // namespace

void prepare_reference_tables(const Dsn& dsn) {
  Connection c(dsn);
  c.query(fmt::format("CREATE TABLE IF NOT EXISTS {} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY "
                      "KEY, payload LONGBLOB NOT NULL) ENGINE=InnoDB",
                      kRawTable));
  // The seed's table as the article has it (message widened to hold any payload size).
  c.query(fmt::format("CREATE TABLE IF NOT EXISTS {} (id BIGINT PRIMARY KEY AUTO_INCREMENT, "
                      "owner VARBINARY(255), dequeued_time DATETIME, message LONGBLOB NOT NULL) "
                      "ENGINE=InnoDB",
                      kSeedTable));
  c.query(fmt::format("TRUNCATE TABLE {}", kRawTable));
  c.query(fmt::format("TRUNCATE TABLE {}", kSeedTable));
}

void drop_reference_tables(const Dsn& dsn) {
  Connection c(dsn);
  c.query(fmt::format("DROP TABLE IF EXISTS {}, {}", kRawTable, kSeedTable));
}

Measured raw_insert(const Dsn& dsn, int threads, double seconds, std::size_t payload) {
  {
    Connection c(dsn);
    c.query(fmt::format("TRUNCATE TABLE {}", kRawTable));
  }
  std::vector<std::unique_ptr<Connection>> connections;
  for (int i = 0; i < threads; ++i) connections.push_back(std::make_unique<Connection>(dsn));
  const std::string sql = fmt::format("INSERT INTO {} (payload) VALUES (?)", kRawTable);
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(threads, [&](int t, Latencies& lat) {
    Connection& c = *connections[static_cast<std::size_t>(t)];
    const std::vector<std::string> payloads = make_payloads(payload, static_cast<std::uint64_t>(t));
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const std::string& p = payloads[n % payloads.size()];
      const auto start = SteadyClock::now();
      c.execute(sql, {std::string_view(p)});
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured raw_multirow(const Dsn& dsn, int rows, int rows_per_txn, std::size_t payload) {
  Connection c(dsn);
  c.query(fmt::format("TRUNCATE TABLE {}", kRawTable));
  return run_threads(1, [&](int, Latencies& lat) {
    insert_rows(c, kRawTable, "payload", rows, rows_per_txn, payload, &lat);
    return static_cast<std::uint64_t>(rows);
  });
}

void seed_fill(const Dsn& dsn, int backlog, std::size_t payload) {
  Connection c(dsn);
  c.query(fmt::format("TRUNCATE TABLE {}", kSeedTable));
  insert_rows(c, kSeedTable, "message", backlog, 1000, payload, nullptr);
}

Measured seed_drain(const Dsn& dsn, int consumers, double cap_seconds) {
  std::vector<std::unique_ptr<Connection>> connections;
  for (int i = 0; i < consumers; ++i) connections.push_back(std::make_unique<Connection>(dsn));
  // The article's three statements, verbatim but for the table name and bound owner.
  const std::string claim = fmt::format(
      "UPDATE {} SET owner = ?, dequeued_time = NOW() WHERE owner IS NULL OR dequeued_time < "
      "SUBTIME(NOW(), SEC_TO_TIME(60)) LIMIT 10",
      kSeedTable);
  const std::string fetch = fmt::format("SELECT id, message FROM {} WHERE owner = ?", kSeedTable);
  const std::string remove = fmt::format("DELETE FROM {} WHERE owner = ?", kSeedTable);
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(cap_seconds);
  return run_threads(consumers, [&](int t, Latencies& lat) {
    Connection& c = *connections[static_cast<std::size_t>(t)];
    const std::string owner = fmt::format("seed-consumer-{}", t);
    const Param me = std::string_view(owner);
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      if (c.execute(claim, {me}).affected_rows == 0) break;
      n += c.execute(fetch, {me}).rows.size();
      c.execute(remove, {me});
      lat.add_since(start);
    }
    return n;
  });
}

}  // namespace txmq::bench
