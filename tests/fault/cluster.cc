// The fault suite's cluster mode: scripts/galera's cluster, node faults and node status
// (cluster.h).
#include "cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <stdexcept>
#include <thread>

#include "db/dsn.h"
#include "txmq/error.h"

namespace txmq::fault {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

std::string galera_script() {
  const char* script = std::getenv("TXMQ_GALERA_SCRIPT");  // another checkout's, if wanted
  return script != nullptr ? script : TXMQ_SOURCE_DIR "/scripts/galera";
}

double seconds_between(std::int64_t from_us, std::int64_t to_us) {
  return static_cast<double>(to_us - from_us) / 1e6;
}

}  // namespace

GaleraCluster::GaleraCluster(std::string home, std::string log, std::string database)
    : home_(std::move(home)), log_(std::move(log)), database_(std::move(database)) {}

void GaleraCluster::start() {
  if (script({"start"}) != 0) {
    throw std::runtime_error(fmt::format("scripts/galera start failed; see {}", log_));
  }
  // cluster.env: N=3, CLIENT_PORT_1=..., and in namespace mode NETNS=1 and NET=198.18.K (node
  // i at NET.i, the clients at NET.254); written when the cluster was created.
  std::ifstream env(home_ + "/cluster.env");
  std::map<int, unsigned> ports;
  std::string net;
  partitions_ = false;
  for (std::string line; std::getline(env, line);) {
    const std::string prefix = "CLIENT_PORT_";
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    if (line == "NETNS=1") partitions_ = true;
    if (line.rfind("NET=", 0) == 0) net = line.substr(eq + 1);
    if (line.rfind(prefix, 0) != 0) continue;
    ports[std::stoi(line.substr(prefix.size(), eq - prefix.size()))] =
        static_cast<unsigned>(std::stoul(line.substr(eq + 1)));
  }
  if (ports.size() < 3) {
    throw std::runtime_error(fmt::format("{}/cluster.env: fewer than 3 nodes", home_));
  }
  if (partitions_ && net.empty()) {
    throw std::runtime_error(fmt::format("{}/cluster.env: NETNS=1 without NET=", home_));
  }
  ports_.clear();
  hosts_.clear();
  for (const auto& [node, port] : ports) {
    ports_.push_back(port);
    hosts_.push_back(partitions_ ? fmt::format("{}.{}", net, node) : "127.0.0.1");
  }
  client_host_ = partitions_ ? net + ".254" : "127.0.0.1";
  reachable_.assign(ports_.size(), true);
  admins_.clear();
  admins_.resize(ports_.size());
}

void GaleraCluster::stop() noexcept {
  admins_.clear();
  admins_.resize(ports_.size());
  script({"stop"});
}

std::string GaleraCluster::dsn(int node, std::string_view userinfo,
                               std::string_view database) const {
  return fmt::format("mysql://{}@{}:{}/{}?connect_timeout=3", userinfo, hosts_.at(node - 1),
                     ports_.at(node - 1), database.empty() ? database_ : database);
}

std::string GaleraCluster::multi_dsn(std::string_view userinfo) const {
  std::string hosts;
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    hosts += fmt::format("{}{}:{}", hosts.empty() ? "" : ",", hosts_[i], ports_[i]);
  }
  return fmt::format("mysql://{}@{}/{}", userinfo, hosts, database_);
}

std::string GaleraCluster::socket_dsn(int node, std::string_view database) const {
  return fmt::format("mysql://root@localhost/{}?socket={}/node{}/mysqld.sock&connect_timeout=3",
                     database.empty() ? database_ : database, home_, node);
}

void GaleraCluster::cut(int a, int b) { script({"cut", std::to_string(a), std::to_string(b)}); }

void GaleraCluster::isolate(int node) { script({"isolate", std::to_string(node)}); }

void GaleraCluster::heal() { script({"heal"}); }

namespace {

pid_t spawn_script(const std::string& home, const std::string& log,
                   const std::vector<std::string>& args) {
  std::vector<std::string> argv = {galera_script()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setenv("TXMQ_GALERA_HOME", home.c_str(), 1);
    // A cluster this harness creates runs in network namespaces when it may (root), so that
    // partitions can be among its faults.
    setenv("TXMQ_GALERA_NETNS", "auto", 0);
    int in = open("/dev/null", O_RDONLY);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    execv(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

int GaleraCluster::script(const std::vector<std::string>& args) {
  int status = 0;
  pid_t pid = -1;
  try {
    pid = spawn_script(home_, log_, args);
  } catch (const std::exception&) {
    return -1;
  }
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

pid_t GaleraCluster::script_async(const std::vector<std::string>& args) {
  return spawn_script(home_, log_, args);
}

void GaleraCluster::set_reachable(int node, bool reachable) {
  reachable_.at(node - 1) = reachable;
  if (!reachable) forget(node);
}

void GaleraCluster::forget(int node) { admins_.at(node - 1).reset(); }

internal::Connection* GaleraCluster::admin(int node) {
  if (!reachable(node)) return nullptr;
  std::unique_ptr<internal::Connection>& c = admins_.at(node - 1);
  if (c != nullptr && c->broken()) c.reset();
  if (c == nullptr) {
    try {
      c = std::make_unique<internal::Connection>(internal::parse_dsn(socket_dsn(node)));
    } catch (const Error&) {
      return nullptr;
    }
  }
  return c.get();
}

std::optional<NodeStatus> GaleraCluster::status(int node) {
  internal::Connection* c = admin(node);
  if (c == nullptr) return std::nullopt;
  try {
    internal::Result r = c->execute(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state_comment', "
        "'wsrep_cluster_status', 'wsrep_gcomm_uuid', 'wsrep_cluster_size', "
        "'wsrep_local_recv_queue', 'wsrep_last_committed', 'wsrep_local_cert_failures', "
        "'wsrep_local_bf_aborts', 'wsrep_local_commits')");
    NodeStatus s;
    for (const internal::Row& row : r.rows) {
      const std::string& name = row.bytes(0);
      const std::string& value = row.bytes(1);
      auto number = [&] { return value.empty() ? 0 : std::stoull(value); };
      if (name == "wsrep_local_state_comment") s.state = value;
      if (name == "wsrep_cluster_status") s.cluster_status = value;
      if (name == "wsrep_gcomm_uuid") s.gcomm_uuid = value;
      if (name == "wsrep_cluster_size") s.cluster_size = number();
      if (name == "wsrep_local_recv_queue") s.recv_queue = number();
      if (name == "wsrep_last_committed") s.last_committed = number();
      if (name == "wsrep_local_cert_failures") s.cert_failures = number();
      if (name == "wsrep_local_bf_aborts") s.bf_aborts = number();
      if (name == "wsrep_local_commits") s.local_commits = number();
    }
    return s;
  } catch (const std::exception&) {
    forget(node);
    return std::nullopt;
  }
}

std::vector<std::string> GaleraCluster::long_waits(int node, int seconds) {
  std::vector<std::string> lines;
  internal::Connection* c = admin(node);
  if (c == nullptr) return lines;
  try {
    // Flow control: while a node cannot keep up, every node's commits wait.
    internal::Result fc = c->execute(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_flow_control_paused_ns', "
        "'wsrep_local_recv_queue', 'wsrep_local_send_queue', 'wsrep_local_state_comment')");
    std::uint64_t paused_ns = 0;
    std::string queues;
    for (const internal::Row& row : fc.rows) {
      if (row.bytes(0) == "wsrep_flow_control_paused_ns") {
        paused_ns = row.bytes(1).empty() ? 0 : std::stoull(row.bytes(1));
      } else {
        queues += fmt::format(" {} {}", row.bytes(0), row.bytes(1));
      }
    }
    fc_paused_ns_.resize(ports_.size() + 1, 0);
    std::uint64_t& last = fc_paused_ns_.at(static_cast<std::size_t>(node));
    if (paused_ns > last + 500'000'000ULL && last != 0) {
      lines.push_back(fmt::format("node {} flow control paused {:.1f} s since the last look;{}",
                                  node, static_cast<double>(paused_ns - last) / 1e9, queues));
    }
    last = paused_ns;
    internal::Result trx = c->execute(
        // Every column as text: the rows are read with bytes().
        "SELECT CONCAT(t.trx_mysql_thread_id), CONCAT(TIMESTAMPDIFF(SECOND, t.trx_started, NOW())), "
        "t.trx_state, CONCAT(t.trx_rows_locked), CONCAT(t.trx_tables_locked), "
        "IFNULL(p.COMMAND, ''), CONCAT(IFNULL(p.TIME, 0)), "
        "IFNULL(p.STATE, ''), IFNULL(LEFT(p.INFO, 300), ''), IFNULL(p.HOST, ''), "
        "IFNULL((SELECT GROUP_CONCAT(b.trx_mysql_thread_id) FROM "
        "information_schema.INNODB_LOCK_WAITS w JOIN information_schema.INNODB_TRX b ON "
        "b.trx_id = w.blocking_trx_id WHERE w.requesting_trx_id = t.trx_id), '') "
        "FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON "
        "p.ID = t.trx_mysql_thread_id WHERE t.trx_started < NOW() - INTERVAL ? SECOND",
        {internal::Param(static_cast<std::int64_t>(seconds))});
    for (const internal::Row& row : trx.rows) {
      lines.push_back(fmt::format(
          "node {} trx thread {} open {} s {} rows_locked {} tables {} | {} {} s {} | {} | {}{}",
          node, row.bytes(0), row.bytes(1), row.bytes(2), row.bytes(3), row.bytes(4),
          row.bytes(5), row.bytes(6), row.bytes(7), row.bytes(9), row.bytes(8),
          row.bytes(10).empty() ? "" : " | blocked by thread " + row.bytes(10)));
    }
    internal::Result waits = c->execute(
        "SELECT CONCAT(ID), COMMAND, CONCAT(TIME), IFNULL(STATE, ''), IFNULL(LEFT(INFO, 300), ''), "
        "HOST FROM "
        "information_schema.PROCESSLIST WHERE TIME >= ? AND COMMAND NOT IN ('Sleep', 'Daemon') "
        "AND USER <> 'system user' AND ID <> CONNECTION_ID()",
        {internal::Param(static_cast<std::int64_t>(seconds))});
    for (const internal::Row& row : waits.rows) {
      lines.push_back(fmt::format("node {} thread {} {} {} s {} | {} | {}", node, row.bytes(0),
                                  row.bytes(1), row.bytes(2), row.bytes(3), row.bytes(5),
                                  row.bytes(4)));
    }
  } catch (const std::exception&) {
    forget(node);
  }
  return lines;
}

void GaleraCluster::record_long_waits(std::int64_t at_us) {
  std::vector<std::string> lines;
  for (int node = 1; node <= size(); ++node) {
    for (std::string& line : long_waits(node, 10)) lines.push_back(std::move(line));
  }
  if (lines.empty()) return;
  std::ofstream out(home_ + "/long-waits.log", std::ios::app);
  for (const std::string& line : lines) out << at_us << ' ' << line << '\n';
}

bool GaleraCluster::healthy() {
  for (int node = 1; node <= size(); ++node) {
    std::optional<NodeStatus> s = status(node);
    if (!s || !s->synced() || s->cluster_size != ports_.size()) return false;
  }
  return true;
}

bool GaleraCluster::settled() {
  std::optional<std::uint64_t> seqno;
  for (int node = 1; node <= size(); ++node) {
    std::optional<NodeStatus> s = status(node);
    if (!s || !s->synced() || s->cluster_size != ports_.size() || s->recv_queue != 0) {
      return false;
    }
    if (seqno && *seqno != s->last_committed) return false;
    seqno = s->last_committed;
  }
  return true;
}

int GaleraCluster::writer(std::string* uuid) {
  if (uuid != nullptr) uuid->clear();
  for (int node = 1; node <= size(); ++node) {
    internal::Connection* c = admin(node);
    if (c == nullptr) continue;
    std::string row_uuid;
    try {
      internal::Result r =
          c->execute("SELECT node_uuid FROM txmq_cluster_writer WHERE singleton = 1");
      if (r.rows.empty()) return 0;
      row_uuid = r.rows[0].bytes(0);
    } catch (const Error& e) {
      if (e.server_errno() == 1146) return 1;  // no such table: the library picks no writer
      forget(node);
      continue;
    }
    if (uuid != nullptr) *uuid = row_uuid;
    for (int other = 1; other <= size(); ++other) {
      std::optional<NodeStatus> s = status(other);
      if (s && s->gcomm_uuid == row_uuid) return other;
    }
    return 0;
  }
  return 0;
}

std::chrono::seconds GaleraCluster::suspect_timeout() {
  internal::Connection* c = admin(1);
  if (c != nullptr) {
    try {
      internal::Result r = c->execute("SELECT @@wsrep_provider_options");
      std::smatch m;
      const std::string options = r.rows.at(0).bytes(0);
      if (std::regex_search(options, m, std::regex(R"(evs\.suspect_timeout = PT(\d+)S)"))) {
        return std::chrono::seconds(std::stoi(m[1]));
      }
    } catch (const std::exception&) {
    }
  }
  return 5s;  // Galera's default
}

std::string GaleraCluster::log_path(int node) const {
  return fmt::format("{}/node{}/error.log", home_, node);
}

void GaleraCluster::print_log_tail(int node, std::size_t lines) const {
  std::ifstream log(log_path(node));
  std::deque<std::string> tail;
  for (std::string line; std::getline(log, line);) {
    tail.push_back(std::move(line));
    if (tail.size() > lines) tail.pop_front();
  }
  fmt::print("  the last {} lines of node {}'s error.log:\n", tail.size(), node);
  for (const std::string& line : tail) fmt::print("    {}\n", line);
}

std::uintmax_t GaleraCluster::log_size(int node) const {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(log_path(node), error);
  return error ? 0 : size;
}

std::string GaleraCluster::first_log_line(int node, std::uintmax_t from,
                                          std::string_view text) const {
  std::ifstream log(log_path(node));
  if (!log || !log.seekg(static_cast<std::streamoff>(from))) return "";
  for (std::string line; std::getline(log, line);) {
    if (line.find(text) != std::string::npos) return line;
  }
  return "";
}

std::string GaleraCluster::first_error(int node) const {
  return first_log_line(node, 0, "[ERROR]");
}

int GaleraCluster::restart_sick_nodes(std::vector<std::string>& problems, std::string_view when) {
  int restarted = 0;
  for (int node = 1; node <= size(); ++node) {
    std::optional<NodeStatus> s = status(node);
    if (s && s->synced() && s->cluster_size == ports_.size()) continue;
    const std::string state =
        s ? fmt::format("{} {} of {}", s->state, s->cluster_status, s->cluster_size)
          : std::string("no answer");
    problems.push_back(fmt::format("node {} {} {}; its error.log: {}", node, state, when,
                                   first_error(node)));
    fmt::print("  node {} is {} {}: restarting it\n", node, state, when);
    forget(node);
    if (script({"restart", std::to_string(node)}) != 0) {
      problems.push_back(fmt::format("scripts/galera restart {} failed", node));
    }
    ++restarted;
  }
  return restarted;
}

void GaleraCluster::recreate_database() {
  // From a session on another database: the run's may not exist yet.
  internal::Connection c(internal::parse_dsn(socket_dsn(1, "mysql")));
  c.query(fmt::format("DROP DATABASE IF EXISTS `{}`", database_));
  c.query(fmt::format("CREATE DATABASE `{}`", database_));
  forget(1);
}

std::size_t GaleraCluster::compare_tables(std::vector<std::string>& mismatches) {
  internal::Connection* first = admin(1);
  if (first == nullptr) {
    mismatches.push_back("node 1 does not answer");
    return 0;
  }
  std::vector<std::string> tables;
  for (const internal::Row& row :
       first
           ->execute(
               "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND "
               "engine = 'InnoDB' ORDER BY table_name",
               {database_})
           .rows) {
    tables.push_back(row.bytes(0));
  }
  for (const std::string& table : tables) {
    std::vector<std::string> sums;
    for (int node = 1; node <= size(); ++node) {
      internal::Connection* c = admin(node);
      std::string sum = "no answer";
      if (c != nullptr) {
        try {
          internal::Result r = c->execute(fmt::format("CHECKSUM TABLE `{}`", table));
          sum = r.rows.empty() ? "none" : r.rows[0].bytes(1);
          if (r.rows.empty() || r.rows[0].null(1)) sum = "missing";
        } catch (const Error& e) {
          sum = e.what();
        }
      }
      sums.push_back(sum);
    }
    if (std::adjacent_find(sums.begin(), sums.end(), std::not_equal_to<>()) != sums.end()) {
      std::string text = table + ":";
      for (int node = 1; node <= size(); ++node) {
        text += fmt::format(" node {} {}", node, sums[node - 1]);
      }
      mismatches.push_back(text);
    }
  }
  return tables.size();
}

// --- node faults -------------------------------------------------------------------------------

NodeFaults::NodeFaults(GaleraCluster& cluster, ClusterRecord& record, std::uint64_t seed,
                       bool soak)
    : cluster_(cluster),
      record_(record),
      rng_(seed),
      soak_(soak),
      suspect_(cluster.suspect_timeout()),
      next_at_(SteadyClock::now() + 8s),
      last_(cluster.size() + 1) {
  // The short run's order: one of each kind, the writer's faults among the first.
  if (cluster_.partitions()) {
    first_kinds_ = {"kill writer", "cut writer", "pause", "isolate", "freeze writer", "bridge",
                    "flap"};
    kinds_ = {"kill writer", "kill",   "pause",  "restart", "freeze writer",
              "cut writer",  "isolate", "bridge", "flap"};
  } else {
    first_kinds_ = {"kill writer", "kill", "pause", "restart", "freeze writer"};
    kinds_ = first_kinds_;
  }
}

void NodeFaults::step(bool may_start) {
  const auto now = SteadyClock::now();
  switch (phase_) {
    case Phase::kIdle:
      if (!may_start || now < next_at_ || now - last_health_check_ < 1s) return;
      last_health_check_ = now;
      if (cluster_.healthy()) {
        begin_fault();
        unhealthy_since_.reset();
      } else if (!unhealthy_since_) {
        unhealthy_since_ = now;
      } else if (now - *unhealthy_since_ > 60s) {
        repair("before a node fault");
        unhealthy_since_.reset();
      }
      return;
    case Phase::kDown:  // killed: restarted a few seconds later
    case Phase::kPaused:
    case Phase::kCut:
      if (now >= until_) restore();
      return;
    case Phase::kFlapping:
      if (now >= until_) {
        restore();
      } else if (now >= flap_toggle_at_) {
        flap();
      }
      return;
    case Phase::kRestoring: {
      int status = 0;
      if (waitpid(helper_, &status, WNOHANG) != helper_) return;
      helper_ = -1;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        // MariaDB itself crashing as the node rejoins (seen once: an InnoDB assertion in the
        // purge of undo logs, trx0purge.cc, right after the IST that followed a kill -9, at
        // every start) is the server's failure, not the clients'. An operator gives such a
        // node a full state transfer; so does the harness, once per fault, and says so.
        const std::uintmax_t mark = node_ < static_cast<int>(log_marks_.size()) ? log_marks_[node_] : 0;
        const std::string crash = cluster_.first_log_line(node_, mark, "got signal");
        if (!crash.empty() && !resynced_) {
          const std::string assertion = cluster_.first_log_line(node_, mark, "Failing assertion");
          record_.notes.push_back(fmt::format(
              "MariaDB crashed as node {} rejoined ({}); the node was given a full state "
              "transfer (scripts/galera restart {} --sst)",
              node_, assertion.empty() ? crash : assertion, node_));
          fmt::print("  node {}: mariadbd crashed while rejoining: restarting it with a full SST\n",
                     node_);
          cluster_.print_log_tail(node_, 12);
          resynced_ = true;
          helper_ = cluster_.script_async({"restart", std::to_string(node_), "--sst"});
          return;
        }
        record_.problems.push_back(fmt::format(
            "scripts/galera restart {} failed (status {}); see galera.log", node_, status));
      }
      cluster_.set_reachable(node_, true);
      phase_ = Phase::kRejoining;
      until_ = now + 120s;
      return;
    }
    case Phase::kRejoining: {
      if (now - last_health_check_ < 500ms) return;
      last_health_check_ = now;
      // The fault in progress; none when a repair came before any fault.
      NodeFault* f = record_.node_faults.empty() ? nullptr : &record_.node_faults.back();
      if (f != nullptr && f->synced_us != 0) f = nullptr;
      const bool healthy = cluster_.healthy();
      if (const int node = healthy ? 0 : gave_up(); node != 0) {
        // Galera's own words that the node needs a restart (a paused node that could not
        // rejoin: "failed to form singleton view ... giving up"). It stays up, disconnected,
        // until restarted: restarted now, as an operator would (docs/faults.md).
        record_.notes.push_back(fmt::format(
            "node {}'s group communication gave up after the {} of node {} and it was restarted "
            "(Galera: \"backend must be restarted\")",
            node, f != nullptr ? f->kind : std::string("restart"), f != nullptr ? f->node : node));
        fmt::print("  node {}: Galera gave up on it (\"backend must be restarted\"): restarting it\n",
                   node);
        cluster_.print_log_tail(node, 12);
        node_ = node;
        restart_async(node);
        return;
      }
      if (healthy) {
        if (f != nullptr) {
          f->synced_us = now_us();
          fmt::print("  node {}: all nodes Synced again {:.1f} s after the {}\n", f->node,
                     seconds_between(f->at_us, f->synced_us), f->kind);
        }
        phase_ = Phase::kIdle;
        resynced_ = false;
        // Spacing: the short run needs one of each kind in about 3 minutes; the soak lets the
        // clients run undisturbed by node faults for a while between them.
        next_at_ = now + (soak_ ? std::chrono::seconds(10 + rng_() % 30) : 3s);
      } else if (now >= until_) {
        repair(f != nullptr ? fmt::format("120 s after the {} of node {}", f->kind, f->node)
                            : std::string("120 s after a restart"));
      }
      return;
    }
  }
}

// A node that stays out of the cluster (not Synced, not answering) is a finding; it is written
// down with its state, and restarted so that the run can go on.
void NodeFaults::repair(const std::string& when) {
  int sick = 0;
  int sick_rank = 0;
  std::string states;
  for (int node = 1; node <= cluster_.size(); ++node) {
    std::optional<NodeStatus> s = cluster_.reachable(node) ? cluster_.status(node) : std::nullopt;
    const std::string state =
        s ? fmt::format("{} {} of {}", s->state, s->cluster_status, s->cluster_size)
          : std::string("no answer");
    states += fmt::format("{}node {} {}", states.empty() ? "" : ", ", node, state);
    // The node out of the cluster first: one that does not answer or is not Synced, before one
    // that is Synced in a smaller Primary component (it is whole but for the other).
    const int rank = !s ? 3 : !s->synced() ? 2
                       : s->cluster_size != std::uint64_t(cluster_.size()) ? 1 : 0;
    if (rank > sick_rank) {
      sick = node;
      sick_rank = rank;
    }
  }
  if (sick == 0) sick = node_;
  const std::string error = cluster_.first_error(sick);
  record_.problems.push_back(
      fmt::format("the cluster was not whole and Synced {} ({}): node {} restarted; its "
                  "error.log's first error: {}",
                  when, states, sick, error.empty() ? "none" : error));
  fmt::print("  the cluster is not Synced {} ({}): restarting node {}\n", when, states, sick);
  cluster_.print_log_tail(sick, 40);
  node_ = sick;
  restart_async(sick);
}

void NodeFaults::restart_async(int node) {
  cluster_.set_reachable(node, false);
  helper_ = cluster_.script_async({"restart", std::to_string(node)});
  phase_ = Phase::kRestoring;
}

// The first faults are one of each kind, so that the short run sees them all; then any.
void NodeFaults::begin_fault() {
  const std::string_view kind = static_cast<std::size_t>(started_) < first_kinds_.size()
                                    ? first_kinds_[started_]
                                    : kinds_[rng_() % kinds_.size()];
  std::string writer_uuid;
  int writer = cluster_.writer(&writer_uuid);
  if (writer == 1 && writer_uuid.empty() && !writer_row_missing_noted_) {
    record_.notes.push_back(
        "no txmq_cluster_writer table (the library picks no writer): node 1 taken as the writer");
    writer_row_missing_noted_ = true;
  }
  if (writer == 0) {
    record_.notes.push_back(fmt::format(
        "the writer row names no node that answers ({}): node 1 taken as the writer",
        writer_uuid.empty() ? "no row" : writer_uuid));
    writer = 1;
  }
  const int n = cluster_.size();
  if (kind == "cut writer" || kind == "isolate" || kind == "bridge" || kind == "flap") {
    return begin_partition(kind, writer);
  }
  if (kind == "kill writer" || kind == "freeze writer") {
    node_ = writer;
  } else if (kind == "kill") {
    node_ = 1 + static_cast<int>((writer + rng_() % (n - 1)) % n);  // any other node
  } else {
    node_ = 1 + static_cast<int>(rng_() % n);
  }
  ++started_;
  NodeFault f;
  f.kind = kind == "kill writer" ? "kill" : kind == "freeze writer" ? "freeze" : std::string(kind);
  f.node = node_;
  f.writer = node_ == writer;
  f.at_us = now_us();
  if (f.writer) record_.writer_changes_us.push_back(f.at_us);
  const auto now = SteadyClock::now();
  cluster_.set_reachable(node_, false);
  if (f.kind == "kill") {
    cluster_.script({"kill", std::to_string(node_)});
    phase_ = Phase::kDown;
    until_ = now + std::chrono::seconds(4 + rng_() % 5);
  } else if (f.kind == "pause") {
    cluster_.script({"pause", std::to_string(node_)});
    phase_ = Phase::kPaused;
    until_ = now + suspect_ + std::chrono::seconds(3 + rng_() % 3);  // past evs.suspect_timeout
  } else if (f.kind == "freeze") {
    // A writer that stops answering: a host gone dark without resets. The clients' heartbeat must
    // move them off it within 10 s. The soak freezes it past the clients' read_timeout (30 s
    // for a host list); the short run for 15 s, which is still 5 s past that bound (without
    // the heartbeat, 12 s without a delivery were measured even for 35 s: restarted children
    // pick the new writer at once).
    cluster_.script({"pause", std::to_string(node_)});
    phase_ = Phase::kPaused;
    until_ = now + (soak_ ? 35s : 15s);
  } else {
    restart_async(node_);
  }
  fmt::print("  node {}{}: {}\n", node_, f.writer ? " (the writer)" : "", f.kind);
  record_.node_faults.push_back(std::move(f));
  log_marks_.assign(static_cast<std::size_t>(n) + 1, 0);
  for (int node = 1; node <= n; ++node) log_marks_[node] = cluster_.log_size(node);
}

// Partitions leave every process running; the harness still reaches the nodes on their sockets.
void NodeFaults::begin_partition(std::string_view kind, int writer) {
  const int n = cluster_.size();
  const int someone_else = 1 + static_cast<int>((writer + rng_() % (n - 1)) % n);
  NodeFault f;
  f.kind = kind == "cut writer" ? "cut" : std::string(kind);
  node_ = kind == "isolate" ? 1 + static_cast<int>(rng_() % n) : writer;
  other_ = kind == "bridge" || kind == "flap" ? someone_else : 0;
  f.node = node_;
  f.other = other_;
  f.writer = node_ == writer;
  f.at_us = now_us();
  if (f.writer) record_.writer_changes_us.push_back(f.at_us);
  ++started_;
  const auto now = SteadyClock::now();
  // Past evs.suspect_timeout: the other nodes evict the one cut off (a bridge may be relayed).
  until_ = now + suspect_ + std::chrono::seconds(5 + rng_() % 4);
  phase_ = Phase::kCut;
  if (f.kind == "cut") {
    for (int other = 1; other <= n; ++other) {
      if (other != node_) cluster_.cut(node_, other);
    }
  } else if (f.kind == "isolate") {
    cluster_.isolate(node_);
  } else if (f.kind == "bridge") {
    cluster_.cut(node_, other_);
  } else {
    // A link that comes and goes: down for 1 to 7 s (sometimes past the suspect timeout),
    // up for 1 to 3 s, for 20 s in all.
    phase_ = Phase::kFlapping;
    until_ = now + 20s;
    flap_cut_ = false;
    flap();
  }
  fmt::print("  node {}{}: {}{}\n", node_, f.writer ? " (the writer)" : "", f.kind,
             other_ != 0 ? fmt::format(" of its link to node {}", other_) : std::string());
  record_.node_faults.push_back(std::move(f));
  log_marks_.assign(static_cast<std::size_t>(n) + 1, 0);
  for (int node = 1; node <= n; ++node) log_marks_[node] = cluster_.log_size(node);
}

void NodeFaults::flap() {
  flap_cut_ = !flap_cut_;
  if (flap_cut_) {
    cluster_.cut(node_, other_);
  } else {
    cluster_.heal();
  }
  flap_toggle_at_ = SteadyClock::now() + std::chrono::milliseconds(
                                             flap_cut_ ? 1000 + rng_() % 6000 : 1000 + rng_() % 2000);
}

int NodeFaults::gave_up() {
  for (int node = 1; node < static_cast<int>(log_marks_.size()); ++node) {
    if (!cluster_.first_log_line(node, log_marks_[node], "backend must be restarted").empty()) {
      log_marks_[node] = cluster_.log_size(node);  // once per give-up
      return node;
    }
  }
  return 0;
}

void NodeFaults::restore() {
  if (phase_ == Phase::kDown) {
    restart_async(node_);
  } else if (phase_ == Phase::kPaused) {
    cluster_.script({"resume", std::to_string(node_)});
    cluster_.set_reachable(node_, true);
    phase_ = Phase::kRejoining;
    until_ = SteadyClock::now() + 120s;
  } else if (phase_ == Phase::kCut || phase_ == Phase::kFlapping) {
    cluster_.heal();
    if (!record_.node_faults.empty()) {
      NodeFault& f = record_.node_faults.back();
      f.healed_us = now_us();
      fmt::print("  node {}: healed {:.1f} s after the {}\n", f.node,
                 seconds_between(f.at_us, f.healed_us), f.kind);
    }
    phase_ = Phase::kRejoining;
    until_ = SteadyClock::now() + 120s;
  }
}

void NodeFaults::sample() {
  const std::int64_t t = now_us();
  int committing = 0;
  for (int node = 1; node <= cluster_.size(); ++node) {
    std::optional<NodeStatus> s = cluster_.status(node);
    if (!s || s->gcomm_uuid.empty()) continue;
    std::optional<Counters>& last = last_.at(node);
    ConflictSample c;
    c.node = node;
    c.to_us = t;
    if (last && last->uuid == s->gcomm_uuid) {
      c.from_us = last->at_us;
      c.cert_failures = s->cert_failures - std::min(s->cert_failures, last->cert);
      c.bf_aborts = s->bf_aborts - std::min(s->bf_aborts, last->bf);
      if (s->local_commits > last->commits) ++committing;
    } else {
      // A new incarnation counts from zero since it started: after the last sample at least.
      c.from_us = last ? last->at_us : record_.faults_started_us;
      c.cert_failures = s->cert_failures;
      c.bf_aborts = s->bf_aborts;
    }
    if (c.cert_failures + c.bf_aborts > 0) record_.conflicts.push_back(c);
    last = Counters{s->gcomm_uuid, s->cert_failures, s->bf_aborts, s->local_commits, t};
  }
  if (committing >= 2) record_.multi_writer_us.push_back(t);
  cluster_.record_long_waits(t);
  std::string uuid;
  const int writer = cluster_.writer(&uuid);
  if (!uuid.empty() && uuid != writer_uuid_) {
    if (!writer_uuid_.empty()) {
      record_.writer_changes_us.push_back(t);
      fmt::print("  the writer row moved to node {} ({})\n",
                 writer == 0 ? std::string("?") : std::to_string(writer), uuid);
    }
    writer_uuid_ = uuid;
  }
}

void NodeFaults::finish(std::chrono::seconds patience) {
  const auto deadline = SteadyClock::now() + patience;
  if (phase_ == Phase::kDown || phase_ == Phase::kPaused || phase_ == Phase::kCut ||
      phase_ == Phase::kFlapping) {
    restore();
  }
  while (phase_ != Phase::kIdle && SteadyClock::now() < deadline) {
    step(false);
    std::this_thread::sleep_for(100ms);
  }
  if (phase_ != Phase::kIdle) {
    record_.problems.push_back(fmt::format("the cluster was not Synced {} s after the faults",
                                           patience.count()));
  }
}

}  // namespace txmq::fault
