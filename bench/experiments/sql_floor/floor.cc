// The SQL interface's floor (docs/design/sql-speed.md): what a CALL costs against a raw INSERT,
// and what each piece of txmq_send adds, measured in alternating rounds at T threads, with the
// CPU of this process and of the server per message. Standalone: MariaDB Connector/C only.
//
//   g++ -O2 -std=c++20 -o /tmp/sql_floor floor.cc $(mariadb_config --cflags --libs) -lpthread
//   sql_floor SOCKET SERVER_PID MODE [THREADS] [ROUNDS] [SECONDS] [VARIANT,...]
//
// The database `txmq` must have the topic `floor` (txmq topic create floor) and the procedures
// of floor.sql (floor_mariadb.sql too on MariaDB): `sql_floor SOCKET 0 setup DIR` installs them.
// MODE:
//   send    one message a call, autocommit, THREADS producers, SECONDS a round per variant
//   tx      START TRANSACTION; INSERT a business row; the send; COMMIT
//   batch   1,000 strings of 100 bytes a call, one thread, SECONDS a round
//   drain   ROWS (the THREADS argument is the consumers, SECONDS is the rows per round / 1000)
//           messages filled, then drained by take 100 + work INSERT + ack in one transaction
// Send variants:
//   raw       prepared INSERT into txmq_q_floor naming the send fence (what Client::send sends)
//   rawtext   the same statement as text, the payload as a hex literal
//   lib       (tx mode) the library's Transaction::send: SELECT layout ... LOCK IN SHARE MODE,
//             then the prepared INSERT, both prepared
//   static    CALL floor_static(X'..'): one static INSERT, no result set
//   static_rs CALL floor_static_rs: the same and SELECT LAST_INSERT_ID()
//   fence_rs  CALL floor_fence_rs: the topic row in share mode first
//   fence_tx  CALL floor_fence_tx: that with txmq_send's own transaction and savepoint
//   gen       CALL txmq_send_floor(X'..', NULL): a generated per-topic send (floor.sql)
//   gen_ps    the same CALL prepared (binary protocol, the payload a parameter)
//   gen_cnt   gen with a per-connection counter upsert (InnoDB; a second commit in autocommit)
//   gen_cnt1  the counter in the same transaction (the procedure's own in autocommit)
//   gen_mem   the counter in a MEMORY table
//   generic   CALL txmq_send('floor', X'..', NULL): today's procedure
//   gen_nowake, gen_nohandler, gen_min, empty: gen without the wake-up check, without the
//             EXIT handler, with neither nor the checks (fenced INSERT + SELECT LAST_INSERT_ID()),
//             and an empty procedure
//   static_ret, gen_ret (MariaDB): static and gen with the id from INSERT ... RETURNING id
//   d1, d1000, dtree: CALL txmq_send_dN('floor', X'..', NULL), a dispatcher to gen by a CASE of
//             1 or 1,000 names (floor last), or by a tree of IFs over the 1,000; ddyn: by
//             PREPARE of 'CALL txmq_send_<topic>(?, ?)' after an inline name check
//   dyn_rs, txtest_rs, topic_rs, check_rs, nested_rs: static_rs with one piece of txmq_send's
//             fast path added: PREPARE/EXECUTE/DEALLOCATE, the transaction test and savepoint or
//             own transaction, the catalog read, the name check, a nested CALL
//   gen_lw:   gen with the wake-up test IS_USED_LOCK('txmq_watch_floor') instead of a table read
//   gfence:   CALL txmq_send_gfence('floor', X'..', NULL): a generic send whose fast path is the
//             fenced INSERT through PREPARE after an unlocked read of the topic's row
//   empty_inv: the empty procedure with SQL SECURITY INVOKER
//   micro mode: the send variants from one connection, SECONDS x 1,000 calls in one transaction
//             per round: the server's CPU per call without commits or contention
// Batch variants: multi (a client multi-row INSERT, text, hex literals), gen (CALL
// txmq_send_batch_floor), gen_ret (CALL txmq_send_batch_floor_ret, MariaDB's RETURNING),
// generic (CALL txmq_send_batch('floor', ...)); the JSON is a hex literal read as utf8mb4 (as
// bench/sql.cc sends it), or with _str (gen_str, gen_ret_str, generic_str) a quoted string
// literal, or with _ps (gen_ps, gen_ret_ps, generic_ps) the parameter of a prepared CALL.
// Drain variants: raw (client statements: SELECT ... FOR UPDATE SKIP LOCKED, INSERT, DELETE ...
// IN), gen (CALL txmq_take_floor / txmq_ack_floor), gen_nc (the same without counting takes:
// txmq_take_floor_nc / txmq_ack_floor_nc), gen_hint (gen with a scan hint: txmq_take_floor_h),
// generic (txmq_take / txmq_ack).
#include <mysql.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../process_cpu.h"

using SteadyClock = std::chrono::steady_clock;
using txmq::experiments::process_cpu;
using txmq::experiments::self_cpu;

namespace {

std::string g_socket;

[[noreturn]] void fail(MYSQL* m, const std::string& what) {
  throw std::runtime_error(what + ": " + (m ? mysql_error(m) : "") + " (" +
                           std::to_string(m ? mysql_errno(m) : 0) + ")");
}

struct Conn {
  MYSQL* m = nullptr;
  Conn() {
    m = mysql_init(nullptr);
    if (!mysql_real_connect(m, "localhost", "root", nullptr, "txmq", 0, g_socket.c_str(),
                            CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS)) {
      fail(m, "connect");
    }
  }
  ~Conn() { mysql_close(m); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Runs `sql` and reads every result; returns the rows of the first result set (column 0).
  std::vector<std::string> query(const std::string& sql, std::vector<std::vector<std::string>>* all = nullptr) {
    if (mysql_real_query(m, sql.data(), sql.size()) != 0) fail(m, sql.substr(0, 80));
    std::vector<std::string> first;
    bool got_first = false;
    for (;;) {
      MYSQL_RES* r = mysql_store_result(m);
      if (r) {
        const unsigned fields = mysql_num_fields(r);
        while (MYSQL_ROW row = mysql_fetch_row(r)) {
          unsigned long* len = mysql_fetch_lengths(r);
          if (!got_first) first.emplace_back(row[0] ? std::string(row[0], len[0]) : std::string());
          if (all && !got_first) {
            std::vector<std::string> cells;
            for (unsigned i = 0; i < fields; ++i) cells.emplace_back(row[i] ? std::string(row[i], len[i]) : "");
            all->push_back(std::move(cells));
          }
        }
        mysql_free_result(r);
        got_first = true;
      } else if (mysql_field_count(m) != 0) {
        fail(m, "store_result");
      }
      const int more = mysql_next_result(m);
      if (more < 0) break;
      if (more > 0) fail(m, sql.substr(0, 80));
    }
    return first;
  }
};

// A prepared statement with string parameters; execute() reads and drops every result.
struct Stmt {
  MYSQL* m;
  MYSQL_STMT* s;
  unsigned params;
  Stmt(Conn& c, const std::string& sql) : m(c.m) {
    s = mysql_stmt_init(m);
    if (mysql_stmt_prepare(s, sql.data(), sql.size()) != 0) fail(m, "prepare " + sql.substr(0, 60));
    params = mysql_stmt_param_count(s);
  }
  ~Stmt() { mysql_stmt_close(s); }
  std::uint64_t execute(const std::vector<const std::string*>& values) {
    std::vector<MYSQL_BIND> b(values.size());
    std::vector<unsigned long> lens(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::memset(&b[i], 0, sizeof b[i]);
      b[i].buffer_type = MYSQL_TYPE_BLOB;
      b[i].buffer = const_cast<char*>(values[i]->data());
      lens[i] = values[i]->size();
      b[i].buffer_length = lens[i];
      b[i].length = &lens[i];
    }
    if (!values.empty() && mysql_stmt_bind_param(s, b.data())) fail(m, "bind");
    if (mysql_stmt_execute(s) != 0) fail(m, std::string("execute: ") + mysql_stmt_error(s));
    std::uint64_t rows = 0;
    for (;;) {
      if (mysql_stmt_field_count(s) > 0) {
        mysql_stmt_store_result(s);
        rows += mysql_stmt_num_rows(s);
        mysql_stmt_free_result(s);
      }
      const int more = mysql_stmt_next_result(s);
      if (more != 0) {
        if (more > 0) fail(m, std::string("next_result: ") + mysql_stmt_error(s));
        break;
      }
    }
    const std::uint64_t id = mysql_stmt_insert_id(s);
    return id ? id : rows;
  }
};

std::string hex(const std::string& bytes) {
  static constexpr char d[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(d[b >> 4]);
    out.push_back(d[b & 15]);
  }
  return out;
}

// Printable 100-byte payloads (JSON-safe), different per thread and message.
std::vector<std::string> payloads(int thread, int n = 256) {
  std::vector<std::string> out;
  std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(thread + 1);
  for (int i = 0; i < n; ++i) {
    std::string p(100, 'a');
    for (char& ch : p) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      ch = static_cast<char>('a' + x % 26);
    }
    out.push_back(std::move(p));
  }
  return out;
}

double questions(Conn& c) {
  auto rows = std::vector<std::vector<std::string>>();
  c.query("SHOW GLOBAL STATUS LIKE 'Queries'", &rows);
  return std::stod(rows.at(0).at(1));
}

struct Totals {
  double messages = 0, seconds = 0, client = 0, server = 0, statements = 0;
  std::vector<double> rates;
};

// One thread's work for a variant: a call per message, on its own connection.
struct Worker {
  virtual ~Worker() = default;
  virtual std::uint64_t one(std::uint64_t n) = 0;  // messages done
};

using Factory = std::function<std::unique_ptr<Worker>(int thread)>;

struct SendWorker : Worker {
  Conn c;
  std::vector<std::string> p;
  std::vector<std::string> texts;  // statements as text, per payload
  std::unique_ptr<Stmt> st, lookup, business;
  bool tx;
  std::string kind;
  SendWorker(int thread, const std::string& variant, bool in_tx) : p(payloads(thread)), tx(in_tx), kind(variant) {
    const std::string ins =
        "INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence) VALUES "
        "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ";
    std::map<std::string, std::string> call = {
        {"static", "CALL floor_static(X'{}')"},          {"static_rs", "CALL floor_static_rs(X'{}')"},
        {"fence_rs", "CALL floor_fence_rs(X'{}')"},      {"fence_tx", "CALL floor_fence_tx(X'{}')"},
        {"gen", "CALL txmq_send_floor(X'{}', NULL)"},    {"gen_cnt", "CALL txmq_send_floor_cnt(X'{}', NULL)"},
        {"gen_cnt1", "CALL txmq_send_floor_cnt1(X'{}', NULL)"},
        {"gen_mem", "CALL txmq_send_floor_mem(X'{}', NULL)"},
        {"gen_nowake", "CALL txmq_send_floor_nowake(X'{}', NULL)"},
        {"gen_nohandler", "CALL txmq_send_floor_nohandler(X'{}', NULL)"},
        {"gen_min", "CALL txmq_send_floor_min(X'{}', NULL)"}, {"empty", "CALL floor_empty(X'{}')"},
        {"static_ret", "CALL floor_static_ret(X'{}')"},
        {"dyn_rs", "CALL floor_dyn_rs(X'{}')"}, {"txtest_rs", "CALL floor_txtest_rs(X'{}')"},
        {"topic_rs", "CALL floor_topic_rs('floor', X'{}')"}, {"check_rs", "CALL floor_check_rs('floor', X'{}')"},
        {"nested_rs", "CALL floor_nested_rs(X'{}')"},
        {"d1", "CALL txmq_send_d1('floor', X'{}', NULL)"}, {"d1000", "CALL txmq_send_d1000('floor', X'{}', NULL)"},
        {"dtree", "CALL txmq_send_dtree('floor', X'{}', NULL)"},
        {"ddyn", "CALL txmq_send_ddyn('floor', X'{}', NULL)"},
        {"gen_lw", "CALL txmq_send_floor_lw(X'{}', NULL)"},
        {"gfence", "CALL txmq_send_gfence('floor', X'{}', NULL)"}, {"empty_inv", "CALL floor_empty_invoker(X'{}')"}, {"gen_ret", "CALL txmq_send_floor_ret(X'{}', NULL)"},
        {"generic", "CALL txmq_send('floor', X'{}', NULL)"}, {"rawtext", ins + "X'{}', NULL)"}};
    if (variant == "raw") {
      st = std::make_unique<Stmt>(c, ins + "?, NULL)");
    } else if (variant == "lib") {
      // Transaction::send's statements (current_layout, then an unfenced INSERT).
      lookup = std::make_unique<Stmt>(c, "SELECT layout FROM txmq_topics WHERE name = ? LOCK IN SHARE MODE");
      st = std::make_unique<Stmt>(c,
          "INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload) VALUES "
          "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)");
    } else if (variant == "gen_ps") {
      st = std::make_unique<Stmt>(c, "CALL txmq_send_floor(?, NULL)");
    } else {
      auto it = call.find(variant);
      if (it == call.end()) throw std::runtime_error("unknown send variant " + variant);
      for (const std::string& x : p) {
        std::string s = it->second;
        s.replace(s.find("{}"), 2, hex(x));
        texts.push_back(s);
      }
    }
    if (tx) business = std::make_unique<Stmt>(c, "INSERT INTO floor_business (payload) VALUES (?)");
  }
  std::uint64_t one(std::uint64_t n) override {
    const std::string& x = p[n % p.size()];
    static const std::string topic = "floor";
    if (tx) {
      c.query("START TRANSACTION");
      business->execute({&x});
    }
    if (lookup) {
      lookup->execute({&topic});
      st->execute({&x});
    } else if (st) {
      st->execute({&x});
    } else {
      c.query(texts[n % texts.size()]);
    }
    if (tx) c.query("COMMIT");
    return 1;
  }
};

std::string json_batch(int thread, int n) {
  std::string j = "[";
  for (const std::string& x : payloads(thread, n)) {
    if (j.size() > 1) j += ',';
    j += '"' + x + '"';
  }
  return j + "]";
}

struct BatchWorker : Worker {
  Conn c;
  std::string sql;
  std::string json;
  std::unique_ptr<Stmt> st;
  int n;
  BatchWorker(int thread, const std::string& variant, int batch) : json(json_batch(thread, batch)), n(batch) {
    const std::string j = "CONVERT(X'" + hex(json) + "' USING utf8mb4)";
    // _str: the JSON as a quoted string literal, as a driver that escapes strings sends it (the
    // payloads are a-z: nothing to escape); _ps: a prepared CALL, the JSON its parameter.
    if (variant == "gen_str" || variant == "gen_ret_str" || variant == "generic_str") {
      const std::string name = variant == "gen_str" ? "txmq_send_batch_floor("
                             : variant == "gen_ret_str" ? "txmq_send_batch_floor_ret(" : "txmq_send_batch('floor', ";
      sql = "CALL " + name + "'" + json + "')";
      return;
    }
    if (variant == "gen_ps" || variant == "gen_ret_ps" || variant == "generic_ps") {
      const std::string name = variant == "gen_ps" ? "txmq_send_batch_floor("
                             : variant == "gen_ret_ps" ? "txmq_send_batch_floor_ret(" : "txmq_send_batch('floor', ";
      st = std::make_unique<Stmt>(c, "CALL " + name + "?)");
      return;
    }
    if (variant == "multi") {
      sql = "INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence) VALUES ";
      bool first = true;
      for (const std::string& x : payloads(thread, batch)) {
        sql += std::string(first ? "" : ",") + "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, X'" + hex(x) + "', NULL)";
        first = false;
      }
    } else if (variant == "multi_ret") {
      sql = "INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence) VALUES ";
      bool first = true;
      for (const std::string& x : payloads(thread, batch)) {
        sql += std::string(first ? "" : ",") + "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, X'" + hex(x) + "', NULL)";
        first = false;
      }
      sql += " RETURNING id";
    } else if (variant == "gen") {
      sql = "CALL txmq_send_batch_floor(" + j + ")";
    } else if (variant == "gen_ret") {
      sql = "CALL txmq_send_batch_floor_ret(" + j + ")";
    } else if (variant == "generic") {
      sql = "CALL txmq_send_batch('floor', " + j + ")";
    } else {
      throw std::runtime_error("unknown batch variant " + variant);
    }
  }
  std::uint64_t one(std::uint64_t) override {
    if (st) {
      const std::uint64_t rows = st->execute({&json});
      if (rows != static_cast<std::uint64_t>(n)) throw std::runtime_error("batch returned " + std::to_string(rows) + " ids");
      return static_cast<std::uint64_t>(n);
    }
    const auto ids = c.query(sql);
    if (sql.rfind("CALL", 0) == 0 && ids.size() != static_cast<std::size_t>(n)) {
      throw std::runtime_error("batch returned " + std::to_string(ids.size()) + " ids");
    }
    return static_cast<std::uint64_t>(n);
  }
};

struct DrainWorker : Worker {
  Conn c;
  std::string variant;
  DrainWorker(const std::string& v) : variant(v) {
    c.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  }
  // One take + work + ack transaction; 0 when nothing was left.
  std::uint64_t one(std::uint64_t) override {
    for (;;) {
      try {
        c.query("START TRANSACTION");
        std::vector<std::string> ids;
        if (variant == "raw") {
          ids = c.query("SELECT id, payload, msg_key, attempts, enqueued_at, attributes FROM txmq_q_floor "
                        "FORCE INDEX (PRIMARY) WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT 100 "
                        "FOR UPDATE SKIP LOCKED");
        } else if (variant == "gen") {
          ids = c.query("CALL txmq_take_floor(100)");
        } else if (variant == "gen_nc") {
          ids = c.query("CALL txmq_take_floor_nc(100)");
        } else if (variant == "gen_hint") {
          ids = c.query("CALL txmq_take_floor_h(100)");
        } else if (variant == "generic") {
          ids = c.query("CALL txmq_take('floor', NULL, 100)");
        } else {
          throw std::runtime_error("unknown drain variant " + variant);
        }
        if (ids.empty()) {
          c.query("COMMIT");
          return 0;
        }
        std::string work = "INSERT INTO floor_work (msg_id) VALUES ", list;
        for (std::size_t i = 0; i < ids.size(); ++i) {
          work += (i ? ",(" : "(") + ids[i] + ")";
          list += (i ? "," : "") + ids[i];
        }
        c.query(work);
        if (variant == "raw") {
          c.query("DELETE FROM txmq_q_floor WHERE id IN (" + list + ")");
        } else if (variant == "gen" || variant == "gen_hint") {
          c.query("CALL txmq_ack_floor('[" + list + "]')");
        } else if (variant == "gen_nc") {
          c.query("CALL txmq_ack_floor_nc('[" + list + "]')");
        } else {
          c.query("CALL txmq_ack('floor', NULL, '[" + list + "]')");
        }
        c.query("COMMIT");
        return ids.size();
      } catch (const std::runtime_error& e) {
        if (!std::strstr(e.what(), "(1213)") && !std::strstr(e.what(), "(1205)")) throw;
        c.query("ROLLBACK");
      }
    }
  }
};

void fill(Conn& c, int rows) {
  const auto p = payloads(99, 1000);
  for (int done = 0; done < rows; done += 1000) {
    std::string sql = "INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload) VALUES ";
    for (int i = 0; i < 1000; ++i) {
      sql += std::string(i ? "," : "") + "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, X'" + hex(p[i]) + "')";
    }
    c.query(sql);
  }
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, sep);) if (!x.empty()) out.push_back(x);
  return out;
}

// 999 made-up topic names (never called) and `floor`, for the dispatchers.
std::vector<std::string> dispatch_names() {
  std::vector<std::string> names;
  for (int i = 0; i < 999; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "tenant_%04d_orders", i);
    names.push_back(name);
  }
  names.push_back("floor");
  std::sort(names.begin(), names.end());
  return names;
}

std::string dispatch_999() {
  std::string out;
  for (const std::string& n : dispatch_names()) {
    if (n != "floor") out += "    WHEN '" + n + "' THEN CALL txmq_send('" + n + "', p_payload, p_options);\n";
  }
  return out;
}

// IF v_t < 'm' THEN ... ELSE ... END IF, down to one name per leaf.
std::string tree(const std::vector<std::string>& names, std::size_t lo, std::size_t hi) {
  if (hi - lo == 1) {
    const std::string& n = names[lo];
    const std::string call = n == "floor" ? "CALL txmq_send_floor(p_payload, p_options);"
                                          : "CALL txmq_send('" + n + "', p_payload, p_options);";
    return "IF v_t = '" + n + "' THEN " + call + " ELSE CALL txmq_send(p_topic, p_payload, p_options); END IF;\n";
  }
  const std::size_t mid = (lo + hi) / 2;
  return "IF v_t < '" + names[mid] + "' THEN\n" + tree(names, lo, mid) + "ELSE\n" + tree(names, mid, hi) +
         "END IF;\n";
}

std::string dispatch_tree() {
  const auto names = dispatch_names();
  return tree(names, 0, names.size());
}

void setup(const std::string& dir) {
  Conn c;
  auto rows = std::vector<std::vector<std::string>>();
  c.query("SELECT max_payload_bytes, @@version, @@version_comment FROM txmq_topics WHERE name = 'floor'", &rows);
  if (rows.empty()) throw std::runtime_error("no topic 'floor': txmq topic create floor");
  const std::string max = rows[0][0];
  const bool maria = rows[0][1].find("MariaDB") != std::string::npos;
  std::vector<std::string> files = {dir + "/floor.sql"};
  if (maria) files.push_back(dir + "/floor_mariadb.sql");
  for (const std::string& f : files) {
    std::ifstream in(f);
    std::string line, stmt;
    auto run = [&] {
      std::string s = stmt;
      for (std::size_t at; (at = s.find("@MAX_PAYLOAD@")) != std::string::npos;) s.replace(at, 13, max);
      for (std::size_t at; (at = s.find("@DISPATCH_999@")) != std::string::npos;)
        s.replace(at, 14, dispatch_999());
      for (std::size_t at; (at = s.find("@DISPATCH_TREE@")) != std::string::npos;)
        s.replace(at, 15, dispatch_tree());
      for (std::size_t at; (at = s.find("@OF_Q@")) != std::string::npos;)
        s.replace(at, 6, maria ? "" : "OF q ");  // MySQL locks per table of a join
      for (std::size_t at; (at = s.find("@NOT_IN_TX@")) != std::string::npos;)
        s.replace(at, 11, maria ? "@@in_transaction = 0" : "FALSE");
      if (s.find_first_not_of(" \n") != std::string::npos) c.query(s);
      stmt.clear();
    };
    while (std::getline(in, line)) {
      if (line == "$$") {
        run();
      } else if (line.rfind("--", 0) != 0) {
        stmt += line + "\n";
      }
    }
    run();
  }
  std::printf("installed (max_payload %s, %s)\n", max.c_str(), maria ? "MariaDB" : "MySQL");
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SOCKET SERVER_PID MODE [THREADS] [ROUNDS] [SECONDS] [VARIANTS]\n", argv[0]);
    return 2;
  }
  g_socket = argv[1];
  const int server_pid = std::atoi(argv[2]);
  const std::string mode = argv[3];
  mysql_library_init(0, nullptr, nullptr);
  if (mode == "setup") {
    setup(argc > 4 ? argv[4] : ".");
    return 0;
  }
  const int threads = argc > 4 ? std::atoi(argv[4]) : 4;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 5;
  const double seconds = argc > 6 ? std::atof(argv[6]) : 5;
  std::vector<std::string> variants = split(argc > 7 ? argv[7] : "", ',');
  if (variants.empty()) {
    if (mode == "send") variants = split("raw,static,static_rs,fence_rs,fence_tx,gen,generic", ',');
    else if (mode == "tx") variants = split("raw,lib,static_rs,fence_tx,gen,generic", ',');
    else if (mode == "batch") variants = split("multi,gen,generic", ',');
    else variants = split("raw,gen,generic", ',');
  }
  const int workers = mode == "batch" || mode == "micro" ? 1 : threads;
  // Each variant's connections, made once before the clock starts.
  std::map<std::string, std::vector<std::unique_ptr<Worker>>> made;
  for (const std::string& v : variants) {
    for (int t = 0; t < workers; ++t) {
      if (mode == "send" || mode == "tx" || mode == "micro") made[v].push_back(std::make_unique<SendWorker>(t, v, mode == "tx"));
      else if (mode == "batch") made[v].push_back(std::make_unique<BatchWorker>(t, v, 1000));
      else made[v].push_back(std::make_unique<DrainWorker>(v));
    }
  }
  Conn status;
  std::map<std::string, Totals> totals;
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::string& v = variants[(k + static_cast<std::size_t>(r)) % variants.size()];
      // TRUNCATE, not DELETE: a claim's scan would step over the deleted rows until purged.
      if (mode == "drain") {
        status.query("TRUNCATE TABLE txmq_q_floor");
        status.query("TRUNCATE TABLE floor_work");
        status.query("DELETE FROM txmq_takes");
        fill(status, static_cast<int>(seconds * 1000));
      } else if (r == 0 && k == 0) {
        status.query("TRUNCATE TABLE txmq_q_floor");
      }
      std::atomic<std::uint64_t> done{0};
      const double q0 = questions(status), c0 = self_cpu(), s0 = process_cpu(server_pid);
      const auto start = SteadyClock::now();
      const auto deadline = start + std::chrono::duration<double>(seconds);
      std::vector<std::thread> pool;
      std::mutex failed_at;
      std::string failure;
      for (int t = 0; t < workers; ++t) {
        pool.emplace_back([&, t] {
          try {
            Worker& w = *made[v][static_cast<std::size_t>(t)];
            std::uint64_t n = 0, i = 0;
            if (mode == "drain") {
              while (std::uint64_t got = w.one(i++)) n += got;
            } else if (mode == "micro") {
              // The server's work alone: no commit (no fsync) per call, no other client.
              SendWorker& sw = static_cast<SendWorker&>(w);
              sw.c.query("START TRANSACTION");
              while (n < static_cast<std::uint64_t>(seconds * 1000)) n += w.one(i++);
              sw.c.query("COMMIT");
            } else {
              while (SteadyClock::now() < deadline) n += w.one(i++);
            }
            done += n;
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> l(failed_at);
            failure = e.what();
          }
        });
      }
      for (auto& th : pool) th.join();
      if (!failure.empty()) throw std::runtime_error(v + ": " + failure);
      const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
      Totals& tt = totals[v];
      tt.messages += static_cast<double>(done.load());
      tt.seconds += elapsed;
      tt.client += self_cpu() - c0;
      tt.server += process_cpu(server_pid) - s0;
      tt.statements += questions(status) - q0 - 1;
      tt.rates.push_back(static_cast<double>(done.load()) / elapsed);
      std::fprintf(stderr, "round %d %-10s %9.0f/s\n", r + 1, v.c_str(), tt.rates.back());
    }
  }
  std::printf("%s, %d %s, %d rounds of %g %s (server pid %d)\n", mode.c_str(), workers,
              mode == "drain" ? "consumers" : "threads", rounds, seconds,
              mode == "drain" ? "k messages" : "s", server_pid);
  std::printf("%-10s %10s %10s %8s %8s %10s %10s %8s\n", "variant", "msgs/s", "median", "min", "max",
              "server us", "client us", "queries");
  const double ref = totals[variants[0]].messages / totals[variants[0]].seconds;
  for (const std::string& v : variants) {
    Totals& tt = totals[v];
    std::sort(tt.rates.begin(), tt.rates.end());
    const double rate = tt.messages / tt.seconds;
    std::printf("%-10s %10.0f %10.0f %8.0f %8.0f %10.1f %10.1f %8.2f  %.2fx %s\n", v.c_str(), rate,
                tt.rates[tt.rates.size() / 2], tt.rates.front(), tt.rates.back(),
                1e6 * tt.server / tt.messages, 1e6 * tt.client / tt.messages,
                tt.statements / tt.messages, rate / ref, variants[0].c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
