// txmq_fault: the fault suite (docs/faults.md).
//
//   txmq_fault [--seconds N] [--dir DIR] [--seed S] [--keep] [--cluster [--galera-home PATH]]
//              [--shards [--kill-catalog]] [--server NAME]
//
// Starts a private MariaDB server in DIR/server, producers and consumers as separate processes
// (this program again, and `txmq consume`), injects faults for N seconds (SIGKILL of consumers,
// producers and the server, KILL CONNECTION, SIGSTOP past a lease), stops the producers, lets
// the consumers drain the topics, and checks every history (check.cc). Exit 0 when every check
// held; the histories stay in DIR when one did not (or with --keep).
//
// --cluster: a 3-node Galera cluster instead (scripts/galera; a new one in DIR/galera, stopped
// at the end, or the one in PATH, left running), the children given every node in one DSN, and
// node faults instead of server kills (cluster.h).
//
// --shards: three private servers (DIR/server1..3), the topics sharded over them (6 and 3
// partitions), server 1's database the catalog; kill -9 of one non-catalog server at a time
// (also the catalog's with --kill-catalog), restarted 3 to 6 s later, instead of the server
// kills (shards.h).
//
// --server NAME: the one server is scripts/server's NAME (mysql-9.7, mariadb-11.8; see
// docs/servers.md) in DIR/server instead of `txmq local`'s: started, kill -9'd and restarted with
// `scripts/server NAME start|kill --home DIR/server`, root's DSN (on its socket) from `dsn`; its
// output in DIR/server-script.log. The workload, the faults and the checks are the same.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "cluster.h"
#include "db/connection.h"
#include "db/dsn.h"
#include "fault.h"
#include "shards.h"
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
  bool cluster = false;
  std::string galera_home;  // an existing cluster's folder; empty: a new one in DIR/galera
  bool shards = false;
  bool kill_catalog = false;  // shards: server 1 (the catalog's) is killed too
  std::string server;         // scripts/server's NAME; empty: `txmq local`'s MariaDB
};

// The shards mode: servers, and the topics' partitions (the at-least-once topic's 6 placed
// s1 s2 s3 s1 s2 s3).
constexpr int kShardServers = 3;
constexpr int kShardPartitions = 6;
constexpr int kShardExactlyOncePartitions = 3;
// The variable that the DSNs recorded in the catalog name for the password.
constexpr std::string_view kPasswordEnv = "TXMQ_FAULT_PASSWORD";

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

std::string server_script() {
  const char* script = std::getenv("TXMQ_SERVER_SCRIPT");  // another checkout's, if wanted
  return script != nullptr ? script : TXMQ_SOURCE_DIR "/scripts/server";
}

// `scripts/server NAME VERB --home HOME`, its stderr (and its stdout unless `out` takes it)
// appended to `log`. Returns its exit status (128 + the signal that ended it).
int run_server_script(const std::string& name, const std::string& verb, const std::string& home,
                      const std::string& log, std::string* out = nullptr) {
  std::vector<std::string> argv = {server_script(), name, verb, "--home", home};
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  int pipe_fds[2] = {-1, -1};
  if (out != nullptr && pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int in = open("/dev/null", O_RDONLY);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(in, 0);
    dup2(out != nullptr ? pipe_fds[1] : fd, 1);
    dup2(fd, 2);
    execv(raw[0], raw.data());
    _exit(127);
  }
  if (out != nullptr) {
    close(pipe_fds[1]);
    out->clear();
    char buffer[4096];
    for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      out->append(buffer, static_cast<std::size_t>(n));
    }
    close(pipe_fds[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class Orchestrator {
 public:
  explicit Orchestrator(Options options) : options_(std::move(options)), rng_(options_.seed) {}

  int run() {
    fs::create_directories(options_.dir + "/histories");
    fmt::print("txmq_fault: {} s of faults, seed {}, in {}{}\n", options_.seconds, options_.seed,
               options_.dir,
               options_.cluster ? ", on a 3-node Galera cluster"
               : options_.shards
                   ? fmt::format(", on a topic spread over {} servers{}", kShardServers,
                                 options_.kill_catalog ? " (the catalog's killed too)" : "")
               : !options_.server.empty() ? fmt::format(", on {} (scripts/server)", options_.server)
                                          : std::string());
    start_database();
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
      stop_database();
      throw;
    }
    stop_database();
    for (const Child& c : children_) {
      for (int g = 0; g <= c.generation; ++g) {
        const std::string history =
            fmt::format("{}/histories/{}-{}-{}.log", options_.dir, c.role, c.id, g);
        record_.logs.push_back(history);
        if (c.role != "cli") record_.logs.push_back(history + ".out");
      }
    }
    const std::vector<std::string> failures = check(record_);
    const bool ok = failures.empty();
    if (ok) {
      fmt::print("\nPASS: every check held\n");
    } else {
      fmt::print("\nFAIL (see above): {}\n", fmt::join(failures, "; "));
    }
    if (ok && !options_.keep) {
      fs::remove_all(options_.dir);
    } else {
      fmt::print("histories: {}/histories\n", options_.dir);
    }
    return ok ? 0 : 1;
  }

 private:
  // --- the database ------------------------------------------------------------------------

  // One server of our own, or the cluster: root_dsn_ reaches node 1 (users and grants made
  // there replicate), client_dsn_ is what the library is given (every node in cluster mode).
  void start_database() {
    if (options_.shards) {
      shards_ = std::make_unique<ShardServers>(options_.dir, kShardServers);
      const auto started = SteadyClock::now();
      try {
        shards_->start();
      } catch (...) {
        stop_database();
        throw;
      }
      fmt::print("  {} servers ready after {:.1f} s\n", shards_->size(),
                 std::chrono::duration<double>(SteadyClock::now() - started).count());
      root_dsn_ = shards_->root_dsn(1);
      client_dsn_ = root_dsn_;  // the catalog: server 1's database
      record_.shards.enabled = true;
      record_.shards.servers = shards_->size();
      record_.shards.partitions = kShardPartitions;
      return;
    }
    if (!options_.server.empty()) {
      const auto started = SteadyClock::now();
      internal::ServerKind kind;
      script_server_started_ = true;
      try {
        start_script_server();
        std::string dsn;
        if (run_server_script(options_.server, "dsn", script_server_home(), script_server_log(),
                              &dsn) != 0) {
          throw std::runtime_error(fmt::format("scripts/server {} dsn failed; see {}",
                                               options_.server, script_server_log()));
        }
        while (!dsn.empty() && (dsn.back() == '\n' || dsn.back() == ' ')) dsn.pop_back();
        root_dsn_ = dsn;
        client_dsn_ = root_dsn_;
        kind = admin().server();
      } catch (...) {
        stop_database();
        throw;
      }
      fmt::print("  {} in {} ready after {:.1f} s: {}\n", options_.server, script_server_home(),
                 std::chrono::duration<double>(SteadyClock::now() - started).count(),
                 kind.describe());
      return;
    }
    if (!options_.cluster) {
      server_.home = options_.dir + "/server";
      server_.start_timeout_seconds = 120;
      root_dsn_ = LocalServer::ensure_running(server_);
      client_dsn_ = root_dsn_;
      return;
    }
    own_cluster_ = options_.galera_home.empty();
    const std::string home =
        own_cluster_ ? options_.dir + "/galera" : fs::absolute(options_.galera_home).string();
    // mariadbd runs as mysql when we are root: it must be able to walk into DIR.
    if (geteuid() == 0) chmod(options_.dir.c_str(), 0711);
    cluster_ = std::make_unique<GaleraCluster>(home, options_.dir + "/galera.log",
                                               own_cluster_ ? "txmq" : "txmq_fault");
    const auto started = SteadyClock::now();
    try {
      cluster_->start();
    } catch (...) {
      stop_database();
      throw;
    }
    fmt::print("  cluster of {} nodes in {} ready after {:.1f} s\n", cluster_->size(), home,
               std::chrono::duration<double>(SteadyClock::now() - started).count());
    if (!own_cluster_) cluster_->recreate_database();
    root_dsn_ = cluster_->socket_dsn(1);  // reaches node 1 through a partition too
    client_dsn_ = cluster_->multi_dsn("root");
    record_.cluster.enabled = true;
    record_.cluster.nodes = cluster_->size();
  }

  std::string script_server_home() const { return options_.dir + "/server"; }
  std::string script_server_log() const { return options_.dir + "/server-script.log"; }

  // scripts/server NAME start: initializes the home the first time, waits until it answers.
  void start_script_server() {
    if (run_server_script(options_.server, "start", script_server_home(), script_server_log()) !=
        0) {
      throw std::runtime_error(
          fmt::format("scripts/server {} start failed; see {} and {}/mysqld.log", options_.server,
                      script_server_log(), script_server_home()));
    }
  }

  // Our own server, or the cluster we started (never one we were given).
  void stop_database() {
    if (!options_.server.empty()) {
      admin_.reset();
      if (script_server_started_) {
        script_server_started_ = false;
        try {
          run_server_script(options_.server, "stop", script_server_home(), script_server_log());
        } catch (...) {
        }
      }
    } else if (options_.shards) {
      admin_.reset();
      if (shards_ != nullptr) shards_->stop();
    } else if (!options_.cluster) {
      LocalServer::stop(server_);
    } else if (cluster_ != nullptr) {
      admin_.reset();
      if (own_cluster_) cluster_->stop();
    }
  }

  // root's session on the server (node 1 of the cluster), connected again when it went away.
  internal::Connection& admin() {
    if (admin_ == nullptr || admin_->broken() || !admin_->ping()) {
      admin_.reset();
      admin_ = std::make_unique<internal::Connection>(internal::parse_dsn(root_dsn_));
    }
    return *admin_;
  }

  // A node to look at: any that the harness has not stopped (cluster), else the server.
  internal::Connection* some_node() {
    if (options_.shards) return shards_->admin(1 + static_cast<int>(rng_() % shards_->size()));
    if (!options_.cluster) return &admin();
    std::vector<int> nodes;
    for (int node = 1; node <= cluster_->size(); ++node) {
      if (cluster_->reachable(node)) nodes.push_back(node);
    }
    if (nodes.empty()) return nullptr;
    return cluster_->admin(nodes[rng_() % nodes.size()]);
  }

  // The children connect as a user with only the privileges docs/security.md, "Privileges" lists for
  // sending and consuming; the topics, groups and the application's tables are made as root.
  void set_up() {
    if (options_.shards) return set_up_shards();
    internal::Connection& c = admin();
    // The cluster's clients come over TCP from 127.0.0.1, or from the clients' address of the
    // network namespaces (skip-name-resolve); the server's through its socket.
    const std::string account = fmt::format("'{}'@'{}'", kUser,
                                            options_.cluster ? cluster_->client_host() : "localhost");
    const std::string database = options_.cluster ? cluster_->database() : "txmq";
    if (options_.cluster) c.query(fmt::format("DROP USER IF EXISTS {}", account));
    c.query(fmt::format("CREATE USER {} IDENTIFIED BY '{}'", account, kPassword));
    c.query(fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON `{}`.* TO {}", database,
                        account));
    c.query(fmt::format("CREATE TABLE {} (tag VARCHAR(64) PRIMARY KEY)", kOrdersTable));
    c.query(
        fmt::format("CREATE TABLE {} (n BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(64) "
                    "NOT NULL, msg_id BIGINT UNSIGNED NOT NULL, consumer VARCHAR(64) NOT NULL)",
                    kEffectsTable));
    ClientOptions o;
    o.dsn = client_dsn_;
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
    // In shared storage (issue 52): its outbox sends and exactly-once consumers go through the
    // same faults in the tables that topics without their own share.
    root.create_topic(kExactlyOnceTopic, eo, TableCreation::kShared);
    fmt::print("  topic {} in shared storage\n", kExactlyOnceTopic);

    const std::string at = "root@";
    std::string dsn = client_dsn_;
    dsn.replace(dsn.find(at), at.size(), fmt::format("{}:{}@", kUser, kPasswordEscaped));
    setenv("TXMQ_DSN", dsn.c_str(), 1);  // the children's; never on a command line
    if (options_.cluster) {
      check_shard_on_a_galera_node();
      check_after_set_up();
    }
  }

  // A topic sharded onto one node of the cluster: the client checks the Galera settings of that
  // shard's own connection (here: one node of three listed, which it must warn about), not those
  // of its catalog's connection (every node listed, nothing to warn about).
  void check_shard_on_a_galera_node() {
    const std::string shard_database = cluster_->database() + "_shard";
    admin().query(fmt::format("CREATE DATABASE IF NOT EXISTS `{}`", shard_database));
    const std::string shard_dsn = cluster_->dsn(2, "root", shard_database);
    std::vector<std::string> warnings;
    {
      ClientOptions o;
      o.dsn = client_dsn_;
      o.on_warning = [&warnings](std::string_view text) { warnings.emplace_back(text); };
      Client catalog(o);
      catalog.add_server("catalog", client_dsn_);
      catalog.add_server("node2", shard_dsn);
      TopicOptions t;
      t.partitions = 2;
      t.servers = {"catalog", "node2"};
      catalog.create_topic("sharded_on_a_node", t);
      catalog.drop_topic("sharded_on_a_node");
      catalog.remove_server("node2");
      catalog.remove_server("catalog");
    }
    admin().query(fmt::format("DROP DATABASE `{}`", shard_database));
    const bool warned = std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
      return w.find("is one node of a Galera cluster") != std::string::npos;
    });
    fmt::print("  a shard on one node of the cluster: {}\n",
               warned ? "warned about" : "NOT warned about");
    if (!warned) {
      record_.cluster.problems.push_back(
          "a topic sharded onto one Galera node gave no warning: the client did not check the "
          "shard's own connection");
    }
  }

  // The shards mode: on every server the user and the application's tables; the servers
  // recorded in server 1's catalog; the topics sharded over them. The DSNs recorded in the
  // catalog hold no password (they name kPasswordEnv, which the children inherit) and serve
  // every client alike, this set-up's too: the user gets DDL privileges while the library makes
  // the topics' tables on each server, and only SELECT, INSERT, UPDATE, DELETE before any child
  // starts.
  void set_up_shards() {
    setenv(std::string(kPasswordEnv).c_str(), std::string(kPassword).c_str(), 1);
    const std::string account = fmt::format("'{}'@'localhost'", kUser);
    for (int s = 1; s <= shards_->size(); ++s) {
      internal::Connection* c = shards_->admin(s);
      if (c == nullptr) throw std::runtime_error(fmt::format("server {} does not answer", s));
      c->query(fmt::format("CREATE USER {} IDENTIFIED BY '{}'", account, kPassword));
      c->query(fmt::format("GRANT ALL PRIVILEGES ON `txmq`.* TO {}", account));
      c->query(fmt::format("CREATE TABLE {} (tag VARCHAR(64) PRIMARY KEY)", kOrdersTable));
      c->query(fmt::format(
          "CREATE TABLE {} (n BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(64) NOT NULL, "
          "msg_id BIGINT UNSIGNED NOT NULL, consumer VARCHAR(64) NOT NULL)",
          kEffectsTable));
    }
    std::vector<std::string> names;
    {
      ClientOptions o;
      o.dsn = client_dsn_;
      Client root(o);
      for (int s = 1; s <= shards_->size(); ++s) {
        names.push_back(ShardServers::name(s));
        root.add_server(names.back(), shards_->recorded_dsn(s, kUser, kPasswordEnv));
      }
      TopicOptions alo;
      alo.lease = kLease;
      alo.max_attempts = 1000;
      alo.partitions = kShardPartitions;
      alo.archive = std::chrono::hours(24);
      alo.retry.initial = Micros{0};
      alo.servers = names;
      root.create_topic(kTopic, alo);
      root.create_group(kTopic, kWorkerGroup);
      root.create_group(kTopic, kCliGroup);
      TopicOptions eo;
      eo.max_attempts = 1000;
      eo.partitions = kShardExactlyOncePartitions;
      eo.servers = names;
      root.create_topic(kExactlyOnceTopic, eo);
      record_.shards.placement = root.topic(kTopic).placement;
      std::string servers;
      for (const ServerInfo& info : root.list_servers()) {
        servers += fmt::format("{}{} = {}", servers.empty() ? "" : "; ", info.name, info.dsn);
      }
      record_.shards.notes.push_back(fmt::format("servers recorded: {}", servers));
    }
    std::string placement;
    for (const std::string& s : record_.shards.placement) placement += " " + s;
    fmt::print("  topic {} placed:{}\n", kTopic, placement);
    for (int s = 1; s <= shards_->size(); ++s) {
      internal::Connection* c = shards_->admin(s);
      if (c == nullptr) throw std::runtime_error(fmt::format("server {} does not answer", s));
      c->query(fmt::format("REVOKE ALL PRIVILEGES ON `txmq`.* FROM {}", account));
      c->query(fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON `txmq`.* TO {}", account));
    }
    // The children's DSN is the catalog's, as the user with its password (escaped): a client's
    // own DSN may hold one. The outbox transactions go to each server in turn: server 1's
    // through the catalog's client, the others' through clients of their own databases.
    auto as_user = [&](std::string dsn) {
      const std::string at = "root@";
      dsn.replace(dsn.find(at), at.size(), fmt::format("{}:{}@", kUser, kPasswordEscaped));
      return dsn;
    };
    setenv("TXMQ_DSN", as_user(client_dsn_).c_str(), 1);
    std::string outboxes = "catalog";
    for (int s = 2; s <= shards_->size(); ++s) outboxes += " " + as_user(shards_->root_dsn(s));
    setenv("TXMQ_FAULT_OUTBOX_DSNS", outboxes.c_str(), 1);
  }

  // Topics and groups are DDL and DML through one node: every node must have applied them
  // (a node that failed to apply a write set leaves the cluster as Inconsistent). Such a node
  // is a finding; it is restarted so that the run can go on.
  void check_after_set_up() {
    const auto deadline = SteadyClock::now() + 30s;
    while (!cluster_->settled() && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(500ms);
    }
    cluster_->restart_sick_nodes(record_.cluster.problems, "after the set-up (topics, groups)");
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
      if (child.group == "unkeyed") record_.shards.unkeyed_histories.push_back(child.history);
      if (child.role == "consumer") record_.consumer_histories.push_back(child.history);
      if (child.role == "worker") record_.worker_histories.push_back(child.history);
      if (child.role == "exactly-once") {
        record_.exactly_once_histories.push_back(child.history);
      }
    }
    const std::string out = child.role == "cli" ? child.history : child.history + ".out";
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no child outlives an orchestrator killed mid-run
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
    add("producer", 3, options_.shards ? "shards" : "-");
    if (options_.shards) {
      Child unkeyed;
      unkeyed.role = "producer";
      unkeyed.id = 3;
      unkeyed.group = "unkeyed";
      children_.push_back(unkeyed);
    }
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
      // While a server is down, the unkeyed producer measures the failover: it runs on.
      if (c.group == "unkeyed" && shard_faults_ != nullptr && shard_faults_->down()) continue;
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
    if (!options_.server.empty()) {
      // kill -9 by the pid file (it waits until the process is gone), then InnoDB's recovery.
      admin_.reset();
      if (run_server_script(options_.server, "kill", script_server_home(), script_server_log()) !=
          0) {
        throw std::runtime_error(fmt::format("scripts/server {} kill failed; see {}",
                                             options_.server, script_server_log()));
      }
      ++record_.faults.server_kills;
      const auto started = SteadyClock::now();
      start_script_server();
      fmt::print("  server killed and restarted ({:.1f} s)\n",
                 std::chrono::duration<double>(SteadyClock::now() - started).count());
      last_server_kill_ = SteadyClock::now();
      return;
    }
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

  // Half of the children's sessions. KILL CONNECTION reaches only the node it runs on: on the
  // cluster, every node the harness has not stopped is visited.
  void kill_connections() {
    auto kill_on = [&](internal::Connection& c) {
      internal::Result r =
          c.execute("SELECT id FROM information_schema.processlist WHERE user = ?", {kUser});
      for (const internal::Row& row : r.rows) {
        if (rng_() % 2 != 0) continue;
        try {
          // Text protocol: MySQL prepares KILL but takes no parameter in it (error 6413,
          // "Dynamic parameters can only be used in DML statements").
          c.query(fmt::format("KILL CONNECTION {}", row.u64(0)));
          ++record_.faults.connection_kills;
        } catch (const Error& e) {
          // 1094 (unknown thread): it ended by itself meanwhile. 1047: a Galera node cut off
          // from the others refuses KILL too (its clients are leaving it anyway). Anything
          // else is shown.
          if (e.server_errno() == 1047) break;
          if (e.server_errno() != 1094) fmt::print("  KILL CONNECTION failed: {}\n", e.what());
        }
      }
    };
    try {
      if (options_.shards) {
        for (int s = 1; s <= shards_->size(); ++s) {
          internal::Connection* c = shards_->admin(s);
          if (c == nullptr) continue;
          const auto started = SteadyClock::now();
          const int before = record_.faults.connection_kills;
          try {
            kill_on(*c);
          } catch (const Error&) {
            shards_->forget(s);
          }
          const double took =
              std::chrono::duration<double>(SteadyClock::now() - started).count();
          if (took > 1) {
            fmt::print("  KILL CONNECTION on server {}: {} connections in {:.1f} s\n", s,
                       record_.faults.connection_kills - before, took);
          }
        }
      } else if (options_.cluster) {
        for (int node = 1; node <= cluster_->size(); ++node) {
          internal::Connection* c = cluster_->admin(node);
          if (c == nullptr) continue;
          try {
            kill_on(*c);
          } catch (const Error&) {
            cluster_->forget(node);
          }
        }
      } else {
        kill_on(admin());
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
  // whole (its messages commit together; an ack moves a message to the archive in one go). The
  // shards mode looks at every server that runs: a batch commits on one server.
  void observe() {
    if (options_.shards) {
      for (int s = 1; s <= shards_->size(); ++s) {
        internal::Connection* c = shards_->admin(s);
        if (c == nullptr) continue;
        if (!observe_on(*c, kShardPartitions)) shards_->forget(s);
      }
      return;
    }
    internal::Connection* node = some_node();
    if (node == nullptr) return;
    if (observe_on(*node, 2)) return;
    // The server (or node) is away; the next snapshot will tell.
    if (options_.cluster) {
      for (int n = 1; n <= cluster_->size(); ++n) {
        if (cluster_->admin(n) == node) cluster_->forget(n);
      }
    } else {
      admin_.reset();
    }
  }

  // False when the session failed.
  bool observe_on(internal::Connection& c, int partitions) {
    try {
      std::string tables;
      for (int p = 0; p < partitions; ++p) {
        const std::string suffix = p == 0 ? "" : fmt::format("$0_{}", p);
        // Keyed messages wait behind their key in the parked table (kp).
        for (std::string_view kind : {"q", "dlq", "kp"}) {
          tables += fmt::format("SELECT id, payload FROM `txmq_{}_{}{}` UNION ALL ", kind, kTopic,
                                suffix);
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
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  void inject_faults() {
    const auto end = SteadyClock::now() + std::chrono::seconds(options_.seconds);
    auto next_fault = SteadyClock::now() + 2s;
    auto next_look = SteadyClock::now() + 1s;
    last_server_kill_ = SteadyClock::now() - 5s;  // the first may come after 3 s
    std::uniform_int_distribution<int> gap_ms(500, 2500);
    std::optional<NodeFaults> node_faults;
    if (options_.cluster) {
      record_.cluster.faults_started_us = now_us();
      node_faults.emplace(*cluster_, record_.cluster, rng_(), options_.seconds > 300);
      node_faults->sample();
    }
    if (options_.shards) {
      record_.shards.faults_started_us = now_us();
      shard_faults_ = std::make_unique<ShardFaults>(*shards_, record_.shards, rng_(),
                                                    options_.seconds > 300, options_.kill_catalog);
    }
    while (SteadyClock::now() < end) {
      reap_unbidden();
      resume_due();
      if (shard_faults_) {
        // No kill in the last 15 s: each outage ends (3 to 9 s, and the restart) within the run.
        shard_faults_->step(end - SteadyClock::now() > 15s);
      }
      if (node_faults) {
        // No node fault in the last 40 s: each one's outage and recovery must be seen whole.
        node_faults->step(end - SteadyClock::now() > 40s);
      }
      if (SteadyClock::now() >= next_look) {
        observe();
        if (node_faults) node_faults->sample();
        next_look = SteadyClock::now() + 2s;
      }
      if (SteadyClock::now() >= next_fault) {
        // On the cluster and the shards the node and server faults replace the server kills
        // (the first 30 of 100).
        const unsigned dice =
            options_.cluster || options_.shards ? 30 + rng_() % 70 : rng_() % 100;
        if (dice < 30 && SteadyClock::now() - last_server_kill_ > 8s) {
          kill_server();
        } else if (dice < 50) {
          // Not while a shard server is down either: a consumer restarted then may find the
          // catalog's server down, and `txmq consume` exits 2 at start when it cannot connect
          // (as documented), which would count as an unbidden exit.
          if (shard_faults_ == nullptr || !shard_faults_->down()) kill_consumer();
        } else if (dice < 65) {
          kill_producer();
        } else if (dice < 82) {
          // Not while a shard server is down: a round takes seconds on a loaded machine (up to
          // 6 s for 22 connections), and new connections to its server wait meanwhile; the gap
          // that leaves would be counted against the failover of unkeyed sends.
          if (shard_faults_ == nullptr || !shard_faults_->down()) kill_connections();
        } else {
          pause_consumer();
        }
        next_fault = SteadyClock::now() + std::chrono::milliseconds(gap_ms(rng_));
      }
      std::this_thread::sleep_for(50ms);
    }
    resume_due(true);
    if (node_faults) {
      node_faults->finish(180s);
      node_faults->sample();
    }
    if (shard_faults_) shard_faults_->finish();
  }

  // --- the end -----------------------------------------------------------------------------

  void stop_children(std::string_view role, std::chrono::seconds patience) {
    for (Child& c : children_) {
      if (c.role == role) kill(c.pid, SIGTERM);
    }
    const auto deadline = SteadyClock::now() + patience;
    auto next_look = SteadyClock::now() + 2s;
    for (Child& c : children_) {
      if (c.role != role) continue;
      int status = 0;
      while (waitpid(c.pid, &status, WNOHANG) != c.pid) {
        if (cluster_ && SteadyClock::now() >= next_look) {
          // A child that takes long to stop is often waiting on the database: what on.
          cluster_->record_long_waits(now_us());
          next_look = SteadyClock::now() + 2s;
        }
        if (SteadyClock::now() > deadline) {
          // Where it hangs, for whoever reads the run: every thread's stack (gdb, if installed).
          const std::string stacks = c.history + ".stacks";
          const std::string dump = fmt::format(
              "gdb -batch -p {} -ex 'thread apply all bt' >'{}' 2>&1 </dev/null", c.pid, stacks);
          const bool dumped = std::system(dump.c_str()) == 0;
          record_.faults.unbidden_exits.push_back(
              fmt::format("{} {} did not stop within {} s of SIGTERM{}", c.role, c.id,
                          patience.count(), dumped ? fmt::format(" (stacks: {})", stacks) : ""));
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
    record_.shards.producers_stopped_us = now_us();
    stop_children("producer", 120s);
    record_.cluster.producers_stopped_us = now_us();
    ClientOptions o;
    o.dsn = client_dsn_;
    Client client(o);
    // 180 s, extended while the backlog shrinks (a soak on the cluster leaves the shell-exec
    // consumer tens of thousands behind), up to 15 minutes: a consumer that stopped making
    // progress still fails the run.
    const auto started = SteadyClock::now();
    auto deadline = started + 180s;
    std::optional<std::uint64_t> least;
    while (SteadyClock::now() < deadline) {
      reap_unbidden();
      try {
        const std::uint64_t left = pending(client);
        if (left == 0) {
          record_.faults.drained = true;
          break;
        }
        if (least && left < *least) {
          deadline = std::max(deadline, std::min(SteadyClock::now() + 60s, started + 900s));
        }
        if (!least || left < *least) least = left;
      } catch (const Error& e) {
        // Not the subject of a check, but shown: the library failed the harness here.
        fmt::print("  stats failed while draining: {}\n", e.what());
      }
      if (cluster_) cluster_->record_long_waits(now_us());
      std::this_thread::sleep_for(500ms);
    }
    for (std::string_view role : {"consumer", "worker", "cli", "exactly-once"}) {
      stop_children(role, 60s);
    }
  }

  void collect() {
    if (options_.shards) return collect_shards();
    if (options_.cluster) compare_nodes();
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

  // The effects and orders tables of every server; what each server holds. An order's messages
  // are sent in its transaction to partitions of its server and processed there, so each effect
  // lies on the server of its order.
  void collect_shards() {
    std::map<std::string, int> order_server;
    std::vector<std::pair<std::string, int>> effects_at;
    for (int s = 1; s <= shards_->size(); ++s) {
      internal::Connection* c = shards_->admin(s);
      if (c == nullptr) throw std::runtime_error(fmt::format("server {} does not answer", s));
      const std::size_t effects = record_.effects.size(), orders = record_.orders.size();
      for (const internal::Row& row :
           c->execute(fmt::format("SELECT tag FROM {}", kEffectsTable)).rows) {
        record_.effects.push_back(row.bytes(0));
        effects_at.emplace_back(row.bytes(0), s);
      }
      for (const internal::Row& row :
           c->execute(fmt::format("SELECT tag FROM {}", kOrdersTable)).rows) {
        record_.orders.push_back(row.bytes(0));
        order_server[row.bytes(0)] = s;
      }
      const internal::Result archived =
          c->execute(fmt::format("SELECT COUNT(*) FROM `txmq_a_{}`", kTopic));
      record_.shards.per_server.push_back(fmt::format(
          "{}: {} messages in the archive, {} exactly-once effects, {} orders",
          ShardServers::name(s), archived.rows.at(0).u64(0), record_.effects.size() - effects,
          record_.orders.size() - orders));
    }
    for (const auto& [payload, s] : effects_at) {
      auto it = order_server.find(payload.substr(0, payload.rfind('.')));
      if (it != order_server.end() && it->second != s) ++record_.shards.effects_elsewhere;
    }
  }

  // Every node must hold the same tables once nothing is left to apply.
  void compare_nodes() {
    const auto deadline = SteadyClock::now() + 120s;
    while (!cluster_->settled()) {
      if (SteadyClock::now() > deadline) {
        record_.cluster.problems.push_back("the nodes did not settle within 120 s of the drain");
        return;
      }
      std::this_thread::sleep_for(500ms);
    }
    record_.cluster.tables_checked = true;
    record_.cluster.tables_compared = cluster_->compare_tables(record_.cluster.table_mismatches);
  }

  Options options_;
  std::mt19937_64 rng_;
  LocalServerOptions server_;
  bool script_server_started_ = false;  // --server: scripts/server was asked to start it
  std::unique_ptr<GaleraCluster> cluster_;
  std::unique_ptr<ShardServers> shards_;
  std::unique_ptr<ShardFaults> shard_faults_;
  bool own_cluster_ = false;
  std::string root_dsn_, client_dsn_;
  std::unique_ptr<internal::Connection> admin_;
  std::vector<Child> children_;
  RunRecord record_;
  SteadyClock::time_point last_server_kill_;
};

int usage() {
  fmt::print(stderr,
             "usage: txmq_fault [--seconds N] [--dir DIR] [--seed S] [--keep] [--cluster "
             "[--galera-home PATH] | --shards [--kill-catalog] | --server NAME]\n"
             "  --server NAME: scripts/server's mysql-9.7 or mariadb-11.8 as the one server\n");
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
    } else if (args[i] == "--cluster") {
      options.cluster = true;
    } else if (args[i] == "--shards") {
      options.shards = true;
    } else if (args[i] == "--kill-catalog") {
      options.kill_catalog = true;
    } else if (args[i] == "--galera-home" && has_value) {
      options.galera_home = args[++i];
    } else if (args[i] == "--server" && has_value) {
      options.server = args[++i];
      if (options.server.empty()) return usage();
    } else {
      return usage();
    }
  }
  if (!options.galera_home.empty() && !options.cluster) return usage();
  if ((options.shards && options.cluster) || (options.kill_catalog && !options.shards) ||
      (!options.server.empty() && (options.shards || options.cluster))) {
    return usage();
  }
  if (options.dir.empty()) {
    char tmpl[] = "/tmp/txmq-fault-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return usage();
    options.dir = tmpl;
  }
  signal(SIGPIPE, SIG_IGN);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines show up in CI logs as they come
  try {
    return Orchestrator(options).run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "txmq_fault: {}\n", e.what());
    return 2;
  }
}
