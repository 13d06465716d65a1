// The catalog (txmq_schema, txmq_topics) and each topic's tables. docs/schema.md specifies them.
#include <fmt/format.h>

#include <bit>
#include <functional>
#include <random>
#include <thread>

#include "queue/operations.h"

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

Result in_lists(Connection& c, std::string_view sql, std::vector<Param> values) {
  constexpr std::size_t kChunk = 1000;
  Result all;
  for (std::size_t from = 0; from < values.size(); from += kChunk) {
    const std::size_t to = std::min(values.size(), from + kChunk);
    const std::size_t n = in_list_size(to - from);
    std::vector<Param> params(values.begin() + from, values.begin() + to);
    pad_ids(params, 0, n);
    Result r = c.execute(fmt::vformat(sql, fmt::make_format_args(placeholders(n))), params);
    all.affected_rows += r.affected_rows;
    for (Row& row : r.rows) all.rows.push_back(std::move(row));
  }
  return all;
}

void rethrow_for_topic(TopicCatalog& catalog, const Error& error, std::string_view topic) {
  if (error.code() == Errc::kNotFound) {
    catalog.forget(topic);
    throw Error(Errc::kNotFound,
                fmt::format("topic '{}' does not exist, or a group or partition of it went while "
                            "this was running",
                            topic),
                error.server_errno());
  }
  throw error;
}

Unit unit_of(std::string_view topic, unsigned group, unsigned partition) {
  return Unit{std::string(topic), group, partition, topic_tables(topic, group, partition),
              wait_channel(topic, group)};
}

const GroupEntry& TopicLayout::group(std::string_view name) const {
  if (name.empty()) name = kDefaultGroup;
  for (const GroupEntry& g : groups) {
    if (g.name == name) return g;
  }
  check_group_name(name);
  throw Error(Errc::kNotFound,
              fmt::format("topic '{}' has no group '{}' (txmq group list {})", info.name, name,
                          info.name));
}

namespace {

constexpr std::string_view kSelectTopic =
    "SELECT name, lease_us, max_attempts, max_payload_bytes, dedup_window_us, "
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at), retry_initial_us, "
    "retry_multiplier, retry_max_us, retry_jitter, partitions, archive_us, layout, "
    "dead_letter_topic, retention_us, placed FROM txmq_topics";

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
  info.options.partitions = static_cast<int>(row.i64(10));
  info.options.archive = Micros(row.i64(11));
  info.options.dead_letter_topic = row.null(13) ? "" : row.bytes(13);
  info.options.retention = Micros(row.i64(14));
  return info;
}

void check_options(const TopicOptions& o) {
  if (o.lease < std::chrono::milliseconds(1) || o.lease > std::chrono::hours(12)) {
    throw Error(Errc::kInvalidArgument, "lease must be from 1 ms to 12 hours");
  }
  if (o.max_attempts < 0 || o.max_attempts > 1000) {
    throw Error(Errc::kInvalidArgument, "max attempts must be from 1 to 1000, or 0 for never");
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
  if (o.partitions < 1 || o.partitions > kMaxPartitions) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("partitions must be from 1 to {}", kMaxPartitions));
  }
  if (o.archive < Micros{0} || o.archive > std::chrono::hours(24 * 3660)) {
    throw Error(Errc::kInvalidArgument, "archive retention must be from 0 to 3660 days");
  }
  if (o.retention < Micros{0} || o.retention > std::chrono::hours(24 * 3660)) {
    throw Error(Errc::kInvalidArgument, "retention must be from 0 to 3660 days");
  }
  if (!o.dead_letter_topic.empty()) check_topic_name(o.dead_letter_topic);
}

std::vector<Param> option_params(const TopicOptions& options) {
  return {static_cast<std::int64_t>(options.lease.count()),
          static_cast<std::int64_t>(options.max_attempts),
          static_cast<std::uint64_t>(options.max_payload_bytes),
          static_cast<std::int64_t>(options.dedup_window.count()),
          static_cast<std::int64_t>(options.retry.initial.count()),
          options.retry.multiplier,
          static_cast<std::int64_t>(options.retry.max.count()),
          options.retry.jitter,
          static_cast<std::int64_t>(options.archive.count()),
          options.dead_letter_topic.empty() ? Param(nullptr)
                                            : Param(std::string_view(options.dead_letter_topic)),
          static_cast<std::int64_t>(options.retention.count())};
}

// One queue's tables (a group's partition). Every statement is IF NOT EXISTS: DDL commits by
// itself, so a create that was cut short is finished by the next one, and migrations can run it
// over existing topics. Partition p's ids start at p << 48 (names.h).
void create_queue_tables(Connection& c, const TopicTables& t, std::uint64_t first_id) {
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
                  " attributes LONGBLOB NULL,"
                  " first_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',"
                  " PRIMARY KEY (id)) ENGINE=InnoDB AUTO_INCREMENT={}",
                  t.queue, first_id));
  c.query(
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " id BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
                  " attempts INT UNSIGNED NOT NULL,"
                  " last_owner VARCHAR(255) CHARACTER SET utf8mb4 NULL,"
                  " enqueued_at DATETIME(6) NOT NULL,"
                  " died_at DATETIME(6) NOT NULL,"
                  " msg_key VARBINARY(255) NULL,"
                  " payload LONGBLOB NOT NULL,"
                  " attributes LONGBLOB NULL) ENGINE=InnoDB",
                  t.dead));
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
                  " attributes LONGBLOB NULL,"
                  " PRIMARY KEY (msg_key, park_id), KEY (park_id)) ENGINE=InnoDB",
                  t.parked));
}

// The tables a topic has once, whatever its groups and partitions.
void create_shared_tables(Connection& c, const TopicTables& t) {
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
      fmt::format("CREATE TABLE IF NOT EXISTS {} ("
                  " id BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
                  " enqueued_at DATETIME(6) NOT NULL,"
                  " acked_at DATETIME(6) NOT NULL,"
                  " msg_key VARBINARY(255) NULL,"
                  " payload LONGBLOB NOT NULL,"
                  " attributes LONGBLOB NULL,"
                  " KEY (acked_at)) ENGINE=InnoDB",
                  t.archive));
}

void create_topic_tables(Connection& c, const TopicTables& t) {
  create_queue_tables(c, t, 1);
  create_shared_tables(c, t);
}

// --- Send fences -------------------------------------------------------------------------------
//
// A single send, or a batch of one statement, to a topic with one group is one INSERT in
// autocommit. It must not miss a group created meanwhile, nor write into a partition that moved
// to another server. It used to check the topic's layout version inside the INSERT (a locking
// subquery on txmq_topics: about 2.7x the server CPU of a bare INSERT), then to insert through a
// view over the queue table that existed only while the layout allowed it (about 1.1x: the view
// is opened and merged again at every execution). Both cost every send; now the guard costs
// nothing there (docs/benchmarks.md, "Sends").
//
// Such sends name a column of the partition's queue table, `send_fence` (kSendFence, always
// NULL), which exists only while the topic has one group and the partition is placed on this
// server. Its existence is the guard:
//  - a change of groups or placement drops the column first (drop_send_fences). ALTER TABLE
//    takes the table's exclusive metadata lock, so it waits until every INSERT naming the column
//    has committed (an autocommit INSERT holds the table's shared lock until then), and later
//    ones fail with 1054, unknown column (send.cc then takes the checked statement or the
//    transaction path, which hold the topic row's shared lock and so wait for the change's
//    fenced transaction);
//  - a change that leaves one group (and creating a topic) adds it again after it committed,
//    under the topic's claim, renewed first so that a change overtaken after a minute adds no
//    fence for a layout that has moved on since: the layout is read after renewing.
// The price is paid by the change, not by sends: the exclusive lock waits for every transaction
// that touched the table (claims, exactly-once handlers, an application's open Transaction), and
// the table's statements queue behind it meanwhile. Each ALTER waits at most kFenceWaitSeconds
// (MariaDB's ALTER TABLE ... WAIT), then lets the topic run and tries again, up to
// kFenceAttempts times, then fails the change before it changed any group or placement (the
// fences it dropped are added back). The claim is renewed before each try, and a change that
// lost it stops. Both ALTERs are
// instant in InnoDB (metadata only) on MariaDB 10.4+; a server that allows no instant ALTER
// (innodb_instant_alter_column_allowed) rebuilds the table to drop the column, and gets no
// fence back (sends take the checked statement).
// On Galera, ALTER TABLE is replicated in total order (TOI) and does not wait: it aborts the
// transactions on the table running on any node (sends naming the column among them, which then
// fall back): the fence holds on every node, unlike a row's shared lock.
// Without the ALTER privilege there are no fences, and sends take the checked statement.

constexpr int kFenceWaitSeconds = 2;
constexpr int kFenceAttempts = 6;
constexpr auto kFencePause = std::chrono::milliseconds(500);
constexpr unsigned kLockWaitTimeout = 1205;        // ER_LOCK_WAIT_TIMEOUT (ALTER ... WAIT)
constexpr unsigned kNotInstant = 1846;             // ER_ALTER_OPERATION_NOT_SUPPORTED_REASON
constexpr unsigned kNotInstantNoReason = 1845;     // ER_ALTER_OPERATION_NOT_SUPPORTED

std::string unquoted(const std::string& quoted) { return quoted.substr(1, quoted.size() - 2); }

// The queue tables of the topic's groups (`groups`: their numbers) and its first `partitions`
// partitions that have the send fence on this server, quoted.
std::vector<std::string> fenced_tables(Connection& c, std::string_view topic,
                                       const std::vector<unsigned>& groups, unsigned partitions) {
  std::vector<std::string> names;
  for (unsigned g : groups) {
    for (unsigned p = 0; p < partitions; ++p) {
      names.push_back(unquoted(topic_tables(topic, g, p).queue));
    }
  }
  std::vector<Param> params = {Param(kSendFence)};
  for (const std::string& name : names) params.emplace_back(std::string_view(name));
  Result r = c.execute(fmt::format("SELECT TABLE_NAME FROM information_schema.COLUMNS WHERE "
                                   "TABLE_SCHEMA = DATABASE() AND COLUMN_NAME = ? AND "
                                   "TABLE_NAME IN {}",
                                   placeholders(names.size())),
                       params);
  std::vector<std::string> out;
  for (const Row& row : r.rows) out.push_back(quote_identifier(row.bytes(0)));
  return out;
}

// Renews the caller's claim on the topic's layout (LayoutLock::renew): false when another
// client overtook it.
using RenewClaim = std::function<bool()>;

// `where`: the table waited for, or the topic.
Error claim_lost(const std::string& where) {
  return Error(Errc::kUnavailable,
               fmt::format("waiting for transactions on {} outlasted this change's claim on the "
                           "topic, which another client has taken: nothing more was changed",
                           where));
}

// One ALTER TABLE of the fences, waiting at most kFenceWaitSeconds for the table's metadata lock
// each time, kFenceAttempts times, renewing the claim before each (waiting can outlast it).
// Throws kUnavailable when a transaction held the table all along or the claim was lost; other
// errors as the server gave them.
void alter_for_fence(Connection& c, const std::string& table, std::string_view change,
                     bool instant, const RenewClaim& renew) {
  for (int attempt = 1;; ++attempt) {
    if (!renew()) throw claim_lost(table);
    try {
      c.query(fmt::format("ALTER TABLE {} WAIT {} {}{}", table, kFenceWaitSeconds, change,
                          instant ? ", ALGORITHM=INSTANT" : ""));
      return;
    } catch (const Error& e) {
      if (e.server_errno() != kLockWaitTimeout || c.broken()) throw;
      if (attempt == kFenceAttempts) {
        throw Error(Errc::kUnavailable,
                    fmt::format("the change waited {} times {} s for transactions on {} to end "
                                "(a long exactly-once handler or an open Transaction?) and made "
                                "no change of groups or placement: try again",
                                kFenceAttempts, kFenceWaitSeconds, table),
                    e.server_errno());
      }
      std::this_thread::sleep_for(kFencePause);
    }
  }
}

// Drops the send fences of the topic's queue tables on this server (every group of `layout`,
// its partitions), waiting for the sends that name them, and returns with the claim renewed
// (the caller's change then has a full claim's time to commit). DDL: commits what the
// connection had open. Throws when a fence could not be dropped or the claim was lost (the
// caller's change must not go on; the caller adds back what was dropped).
void drop_send_fences(Connection& c, const TopicLayout& layout, const RenewClaim& renew) {
  std::vector<unsigned> groups;
  for (const GroupEntry& g : layout.groups) groups.push_back(g.number);
  const std::string change = fmt::format("DROP COLUMN IF EXISTS {}", kSendFence);
  for (const std::string& table :
       fenced_tables(c, layout.info.name, groups, layout.partitions())) {
    try {
      alter_for_fence(c, table, change, true, renew);
    } catch (const Error& e) {
      if (e.server_errno() != kNotInstant && e.server_errno() != kNotInstantNoReason) throw;
      alter_for_fence(c, table, change, false, renew);  // the server rebuilds the table
    }
  }
  if (!renew()) throw claim_lost(layout.info.name);
}

// Adds the send fences of a topic whose only group has number `group`, to the partitions placed
// here (`placed`: a mask, as TopicLayout::placed). REQUIRES: the caller holds the topic's claim
// (or the schema's, in a migration) and read the layout after it last renewed it; `renew` keeps
// it, and a fence is added only while it is held (a change that overtook this one may have
// given the topic a second group). Best effort: a fence that is missing costs sends speed,
// never a message. MariaDB refuses instant ALTERs after about a thousand instant drops of one
// table (then no fence: sends take the checked statement until the table is rebuilt).
void add_send_fences(Connection& c, std::string_view topic, unsigned group, unsigned partitions,
                     std::uint64_t placed, const RenewClaim& renew) {
  for (unsigned p = 0; p < partitions; ++p) {
    if (!placed_in(placed, p)) continue;
    try {
      alter_for_fence(c, topic_tables(topic, group, p).queue,
                      fmt::format("ADD COLUMN IF NOT EXISTS {} TINYINT NULL", kSendFence), true,
                      renew);
    } catch (const Error&) {
      // No privilege (1142), no instant ALTER, transactions that held the table, the claim
      // lost, or the connection failed: sends take the checked statement.
      return;
    }
  }
}

void add_send_fences(Connection& c, const std::optional<TopicLayout>& layout,
                     const RenewClaim& renew) {
  if (!layout || layout->groups.size() != 1) return;
  add_send_fences(c, layout->info.name, layout->allocator().number, layout->partitions(),
                  layout->placed, renew);
}

// Keys of messages sent before version 4 (when keys did not order delivery): every such message
// counts as its key's current one, so that later sends with the key wait for all of them.
void seed_keys(Connection& c, const TopicTables& t) {
  c.query(
      fmt::format("INSERT IGNORE INTO {} (msg_key, heads, parked) SELECT msg_key, COUNT(*), 0 "
                  "FROM {} WHERE msg_key IS NOT NULL GROUP BY msg_key",
                  t.keys, t.queue));
}

// Version 2 -> 3: topics gain a dedup window (default 5 minutes) and a dedup table. Serialised
// between clients by a claim on txmq_schema (bootstrap); each step can run again after an
// interruption.
// A decision per XA batch (xa_process.cc): written 'commit' by the consumer in the transaction
// that deletes the batch's messages, or 'abort' by recovery, which fences a batch whose consumer
// died before that commit. Deleted once the resource's branch is finished.
constexpr const char* kCreateXaTable =
    "CREATE TABLE IF NOT EXISTS txmq_xa ("
    " token BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
    " outcome ENUM('commit','abort') CHARACTER SET ascii NOT NULL,"
    " resource VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " owner_id BIGINT UNSIGNED NOT NULL,"
    " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " grp VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " first_id BIGINT UNSIGNED NOT NULL,"
    " messages INT UNSIGNED NOT NULL,"
    " created_at DATETIME(6) NOT NULL,"
    " KEY (resource, created_at)) ENGINE=InnoDB";

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

// Version 4 -> 5: topics gain partitions (1), an archive setting (off), a layout version and
// their group "default" (number 0, whose tables are the version-4 ones), and an archive table.
// Waiter registrations name a group's channel (up to 64 characters).
void migrate_from_4(Connection& c) {
  c.query(
      "ALTER TABLE txmq_topics"
      " ADD COLUMN IF NOT EXISTS partitions INT UNSIGNED NOT NULL DEFAULT 1,"
      " ADD COLUMN IF NOT EXISTS archive_us BIGINT UNSIGNED NOT NULL DEFAULT 0,"
      " ADD COLUMN IF NOT EXISTS layout BIGINT UNSIGNED NOT NULL DEFAULT 0,"
      " ADD COLUMN IF NOT EXISTS next_group INT UNSIGNED NOT NULL DEFAULT 1");
  c.query(
      "INSERT IGNORE INTO txmq_groups (topic, name, number, created_at)"
      " SELECT name, 'default', 0, created_at FROM txmq_topics");
  Result topics = c.execute("SELECT name FROM txmq_topics", {});
  for (const Row& row : topics.rows) create_shared_tables(c, topic_tables(row.bytes(0)));
  c.query(
      "ALTER TABLE txmq_waiters MODIFY topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin "
      "NOT NULL");
  c.execute("UPDATE txmq_schema SET version = 5, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 5 -> 6: message rows gain their attributes (queue, parked, dead-letter and archive
// tables of every group and partition) and queue rows the time of their first claim.
void migrate_from_5(Connection& c) {
  c.query(
      "ALTER TABLE txmq_topics"
      " ADD COLUMN IF NOT EXISTS dead_letter_topic VARCHAR(48) CHARACTER SET ascii COLLATE "
      "ascii_bin NULL,"
      " ADD COLUMN IF NOT EXISTS retention_us BIGINT UNSIGNED NOT NULL DEFAULT 0");
  Result queues = c.execute(
      "SELECT g.topic, g.number, t.partitions FROM txmq_groups AS g JOIN txmq_topics AS t ON "
      "t.name = g.topic",
      {});
  for (const Row& row : queues.rows) {
    const std::string topic = row.bytes(0);
    const auto group = static_cast<unsigned>(row.u64(1));
    for (unsigned p = 0; p < static_cast<unsigned>(row.u64(2)); ++p) {
      const TopicTables t = topic_tables(topic, group, p);
      c.query(fmt::format(
          "ALTER TABLE {} ADD COLUMN IF NOT EXISTS attributes LONGBLOB NULL, ADD COLUMN IF NOT "
          "EXISTS first_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'",
          t.queue));
      for (const std::string& table : {t.parked, t.dead}) {
        c.query(fmt::format("ALTER TABLE {} ADD COLUMN IF NOT EXISTS attributes LONGBLOB NULL",
                            table));
      }
      if (group == 0 && p == 0) {
        c.query(fmt::format("ALTER TABLE {} ADD COLUMN IF NOT EXISTS attributes LONGBLOB NULL",
                            t.archive));
      }
    }
  }
  c.execute("UPDATE txmq_schema SET version = 6, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 6 -> 7: topics gain the claim on their layout (LayoutLock), which replaces a named
// user lock that Galera does not replicate. Upgrade every client together: a version-6 client
// would not see the claims, nor a version-7 one its named locks.
void migrate_from_6(Connection& c) {
  c.query(
      "ALTER TABLE txmq_topics"
      " ADD COLUMN IF NOT EXISTS layout_claimed_by VARCHAR(64) CHARACTER SET ascii COLLATE "
      "ascii_bin NULL,"
      " ADD COLUMN IF NOT EXISTS layout_claimed_until DATETIME(6) NULL");
  c.execute("UPDATE txmq_schema SET version = 7, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 7 -> 8: a topic's partitions may be spread over several servers (placement.h). Each
// server's row says which of the topic's partitions live there (`placed`, NULL: all); the
// catalog records the servers and the placement (txmq_servers, txmq_placements, created by
// bootstrap).
void migrate_from_7(Connection& c) {
  c.query("ALTER TABLE txmq_topics ADD COLUMN IF NOT EXISTS placed BIGINT UNSIGNED NULL");
  c.execute("UPDATE txmq_schema SET version = 8, updated_at = NOW(6) WHERE singleton = 1", {});
}

// Version 8 -> 9: exactly-once across databases (xa_process.cc). txmq_xa holds each XA
// batch's decision; txmq_schema.instance_id names this database in the branches' xids
// (written once, by the first client that needs it).
void migrate_from_8(Connection& c) {
  c.query("ALTER TABLE txmq_schema ADD COLUMN IF NOT EXISTS instance_id BIGINT UNSIGNED NULL");
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

// Version 11 -> 12: a watch registers once per channel it watches (waiting.cc), so txmq_waiters
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

// --- Claims ------------------------------------------------------------------------------------
//
// What must not run twice at once between clients (a schema migration; a change of one topic's
// groups or partitions) is serialised by a claim on a catalog row: a random token and an expiry
// written in autocommit, won when the UPDATE finds the row unclaimed or its claim run out, and
// released by the token. Unlike a named user lock (node-local on Galera) the claim is a
// replicated row write: on Galera two nodes racing for it fail certification except one (1213,
// kAborted), which counts as "not won, look again". A claimer that died is overtaken when its
// claim runs out. Same code on a single server.

// A row that holds a claim. Identifiers only; values are bound.
struct ClaimedRow {
  std::string_view table;
  std::string_view key;    // its primary key column
  std::string_view by;     // the holder's token, NULL when free
  std::string_view until;  // when the claim runs out (server time)
};
constexpr ClaimedRow kSchemaClaim{"txmq_schema", "singleton", "claimed_by", "claimed_until"};
constexpr ClaimedRow kLayoutClaim{"txmq_topics", "name", "layout_claimed_by",
                                  "layout_claimed_until"};
// How long a claim lasts unless renewed, and how long a client waits for one held by another
// before kUnavailable. The same: a claim older than this is its dead holder's.
constexpr int kClaimSeconds = 60;

std::mt19937_64& claim_random() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return random;
}

std::string claim_token() {
  return fmt::format("{:016x}{:016x}", claim_random()(), claim_random()());
}

// One try, in autocommit: true when `token` now holds the claim. Also renews the token's own
// claim. A deadlock, lock-wait timeout or certification failure means another client's write
// won: not won.
bool try_claim(Connection& c, const ClaimedRow& row, const Param& key, std::string_view token) {
  try {
    Result r = c.execute(
        fmt::format("UPDATE {0} SET {2} = ?, {3} = NOW(6) + INTERVAL {4} SECOND WHERE {1} = ? AND "
                    "({2} IS NULL OR {2} = ? OR {3} < NOW(6))",
                    row.table, row.key, row.by, row.until, kClaimSeconds),
        {token, key, token});
    return r.affected_rows == 1;
  } catch (const Error& e) {
    if (e.code() == Errc::kAborted) return false;
    throw;
  }
}

enum class Claimed { kWon, kNotNeeded, kTimedOut };

// Tries to claim every 100-200 ms for up to kClaimSeconds; `not_needed` is asked after each
// try that lost (the holder may have done the work, or the row gone).
template <typename F>
Claimed claim_row(Connection& c, const ClaimedRow& row, const Param& key, std::string_view token,
                  F&& not_needed) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kClaimSeconds);
  for (;;) {
    if (try_claim(c, row, key, token)) return Claimed::kWon;
    if (not_needed()) return Claimed::kNotNeeded;
    if (std::chrono::steady_clock::now() >= deadline) return Claimed::kTimedOut;
    std::this_thread::sleep_for(std::chrono::milliseconds(
        100 + static_cast<int>(claim_random()() % 101)));
  }
}

// Releases the token's claim (in autocommit, after rolling back what the connection left open).
// Failures are left alone: the claim then runs out by itself.
void release_claim(Connection& c, const ClaimedRow& row, const Param& key,
                   std::string_view token) noexcept {
  if (c.in_transaction()) c.rollback();
  for (int tries = 0; tries < 3 && !c.broken(); ++tries) {
    try {
      c.execute(fmt::format("UPDATE {0} SET {2} = NULL, {3} = NULL WHERE {1} = ? AND {2} = ?",
                            row.table, row.key, row.by, row.until),
                {key, token});
      return;
    } catch (const Error& e) {
      if (e.code() != Errc::kAborted) return;
    }
  }
}

// Serialises changes of one topic's groups and partitions between clients: a claim on the
// topic's row, held from construction to destruction. Holds nothing when the topic does not
// exist (the caller's load() then finds it missing). A change that outlives the claim (a minute)
// can be overtaken only while it does not hold the row's lock: the part of a group change that
// bumps the layout holds it (with_topic_fenced), and a claim waits for it.
class LayoutLock {
 public:
  LayoutLock(Connection& c, std::string_view topic)
      : c_(c), topic_(topic), token_(claim_token()) {
    const Param key{std::string_view(topic_)};
    const Claimed got = claim_row(c_, kLayoutClaim, key, token_, [&] {
      return c_.execute("SELECT 1 FROM txmq_topics WHERE name = ?", {key}).rows.empty();
    });
    if (got == Claimed::kTimedOut) {
      throw Error(Errc::kUnavailable,
                  fmt::format("another client has been changing the groups or partitions of "
                              "topic '{}' for over a minute",
                              topic));
    }
    held_ = got == Claimed::kWon;
  }
  ~LayoutLock() {
    if (held_) release_claim(c_, kLayoutClaim, Param{std::string_view(topic_)}, token_);
  }
  // Renews the claim for another kClaimSeconds: false when none was held or another client has
  // overtaken it (this one ran out). Read the layout after it, not before.
  bool renew() {
    return held_ && try_claim(c_, kLayoutClaim, Param{std::string_view(topic_)}, token_);
  }
  LayoutLock(const LayoutLock&) = delete;
  LayoutLock& operator=(const LayoutLock&) = delete;

 private:
  Connection& c_;
  std::string topic_;
  std::string token_;
  bool held_ = false;
};

// Runs a function when the scope ends, however it ends. It must not throw.
template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F fn_;
};

std::int64_t schema_version(Connection& c) {
  return c.execute("SELECT version FROM txmq_schema WHERE singleton = 1", {}).rows.at(0).i64(0);
}

// True when the catalog is complete and current. Then nothing is created, so that clients
// need no DDL privileges (README "Security"); only the first client and upgrades do.
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

}  // namespace

void TopicCatalog::bootstrap() {
  pool_.run(OnLostConnection::kRetry, [](Connection& c, const Attempt&) {
    if (catalog_is_current(c)) return;
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
        " placed BIGINT UNSIGNED NULL) ENGINE=InnoDB");
    // Servers that topics may be spread over, and where each spread topic's partitions live
    // (placement.cc). Passwords are never stored: a DSN names a password file or variable.
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
    // (waiting.cc). MEMORY: a registration is a connection id, which means nothing after a
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
    if (version == kSchemaVersion) return;
    // One client migrates; the others wait for its claim on txmq_schema's row and find the
    // version current. The claim's columns first (a database of version 6 or older lacks
    // them): DDL, idempotent, and replicated to every node of a Galera cluster.
    c.query(
        "ALTER TABLE txmq_schema"
        " ADD COLUMN IF NOT EXISTS claimed_by VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin "
        "NULL,"
        " ADD COLUMN IF NOT EXISTS claimed_until DATETIME(6) NULL");
    const std::string token = claim_token();
    const Param key(std::int64_t{1});
    const Claimed got = claim_row(c, kSchemaClaim, key, token,
                                  [&] { return schema_version(c) >= kSchemaVersion; });
    if (got == Claimed::kNotNeeded) return;
    if (got == Claimed::kTimedOut) {
      throw Error(Errc::kUnavailable,
                  "another client has been migrating the txmq schema for over a minute");
    }
    try {
      // Each step renews the claim first, and reads the version again: another client may
      // have migrated between this client's first read and its claim.
      const auto step = [&](std::int64_t from, void (*migrate)(Connection&)) {
        if (schema_version(c) != from) return;
        if (!try_claim(c, kSchemaClaim, key, token)) {
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
    } catch (...) {
      release_claim(c, kSchemaClaim, key, token);
      throw;
    }
    release_claim(c, kSchemaClaim, key, token);
  });
}

std::optional<TopicLayout> TopicCatalog::load(Connection& c, std::string_view name) {
  // The version first: a group changed between the two reads then shows as a stale version,
  // which a send's check catches, never as a current version with old groups.
  Result r = c.execute(fmt::format("{} WHERE name = ?", kSelectTopic), {name});
  if (r.rows.empty()) return std::nullopt;
  TopicLayout layout;
  layout.info = topic_from_row(r.rows[0]);
  layout.version = r.rows[0].u64(12);
  layout.placed = r.rows[0].null(15) ? kAllPartitions : r.rows[0].u64(15);
  Result g = c.execute(fmt::format("SELECT name, number, {} FROM txmq_groups WHERE topic = ? "
                                   "ORDER BY number",
                                   micros_of("created_at")),
                       {name});
  for (const Row& row : g.rows) {
    layout.groups.push_back(
        {row.bytes(0), static_cast<unsigned>(row.u64(1)), time_from_micros(row.i64(2))});
  }
  if (layout.groups.empty()) return std::nullopt;  // being created or dropped
  return layout;
}

TopicLayout TopicCatalog::reload(Connection& c, std::string_view name) {
  check_topic_name(name);
  std::optional<TopicLayout> layout = load(c, name);
  if (!layout) {
    forget(name);
    throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
  }
  std::lock_guard lock(mutex_);
  cache_[std::string(name)] = Cached{*layout, std::chrono::steady_clock::now()};
  return *layout;
}

std::optional<TopicLayout> TopicCatalog::cached(std::string_view name) {
  check_topic_name(name);
  std::lock_guard lock(mutex_);
  auto it = cache_.find(std::string(name));
  if (it != cache_.end() && std::chrono::steady_clock::now() - it->second.fetched < kCacheFor) {
    return it->second.layout;
  }
  return std::nullopt;
}

TopicLayout TopicCatalog::layout(std::string_view name) {
  if (std::optional<TopicLayout> known = cached(name)) return std::move(*known);
  return pool_.run(OnLostConnection::kRetry,
                   [&](Connection& c, const Attempt&) { return reload(c, name); });
}

TopicLayout TopicCatalog::layout(std::string_view name, Connection& c) {
  if (std::optional<TopicLayout> known = cached(name)) return std::move(*known);
  return reload(c, name);
}

void TopicCatalog::forget(std::string_view name) {
  std::lock_guard lock(mutex_);
  cache_.erase(std::string(name));
}

void TopicCatalog::no_send_fences(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = cache_.find(std::string(name));
  if (it != cache_.end()) it->second.layout.send_fences = false;
}

bool TopicCatalog::create(std::string_view name, const TopicOptions& options,
                          std::uint64_t placed) {
  check_options(options);
  check_dead_letter_topic(name, options);
  check_topic_name(name);
  bool created = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    // DDL commits by itself, so the tables come first; the catalog rows make the topic exist.
    for (int p = 0; p < options.partitions; ++p) {
      const auto partition = static_cast<unsigned>(p);
      create_queue_tables(c, topic_tables(name, 0, partition), first_id_of(partition));
    }
    create_shared_tables(c, topic_tables(name));
    std::vector<Param> params = option_params(options);
    params.insert(params.begin(), name);
    params.push_back(static_cast<std::int64_t>(options.partitions));
    params.push_back(placed == kAllPartitions ? Param(nullptr) : Param(placed));
    c.begin();
    Result r = c.execute(
        "INSERT IGNORE INTO txmq_topics (name, lease_us, max_attempts, max_payload_bytes, "
        "dedup_window_us, retry_initial_us, retry_multiplier, retry_max_us, retry_jitter, "
        "archive_us, dead_letter_topic, retention_us, partitions, placed, created_at) VALUES (?, "
        "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6))",
        params);
    if (r.affected_rows == 1) {
      c.execute("INSERT IGNORE INTO txmq_groups (topic, name, number, created_at) "
                "VALUES (?, ?, 0, NOW(6))",
                {name, kDefaultGroup});
    }
    c.commit();
    return r.affected_rows == 1;
  });
  forget(name);
  if (created) {
    pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      LayoutLock held(c, name);
      if (held.renew()) add_send_fences(c, load(c, name), [&] { return held.renew(); });
    });
    return true;
  }
  const TopicOptions existing = get(name).options;
  if (existing != options) {
    throw Error(Errc::kAlreadyExists,
                fmt::format("topic '{}' exists with other settings (lease {} ms, max attempts {}, "
                            "max payload {} bytes, dedup window {} s, retry {} ms x{} up to {} ms "
                            "with {} jitter, {} partitions, archive {} s); change them with "
                            "update_topic (txmq topic set)",
                            name, existing.lease.count() / 1000, existing.max_attempts,
                            existing.max_payload_bytes, existing.dedup_window.count() / 1000000,
                            existing.retry.initial.count() / 1000, existing.retry.multiplier,
                            existing.retry.max.count() / 1000, existing.retry.jitter,
                            existing.partitions, existing.archive.count() / 1000000));
  }
  return false;
}

void TopicCatalog::check_dead_letter_topic(std::string_view name, const TopicOptions& options) {
  if (options.dead_letter_topic.empty()) return;
  if (options.dead_letter_topic == name) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("topic '{}' cannot be its own dead-letter topic", name));
  }
  get(options.dead_letter_topic);  // kNotFound naming it
}

void TopicCatalog::drop(std::string_view name) {
  check_topic_name(name);
  Result sources = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute("SELECT name FROM txmq_topics WHERE dead_letter_topic = ? ORDER BY name", {name});
  });
  if (!sources.rows.empty()) {
    throw Error(Errc::kFailedPrecondition,
                fmt::format("topic '{}' is the dead-letter topic of '{}': change that topic's "
                            "dead-letter topic first",
                            name, sources.rows[0].bytes(0)));
  }
  bool existed = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    LayoutLock held(c, name);
    std::optional<TopicLayout> layout = load(c, name);
    if (layout) drop_send_fences(c, *layout, [&] { return held.renew(); });
    c.begin();
    Result r = c.execute("DELETE FROM txmq_topics WHERE name = ?", {name});
    c.execute("DELETE FROM txmq_groups WHERE topic = ?", {name});
    c.commit();
    if (!layout) return r.affected_rows == 1;
    for (const GroupEntry& g : layout->groups) {
      c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {wait_channel(name, g.number)});
      for (unsigned p = 0; p < layout->partitions(); ++p) {
        const TopicTables t = topic_tables(name, g.number, p);
        c.query(fmt::format("DROP TABLE IF EXISTS {}, {}, {}, {}", t.queue, t.dead, t.keys,
                            t.parked));
      }
    }
    const TopicTables t = topic_tables(name);
    c.query(fmt::format("DROP TABLE IF EXISTS {}, {}", t.dedup, t.archive));
    c.execute("DELETE FROM txmq_metrics WHERE topic = ?", {name});
    return r.affected_rows == 1;
  });
  forget(name);
  if (!existed) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
}

void TopicCatalog::set_placed(std::string_view name, std::uint64_t placed) {
  check_topic_name(name);
  const Param mask = placed == kAllPartitions ? Param(nullptr) : Param(placed);
  pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    LayoutLock held(c, name);
    // The fences of partitions that leave first (all of them: simpler, and rare).
    const std::optional<TopicLayout> before = load(c, name);
    const bool moves = before && before->placed != placed;
    if (moves) drop_send_fences(c, *before, [&] { return held.renew(); });
    Result r = c.execute(
        "UPDATE txmq_topics SET placed = ?, layout = layout + 1 WHERE name = ? AND NOT "
        "(placed <=> ?)",
        {mask, name, mask});
    if (r.affected_rows == 0 &&
        c.execute("SELECT 1 FROM txmq_topics WHERE name = ?", {name}).rows.empty()) {
      throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
    }
    if (moves && held.renew()) add_send_fences(c, load(c, name), [&] { return held.renew(); });
  });
  forget(name);
}

void TopicCatalog::update(std::string_view name, const TopicOptions& options,
                          std::optional<std::uint64_t> placed) {
  check_options(options);
  check_dead_letter_topic(name, options);
  check_topic_name(name);
  // The partition count twice: whether it changed (the layout version moves), and its value.
  std::vector<Param> params = option_params(options);
  params.push_back(static_cast<std::int64_t>(options.partitions));
  params.push_back(static_cast<std::int64_t>(options.partitions));
  params.push_back(name);
  pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    LayoutLock held(c, name);
    std::optional<TopicLayout> layout = load(c, name);
    if (!layout) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
    const int had = layout->info.options.partitions;
    if (options.partitions < had) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' has {} partitions: partitions can be raised, not "
                              "lowered",
                              name, had));
    }
    const bool moves = placed && *placed != layout->placed;
    if (moves) drop_send_fences(c, *layout, [&] { return held.renew(); });
    // New partitions get their tables in every group before sends may use them.
    for (int p = had; p < options.partitions; ++p) {
      const auto partition = static_cast<unsigned>(p);
      for (const GroupEntry& g : layout->groups) {
        create_queue_tables(c, topic_tables(name, g.number, partition), first_id_of(partition));
      }
    }
    c.execute(
        "UPDATE txmq_topics SET lease_us = ?, max_attempts = ?, max_payload_bytes = ?, "
        "dedup_window_us = ?, retry_initial_us = ?, retry_multiplier = ?, retry_max_us = ?, "
        "retry_jitter = ?, archive_us = ?, dead_letter_topic = ?, retention_us = ?, "
        "layout = layout + IF(partitions = ?, 0, 1), "
        "partitions = ? WHERE name = ?",
        params);
    if (placed) {
      const Param mask = *placed == kAllPartitions ? Param(nullptr) : Param(*placed);
      c.execute("UPDATE txmq_topics SET placed = ?, layout = layout + 1 WHERE name = ? AND NOT "
                "(placed <=> ?)",
                {mask, name, mask});
    }
    if ((moves || options.partitions > had) && held.renew()) {
      add_send_fences(c, load(c, name), [&] { return held.renew(); });
    }
  });
  forget(name);
}

std::vector<TopicInfo> TopicCatalog::list() {
  Result r = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("{} ORDER BY name", kSelectTopic), {});
  });
  std::vector<TopicInfo> topics;
  for (const Row& row : r.rows) topics.push_back(topic_from_row(row));
  return topics;
}

// --- Consumer groups ----------------------------------------------------------------------------
//
// Every group has its own copy of each message, in its own queue tables: claims, leases, keyed
// FIFO, retries and dead letters work per group exactly as for a topic with one group, and no
// cursor can skip a message whose transaction committed late (DESIGN.md). A send inserts into
// the allocating group's tables (ids) and copies into the others' in its transaction.
//
// A send must never miss a group that exists when it commits. Sends check the topic's layout
// version in the statement or transaction that inserts (send.cc), with a shared lock on the
// topic's row that they hold until they commit, and read the groups again when it changed. A
// group change bumps the version in a transaction that starts by locking that row for update
// (with_topic_fenced): it waits for sends in progress, and sends after it wait for its commit
// and then read the new version.
//
// On Galera the fence holds on the node where both run: txmq sends all of a cluster's queue
// work to one writer node (docs/galera.md). A shared lock is not certified, so a send through
// another node (while clients move to a new writer) is not held up by it: a documented limit.

namespace {

// Runs fn in one transaction that first locks the topic's row for update, then commits. Lock
// waits (for sends in progress, which hold the row's shared lock until they commit) are bounded
// at 30 s; the claims of other clients wait for this transaction too.
template <typename F>
void with_topic_fenced(Connection& c, std::string_view topic, F&& fn) {
  c.query("SET SESSION innodb_lock_wait_timeout = 30");
  try {
    c.begin();
    Result r = c.execute("SELECT layout FROM txmq_topics WHERE name = ? FOR UPDATE", {topic});
    if (r.rows.empty()) {
      throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic));
    }
    fn();
    c.commit();
  } catch (...) {
    if (!c.broken()) {
      c.rollback();
      try {
        c.query("SET SESSION innodb_lock_wait_timeout = DEFAULT");
      } catch (const Error&) {
      }
    }
    throw;
  }
  c.query("SET SESSION innodb_lock_wait_timeout = DEFAULT");
}

}  // namespace

bool TopicCatalog::create_group(std::string_view topic, std::string_view group,
                                GroupStart start) {
  check_topic_name(topic);
  check_group_name(group);
  bool created = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    LayoutLock held(c, topic);
    std::optional<TopicLayout> layout = load(c, topic);
    if (!layout) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic));
    for (const GroupEntry& g : layout->groups) {
      if (g.name == group) return false;
    }
    // DDL commits by itself: first the end of single sends' fast path (the send fences, whose
    // drop waits for the sends naming them: it may give up, and then nothing else has changed),
    // then the new tables, before the fenced transaction.
    bool group_made = false;
    const ScopeExit restore([&] {  // no group after all: the fences back, if the connection works
      if (group_made || c.broken()) return;
      try {
        if (held.renew()) add_send_fences(c, load(c, topic), [&] { return held.renew(); });
      } catch (const Error&) {
      }
    });
    drop_send_fences(c, *layout, [&] { return held.renew(); });
    Result n = c.execute(
        "UPDATE txmq_topics SET next_group = LAST_INSERT_ID(next_group) + 1 WHERE name = ?",
        {topic});
    const auto number = static_cast<unsigned>(n.insert_id);
    if (number == 0 || number > kMaxGroupNumber) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("topic '{}' has used all {} group numbers; create a new topic",
                              topic, kMaxGroupNumber));
    }
    const unsigned partitions = layout->partitions();
    const unsigned allocator = layout->allocator().number;
    std::vector<TopicTables> fresh;
    for (unsigned p = 0; p < partitions; ++p) {
      fresh.push_back(topic_tables(topic, number, p));
      create_queue_tables(c, fresh.back(), first_id_of(p));
    }
    // Still this change's claim (waiting for the fences may have outlasted it): no other change
    // can take it before the fenced transaction commits, which is short.
    if (!held.renew()) throw claim_lost(std::string(topic));
    with_topic_fenced(c, topic, [&] {
      for (unsigned p = 0; p < partitions; ++p) {
        const TopicTables& t = fresh[p];
        // The new tables may allocate ids one day (when the groups before them are dropped):
        // start their counter where the allocator's is, by a row inserted and deleted. No send
        // to the topic is in progress now (the fence), so the allocator's counter stands still;
        // information_schema's AUTO_INCREMENT is this node's counter, which is the writer's.
        Result next = c.execute(
            "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
            "DATABASE() AND TABLE_NAME = ?",
            {unquoted(topic_tables(topic, allocator, p).queue)});
        if (!next.rows.empty() && !next.rows[0].null(0) &&
            next.rows[0].u64(0) > first_id_of(p)) {
          const std::uint64_t last = next.rows[0].u64(0) - 1;
          c.execute(fmt::format("INSERT INTO {} (id, visible_at, enqueued_at, payload) VALUES "
                                "(?, NOW(6), NOW(6), '')",
                                t.queue),
                    {last});
          c.execute(fmt::format("DELETE FROM {} WHERE id = ?", t.queue), {last});
        }
        if (start != GroupStart::kEarliest) continue;
        // Every message retained: unfinished in some group (waiting, in flight or parked
        // behind its key) or archived. Copies start at attempt 1, claimable now.
        const std::string insert = fmt::format(
            "INSERT IGNORE INTO {} (id, visible_at, attempts, lease_token, owner_id, enqueued_at, "
            "msg_key, payload, attributes) ",
            t.queue);
        for (const GroupEntry& g : layout->groups) {
          const TopicTables from = topic_tables(topic, g.number, p);
          c.query(insert + fmt::format("SELECT id, NOW(6), 0, 0, 0, enqueued_at, msg_key, payload, attributes "
                                       "FROM {}",
                                       from.queue));
          c.query(insert + fmt::format("SELECT id, NOW(6), 0, 0, 0, enqueued_at, msg_key, payload, attributes "
                                       "FROM {}",
                                       from.parked));
        }
        c.execute(insert + fmt::format("SELECT id, NOW(6), 0, 0, 0, enqueued_at, msg_key, payload, attributes "
                                       "FROM {} WHERE id BETWEEN ? AND ?",
                                       topic_tables(topic).archive),
                  {first_id_of(p), first_id_of(p + 1) - 1});
        // Keyed messages wait behind their key's first one, in id order.
        Result keyed = c.execute(fmt::format(
            "SELECT msg_key, id FROM {} WHERE msg_key IS NOT NULL ORDER BY id", t.queue), {});
        std::vector<std::pair<std::string_view, std::uint64_t>> pairs;
        for (const Row& row : keyed.rows) pairs.emplace_back(row.bytes(0), row.u64(1));
        order_keyed(c, t, pairs);
      }
      c.execute("UPDATE txmq_topics SET layout = layout + 1 WHERE name = ?", {topic});
      c.execute("INSERT INTO txmq_groups (topic, name, number, created_at) VALUES (?, ?, ?, "
                "NOW(6))",
                {topic, group, static_cast<std::int64_t>(number)});
    });
    group_made = true;
    return true;
  });
  forget(topic);
  return created;
}

void TopicCatalog::drop_group(std::string_view topic, std::string_view group) {
  check_topic_name(topic);
  check_group_name(group);
  pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    LayoutLock held(c, topic);
    std::optional<TopicLayout> layout = load(c, topic);
    if (!layout) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic));
    const GroupEntry g = layout->group(group);
    if (layout->groups.size() == 1) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("'{}' is the last group of topic '{}': drop the topic instead",
                              group, topic));
    }
    with_topic_fenced(c, topic, [&] {
      c.execute("UPDATE txmq_topics SET layout = layout + 1 WHERE name = ?", {topic});
      c.execute("DELETE FROM txmq_groups WHERE topic = ? AND name = ?", {topic, group});
    });
    c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {wait_channel(topic, g.number)});
    c.execute("DELETE FROM txmq_metrics WHERE topic = ? AND grp = ?", {topic, group});
    for (unsigned p = 0; p < layout->partitions(); ++p) {
      const TopicTables t = topic_tables(topic, g.number, p);
      c.query(
          fmt::format("DROP TABLE IF EXISTS {}, {}, {}, {}", t.queue, t.dead, t.keys, t.parked));
    }
    if (held.renew()) {  // one group left: the fast path
      add_send_fences(c, load(c, topic), [&] { return held.renew(); });
    }
  });
  forget(topic);
}

}  // namespace txmq::internal
