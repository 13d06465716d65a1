#pragma once
// The SQL interface's side of the bench (src/catalog/routines.sql, docs/design/sql-calls.md):
// the stored procedures called as an application's driver calls them, through the text protocol
// (CALL with the payload as a hex literal, a JSON argument as utf8mb4 text), each thread on a
// connection of its own made before the clock starts. The same src/db connection layer as the
// references (bench/reference.h), so neither side gets a cheaper client.

#include <cstddef>
#include <cstdint>
#include <string>

#include "db/dsn.h"
#include "harness.h"
#include "txmq/client.h"

namespace txmq::bench {

// Which procedure a send calls: the general `txmq_send(topic, ...)`, or the topic's own
// `txmq_send_to_<topic>(...)` (static SQL, src/catalog/send_procedures.cc).
enum class SqlSend { kGeneric, kPerTopic };

// `CALL txmq_send(topic, X'..', NULL)` (or the topic's own) in autocommit from `producers`
// connections for `seconds`.
Measured sql_send_rate(const internal::Dsn& dsn, const std::string& topic, int producers,
                       double seconds, std::size_t payload, SqlSend form = SqlSend::kGeneric);

// START TRANSACTION; INSERT INTO `business_table` (payload) VALUES (?); CALL txmq_send(...);
// COMMIT, from `producers` connections for `seconds`. The business table has an AUTO_INCREMENT
// key and a `payload` column (sql_business_table).
Measured sql_send_in_transaction_rate(const internal::Dsn& dsn, const std::string& topic,
                                      const std::string& business_table, int producers,
                                      double seconds, std::size_t payload,
                                      SqlSend form = SqlSend::kGeneric);

// The library's side of the same: Client::begin; Transaction::execute of the same INSERT;
// Transaction::send; commit.
Measured library_send_in_transaction_rate(Client& client, const std::string& topic,
                                          const std::string& business_table, int producers,
                                          double seconds, std::size_t payload);

// `CALL txmq_send_batch(topic, '["..", ..]')` (or the topic's own `txmq_batch_to_<topic>`) of
// `batch` strings from one connection until
// `rows` were sent (the JSON made before the clock starts, as the library's batch is).
Measured sql_send_batch_rate(const internal::Dsn& dsn, const std::string& topic, int batch,
                             int rows, std::size_t payload, SqlSend form = SqlSend::kGeneric);

// The SQL exactly-once drain: START TRANSACTION; CALL txmq_take(topic, NULL, batch); one
// multi-row INSERT of the messages' ids into `work_table`; CALL txmq_ack(topic, NULL, '[ids]');
// COMMIT, from `consumers` connections until `limit` messages were consumed, a take finds
// nothing, or `cap_seconds` pass. Latency: one such transaction. A deadlock (peers' takes and
// acks, as any application's) rolls back and takes again; their number goes to `retries`.
Measured sql_drain_exactly_once(const internal::Dsn& dsn, const std::string& topic,
                                int consumers, int batch, std::uint64_t limit,
                                double cap_seconds, const std::string& work_table,
                                std::uint64_t& retries);

// Creates (empty) the business table of the transactional sends, or drops it.
void sql_business_table(const internal::Dsn& dsn, const std::string& table, bool create);

// What the server executed between two snapshots, from SHOW GLOBAL STATUS: the counters that
// say where an SQL call's time goes (Com_*, Handler_*, Questions), as "name=delta" per message.
class StatusDelta {
 public:
  explicit StatusDelta(const internal::Dsn& dsn);
  // The counters that moved since construction, each divided by `messages`, largest first.
  std::string per_message(std::uint64_t messages, std::size_t top = 12) const;

 private:
  internal::Dsn dsn_;
  std::vector<std::pair<std::string, std::uint64_t>> before_;
};

}  // namespace txmq::bench
