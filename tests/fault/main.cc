// txmq_fault: the fault suite (docs/faults.md).
//
//   txmq_fault [--seconds N] [--dir DIR] [--seed S] [--keep]
//
// Starts a private MariaDB server in DIR/server, producers and consumers as separate processes
// (this program again, and `txmq consume`), injects faults for N seconds (SIGKILL of consumers,
// producers and the server, KILL CONNECTION, SIGSTOP past a lease), stops the producers, lets
// the consumers drain the topics, and checks every history (check.cc). Exit 0 when every check
// held; the histories stay in DIR when one did not (or with --keep).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "db/connection.h"
#include "db/dsn.h"
#include "fault.h"
#include "txmq/client.h"
#include "txmq/local.h"

namespace txmq::fault {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kUser = "txmq_fault";
// Characters a DSN must escape, so that the children prove percent-decoding of passwords.
constexpr std::string_view kPassword = "f@ult:pa/ss%word";
constexpr std::string_view kPasswordEscaped = "f%40ult%3Apa%2Fss%25word";
constexpr auto kLease = 2s;

struct Options {
  int seconds = 60;
  std::string dir;
  std::uint64_t seed = 0;
  bool keep = false;
};

struct Child {
  std::string role;  // producer, consumer, worker, cli, exactly-once
  int id = 0;
  int generation = 0;
  pid_t pid = -1;
  std::string group;
  std::string history;                               // this generation's
  std::optional<SteadyClock::time_point> resume_at;  // paused until then
};

std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

class Orchestrator {
 public:
  explicit Orchestrator(Options options) : options_(std::move(options)), rng_(options_.seed) {}

  int run() {
    fs::create_directories(options_.dir + "/histories");
    server_.home = options_.dir + "/server";
    server_.start_timeout_seconds = 120;
    fmt::print("txmq_fault: {} s of faults, seed {}, in {}\n", options_.seconds, options_.seed,
               options_.dir);
    root_dsn_ = LocalServer::ensure_running(server_);
    try {
      set_up();
      start_children();
      inject_faults();
      drain();
      collect();
    } catch (...) {
      for (Child& c : children_) {
        if (c.pid > 0) kill(c.pid, SIGKILL);
        if (c.pid > 0) waitpid(c.pid, nullptr, 0);
      }
      LocalServer::stop(server_);
      throw;
    }
    LocalServer::stop(server_);
    const bool ok = check(record_);
    fmt::print("\n{}\n", ok ? "PASS: every check held" : "FAIL: see above");
    if (ok && !options_.keep) {
      fs::remove_all(options_.dir);
    } else {
      fmt::print("histories: {}/histories\n", options_.dir);
    }
    return ok ? 0 : 1;
  }

 private:
  // --- the database ------------------------------------------------------------------------

  internal::Connection& admin() {
    if (admin_ == nullptr || admin_->broken()) {
      admin_.reset();
      admin_ = std::make_unique<internal::Connection>(internal::parse_dsn(root_dsn_));
    }
    return *admin_;
  }

  // The children connect as a user with only the privileges README "Privileges" lists for
  // sending and consuming; the topics, groups and the application's tables are made as root.
  void set_up() {
    internal::Connection& c = admin();
    c.query(fmt::format("CREATE USER '{}'@'localhost' IDENTIFIED BY '{}'", kUser, kPassword));
    c.query(
        fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON txmq.* TO '{}'@'localhost'", kUser));
    c.query(fmt::format("CREATE TABLE {} (tag VARCHAR(64) PRIMARY KEY)", kOrdersTable));
    c.query(
        fmt::format("CREATE TABLE {} (n BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(64) "
                    "NOT NULL, msg_id BIGINT UNSIGNED NOT NULL, consumer VARCHAR(64) NOT NULL)",
                    kEffectsTable));
    ClientOptions o;
    o.dsn = root_dsn_;
    Client root(o);
    TopicOptions alo;
    alo.lease = kLease;
    alo.max_attempts = 1000;  // crashes are not the messages' fault: none may die of them
    alo.partitions = 2;
    alo.archive = std::chrono::hours(24);
    alo.retry.initial = Micros{0};
    root.create_topic(kTopic, alo);
    root.create_group(kTopic, kWorkerGroup);
    root.create_group(kTopic, kCliGroup);
    TopicOptions eo;
    eo.max_attempts = 1000;
    root.create_topic(kExactlyOnceTopic, eo);

    const std::string at = "root@";
    std::string dsn = root_dsn_;
    dsn.replace(dsn.find(at), at.size(), fmt::format("{}:{}@", kUser, kPasswordEscaped));
    setenv("TXMQ_DSN", dsn.c_str(), 1);  // the children's; never on a command line
  }

  // --- children ----------------------------------------------------------------------------

  void spawn(Child& child) {
    child.history = fmt::format("{}/histories/{}-{}-{}.log", options_.dir, child.role, child.id,
                                child.generation);
    std::vector<std::string> argv;
    if (child.role == "cli") {
      // One line per message, written by the handler itself.
      const char* txmq = std::getenv("TXMQ_BINARY");  // another build's, for A/B runs
      argv = {txmq != nullptr ? txmq : TXMQ_BINARY,
              "consume",
              std::string(kTopic),
              "--group",
              child.group,
              "--concurrency",
              "4",
              "--exec",
              fmt::format("printf 'C %s %s %s\\n' \"$TXMQ_MESSAGE_ID\" \"$TXMQ_ATTEMPT\" "
                          "\"$(cat)\" >> {}",
                          cli_deliveries())};
      record_.cli_logs.push_back(child.history);
    } else {
      argv = {self_path(),
              child.role,
              std::to_string(child.id),
              std::to_string(child.generation),
              child.history,
              std::to_string(rng_()),
              child.group};
      if (child.role == "producer") record_.producer_histories.push_back(child.history);
      if (child.role == "consumer") record_.consumer_histories.push_back(child.history);
      if (child.role == "worker") record_.worker_histories.push_back(child.history);
    }
    const std::string out = child.role == "cli" ? child.history : child.history + ".out";
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      int in = open("/dev/null", O_RDONLY);
      int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(in, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    child.pid = pid;
  }

  std::string cli_deliveries() const { return options_.dir + "/histories/cli-deliveries.log"; }

  void start_children() {
    record_.cli_deliveries = cli_deliveries();
    auto add = [&](std::string role, int count, std::string_view group) {
      for (int i = 0; i < count; ++i) {
        Child c;
        c.role = role;
        c.id = i;
        c.group = std::string(group);
        children_.push_back(c);
      }
    };
    add("producer", 3, "-");
    add("consumer", 3, kRawGroup);
    add("worker", 2, kWorkerGroup);
    add("cli", 1, kCliGroup);
    add("exactly-once", 2, "-");
    for (Child& c : children_) spawn(c);
  }

  // Kills with SIGKILL and starts the next generation.
  void kill_and_restart(Child& c) {
    if (c.resume_at) {
      kill(c.pid, SIGCONT);
      c.resume_at.reset();
    }
    kill(c.pid, SIGKILL);
    waitpid(c.pid, nullptr, 0);
    ++c.generation;
    spawn(c);
  }

  // A child that exited by itself is a finding: it is written down and started again.
  void reap_unbidden() {
    for (Child& c : children_) {
      int status = 0;
      if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
        record_.faults.unbidden_exits.push_back(
            fmt::format("{} {} generation {}: {} {} (history {})", c.role, c.id, c.generation,
                        WIFSIGNALED(status) ? "signal" : "exit",
                        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), c.history));
        ++c.generation;
        spawn(c);
      }
    }
  }

  void resume_due(bool all = false) {
    for (Child& c : children_) {
      if (c.resume_at && (all || SteadyClock::now() >= *c.resume_at)) {
        kill(c.pid, SIGCONT);
        c.resume_at.reset();
      }
    }
  }

  Child* pick(std::initializer_list<std::string_view> roles) {
    std::vector<Child*> candidates;
    for (Child& c : children_) {
      if (!c.resume_at && std::find(roles.begin(), roles.end(), c.role) != roles.end()) {
        candidates.push_back(&c);
      }
    }
    if (candidates.empty()) return nullptr;
    return candidates[rng_() % candidates.size()];
  }

  // The last line of a history says where its process was: D mid-handler, S mid-ack, A
  // mid-send; anything else mid-claim (or between sends).
  static std::string last_event(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    const std::streamoff size = in.tellg();
    if (size <= 0) return "";
    const std::streamoff from = std::max<std::streamoff>(0, size - 1024);
    in.seekg(from);
    std::string tail(static_cast<std::size_t>(size - from), '\0');
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    if (tail.empty() || tail.back() != '\n') return "";
    tail.pop_back();
    std::istringstream last(tail.substr(tail.rfind('\n') + 1));
    std::string time, event;
    last >> time >> event;
    return event;
  }

  // Waits up to a second for the child to be at `event` (see last_event), so that faults land
  // in every phase; returns where it is then.
  static std::string await_event(const Child& c, std::string_view event) {
    std::string now = last_event(c.history);
    for (int i = 0; i < 1000 && now != event; ++i) {
      std::this_thread::sleep_for(1ms);
      now = last_event(c.history);
    }
    return now;
  }

  // --- faults ------------------------------------------------------------------------------

  void kill_consumer() {
    Child* c = pick({"consumer", "worker", "cli", "exactly-once"});
    if (c == nullptr) return;
    if (c->role == "consumer") {
      static constexpr std::string_view kPhases[] = {"D", "S", "K"};
      const std::string where = await_event(*c, kPhases[rng_() % 3]);
      Faults& f = record_.faults;
      (where == "D"   ? f.consumer_kills_mid_handler
       : where == "S" ? f.consumer_kills_mid_ack
                      : f.consumer_kills_mid_claim)++;
    }
    kill_and_restart(*c);
    ++record_.faults.consumer_kills;
  }

  void kill_producer() {
    Child* c = pick({"producer"});
    if (c == nullptr) return;
    if (await_event(*c, "A") == "A") ++record_.faults.producer_kills_mid_send;
    kill_and_restart(*c);
    ++record_.faults.producer_kills;
  }

  void kill_server() {
    LocalServerStatus status = LocalServer::status(server_);
    if (!status.pid) return;
    kill(*status.pid, SIGKILL);
    waitpid(*status.pid, nullptr, 0);
    admin_.reset();
    ++record_.faults.server_kills;
    const auto started = SteadyClock::now();
    LocalServer::ensure_running(server_);
    fmt::print("  server killed and restarted ({:.1f} s)\n",
               std::chrono::duration<double>(SteadyClock::now() - started).count());
    last_server_kill_ = SteadyClock::now();
  }

  void kill_connections() {
    try {
      internal::Connection& c = admin();
      internal::Result r =
          c.execute("SELECT id FROM information_schema.processlist WHERE user = ?", {kUser});
      for (const internal::Row& row : r.rows) {
        if (rng_() % 2 != 0) continue;
        try {
          c.execute("KILL CONNECTION ?", {row.u64(0)});
          ++record_.faults.connection_kills;
        } catch (const Error&) {
          // it ended by itself meanwhile
        }
      }
      ++record_.faults.connection_kill_rounds;
    } catch (const Error& e) {
      fmt::print("  KILL CONNECTION round skipped: {}\n", e.what());
    }
  }

  void pause_consumer() {
    Child* c = pick({"consumer", "worker"});
    if (c == nullptr) return;
    const bool holding = c->role == "consumer" && await_event(*c, "D") == "D";
    kill(c->pid, SIGSTOP);
    // Paused with messages in hand (no ack begun): their leases end and peers take them.
    if (holding && last_event(c->history) == "D") ++record_.faults.pauses_holding_messages;
    c->resume_at = SteadyClock::now() + kLease + 1500ms;
    ++record_.faults.pauses;
  }

  // One snapshot of everything group default holds plus the archive: every batch in it must be
  // whole (its messages commit together; an ack moves a message to the archive in one go).
  void observe() {
    try {
      internal::Connection& c = admin();
      std::string tables;
      for (std::string_view kind : {"q", "dlq"}) {
        for (std::string_view partition : {"", "$0_1"}) {
          tables += fmt::format("SELECT id, payload FROM `txmq_{}_{}{}` UNION ALL ", kind, kTopic,
                                partition);
        }
      }
      tables += fmt::format("SELECT id, payload FROM `txmq_a_{}`", kTopic);
      c.query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      c.query("START TRANSACTION WITH CONSISTENT SNAPSHOT");
      internal::Result r = c.execute(fmt::format(
          "SELECT batch, COUNT(DISTINCT id) AS got FROM (SELECT id, SUBSTRING_INDEX(payload, "
          "'.', 1) AS batch FROM ({}) u WHERE payload LIKE 'b%') v GROUP BY batch HAVING got <> "
          "CAST(SUBSTRING_INDEX(batch, 'x', -1) AS UNSIGNED)",
          tables));
      c.query("COMMIT");
      ++record_.faults.observations;
      for (const internal::Row& row : r.rows) {
        ++record_.faults.partial_batches_seen;
        fmt::print("  partly visible batch {}: {} messages\n", row.bytes(0), row.i64(1));
      }
    } catch (const Error& e) {
      admin_.reset();  // the server is away; the next snapshot will tell
    }
  }

  void inject_faults() {
    const auto end = SteadyClock::now() + std::chrono::seconds(options_.seconds);
    auto next_fault = SteadyClock::now() + 2s;
    auto next_look = SteadyClock::now() + 1s;
    last_server_kill_ = SteadyClock::now() - 5s;  // the first may come after 3 s
    std::uniform_int_distribution<int> gap_ms(500, 2500);
    while (SteadyClock::now() < end) {
      reap_unbidden();
      resume_due();
      if (SteadyClock::now() >= next_look) {
        observe();
        next_look = SteadyClock::now() + 2s;
      }
      if (SteadyClock::now() >= next_fault) {
        const unsigned dice = rng_() % 100;
        if (dice < 30 && SteadyClock::now() - last_server_kill_ > 8s) {
          kill_server();
        } else if (dice < 50) {
          kill_consumer();
        } else if (dice < 65) {
          kill_producer();
        } else if (dice < 82) {
          kill_connections();
        } else {
          pause_consumer();
        }
        next_fault = SteadyClock::now() + std::chrono::milliseconds(gap_ms(rng_));
      }
      std::this_thread::sleep_for(50ms);
    }
    resume_due(true);
  }

  // --- the end -----------------------------------------------------------------------------

  void stop_children(std::string_view role, std::chrono::seconds patience) {
    for (Child& c : children_) {
      if (c.role == role) kill(c.pid, SIGTERM);
    }
    const auto deadline = SteadyClock::now() + patience;
    for (Child& c : children_) {
      if (c.role != role) continue;
      int status = 0;
      while (waitpid(c.pid, &status, WNOHANG) != c.pid) {
        if (SteadyClock::now() > deadline) {
          record_.faults.unbidden_exits.push_back(fmt::format(
              "{} {} did not stop within {} s of SIGTERM", c.role, c.id, patience.count()));
          kill(c.pid, SIGKILL);
          waitpid(c.pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        record_.faults.unbidden_exits.push_back(
            fmt::format("{} {} exited with {} when stopped (history {})", c.role, c.id,
                        WEXITSTATUS(status), c.history));
      }
      c.pid = -1;
    }
  }

  std::uint64_t pending(Client& client) {
    std::uint64_t left = 0;
    auto add = [&](std::string_view topic, std::string_view group) {
      TopicStats s = client.stats(topic, group);
      left += s.ready + s.in_flight + s.delayed + s.waiting_on_key;
      record_.faults.dead_letters += s.dead;
    };
    record_.faults.dead_letters = 0;
    for (std::string_view g : {kRawGroup, kWorkerGroup, kCliGroup}) add(kTopic, g);
    add(kExactlyOnceTopic, "");
    return left;
  }

  void drain() {
    fmt::print("  faults over; stopping the producers and draining\n");
    stop_children("producer", 120s);
    ClientOptions o;
    o.dsn = root_dsn_;
    Client client(o);
    const auto deadline = SteadyClock::now() + 180s;
    while (SteadyClock::now() < deadline) {
      reap_unbidden();
      if (pending(client) == 0) {
        record_.faults.drained = true;
        break;
      }
      std::this_thread::sleep_for(500ms);
    }
    for (std::string_view role : {"consumer", "worker", "cli", "exactly-once"}) {
      stop_children(role, 60s);
    }
  }

  void collect() {
    internal::Connection& c = admin();
    for (const internal::Row& row :
         c.execute(fmt::format("SELECT tag FROM {}", kEffectsTable)).rows) {
      record_.effects.push_back(row.bytes(0));
    }
    for (const internal::Row& row :
         c.execute(fmt::format("SELECT tag FROM {}", kOrdersTable)).rows) {
      record_.orders.push_back(row.bytes(0));
    }
    admin_.reset();
  }

  Options options_;
  std::mt19937_64 rng_;
  LocalServerOptions server_;
  std::string root_dsn_;
  std::unique_ptr<internal::Connection> admin_;
  std::vector<Child> children_;
  RunRecord record_;
  SteadyClock::time_point last_server_kill_;
};

int usage() {
  fmt::print(stderr, "usage: txmq_fault [--seconds N] [--dir DIR] [--seed S] [--keep]\n");
  return 2;
}

}  // namespace
}  // namespace txmq::fault

int main(int argc, char** argv) {
  using namespace txmq::fault;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "producer" || args[0] == "consumer" || args[0] == "worker" ||
                        args[0] == "exactly-once")) {
    if (args.size() != 6) return usage();
    RoleArgs role{std::stoi(args[1]), std::stoi(args[2]), args[3], std::stoull(args[4]), args[5]};
    try {
      if (args[0] == "producer") return run_producer(role);
      if (args[0] == "consumer") return run_consumer(role);
      if (args[0] == "worker") return run_worker(role);
      return run_exactly_once(role);
    } catch (const std::exception& e) {
      History(role.history).line("FAILED {}", e.what());
      return 3;
    }
  }
  Options options;
  options.seed = std::random_device{}();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--seconds" && has_value) {
      options.seconds = std::stoi(args[++i]);
    } else if (args[i] == "--dir" && has_value) {
      options.dir = args[++i];
    } else if (args[i] == "--seed" && has_value) {
      options.seed = std::stoull(args[++i]);
    } else if (args[i] == "--keep") {
      options.keep = true;
    } else {
      return usage();
    }
  }
  if (options.dir.empty()) {
    char tmpl[] = "/tmp/txmq-fault-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return usage();
    options.dir = tmpl;
  }
  signal(SIGPIPE, SIG_IGN);
  try {
    return Orchestrator(options).run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "txmq_fault: {}\n", e.what());
    return 2;
  }
}
