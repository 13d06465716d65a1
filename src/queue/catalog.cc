// The catalog (txmq_schema, txmq_topics) and each topic's tables. doc/schema.md specifies them.
#include <fmt/format.h>

#include <bit>

#include "queue/context.h"

namespace txmq::internal {

std::string micros_of(std::string_view column) {
  return fmt::format("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {})", column);
}

Clock::time_point time_from_micros(std::int64_t micros) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(Micros(micros)));
}

std::size_t in_list_size(std::size_t n) { return n <= 1 ? 1 : std::bit_ceil(n); }

std::string placeholders(std::size_t n) {
  std::string out = "(";
  for (std::size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ",?";
  return out + ")";
}

void pad_ids(std::vector<Param>& params, std::size_t from, std::size_t n) {
  Param last = params.back();
  while (params.size() - from < n) params.push_back(last);
}

void rethrow_for_topic(TopicCatalog& catalog, const Error& error, std::string_view topic) {
  if (error.code() == Errc::kNotFound) {
    catalog.forget(topic);
    throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic),
                error.server_errno());
  }
  throw error;
}

namespace {

constexpr std::string_view kSelectTopic =
    "SELECT name, lease_us, max_attempts, max_payload_bytes, dedup_window_us, "
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at) FROM txmq_topics";

TopicInfo topic_from_row(const Row& row) {
  TopicInfo info;
  info.name = row.bytes(0);
  info.options.lease = Micros(row.i64(1));
  info.options.max_attempts = static_cast<int>(row.i64(2));
  info.options.max_payload_bytes = row.u64(3);
  info.options.dedup_window = Micros(row.i64(4));
  info.created_at = time_from_micros(row.i64(5));
  return info;
}

void check_options(const TopicOptions& o) {
  if (o.lease < std::chrono::milliseconds(1) || o.lease > std::chrono::hours(12)) {
    throw Error(Errc::kInvalidArgument, "lease must be from 1 ms to 12 hours");
  }
  if (o.max_attempts < 1 || o.max_attempts > 1000) {
    throw Error(Errc::kInvalidArgument, "max attempts must be from 1 to 1000");
  }
  if (o.max_payload_bytes < 1 || o.max_payload_bytes > (64u << 20)) {
    throw Error(Errc::kInvalidArgument, "max payload must be from 1 byte to 64 MiB");
  }
  if (o.dedup_window < std::chrono::seconds(1) || o.dedup_window > std::chrono::hours(24 * 30)) {
    throw Error(Errc::kInvalidArgument, "dedup window must be from 1 second to 30 days");
  }
}

// A topic's tables. Every statement is IF NOT EXISTS: DDL commits by itself, so a create that
// was cut short is finished by the next one, and migrations can run it over existing topics.
void create_topic_tables(Connection& c, const TopicTables& t) {
  // The claim walks the primary key in id order and filters on visible_at: no secondary index
  // (one on visible_at cost 60% of the drain rate, bench/). The lease columns are fixed-width
  // and NOT NULL so that a claim rewrites the row in place (+40% drain rate at batch 100).
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
                  " visible_at DATETIME(6) NOT NULL,"
                  " attempts INT UNSIGNED NOT NULL DEFAULT 0,"
                  " lease_token BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                  " owner_id BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                  " enqueued_at DATETIME(6) NOT NULL,"
                  " msg_key VARBINARY(255) NULL,"
                  " payload LONGBLOB NOT NULL,"
                  " PRIMARY KEY (id)) ENGINE=InnoDB",
                  t.queue));
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " id BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
                  " attempts INT UNSIGNED NOT NULL,"
                  " last_owner VARCHAR(255) CHARACTER SET utf8mb4 NULL,"
                  " enqueued_at DATETIME(6) NOT NULL,"
                  " died_at DATETIME(6) NOT NULL,"
                  " msg_key VARBINARY(255) NULL,"
                  " payload LONGBLOB NOT NULL) ENGINE=InnoDB",
                  t.dead));
  // One row per deduplication key still in its window (dedup.cc). The expiry index lets the
  // purge of old keys read only what it deletes.
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " dedup_key VARBINARY(255) NOT NULL PRIMARY KEY,"
                  " message_id BIGINT UNSIGNED NOT NULL,"
                  " expires_at DATETIME(6) NOT NULL,"
                  " KEY (expires_at)) ENGINE=InnoDB",
                  t.dedup));
}

// Version 2 -> 3: topics gain a dedup window (default 5 minutes) and a dedup table. Serialised
// between clients by a named lock; each step can run again after an interruption.
void migrate_from_2(Connection& c) {
  c.query(
      "ALTER TABLE txmq_topics ADD COLUMN IF NOT EXISTS"
      " dedup_window_us BIGINT UNSIGNED NOT NULL DEFAULT 300000000 AFTER max_payload_bytes");
  Result topics = c.execute("SELECT name FROM txmq_topics", {});
  for (const Row& row : topics.rows) create_topic_tables(c, topic_tables(row.bytes(0)));
  c.execute("UPDATE txmq_schema SET version = 3, updated_at = NOW(6) WHERE singleton = 1", {});
}

std::int64_t schema_version(Connection& c) {
  return c.execute("SELECT version FROM txmq_schema WHERE singleton = 1", {}).rows.at(0).i64(0);
}

}  // namespace

void TopicCatalog::bootstrap() {
  pool_.run(OnLostConnection::kRetry, [](Connection& c, const Attempt&) {
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_schema ("
        " singleton TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
        " version INT UNSIGNED NOT NULL,"
        " updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
    c.execute("INSERT IGNORE INTO txmq_schema VALUES (1, ?, NOW(6))",
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
        " created_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_consumers ("
        " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
        " seen_at DATETIME(6) NOT NULL,"
        " UNIQUE KEY (name)) ENGINE=InnoDB");
    if (version == kSchemaVersion) return;
    Result locked = c.execute("SELECT GET_LOCK('txmq_schema_migration', 60)", {});
    if (locked.rows.at(0).null(0) || locked.rows.at(0).i64(0) != 1) {
      throw Error(Errc::kUnavailable,
                  "another client has been migrating the txmq schema for over a minute");
    }
    try {
      if (schema_version(c) == 2) migrate_from_2(c);
    } catch (...) {
      c.query("DO RELEASE_LOCK('txmq_schema_migration')");
      throw;
    }
    c.query("DO RELEASE_LOCK('txmq_schema_migration')");
  });
}

TopicInfo TopicCatalog::get(std::string_view name) {
  check_topic_name(name);
  std::string key(name);
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end() && std::chrono::steady_clock::now() - it->second.fetched < kCacheFor) {
      return it->second.info;
    }
  }
  Result r = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("{} WHERE name = ?", kSelectTopic), {std::string_view(key)});
  });
  if (r.rows.empty()) {
    forget(name);
    throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
  }
  TopicInfo info = topic_from_row(r.rows[0]);
  std::lock_guard lock(mutex_);
  cache_[key] = Cached{info, std::chrono::steady_clock::now()};
  return info;
}

void TopicCatalog::forget(std::string_view name) {
  std::lock_guard lock(mutex_);
  cache_.erase(std::string(name));
}

bool TopicCatalog::create(std::string_view name, const TopicOptions& options) {
  check_options(options);
  TopicTables t = topic_tables(name);
  bool created = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    // DDL commits by itself, so the tables come first; the catalog row makes the topic exist.
    create_topic_tables(c, t);
    Result r = c.execute(
        "INSERT IGNORE INTO txmq_topics (name, lease_us, max_attempts, max_payload_bytes, "
        "dedup_window_us, created_at) VALUES (?, ?, ?, ?, ?, NOW(6))",
        {name, static_cast<std::int64_t>(options.lease.count()),
         static_cast<std::int64_t>(options.max_attempts),
         static_cast<std::uint64_t>(options.max_payload_bytes),
         static_cast<std::int64_t>(options.dedup_window.count())});
    return r.affected_rows == 1;
  });
  forget(name);
  if (created) return true;
  TopicInfo existing = get(name);
  if (existing.options != options) {
    throw Error(Errc::kAlreadyExists,
                fmt::format("topic '{}' exists with other settings (lease {} ms, max attempts {}, "
                            "max payload {} bytes, dedup window {} s)",
                            name, existing.options.lease.count() / 1000,
                            existing.options.max_attempts, existing.options.max_payload_bytes,
                            existing.options.dedup_window.count() / 1000000));
  }
  return false;
}

void TopicCatalog::drop(std::string_view name) {
  TopicTables t = topic_tables(name);
  bool existed = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    Result r = c.execute("DELETE FROM txmq_topics WHERE name = ?", {name});
    c.query(fmt::format("DROP TABLE IF EXISTS {}, {}, {}", t.queue, t.dead, t.dedup));
    return r.affected_rows == 1;
  });
  forget(name);
  if (!existed) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
}

std::vector<TopicInfo> TopicCatalog::list() {
  Result r = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("{} ORDER BY name", kSelectTopic), {});
  });
  std::vector<TopicInfo> topics;
  for (const Row& row : r.rows) topics.push_back(topic_from_row(row));
  return topics;
}

}  // namespace txmq::internal
