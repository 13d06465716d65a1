// txmq_xa_crash: crash injection for Client::process_xa (exactly-once across two databases,
// docs/design/exactly-once-across-databases.md 7.3, 7.4, 7.11).
//
//   txmq_xa_crash [--seed S] [--dir DIR] [--keep] [--messages N] [--queue NAME] [--resource NAME]
//   txmq_xa_crash --child --dsn-a DSN --dsn-b DSN [--threads 4] [--batch 100] [--pause-ms MS]
//                 [--deadline SEC]
//
// The parent starts two private MariaDB servers of its own with `txmq local start` (DIR/a holds
// the queue's database A, DIR/b the application's database B), makes the topic `payments` on A
// and on B the tables accounts (one row) and processed (message ids, deliberately not unique so
// that a duplicate shows instead of being refused), and sends N messages whose payload is an
// amount. Then rounds, each with a child process (this program with --child) that consumes with
// 4 threads through process_xa; each message adds its amount to the account and inserts a
// processed row, both in B's XA branch:
//   - fault rounds: the library's hook (TXMQ_XA_FAULT=<step>@<n>) SIGKILLs the child when its
//     n-th batch reaches `started`, `prepared`, `decided` or `committed`;
//   - parent-kill rounds: the parent kill -9s the child after 0.3 to 2 s;
//   - server rounds: the parent kill -9s server A (or B) by its pid file under a working child,
//     starts it again 1 to 3 s later, watches the child go on, then kill -9s the child.
// A last child without faults drains the topic; two recovery passes (recover_xa) 6 s apart
// finish what is left. Checks: the account's total and SUM(amount) equal the sum of the amounts
// sent, every message id is in processed exactly once with its own amount, the topic is empty
// with no dead letters, B's XA RECOVER lists no txmq branch, A's txmq_xa is empty. Prints a
// verdict line `xa crash: PASS` or `xa crash: FAIL (...)`; exit 0 on PASS, 1 on FAIL, 2 when the
// run could not be set up. DIR (default: a new folder under the build folder) is removed on PASS
// unless --keep; it holds the servers' logs (a/server.log, b/server.log) and each child's output
// (round-K.log).
//
// --queue NAME, --resource NAME: server A (the queue), server B (the XA resource) is
// scripts/server's NAME (mysql-9.7, mariadb-11.8; docs/servers.md) in DIR/a or DIR/b instead of
// `txmq local`'s MariaDB: started with `scripts/server NAME start --home DIR/x`, kill -9'd with
// `kill`, restarted with `start`, stopped with `stop`, root's DSN (on the socket) from `dsn`; its
// log is DIR/x/mysqld.log. scripts/server is found through $TXMQ_SERVER_SCRIPT, else the source
// folder (TXMQ_SOURCE_DIR if defined, else CMAKE_HOME_DIRECTORY of the build folder's
// CMakeCache.txt). XA RECOVER is read over the text protocol (MySQL will not prepare it).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "db/connection.h"
#include "db/dsn.h"
#include "txmq/client.h"
#include "txmq/error.h"
#include "txmq/local.h"
#include "txmq/transaction.h"
#include "txmq/types.h"

#ifndef TXMQ_BINARY
#error "TXMQ_BINARY (the txmq command) must be defined"
#endif
#ifndef TXMQ_XA_CRASH_DIR
#define TXMQ_XA_CRASH_DIR "/tmp"
#endif

extern char** environ;

namespace txmq::xacrash {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

constexpr std::string_view kTopic = "payments";
constexpr std::string_view kResource = "ledger";  // also B's database
constexpr std::int64_t kTxmqFormatId = 1954049393;  // 0x74786D71, "txmq" (design 7.2)
constexpr int kMaxAttempts = 100;  // crashes are not the messages' fault: none may die of them
// The rounds that kill at a moment (not at a step): their children's batch size and handler
// pause, so that a round of a few seconds does not drain the topic, and the messages they find.
constexpr int kTimedBatch = 10;
constexpr int kTimedPauseMs = 100;
constexpr std::size_t kTimedReady = 3000;

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_signal(int) { g_interrupted = 1; }

void check_interrupted() {
  if (g_interrupted) throw std::runtime_error("interrupted");
}

double seconds_since(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

void sleep_for(std::chrono::milliseconds d) {
  const auto until = Steady::now() + d;
  while (Steady::now() < until) {
    check_interrupted();
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        20ms, std::chrono::duration_cast<std::chrono::milliseconds>(until - Steady::now()) + 1ms));
  }
}

// ============================================================================================
// The child: drains the topic with process_xa on `threads` threads.
// ============================================================================================

struct ChildOptions {
  std::string dsn_a, dsn_b;
  int threads = 4;
  int batch = 100;
  int pause_ms = 0;  // the handler first sleeps 0 to pause_ms ms (a slow handler), branch open
  int deadline_seconds = 300;
};

int run_child(const ChildOptions& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a SIGKILL must not eat the lines printed so far
  const auto started = Steady::now();
  const auto deadline = started + std::chrono::seconds(o.deadline_seconds);
  const char* fault = std::getenv("TXMQ_XA_FAULT");
  fmt::print("child {}: {} threads, batches of {}, handler pause up to {} ms, fault {}\n",
             getpid(), o.threads, o.batch, o.pause_ms, fault != nullptr ? fault : "none");

  // Server A may be down when the child starts (a server round): try again until it answers.
  std::unique_ptr<Client> client;
  for (;;) {
    try {
      ClientOptions co;
      co.dsn = o.dsn_a;
      co.consumer_name = fmt::format("xa-crash-child:{}", getpid());
      client = std::make_unique<Client>(co);
      break;
    } catch (const Error& e) {
      fmt::print("child: connecting to A: {} ({})\n", e.what(), errc_name(e.code()));
      if (!e.retryable() || Steady::now() > deadline) return 2;
      std::this_thread::sleep_for(200ms);
    }
  }
  const XaResource resource{std::string(kResource), o.dsn_b};

  std::atomic<std::uint64_t> processed{0}, batches{0}, retryable{0}, other{0}, unknown{0}, slow{0};
  std::atomic<bool> timed_out{false};

  const TransactionalHandler handler = [&o](Transaction& tx, std::span<const Message> messages) {
    if (o.pause_ms > 0) {
      thread_local std::mt19937 random(std::random_device{}());
      std::this_thread::sleep_for(std::chrono::milliseconds(random() % (o.pause_ms + 1)));
    }
    for (const Message& m : messages) {
      const int amount = std::stoi(m.payload);
      const SqlResult r =
          tx.execute("UPDATE accounts SET total = total + ? WHERE id = 1", {amount});
      if (r.affected_rows != 1) {
        throw std::runtime_error(
            fmt::format("UPDATE accounts changed {} rows, not 1", r.affected_rows));
      }
      tx.execute("INSERT INTO processed (id, amount) VALUES (?, ?)", {m.id, amount});
    }
  };

  auto work = [&](int t) {
    ProcessOptions po;
    po.max_messages = o.batch;
    po.wait = 200ms;
    for (;;) {
      if (Steady::now() > deadline) {
        timed_out = true;
        return;
      }
      try {
        const auto call = Steady::now();
        const std::size_t n = client->process_xa(kTopic, resource, po, handler);
        if (const double took = seconds_since(call); took > 2) {
          ++slow;
          fmt::print("child thread {}: slow process_xa: {} messages in {:.1f} s\n", t, n, took);
        }
        if (n > 0) {
          processed += n;
          ++batches;
          continue;
        }
        // Nothing claimable: done when nothing is left at all (a batch of another thread that
        // fails comes back as ready or delayed, and its rows stay counted while it runs).
        const TopicStats s = client->stats(kTopic);
        if (s.ready + s.in_flight + s.delayed + s.waiting_on_key == 0) return;
        std::this_thread::sleep_for(100ms);
      } catch (const Error& e) {
        if (e.code() == Errc::kCommitUnknown) {
          ++unknown;
          fmt::print("child thread {}: CONTRACT kCommitUnknown escaped process_xa: {}\n", t,
                     e.what());
        } else if (e.retryable()) {
          ++retryable;
          fmt::print("child thread {}: retryable {} (errno {}): {}\n", t, errc_name(e.code()),
                     e.server_errno(), e.what());
        } else {
          ++other;
          fmt::print("child thread {}: NOT RETRYABLE {} (errno {}): {}\n", t,
                     errc_name(e.code()), e.server_errno(), e.what());
        }
        std::this_thread::sleep_for(200ms);
      } catch (const std::exception& e) {
        ++other;
        fmt::print("child thread {}: NOT RETRYABLE exception: {}\n", t, e.what());
        std::this_thread::sleep_for(200ms);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(work, t);
  for (std::thread& t : threads) t.join();

  fmt::print(
      "child: {} after {:.1f} s: {} messages in {} batches ({} calls over 2 s); errors: {} "
      "retryable, {} not retryable, {} kCommitUnknown\n",
      timed_out ? "NOT DRAINED (deadline)" : "drained", seconds_since(started), processed.load(),
      batches.load(), slow.load(), retryable.load(), other.load(), unknown.load());
  client.reset();
  if (timed_out) return 2;
  return other > 0 || unknown > 0 ? 3 : 0;
}

// ============================================================================================
// The parent.
// ============================================================================================

struct Options {
  std::uint64_t seed = 0;
  std::string dir;
  bool keep = false;
  int messages = 20000;
  int threads = 4;
  int batch = 100;
  std::string queue;     // server A: scripts/server's NAME; empty: `txmq local`
  std::string resource;  // server B: the same
};

std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

// fork + execve with stdin from /dev/null and stdout/stderr appended to `log`; the environment
// is this process's with `set` added (an empty value removes the variable). Everything the
// child needs is prepared before fork (the parent has threads). die_with_parent: SIGKILL when
// this process dies (children of a run killed by its timeout must not go on).
pid_t spawn(const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& set, const std::string& log,
            bool die_with_parent) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::none_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == name; })) {
      env.emplace_back(entry);
    }
  }
  for (const auto& [name, value] : set) {
    if (!value.empty()) env.push_back(name + "=" + value);
  }
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (in < 0 || out < 0) throw std::runtime_error(fmt::format("cannot open {}", log));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
    }
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    close_range(3, ~0U, 0);  // none of the parent's connections may live on in the child
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(in);
  close(out);
  if (pid < 0) throw std::runtime_error("fork failed");
  return pid;
}

// Waits for `pid` up to `timeout`; the wait status, or nullopt while it still runs.
std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = Steady::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) throw std::runtime_error(fmt::format("waitpid({}) failed", pid));
    if (Steady::now() >= until) return std::nullopt;
    check_interrupted();
    std::this_thread::sleep_for(10ms);
  }
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  if (WIFEXITED(status)) return fmt::format("exited with {}", WEXITSTATUS(status));
  return fmt::format("wait status {}", status);
}

std::string tail(const std::string& path, std::size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "      | " + all[i] + "\n";
  }
  return out;
}

std::size_t count_lines_with(const std::string& path, std::string_view needle) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// Gone: no such process, or a zombie that nobody reaps (mariadbd is not our child).
bool process_gone(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return true;
  const auto close_paren = stat.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= stat.size() ||
         stat[close_paren + 2] == 'Z' || stat[close_paren + 2] == 'X';
}

// A root session on one server, connected again whenever it broke; queries are tried again
// after retryable errors, while the server is away (up to `tries` times, 200 ms apart).
class Admin {
 public:
  explicit Admin(std::string dsn) : dsn_(std::move(dsn)) {}

  internal::Result run(std::string_view sql, std::initializer_list<internal::Param> params = {},
                       int tries = 150) {
    for (int i = 1;; ++i) {
      try {
        return connection().execute(sql, params);
      } catch (const Error& e) {
        c_.reset();
        if (!e.retryable() || i >= tries) throw;
        sleep_for(200ms);
      }
    }
  }
  void query(std::string_view sql, int tries = 150) {
    for (int i = 1;; ++i) {
      try {
        connection().query(sql);
        return;
      } catch (const Error& e) {
        c_.reset();
        if (!e.retryable() || i >= tries) throw;
        sleep_for(200ms);
      }
    }
  }
  // Through the text protocol, for what MySQL will not prepare (XA RECOVER); cells as bytes.
  internal::Result text_rows(std::string_view sql, int tries = 150) {
    for (int i = 1;; ++i) {
      try {
        return connection().query_rows(sql);
      } catch (const Error& e) {
        c_.reset();
        if (!e.retryable() || i >= tries) throw;
        sleep_for(200ms);
      }
    }
  }
  std::int64_t scalar(std::string_view sql, int tries = 150) {
    internal::Result r = run(sql, {}, tries);
    if (r.rows.empty() || r.rows[0].null(0)) return 0;
    return r.rows[0].i64(0);
  }
  void forget() { c_.reset(); }

 private:
  internal::Connection& connection() {
    if (c_ == nullptr || c_->broken()) {
      c_.reset();
      c_ = std::make_unique<internal::Connection>(internal::parse_dsn(dsn_));
    }
    return *c_;
  }
  std::string dsn_;
  std::unique_ptr<internal::Connection> c_;
};

// scripts/server: $TXMQ_SERVER_SCRIPT, else the source folder's (TXMQ_SOURCE_DIR, else the
// CMAKE_HOME_DIRECTORY that the build folder's CMakeCache.txt names).
std::string server_script() {
  if (const char* script = std::getenv("TXMQ_SERVER_SCRIPT"); script != nullptr) return script;
#ifdef TXMQ_SOURCE_DIR
  return TXMQ_SOURCE_DIR "/scripts/server";
#else
  const std::string cache = std::string(TXMQ_XA_CRASH_DIR) + "/CMakeCache.txt";
  std::ifstream in(cache);
  const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return line.substr(key.size()) + "/scripts/server";
  }
  throw std::runtime_error(fmt::format(
      "cannot find scripts/server: set TXMQ_SERVER_SCRIPT ({} names no CMAKE_HOME_DIRECTORY)",
      cache));
#endif
}

// The two private servers, started with `txmq local start` (TXMQ_HOME=DIR/a, DIR/b), or with
// `scripts/server NAME start --home DIR/a` (--queue NAME, --resource NAME), and stopped (by their
// pid files) when this goes, also on failure.
class Servers {
 public:
  Servers(const std::string& dir, std::string queue, std::string resource)
      : dir_(dir), log_(dir + "/servers.log"), names_{std::move(queue), std::move(resource)} {}
  Servers(const Servers&) = delete;
  Servers& operator=(const Servers&) = delete;
  ~Servers() { stop(); }

  static int index(char server) { return server == 'a' ? 0 : 1; }
  std::string home(char server) const { return fmt::format("{}/{}", dir_, server); }
  // scripts/server's NAME of the server; empty: `txmq local`'s.
  const std::string& name(char server) const { return names_[index(server)]; }
  std::string describe(char server) const {
    return name(server).empty() ? "txmq local (MariaDB)" : name(server) + " (scripts/server)";
  }
  std::string server_log(char server) const {
    return home(server) + (name(server).empty() ? "/server.log" : "/mysqld.log");
  }

  // `tries`: a first start runs mariadb-install-db, which another test's install at the same
  // moment can break (CTest runs tests in parallel); the data folder appears only when complete,
  // so starting again begins afresh.
  void start(char server, int tries = 1) {
    started_[index(server)] = true;
    const std::string what =
        name(server).empty() ? "txmq local start" : "scripts/server " + name(server) + " start";
    for (int attempt = 1;; ++attempt) {
      const int status = command(server, "start", log_);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
      if (attempt >= tries) {
        throw std::runtime_error(fmt::format("{} of server {} {}; see {} and {}", what, server,
                                             describe_status(status), log_, server_log(server)));
      }
      fmt::print("  ({} of server {} {}, trying again; see {})\n", what, server,
                 describe_status(status), log_);
      sleep_for(2s);
    }
  }

  // root's DSN for `database` on the server (over its socket).
  std::string dsn(char server, std::string_view database) const {
    std::string d;  // mysql://root@localhost/txmq?socket=...
    if (name(server).empty()) {
      d = LocalServer::status({home(server)}).dsn;
    } else {
      const std::string out = fmt::format("{}/dsn-{}.txt", dir_, server);
      fs::remove(out);
      const int status = command(server, "dsn", out);
      std::ifstream in(out);
      std::getline(in, d);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || d.rfind("mysql://", 0) != 0) {
        throw std::runtime_error(fmt::format("scripts/server {} dsn of server {} {}: '{}'",
                                             name(server), server, describe_status(status), d));
      }
      fs::remove(out);
    }
    const std::string from = "/txmq?";
    d.replace(d.find(from), from.size(), fmt::format("/{}?", database));
    return d;
  }

  // kill -9 of the server by its pid file; waits until the process is gone.
  void kill9(char server) {
    const std::optional<int> pid = server_pid(server);
    if (!pid) throw std::runtime_error(fmt::format("server {} is not running", server));
    if (!name(server).empty()) {
      // By the same pid file; it waits until the process has ended.
      const int status = command(server, "kill", log_);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        throw std::runtime_error(fmt::format("scripts/server {} kill of server {} {}; see {}",
                                             name(server), server, describe_status(status), log_));
      }
    } else {
      ::kill(*pid, SIGKILL);
    }
    for (int i = 0; i < 1000 && !process_gone(*pid); ++i) std::this_thread::sleep_for(10ms);
    if (!process_gone(*pid)) {
      throw std::runtime_error(fmt::format("server {} (pid {}) outlived kill -9", server, *pid));
    }
  }

  void stop() noexcept {
    for (char server : {'a', 'b'}) {
      if (!started_[index(server)]) continue;
      started_[index(server)] = false;
      try {
        command(server, "stop", log_);
      } catch (...) {
      }
    }
  }

 private:
  // The pid of the server running in its home (its pid file names a live process).
  std::optional<int> server_pid(char server) const {
    if (name(server).empty()) return LocalServer::status({home(server)}).pid;
    std::ifstream in(home(server) + "/mysqld.pid");
    int pid = 0;
    if (!(in >> pid) || pid <= 0 || process_gone(pid)) return std::nullopt;
    return pid;
  }

  // `txmq local VERB` with TXMQ_HOME=DIR/x, or `scripts/server NAME VERB --home DIR/x`; its
  // output appended to `log`. Returns the wait status.
  int command(char server, const char* verb, const std::string& log) const {
    const pid_t pid =
        name(server).empty()
            ? spawn({TXMQ_BINARY, "local", verb}, {{"TXMQ_HOME", home(server)}}, log, false)
            : spawn({server_script(), name(server), verb, "--home", home(server)}, {}, log, false);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  }

  std::string dir_, log_;
  std::string names_[2];
  bool started_[2] = {false, false};
};

char upper(char server) { return server == 'a' ? 'A' : 'B'; }

enum class Kind { kFault, kParentKill, kServerKill };

struct Round {
  Kind kind = Kind::kFault;
  std::string step;        // kFault: the hook's step
  int nth = 1;             // kFault: the batch
  int kill_after_ms = 0;   // kParentKill: child's age at the kill; kServerKill: server kill
  int down_ms = 0;         // kServerKill: how long the server stays down
  char server = 'a';       // kServerKill

  std::string name() const {
    switch (kind) {
      case Kind::kFault: return fmt::format("hook {}@{}", step, nth);
      case Kind::kParentKill: return fmt::format("parent kill -9 of the child at {:.1f} s", kill_after_ms / 1000.0);
      case Kind::kServerKill:
        return fmt::format("kill -9 of server {} {:.1f} s into the child's work, down {:.1f} s", upper(server),
                           kill_after_ms / 1000.0, down_ms / 1000.0);
    }
    return "?";
  }
};

class Harness {
 public:
  explicit Harness(Options o)
      : o_(std::move(o)),
        servers_(o_.dir, o_.queue, o_.resource),
        plan_rng_(o_.seed ^ 0x9e3779b97f4a7c15ULL) {}

  int run() {
    const auto started = Steady::now();
    fmt::print("txmq_xa_crash: seed {}, {} messages, {} threads, batches of {}, in {}\n", o_.seed,
               o_.messages, o_.threads, o_.batch, o_.dir);
    fmt::print("  A (the queue): {}; B (the XA resource): {}\n", servers_.describe('a'),
               servers_.describe('b'));
    fmt::print("  reproduce with: {} --seed {} --messages {}{}{} --keep\n", self_path(), o_.seed,
               o_.messages, o_.queue.empty() ? "" : " --queue " + o_.queue,
               o_.resource.empty() ? "" : " --resource " + o_.resource);
    set_up();
    const std::vector<Round> plan = make_plan();
    fmt::print("  plan:\n");
    for (std::size_t i = 0; i < plan.size(); ++i) {
      fmt::print("    round {}: {}\n", i + 1, plan[i].name());
    }
    for (std::size_t i = 0; i < plan.size(); ++i) run_round(static_cast<int>(i + 1), plan[i]);
    final_drain(static_cast<int>(plan.size() + 1));
    recover();
    check();
    client_.reset();  // before its server goes
    admin_a_.reset();
    admin_b_.reset();
    servers_.stop();
    const double seconds = seconds_since(started);
    fmt::print(
        "  figures: {:.0f} s, {} rounds + final drain, {} child kills by the hook, {} by the "
        "parent, {} server kills, {} calls of process_xa over 2 s\n",
        seconds, plan.size(), hook_kills_, parent_kills_, server_kills_, slow_calls_);
    if (!notes_.empty()) {
      fmt::print("  notes (not failures):\n");
      for (const std::string& n : notes_) fmt::print("    - {}\n", n);
    }
    const bool ok = failures_.empty();
    if (ok) {
      fmt::print("xa crash: PASS\n");
      if (!o_.keep) fs::remove_all(o_.dir);
    } else {
      fmt::print("xa crash: FAIL ({})\n", fmt::join(failures_, "; "));
      fmt::print("  kept: {} (server logs {}, {}; children round-K.log)\n", o_.dir,
                 servers_.server_log('a'), servers_.server_log('b'));
    }
    return ok ? 0 : 1;
  }

 private:
  // --- set-up ----------------------------------------------------------------------------

  void set_up() {
    const auto t0 = Steady::now();
    // One at a time: two mariadb-install-db at once were seen to break each other's bootstrap.
    servers_.start('a', 3);
    servers_.start('b', 3);
    fmt::print("  servers A and B started in {:.1f} s\n", seconds_since(t0));
    dsn_a_ = servers_.dsn('a', "txmq");
    dsn_b_ = servers_.dsn('b', std::string(kResource));
    admin_a_ = std::make_unique<Admin>(dsn_a_);
    admin_b_ = std::make_unique<Admin>(servers_.dsn('b', "mysql"));
    admin_b_->query(fmt::format("CREATE DATABASE IF NOT EXISTS {}", kResource));
    admin_b_ = std::make_unique<Admin>(dsn_b_);
    admin_b_->query("CREATE TABLE accounts (id INT PRIMARY KEY, total BIGINT NOT NULL) ENGINE=InnoDB");
    admin_b_->query(
        "CREATE TABLE processed (id BIGINT UNSIGNED NOT NULL, amount INT NOT NULL, KEY (id)) "
        "ENGINE=InnoDB");
    admin_b_->query("INSERT INTO accounts VALUES (1, 0)");

    ClientOptions co;
    co.dsn = dsn_a_;
    co.record_metrics = false;
    co.consumer_name = "xa-crash-parent";
    client_ = std::make_unique<Client>(co);
    TopicOptions to;
    to.max_attempts = kMaxAttempts;
    to.retry.initial = Micros{0};
    client_->create_topic(kTopic, to);

    // The amounts, all drawn now from the seed; sent in portions so that every round finds
    // work (top_up).
    std::mt19937_64 amounts(o_.seed);
    for (int i = 0; i < o_.messages; ++i) amounts_.push_back(1 + static_cast<int>(amounts() % 997));
    for (int a : amounts_) expected_total_ += a;
    top_up(std::min(o_.messages, 6000));
    fmt::print("  expected total {} over {} messages\n", expected_total_, o_.messages);
  }

  // Sends from the amounts not yet sent until at least `ready` messages wait (or all are sent).
  void top_up(std::size_t ready) {
    const std::size_t have = waiting();
    if (have >= ready || next_ >= amounts_.size()) return;
    std::size_t want = ready - have;
    const auto t0 = Steady::now();
    std::size_t sent = 0;
    while (want > 0 && next_ < amounts_.size()) {
      const std::size_t n = std::min({want, std::size_t{1000}, amounts_.size() - next_});
      std::vector<OutgoingMessage> batch(n);
      for (std::size_t i = 0; i < n; ++i) batch[i].payload = std::to_string(amounts_[next_ + i]);
      const std::vector<std::uint64_t> ids = client_->send_batch(kTopic, batch);
      for (std::size_t i = 0; i < n; ++i) sent_[ids[i]] = amounts_[next_ + i];
      next_ += n;
      want -= n;
      sent += n;
    }
    fmt::print("  sent {} messages in {:.1f} s ({} of {} sent so far)\n", sent, seconds_since(t0),
               next_, amounts_.size());
  }

  std::size_t waiting() {
    for (int i = 0;; ++i) {
      try {
        const TopicStats s = client_->stats(kTopic);
        return s.ready + s.in_flight + s.delayed + s.waiting_on_key;
      } catch (const Error& e) {
        if (!e.retryable() || i > 100) throw;
        sleep_for(200ms);
      }
    }
  }

  std::vector<Round> make_plan() {
    std::vector<Round> plan;
    for (const char* step : {"started", "prepared", "decided", "committed"}) {
      Round r;
      r.kind = Kind::kFault;
      r.step = step;
      r.nth = 1 + static_cast<int>(plan_rng_() % 30);
      plan.push_back(r);
    }
    for (int i = 0; i < 3; ++i) {
      Round r;
      r.kind = Kind::kParentKill;
      r.kill_after_ms = 300 + static_cast<int>(plan_rng_() % 1701);
      plan.push_back(r);
    }
    for (char server : {'a', 'b'}) {
      Round r;
      r.kind = Kind::kServerKill;
      r.server = server;
      r.kill_after_ms = 300 + static_cast<int>(plan_rng_() % 1201);
      r.down_ms = 1000 + static_cast<int>(plan_rng_() % 2001);
      plan.push_back(r);
    }
    std::shuffle(plan.begin(), plan.end(), plan_rng_);
    return plan;
  }

  // --- rounds ----------------------------------------------------------------------------

  std::string round_log(int k) const { return fmt::format("{}/round-{}.log", o_.dir, k); }

  // A child of round k; batch 0: the run's batch size.
  pid_t start_child(int k, const std::string& fault, int batch = 0, int pause_ms = 0) {
    return spawn({self_path(), "--child", "--dsn-a", dsn_a_, "--dsn-b", dsn_b_, "--threads",
                  std::to_string(o_.threads), "--batch", std::to_string(batch > 0 ? batch : o_.batch),
                  "--pause-ms", std::to_string(pause_ms)},
                 {{"TXMQ_XA_FAULT", fault}}, round_log(k), true);
  }

  std::int64_t processed_rows() { return admin_b_->scalar("SELECT COUNT(*) FROM processed"); }

  // Progress and state after a round, for the log and to date a duplicate.
  void after_round(int k, Steady::time_point t0) {
    const internal::Result r =
        admin_b_->run("SELECT COUNT(*), COUNT(DISTINCT id) FROM processed");
    const std::int64_t rows = r.rows.at(0).i64(0), distinct = r.rows.at(0).i64(1);
    std::size_t in_doubt = 0;
    for (const internal::Row& row : admin_b_->text_rows("XA RECOVER").rows) {
      in_doubt += row.i64(0) == kTxmqFormatId;
    }
    fmt::print("      {:.1f} s; processed {} rows ({} distinct ids), {} waiting, {} txmq branches prepared on B\n",
               seconds_since(t0), rows, distinct, waiting(), in_doubt);
    if (rows != distinct && first_duplicate_round_ == 0) {
      first_duplicate_round_ = k;
      failures_.push_back(fmt::format("duplicates appeared in round {}", k));
    }
  }

  void run_round(int k, Round r) {
    if (r.kind == Kind::kFault) {
      // The fault must come before the child runs out of messages.
      const std::size_t available = waiting() + (amounts_.size() - next_);
      const int most = std::max(1, static_cast<int>(available / o_.batch) - 8);
      if (r.nth > most) {
        fmt::print("  (round {}: batch {} lowered to {}, {} messages left)\n", k, r.nth, most,
                   available);
        r.nth = most;
      }
    }
    fmt::print("  round {}: {}\n", k, r.name());
    const auto t0 = Steady::now();
    switch (r.kind) {
      case Kind::kFault: {
        top_up(static_cast<std::size_t>((r.nth + 8) * o_.batch));
        const pid_t pid = start_child(k, fmt::format("{}@{}", r.step, r.nth));
        const std::optional<int> status = wait_for(pid, 120s);
        if (!status) {
          ::kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          failures_.push_back(fmt::format("round {} ({}): the child hung (neither reached the fault nor drained in 120 s)", k, r.name()));
          fmt::print("    HUNG: killed after 120 s\n{}", tail(round_log(k), 15));
        } else if (WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) {
          ++hook_kills_;
          fmt::print("    killed by the hook (SIGKILL)\n");
        } else if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
          failures_.push_back(fmt::format("round {} ({}): set-up, the child drained before its batch {} reached {}", k, r.name(), r.nth, r.step));
          fmt::print("    SET-UP FAILED: the child drained before the fault\n{}", tail(round_log(k), 5));
        } else {
          failures_.push_back(fmt::format("round {} ({}): the child {}", k, r.name(), describe_status(*status)));
          fmt::print("    the child {}\n{}", describe_status(*status), tail(round_log(k), 15));
        }
        break;
      }
      case Kind::kParentKill: {
        top_up(kTimedReady);
        const pid_t pid = start_child(k, "", kTimedBatch, kTimedPauseMs);
        const std::optional<int> status =
            wait_for(pid, std::chrono::milliseconds(r.kill_after_ms));
        if (status) {
          notes_.push_back(fmt::format("round {}: the child {} before the parent's kill", k, describe_status(*status)));
          fmt::print("    the child {} before the kill\n{}", describe_status(*status), tail(round_log(k), 5));
          if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
            failures_.push_back(fmt::format("round {} ({}): the child {}", k, r.name(), describe_status(*status)));
          }
        } else {
          ::kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          ++parent_kills_;
          fmt::print("    killed by the parent (SIGKILL)\n");
        }
        break;
      }
      case Kind::kServerKill: server_round(k, r); break;
    }
    note_errors(k);
    after_round(k, t0);
  }

  // The child's non-retryable errors and escaped kCommitUnknown, from its output.
  void note_errors(int k) {
    const std::size_t other = count_lines_with(round_log(k), "NOT RETRYABLE");
    const std::size_t unknown = count_lines_with(round_log(k), "CONTRACT kCommitUnknown");
    const std::size_t retryable = count_lines_with(round_log(k), ": retryable ");
    if (retryable > 0) fmt::print("    the child reported {} retryable errors\n", retryable);
    // Calls of process_xa over 2 s: lock waits on B (10 s each) behind a crashed consumer's
    // branch, or between the child's own batches.
    if (const std::size_t slow = count_lines_with(round_log(k), "slow process_xa"); slow > 0) {
      slow_calls_ += slow;
      fmt::print("    the child reported {} calls of process_xa over 2 s\n", slow);
    }
    if (other > 0) {
      notes_.push_back(fmt::format("round {}: {} non-retryable errors from process_xa (round-{}.log)", k, other, k));
      fmt::print("    the child reported {} NON-RETRYABLE errors, e.g.:\n{}", other, first_lines_with(round_log(k), "NOT RETRYABLE", 3));
    }
    if (unknown > 0) {
      failures_.push_back(fmt::format("round {}: kCommitUnknown escaped process_xa {} times", k, unknown));
    }
  }

  static std::string first_lines_with(const std::string& path, std::string_view needle, std::size_t n) {
    std::ifstream in(path);
    std::string out;
    for (std::string line; n > 0 && std::getline(in, line);) {
      if (line.find(needle) != std::string::npos) {
        out += "      | " + line + "\n";
        --n;
      }
    }
    return out;
  }

  // kill -9 of a server under a working child, restart, then the child must go on.
  void server_round(int k, const Round& r) {
    top_up(kTimedReady + 2000);
    const std::int64_t before = processed_rows();
    const pid_t pid = start_child(k, "", kTimedBatch, kTimedPauseMs);
    // Wait until the child works (its first batch committed), then the random moment.
    const auto t0 = Steady::now();
    std::optional<int> status;
    while (!status && processed_rows() == before && seconds_since(t0) < 60) {
      status = wait_for(pid, 50ms);
    }
    if (!status) status = wait_for(pid, std::chrono::milliseconds(r.kill_after_ms));
    if (status) {
      failures_.push_back(fmt::format("round {} ({}): the child {} before the server kill", k, r.name(), describe_status(*status)));
      fmt::print("    the child {} before the server kill\n{}", describe_status(*status), tail(round_log(k), 10));
      return;
    }
    admin_b_->forget();
    servers_.kill9(r.server);
    ++server_kills_;
    const auto killed = Steady::now();
    fmt::print("    server {} killed (kill -9) {:.1f} s after the child started\n", upper(r.server), seconds_since(t0));
    status = wait_for(pid, std::chrono::milliseconds(r.down_ms));
    servers_.start(r.server);
    fmt::print("    server {} started again after {:.1f} s down\n", upper(r.server), seconds_since(killed));
    // The child goes on: more rows in processed than right after the restart.
    const std::int64_t at_restart = processed_rows();
    const auto restarted = Steady::now();
    bool progress = false;
    while (!status && seconds_since(restarted) < 90) {
      if (processed_rows() > at_restart) {
        progress = true;
        break;
      }
      status = wait_for(pid, 100ms);
    }
    if (status) {
      // Allowed (what matters is the final check), but noted.
      const bool drained = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
      notes_.push_back(fmt::format("round {}: the child {} after the kill of server {}{}", k, describe_status(*status), upper(r.server), drained ? " (drained)" : ""));
      fmt::print("    the child {} (did not survive the server kill)\n{}", describe_status(*status), tail(round_log(k), 10));
      return;
    }
    if (!progress) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      failures_.push_back(fmt::format("round {} ({}): the child made no progress within 90 s of the restart", k, r.name()));
      fmt::print("    HUNG: no progress within 90 s of the restart\n{}", tail(round_log(k), 15));
      return;
    }
    fmt::print("    the child survived and went on {:.1f} s after the restart\n", seconds_since(restarted));
    if (wait_for(pid, std::chrono::milliseconds(300 + plan_rng_() % 700))) {
      fmt::print("    the child ended before the parent's kill\n{}", tail(round_log(k), 3));
    } else {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      ++parent_kills_;
      fmt::print("    then killed by the parent (SIGKILL)\n");
    }
  }

  void final_drain(int k) {
    top_up(amounts_.size());  // the rest
    fmt::print("  round {}: final child, no fault, drains {} messages\n", k, waiting());
    const auto t0 = Steady::now();
    const pid_t pid = start_child(k, "");
    const std::optional<int> status = wait_for(pid, 420s);
    if (!status) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      failures_.push_back("final drain hung (420 s)");
      fmt::print("    HUNG: killed after 420 s\n{}", tail(round_log(k), 15));
    } else if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
      fmt::print("    drained\n{}", tail(round_log(k), 1));
    } else {
      failures_.push_back(fmt::format("final drain: the child {}", describe_status(*status)));
      fmt::print("    the child {}\n{}", describe_status(*status), tail(round_log(k), 15));
    }
    note_errors(k);
    after_round(k, t0);
  }

  void recover() {
    const XaResource resource{std::string(kResource), dsn_b_};
    for (int pass = 1; pass <= 2; ++pass) {
      if (pass == 2) sleep_for(6s);  // branches younger than 5 s are left as live
      try {
        const XaRecovery r = client_->recover_xa(resource);
        fmt::print("  recover_xa pass {}: {} committed, {} rolled back, {} purged, {} live\n", pass,
                   r.committed, r.rolled_back, r.purged, r.live);
      } catch (const Error& e) {
        failures_.push_back(fmt::format("recover_xa pass {} threw: {}", pass, e.what()));
        fmt::print("  recover_xa pass {} threw {}: {}\n", pass, errc_name(e.code()), e.what());
      }
    }
    try {
      const std::vector<XaBranchStatus> left = client_->xa_status(resource);
      for (const XaBranchStatus& s : left) {
        fmt::print("  xa_status: token {:016x} prepared {} decision '{}' owner {} topic '{}' first id {}\n",
                   s.token, s.prepared, s.decision, s.owner_id, s.topic, s.first_id);
      }
      fmt::print("  xa_status: {} entries left\n", left.size());
    } catch (const Error& e) {
      failures_.push_back(fmt::format("xa_status threw: {}", e.what()));
    }
  }

  // --- checks ----------------------------------------------------------------------------

  void verdict(bool ok, const std::string& name, const std::string& detail) {
    fmt::print("  check {}: {} ({})\n", ok ? "ok  " : "FAIL", name, detail);
    if (!ok) failures_.push_back(name);
  }

  // Runs one check's queries; a check that cannot run fails.
  void guarded(const std::string& name, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      verdict(false, name, fmt::format("could not run: {}", e.what()));
    }
  }

  void check() {
    guarded("B's tables", [this] { check_b(); });
    guarded("topic empty", [this] { check_topic(); });
    guarded("no txmq branch prepared on B (XA RECOVER)", [this] { check_xa_recover(); });
    guarded("txmq_xa on A empty", [this] {
      const std::int64_t decisions = admin_a_->scalar("SELECT COUNT(*) FROM txmq_xa");
      verdict(decisions == 0, "txmq_xa on A empty", fmt::format("{} rows", decisions));
    });
  }

  void check_b() {
    const auto expected = static_cast<std::int64_t>(expected_total_);
    const std::int64_t total = admin_b_->scalar("SELECT total FROM accounts WHERE id = 1");
    verdict(total == expected, "accounts.total", fmt::format("{} expected {}", total, expected));
    const std::int64_t sum = admin_b_->scalar("SELECT CAST(COALESCE(SUM(amount), 0) AS SIGNED) FROM processed");
    verdict(sum == expected, "SUM(amount)", fmt::format("{} expected {}", sum, expected));

    // Every id once, with its own amount; no stranger.
    std::map<std::uint64_t, int> seen;
    std::size_t wrong_amount = 0, strangers = 0, rows = 0;
    for (const internal::Row& row : admin_b_->run("SELECT id, amount FROM processed").rows) {
      ++rows;
      const std::uint64_t id = row.u64(0);
      ++seen[id];
      auto it = sent_.find(id);
      if (it == sent_.end()) {
        ++strangers;
      } else if (it->second != row.i64(1)) {
        ++wrong_amount;
      }
    }
    std::vector<std::string> duplicates;
    for (const auto& [id, n] : seen) {
      if (n > 1 && duplicates.size() < 10) duplicates.push_back(fmt::format("{}x{}", id, n));
    }
    std::size_t missing = 0;
    std::vector<std::uint64_t> missing_ids;
    for (const auto& [id, amount] : sent_) {
      if (!seen.contains(id)) {
        ++missing;
        if (missing_ids.size() < 10) missing_ids.push_back(id);
      }
    }
    verdict(rows == sent_.size() && seen.size() == sent_.size(), "processed rows = distinct ids = messages",
            fmt::format("{} rows, {} distinct, {} messages", rows, seen.size(), sent_.size()));
    verdict(duplicates.empty(), "no duplicate in processed",
            duplicates.empty() ? "none" : fmt::format("e.g. {}", fmt::join(duplicates, ", ")));
    verdict(missing == 0, "every message processed",
            missing == 0 ? "none missing" : fmt::format("{} missing, e.g. {}", missing, fmt::join(missing_ids, ", ")));
    verdict(strangers == 0 && wrong_amount == 0, "processed rows match the messages sent",
            fmt::format("{} unknown ids, {} wrong amounts", strangers, wrong_amount));
  }

  void check_topic() {
    const TopicStats s = client_->stats(kTopic);
    verdict(s.ready + s.in_flight + s.delayed + s.waiting_on_key == 0, "topic empty",
            fmt::format("ready {}, in flight {}, delayed {}, waiting on key {}", s.ready,
                        s.in_flight, s.delayed, s.waiting_on_key));
    const std::size_t dead = client_->dead_letters(kTopic).size();
    verdict(s.dead == 0 && dead == 0, "no dead letters", fmt::format("{} in stats, {} listed", s.dead, dead));
  }

  void check_xa_recover() {
    std::vector<std::string> branches;
    std::size_t others = 0;
    for (const internal::Row& row : admin_b_->text_rows("XA RECOVER").rows) {
      if (row.i64(0) == kTxmqFormatId) {
        branches.push_back(row.bytes(3));
      } else {
        ++others;
      }
    }
    verdict(branches.empty(), "no txmq branch prepared on B (XA RECOVER)",
            branches.empty() ? fmt::format("none; {} other branches", others)
                             : fmt::format("{} left: {}", branches.size(), fmt::join(branches, ", ")));
  }

  Options o_;
  Servers servers_;
  std::mt19937_64 plan_rng_;
  std::string dsn_a_, dsn_b_;
  std::unique_ptr<Admin> admin_a_, admin_b_;
  std::unique_ptr<Client> client_;
  std::vector<int> amounts_;
  std::size_t next_ = 0;  // amounts_[next_] is the next to send
  std::map<std::uint64_t, int> sent_;  // id -> amount
  std::uint64_t expected_total_ = 0;
  std::vector<std::string> failures_, notes_;
  int first_duplicate_round_ = 0;
  int hook_kills_ = 0, parent_kills_ = 0, server_kills_ = 0;
  std::size_t slow_calls_ = 0;
};

int usage() {
  std::fprintf(stderr,
               "usage: txmq_xa_crash [--seed S] [--dir DIR] [--keep] [--messages N] [--queue NAME] "
               "[--resource NAME]\n"
               "       txmq_xa_crash --child --dsn-a DSN --dsn-b DSN [--threads N] [--batch N] "
               "[--pause-ms MS] [--deadline SEC]\n"
               "  NAME: scripts/server's mysql-9.7 or mariadb-11.8 as server A (--queue) or B "
               "(--resource)\n");
  return 2;
}

}  // namespace
}  // namespace txmq::xacrash

int main(int argc, char** argv) {
  using namespace txmq::xacrash;
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args[0] == "--child") {
      ChildOptions o;
      for (std::size_t i = 1; i < args.size(); ++i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--dsn-a" && has_value) {
          o.dsn_a = args[++i];
        } else if (args[i] == "--dsn-b" && has_value) {
          o.dsn_b = args[++i];
        } else if (args[i] == "--threads" && has_value) {
          o.threads = std::stoi(args[++i]);
        } else if (args[i] == "--batch" && has_value) {
          o.batch = std::stoi(args[++i]);
        } else if (args[i] == "--pause-ms" && has_value) {
          o.pause_ms = std::stoi(args[++i]);
        } else if (args[i] == "--deadline" && has_value) {
          o.deadline_seconds = std::stoi(args[++i]);
        } else {
          return usage();
        }
      }
      if (o.dsn_a.empty() || o.dsn_b.empty() || o.threads < 1 || o.batch < 1) return usage();
      return run_child(o);
    }

    Options o;
    o.seed = std::random_device{}();
    for (std::size_t i = 0; i < args.size(); ++i) {
      const bool has_value = i + 1 < args.size();
      if (args[i] == "--seed" && has_value) {
        o.seed = std::stoull(args[++i]);
      } else if (args[i] == "--dir" && has_value) {
        o.dir = args[++i];
      } else if (args[i] == "--keep") {
        o.keep = true;
      } else if (args[i] == "--messages" && has_value) {
        o.messages = std::stoi(args[++i]);
      } else if (args[i] == "--queue" && has_value) {
        o.queue = args[++i];
      } else if (args[i] == "--resource" && has_value) {
        o.resource = args[++i];
      } else {
        return usage();
      }
    }
    if (o.messages < 1) return usage();
    if (o.dir.empty()) {
      std::string tmpl = std::string(TXMQ_XA_CRASH_DIR) + "/xa-crash.XXXXXX";
      if (mkdtemp(tmpl.data()) == nullptr) {
        std::fprintf(stderr, "txmq_xa_crash: cannot make a folder under %s\n", TXMQ_XA_CRASH_DIR);
        return 2;
      }
      o.dir = tmpl;
    } else {
      std::filesystem::create_directories(o.dir);
      if (!std::filesystem::is_empty(o.dir)) {
        std::fprintf(stderr, "txmq_xa_crash: %s is not empty\n", o.dir.c_str());
        return 2;
      }
    }
    o.dir = std::filesystem::absolute(o.dir).lexically_normal().string();
    unsetenv("TXMQ_XA_FAULT");  // never in the parent; each child gets its own
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string dir = o.dir;
    try {
      return Harness(std::move(o)).run();
    } catch (const std::exception& e) {
      fmt::print("txmq_xa_crash: {}\n", e.what());
      fmt::print("xa crash: FAIL (the run broke off: {})\n  kept: {}\n", e.what(), dir);
      return 2;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "txmq_xa_crash: {}\n", e.what());
    return 2;
  }
}
