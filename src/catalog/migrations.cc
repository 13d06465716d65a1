#include "catalog/migrations.h"

#include <fmt/format.h>

#include <algorithm>

#include "catalog/names.h"
#include "catalog/routines.h"
#include "catalog/row_lock.h"
#include "catalog/send_fences.h"
#include "catalog/topic_tables.h"
#include "db/sql.h"

namespace txmq::internal {

void add_columns(Connection& c, const std::string& table, std::initializer_list<ColumnToAdd> columns) {
  if (c.server().alter_extensions()) {
    std::string changes;
    for (const ColumnToAdd& column : columns) {
      changes += fmt::format("{}ADD COLUMN IF NOT EXISTS {} {}", changes.empty() ? "" : ", ",
                             column.name, column.definition);
    }
    c.query(fmt::format("ALTER TABLE {} {}", table, changes));
    return;
  }
  // MySQL: the columns the table lacks now. Another client may add them between the read and
  // the ALTER (clients that start together run bootstrap together): then the ALTER, atomic,
  // changes nothing and fails with 1060, and the columns are read again.
  constexpr unsigned kDuplicateColumn = 1060;
  for (int attempt = 1;; ++attempt) {
    Result have = c.execute(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
        "TABLE_NAME = ?",
        {std::string_view(table.starts_with('`') ? unquoted(table) : table)});
    std::string changes;
    for (const ColumnToAdd& column : columns) {
      const bool present = std::any_of(have.rows.begin(), have.rows.end(), [&](const Row& row) {
        return row.bytes(0) == column.name;
      });
      if (present) continue;
      changes += fmt::format("{}ADD COLUMN {} {}", changes.empty() ? "" : ", ", column.name,
                             column.definition);
    }
    if (changes.empty()) return;
    try {
      c.query(fmt::format("ALTER TABLE {} {}", table, changes));
      return;
    } catch (const Error& e) {
      if (e.server_errno() != kDuplicateColumn || attempt == 5) throw;
    }
  }
}

namespace {

void seed_keys(Connection& c, const TopicTables& t) {
  c.query(
      fmt::format("INSERT IGNORE INTO {} (msg_key, heads, parked) SELECT msg_key, COUNT(*), 0 "
                  "FROM {} WHERE msg_key IS NOT NULL GROUP BY msg_key",
                  t.keys, t.queue));
}

// Version 2 -> 3: topics gain a dedup window (default 5 minutes) and a dedup table. Serialised
// between clients by a claim on txmq_schema (bootstrap); each step can run again after an
// interruption.
}  // namespace

void migrate_from_2(Connection& c) {
  add_columns(c, "txmq_topics",
              {{"dedup_window_us", "BIGINT UNSIGNED NOT NULL DEFAULT 300000000 AFTER max_payload_bytes"}});
  Result topics = c.execute("SELECT name FROM txmq_topics", {});
  for (const Row& row : topics.rows) create_topic_tables(c, topic_tables(row.bytes(0)));
  c.execute("UPDATE txmq_schema SET version = 3, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 3 -> 4: topics gain a retry policy (existing ones get the defaults) and keyed FIFO
// tables, seeded from the keyed messages they hold.
void migrate_from_3(Connection& c) {
  add_columns(c, "txmq_topics",
              {{"retry_initial_us", "BIGINT UNSIGNED NOT NULL DEFAULT 1000000"},
               {"retry_multiplier", "DOUBLE NOT NULL DEFAULT 2"},
               {"retry_max_us", "BIGINT UNSIGNED NOT NULL DEFAULT 300000000"},
               {"retry_jitter", "DOUBLE NOT NULL DEFAULT 0.2"}});
  Result topics = c.execute("SELECT name FROM txmq_topics", {});
  for (const Row& row : topics.rows) {
    const TopicTables t = topic_tables(row.bytes(0));
    create_topic_tables(c, t);
    seed_keys(c, t);
  }
  c.execute("UPDATE txmq_schema SET version = 4, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 4 -> 5: topics gain partitions (1), an archive setting (off), a layout version and
// their group "default" (number 0, whose tables are the version-4 ones), and an archive table.
// Waiter registrations name a group's channel (up to 64 characters).
void migrate_from_4(Connection& c) {
  add_columns(c, "txmq_topics",
              {{"partitions", "INT UNSIGNED NOT NULL DEFAULT 1"},
               {"archive_us", "BIGINT UNSIGNED NOT NULL DEFAULT 0"},
               {"layout", "BIGINT UNSIGNED NOT NULL DEFAULT 0"},
               {"next_group", "INT UNSIGNED NOT NULL DEFAULT 1"}});
  c.query(
      "INSERT IGNORE INTO txmq_groups (topic, name, number, created_at)"
      " SELECT name, 'default', 0, created_at FROM txmq_topics");
  Result topics = c.execute("SELECT name FROM txmq_topics", {});
  for (const Row& row : topics.rows) create_topic_wide_tables(c, topic_tables(row.bytes(0)));
  c.query(
      "ALTER TABLE txmq_waiters MODIFY topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin "
      "NOT NULL");
  c.execute("UPDATE txmq_schema SET version = 5, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 5 -> 6: message rows gain their attributes (queue, parked, dead-letter and archive
// tables of every group and partition) and queue rows the time of their first claim.
void migrate_from_5(Connection& c) {
  add_columns(c, "txmq_topics",
              {{"dead_letter_topic", "VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NULL"},
               {"retention_us", "BIGINT UNSIGNED NOT NULL DEFAULT 0"}});
  Result queues = c.execute(
      "SELECT g.topic, g.number, t.partitions FROM txmq_groups AS g JOIN txmq_topics AS t ON "
      "t.name = g.topic",
      {});
  for (const Row& row : queues.rows) {
    const std::string topic = row.bytes(0);
    const auto group = static_cast<unsigned>(row.u64(1));
    for (unsigned p = 0; p < static_cast<unsigned>(row.u64(2)); ++p) {
      const TopicTables t = topic_tables(topic, group, p);
      add_columns(c, t.queue,
                  {{"attributes", "LONGBLOB NULL"},
                   {"first_claimed_at", "DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'"}});
      for (const std::string& table : {t.parked, t.dead}) {
        add_columns(c, table, {{"attributes", "LONGBLOB NULL"}});
      }
      if (group == 0 && p == 0) add_columns(c, t.archive, {{"attributes", "LONGBLOB NULL"}});
    }
  }
  c.execute("UPDATE txmq_schema SET version = 6, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 6 -> 7: topics gain the claim on their layout (LayoutLock), which replaces a named
// user lock that Galera does not replicate. Upgrade every client together: a version-6 client
// would not see the claims, nor a version-7 one its named locks.
void migrate_from_6(Connection& c) {
  add_columns(c, "txmq_topics",
              {{"layout_claimed_by", "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL"},
               {"layout_claimed_until", "DATETIME(6) NULL"}});
  c.execute("UPDATE txmq_schema SET version = 7, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 7 -> 8: a topic's partitions may be sharded over several servers (shard_map.h). Each
// server's row says which of the topic's partitions live there (`placed`, NULL: all); the
// catalog records the servers and the shard map (txmq_servers, txmq_placements, created by
// bootstrap).
void migrate_from_7(Connection& c) {
  add_columns(c, "txmq_topics", {{"placed", "BIGINT UNSIGNED NULL"}});
  c.execute("UPDATE txmq_schema SET version = 8, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 8 -> 9: exactly-once across databases (xa_process.cc). txmq_xa holds each XA
// batch's decision; txmq_schema.instance_id names this database in the branches' xids
// (written once, by the first client that needs it).
void migrate_from_8(Connection& c) {
  add_columns(c, "txmq_schema", {{"instance_id", "BIGINT UNSIGNED NULL"}});
  c.query(kCreateXaTable);
  c.execute("UPDATE txmq_schema SET version = 9, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 9 -> 10: send views for every topic with one group (replaced by send fences in 11).
void migrate_from_9(Connection& c) {
  c.execute("UPDATE txmq_schema SET version = 10, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 10 -> 11: send fences (above) instead of send views. Version-10 clients would insert
// through views that no change drops any more: upgrade every client together (a client refuses
// a newer schema).
void migrate_from_10(Connection& c) {
  Result all = c.execute("SELECT name, partitions FROM txmq_topics", {});
  for (const Row& row : all.rows) {
    std::string names;
    for (unsigned p = 0; p < static_cast<unsigned>(row.u64(1)); ++p) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", send_view(row.bytes(0), p));
    }
    try {
      if (!names.empty()) c.query(fmt::format("DROP VIEW IF EXISTS {}", names));
    } catch (const Error& e) {
      // Without the DROP privilege the views stay: version 11 never uses them.
      if (e.server_errno() != 1142) throw;  // ER_TABLEACCESS_DENIED_ERROR
    }
  }
  Result r = c.execute(
      "SELECT t.name, MIN(g.number), t.partitions, t.placed FROM txmq_topics t JOIN txmq_groups g "
      "ON g.topic = t.name GROUP BY t.name, t.partitions, t.placed HAVING COUNT(*) = 1",
      {});
  for (const Row& row : r.rows) {
    // Both steps are idempotent: a second client migrating at once (the schema's claim ran out
    // while a fence waited) does no harm.
    add_send_fences(c, row.bytes(0), static_cast<unsigned>(row.u64(1)),
                    static_cast<unsigned>(row.u64(2)), row.null(3) ? kAllPartitions : row.u64(3),
                    [] { return true; });
  }
  c.execute("UPDATE txmq_schema SET version = 11, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 11 -> 12: a watch registers once per channel it watches (waiters.cc), so txmq_waiters
// is keyed by (connection_id, topic); its rows are kept (ALTER copies a MEMORY table). A
// version-11 client still running registers one channel per connection, which fits the new key,
// and its deletes by topic or by connection id work as before.
void migrate_from_11(Connection& c) {
  Result key = c.execute(
      "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = 'txmq_waiters' AND INDEX_NAME = 'PRIMARY'",
      {});
  if (key.rows.at(0).i64(0) == 1) {
    c.query("ALTER TABLE txmq_waiters DROP PRIMARY KEY, ADD PRIMARY KEY (connection_id, topic)");
  }
  c.execute("UPDATE txmq_schema SET version = 12, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 12 -> 13: the SQL interface's routines (routines.sql) and the txmq_takes table, when
// the migrating user may create routines; else the version moves on without them, and
// `txmq sql install` (by a user who may) adds them later: no client depends on them.
void migrate_from_12(Connection& c) {
  install_routines(c);
  c.execute("UPDATE txmq_schema SET version = 13, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 13 -> 14: topics may be fair (TopicOptions::fair); existing ones are not, and their
// tables stay as they are. And a topic may be created without its tables, which the library
// makes at the topic's first use (TopicCatalog::make_tables): the version rises also so that a
// version-13 client, which would take such a topic for a dropped one, refuses the database.
// Migrations from here on meet topics without tables (has_tables).
void migrate_from_13(Connection& c) {
  add_columns(c, "txmq_topics", {{"fair", "TINYINT UNSIGNED NOT NULL DEFAULT 0"}});
  c.execute("UPDATE txmq_schema SET version = 14, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 14 -> 15: an index on txmq_topics.dead_letter_topic, so that deleting a topic (or an
// SQS queue) finds the topics that name it as their dead-letter topic without reading every
// topic: with 100,000 topics that read was most of a DeleteQueue.
void migrate_from_14(Connection& c) {
  constexpr unsigned kDuplicateKeyName = 1061;
  Result have = c.execute(
      "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = 'txmq_topics' AND INDEX_NAME = 'dead_letter_topic'",
      {});
  if (have.rows.empty()) {
    try {
      c.query("ALTER TABLE txmq_topics ADD KEY dead_letter_topic (dead_letter_topic)");
    } catch (const Error& e) {
      if (e.server_errno() != kDuplicateKeyName) throw;  // another client added it meanwhile
    }
  }
  c.execute("UPDATE txmq_schema SET version = 15, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 15 -> 16: shared storage (docs/design/shared-queues.md). Every topic gets a sid, a
// number never reused, which names a shared topic's rows; a topic's storage says where its rows
// are (0: tables of its own, as every existing topic; 1: the shared tables, made here).
void migrate_from_15(Connection& c) {
  Result have = c.execute(
      "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = 'txmq_topics' AND COLUMN_NAME = 'sid'",
      {});
  if (have.rows.empty()) {
    constexpr unsigned kDuplicateColumn = 1060;
    try {
      // One statement: an AUTO_INCREMENT column needs its key in the same ALTER.
      c.query(
          "ALTER TABLE txmq_topics ADD COLUMN storage TINYINT UNSIGNED NOT NULL DEFAULT 0, "
          "ADD COLUMN sid BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, ADD UNIQUE KEY sid (sid)");
    } catch (const Error& e) {
      if (e.server_errno() != kDuplicateColumn) throw;  // another client added them meanwhile
    }
  }
  create_shared_storage_tables(c);
  c.execute("UPDATE txmq_schema SET version = 16, updated_at = NOW(6) WHERE singleton = 1", {});
}

}  // namespace txmq::internal
