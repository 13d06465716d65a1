// The experiment behind send_batch's cost against raw multi-row INSERTs (docs/benchmarks.md,
// "send_batch of 10,000"): one thread inserts rows in multi-row INSERTs of 1,000 rows, in
// variants measured in alternating rounds, with the CPU each cost the client and the server.
//
//   txmq_batch_variants DSN SERVER_PID [ROUNDS] [ROWS_PER_ROUND] [VARIANT,...]
//
// Variants, each into its own table, dropped and made again before each round; "queue-shaped":
// the columns of a queue table (catalog/topic_tables.cc). 10,000 rows a transaction unless said:
//   raw       INSERT INTO (id, payload): the bench's reference (raw.multirow), 1,000 rows/txn
//   raw10k    the same, 10,000 rows a transaction
//   queue     txmq's statement, (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?), queue-shaped
//   queue1k   the same, 1,000 rows a transaction
//   returning txmq's statement with RETURNING id (MariaDB's way to the new ids)
//   send      Client::send_batch of 10,000 to a topic
//   bound     the times bound as text parameters: (?, ?, NULL, ?)
//   timebind  the times bound as binary MYSQL_TIME parameters, one buffer for all rows
//   var       the times from a user variable set once per statement: (@t, @t, NULL, ?)
//   default   the times from the columns' defaults (DEFAULT (UTC_TIMESTAMP(6))): (?)
//   constdef  the times from constant defaults: only the payload is given
//   qone      visible_at from a constant default, enqueued_at given: (UTC_TIMESTAMP(6), ?)
//   qoneret   qone with RETURNING id
//   colref    enqueued_at given, visible_at copied from it: (UTC_TIMESTAMP(6), enqueued_at, ?)
//   nokey     txmq's statement without the msg_key column
//   narrow    txmq's statement into (id, visible_at, enqueued_at, msg_key, payload)
//   onetime   one time column: (id, visible_at, payload)
//   bigint    two BIGINT constants instead of the times: (id, a, b, payload)
//   big       txmq's statement, one of 10,000 rows a transaction
// ROWS_PER_ROUND: a multiple of 10,000.
// SERVER_PID: the mariadbd's pid (its CPU is read from /proc); 0 to leave it out.
#include <mysql.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
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

constexpr const char* kTopic = "txmq_experiment_batch";

struct Totals {
  std::uint64_t rows = 0;
  double seconds = 0;
  double client_cpu = 0;
  double server_cpu = 0;
};

const char* kQueueColumns =
    "id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, visible_at DATETIME(6) NOT NULL {0}, "
    "attempts INT UNSIGNED NOT NULL DEFAULT 0, lease_token BIGINT UNSIGNED NOT NULL DEFAULT 0, "
    "owner_id BIGINT UNSIGNED NOT NULL DEFAULT 0, enqueued_at DATETIME(6) NOT NULL {0}, "
    "msg_key VARBINARY(255) NULL, payload LONGBLOB NOT NULL, attributes LONGBLOB NULL, "
    "first_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00', PRIMARY KEY (id)";

std::string rows_sql(const std::string& head, const std::string& row, int n) {
  std::string sql = head;
  for (int i = 0; i < n; ++i) {
    if (i > 0) sql += ',';
    sql += row;
  }
  return sql;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DSN SERVER_PID [ROUNDS] [ROWS_PER_ROUND] [VARIANT,...]\n",
                 argv[0]);
    return 1;
  }
  const std::string dsn_text = argv[1];
  const Dsn dsn = parse_dsn(dsn_text);
  const int server_pid = std::atoi(argv[2]);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const int rows_per_round = argc > 4 ? std::atoi(argv[4]) : 200000;
  if (rows_per_round <= 0 || rows_per_round % 10000 != 0) {
    std::fprintf(stderr, "ROWS_PER_ROUND must be a multiple of 10,000\n");
    return 1;
  }
  std::vector<std::string> chosen;
  {
    std::stringstream in(argc > 5 ? argv[5] : "raw,queue,bound,var,default,narrow,send");
    for (std::string v; std::getline(in, v, ',');) chosen.push_back(v);
  }
  const std::string payload(100, 'x');
  const std::vector<Param> params1(1000, std::string_view(payload));

  Connection c(dsn);
  struct Variant {
    std::string table;
    std::string create;
    std::function<void(int)> insert;  // inserts n rows (a multiple of 1,000)
  };
  auto in_txns = [&](std::string sql, std::vector<Param> params, int per_txn) {
    return [&c, sql = std::move(sql), params = std::move(params), per_txn](int n) {
      for (int done = 0; done < n; done += per_txn) {
        c.begin();
        for (int k = 0; k < per_txn; k += 1000) c.execute(sql, params);
        c.commit();
      }
    };
  };
  const std::string txmq_row = "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)";
  const std::string head4 = "INSERT INTO {} (visible_at, enqueued_at, msg_key, payload) VALUES ";
  std::vector<Param> bound_params;
  for (int i = 0; i < 1000; ++i) {
    bound_params.push_back(std::string_view("2026-11-28 06:00:00.000000"));
    bound_params.push_back(std::string_view("2026-11-28 06:00:00.000000"));
    bound_params.push_back(std::string_view(payload));
  }
  std::map<std::string, Variant> variants;
  auto queue_table = [&](const std::string& name, const std::string& defaults) {
    return fmt::format("CREATE TABLE {} ({}) ENGINE=InnoDB", name,
                       fmt::format(fmt::runtime(kQueueColumns), defaults));
  };
  variants["raw"] = {"txmq_xb_raw",
                     "CREATE TABLE txmq_xb_raw (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
                     "payload LONGBLOB NOT NULL) ENGINE=InnoDB",
                     in_txns(rows_sql("INSERT INTO txmq_xb_raw (payload) VALUES ", "(?)", 1000),
                             params1, 1000)};
  variants["raw10k"] = {"txmq_xb_raw10k",
                        "CREATE TABLE txmq_xb_raw10k (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY "
                        "KEY, payload LONGBLOB NOT NULL) ENGINE=InnoDB",
                        in_txns(rows_sql("INSERT INTO txmq_xb_raw10k (payload) VALUES ", "(?)", 1000),
                                params1, 10000)};
  variants["queue"] = {"txmq_xb_queue", queue_table("txmq_xb_queue", ""),
                       in_txns(rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_queue"), txmq_row, 1000),
                               params1, 10000)};
  variants["returning"] = {"txmq_xb_returning", queue_table("txmq_xb_returning", ""),
                           in_txns(rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_returning"),
                                            txmq_row, 1000) +
                                       " RETURNING id",
                                   params1, 10000)};
  const std::vector<Param> params10k(10000, std::string_view(payload));
  const std::string big_sql =
      rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_big"), txmq_row, 10000);
  variants["big"] = {"txmq_xb_big", queue_table("txmq_xb_big", ""), [&](int n) {
                       for (int done = 0; done < n; done += 10000) {
                         c.begin();
                         c.execute(big_sql, params10k);
                         c.commit();
                       }
                     }};
  variants["constdef"] = {"txmq_xb_constdef",
                          queue_table("txmq_xb_constdef", "DEFAULT '2026-11-28 06:00:00'"),
                          in_txns(rows_sql("INSERT INTO txmq_xb_constdef (payload) VALUES ", "(?)",
                                           1000),
                                  params1, 10000)};
  variants["onetime"] = {"txmq_xb_onetime",
                         "CREATE TABLE txmq_xb_onetime (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY "
                         "KEY, visible_at DATETIME(6) NOT NULL, payload LONGBLOB NOT NULL) "
                         "ENGINE=InnoDB",
                         in_txns(rows_sql("INSERT INTO txmq_xb_onetime (visible_at, payload) VALUES ",
                                          "(UTC_TIMESTAMP(6), ?)", 1000),
                                 params1, 10000)};
  variants["bigint"] = {"txmq_xb_bigint",
                        "CREATE TABLE txmq_xb_bigint (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY "
                        "KEY, a BIGINT NOT NULL, b BIGINT NOT NULL, payload LONGBLOB NOT NULL) "
                        "ENGINE=InnoDB",
                        in_txns(rows_sql("INSERT INTO txmq_xb_bigint (a, b, payload) VALUES ",
                                         "(1, 2, ?)", 1000),
                                params1, 10000)};
  variants["colref"] = {"txmq_xb_colref", queue_table("txmq_xb_colref", ""),
                        in_txns(rows_sql("INSERT INTO txmq_xb_colref (enqueued_at, visible_at, "
                                         "payload) VALUES ",
                                         "(UTC_TIMESTAMP(6), enqueued_at, ?)", 1000),
                                params1, 10000)};
  variants["nokey"] = {"txmq_xb_nokey", queue_table("txmq_xb_nokey", ""),
                       in_txns(rows_sql("INSERT INTO txmq_xb_nokey (visible_at, enqueued_at, "
                                        "payload) VALUES ",
                                        "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?)", 1000),
                               params1, 10000)};
  // The times bound as MYSQL_TIME (binary DATETIME parameters), one buffer shared by all rows.
  MYSQL_TIME now_time{};
  now_time.year = 2026;
  now_time.month = 11;
  now_time.day = 28;
  now_time.hour = 6;
  now_time.second_part = 123456;
  now_time.time_type = MYSQL_TIMESTAMP_DATETIME;
  std::vector<MYSQL_BIND> binds(3000);
  unsigned long payload_length = payload.size();
  for (int i = 0; i < 1000; ++i) {
    for (int k = 0; k < 2; ++k) {
      MYSQL_BIND& b = binds[static_cast<std::size_t>(3 * i + k)];
      b.buffer_type = MYSQL_TYPE_DATETIME;
      b.buffer = &now_time;
      b.buffer_length = sizeof(now_time);
    }
    MYSQL_BIND& b = binds[static_cast<std::size_t>(3 * i + 2)];
    b.buffer_type = MYSQL_TYPE_BLOB;
    b.buffer = const_cast<char*>(payload.data());
    b.buffer_length = payload_length;
    b.length = &payload_length;
  }
  MYSQL_STMT* time_stmt = nullptr;
  const std::string time_sql = rows_sql(
      "INSERT INTO txmq_xb_timebind (visible_at, enqueued_at, payload) VALUES ", "(?, ?, ?)", 1000);
  variants["timebind"] = {"txmq_xb_timebind", queue_table("txmq_xb_timebind", ""), [&](int n) {
                            if (time_stmt == nullptr) {
                              time_stmt = mysql_stmt_init(c.handle());
                              if (mysql_stmt_prepare(time_stmt, time_sql.data(), time_sql.size()) !=
                                      0 ||
                                  mysql_stmt_bind_param(time_stmt, binds.data()) != 0) {
                                std::fprintf(stderr, "%s\n", mysql_stmt_error(time_stmt));
                                std::exit(1);
                              }
                            }
                            for (int done = 0; done < n; done += 10000) {
                              c.begin();
                              for (int k = 0; k < 10000; k += 1000) {
                                if (mysql_stmt_execute(time_stmt) != 0) {
                                  std::fprintf(stderr, "%s\n", mysql_stmt_error(time_stmt));
                                  std::exit(1);
                                }
                              }
                              c.commit();
                            }
                          }};
  const std::string one_table =
      "CREATE TABLE {} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, visible_at DATETIME(6) NOT "
      "NULL DEFAULT '1970-01-01 00:00:00', attempts INT UNSIGNED NOT NULL DEFAULT 0, lease_token "
      "BIGINT UNSIGNED NOT NULL DEFAULT 0, owner_id BIGINT UNSIGNED NOT NULL DEFAULT 0, "
      "enqueued_at DATETIME(6) NOT NULL, msg_key VARBINARY(255) NULL, payload LONGBLOB NOT NULL, "
      "attributes LONGBLOB NULL, first_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 "
      "00:00:00', PRIMARY KEY (id)) ENGINE=InnoDB";
  variants["qone"] = {"txmq_xb_qone", fmt::format(fmt::runtime(one_table), "txmq_xb_qone"),
                      in_txns(rows_sql("INSERT INTO txmq_xb_qone (enqueued_at, payload) VALUES ",
                                       "(UTC_TIMESTAMP(6), ?)", 1000),
                              params1, 10000)};
  variants["qoneret"] = {"txmq_xb_qoneret", fmt::format(fmt::runtime(one_table), "txmq_xb_qoneret"),
                         in_txns(rows_sql("INSERT INTO txmq_xb_qoneret (enqueued_at, payload) VALUES ",
                                          "(UTC_TIMESTAMP(6), ?)", 1000) +
                                     " RETURNING id",
                                 params1, 10000)};
  variants["queue1k"] = {"txmq_xb_queue1k", queue_table("txmq_xb_queue1k", ""),
                         in_txns(rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_queue1k"), txmq_row,
                                          1000),
                                 params1, 1000)};
  variants["bound"] = {"txmq_xb_bound", queue_table("txmq_xb_bound", ""),
                       in_txns(rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_bound"),
                                        "(?, ?, NULL, ?)", 1000),
                               bound_params, 10000)};
  const std::string var_sql =
      rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_var"), "(@t, @t, NULL, ?)", 1000);
  variants["var"] = {"txmq_xb_var", queue_table("txmq_xb_var", ""), [&](int n) {
                       for (int done = 0; done < n; done += 10000) {
                         c.begin();
                         for (int k = 0; k < 10000; k += 1000) {
                           c.query("SET @t = UTC_TIMESTAMP(6)");
                           c.execute(var_sql, params1);
                         }
                         c.commit();
                       }
                     }};
  variants["default"] = {"txmq_xb_default",
                         queue_table("txmq_xb_default", "DEFAULT (UTC_TIMESTAMP(6))"),
                         in_txns(rows_sql("INSERT INTO txmq_xb_default (payload) VALUES ", "(?)", 1000),
                                 params1, 10000)};
  variants["narrow"] = {"txmq_xb_narrow",
                        "CREATE TABLE txmq_xb_narrow (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY "
                        "KEY, visible_at DATETIME(6) NOT NULL, enqueued_at DATETIME(6) NOT NULL, "
                        "msg_key VARBINARY(255) NULL, payload LONGBLOB NOT NULL) ENGINE=InnoDB",
                        in_txns(rows_sql(fmt::format(fmt::runtime(head4), "txmq_xb_narrow"), txmq_row,
                                         1000),
                                params1, 10000)};

  txmq::ClientOptions options;
  options.dsn = dsn_text;
  options.pool_size = 1;
  txmq::Client client(options);
  std::vector<txmq::OutgoingMessage> batch(10000);
  for (auto& m : batch) m.payload = payload;
  variants["send"] = {"", "", [&](int n) {
                        for (int done = 0; done < n; done += 10000) client.send_batch(kTopic, batch);
                      }};

  std::map<std::string, Totals> totals;
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& name : chosen) {
      Variant& v = variants.at(name);
      if (name == "send") {
        try {
          client.drop_topic(kTopic);
        } catch (const txmq::Error&) {
        }
        client.create_topic(kTopic);
      } else {
        c.query(fmt::format("DROP TABLE IF EXISTS {}", v.table));
        c.query(v.create);
      }
      Totals& t = totals[name];
      const double client_before = self_cpu();
      const double server_before = process_cpu(server_pid);
      const auto start = SteadyClock::now();
      v.insert(rows_per_round);
      t.seconds += std::chrono::duration<double>(SteadyClock::now() - start).count();
      t.client_cpu += self_cpu() - client_before;
      t.server_cpu += process_cpu(server_pid) - server_before;
      t.rows += static_cast<std::uint64_t>(rows_per_round);
      std::printf("round %d %-8s %9.0f rows/s\n", r + 1, name.c_str(),
                  static_cast<double>(rows_per_round) /
                      std::chrono::duration<double>(SteadyClock::now() - start).count());
    }
  }
  const double raw_rate =
      totals.count("raw") ? static_cast<double>(totals["raw"].rows) / totals["raw"].seconds : 0;
  std::printf("\n%-8s %10s %7s %12s %12s\n", "variant", "rows/s", "÷raw", "client us/row",
              "server us/row");
  for (const std::string& name : chosen) {
    const Totals& t = totals[name];
    const double rate = static_cast<double>(t.rows) / t.seconds;
    std::printf("%-8s %10.0f %7.2f %12.2f %12.2f\n", name.c_str(), rate,
                raw_rate > 0 ? rate / raw_rate : 0, t.client_cpu * 1e6 / static_cast<double>(t.rows),
                t.server_cpu * 1e6 / static_cast<double>(t.rows));
  }
  for (const auto& [name, v] : variants) {
    if (!v.table.empty()) c.query(fmt::format("DROP TABLE IF EXISTS {}", v.table));
  }
  try {
    client.drop_topic(kTopic);
  } catch (const txmq::Error&) {
  }
  return 0;
}
