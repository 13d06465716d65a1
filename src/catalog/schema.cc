#include "catalog/topic_catalog.h"

#include <fmt/format.h>

#include "catalog/migrations.h"
#include "catalog/routines.h"
#include "catalog/topic_tables.h"
#include "catalog/row_lock.h"
#include "catalog/send_fences.h"
#include "catalog/topic_tables.h"

namespace txmq::internal {

namespace {

std::int64_t schema_version(Connection& c) {
  return c.execute("SELECT version FROM txmq_schema WHERE singleton = 1", {}).rows.at(0).i64(0);
}

// True when the catalog is complete and current. Then nothing is created, so that clients
// need no DDL privileges (docs/security.md); only the first client and upgrades do.
bool catalog_is_current(Connection& c) {
  try {
    Result r = c.execute(
        "SELECT version, (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
        "DATABASE() AND table_name IN ('txmq_topics', 'txmq_groups', 'txmq_consumers', "
        "'txmq_waiters', 'txmq_metrics', 'txmq_servers', 'txmq_placements', 'txmq_xa')) "
        "FROM txmq_schema WHERE singleton = 1",
        {});
    return !r.rows.empty() && r.rows[0].i64(0) == kSchemaVersion && r.rows[0].i64(1) == 8;
  } catch (const Error& e) {
    if (e.code() == Errc::kNotFound) return false;  // a new database
    throw;
  }
}

// Whether SHOW GRANTS gives this user EXECUTE (or ALL PRIVILEGES) anywhere, or a role (whose
// grants it may not list): false only for a user certain not to see the database's routines.
bool may_execute_routines(Connection& c) {
  for (const Row& row : c.query_rows("SHOW GRANTS").rows) {
    const std::string& grant = row.bytes(0);
    if (grant.rfind("GRANT ", 0) != 0) continue;  // SET DEFAULT ROLE ...
    if (grant.find(" ON ") == std::string::npos) return true;  // GRANT role TO user
    const std::string privileges = grant.substr(0, grant.find(" ON "));
    if (privileges.find("EXECUTE") != std::string::npos ||
        privileges.find("ALL PRIVILEGES") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// The SQL interface of this txmq, unless the database has it: if this user may create routines
// (migrate_from_12), by one client at a time: routines are dropped and created one by one, and
// two clients interleaving them collide (1304). A user who may not leaves them as they are
// (none, or an earlier text, which keeps working) for `txmq sql install`.
//
// A user without EXECUTE sees no routine of the database in information_schema, installed or
// not: each start of such a client takes the lock and tries (and fails), and one killed while it
// held the lock made every client that started after it wait for the lock to run out, a minute
// (the Galera fault run's new consumers and producers stalled 60 s). Such a user tries the lock
// once and goes on; one who may run routines waits for the holder, as it may call them next.
void install_current_routines(Connection& c, std::string_view token) {
  if (routines_installed(c)) return;
  const Param key(std::int64_t{1});
  if (!may_execute_routines(c)) {
    if (!try_lock_row(c, kSchemaLock, key, token)) return;
  } else if (lock_row(c, kSchemaLock, key, token, [&] { return routines_installed(c); }) !=
             Locked::kWon) {
    return;
  }
  try {
    if (!routines_installed(c)) install_routines(c);
  } catch (...) {
    release_row_lock(c, kSchemaLock, key, token);
    throw;
  }
  release_row_lock(c, kSchemaLock, key, token);
}

}  // namespace

void TopicCatalog::bootstrap() {
  // One token for every try: a try whose connection broke while it held the schema lock (the
  // release is lost with it) wins its own lock again instead of waiting a minute for it.
  const std::string token = lock_token();
  pool_.run(OnLostConnection::kRetry, [&token](Connection& c, const Attempt&) {
    if (catalog_is_current(c)) {
      // The routines' text can change within a schema version (routines.sql's last routine).
      // Best effort: a client that may not write here (a read-only server) still starts, and
      // the routines of an earlier text keep working.
      try {
        install_current_routines(c, token);
      } catch (const Error& e) {
        if (e.code() == Errc::kUnavailable) throw;  // the connection: the pool's to retry
      }
      return;
    }
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_schema ("
        " singleton TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
        " version INT UNSIGNED NOT NULL,"
        " updated_at DATETIME(6) NOT NULL,"
        " claimed_by VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,"
        " claimed_until DATETIME(6) NULL,"
        " instance_id BIGINT UNSIGNED NULL) ENGINE=InnoDB");
    c.execute("INSERT IGNORE INTO txmq_schema (singleton, version, updated_at) VALUES (1, ?, NOW(6))",
              {static_cast<std::int64_t>(kSchemaVersion)});
    std::int64_t version = schema_version(c);
    if (version < 2) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("the database holds txmq schema version {}, a pre-release format "
                              "this txmq cannot read; use a new database",
                              version));
    }
    if (version > kSchemaVersion) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("the database holds txmq schema version {}, newer than this txmq "
                              "understands ({}); upgrade txmq",
                              version, kSchemaVersion));
    }
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_topics ("
        " name VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,"
        " lease_us BIGINT UNSIGNED NOT NULL,"
        " max_attempts INT UNSIGNED NOT NULL,"
        " max_payload_bytes BIGINT UNSIGNED NOT NULL,"
        " dedup_window_us BIGINT UNSIGNED NOT NULL,"
        " created_at DATETIME(6) NOT NULL,"
        " retry_initial_us BIGINT UNSIGNED NOT NULL,"
        " retry_multiplier DOUBLE NOT NULL,"
        " retry_max_us BIGINT UNSIGNED NOT NULL,"
        " retry_jitter DOUBLE NOT NULL,"
        " partitions INT UNSIGNED NOT NULL DEFAULT 1,"
        " archive_us BIGINT UNSIGNED NOT NULL DEFAULT 0,"
        " layout BIGINT UNSIGNED NOT NULL DEFAULT 0,"
        " next_group INT UNSIGNED NOT NULL DEFAULT 1,"
        " dead_letter_topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NULL,"
        " retention_us BIGINT UNSIGNED NOT NULL DEFAULT 0,"
        " layout_claimed_by VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,"
        " layout_claimed_until DATETIME(6) NULL,"
        " placed BIGINT UNSIGNED NULL,"
        " fair TINYINT UNSIGNED NOT NULL DEFAULT 0,"
        " storage TINYINT UNSIGNED NOT NULL DEFAULT 0,"
        " sid BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
        " KEY dead_letter_topic (dead_letter_topic), UNIQUE KEY sid (sid)) ENGINE=InnoDB");
    create_shared_storage_tables(c);
    // Servers that topics may be sharded over, and where each sharded topic's partitions live
    // (shard_map.cc). Passwords are never stored: a DSN names a password file or variable.
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_servers ("
        " name VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,"
        " dsn VARCHAR(2048) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
        " added_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_placements ("
        " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,"
        " epoch BIGINT UNSIGNED NOT NULL,"
        " servers VARCHAR(4096) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " partitions VARCHAR(4096) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " moving VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,"
        " created_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
    // Consumer groups; `number` names the group's tables and is never reused within a topic.
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_groups ("
        " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " name VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " number INT UNSIGNED NOT NULL,"
        " created_at DATETIME(6) NOT NULL,"
        " PRIMARY KEY (topic, name), UNIQUE KEY (topic, number)) ENGINE=InnoDB");
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_consumers ("
        " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
        " seen_at DATETIME(6) NOT NULL,"
        " UNIQUE KEY (name)) ENGINE=InnoDB");
    // Channels watched for waiting consumers, one row per watch connection and channel
    // (waiters.cc). MEMORY: a registration is a connection id, which means nothing after a
    // server restart, when the table starts empty.
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_waiters ("
        " connection_id BIGINT UNSIGNED NOT NULL,"
        " topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " registered_at DATETIME(6) NOT NULL,"
        " PRIMARY KEY (connection_id, topic),"
        " KEY (topic)) ENGINE=MEMORY");
    // Totals that every client adds to (metrics.cc): counters, and histograms by bucket.
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_metrics ("
        " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " grp VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " metric VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " bucket SMALLINT NOT NULL,"
        " value DOUBLE NOT NULL,"
        " PRIMARY KEY (topic, grp, metric, bucket)) ENGINE=InnoDB");
    c.query(kCreateXaTable);
    if (version == kSchemaVersion) {
      // A new database (or one missing a catalog table): the SQL interface too.
      install_current_routines(c, token);
      return;
    }
    // One client migrates; the others wait for its lock on txmq_schema's row and find the
    // version current. The lock's columns first (a database of version 6 or older lacks
    // them): DDL, idempotent, and replicated to every node of a Galera cluster.
    add_columns(c, "txmq_schema",
                {{"claimed_by", "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL"},
                 {"claimed_until", "DATETIME(6) NULL"}});
    const Param key(std::int64_t{1});
    const Locked got = lock_row(c, kSchemaLock, key, token,
                                  [&] { return schema_version(c) >= kSchemaVersion; });
    if (got == Locked::kNotNeeded) return;
    if (got == Locked::kTimedOut) {
      throw Error(Errc::kUnavailable,
                  "another client has been migrating the txmq schema for over a minute");
    }
    try {
      // Each step renews the lock first, and reads the version again: another client may
      // have migrated between this client's first read and its lock.
      const auto step = [&](std::int64_t from, void (*migrate)(Connection&)) {
        if (schema_version(c) != from) return;
        if (!try_lock_row(c, kSchemaLock, key, token)) {
          throw Error(Errc::kAborted, "the txmq schema migration lost its claim; trying again");
        }
        migrate(c);
      };
      step(2, migrate_from_2);
      step(3, migrate_from_3);
      step(4, migrate_from_4);
      step(5, migrate_from_5);
      step(6, migrate_from_6);
      step(7, migrate_from_7);
      step(8, migrate_from_8);
      step(9, migrate_from_9);
      step(10, migrate_from_10);
      step(11, migrate_from_11);
      step(12, migrate_from_12);
      step(13, migrate_from_13);
      step(14, migrate_from_14);
      step(15, migrate_from_15);
    } catch (...) {
      release_row_lock(c, kSchemaLock, key, token);
      throw;
    }
    release_row_lock(c, kSchemaLock, key, token);
  });
}

}  // namespace txmq::internal
