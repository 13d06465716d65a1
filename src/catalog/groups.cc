#include "catalog/topic_catalog.h"

#include <fmt/format.h>

#include "catalog/keys.h"
#include "catalog/routines.h"
#include "catalog/row_lock.h"
#include "catalog/send_fences.h"
#include "catalog/send_procedures.h"
#include "catalog/topic_tables.h"
#include "db/sql.h"
#include "util/scope_exit.h"

namespace txmq::internal {

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
    // A topic created without tables gets them first: the new group's copies read them.
    if (!has_tables(c, *layout)) create_all_tables(c, *layout);
    drop_send_fences(c, *layout, [&] { return held.renew(); });
    const bool shared = layout->shared;
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
      fresh.push_back(layout->tables(number, p));
      // Shared storage: its rows go where its topic's do, under a qid of its own.
      if (!shared) create_queue_tables(c, fresh.back(), first_id_of(p), layout->info.options.fair);
    }
    // Still this change's claim (waiting for the fences may have outlasted it): no other change
    // can take it before the fenced transaction commits, which is short.
    if (!held.renew()) throw lock_lost(std::string(topic));
    with_topic_fenced(c, topic, [&] {
      for (unsigned p = 0; p < partitions; ++p) {
        const TopicTables& t = fresh[p];
        // The new tables may allocate ids one day (when the groups before them are dropped):
        // start their counter where the allocator's is, by a row inserted and deleted. No send
        // to the topic is in progress now (the fence), so the allocator's counter stands still;
        // information_schema's AUTO_INCREMENT is this node's counter, which is the writer's.
        // (Shared storage: one counter for every queue, which only grows.)
        Result next;
        if (!shared) {
          next = c.execute(
              "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
              "DATABASE() AND TABLE_NAME = ?",
              {unquoted(topic_tables(topic, allocator, p).queue)});
        }
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
            "INSERT IGNORE INTO {} ({}id, visible_at, attempts, lease_token, owner_id, "
            "enqueued_at, msg_key, payload, attributes) ",
            t.queue, t.q_col);
        const std::string columns = fmt::format(
            "{}id, NOW(6), 0, 0, 0, enqueued_at, msg_key, payload, attributes", t.q_val);
        for (const GroupEntry& g : layout->groups) {
          const TopicTables from = layout->tables(g.number, p);
          const std::string where =
              from.shared() ? fmt::format(" WHERE {}TRUE", from.q_and) : std::string();
          c.query(insert + fmt::format("SELECT {} FROM {}{}", columns, from.queue, where));
          c.query(insert + fmt::format("SELECT {} FROM {}{}", columns, from.parked, where));
        }
        const TopicTables wide = layout->tables();
        c.execute(insert + fmt::format("SELECT {} FROM {} WHERE {}id BETWEEN ? AND ?", columns,
                                       wide.archive, wide.s_and),
                  {first_id_of(p), first_id_of(p + 1) - 1});
        // Keyed messages wait behind their key's first one, in id order.
        Result keyed = c.execute(
            fmt::format("SELECT msg_key, id FROM {}{} WHERE {}msg_key IS NOT NULL ORDER BY id",
                        t.queue, t.shared() ? " FORCE INDEX (PRIMARY)" : "", t.q_and),
            {});
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
    forget_sql_counts(c, topic, group);
    for (unsigned p = 0; p < layout->partitions(); ++p) {
      const TopicTables t = layout->tables(g.number, p);
      if (t.shared()) {
        // A bounded chunk per statement, in autocommit (as TopicCatalog::reap_dropped).
        for (const std::string& table : {t.queue, t.parked, t.keys, t.dead}) {
          delete_in_chunks(c, table, t.q_and + "TRUE", {});
        }
        continue;
      }
      c.query(
          fmt::format("DROP TABLE IF EXISTS {}, {}, {}, {}", t.queue, t.dead, t.keys, t.parked));
      forget_takes(c, t.queue);
    }
    if (held.renew()) {  // one group left: the fast path
      add_send_fences(c, load(c, topic), [&] { return held.renew(); });
    }
    // One group left: its fast send (the allocating group may have changed).
    if (held.renew()) {
      const std::optional<TopicLayout> now = load(c, topic);
      if (now && now->groups.size() == 1) refresh_send_procedure(c, now);
    }
  });
  forget(topic);
}

}  // namespace txmq::internal
