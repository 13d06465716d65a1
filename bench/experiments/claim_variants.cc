// The experiment behind the table layout and claim shape (docs/benchmarks.md, "What was tried"):
// drains a backlog with the claim statements of txmq on a scratch table, in variants.
//
//   txmq_claim_variants DSN CONSUMERS BATCH VARIANTS [BACKLOG]
//
// VARIANTS is any of: f  fixed-width lease columns (token and owner id NOT NULL), else a
//                        nullable token and a string owner (txmq's first layout)
//                     i  a secondary index on visible_at, claims in (visible_at, id) order
//                     n  consumer connections with autocommit off (no START TRANSACTION)
//                     h  a scan hint: claims start past the highest id claimed so far (as
//                        txmq's do, claim.cc), not at the table's first row
//                     r  the ack of a batch rides in the transaction of the next claim (one
//                        commit per batch; the last batch is acknowledged on its own)
//                     t  the ack fenced by the batch's one lease token (id IN (...) AND
//                        lease_token = ?), not by (id, lease_token) pairs
//                     x  the claim's UPDATE with txmq's expressions (the retry delay from the
//                        attempts, the token by whether the row has a key)
//                     e  the exactly-once shape for comparison: SELECT ... FOR UPDATE SKIP
//                        LOCKED, DELETE, COMMIT (no lease written)
//                     w  the claim's UPDATE writes only visible_at and lease_token (not attempts
//                        and the owner): what two columns fewer would save
//                     m  the claim's UPDATE, the riding ack's DELETE (with 'r') and the COMMIT
//                        in one round trip: a multi-statement text query, the ids and tokens
//                        written as integers (needs 'f' and 't')
//                     -  none of these
// Each consumer loops: claim (SELECT ... FOR UPDATE SKIP LOCKED; UPDATE; COMMIT), then ack
// (DELETE ... RETURNING), until the backlog is empty. Prints messages per second.
#include <mysql.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "db/connection.h"
#include "db/dsn.h"
#include "txmq/error.h"

using namespace txmq::internal;
using SteadyClock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s DSN CONSUMERS BATCH VARIANTS [BACKLOG]\n", argv[0]);
    return 1;
  }
  const Dsn dsn = parse_dsn(argv[1]);
  const int consumers = std::atoi(argv[2]);
  const int batch = std::atoi(argv[3]);
  const std::string variants = argv[4];
  const int backlog = argc > 5 ? std::atoi(argv[5]) : 20000;
  const bool fixed = variants.find('f') != std::string::npos;
  const bool index = variants.find('i') != std::string::npos;
  const bool no_autocommit = variants.find('n') != std::string::npos;
  const bool hint = variants.find('h') != std::string::npos;
  const bool ride = variants.find('r') != std::string::npos;
  const bool exactly_once = variants.find('e') != std::string::npos;
  const bool token_fence = variants.find('t') != std::string::npos;
  const bool expressions = variants.find('x') != std::string::npos;
  const bool multi = variants.find('m') != std::string::npos;
  if (multi && (!fixed || !token_fence || expressions)) {
    std::fprintf(stderr, "variant m needs f and t, and not x\n");
    return 1;
  }
  {
    Connection c(dsn);
    c.query("DROP TABLE IF EXISTS txmq_experiment_claim");
    c.query(fmt::format(
        "CREATE TABLE txmq_experiment_claim (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
        "visible_at DATETIME(6) NOT NULL, attempts INT UNSIGNED NOT NULL DEFAULT 0, "
        "lease_token BIGINT UNSIGNED {}, owner {}, enqueued_at DATETIME(6) NOT NULL, "
        "msg_key VARBINARY(255) NULL, payload LONGBLOB NOT NULL {}) ENGINE=InnoDB",
        fixed ? "NOT NULL DEFAULT 0" : "NULL",
        fixed ? "BIGINT UNSIGNED NOT NULL DEFAULT 0" : "VARCHAR(255) NULL",
        index ? ", KEY (visible_at)" : ""));
    const std::string payload(100, 'x');
    std::string sql = "INSERT INTO txmq_experiment_claim (visible_at, enqueued_at, payload) VALUES ";
    for (int i = 0; i < 1000; ++i) sql += i == 0 ? "(NOW(6),NOW(6),?)" : ",(NOW(6),NOW(6),?)";
    const std::vector<Param> rows(1000, std::string_view(payload));
    for (int k = 0; k < backlog / 1000; ++k) {
      c.begin();
      c.execute(sql, rows);
      c.commit();
    }
  }
  std::string in = "(";
  std::string pairs = "(";
  for (int i = 0; i < batch; ++i) {
    in += i == 0 ? "?" : ",?";
    pairs += i == 0 ? "(?,?)" : ",(?,?)";
  }
  in += ")";
  pairs += ")";
  const std::string select = fmt::format(
      "SELECT id, attempts, enqueued_at, msg_key, payload FROM txmq_experiment_claim "
      "FORCE INDEX ({}) WHERE id >= ? AND visible_at <= NOW(6) ORDER BY {} LIMIT ? FOR UPDATE "
      "SKIP LOCKED",
      index ? "visible_at" : "PRIMARY", index ? "visible_at, id" : "id");
  const bool two_columns = variants.find('w') != std::string::npos;
  const std::string update =
      two_columns
          ? "UPDATE txmq_experiment_claim SET visible_at = NOW(6) + INTERVAL ? MICROSECOND, "
            "lease_token = ? WHERE id IN " + in
      : expressions
          ? "UPDATE txmq_experiment_claim SET visible_at = NOW(6) + INTERVAL (? + CAST(LEAST(?, "
            "? * POW(?, LEAST(attempts, 20))) * ? AS SIGNED)) MICROSECOND, attempts = attempts + "
            "1, lease_token = IF(msg_key IS NULL, ?, ?), owner = ? WHERE id IN " + in
          : "UPDATE txmq_experiment_claim SET attempts = attempts + 1, visible_at = NOW(6) + "
            "INTERVAL ? MICROSECOND, lease_token = ?, owner = ? WHERE id IN " + in;
  const std::string ack = "DELETE FROM txmq_experiment_claim WHERE id IN " + in +
                          (token_fence ? std::string(" AND lease_token = ?")
                                       : " AND (id, lease_token) IN " + pairs) +
                          " RETURNING id";
  const std::string take = "DELETE FROM txmq_experiment_claim WHERE id IN " + in;
  std::atomic<std::uint64_t> next_id{0};  // the scan hint ('h')
  std::atomic<long> done{0};
  std::atomic<long> deadlocks{0};
  const auto start = SteadyClock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < consumers; ++t) {
    threads.emplace_back([&, t] {
      Connection c(dsn);
      if (no_autocommit) mysql_autocommit(c.handle(), 0);
      if (multi && mysql_set_server_option(c.handle(), MYSQL_OPTION_MULTI_STATEMENTS_ON) != 0) {
        std::fprintf(stderr, "multi-statements: %s\n", mysql_error(c.handle()));
        std::exit(1);
      }
      // 'm': runs a multi-statement query, reading (and dropping) every result.
      auto run_multi = [&](const std::string& sql) {
        MYSQL* m = c.handle();
        if (mysql_real_query(m, sql.data(), sql.size()) != 0) {
          throw txmq::Error(mysql_errno(m) == 1213 ? txmq::Errc::kAborted : txmq::Errc::kInternal,
                            mysql_error(m));
        }
        for (;;) {
          if (MYSQL_RES* res = mysql_store_result(m)) mysql_free_result(res);
          const int next = mysql_next_result(m);
          if (next == -1) break;
          if (next > 0) {
            throw txmq::Error(mysql_errno(m) == 1213 ? txmq::Errc::kAborted : txmq::Errc::kInternal,
                              mysql_error(m));
          }
        }
      };
      std::string pending_delete;  // 'm' with 'r': the last batch's ack, as text
      std::uint64_t token = 1000000ULL * static_cast<std::uint64_t>(t + 1);
      std::vector<Param> pending;  // 'r': the last batch's fenced ack, sent with the next claim
      auto ack_params = [&](const Result& r, std::uint64_t tok) {
        auto id_at = [&](int i) {
          return r.rows[std::min<std::size_t>(static_cast<std::size_t>(i), r.rows.size() - 1)].u64(0);
        };
        std::vector<Param> fence;
        for (int i = 0; i < batch; ++i) fence.push_back(id_at(i));
        if (token_fence) {
          fence.push_back(tok);
          return fence;
        }
        for (int i = 0; i < batch; ++i) {
          fence.push_back(id_at(i));
          fence.push_back(tok);
        }
        return fence;
      };
      for (;;) {
        Result r;
        try {
          if (!no_autocommit) c.begin();
          if (ride && !multi && !pending.empty()) c.execute(ack, pending);
          r = c.execute(select, {hint ? next_id.load() : std::uint64_t{0}, std::int64_t{batch}});
          if (r.rows.empty() && hint && next_id.load() != 0) {
            r = c.execute(select, {std::uint64_t{0}, std::int64_t{batch}});
          }
          if (r.rows.empty()) {
            if (!pending_delete.empty()) run_multi(pending_delete);
            c.commit();
            pending.clear();
            break;
          }
          if (hint) {
            std::uint64_t last = r.rows.back().u64(0) + 1;
            std::uint64_t seen = next_id.load();
            while (seen < last && !next_id.compare_exchange_weak(seen, last)) {
            }
          }
          ++token;
          auto id_at = [&](int i) {
            return r.rows[std::min<std::size_t>(static_cast<std::size_t>(i), r.rows.size() - 1)].u64(0);
          };
          if (exactly_once) {
            std::vector<Param> ids;
            for (int i = 0; i < batch; ++i) ids.push_back(id_at(i));
            c.execute(take, ids);
            c.commit();
            done += static_cast<long>(r.rows.size());
            continue;
          }
          if (multi) {
            std::string ids;
            for (const Row& row : r.rows) ids += fmt::format("{}{}", ids.empty() ? "" : ",", row.u64(0));
            std::string sql = fmt::format(
                "UPDATE txmq_experiment_claim SET attempts = attempts + 1, visible_at = NOW(6) + "
                "INTERVAL 30000000 MICROSECOND, lease_token = {}, owner = 7 WHERE id IN ({})",
                token, ids);
            if (!pending_delete.empty()) sql += "; " + pending_delete;
            sql += "; COMMIT";
            run_multi(sql);  // committed: the next begin() only marks the connection's state
            const std::string ack_sql = fmt::format(
                "DELETE FROM txmq_experiment_claim WHERE id IN ({}) AND lease_token = {} "
                "RETURNING id",
                ids, token);
            if (ride) {
              pending_delete = ack_sql;
            } else {
              run_multi(ack_sql + "; COMMIT");
            }
            done += static_cast<long>(r.rows.size());
            continue;
          }
          std::vector<Param> up = {std::int64_t{30000000}};
          if (expressions) {
            up.insert(up.end(), {300e6, 1e6, 2.0, 1.0, token});
          }
          up.push_back(token);
          if (!two_columns) {
            up.push_back(fixed ? Param(std::uint64_t{7}) : Param(std::string_view("host:12345")));
          }
          for (int i = 0; i < batch; ++i) up.push_back(id_at(i));
          c.execute(update, up);
          c.commit();
          if (ride) {
            pending = ack_params(r, token);
          } else {
            c.execute(ack, ack_params(r, token));
            if (no_autocommit) c.commit();
          }
        } catch (const txmq::Error& e) {
          // As txmq does: a deadlock rolled the transaction back; try again.
          if (e.code() != txmq::Errc::kAborted) throw;
          c.rollback();
          deadlocks++;
          continue;
        }
        done += static_cast<long>(r.rows.size());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  fmt::print("{} consumers x {} per claim, variants '{}': {:.0f} msgs/s ({} deadlocks retried)\n",
             consumers, batch, variants, static_cast<double>(done.load()) / seconds,
             deadlocks.load());
  Connection(dsn).query("DROP TABLE txmq_experiment_claim");
  return 0;
}
