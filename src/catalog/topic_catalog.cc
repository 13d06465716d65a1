#include "catalog/topic_catalog.h"

#include <fmt/format.h>

#include <memory>
#include <unordered_set>

#include "catalog/routines.h"
#include "catalog/row_lock.h"
#include "catalog/send_fences.h"
#include "catalog/send_procedures.h"
#include "catalog/topic_tables.h"
#include "db/sql.h"

namespace txmq::internal {

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

TopicTables TopicLayout::tables(unsigned group, unsigned partition) const {
  return shared ? shared_tables(sid, group, partition) : topic_tables(info.name, group, partition);
}

QueueRef partition_queue(const TopicLayout& layout, unsigned group, unsigned partition) {
  return QueueRef{group, partition, layout.tables(group, partition),
                  wait_channel(layout.info.name, group)};
}

ResolvedTopic::ResolvedTopic(TopicLayout from)
    : layout(std::move(from)), topic_wide(layout.tables()) {
  queues.reserve(layout.groups.size() * layout.partitions());
  for (const GroupEntry& g : layout.groups) {
    for (unsigned p = 0; p < layout.partitions(); ++p) {
      queues.push_back(partition_queue(layout, g.number, p));
    }
  }
}

const QueueRef* ResolvedTopic::queue(unsigned group, unsigned partition) const {
  const unsigned partitions = layout.partitions();
  if (partition >= partitions) return nullptr;
  for (std::size_t g = 0; g < layout.groups.size(); ++g) {
    if (layout.groups[g].number == group) return &queues[g * partitions + partition];
  }
  return nullptr;
}

std::vector<const QueueRef*> ResolvedTopic::claim_order(const GroupEntry& group,
                                                        const std::vector<int>& only) const {
  std::vector<const QueueRef*> units;
  // Partitions placed on other servers (a sharded topic, shard_map.h) are not walked here.
  if (only.empty()) {
    for (unsigned p = 0; p < layout.partitions(); ++p) {
      if (layout.is_placed(p)) units.push_back(queue(group.number, p));
    }
    return units;
  }
  for (int p : only) {
    if (p < 0 || p >= layout.info.options.partitions) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' has partitions 0 to {}; there is no partition {}",
                              layout.info.name, layout.info.options.partitions - 1, p));
    }
    if (!layout.is_placed(static_cast<unsigned>(p))) continue;
    units.push_back(queue(group.number, static_cast<unsigned>(p)));
  }
  return units;
}

std::string_view ResolvedTopic::group_name(unsigned number) const {
  for (const GroupEntry& g : layout.groups) {
    if (g.number == number) return g.name;
  }
  return {};
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
    "dead_letter_topic, retention_us, placed, fair, storage, sid FROM txmq_topics";

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
  info.options.fair = row.i64(16) != 0;
  info.shared_storage = row.i64(17) != 0;
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

}  // namespace

namespace {

// Which of the topic's first table (its dedup keys', made first) and last (the allocating
// group's first queue table, made last) exist.
std::pair<bool, bool> first_and_last_tables(Connection& c, const TopicLayout& layout) {
  const std::string first = unquoted(topic_tables(layout.info.name).dedup);
  const std::string last =
      unquoted(topic_tables(layout.info.name, layout.allocator().number).queue);
  // Two equalities, not IN (?, ?): MariaDB looks a table up by its name only for an equality;
  // an IN list opens every table of the database (100 ms with 60,000 tables, in every first use
  // and every drop).
  Result r = c.execute(
      "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = ? UNION ALL SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
      "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
      {std::string_view(first), std::string_view(last)});
  std::pair<bool, bool> found;
  for (const Row& row : r.rows) (row.bytes(0) == first ? found.first : found.second) = true;
  return found;
}

}  // namespace

bool has_tables(Connection& c, const TopicLayout& layout) {
  return layout.shared || first_and_last_tables(c, layout).second;
}

bool has_some_tables(Connection& c, const TopicLayout& layout) {
  if (layout.shared) return false;  // none of its own
  const auto [first, last] = first_and_last_tables(c, layout);
  return first || last;
}

void create_all_tables(Connection& c, const TopicLayout& layout) {
  const std::string& name = layout.info.name;
  const unsigned allocator = layout.allocator().number;
  const bool fair = layout.info.options.fair;
  create_topic_wide_tables(c, topic_tables(name));
  for (const GroupEntry& g : layout.groups) {
    for (unsigned p = 0; p < layout.partitions(); ++p) {
      if (g.number == allocator && p == 0) continue;
      create_queue_tables(c, topic_tables(name, g.number, p), first_id_of(p), fair);
    }
  }
  // Last: that it exists says the others do (has_tables), also after a make cut short.
  create_queue_tables(c, topic_tables(name, allocator, 0), first_id_of(0), fair);
}

bool TopicCatalog::make_tables(std::string_view name, bool in_transaction) {
  check_topic_name(name);
  const bool exists = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    const std::optional<TopicLayout> before = load(c, name);
    if (!before) return false;
    if (has_tables(c, *before)) return true;  // another client made them meanwhile
    if (in_transaction) {
      // The caller's transaction holds the topic row's shared lock (its send's layout check),
      // which the layout lock's row write would wait for: the tables only, no fences (sends
      // take the checked statement until a change of groups or partitions adds them).
      const std::optional<TopicLayout> layout = load(c, name);
      if (!layout) return false;
      create_all_tables(c, *layout);
      return true;
    }
    LayoutLock held(c, name);
    const std::optional<TopicLayout> layout = load(c, name);
    if (!layout) return false;
    create_all_tables(c, *layout);
    if (held.renew()) add_send_fences(c, load(c, name), [&] { return held.renew(); });
    if (held.renew()) refresh_send_procedure(c, load(c, name));
    return true;
  });
  forget(name);
  return exists;
}

bool TopicCatalog::made_missing_tables(const Error& error, std::string_view topic,
                                       bool in_transaction) {
  return is_missing_table(error.server_errno()) && make_tables(topic, in_transaction);
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
  layout.shared = layout.info.shared_storage;
  layout.sid = r.rows[0].u64(18);
  layout.send_fences = !layout.shared;
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

Topic TopicCatalog::reload(Connection& c, std::string_view name) {
  check_topic_name(name);
  std::optional<TopicLayout> layout = load(c, name);
  if (!layout) {
    forget(name);
    throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
  }
  auto topic = std::make_shared<const ResolvedTopic>(std::move(*layout));
  remember(name, topic);
  return topic;
}

void TopicCatalog::remember(std::string_view name, const Topic& topic) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  // Thousands of topics used once each must not stay cached forever.
  if (cache_.size() >= kCacheSweepAt) {
    std::erase_if(cache_, [&](const auto& entry) { return now - entry.second.fetched >= kCacheFor; });
  }
  cache_[std::string(name)] = Cached{topic, now};
}

Topic TopicCatalog::cached(std::string_view name) {
  check_topic_name(name);
  resolutions_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  auto it = cache_.find(std::string(name));
  if (it != cache_.end() && std::chrono::steady_clock::now() - it->second.fetched < kCacheFor) {
    return it->second.topic;
  }
  return nullptr;
}

Topic TopicCatalog::resolve(std::string_view name) {
  if (Topic known = cached(name)) return known;
  return pool_.run(OnLostConnection::kRetry,
                   [&](Connection& c, const Attempt&) { return reload(c, name); });
}

Topic TopicCatalog::resolve(std::string_view name, Connection& c) {
  if (Topic known = cached(name)) return known;
  return reload(c, name);
}

void TopicCatalog::forget(std::string_view name) {
  std::lock_guard lock(mutex_);
  cache_.erase(std::string(name));
}

void TopicCatalog::no_send_fences(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = cache_.find(std::string(name));
  if (it == cache_.end() || !it->second.topic->layout.send_fences) return;
  auto without = std::make_shared<ResolvedTopic>(*it->second.topic);
  without->layout.send_fences = false;
  it->second.topic = std::move(without);
}

bool TopicCatalog::create(std::string_view name, const TopicOptions& options,
                          std::uint64_t placed, TableCreation tables) {
  check_options(options);
  check_dead_letter_topic(name, options);
  check_topic_name(name);
  const bool tables_now = tables == TableCreation::kNow;
  const bool shared = tables == TableCreation::kShared;
  if (shared && (options.partitions != 1 || options.fair || placed != kAllPartitions)) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("topic '{}': shared storage does not yet take partitions, fair "
                            "delivery or shards; create it with tables of its own",
                            name));
  }
  bool created = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    // DDL commits by itself, so the tables come first; the catalog rows make the topic exist.
    if (tables_now) {
      create_topic_wide_tables(c, topic_tables(name));
      for (int p = 0; p < options.partitions; ++p) {
        const auto partition = static_cast<unsigned>(p);
        create_queue_tables(c, topic_tables(name, 0, partition), first_id_of(partition),
                            options.fair);
      }
    }
    std::vector<Param> params = option_params(options);
    params.insert(params.begin(), name);
    params.push_back(static_cast<std::int64_t>(options.partitions));
    params.push_back(placed == kAllPartitions ? Param(nullptr) : Param(placed));
    params.push_back(static_cast<std::int64_t>(options.fair));
    params.push_back(static_cast<std::int64_t>(shared ? 1 : 0));
    c.begin();
    Result r = c.execute(
        "INSERT IGNORE INTO txmq_topics (name, lease_us, max_attempts, max_payload_bytes, "
        "dedup_window_us, retry_initial_us, retry_multiplier, retry_max_us, retry_jitter, "
        "archive_us, dead_letter_topic, retention_us, partitions, placed, fair, storage, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6))",
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
  // A dead-letter topic gets its tables when a topic names it: claims move messages into it
  // inside their transaction, where none can be made.
  if (!options.dead_letter_topic.empty()) make_tables(options.dead_letter_topic);
  if (created && !tables_now) return true;  // at first use, or shared: none to make
  if (created) {
    pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      LayoutLock held(c, name);
      if (held.renew()) add_send_fences(c, load(c, name), [&] { return held.renew(); });
      if (held.renew()) refresh_send_procedure(c, load(c, name));
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
    // Dropped whether or not the topic has them: looking first in information_schema.ROUTINES
    // scans every routine on MariaDB (200 ms with 10,000 used topics); DROP PROCEDURE IF EXISTS
    // finds one by its key.
    if (layout && layout->shared) {
      // Its rows go after the catalog's (reap_dropped): the topic is gone for everyone now.
      c.execute("INSERT IGNORE INTO txmq_dropped (sid, name, dropped_at) VALUES (?, ?, NOW(6))",
                {layout->sid, name});
      c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {wait_channel(name, 0)});
      for (const GroupEntry& g : layout->groups) {
        if (g.number != 0) {
          c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {wait_channel(name, g.number)});
        }
      }
      c.execute("DELETE FROM txmq_metrics WHERE topic = ?", {name});
      forget_sql_counts(c, name);
      return r.affected_rows == 1;
    }
    drop_send_procedure(c, name);
    if (!layout) return r.affected_rows == 1;
    // A topic never used has no tables to drop (make_tables waits for this layout lock, then
    // finds no topic).
    if (!has_some_tables(c, *layout)) {
      c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {wait_channel(name, 0)});
      c.execute("DELETE FROM txmq_metrics WHERE topic = ?", {name});
      forget_sql_counts(c, name);
      return r.affected_rows == 1;
    }
    for (const GroupEntry& g : layout->groups) {
      c.execute("DELETE FROM txmq_waiters WHERE topic = ?", {wait_channel(name, g.number)});
      for (unsigned p = 0; p < layout->partitions(); ++p) {
        const TopicTables t = topic_tables(name, g.number, p);
        c.query(fmt::format("DROP TABLE IF EXISTS {}, {}, {}, {}", t.queue, t.dead, t.keys,
                            t.parked));
        forget_takes(c, t.queue);
      }
    }
    const TopicTables t = topic_tables(name);
    c.query(fmt::format("DROP TABLE IF EXISTS {}, {}", t.dedup, t.archive));
    c.execute("DELETE FROM txmq_metrics WHERE topic = ?", {name});
    forget_sql_counts(c, name);
    return r.affected_rows == 1;
  });
  forget(name);
  if (!existed) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", name));
  reap_dropped();
}

namespace {
constexpr std::uint64_t kReapRows = 1000;
}  // namespace

void TopicCatalog::reap_dropped() {
  // Every dropped shared topic's rows, a bounded chunk per statement in autocommit, so that no
  // statement holds many locks or much undo; a row of txmq_dropped goes once its rows are gone.
  // Clients that reap together delete the same ranges: harmless, each row goes once.
  const Result dropped = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute("SELECT sid FROM txmq_dropped ORDER BY sid LIMIT 100", {});
  });
  for (const Row& row : dropped.rows) {
    const std::uint64_t sid = row.u64(0);
    const std::uint64_t from = shared_qid(sid, 0, 0);
    const std::uint64_t to = shared_qid(sid + 1, 0, 0);
    pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      const Param qids[] = {from, to};
      const Param sids[] = {sid};
      for (std::string_view table : {kSharedQueue, kSharedParked, kSharedKeys, kSharedDead}) {
        delete_in_chunks(c, quote_identifier(table), "qid >= ? AND qid < ?", qids, kReapRows);
      }
      for (std::string_view table : {kSharedDedup, kSharedArchive}) {
        delete_in_chunks(c, quote_identifier(table), "sid = ?", sids, kReapRows);
      }
      c.execute("DELETE FROM txmq_dropped WHERE sid = ?", {sid});
    });
  }
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
    if (moves && held.renew()) refresh_send_procedure(c, load(c, name));
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
    if (layout->info.options.fair && !options.fair) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' is fair: a fair topic stays fair", name));
    }
    const int had = layout->info.options.partitions;
    if (layout->shared && (options.partitions != 1 || options.fair)) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' is in shared storage, which does not yet take "
                              "partitions or fair delivery",
                              name));
    }
    if (options.partitions < had) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' has {} partitions: partitions can be raised, not "
                              "lowered",
                              name, had));
    }
    // The payload limit is in the fast send's text and no fence covers it: a lower limit is
    // written there first (between the two, that text is the stricter), or not at all.
    if (options.max_payload_bytes < layout->info.options.max_payload_bytes &&
        has_tables(c, *layout)) {
      TopicLayout lowered = *layout;
      lowered.info.options.max_payload_bytes = options.max_payload_bytes;
      if (!held.renew() || !refresh_send_procedure(c, lowered)) {
        throw Error(Errc::kFailedPrecondition,
                    fmt::format("topic '{}': its fast send procedures (txmq_send_to_{}) could "
                                "not be remade with the lower payload limit: this user needs "
                                "CREATE ROUTINE and ALTER ROUTINE, or a transaction held them; "
                                "try again, or drop them",
                                name, name));
      }
    }
    const bool moves = placed && *placed != layout->placed;
    if (moves) drop_send_fences(c, *layout, [&] { return held.renew(); });
    // New partitions get their tables in every group before sends may use them (a topic
    // without tables gets them all at first use).
    const bool tables = has_tables(c, *layout);
    for (int p = tables ? had : options.partitions; p < options.partitions; ++p) {
      const auto partition = static_cast<unsigned>(p);
      for (const GroupEntry& g : layout->groups) {
        create_queue_tables(c, topic_tables(name, g.number, partition), first_id_of(partition),
                            layout->info.options.fair);
      }
    }
    c.execute(
        "UPDATE txmq_topics SET lease_us = ?, max_attempts = ?, max_payload_bytes = ?, "
        "dedup_window_us = ?, retry_initial_us = ?, retry_multiplier = ?, retry_max_us = ?, "
        "retry_jitter = ?, archive_us = ?, dead_letter_topic = ?, retention_us = ?, "
        "layout = layout + IF(partitions = ?, 0, 1), "
        "partitions = ? WHERE name = ?",
        params);
    if (options.fair && !layout->info.options.fair) {
      // Its tables first (new partitions' above have them), then the flag; the new layout
      // version makes every client read it again.
      for (int p = 0; p < had; ++p) {
        if (!layout->is_placed(static_cast<unsigned>(p))) continue;
        for (const GroupEntry& g : layout->groups) {
          make_fair(c, topic_tables(name, g.number, static_cast<unsigned>(p)));
        }
      }
      c.execute("UPDATE txmq_topics SET fair = 1, layout = layout + 1 WHERE name = ?", {name});
    }
    if (placed) {
      const Param mask = *placed == kAllPartitions ? Param(nullptr) : Param(*placed);
      c.execute("UPDATE txmq_topics SET placed = ?, layout = layout + 1 WHERE name = ? AND NOT "
                "(placed <=> ?)",
                {mask, name, mask});
    }
    if ((moves || options.partitions > had) && held.renew()) {
      add_send_fences(c, load(c, name), [&] { return held.renew(); });
    }
    // The payload limit and the partitions are in its text.
    if (held.renew() && has_tables(c, *layout)) refresh_send_procedure(c, load(c, name));
  });
  forget(name);
  if (!options.dead_letter_topic.empty()) make_tables(options.dead_letter_topic);
}

void TopicCatalog::refresh_send_procedures() {
  const Result names = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute("SELECT name FROM txmq_topics ORDER BY name", {});
  });
  for (const Row& row : names.rows) {
    const std::string name = row.bytes(0);
    try {
      pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
        LayoutLock held(c, name);
        const std::optional<TopicLayout> layout = load(c, name);
        if (layout && has_tables(c, *layout) && held.renew()) refresh_send_procedure(c, layout);
      });
    } catch (const Error&) {
      // Dropped meanwhile, or its lock held by a change that refreshes it when it ends.
    }
  }
}

namespace {

// The topics that have a queue table. Names only: information_schema reads no table's
// statistics for them, so this stays one cheap statement beside thousands of tables.
std::unordered_set<std::string> topics_with_tables(Connection& c) {
  Result names = c.execute(
      "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME LIKE 'txmq\\_q\\_%'",
      {});
  std::unordered_set<std::string> with_tables;
  for (const Row& row : names.rows) {  // txmq_q_NAME or txmq_q_NAME$GROUP_PARTITION
    const std::string name = row.bytes(0).substr(std::string_view("txmq_q_").size());
    with_tables.insert(name.substr(0, name.find('$')));
  }
  return with_tables;
}

}  // namespace

std::vector<TopicName> TopicCatalog::list_names() {
  std::unordered_set<std::string> with_tables;
  Result r = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    with_tables = topics_with_tables(c);
    return c.execute("SELECT name, storage FROM txmq_topics ORDER BY name", {});
  });
  std::vector<TopicName> names;
  names.reserve(r.rows.size());
  for (const Row& row : r.rows) {
    TopicName n{row.bytes(0)};
    n.has_tables = row.i64(1) != 0 || with_tables.contains(n.name);
    names.push_back(std::move(n));
  }
  return names;
}

std::vector<TopicInfo> TopicCatalog::list() {
  std::unordered_set<std::string> with_tables;  // topics that have a queue table
  Result r = pool_.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    with_tables = topics_with_tables(c);
    return c.execute(fmt::format("{} ORDER BY name", kSelectTopic), {});
  });
  std::vector<TopicInfo> topics;
  for (const Row& row : r.rows) {
    topics.push_back(topic_from_row(row));
    topics.back().has_tables =
        topics.back().shared_storage || with_tables.contains(topics.back().name);
  }
  return topics;
}

}  // namespace txmq::internal
