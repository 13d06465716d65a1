// The experiment behind the send's cost against a raw INSERT (docs/benchmarks.md, "Sends"):
// single-row autocommit INSERTs from T threads, in variants measured in alternating rounds, with
// the CPU each one cost the client process and the server per message.
//
//   txmq_send_variants DSN SERVER_PID THREADS [ROUNDS] [SECONDS_PER_ROUND] [VARIANT,...]
//
// Variants, each its own connections:
//   raw      INSERT INTO a (id, payload) table: the bench's reference (raw.insert.N)
//   raw2     the same as raw, into a second table: the A/A control (how far two identical
//            variants land apart in one run)
//   shaped   txmq's statement into a table shaped as a queue table, from a plain Connection
//   view     txmq's statement through a view over a queue-shaped table (schema 10's send views)
//   send     Client::send to that topic (pool, catalog cache, metrics, wake-up)
//   send-nm  Client::send with ClientOptions::record_metrics off
//   column   txmq's statement naming one more column, which a layout change would drop (a fence
//            with nothing to evaluate: the statement fails once the column is gone; schema 11's
//            send fence, what send does)
//   topic    what send sends (the fenced statement into the topic's table), from a plain Connection
//   fk       txmq's statement into a table whose guard column references a one-row table (a
//            fence in InnoDB: the change deletes the row, which waits for the senders' shared
//            locks, and later sends fail the foreign key)
// SERVER_PID: the mariadbd's pid (its CPU is read from /proc); 0 to leave it out.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "process_cpu.h"
#include "db/connection.h"
#include "db/dsn.h"
#include "txmq/client.h"
#include "txmq/error.h"

using namespace txmq::internal;
using SteadyClock = std::chrono::steady_clock;
using txmq::experiments::process_cpu;
using txmq::experiments::self_cpu;

namespace {

constexpr const char* kTopic = "txmq_experiment_send";

struct Totals {
  std::uint64_t messages = 0;
  double seconds = 0;
  double client_cpu = 0;
  double server_cpu = 0;
  double statements = 0;  // the server's Questions: statements from every client
};

// The server's count of statements run so far (its own SHOW is one of them).
double questions(Connection& c) {
  return static_cast<double>(
      c.execute("SHOW GLOBAL STATUS LIKE 'Questions'").rows.at(0).i64(1));
}

// Runs `one(thread)` from `threads` threads for `seconds`, adding to `totals`.
template <typename F>
void round(Totals& totals, Connection& status, int threads, double seconds, int server_pid,
           F&& one) {
  std::atomic<std::uint64_t> done{0};
  const double statements_before = questions(status);
  const double client_before = self_cpu();
  const double server_before = process_cpu(server_pid);
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::uint64_t n = 0;
      while (SteadyClock::now() < deadline) {
        one(t);
        ++n;
      }
      done += n;
    });
  }
  for (auto& t : pool) t.join();
  totals.seconds += std::chrono::duration<double>(SteadyClock::now() - start).count();
  totals.client_cpu += self_cpu() - client_before;
  totals.server_cpu += process_cpu(server_pid) - server_before;
  totals.messages += done.load();
  totals.statements += questions(status) - statements_before - 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DSN SERVER_PID THREADS [ROUNDS] [SECONDS_PER_ROUND] [VARIANT,...]\n", argv[0]);
    return 1;
  }
  const std::string dsn_text = argv[1];
  const Dsn dsn = parse_dsn(dsn_text);
  const int server_pid = std::atoi(argv[2]);
  const int threads = std::atoi(argv[3]);
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  const double seconds = argc > 5 ? std::atof(argv[5]) : 2.0;
  const std::string payload(100, 'x');

  txmq::ClientOptions options;
  options.dsn = dsn_text;
  options.pool_size = threads;
  txmq::Client client(options);
  options.record_metrics = false;
  txmq::Client quiet(options);
  try {
    client.drop_topic(kTopic);
  } catch (const txmq::Error&) {
  }
  client.create_topic(kTopic);
  {
    Connection c(dsn);
    c.query("DROP VIEW IF EXISTS txmq_experiment_view");
    c.query("DROP TABLE IF EXISTS txmq_experiment_raw, txmq_experiment_raw2, txmq_experiment_shaped, "
            "txmq_experiment_column, txmq_experiment_fk, txmq_experiment_guard");
    c.query("CREATE TABLE txmq_experiment_raw (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
            "payload LONGBLOB NOT NULL) ENGINE=InnoDB");
    c.query("CREATE TABLE txmq_experiment_raw2 LIKE txmq_experiment_raw");
    c.query(fmt::format("CREATE TABLE txmq_experiment_shaped LIKE `txmq_q_{}`", kTopic));
    c.query("ALTER TABLE txmq_experiment_shaped DROP COLUMN IF EXISTS send_fence");
    c.query("CREATE SQL SECURITY INVOKER VIEW txmq_experiment_view AS SELECT id, visible_at, "
            "enqueued_at, msg_key, payload, attributes FROM txmq_experiment_shaped");
    c.query(fmt::format("CREATE TABLE txmq_experiment_column LIKE `txmq_q_{}`", kTopic));
    c.query("ALTER TABLE txmq_experiment_column DROP COLUMN IF EXISTS send_fence, ADD COLUMN "
            "one_group TINYINT NULL");
    c.query("CREATE TABLE txmq_experiment_guard (layout INT UNSIGNED NOT NULL PRIMARY KEY) "
            "ENGINE=InnoDB");
    c.query("INSERT INTO txmq_experiment_guard VALUES (1)");
    c.query(fmt::format("CREATE TABLE txmq_experiment_fk LIKE `txmq_q_{}`", kTopic));
    c.query("ALTER TABLE txmq_experiment_fk ADD COLUMN layout INT UNSIGNED NOT NULL, ADD "
            "FOREIGN KEY (layout) REFERENCES txmq_experiment_guard (layout)");
  }
  const std::string values = "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)";
  const std::map<std::string, std::string> statements = {
      {"raw", "INSERT INTO txmq_experiment_raw (payload) VALUES (?)"},
      {"raw2", "INSERT INTO txmq_experiment_raw2 (payload) VALUES (?)"},
      {"shaped", "INSERT INTO txmq_experiment_shaped (visible_at, enqueued_at, msg_key, payload) "
                 "VALUES " + values},
      {"view", "INSERT INTO txmq_experiment_view (visible_at, enqueued_at, msg_key, payload) "
               "VALUES " + values},
      {"column", "INSERT INTO txmq_experiment_column (visible_at, enqueued_at, msg_key, payload, "
                 "one_group) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?, NULL)"},
      {"topic", fmt::format("INSERT INTO `txmq_q_{}` (visible_at, enqueued_at, msg_key, payload, "
                            "send_fence) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?, NULL)",
                            kTopic)},
      {"fk", "INSERT INTO txmq_experiment_fk (visible_at, enqueued_at, msg_key, payload, layout) "
             "VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?, 1)"}};
  std::vector<std::string> variants = {"raw",  "raw2", "shaped",  "view",
                                       "send", "send-nm", "column", "topic", "fk"};
  if (argc > 6) {  // only these, comma-separated
    variants.clear();
    for (std::string_view rest = argv[6]; !rest.empty();) {
      const std::size_t comma = std::min(rest.find(','), rest.size());
      variants.emplace_back(rest.substr(0, comma));
      rest.remove_prefix(std::min(comma + 1, rest.size()));
    }
  }
  std::map<std::string, std::vector<std::unique_ptr<Connection>>> connections;
  for (const auto& [name, sql] : statements) {
    for (int t = 0; t < threads; ++t) connections[name].push_back(std::make_unique<Connection>(dsn));
  }
  std::map<std::string, Totals> totals;
  Connection status(dsn);
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& v : variants) {
      if (v == "send") {
        round(totals[v], status, threads, seconds, server_pid, [&](int) { client.send(kTopic, payload); });
      } else if (v == "send-nm") {
        round(totals[v], status, threads, seconds, server_pid, [&](int) { quiet.send(kTopic, payload); });
      } else {
        const std::string& sql = statements.at(v);
        auto& mine = connections[v];
        round(totals[v], status, threads, seconds, server_pid, [&](int t) {
          mine[static_cast<std::size_t>(t)]->execute(sql, {std::string_view(payload)});
        });
      }
    }
  }
  fmt::print("{} threads, {} rounds of {} s each; CPU in microseconds per message\n", threads, rounds,
             seconds);
  fmt::print("{:<8} {:>9} {:>7} {:>11} {:>11} {:>10} {:>11}\n", "variant", "msgs/s", "ratio",
             "client CPU", "server CPU", "total CPU", "statements");
  const double raw_rate =
      totals.count("raw") ? static_cast<double>(totals["raw"].messages) / totals["raw"].seconds : 0;
  for (const std::string& v : variants) {
    const Totals& t = totals[v];
    const double n = static_cast<double>(t.messages);
    fmt::print("{:<8} {:>9.0f} {:>6.2f}x {:>11.1f} {:>11.1f} {:>10.1f} {:>11.3f}\n", v,
               n / t.seconds, n / t.seconds / raw_rate, t.client_cpu / n * 1e6,
               t.server_cpu / n * 1e6, (t.client_cpu + t.server_cpu) / n * 1e6,
               t.statements / n);
  }
  client.drop_topic(kTopic);
  Connection(dsn).query("DROP VIEW txmq_experiment_view");
  Connection(dsn).query(
      "DROP TABLE txmq_experiment_raw, txmq_experiment_raw2, txmq_experiment_shaped, txmq_experiment_column, "
      "txmq_experiment_fk, txmq_experiment_guard");
  return 0;
}
