#include "sql.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "db/connection.h"
#include "txmq/error.h"
#include "txmq/transaction.h"

namespace txmq::bench {

using internal::Connection;
using internal::Dsn;

namespace {

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

// A text argument whatever its bytes: hex, read as utf8mb4 (tests/integration/sql_interface_test.cc).
std::string text_literal(std::string_view utf8) {
  return fmt::format("CONVERT(X'{}' USING utf8mb4)", hex(utf8));
}

std::string send_call(const std::string& topic, std::string_view payload, SqlSend form) {
  if (form == SqlSend::kPerTopic) {
    return fmt::format("CALL txmq_send_to_{}(X'{}', NULL)", topic, hex(payload));
  }
  return fmt::format("CALL txmq_send('{}', X'{}', NULL)", topic, hex(payload));
}

std::vector<std::unique_ptr<Connection>> connections(const Dsn& dsn, int n) {
  std::vector<std::unique_ptr<Connection>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<Connection>(dsn));
  return out;
}

// The CALLs of a thread's payloads (make_payloads), made before the clock starts.
std::vector<std::string> send_calls(const std::string& topic, std::size_t payload, int thread,
                                    SqlSend form) {
  std::vector<std::string> calls;
  for (const std::string& p : make_payloads(payload, static_cast<std::uint64_t>(thread))) {
    calls.push_back(send_call(topic, p, form));
  }
  return calls;
}

void expect_one_id(const internal::Result& r) {
  if (r.rows.size() != 1 || r.rows[0].u64(0) == 0) {
    throw Error(Errc::kInternal, "bench: CALL txmq_send did not return one id");
  }
}

}  // namespace

Measured sql_send_rate(const Dsn& dsn, const std::string& topic, int producers, double seconds,
                       std::size_t payload, SqlSend form) {
  auto conns = connections(dsn, producers);
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(producers, [&](int t, Latencies& lat) {
    Connection& c = *conns[static_cast<std::size_t>(t)];
    const std::vector<std::string> calls = send_calls(topic, payload, t, form);
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      expect_one_id(c.query_rows(calls[n % calls.size()]));
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured sql_send_in_transaction_rate(const Dsn& dsn, const std::string& topic,
                                      const std::string& business_table, int producers,
                                      double seconds, std::size_t payload, SqlSend form) {
  auto conns = connections(dsn, producers);
  const std::string insert = fmt::format("INSERT INTO {} (payload) VALUES (?)", business_table);
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(producers, [&](int t, Latencies& lat) {
    Connection& c = *conns[static_cast<std::size_t>(t)];
    const std::vector<std::string> payloads =
        make_payloads(payload, static_cast<std::uint64_t>(t));
    const std::vector<std::string> calls = send_calls(topic, payload, t, form);
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const std::size_t i = n % calls.size();
      const auto start = SteadyClock::now();
      c.query("START TRANSACTION");
      c.execute(insert, {std::string_view(payloads[i])});
      expect_one_id(c.query_rows(calls[i]));
      c.query("COMMIT");
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured library_send_in_transaction_rate(Client& client, const std::string& topic,
                                          const std::string& business_table, int producers,
                                          double seconds, std::size_t payload) {
  const std::string insert = fmt::format("INSERT INTO {} (payload) VALUES (?)", business_table);
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(producers, [&](int t, Latencies& lat) {
    const std::vector<std::string> payloads =
        make_payloads(payload, static_cast<std::uint64_t>(t));
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const std::string& p = payloads[n % payloads.size()];
      const auto start = SteadyClock::now();
      Transaction tx = client.begin();
      tx.execute(insert, {p});
      tx.send(topic, p);
      tx.commit();
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured sql_send_batch_rate(const Dsn& dsn, const std::string& topic, int batch, int rows,
                             std::size_t payload, SqlSend form) {
  Connection c(dsn);
  nlohmann::json messages = nlohmann::json::array();
  // The payloads of the library's batch (send_batch_rate): printable, escaped by the JSON.
  for (int i = 0; i < batch; ++i) messages.push_back(make_payload(payload, static_cast<std::uint64_t>(i)));
  const std::string call =
      form == SqlSend::kPerTopic
          ? fmt::format("CALL txmq_batch_to_{}({})", topic, text_literal(messages.dump()))
          : fmt::format("CALL txmq_send_batch('{}', {})", topic, text_literal(messages.dump()));
  return run_threads(1, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    while (n < static_cast<std::uint64_t>(rows)) {
      const auto start = SteadyClock::now();
      const internal::Result r = c.query_rows(call);
      lat.add_since(start);
      if (r.rows.size() != static_cast<std::size_t>(batch)) {
        throw Error(Errc::kInternal, fmt::format("bench: CALL txmq_send_batch returned {} ids "
                                                 "for {} messages",
                                                 r.rows.size(), batch));
      }
      n += r.rows.size();
    }
    return n;
  });
}

Measured sql_drain_exactly_once(const Dsn& dsn, const std::string& topic, int consumers,
                                int batch, std::uint64_t limit, double cap_seconds,
                                const std::string& work_table, std::uint64_t& retries) {
  auto conns = connections(dsn, consumers);
  std::atomic<std::uint64_t> consumed{0};
  std::atomic<std::uint64_t> deadlocks{0};
  const std::string take = fmt::format("CALL txmq_take('{}', NULL, {})", topic, batch);
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(cap_seconds);
  Measured m = run_threads(consumers, [&](int t, Latencies& lat) {
    Connection* c = conns[static_cast<std::size_t>(t)].get();
    std::uint64_t n = 0;
    std::string insert;
    std::string ids;
    while (consumed.load() < limit && SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      std::size_t got = 0;
      try {
        c->query("START TRANSACTION");
        const internal::Result taken = c->query_rows(take);
        got = taken.rows.size();
        if (got == 0) {
          c->query("COMMIT");
          break;
        }
        insert = fmt::format("INSERT INTO {} (msg_id) VALUES ", work_table);
        ids = "[";
        for (std::size_t i = 0; i < got; ++i) {
          const std::string id = std::to_string(taken.rows[i].u64(0));
          insert += fmt::format("{}({})", i == 0 ? "" : ",", id);
          ids += (i == 0 ? "" : ",") + id;
        }
        ids += "]";
        c->query(insert);
        c->query(fmt::format("CALL txmq_ack('{}', NULL, '{}')", topic, ids));
        c->query("COMMIT");
      } catch (const Error& e) {
        // A deadlock rolled the transaction back on the server's side: take again.
        if (e.server_errno() != 1213 && e.server_errno() != 1205) throw;
        ++deadlocks;
        c->query("ROLLBACK");
        continue;
      }
      lat.add_since(start);
      n += got;
      consumed += got;
    }
    return n;
  });
  retries = deadlocks.load();
  return m;
}

void sql_business_table(const Dsn& dsn, const std::string& table, bool create) {
  Connection c(dsn);
  c.query(fmt::format("DROP TABLE IF EXISTS {}", table));
  if (create) {
    c.query(fmt::format("CREATE TABLE {} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
                        "payload VARBINARY(1024) NOT NULL) ENGINE=InnoDB",
                        table));
  }
}

namespace {

std::vector<std::pair<std::string, std::uint64_t>> status_counters(const Dsn& dsn) {
  Connection c(dsn);
  const internal::Result r = c.query_rows(
      "SHOW GLOBAL STATUS WHERE Variable_name LIKE 'Com\\_%' OR Variable_name LIKE 'Handler\\_%' "
      "OR Variable_name IN ('Questions', 'Innodb_rows_inserted', 'Innodb_rows_deleted', "
      "'Innodb_rows_read', 'Innodb_rows_updated', 'Created_tmp_tables', "
      "'Created_tmp_disk_tables', 'Prepared_stmt_count')");
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (const internal::Row& row : r.rows) {
    std::uint64_t v = 0;
    try {
      v = std::stoull(row.bytes(1));
    } catch (const std::exception&) {
      continue;
    }
    out.emplace_back(row.bytes(0), v);
  }
  return out;
}

}  // namespace

StatusDelta::StatusDelta(const Dsn& dsn) : dsn_(dsn), before_(status_counters(dsn)) {}

std::string StatusDelta::per_message(std::uint64_t messages, std::size_t top) const {
  const auto after = status_counters(dsn_);
  std::vector<std::pair<std::string, double>> moved;
  for (const auto& [name, value] : after) {
    const auto it = std::find_if(before_.begin(), before_.end(),
                                 [&](const auto& b) { return b.first == name; });
    if (it == before_.end() || value <= it->second) continue;
    // The snapshot's own SHOW and connection are not the workload's.
    double delta = static_cast<double>(value - it->second);
    if (name == "Questions" || name == "Com_show_status") delta -= 1;
    if (delta <= 0) continue;
    moved.emplace_back(name, delta / static_cast<double>(std::max<std::uint64_t>(messages, 1)));
  }
  std::sort(moved.begin(), moved.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (std::size_t i = 0; i < moved.size() && i < top; ++i) {
    out += fmt::format("{}{} {:.1f}", i == 0 ? "" : ", ", moved[i].first, moved[i].second);
  }
  return out;
}

}  // namespace txmq::bench
