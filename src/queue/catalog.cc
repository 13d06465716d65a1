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
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at), retry_initial_us, "
    "retry_multiplier, retry_max_us, retry_jitter FROM txmq_topics";

TopicInfo topic_from_row(const Row& row) {
  TopicInfo info;
  info.name = row.bytes(0);
  info.options.lease = Micros(row.i64(1));
  info.options.max_attempts = static_cast<int>(row.i64(2));
  info.options.max_payload_bytes = row.u64(3);
  info.options.dedup_window = Micros(row.i64(4));
  info.created_at = time_from_micros(row.i64(5));
  info.options.retry.initial = Micros(row.i64(6));
  info.options.retry.multiplier = row.f64(7);
  info.options.retry.max = Micros(row.i64(8));
  info.options.retry.jitter = row.f64(9);
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
  const RetryPolicy& r = o.retry;
  if (r.initial < Micros{0} || r.initial > std::chrono::hours(24)) {
    throw Error(Errc::kInvalidArgument, "retry initial delay must be from 0 to 1 day");
  }
  if (r.max < r.initial || r.max > std::chrono::hours(24)) {
    throw Error(Errc::kInvalidArgument,
                "retry max delay must be from the initial delay to 1 day");
  }
  if (!(r.multiplier >= 1.0 && r.multiplier <= 10.0)) {
    throw Error(Errc::kInvalidArgument, "retry multiplier must be from 1 to 10");
  }
  if (!(r.jitter >= 0.0 && r.jitter <= 1.0)) {
    throw Error(Errc::kInvalidArgument, "retry jitter must be from 0 to 1");
  }
}

std::vector<Param> option_params(const TopicOptions& options) {
  return {static_cast<std::int64_t>(options.lease.count()),
          static_cast<std::int64_t>(options.max_attempts),
          static_cast<std::uint64_t>(options.max_payload_bytes),
          static_cast<std::int64_t>(options.dedup_window.count()),
          static_cast<std::int64_t>(options.retry.initial.count()),
          options.retry.multiplier,
          static_cast<std::int64_t>(options.retry.max.count()),
          options.retry.jitter};
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
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " msg_key VARBINARY(255) NOT NULL,"
                  " park_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
                  " id BIGINT UNSIGNED NOT NULL,"
                  " visible_at DATETIME(6) NOT NULL,"
                  " enqueued_at DATETIME(6) NOT NULL,"
                  " payload LONGBLOB NOT NULL,"
                  " PRIMARY KEY (msg_key, park_id), KEY (park_id)) ENGINE=InnoDB",
                  t.parked));
}

// Keys of messages sent before version 4 (when keys did not order delivery): every such message
// counts as its key's current one, so that later sends with the key wait for all of them.
void seed_keys(Connection& c, const TopicTables& t) {
  c.query(fmt::format("INSERT IGNORE INTO {} (msg_key, heads, parked) SELECT msg_key, COUNT(*), 0 "
                      "FROM {} WHERE msg_key IS NOT NULL GROUP BY msg_key",
                      t.keys, t.queue));
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

// Version 3 -> 4: topics gain a retry policy (existing ones get the defaults) and keyed FIFO
// tables, seeded from the keyed messages they hold.
void migrate_from_3(Connection& c) {
  c.query(
      "ALTER TABLE txmq_topics"
      " ADD COLUMN IF NOT EXISTS retry_initial_us BIGINT UNSIGNED NOT NULL DEFAULT 1000000,"
      " ADD COLUMN IF NOT EXISTS retry_multiplier DOUBLE NOT NULL DEFAULT 2,"
      " ADD COLUMN IF NOT EXISTS retry_max_us BIGINT UNSIGNED NOT NULL DEFAULT 300000000,"
      " ADD COLUMN IF NOT EXISTS retry_jitter DOUBLE NOT NULL DEFAULT 0.2");
  Result topics = c.execute("SELECT name FROM txmq_topics", {});
  for (const Row& row : topics.rows) {
    const TopicTables t = topic_tables(row.bytes(0));
    create_topic_tables(c, t);
    seed_keys(c, t);
  }
  c.execute("UPDATE txmq_schema SET version = 4, updated_at = NOW(6) WHERE singleton = 1", {});
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
        " created_at DATETIME(6) NOT NULL,"
        " retry_initial_us BIGINT UNSIGNED NOT NULL,"
        " retry_multiplier DOUBLE NOT NULL,"
        " retry_max_us BIGINT UNSIGNED NOT NULL,"
        " retry_jitter DOUBLE NOT NULL) ENGINE=InnoDB");
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_consumers ("
        " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
        " seen_at DATETIME(6) NOT NULL,"
        " UNIQUE KEY (name)) ENGINE=InnoDB");
    // Consumers waiting for messages (waiting.cc). MEMORY: a registration is a connection id,
    // which means nothing after a server restart, when the table starts empty.
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_waiters ("
        " connection_id BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
        " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " registered_at DATETIME(6) NOT NULL,"
        " KEY (topic)) ENGINE=MEMORY");
    if (version == kSchemaVersion) return;
    Result locked = c.execute("SELECT GET_LOCK('txmq_schema_migration', 60)", {});
    if (locked.rows.at(0).null(0) || locked.rows.at(0).i64(0) != 1) {
      throw Error(Errc::kUnavailable,
                  "another client has been migrating the txmq schema for over a minute");
    }
    try {
      if (schema_version(c) == 2) migrate_from_2(c);
      if (schema_version(c) == 3) migrate_from_3(c);
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
    std::vector<Param> params = option_params(options);
    params.insert(params.begin(), name);
    Result r = c.execute(
        "INSERT IGNORE INTO txmq_topics (name, lease_us, max_attempts, max_payload_bytes, "
        "dedup_window_us, retry_initial_us, retry_multiplier, retry_max_us, retry_jitter, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6))",
        params);
    return r.affected_rows == 1;
  });
  forget(name);
  if (created) return true;
  TopicInfo existing = get(name);
  if (existing.options != options) {
    throw Error(Errc::kAlreadyExists,
                fmt::format("topic '{}' exists with other settings (lease {} ms, max attempts {}, "
                            "max payload {} bytes, dedup window {} s, retry {} ms x{} up to {} ms "
                            "with {} jitter); change them with update_topic (txmq topic set)",
                            name, existing.options.lease.count() / 1000,
                            existing.options.max_attempts, existing.options.max_payload_bytes,
                            existing.options.dedup_window.count() / 1000000,
                            existing.options.retry.initial.count() / 1000,
                            existing.options.retry.multiplier,
                            existing.options.retry.max.count() / 1000,
                            existing.options.retry.jitter));
  }
  return false;
}

void TopicCatalog::drop(std::string_view name) {
  TopicTables t = topic_tables(name);
  bool existed = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    Result r = c.execute("DELETE FROM txmq_topics WHERE name = ?", {name});
    c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {name});
    c.query(fmt::format("DROP TABLE IF EXISTS {}, {}, {}, {}, {}", t.queue, t.dead, t.dedup,
                        t.keys, t.parked));
    return r.affected_rows == 1;
  });
  forget(name);
  if (!existed) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
}

void TopicCatalog::update(std::string_view name, const TopicOptions& options) {
  check_options(options);
  check_topic_name(name);
  std::vector<Param> params = option_params(options);
  params.push_back(name);
  Result r = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    // found_rows is on: an update to the same values still counts the row.
    return c.execute(
        "UPDATE txmq_topics SET lease_us = ?, max_attempts = ?, max_payload_bytes = ?, "
        "dedup_window_us = ?, retry_initial_us = ?, retry_multiplier = ?, retry_max_us = ?, "
        "retry_jitter = ? WHERE name = ?",
        params);
  });
  forget(name);
  if (r.affected_rows == 0) {
    throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
  }
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
