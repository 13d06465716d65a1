#include "catalog/send_fences.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "db/sql.h"
#include "util/scope_exit.h"

namespace txmq::internal {

// --- Send fences -------------------------------------------------------------------------------
//
// A single send, or a batch of one statement, to a topic with one group is one INSERT in
// autocommit. It must not miss a group created meanwhile, nor write into a partition that moved
// to another server. Checking the topic's layout version inside the INSERT (a locking subquery
// on txmq_topics) or inserting through a view that exists only while the layout allows it would
// cost every send (docs/benchmarks.md, "Sends"); this guard costs sends nothing.
//
// Such sends name a column of the partition's queue table, `send_fence` (kSendFence, always
// NULL), which exists only while the topic has one group and the partition is placed on this
// server. Its existence is the guard:
//  - a change of groups or shard map drops the column first (drop_send_fences). ALTER TABLE
//    takes the table's exclusive metadata lock, so it waits until every INSERT naming the column
//    has committed (an autocommit INSERT holds the table's shared lock until then), and later
//    ones fail with 1054, unknown column (send.cc then takes the checked statement or the
//    transaction path, which hold the topic row's shared lock and so wait for the change's
//    fenced transaction);
//  - a change that leaves one group (and creating a topic) adds it again after it committed,
//    under the topic's lock, renewed first so that a change overtaken after a minute adds no
//    fence for a layout that has moved on since: the layout is read after renewing.
// The price is paid by the change, not by sends: the exclusive lock waits for every transaction
// that touched the table (locks, exactly-once handlers, an application's open Transaction), and
// the table's statements queue behind it meanwhile. Each ALTER waits at most kFenceWaitSeconds
// (MariaDB's ALTER TABLE ... WAIT), then lets the topic run and tries again, up to
// kFenceAttempts times, then fails the change before it changed any group or shard map (the
// fences it dropped are added back). The lock is renewed before each try, and a change that
// lost it stops. Both ALTERs are
// instant in InnoDB (metadata only) on MariaDB 10.4+; a server that allows no instant ALTER
// (innodb_instant_alter_column_allowed) rebuilds the table to drop the column, and gets no
// fence back (sends take the checked statement).
// On Galera, ALTER TABLE is replicated in total order (TOI) and does not wait: it aborts the
// transactions on the table running on any node (sends naming the column among them, which then
// fall back): the fence holds on every node, unlike a row's shared lock.
// Without the ALTER privilege there are no fences, and sends take the checked statement.

namespace {

constexpr int kFenceWaitSeconds = 2;
constexpr int kFenceAttempts = 6;
constexpr auto kFencePause = std::chrono::milliseconds(500);
constexpr unsigned kLockWaitTimeout = 1205;        // ER_LOCK_WAIT_TIMEOUT (ALTER ... WAIT)
constexpr unsigned kNotInstant = 1846;             // ER_ALTER_OPERATION_NOT_SUPPORTED_REASON
constexpr unsigned kNotInstantNoReason = 1845;     // ER_ALTER_OPERATION_NOT_SUPPORTED
constexpr unsigned kMaxRowVersions = 4092;         // MySQL: ER_INNODB_MAX_ROW_VERSION (64 instant changes)
constexpr unsigned kDuplicateColumn = 1060;        // ER_DUP_FIELDNAME

bool not_instant(unsigned server_errno) {
  return server_errno == kNotInstant || server_errno == kNotInstantNoReason ||
         server_errno == kMaxRowVersions;
}

// ALTER TABLE `table` `change`, waiting at most `seconds` for the table's metadata lock:
// MariaDB's ALTER TABLE ... WAIT; MySQL has no WAIT, so the session's lock_wait_timeout says it
// for that statement (and is set back to the connection's kLockWaitTimeoutSeconds after).
void alter_waiting(Connection& c, const std::string& table, std::string_view change, int seconds) {
  if (c.server().alter_extensions()) {
    c.query(fmt::format("ALTER TABLE {} WAIT {} {}", table, seconds, change));
    return;
  }
  c.query(fmt::format("SET SESSION lock_wait_timeout = {}", seconds));
  ScopeExit restore([&] {
    try {
      if (!c.broken()) {
        c.query(fmt::format("SET SESSION lock_wait_timeout = {}", kLockWaitTimeoutSeconds));
      }
    } catch (const Error&) {  // the connection failed: it is discarded anyway
    }
  });
  c.query(fmt::format("ALTER TABLE {} {}", table, change));
}

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

}  // namespace

Error lock_lost(const std::string& where) {
  return Error(Errc::kUnavailable,
               fmt::format("waiting for transactions on {} outlasted this change's claim on the "
                           "topic, which another client has taken: nothing more was changed",
                           where));
}

namespace {

// One ALTER TABLE of the fences, waiting at most kFenceWaitSeconds for the table's metadata lock
// each time, kFenceAttempts times, renewing the lock before each (waiting can outlast it).
// Throws kUnavailable when a transaction held the table all along or the lock was lost; other
// errors as the server gave them.
void alter_for_fence(Connection& c, const std::string& table, std::string_view change,
                     bool instant, const RenewLock& renew) {
  for (int attempt = 1;; ++attempt) {
    if (!renew()) throw lock_lost(table);
    try {
      alter_waiting(c, table, fmt::format("{}{}", change, instant ? ", ALGORITHM=INSTANT" : ""),
                    kFenceWaitSeconds);
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

}  // namespace

// Drops the send fences of the topic's queue tables on this server (every group of `layout`,
// its partitions), waiting for the sends that name them, and returns with the lock renewed
// (the caller's change then has a full lock's time to commit). DDL: commits what the
// connection had open. Throws when a fence could not be dropped or the lock was lost (the
// caller's change must not go on; the caller adds back what was dropped).
void drop_send_fences(Connection& c, const TopicLayout& layout, const RenewLock& renew) {
  if (layout.shared) return;  // none: its sends take the checked statement
  std::vector<unsigned> groups;
  for (const GroupEntry& g : layout.groups) groups.push_back(g.number);
  // (MySQL has no IF EXISTS; the tables listed have the column, and the topic's lock keeps it.)
  const std::string change = fmt::format(
      "DROP COLUMN {}{}", c.server().alter_extensions() ? "IF EXISTS " : "", kSendFence);
  for (const std::string& table :
       fenced_tables(c, layout.info.name, groups, layout.partitions())) {
    try {
      alter_for_fence(c, table, change, true, renew);
    } catch (const Error& e) {
      if (!not_instant(e.server_errno())) throw;
      alter_for_fence(c, table, change, false, renew);  // the server rebuilds the table
    }
  }
  if (!renew()) throw lock_lost(layout.info.name);
}

// Adds the send fences of a topic whose only group has number `group`, to the partitions placed
// here (`placed`: a mask, as TopicLayout::placed). REQUIRES: the caller holds the topic's lock
// (or the schema's, in a migration) and read the layout after it last renewed it; `renew` keeps
// it, and a fence is added only while it is held (a change that overtook this one may have
// given the topic a second group). Best effort: a fence that is missing costs sends speed,
// never a message. MariaDB refuses instant ALTERs after about a thousand instant drops of one
// table (then no fence: sends take the checked statement until the table is rebuilt).
void add_send_fences(Connection& c, std::string_view topic, unsigned group, unsigned partitions,
                     std::uint64_t placed, const RenewLock& renew) {
  for (unsigned p = 0; p < partitions; ++p) {
    if (!placed_in(placed, p)) continue;
    try {
      alter_for_fence(c, topic_tables(topic, group, p).queue,
                      fmt::format("ADD COLUMN {}{} TINYINT NULL",
                                  c.server().alter_extensions() ? "IF NOT EXISTS " : "",
                                  kSendFence),
                      true, renew);
    } catch (const Error& e) {
      if (e.server_errno() == kDuplicateColumn) continue;  // MySQL: it is there already
      // No privilege (1142), no instant ALTER, transactions that held the table, the lock
      // lost, or the connection failed: sends take the checked statement.
      return;
    }
  }
}

void add_send_fences(Connection& c, const std::optional<TopicLayout>& layout,
                     const RenewLock& renew) {
  if (!layout || layout->groups.size() != 1 || layout->shared) return;
  add_send_fences(c, layout->info.name, layout->allocator().number, layout->partitions(),
                  layout->placed, renew);
}

// Keys of messages sent before version 4 (when keys did not order delivery): every such message
// counts as its key's current one, so that later sends with the key wait for all of them.

}  // namespace txmq::internal
