#include "catalog/topic_tables.h"

#include <fmt/format.h>

#include "db/sql.h"
#include "txmq/error.h"

namespace txmq::internal {
namespace {

// A fair topic's queue table's own columns and indexes (create_queue_tables, make_fair). A
// claim walks fair_order; a send reads its tenant's last place from tenant_order. Neither
// changes once a message is inserted.
constexpr std::string_view kTenantColumns[] = {
    "tenant VARBINARY(255) NULL", "fair_seq BIGINT UNSIGNED NOT NULL DEFAULT 0",
    "KEY fair_order (fair_seq)", "KEY tenant_order (tenant, fair_seq)"};

std::string tenant_columns(std::string_view each) {
  std::string out;
  for (std::string_view column : kTenantColumns) out += fmt::format(" {}{},", each, column);
  return out;
}

// The columns after the id of the tables each queue has, the same in a queue's own tables and
// in the shared ones (create_shared_storage_tables), which add the qid or sid before them.
constexpr std::string_view kQueueColumns =
    " visible_at DATETIME(6) NOT NULL,"
    " attempts INT UNSIGNED NOT NULL DEFAULT 0,"
    " lease_token BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " owner_id BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " enqueued_at DATETIME(6) NOT NULL,"
    " msg_key VARBINARY(255) NULL,"
    " payload LONGBLOB NOT NULL,"
    " attributes LONGBLOB NULL,"
    " first_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',";
constexpr std::string_view kDeadColumns =
    " attempts INT UNSIGNED NOT NULL,"
    " last_owner VARCHAR(255) CHARACTER SET utf8mb4 NULL,"
    " enqueued_at DATETIME(6) NOT NULL,"
    " died_at DATETIME(6) NOT NULL,"
    " msg_key VARBINARY(255) NULL,"
    " payload LONGBLOB NOT NULL,"
    " attributes LONGBLOB NULL,";
constexpr std::string_view kParkedColumns =
    " park_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
    " id BIGINT UNSIGNED NOT NULL,"
    " visible_at DATETIME(6) NOT NULL,"
    " enqueued_at DATETIME(6) NOT NULL,"
    " payload LONGBLOB NOT NULL,"
    " attributes LONGBLOB NULL,";
constexpr std::string_view kArchiveColumns =
    " enqueued_at DATETIME(6) NOT NULL,"
    " acked_at DATETIME(6) NOT NULL,"
    " msg_key VARBINARY(255) NULL,"
    " payload LONGBLOB NOT NULL,"
    " attributes LONGBLOB NULL,";

}  // namespace

// The queue table comes last: a topic whose tables are made at first use (TopicCatalog::
// make_tables) and that has its queue table has all of them, even after a make cut short.
void create_queue_tables(Connection& c, const TopicTables& t, std::uint64_t first_id,
                         bool fair) {
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} (id BIGINT UNSIGNED NOT NULL,{} PRIMARY KEY (id)) "
                  "ENGINE=InnoDB",
                  t.dead, kDeadColumns));
  // Keyed FIFO (keys.cc): one row per key with messages not yet finished, and the messages that
  // wait behind their key's current one, in the order they were parked (which is the order
  // their sends committed: parking happens under the key row's lock).
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " msg_key VARBINARY(255) NOT NULL PRIMARY KEY,"
                  " heads BIGINT UNSIGNED NOT NULL,"
                  " parked BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
                  t.keys));
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} (msg_key VARBINARY(255) NOT NULL,{}"
                  " PRIMARY KEY (msg_key, park_id), KEY (park_id)) ENGINE=InnoDB",
                  t.parked, kParkedColumns));
  // The claim walks the primary key in id order and filters on visible_at: no secondary index
  // (one on visible_at cost 60% of the drain rate, bench/). The lease columns are fixed-width
  // and NOT NULL so that a claim rewrites the row in place (+40% drain rate at batch 100).
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,{}"
                  "{} PRIMARY KEY (id)) ENGINE=InnoDB AUTO_INCREMENT={}",
                  t.queue, kQueueColumns, fair ? tenant_columns("") : std::string(), first_id));
}

// The tables a topic has once, whatever its groups and partitions.
void create_topic_wide_tables(Connection& c, const TopicTables& t) {
  // One row per deduplication key still in its window (dedup.cc). The expiry index lets the
  // purge of old keys read only what it deletes.
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " dedup_key VARBINARY(255) NOT NULL PRIMARY KEY,"
                  " message_id BIGINT UNSIGNED NOT NULL,"
                  " expires_at DATETIME(6) NOT NULL,"
                  " KEY (expires_at)) ENGINE=InnoDB",
                  t.dedup));
  // Acknowledged messages, when the topic keeps them (settle.cc); the acked_at index lets the
  // purge read only what it deletes.
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} (id BIGINT UNSIGNED NOT NULL,{} PRIMARY KEY (id), "
                  "KEY (acked_at)) ENGINE=InnoDB",
                  t.archive, kArchiveColumns));
}

void make_fair(Connection& c, const TopicTables& t) {
  Result have = c.execute(
      "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = ? AND INDEX_NAME = 'tenant_order'",
      {std::string_view(unquoted(t.queue))});
  if (have.rows.at(0).i64(0) > 0) return;
  // One statement, so that a table has all of them or none; online: sends and claims go on
  // while the indexes are built (a table holding many messages takes a while).
  std::string changes = tenant_columns("ADD ");
  changes.pop_back();  // the last comma
  try {
    c.query(fmt::format("ALTER TABLE {}{}, ALGORITHM=INPLACE, LOCK=NONE", t.queue, changes));
  } catch (const Error& e) {
    // A topic whose tables are made at first use: they will be made fair (the catalog says so).
    if (!is_missing_table(e.server_errno())) throw;
  }
}

void create_topic_tables(Connection& c, const TopicTables& t) {
  create_topic_wide_tables(c, t);
  create_queue_tables(c, t, 1);
}

// Shared storage (schema version 16): the tables of every topic created without tables of its
// own, made once. Each is the per-topic table with the queue's qid (or the topic's sid) leading
// its primary key, so that a claim's range (qid, hint) .. (qid, +inf) walks only its own queue's
// rows and a topic's rows are one range to delete. The queue table's ids come from its
// AUTO_INCREMENT, which InnoDB needs to lead an index: KEY ids, which no statement reads.
void create_shared_storage_tables(Connection& c) {
  c.query(fmt::format("CREATE TABLE IF NOT EXISTS {} (qid BIGINT UNSIGNED NOT NULL, id BIGINT "
                      "UNSIGNED NOT NULL,{} PRIMARY KEY (qid, id)) ENGINE=InnoDB",
                      quote_identifier(kSharedDead), kDeadColumns));
  c.query(fmt::format(
      "CREATE TABLE IF NOT EXISTS {} ("
      " qid BIGINT UNSIGNED NOT NULL,"
      " msg_key VARBINARY(255) NOT NULL,"
      " heads BIGINT UNSIGNED NOT NULL,"
      " parked BIGINT UNSIGNED NOT NULL,"
      " PRIMARY KEY (qid, msg_key)) ENGINE=InnoDB",
      quote_identifier(kSharedKeys)));
  c.query(fmt::format("CREATE TABLE IF NOT EXISTS {} (qid BIGINT UNSIGNED NOT NULL, msg_key "
                      "VARBINARY(255) NOT NULL,{} PRIMARY KEY (qid, msg_key, park_id), KEY "
                      "(park_id)) ENGINE=InnoDB",
                      quote_identifier(kSharedParked), kParkedColumns));
  c.query(fmt::format(
      "CREATE TABLE IF NOT EXISTS {} ("
      " sid BIGINT UNSIGNED NOT NULL,"
      " dedup_key VARBINARY(255) NOT NULL,"
      " message_id BIGINT UNSIGNED NOT NULL,"
      " expires_at DATETIME(6) NOT NULL,"
      " PRIMARY KEY (sid, dedup_key), KEY (sid, expires_at)) ENGINE=InnoDB",
      quote_identifier(kSharedDedup)));
  c.query(fmt::format("CREATE TABLE IF NOT EXISTS {} (sid BIGINT UNSIGNED NOT NULL, id BIGINT "
                      "UNSIGNED NOT NULL,{} PRIMARY KEY (sid, id), KEY (sid, acked_at)) "
                      "ENGINE=InnoDB",
                      quote_identifier(kSharedArchive), kArchiveColumns));
  // KEY ids is there for the AUTO_INCREMENT only, and hidden from the optimizer (MariaDB's
  // IGNORED, MySQL's INVISIBLE): visible, both servers chose it over the primary key for the
  // leases' UPDATE and the acks' DELETE by a list of ids (EXPLAIN: key ids), a secondary index
  // walk and its locks in every claim and ack.
  c.query(fmt::format("CREATE TABLE IF NOT EXISTS {} (qid BIGINT UNSIGNED NOT NULL, id BIGINT "
                      "UNSIGNED NOT NULL AUTO_INCREMENT,{} PRIMARY KEY (qid, id), KEY ids (id) {}) "
                      "ENGINE=InnoDB",
                      quote_identifier(kSharedQueue), kQueueColumns,
                      c.server().mysql ? "INVISIBLE" : "IGNORED"));
  // Topics in shared storage that were dropped and whose rows are still to be deleted (a
  // client deletes them in bounded chunks: TopicCatalog::reap_dropped).
  c.query(
      "CREATE TABLE IF NOT EXISTS txmq_dropped ("
      " sid BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
      " name VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
      " dropped_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
}

}  // namespace txmq::internal
