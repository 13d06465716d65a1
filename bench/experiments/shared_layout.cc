// Experiment E1 of docs/design/shared-queues.md (section 8): is a queue stored in a table shared
// by many queues, keyed by a queue id (qid), within 0.9x the throughput of a dedicated table?
// Bare SQL statements, none of txmq's engine: the shapes of txmq's send, send_batch, claim and
// ack, with the same statements on every layout apart from the qid prefix.
//
//   txmq_shared_layout DSN [--seconds=3] [--rounds=3] [--backlog=20000] [--inflight=10000]
//                          [--behind=2000] [--others=10000] [--populated=1000]
//                          [--rows-per-queue=20] [--trickle-us=1000] [--batch-total=100000]
//                          [--layouts=d,a,c,u,s,k] [--stripes=8] [--measured-at=0.5]
//                          [--only=send,batch,drain,inflight] [--max-load=0]
//
// Layouts (d is the baseline, the others share one table among 1 + OTHERS queues):
//   d  txmq_e1_ded:  PRIMARY KEY (id) AUTO_INCREMENT, today's per-queue table
//   a  txmq_e1_sh_a: PRIMARY KEY (qid, id), KEY ids (id) for the AUTO_INCREMENT; the claim
//                    walks the primary key's range (qid, hint) .. (qid, +inf)
//   b  txmq_e1_sh_b: PRIMARY KEY (id) AUTO_INCREMENT, KEY q (qid, id); the claim walks q and
//                    reads each row from the clustered index
//   c  txmq_e1_sh_c: MariaDB only: PRIMARY KEY (qid, id), ids from a SEQUENCE (NEXTVAL in
//                    the INSERT's VALUES; a column DEFAULT NEXTVAL(...) crashed MariaDB
//                    10.11.19 in Item_func_nextval::val_int under prepared INSERTs), no KEY ids
// E1b: PRIMARY KEY (qid, id) and no other index, ids given by the INSERT (not AUTO_INCREMENT):
//   u  txmq_e1_sh_u: id = UUID_SHORT() in every row (LAST_INSERT_ID(UUID_SHORT()) for one row,
//                    so that the OK packet carries it)
//   s  txmq_e1_sh_s: MariaDB only: one NEXTVAL per statement from a SEQUENCE INCREMENT BY 1024:
//                    row 0 `@b := NEXTVAL(seq)`, row i `@b + i`
//   k  txmq_e1_sh_k: ids bound explicitly, reserved just before by an autocommit UPDATE of a
//                    per-queue counter row (txmq_e1_ctr) with LAST_INSERT_ID(next_id + n): a
//                    second statement (and commit) per send
//   v  txmq_e1_u_alone, w txmq_e1_ded_u: diagnostics for u: u's table holding the measured
//                    queue only (the trickle goes to txmq_e1_other), and the dedicated table
//                    with ids from UUID_SHORT()
//   t  txmq_e1_sh_t: E1c, u in one of STRIPES tables (design section 3): the same table as u,
//                    but only one in STRIPES of the trickle's rows go into it (the others into
//                    txmq_e1_other, as if to the other stripes), so the server's load is the same
//   x  txmq_e1_ded_x: a diagnostic, not a candidate: the dedicated table plus a secondary
//                    KEY ids (id), to tell what the second index of a and b costs by itself
// Workloads, run in rounds that alternate the layouts (the order rotates each round):
//   send.N        N threads of single-row autocommit INSERTs (100-byte payload) -> msgs/s
//   batch.N       N threads of 1,000-row INSERT + COMMIT, BATCH-TOTAL rows in all -> msgs/s
//   drain.CxB     C consumers, claims of B (SELECT ... FOR UPDATE SKIP LOCKED with a scan hint;
//                 UPDATE; COMMIT) and an autocommit fenced ack, draining BACKLOG -> msgs/s
//   inflight      a claim of 10 (no hint, id >= 0) behind INFLIGHT leased rows -> ms per claim
// The shared tables hold OTHERS other queues, POPULATED of which hold ROWS-PER-QUEUE rows; the
// measured queue's qid is at MEASURED-AT of their range (the middle by default). All the time,
// a background thread sends one row every TRICKLE-US to a random populated queue of the table
// being measured (for d, of txmq_e1_other, laid out as a) and deletes that queue's oldest row, so
// the server's load is the same for every layout.
#include <mysql.h>

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "db/connection.h"
#include "db/dsn.h"
#include "txmq/error.h"

using namespace txmq::internal;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct Options {
  double seconds = 3;
  int rounds = 3;
  int backlog = 20000;
  int inflight = 10000;
  int behind = 2000;
  int others = 10000;
  int populated = 1000;
  int rows_per_queue = 20;
  int trickle_us = 1000;
  int batch_total = 100000;  // rows each batch.N run sends (a fixed amount of work)
  int stripes = 8;           // layout t: one in this many trickle rows go into its table
  // Where the measured queue's sid sits among the others': 0 before all of them, 0.5 in the
  // middle, 1 after all of them (the index's right edge).
  double measured_at = 0.5;
  double max_load = 0;  // > 0: wait (up to 15 min) before each round while loadavg is above it
  std::string layouts;  // default: d,a,u,k, and c and s on MariaDB (E1b)
  std::string only = "send,batch,drain,inflight";
};

constexpr int kPayloadBytes = 100;
// Rows this process deleted (acks, clears, the trickle): purge must have removed as many
// delete-marked records before a measurement starts (Bench::wait_purge).
std::atomic<long> g_deleted{0};
constexpr int kBatchRows = 1000;
constexpr std::uint64_t kLeaseMicros = 30000000;

std::uint64_t qid_of(int sid) { return static_cast<std::uint64_t>(sid) << 16; }

// How a layout's rows get their ids.
enum class Ids {
  kAuto,      // AUTO_INCREMENT: the id column is left out, the OK packet's insert_id says it
  kSeqRow,    // (c) NEXTVAL(seq) in every row; a single send reads it back with RETURNING id
  kUuid,      // (u) UUID_SHORT() in every row; LAST_INSERT_ID(UUID_SHORT()) for a single row
  kSeqBlock,  // (s) one NEXTVAL per statement from a sequence INCREMENT BY kSeqBlockSize: the
              //     first row @b := NEXTVAL(seq), row i @b + i; a single row
              //     LAST_INSERT_ID(NEXTVAL(seq))
  kCounter,   // (k) explicit ids (bound), reserved just before by an autocommit
              //     UPDATE txmq_e1_ctr SET next_id = LAST_INSERT_ID(next_id + n) WHERE qid = ?
};
// (s)'s block: more than the largest statement's rows (kBatchRows; populate and preload also
// insert 1,000 per statement).
constexpr int kSeqBlockSize = 1024;

// One table and the statements on it. For the dedicated table, `key` is empty and no qid is
// bound; for the shared ones every statement starts its WHERE with `qid = ? AND`.
// Every layout's INSERT is the same apart from the qid column and the id column's expression.
struct Layout {
  char code = 'd';
  std::string name;
  std::string table;
  bool shared = false;
  Ids ids = Ids::kAuto;
  bool alone = false;  // a shared table holding no other queue (diagnostic): trickle elsewhere
  bool striped = false;  // (t) only one in STRIPES of the trickle's rows go into its table
  std::string claim_index = "PRIMARY";

  bool sequence() const { return ids == Ids::kSeqRow || ids == Ids::kSeqBlock; }
  bool counter() const { return ids == Ids::kCounter; }
  std::string key() const { return shared ? "qid = ? AND " : ""; }
  std::string order() const { return shared ? "qid, id" : "id"; }
  std::string columns() const {
    std::string c = shared ? "qid, " : "";
    if (ids != Ids::kAuto) c += "id, ";
    return c + "visible_at, enqueued_at, msg_key, payload";
  }
  // The id column's expression in row i of a statement of n rows ("" for AUTO_INCREMENT).
  std::string id_expr(int i, int n) const {
    switch (ids) {
      case Ids::kAuto: return "";
      case Ids::kSeqRow: return fmt::format("NEXTVAL({}_seq)", table);
      case Ids::kUuid: return n == 1 ? "LAST_INSERT_ID(UUID_SHORT())" : "UUID_SHORT()";
      case Ids::kSeqBlock:
        if (n == 1) return fmt::format("LAST_INSERT_ID(NEXTVAL({}_seq))", table);
        return i == 0 ? fmt::format("@b := NEXTVAL({}_seq)", table) : fmt::format("@b + {}", i);
      case Ids::kCounter: return "?";
    }
    return "";
  }
  std::string row(int i, int n, std::string_view visible, std::string_view tail) const {
    std::string r = "(";
    if (shared) r += "?, ";
    if (ids != Ids::kAuto) r += id_expr(i, n) + ", ";
    return r + fmt::format("{}, UTC_TIMESTAMP(6), NULL, ?{})", visible, tail);
  }
  std::string insert_sql(int rows, bool returning) const {
    std::string sql = fmt::format("INSERT INTO {} ({}) VALUES ", table, columns());
    for (int i = 0; i < rows; ++i) {
      if (i > 0) sql += ',';
      sql += row(i, rows, "UTC_TIMESTAMP(6)", "");
    }
    if (returning) sql += " RETURNING id";
    return sql;
  }
  // A leased row (visible in an hour, token 1), as a claim leaves it.
  std::string insert_leased_sql(int rows) const {
    std::string sql = fmt::format(
        "INSERT INTO {} ({}, attempts, lease_token, owner_id) VALUES ", table, columns());
    for (int i = 0; i < rows; ++i) {
      if (i > 0) sql += ',';
      sql += row(i, rows, "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR", ", 1, 1, 1");
    }
    return sql;
  }
  // One row's parameters, in the order of row(): qid, id (for kCounter), payload.
  void bind(std::vector<Param>& p, std::uint64_t qid, std::string_view payload,
            std::uint64_t id) const {
    if (shared) p.push_back(qid);
    if (counter()) p.push_back(id);
    p.push_back(payload);
  }
  std::string claim_sql() const {
    return fmt::format(
        "SELECT id, attempts, enqueued_at, msg_key, payload, attributes, first_claimed_at, "
        "lease_token <> 0 FROM {} FORCE INDEX ({}) WHERE {}id >= ? AND visible_at <= NOW(6) "
        "ORDER BY {} LIMIT ? FOR UPDATE SKIP LOCKED",
        table, claim_index, key(), order());
  }
  std::string claim_literal(std::uint64_t qid) const {
    return fmt::format(
        "SELECT id, attempts, enqueued_at, msg_key, payload, attributes, first_claimed_at, "
        "lease_token <> 0 FROM {} FORCE INDEX ({}) WHERE {}id >= 1 AND visible_at <= NOW(6) "
        "ORDER BY {} LIMIT 10 FOR UPDATE SKIP LOCKED",
        table, claim_index, shared ? fmt::format("qid = {} AND ", qid) : std::string(), order());
  }
  static std::string in_list(int n) {
    std::string in = "(";
    for (int i = 0; i < n; ++i) in += i == 0 ? "?" : ",?";
    return in + ")";
  }
  std::string stamp_sql(int n) const {
    return fmt::format(
        "UPDATE {} SET attempts = attempts + 1, visible_at = NOW(6) + INTERVAL ? MICROSECOND, "
        "lease_token = ?, owner_id = ? WHERE {}id IN {}",
        table, key(), in_list(n));
  }
  std::string ack_sql(int n, bool returning) const {
    return fmt::format("DELETE FROM {} WHERE {}id IN {} AND lease_token = ?{}", table, key(),
                       in_list(n), returning ? " RETURNING id" : "");
  }
  std::string clear_sql() const {
    return fmt::format("DELETE FROM {} WHERE {}id >= 0 LIMIT 10000", table, key());
  }
};

Layout make_layout(char code) {
  Layout l;
  l.code = code;
  switch (code) {
    case 'd': l.name = "dedicated"; l.table = "txmq_e1_ded"; break;
    case 'a': l.name = "shared(a)"; l.table = "txmq_e1_sh_a"; l.shared = true; break;
    case 'b':
      l.name = "shared(b)"; l.table = "txmq_e1_sh_b"; l.shared = true; l.claim_index = "q";
      break;
    case 'c':
      l.name = "shared(c)"; l.table = "txmq_e1_sh_c"; l.shared = true; l.ids = Ids::kSeqRow;
      break;
    case 'u':
      l.name = "shared(u)"; l.table = "txmq_e1_sh_u"; l.shared = true; l.ids = Ids::kUuid;
      break;
    case 's':
      l.name = "shared(s)"; l.table = "txmq_e1_sh_s"; l.shared = true; l.ids = Ids::kSeqBlock;
      break;
    case 'k':
      l.name = "shared(k)"; l.table = "txmq_e1_sh_k"; l.shared = true; l.ids = Ids::kCounter;
      break;
    case 'v':
      l.name = "u-alone"; l.table = "txmq_e1_u_alone"; l.shared = true; l.ids = Ids::kUuid;
      l.alone = true;
      break;
    case 't':
      l.name = "striped(u)"; l.table = "txmq_e1_sh_t"; l.shared = true; l.ids = Ids::kUuid;
      l.striped = true;
      break;
    case 'w': l.name = "ded-uuid"; l.table = "txmq_e1_ded_u"; l.ids = Ids::kUuid; break;
    case 'x': l.name = "ded+ids"; l.table = "txmq_e1_ded_x"; break;
    case 'o': l.name = "other"; l.table = "txmq_e1_other"; l.shared = true; break;
    default: throw std::runtime_error(fmt::format("unknown layout '{}'", code));
  }
  return l;
}

// (k)'s counter table, one row per qid: next_id is the next id to hand out.
constexpr std::string_view kCounterTable = "txmq_e1_ctr";

// Reserves n ids of queue `qid` for (k), in autocommit (never inside the send's transaction, so
// the counter row is locked for one statement only); returns the first.
std::uint64_t reserve(Connection& c, std::uint64_t qid, int n) {
  const Result r = c.execute(
      fmt::format("UPDATE {} SET next_id = LAST_INSERT_ID(next_id + ?) WHERE qid = ?",
                  kCounterTable),
      {std::uint64_t(n), qid});
  if (r.affected_rows != 1 || r.insert_id < static_cast<std::uint64_t>(n)) {
    throw std::runtime_error(fmt::format("reserve: no counter row for qid {}", qid));
  }
  return r.insert_id - static_cast<std::uint64_t>(n);
}

constexpr std::string_view kRowColumns =
    " visible_at DATETIME(6) NOT NULL,"
    " attempts INT UNSIGNED NOT NULL DEFAULT 0,"
    " lease_token BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " owner_id BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " enqueued_at DATETIME(6) NOT NULL,"
    " msg_key VARBINARY(255) NULL,"
    " payload LONGBLOB NOT NULL,"
    " attributes LONGBLOB NULL,"
    " first_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',";

void create_table(Connection& c, const Layout& l) {
  c.query(fmt::format("DROP TABLE IF EXISTS {}", l.table));
  switch (l.code) {
    case 'd':
      c.query(fmt::format("CREATE TABLE {} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,{} "
                          "PRIMARY KEY (id)) ENGINE=InnoDB",
                          l.table, kRowColumns));
      break;
    case 'x':
      c.query(fmt::format("CREATE TABLE {} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,{} "
                          "PRIMARY KEY (id), KEY ids (id)) ENGINE=InnoDB",
                          l.table, kRowColumns));
      break;
    case 'a':
    case 'o':
      c.query(fmt::format("CREATE TABLE {} (qid BIGINT UNSIGNED NOT NULL, id BIGINT UNSIGNED NOT "
                          "NULL AUTO_INCREMENT,{} PRIMARY KEY (qid, id), KEY ids (id)) "
                          "ENGINE=InnoDB",
                          l.table, kRowColumns));
      break;
    case 'b':
      c.query(fmt::format("CREATE TABLE {} (qid BIGINT UNSIGNED NOT NULL, id BIGINT UNSIGNED NOT "
                          "NULL AUTO_INCREMENT,{} PRIMARY KEY (id), KEY q (qid, id)) "
                          "ENGINE=InnoDB",
                          l.table, kRowColumns));
      break;
    case 'c':
    case 's':
      c.query(fmt::format("DROP SEQUENCE IF EXISTS {}_seq", l.table));
      c.query(fmt::format("CREATE SEQUENCE {}_seq START WITH 1 INCREMENT BY {} CACHE 1000",
                          l.table, l.code == 's' ? kSeqBlockSize : 1));
      [[fallthrough]];
    case 'u':
    case 't':
    case 'v':
    case 'k':
      // PRIMARY KEY (qid, id) and no other index; ids given by the INSERT.
      c.query(fmt::format("CREATE TABLE {0} (qid BIGINT UNSIGNED NOT NULL, id BIGINT UNSIGNED NOT "
                          "NULL,{1} PRIMARY KEY (qid, id)) ENGINE=InnoDB",
                          l.table, kRowColumns));
      if (l.code == 'k') {
        c.query(fmt::format("DROP TABLE IF EXISTS {}", kCounterTable));
        c.query(fmt::format("CREATE TABLE {} (qid BIGINT UNSIGNED NOT NULL PRIMARY KEY, next_id "
                            "BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
                            kCounterTable));
      }
      break;
    case 'w':
      c.query(fmt::format("CREATE TABLE {} (id BIGINT UNSIGNED NOT NULL,{} PRIMARY KEY (id)) "
                          "ENGINE=InnoDB",
                          l.table, kRowColumns));
      break;
    default: break;
  }
}

void drop_table(Connection& c, const Layout& l) {
  c.query(fmt::format("DROP TABLE IF EXISTS {}", l.table));
  if (l.sequence()) c.query(fmt::format("DROP SEQUENCE IF EXISTS {}_seq", l.table));
  if (l.counter()) c.query(fmt::format("DROP TABLE IF EXISTS {}", kCounterTable));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double load1() {
  std::ifstream f("/proc/loadavg");
  double a = 0;
  f >> a;
  return a;
}

// Runs `f` again while it fails with a deadlock or lock wait timeout (as txmq does).
template <typename F>
auto retrying(Connection& c, std::atomic<long>& conflicts, F&& f) {
  for (;;) {
    try {
      return f();
    } catch (const txmq::Error& e) {
      if (e.code() != txmq::Errc::kAborted) throw;
      c.rollback();
      ++conflicts;
    }
  }
}

// The background trickle: one row every `trickle_us` to a random populated queue of the table
// in `target`, and that queue's oldest row deleted, so that each stays at ROWS-PER-QUEUE.
class Trickle {
 public:
  Trickle(const Dsn& dsn, const Options& o, const std::vector<Layout>& tables,
          const std::vector<int>& populated)
      : dsn_(dsn), o_(o), tables_(tables), populated_(populated) {
    Connection c(dsn_);
    queues_.resize(tables_.size());
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      queues_[t].resize(populated_.size());
      std::map<std::uint64_t, std::size_t> index;
      for (std::size_t i = 0; i < populated_.size(); ++i) index[qid_of(populated_[i])] = i;
      Result r = c.execute(fmt::format("SELECT qid, id FROM {} ORDER BY qid, id", tables_[t].table));
      for (const Row& row : r.rows) {
        auto it = index.find(row.u64(0));
        if (it != index.end()) queues_[t][it->second].push_back(row.u64(1));
      }
    }
  }
  void start() { thread_ = std::thread([this] { run(); }); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void aim(std::size_t table) { target_ = table; }
  // Where a striped table's trickle rows go when they are not its own (txmq_e1_other).
  void set_other(std::size_t table) { other_ = table; }
  // Sends since the last call, and the seconds they took.
  std::pair<long, double> take_rate() {
    const auto now = SteadyClock::now();
    const long n = sent_.exchange(0);
    const double s = std::chrono::duration<double>(now - since_).count();
    since_ = now;
    return {n, s};
  }

 private:
  void run() {
    Connection c(dsn_);
    const bool returning = c.server().returning();
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<std::size_t> pick(0, populated_.size() - 1);
    const std::string payload(kPayloadBytes, 't');
    auto next = SteadyClock::now();
    while (!stop_) {
      std::size_t t = target_.load();
      if (tables_[t].striped && other_ != SIZE_MAX && (++striped_sends_ % o_.stripes) != 0) {
        t = other_;
      }
      const Layout& l = tables_[t];
      const std::size_t i = pick(rng);
      const std::uint64_t qid = qid_of(populated_[i]);
      try {
        std::uint64_t id = 0;
        if (l.ids == Ids::kSeqRow && returning) {
          id = c.execute(l.insert_sql(1, true), {qid, std::string_view(payload)}).rows.at(0).u64(0);
        } else if (l.counter()) {
          id = reserve(c, qid, 1);
          c.execute(l.insert_sql(1, false), {qid, id, std::string_view(payload)});
        } else {
          id = c.execute(l.insert_sql(1, false), {qid, std::string_view(payload)}).insert_id;
        }
        auto& q = queues_[t][i];
        q.push_back(id);
        if (q.size() > static_cast<std::size_t>(o_.rows_per_queue)) {
          g_deleted += static_cast<long>(
              c.execute(fmt::format("DELETE FROM {} WHERE qid = ? AND id = ?", l.table),
                        {qid, q.front()})
                  .affected_rows);
          q.pop_front();
        }
        ++sent_;
      } catch (const txmq::Error& e) {
        if (e.code() != txmq::Errc::kAborted) {
          std::fprintf(stderr, "trickle: %s\n", e.what());
          std::exit(1);
        }
        c.rollback();
      }
      // Paced, without bursts to catch up: a trickle that falls behind just sends less.
      next += std::chrono::microseconds(o_.trickle_us);
      const auto now = SteadyClock::now();
      if (next > now) {
        std::this_thread::sleep_until(next);
      } else {
        next = now;
      }
    }
  }

  Dsn dsn_;
  const Options& o_;
  std::vector<Layout> tables_;
  std::vector<int> populated_;
  std::vector<std::vector<std::deque<std::uint64_t>>> queues_;
  std::atomic<std::size_t> target_{0};
  std::size_t other_ = SIZE_MAX;
  long striped_sends_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<long> sent_{0};
  SteadyClock::time_point since_ = SteadyClock::now();
  std::thread thread_;
};

class Bench {
 public:
  Bench(const Dsn& dsn, const Options& o) : dsn_(dsn), o_(o), admin_(dsn) {
    returning_ = admin_.server().returning();
    // Counts purged delete-marked rows (off by default; this server is the experiment's own).
    admin_.query("SET GLOBAL innodb_monitor_enable = 'purge_del_mark_records'");
    purged_base_ = purged();
    // The measured queue sits at MEASURED-AT of the other queues' sids (1 .. OTHERS + 1).
    measured_sid_ = 1 + static_cast<int>(o_.measured_at * o_.others + 0.5);
    qid_ = qid_of(measured_sid_);
    const int step = std::max(1, o_.others / std::max(1, o_.populated));
    for (int sid = 1; sid <= o_.others + 1 && static_cast<int>(populated_.size()) < o_.populated;
         ++sid) {
      if (sid != measured_sid_ && sid % step == 0) populated_.push_back(sid);
    }
  }

  const ServerKind& server() const { return admin_.server(); }

  void setup(const std::vector<Layout>& layouts) {
    layouts_ = layouts;
    // Trickle targets: the shared tables themselves; for the dedicated table, txmq_e1_other.
    // (one txmq_e1_other for every unshared layout).
    std::vector<Layout> trickle_tables;
    std::size_t other = SIZE_MAX;
    for (const Layout& l : layouts_) {
      create_table(admin_, l);
      if (l.counter()) {
        admin_.execute(fmt::format("INSERT INTO {} (qid, next_id) VALUES (?, 1)", kCounterTable),
                       {qid_});
      }
      sanity(l);
      const bool own = l.shared && !l.alone;  // does the trickle write into this table?
      if (!own && other != SIZE_MAX) {
        trickle_index_.push_back(other);
        continue;
      }
      const Layout t = own ? l : make_layout('o');
      if (!own) {
        create_table(admin_, t);
        other = trickle_tables.size();
      }
      populate(t);
      trickle_index_.push_back(trickle_tables.size());
      trickle_tables.push_back(t);
    }
    fmt::print("populated: {} other queues around qid {} (sid {}), {} of them with {} rows "
               "(sids {}..{}, every {})\n",
               o_.others, qid_, measured_sid_, populated_.size(), o_.rows_per_queue,
               populated_.front(), populated_.back(),
               populated_.size() > 1 ? populated_[1] - populated_[0] : 0);
    trickle_ = std::make_unique<Trickle>(dsn_, o_, trickle_tables, populated_);
    trickle_->set_other(other);
    trickle_->start();
  }

  void teardown() {
    if (trickle_) trickle_->stop();
    for (const Layout& l : layouts_) drop_table(admin_, l);
    drop_table(admin_, make_layout('o'));
  }

  // Starts a measurement on layout i: the trickle goes to its table; purge is let catch up.
  void enter(std::size_t i) {
    trickle_->aim(trickle_index_[i]);
    trickle_->take_rate();
    wait_purge();
  }
  double trickle_rate() {
    auto [n, s] = trickle_->take_rate();
    return s > 0 ? static_cast<double>(n) / s : 0;
  }

  // Inserts 3 rows, then 1, into a scratch qid and prints their ids (that each layout's id
  // expression gives distinct, increasing ids; and what they look like); deletes them.
  void sanity(const Layout& l) {
    const std::uint64_t q = 7;  // no sid's qid (those are multiples of 65536)
    if (l.counter()) {
      admin_.execute(fmt::format("INSERT INTO {} (qid, next_id) VALUES (?, 1)", kCounterTable),
                     {q});
    }
    const std::string payload(kPayloadBytes, 's');
    std::uint64_t single = 0;
    for (int n : {3, 1}) {
      const std::uint64_t base = l.counter() ? reserve(admin_, q, n) : 0;
      std::vector<Param> p;
      for (int i = 0; i < n; ++i) l.bind(p, q, payload, base + static_cast<std::uint64_t>(i));
      const Result r = admin_.execute(l.insert_sql(n, false), p);
      if (n == 1) single = l.counter() ? base : r.insert_id;
    }
    const Result r = admin_.execute(
        fmt::format("SELECT id FROM {} WHERE {}id >= 0 ORDER BY id", l.table, l.key()),
        l.shared ? std::vector<Param>{q} : std::vector<Param>{});
    std::string ids;
    for (const Row& row : r.rows) ids += fmt::format(" {}", row.u64(0));
    fmt::print("ids of {} (3 rows, then 1; the single row's insert_id {}):{}\n", l.name, single,
               ids);
    if (r.rows.size() != 4 || (l.ids != Ids::kAuto && l.ids != Ids::kSeqRow && single != r.rows.back().u64(0))) {
      throw std::runtime_error(fmt::format("{}: unexpected ids", l.name));
    }
    admin_.execute(fmt::format("DELETE FROM {} WHERE {}id >= 0", l.table, l.key()),
                   l.shared ? std::vector<Param>{q} : std::vector<Param>{});
    if (l.counter()) {
      admin_.execute(fmt::format("DELETE FROM {} WHERE qid = ?", kCounterTable), {q});
    }
  }

  // send.N: single-row autocommit INSERTs for o.seconds. (k) reserves its id first, in a second
  // autocommit statement on the same connection.
  double send(const Layout& l, int threads) {
    const std::string payload(kPayloadBytes, 'x');
    const std::string sql = l.insert_sql(1, l.ids == Ids::kSeqRow && returning_);
    std::vector<Param> params;
    l.bind(params, qid_, payload, 0);
    const double rate = timed(threads, [&](Connection& c, Connection&) {
      if (l.counter()) {
        std::vector<Param> p;
        l.bind(p, qid_, payload, reserve(c, qid_, 1));
        c.execute(sql, p);
      } else {
        c.execute(sql, params);
      }
      return 1L;
    });
    clear(l);
    return rate;
  }

  // batch.N: 1,000-row INSERT (RETURNING id on MariaDB, as txmq's send_batch) + COMMIT.
  double batch(const Layout& l, int threads) {
    const std::string payload(kPayloadBytes, 'y');
    const std::string sql = l.insert_sql(kBatchRows, returning_);
    std::vector<Param> params;
    for (int i = 0; i < kBatchRows; ++i) l.bind(params, qid_, payload, 0);
    const double rate = timed(
        threads,
        [&](Connection& c, Connection& side) {
          if (l.counter()) {
            // The reservation: an autocommit on a second connection (which stays in autocommit,
            // so that this one needs no round trips to switch autocommit off and on).
            const std::uint64_t base = reserve(side, qid_, kBatchRows);
            std::vector<Param> p;
            p.reserve(params.size());
            for (int i = 0; i < kBatchRows; ++i) {
              l.bind(p, qid_, payload, base + static_cast<std::uint64_t>(i));
            }
            c.begin();
            c.execute(sql, p);
            c.commit();
          } else {
            c.begin();
            c.execute(sql, params);
            c.commit();
          }
          return static_cast<long>(kBatchRows);
        },
        o_.batch_total, l.counter());
    clear(l);
    return rate;
  }

  void preload(const Layout& l, int rows, bool leased) {
    const std::string payload(kPayloadBytes, 'z');
    for (int done = 0; done < rows; done += kBatchRows) {
      const int n = std::min(kBatchRows, rows - done);
      const std::uint64_t base = l.counter() ? reserve(admin_, qid_, n) : 0;
      std::vector<Param> params;
      for (int i = 0; i < n; ++i) {
        l.bind(params, qid_, payload, base + static_cast<std::uint64_t>(i));
      }
      admin_.begin();
      admin_.execute(leased ? l.insert_leased_sql(n) : l.insert_sql(n, false), params);
      admin_.commit();
    }
  }

  // drain.CxB: the backlog drained by C consumers, claims of B with a scan hint.
  double drain(const Layout& l, int consumers, int batch, bool explain) {
    preload(l, o_.backlog, false);
    if (explain) print_explain(l);
    wait_purge();
    const std::string select = l.claim_sql();
    const std::string stamp = l.stamp_sql(batch);
    const std::string ack = l.ack_sql(batch, returning_);
    std::atomic<std::uint64_t> next_id{0};
    std::atomic<long> done{0}, conflicts{0}, short_acks{0};
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    SteadyClock::time_point start;
    std::vector<std::thread> threads;
    for (int t = 0; t < consumers; ++t) {
      threads.emplace_back([&, t] {
        Connection c(dsn_);
        std::uint64_t token = 1000000000ULL * static_cast<std::uint64_t>(t + 1);
        const std::uint64_t owner = static_cast<std::uint64_t>(t + 1);
        ++ready;
        while (!go) std::this_thread::yield();
        for (;;) {
          const Result r = retrying(c, conflicts, [&] {
            c.begin();
            std::vector<Param> p;
            if (l.shared) p.push_back(qid_);
            p.push_back(next_id.load());
            p.push_back(std::int64_t{batch});
            Result rows = c.execute(select, p);
            if (rows.rows.empty() && std::get<std::uint64_t>(p[p.size() - 2]) != 0) {
              p[p.size() - 2] = std::uint64_t{0};
              rows = c.execute(select, p);
            }
            if (rows.rows.empty()) {
              c.commit();
              return rows;
            }
            std::vector<Param> up = {std::int64_t{kLeaseMicros}, token + 1, owner};
            if (l.shared) up.push_back(qid_);
            for (int i = 0; i < batch; ++i) up.push_back(id_at(rows, i));
            c.execute(stamp, up);
            c.commit();
            return rows;
          });
          if (r.rows.empty()) break;
          ++token;
          const std::uint64_t last = r.rows.back().u64(0) + 1;
          std::uint64_t seen = next_id.load();
          while (seen < last && !next_id.compare_exchange_weak(seen, last)) {
          }
          std::vector<Param> fence;
          if (l.shared) fence.push_back(qid_);
          for (int i = 0; i < batch; ++i) fence.push_back(id_at(r, i));
          fence.push_back(token);
          const Result a = retrying(c, conflicts, [&] { return c.execute(ack, fence); });
          const std::size_t acked = returning_ ? a.rows.size() : a.affected_rows;
          g_deleted += static_cast<long>(acked);
          if (acked != r.rows.size()) ++short_acks;
          done += static_cast<long>(r.rows.size());
        }
      });
    }
    while (ready.load() < consumers) std::this_thread::yield();
    start = SteadyClock::now();
    go = true;
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
    if (done.load() != o_.backlog || short_acks.load() != 0) {
      fmt::print("  !! {} drain.{}x{}: {} of {} drained, {} short acks\n", l.name, consumers,
                 batch, done.load(), o_.backlog, short_acks.load());
    }
    conflicts_ += conflicts.load();
    clear(l);
    return static_cast<double>(done.load()) / seconds;
  }

  // inflight: INFLIGHT leased rows at the head, BEHIND claimable ones after them; claims of 10
  // from id 0 (no hint), each then acknowledged (not timed). Median ms per claim.
  double inflight(const Layout& l, bool explain) {
    preload(l, o_.inflight, true);
    preload(l, o_.behind, false);
    if (explain) print_explain(l);
    wait_purge();
    const std::string select = l.claim_sql();
    const std::string stamp = l.stamp_sql(10);
    const std::string ack = l.ack_sql(10, returning_);
    Connection c(dsn_);
    std::atomic<long> conflicts{0};
    std::vector<double> ms;
    std::uint64_t token = 7000000000ULL;
    const auto deadline =
        SteadyClock::now() + std::chrono::duration<double>(o_.seconds);
    while (SteadyClock::now() < deadline) {
      const auto t0 = SteadyClock::now();
      const Result r = retrying(c, conflicts, [&] {
        c.begin();
        std::vector<Param> p;
        if (l.shared) p.push_back(qid_);
        p.push_back(std::uint64_t{0});
        p.push_back(std::int64_t{10});
        Result rows = c.execute(select, p);
        if (!rows.rows.empty()) {
          std::vector<Param> up = {std::int64_t{kLeaseMicros}, token + 1, std::uint64_t{9}};
          if (l.shared) up.push_back(qid_);
          for (int i = 0; i < 10; ++i) up.push_back(id_at(rows, i));
          c.execute(stamp, up);
        }
        c.commit();
        return rows;
      });
      const auto t1 = SteadyClock::now();
      if (r.rows.empty()) break;
      ++token;
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      std::vector<Param> fence;
      if (l.shared) fence.push_back(qid_);
      for (int i = 0; i < 10; ++i) fence.push_back(id_at(r, i));
      fence.push_back(token);
      const Result a = retrying(c, conflicts, [&] { return c.execute(ack, fence); });
      g_deleted += static_cast<long>(returning_ ? a.rows.size() : a.affected_rows);
    }
    conflicts_ += conflicts.load();
    clear(l);
    return median(ms);
  }

  void print_explain(const Layout& l) {
    MYSQL* m = admin_.handle();
    // A hint of 1, not 0: MySQL drops `id >= 0` on an unsigned column and shows a ref lookup.
    const std::string sql = std::string(admin_.server().mysql ? "EXPLAIN FORMAT=TRADITIONAL "
                                                              : "EXPLAIN ") +
                            l.claim_literal(qid_);
    if (mysql_real_query(m, sql.data(), sql.size()) != 0) {
      fmt::print("  EXPLAIN {}: {}\n", l.name, mysql_error(m));
      return;
    }
    MYSQL_RES* res = mysql_store_result(m);
    if (res == nullptr) return;
    const unsigned n = mysql_num_fields(res);
    MYSQL_FIELD* fields = mysql_fetch_fields(res);
    fmt::print("  EXPLAIN ({}) {}\n", l.name, l.claim_literal(qid_));
    while (MYSQL_ROW row = mysql_fetch_row(res)) {
      std::string line;
      for (unsigned i = 0; i < n; ++i) {
        line += fmt::format("{}{}={}", i ? ", " : "    ", fields[i].name,
                            row[i] ? row[i] : "NULL");
      }
      fmt::print("{}\n", line);
    }
    mysql_free_result(res);
  }

  long conflicts() const { return conflicts_; }

 private:
  static std::uint64_t id_at(const Result& r, int i) {
    return r.rows[std::min<std::size_t>(static_cast<std::size_t>(i), r.rows.size() - 1)].u64(0);
  }

  // The other queues' rows: ROWS-PER-QUEUE each for the populated ones, inserted in a random
  // order of queues (as sends over time would interleave them).
  void populate(const Layout& l) {
    std::vector<int> order;
    for (int sid : populated_) {
      for (int k = 0; k < o_.rows_per_queue; ++k) order.push_back(sid);
    }
    std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
    const std::string payload(kPayloadBytes, 'o');
    std::map<std::uint64_t, std::uint64_t> next;  // (k): ids given here, counters set after
    for (std::size_t done = 0; done < order.size(); done += kBatchRows) {
      const std::size_t n = std::min<std::size_t>(kBatchRows, order.size() - done);
      std::vector<Param> params;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t q = qid_of(order[done + i]);
        std::uint64_t& id = next.try_emplace(q, 1).first->second;
        l.bind(params, q, payload, id++);
      }
      admin_.begin();
      admin_.execute(l.insert_sql(static_cast<int>(n), false), params);
      admin_.commit();
    }
    if (l.counter()) {
      for (const auto& [q, id] : next) {
        admin_.execute(fmt::format("INSERT INTO {} (qid, next_id) VALUES (?, ?)", kCounterTable),
                       {q, id});
      }
    }
    admin_.query(fmt::format("ANALYZE TABLE {}", l.table));
  }

  // Runs `op` on `threads` connections for o.seconds; returns units per second.
  // With `total` > 0, runs until `total` units are done instead (claimed in advance by op).
  template <typename Op>
  // With `side`, op's second connection is another one per thread (else the same).
  double timed(int threads, Op op, long total = 0, bool side = false) {
    std::atomic<long> units{0}, conflicts{0}, claimed{0};
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    SteadyClock::time_point start, deadline;
    std::vector<SteadyClock::time_point> ends(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        Connection c(dsn_);
        std::optional<Connection> second;
        if (side) second.emplace(dsn_);
        Connection& s = second ? *second : c;
        ++ready;
        while (!go) std::this_thread::yield();
        long mine = 0;
        for (;;) {
          if (total > 0 ? claimed.fetch_add(1) >= total / kBatchRows
                        : SteadyClock::now() >= deadline) {
            break;
          }
          mine += retrying(c, conflicts, [&] { return op(c, s); });
        }
        units += mine;
        ends[static_cast<std::size_t>(t)] = SteadyClock::now();
      });
    }
    while (ready.load() < threads) std::this_thread::yield();
    start = SteadyClock::now();
    deadline = start + std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double>(o_.seconds));
    go = true;
    for (auto& t : pool) t.join();
    const auto end = *std::max_element(ends.begin(), ends.end());
    conflicts_ += conflicts.load();
    return static_cast<double>(units.load()) / std::chrono::duration<double>(end - start).count();
  }

  // Deletes the measured queue's rows, 10,000 per autocommit statement.
  void clear(const Layout& l) {
    std::vector<Param> p;
    if (l.shared) p.push_back(qid_);
    for (;;) {
      const std::uint64_t n = admin_.execute(l.clear_sql(), p).affected_rows;
      if (n == 0) break;
      g_deleted += static_cast<long>(n);
    }
  }

  // Lets purge catch up, so that a measurement does not pay for the delete-marked rows of the
  // one before it (nor for purging them): waits (at most 60 s) until InnoDB's count of purged
  // delete-marked rows is within 1,000 of the rows this process deleted.
  std::int64_t purged() {
    const Result r = admin_.execute(
        "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = "
        "'purge_del_mark_records'");
    return r.rows.empty() ? 0 : r.rows[0].i64(0);
  }
 public:
  void wait_purge() {
    const auto begun = SteadyClock::now();
    const auto until = begun + std::chrono::seconds(60);
    std::int64_t lag = 0;
    while (SteadyClock::now() < until) {
      lag = g_deleted.load() - (purged() - purged_base_);
      if (lag < 1000) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const double waited = std::chrono::duration<double>(SteadyClock::now() - begun).count();
    purge_wait_ += waited;
    if (lag >= 1000) fmt::print("  !! purge still {} rows behind after {:.0f} s\n", lag, waited);
  }
  double purge_waited() const { return purge_wait_; }

 private:
  Dsn dsn_;
  const Options& o_;
  Connection admin_;
  bool returning_ = false;
  int measured_sid_ = 0;
  std::uint64_t qid_ = 0;
  std::vector<int> populated_;
  std::vector<Layout> layouts_;
  std::vector<std::size_t> trickle_index_;
  std::unique_ptr<Trickle> trickle_;
  long conflicts_ = 0;
  std::int64_t purged_base_ = 0;
  double purge_wait_ = 0;
};

struct Workload {
  std::string name;
  std::string group;
  bool latency = false;  // ms per claim (lower is better), else msgs/s
  int threads = 1;
  int batch = 0;
};

bool want(const std::string& list, const std::string& item) {
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t end = std::min(list.find(',', pos), list.size());
    if (list.compare(pos, end - pos, item) == 0) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DSN [--seconds=3] [--rounds=3] [--backlog=20000] [--inflight=10000] "
                 "[--behind=2000] [--others=10000] [--populated=1000] [--rows-per-queue=20] "
                 "[--trickle-us=1000] [--batch-total=100000] [--layouts=d,a,c,u,s,k] [--only=send,batch,drain,inflight] "
                 "[--max-load=0]\n",
                 argv[0]);
    return 1;
  }
  Options o;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "bad argument '%s'\n", arg.c_str());
      return 1;
    }
    const std::string k = arg.substr(2, eq - 2), v = arg.substr(eq + 1);
    if (k == "seconds") o.seconds = std::atof(v.c_str());
    else if (k == "rounds") o.rounds = std::atoi(v.c_str());
    else if (k == "backlog") o.backlog = std::atoi(v.c_str());
    else if (k == "inflight") o.inflight = std::atoi(v.c_str());
    else if (k == "behind") o.behind = std::atoi(v.c_str());
    else if (k == "others") o.others = std::atoi(v.c_str());
    else if (k == "populated") o.populated = std::atoi(v.c_str());
    else if (k == "rows-per-queue") o.rows_per_queue = std::atoi(v.c_str());
    else if (k == "trickle-us") o.trickle_us = std::atoi(v.c_str());
    else if (k == "batch-total") o.batch_total = std::atoi(v.c_str());
    else if (k == "layouts") o.layouts = v;
    else if (k == "measured-last") o.measured_at = v != "0" ? 1.0 : 0.5;
    else if (k == "measured-at") o.measured_at = std::clamp(std::stod(v), 0.0, 1.0);
    else if (k == "stripes") o.stripes = std::max(1, std::atoi(v.c_str()));
    else if (k == "only") o.only = v;
    else if (k == "max-load") o.max_load = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "unknown option '%s'\n", k.c_str());
      return 1;
    }
  }
  try {
    const Dsn dsn = parse_dsn(argv[1]);
    Bench bench(dsn, o);
    const bool mariadb = !bench.server().mysql;
    if (o.layouts.empty()) o.layouts = mariadb ? "d,a,c,u,s,k" : "d,a,u,k";
    std::vector<Layout> layouts;
    for (char code : o.layouts) {
      if (code == ',') continue;
      if ((code == 'c' || code == 's') && !mariadb) {
        fmt::print("layout {} (SEQUENCE) needs MariaDB: skipped\n", code);
        continue;
      }
      layouts.push_back(make_layout(code));
    }
    if (layouts.empty() || layouts[0].code != 'd') {
      std::fprintf(stderr, "--layouts must start with d (the baseline)\n");
      return 1;
    }
    fmt::print("server {}; {} s per timed run, {} rounds, backlog {}, in flight {} (+{} behind), "
               "trickle every {} us; loadavg {}\n",
               bench.server().describe(), o.seconds, o.rounds, o.backlog, o.inflight, o.behind,
               o.trickle_us, loadavg());
    {
      Connection c(dsn);
      const Result r = c.execute("SELECT @@server_id, UUID_SHORT(), HEX(UUID_SHORT())");
      fmt::print("server_id {}, UUID_SHORT() {} (then 0x{})\n", r.rows.at(0).u64(0),
                 r.rows.at(0).u64(1), r.rows.at(0).bytes(2));
    }
    std::fflush(stdout);
    bench.setup(layouts);

    std::vector<Workload> workloads;
    for (int t : {1, 4, 16}) workloads.push_back({fmt::format("send.{}", t), "send", false, t, 1});
    for (int t : {1, 4}) {
      workloads.push_back({fmt::format("batch.{}", t), "batch", false, t, kBatchRows});
    }
    for (int b : {10, 100}) workloads.push_back({fmt::format("drain.4x{}", b), "drain", false, 4, b});
    workloads.push_back({"inflight.claim10", "inflight", true, 1, 10});

    // results[workload][layout] = one value per round
    std::vector<std::vector<std::vector<double>>> results(
        workloads.size(), std::vector<std::vector<double>>(layouts.size()));
    std::vector<std::string> loads;
    const auto begun = SteadyClock::now();
    for (std::size_t w = 0; w < workloads.size(); ++w) {
      const Workload& wl = workloads[w];
      if (!want(o.only, wl.group)) continue;
      for (int round = 0; round < o.rounds; ++round) {
        if (o.max_load > 0) {
          for (int waited = 0; load1() > o.max_load && waited < 15; ++waited) {
            fmt::print("  load {} above {}: waiting 60 s\n", loadavg(), o.max_load);
            std::fflush(stdout);
            std::this_thread::sleep_for(std::chrono::seconds(60));
          }
        }
        loads.push_back(loadavg());
        for (std::size_t k = 0; k < layouts.size(); ++k) {
          // The order rotates each round, so that no layout always runs first.
          const std::size_t i = (k + static_cast<std::size_t>(round)) % layouts.size();
          const Layout& l = layouts[i];
          bench.enter(i);
          const bool explain = round == 0 && (wl.name == "drain.4x10" || wl.latency);
          double v = 0;
          if (wl.group == "send") v = bench.send(l, wl.threads);
          else if (wl.group == "batch") v = bench.batch(l, wl.threads);
          else if (wl.group == "drain") v = bench.drain(l, wl.threads, wl.batch, explain);
          else v = bench.inflight(l, explain);
          results[w][i].push_back(v);
          fmt::print("  round {} {:<16} {:<10} {:>10.{}f} {}  (trickle {:.0f}/s, load {})\n",
                     round + 1, wl.name, l.name, v, wl.latency ? 2 : 0,
                     wl.latency ? "ms/claim" : "msgs/s", bench.trickle_rate(), loadavg());
          std::fflush(stdout);
        }
      }
      for (std::size_t i = 0; i < layouts.size(); ++i) {
        fmt::print("{:<16} {:<10} median {:>10.{}f} {}\n", wl.name, layouts[i].name,
                   median(results[w][i]), wl.latency ? 2 : 0, wl.latency ? "ms/claim" : "msgs/s");
      }
      std::fflush(stdout);
    }
    const double minutes =
        std::chrono::duration<double>(SteadyClock::now() - begun).count() / 60;

    fmt::print("\nratios to dedicated (throughput shared/dedicated; for inflight, "
               "ms dedicated/shared, so that < 1 is worse everywhere); gate >= 0.90\n");
    std::string header = fmt::format("{:<18}{:>12}", "workload", "dedicated");
    for (std::size_t i = 1; i < layouts.size(); ++i) {
      header += fmt::format("{:>12}{:>8}", layouts[i].name, "ratio");
    }
    fmt::print("{}\n", header);
    for (std::size_t w = 0; w < workloads.size(); ++w) {
      if (!want(o.only, workloads[w].group)) continue;
      const bool lat = workloads[w].latency;
      const double base = median(results[w][0]);
      std::string line = fmt::format("{:<18}{:>12.{}f}", workloads[w].name, base, lat ? 2 : 0);
      for (std::size_t i = 1; i < layouts.size(); ++i) {
        const double v = median(results[w][i]);
        const double ratio = lat ? (v > 0 ? base / v : 0) : (base > 0 ? v / base : 0);
        line += fmt::format("{:>12.{}f}{:>7.2f}{}", v, lat ? 2 : 0, ratio, ratio < 0.9 ? "!" : " ");
      }
      fmt::print("{}\n", line);
    }
    fmt::print("(! below 0.90; {} deadlocks/lock waits retried; {:.1f} min, {:.0f} s of it "
               "waiting for purge; load at round starts: first {}, last {})\n",
               bench.conflicts(), minutes, bench.purge_waited(), loads.empty() ? "-" : loads.front(),
               loads.empty() ? "-" : loads.back());
    bench.teardown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
