#include "db/cluster.h"

#include <fmt/format.h>
#include <mysqld_error.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "util/codec.h"
#include "txmq/error.h"

namespace txmq::internal {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A probe must not wait on a frozen node for the DSN's whole connect timeout: the other nodes
// answer within milliseconds, and a failover is waiting.
constexpr int kProbeConnectSeconds = 2;
constexpr int kProbeReadSeconds = 3;

// A node's DSN for a connection that must not wait long on it (probes, the heartbeat).
Dsn quick(Dsn node, int read_seconds) {
  node.connect_timeout_seconds = std::min(node.connect_timeout_seconds, kProbeConnectSeconds);
  node.read_timeout_seconds = read_seconds;
  return node;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

struct Probe {
  NodeState state;
  std::unique_ptr<Connection> connection;
};

// The node's wsrep status into `state` (probes and the writer's periodic check).
void read_wsrep_status(Connection& c, NodeState& state) {
  Result status = c.execute(
      "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_cluster_status', "
      "'wsrep_local_state_comment', 'wsrep_cluster_conf_id', 'wsrep_local_index', "
      "'wsrep_gcomm_uuid', 'wsrep_cluster_size')",
      {});
  for (const Row& row : status.rows) {
    const std::string& name = row.bytes(0);
    const std::string& value = row.bytes(1);
    if (name == "wsrep_ready") state.ready = value == "ON";
    if (name == "wsrep_cluster_status") state.status = value;
    if (name == "wsrep_local_state_comment") state.state = value;
    if (name == "wsrep_gcomm_uuid") state.uuid = value;
    if (name == "wsrep_cluster_conf_id") state.conf_id = Row::parse_integer(value);
    if (name == "wsrep_local_index") state.local_index = Row::parse_integer(value);
    if (name == "wsrep_cluster_size") state.cluster_size = Row::parse_integer(value);
  }
}

// "epoch:counter" of a VIEW_ID into its numbers (0, 0 when it is not one).
void parse_view(const std::string& view_id, NodeState& s) {
  const std::size_t colon = view_id.find(':');
  if (colon == std::string::npos) return;
  try {
    s.view_epoch = std::stoull(view_id.substr(0, colon));
    s.view = std::stoull(view_id.substr(colon + 1));
  } catch (const std::exception&) {
    s.view_epoch = s.view = 0;
  }
}

// A MySQL server's place in its Group Replication group, as it sees it (probes and the writer's
// periodic check): s.group stays false for a server without the plugin or a group name.
void read_group_status(Connection& c, NodeState& s) {
  Result vars = c.execute(
      "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('group_replication_group_name', "
      "'group_replication_single_primary_mode', 'group_replication_consistency', "
      "'group_replication_exit_state_action', 'group_replication_member_expel_timeout', "
      "'super_read_only', 'server_uuid', 'gtid_mode', 'sync_binlog')",
      {});
  std::string group_name;
  for (const Row& row : vars.rows) {
    const std::string& name = row.bytes(0);
    const std::string& value = row.bytes(1);
    if (name == "group_replication_group_name") group_name = value;
    if (name == "group_replication_single_primary_mode") s.single_primary = value == "ON";
    if (name == "group_replication_consistency") s.consistency = value;
    if (name == "group_replication_exit_state_action") s.exit_state_action = value;
    if (name == "group_replication_member_expel_timeout") s.expel_timeout = value;
    if (name == "super_read_only") s.super_read_only = value == "ON";
    if (name == "server_uuid") s.uuid = value;
    if (name == "gtid_mode") s.gtid_mode = value;
    if (name == "sync_binlog") s.sync_binlog = value;
  }
  // A server of a group is one even while it is out of it (GR stopped after a restart, ERROR):
  // it must then not be taken for a stand-alone server that may be written to.
  s.group = !group_name.empty();
  if (!s.group) return;
  Result members = c.execute(
      "SELECT MEMBER_ID, MEMBER_HOST, CAST(MEMBER_PORT AS CHAR), MEMBER_STATE, MEMBER_ROLE "
      "FROM performance_schema.replication_group_members",
      {});
  s.members = s.online_members = s.unreachable_members = 0;
  s.member_state = "OFFLINE";
  for (const Row& row : members.rows) {
    const std::string& state = row.bytes(3);
    if (row.bytes(0).empty()) continue;  // the plugin's row when it is not in a group
    ++s.members;
    if (state == "ONLINE") ++s.online_members;
    if (state == "UNREACHABLE") ++s.unreachable_members;
    if (row.bytes(0) == s.uuid) {
      s.member_state = state;
      s.member_role = row.bytes(4);
    }
    if (state == "ONLINE" && row.bytes(4) == "PRIMARY") {
      s.primary_address = fmt::format("{}:{}", row.bytes(1), row.bytes(2));
    }
  }
  Result view = c.execute(
      "SELECT VIEW_ID FROM performance_schema.replication_group_member_stats "
      "WHERE MEMBER_ID = @@server_uuid",
      {});
  if (!view.rows.empty()) parse_view(view.rows[0].bytes(0), s);
}

Probe probe(const Dsn& dsn, std::size_t i) {
  Probe p;
  p.state.index = i;
  try {
    p.connection = std::make_unique<Connection>(quick(dsn.node(i), kProbeReadSeconds));
    // SHOW works on a node outside the primary component, where SELECTs get error 1047.
    Result vars = p.connection->execute(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', "
        "'innodb_flush_log_at_trx_commit', 'binlog_format', 'innodb_autoinc_lock_mode', "
        "'wsrep_provider_options')",
        {});
    p.state.answered = true;
    if (p.connection->server().mysql) {
      p.state.binlog_format.clear();
      for (const Row& row : vars.rows) {
        if (row.bytes(0) == "innodb_flush_log_at_trx_commit") {
          p.state.flush_log_at_trx_commit = row.bytes(1);
        }
        if (row.bytes(0) == "binlog_format") p.state.binlog_format = row.bytes(1);
      }
      read_group_status(*p.connection, p.state);
      return p;
    }
    for (const Row& row : vars.rows) {
      const std::string& name = row.bytes(0);
      if (name == "wsrep_on") p.state.wsrep_on = row.bytes(1) == "ON";
      if (name == "innodb_flush_log_at_trx_commit") p.state.flush_log_at_trx_commit = row.bytes(1);
      if (name == "binlog_format") p.state.binlog_format = row.bytes(1);
      if (name == "innodb_autoinc_lock_mode") p.state.autoinc_lock_mode = row.bytes(1);
      if (name == "wsrep_provider_options") p.state.provider_options = row.bytes(1);
    }
    if (!p.state.wsrep_on) return p;
    read_wsrep_status(*p.connection, p.state);
  } catch (const Error& e) {
    p.state.answered = false;
    p.state.error = e.what();
    p.connection.reset();
  }
  return p;
}

std::vector<Probe> probe_all(const Dsn& dsn) {
  std::vector<Probe> probes(dsn.nodes.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    threads.emplace_back([&, i] { probes[i] = probe(dsn, i); });
  }
  for (std::thread& t : threads) t.join();
  return probes;
}

std::string node_name(const Dsn& dsn, std::size_t i) { return dsn.nodes.at(i).describe(); }

std::string describe_all(const Dsn& dsn, const std::vector<Probe>& probes) {
  std::string text;
  for (const Probe& p : probes) {
    if (!text.empty()) text += "; ";
    text += p.state.describe(dsn);
  }
  return text;
}

// The writer row, read so that it sees every change committed through any node
// (wsrep_sync_wait); nullopt when the row is missing. Creates the table when it is missing and
// the user may (else the rule works without the row: see choose()).
std::optional<std::string> read_writer_row(Connection& c, bool& table_usable) {
  c.query("SET SESSION wsrep_sync_wait = 1");
  try {
    Result r = c.execute("SELECT node_uuid FROM txmq_cluster_writer WHERE singleton = 1", {});
    table_usable = true;
    if (r.rows.empty()) return std::nullopt;
    return r.rows[0].bytes(0);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;
  }
  try {
    c.query(
        "CREATE TABLE IF NOT EXISTS txmq_cluster_writer ("
        " singleton TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
        " node_uuid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
        " node_address VARCHAR(300) NOT NULL,"
        " changed_at DATETIME(6) NOT NULL,"
        " changed_by VARCHAR(300) NOT NULL) ENGINE=InnoDB");
    table_usable = true;
  } catch (const Error& e) {
    if (e.code() != Errc::kFailedPrecondition) throw;  // no CREATE privilege: go without
    table_usable = false;
  }
  return std::nullopt;
}

// A recorded writer that is alive in the primary component but is none of the nodes that
// answered: when every listed node answered, the DSN does not list it, and moving the writer
// would make this client and the others take turns moving it. Throws kFailedPrecondition then.
// (Without the privilege to read mysql.wsrep_cluster_members, the writer is moved.)
void refuse_unlisted_writer(Connection& c, const std::string& writer_uuid,
                            const std::vector<Probe>& probes) {
  for (const Probe& p : probes) {
    if (!p.state.answered) return;  // maybe the writer: unreachable for this client
  }
  std::string address;
  try {
    Result r = c.execute(
        "SELECT node_incoming_address FROM mysql.wsrep_cluster_members WHERE node_uuid = ?",
        {std::string_view(writer_uuid)});
    if (r.rows.empty()) return;  // gone from the cluster: move the writer
    address = r.rows[0].bytes(0);
  } catch (const Error& e) {
    if (e.code() == Errc::kFailedPrecondition || e.code() == Errc::kNotFound) return;
    throw;
  }
  throw Error(Errc::kFailedPrecondition,
              fmt::format("the cluster's clients write through node {} (txmq_cluster_writer), "
                          "which this DSN does not list: list every node of the cluster in the "
                          "DSN",
                          util::printable(address)));
}

// The member of a group to write through: one that says of itself ONLINE PRIMARY in a view
// where a majority is ONLINE, the newest view when two do (a primary frozen, then resumed,
// reports its old view until the group's news reaches it). Throws kFailedPrecondition for a
// multi-primary group, kUnavailable when no member qualifies (an election under way, quorum
// lost, the primary unreachable for this client).
const Probe& group_writer(const Dsn& dsn, const std::vector<Probe>& probes) {
  for (const Probe& p : probes) {
    if (p.state.answered && p.state.group && !p.state.single_primary) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("{} is a member of a multi-primary Group Replication group: txmq "
                              "needs one writer (row locks, SKIP LOCKED and its waiters are local "
                              "to a member, and two writers fail each other's commits); switch "
                              "the group to single-primary mode (SELECT "
                              "group_replication_switch_to_single_primary_mode())",
                              node_name(dsn, p.state.index)));
    }
  }
  const Probe* best = nullptr;
  for (const Probe& p : probes) {
    if (!p.state.qualifies()) continue;
    if (best == nullptr || std::pair(p.state.view_epoch, p.state.view) >
                               std::pair(best->state.view_epoch, best->state.view)) {
      best = &p;
    }
  }
  if (best != nullptr) return *best;
  std::string named;
  for (const Probe& p : probes) {
    if (p.state.answered && p.state.member_state == "ONLINE" && !p.state.primary_address.empty()) {
      named = fmt::format(" (the members name {} as the primary)",
                          util::printable(p.state.primary_address));
      break;
    }
  }
  throw Error(Errc::kUnavailable, fmt::format("no member of the group can take writes now{}: {}",
                                              named, describe_all(dsn, probes)));
}

}  // namespace

std::string NodeState::describe(const Dsn& dsn) const {
  const std::string name = node_name(dsn, index);
  if (!answered) return fmt::format("{}: {}", name, error);
  if (group) {
    return fmt::format("{}: {}{} (view {}, {} of {} members ONLINE{})", name, member_state,
                       member_role.empty() ? "" : " " + member_role, view, online_members,
                       members, super_read_only && member_role == "PRIMARY" ? ", super_read_only" : "");
  }
  if (!wsrep_on) return fmt::format("{}: not a Galera node (wsrep_on = OFF)", name);
  return fmt::format("{}: {}, {}{}", name, state.empty() ? "no state" : state,
                     status.empty() ? "no status" : status, ready ? "" : ", not ready");
}

std::string provider_option(std::string_view options, std::string_view key) {
  while (!options.empty()) {
    const std::size_t semicolon = options.find(';');
    std::string_view item = options.substr(0, semicolon);
    options = semicolon == std::string_view::npos ? std::string_view{} : options.substr(semicolon + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    auto trim = [](std::string_view t) {
      while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
      while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
      return t;
    };
    if (trim(item.substr(0, eq)) == key) return std::string(trim(item.substr(eq + 1)));
  }
  return {};
}

std::vector<NodeState> probe_nodes(const Dsn& dsn) {
  std::vector<NodeState> states;
  for (Probe& p : probe_all(dsn)) states.push_back(std::move(p.state));
  return states;
}

Cluster::Cluster(Dsn dsn) : dsn_(std::move(dsn)) {}

Cluster::~Cluster() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    heartbeat_stopping_ = true;
  }
  heartbeat_wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void Cluster::track(Connection& c) {
  class Registration {
   public:
    Registration(std::shared_ptr<Live> live, Connection* connection)
        : live_(std::move(live)), connection_(connection) {}
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration() {
      std::lock_guard lock(live_->mutex);
      live_->connections.erase(connection_);
    }

   private:
    std::shared_ptr<Live> live_;
    Connection* connection_;
  };
  {
    std::lock_guard lock(live_->mutex);
    live_->connections[&c] = c.generation();
  }
  c.set_tracking(std::make_shared<Registration>(live_, &c));
}

void Cluster::prepare(Connection& c) {
  if (!group()) return;
  c.set_group_member(true);
  if (raise_consistency_.load(std::memory_order_acquire)) {
    c.query("SET SESSION group_replication_consistency = 'BEFORE_ON_PRIMARY_FAILOVER'");
  }
}

void Cluster::cancel(std::uint64_t generation) {
  std::lock_guard lock(live_->mutex);  // a connection being closed waits for this
  for (const auto& [connection, of] : live_->connections) {
    if (of == generation) connection->cancel();
  }
}

void Cluster::heartbeat() {
  std::unique_ptr<Connection> beat;
  std::uint64_t beat_generation = 0;
  std::unique_lock lock(heartbeat_mutex_);
  while (!heartbeat_wake_.wait_for(lock, kHeartbeatEvery, [this] { return heartbeat_stopping_; })) {
    lock.unlock();
    std::optional<Writer> writer;
    {
      std::lock_guard current(mutex_);
      writer = current_;
    }
    if (writer) {
      try {
        if (!beat || beat_generation != writer->generation) {
          beat.reset();
          beat_generation = writer->generation;
          beat = std::make_unique<Connection>(quick(writer->dsn, kHeartbeatReadSeconds));
        }
        beat->query("DO 1");
      } catch (const Error& e) {
        beat.reset();
        // Not answering, or gone: move off it. (A node with no connection left is alive.)
        const bool alive = e.server_errno() == ER_CON_COUNT_ERROR ||
                           e.server_errno() == ER_TOO_MANY_USER_CONNECTIONS;
        if (e.code() == Errc::kUnavailable && !alive && is_current(writer->generation)) {
          failed(writer->generation);
          cancel(writer->generation);
        }
      }
    }
    lock.lock();
  }
}

Cluster::Writer Cluster::writer() {
  {
    std::lock_guard lock(mutex_);
    if (current_) return *current_;
  }
  std::lock_guard choosing(choosing_);
  {
    std::lock_guard lock(mutex_);
    if (current_) return *current_;  // another thread chose meanwhile
  }
  Writer chosen = choose();
  if (replicated() && !heartbeat_.joinable()) heartbeat_ = std::thread([this] { heartbeat(); });
  std::lock_guard lock(mutex_);
  current_ = chosen;
  return chosen;
}

void Cluster::failed(std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  if (current_ && current_->generation == generation) current_.reset();
}

bool Cluster::is_current(std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  return current_ && current_->generation == generation;
}

bool Cluster::check_due() {
  if (!replicated()) return false;
  std::int64_t due = next_check_.load(std::memory_order_relaxed);
  const std::int64_t now = now_us();
  if (now < due) return false;
  const std::int64_t next =
      now + std::chrono::duration_cast<std::chrono::microseconds>(kCheckEvery).count();
  return next_check_.compare_exchange_strong(due, next, std::memory_order_relaxed);
}

void Cluster::check(Connection& c, std::uint64_t generation) {
  std::string expected;
  {
    std::lock_guard lock(mutex_);
    if (!current_ || current_->generation != generation) return;  // already moving on
    expected = writer_uuid_;
  }
  if (group()) {
    // Still the ONLINE PRIMARY of a majority, and still the same server: an election (a
    // switch of primary, an expulsion) moves the clients within kCheckEvery.
    NodeState s;
    s.answered = true;
    read_group_status(c, s);
    if (!s.group || !s.qualifies() || (!expected.empty() && s.uuid != expected)) failed(generation);
    return;
  }
  // On the writer itself, without wsrep_sync_wait: a move made through another node arrives
  // within milliseconds, and the next check sees it.
  NodeState s;
  s.answered = true;
  s.wsrep_on = true;
  read_wsrep_status(c, s);
  bool still = s.qualifies() && (expected.empty() || s.uuid == expected);
  if (still && !expected.empty()) {
    try {
      Result w = c.execute("SELECT node_uuid FROM txmq_cluster_writer WHERE singleton = 1", {});
      still = !w.rows.empty() && w.rows[0].bytes(0) == expected;
    } catch (const Error& e) {
      if (e.code() != Errc::kNotFound) throw;
    }
  }
  if (!still) failed(generation);
}

std::vector<NodeState> Cluster::last_probe() {
  std::lock_guard lock(mutex_);
  return last_probe_;
}

Cluster::Writer Cluster::choose() {
  std::vector<Probe> probes = probe_all(dsn_);
  {
    std::lock_guard lock(mutex_);
    last_probe_.clear();
    for (const Probe& p : probes) last_probe_.push_back(p.state);
  }
  const auto answered = std::find_if(probes.begin(), probes.end(),
                                     [](const Probe& p) { return p.state.answered; });
  if (answered == probes.end()) {
    throw Error(Errc::kUnavailable, fmt::format("cannot connect to any node of {}: {}",
                                                dsn_.describe(), describe_all(dsn_, probes)));
  }
  const auto next_generation = [this] {
    return generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  };
  if (std::any_of(probes.begin(), probes.end(),
                  [](const Probe& p) { return p.state.answered && p.state.group; })) {
    group_.store(true, std::memory_order_release);
    galera_.store(false, std::memory_order_release);
    const Probe& writer = group_writer(dsn_, probes);
    raise_consistency_.store(writer.state.consistency == "EVENTUAL", std::memory_order_release);
    std::lock_guard lock(mutex_);
    writer_uuid_ = writer.state.uuid;
    return Writer{dsn_.node(writer.state.index), next_generation()};
  }
  if (!answered->state.wsrep_on) {
    // Not a cluster: the first server that answers.
    galera_.store(false, std::memory_order_release);
    group_.store(false, std::memory_order_release);
    std::lock_guard lock(mutex_);
    writer_uuid_.clear();
    return Writer{dsn_.node(answered->state.index), next_generation()};
  }
  galera_.store(true, std::memory_order_release);
  group_.store(false, std::memory_order_release);

  // The nodes that may write, in the newest membership view: a node that was paused can still
  // say Synced and Primary about a view the others have left.
  std::vector<Probe*> qualified;
  std::uint64_t newest_view = 0;
  for (Probe& p : probes) {
    if (p.state.qualifies()) newest_view = std::max(newest_view, p.state.conf_id);
  }
  for (Probe& p : probes) {
    if (p.state.qualifies() && p.state.conf_id == newest_view) qualified.push_back(&p);
  }
  if (qualified.empty()) {
    throw Error(Errc::kUnavailable,
                fmt::format("no node of the cluster can take writes now: {}",
                            describe_all(dsn_, probes)));
  }
  std::sort(qualified.begin(), qualified.end(), [](const Probe* a, const Probe* b) {
    return a->state.local_index < b->state.local_index;
  });
  Probe& candidate = *qualified.front();
  // The recorded writer stays when it qualifies, whatever view it reports: while a node joins,
  // probes can catch the nodes on either side of the view change (a move then was seen in the
  // soak, and moved the writer twice within a second).
  const auto find = [&](const std::string& uuid) -> Probe* {
    for (Probe& p : probes) {
      if (p.state.qualifies() && p.state.uuid == uuid) return &p;
    }
    return nullptr;
  };

  Probe* writer = nullptr;
  bool table_usable = false;
  for (int round = 0; round < 5 && writer == nullptr; ++round) {
    std::optional<std::string> recorded = read_writer_row(*candidate.connection, table_usable);
    if (recorded) writer = find(*recorded);
    if (writer != nullptr || !table_usable) break;
    if (recorded) refuse_unlisted_writer(*candidate.connection, *recorded, probes);
    // The recorded writer is gone (or there is none yet): move the row to the candidate. Two
    // clients moving it through different nodes conflict at certification (1213): the loser
    // reads the row again.
    try {
      const std::string address = node_name(dsn_, candidate.state.index);
      const std::string by = fmt::format("pid {}", static_cast<long>(::getpid()));
      Result moved =
          recorded ? candidate.connection->execute(
                         "UPDATE txmq_cluster_writer SET node_uuid = ?, node_address = ?, "
                         "changed_at = NOW(6), changed_by = CONCAT(USER(), ' ', ?) "
                         "WHERE singleton = 1 AND node_uuid = ?",
                         {std::string_view(candidate.state.uuid), std::string_view(address),
                          std::string_view(by), std::string_view(*recorded)})
                   : candidate.connection->execute(
                         "INSERT IGNORE INTO txmq_cluster_writer VALUES (1, ?, ?, NOW(6), "
                         "CONCAT(USER(), ' ', ?))",
                         {std::string_view(candidate.state.uuid), std::string_view(address),
                          std::string_view(by)});
      if (moved.affected_rows == 1) writer = &candidate;
    } catch (const Error& e) {
      if (e.code() != Errc::kAborted) throw;
    }
  }
  // No row to agree through (no privilege to create it): the rule alone, which every client
  // that sees the same view agrees on.
  if (writer == nullptr && !table_usable) writer = &candidate;
  if (writer == nullptr) {
    throw Error(Errc::kUnavailable,
                "the clients of the cluster keep moving the writer (txmq_cluster_writer); "
                "retrying");
  }
  // Before the first write through it, the writer applies every commit made through the node
  // before it (a read with wsrep_sync_wait waits for them): what the old writer acknowledged
  // is then visible to claims, layout checks and dedup on the new one.
  if (writer != &candidate) {
    writer->connection->query("SET SESSION wsrep_sync_wait = 1");
    writer->connection->execute(table_usable
                                    ? "SELECT node_uuid FROM txmq_cluster_writer WHERE singleton = 1"
                                    : "SELECT 1",
                                {});
  }
  std::lock_guard lock(mutex_);
  writer_uuid_ = table_usable ? writer->state.uuid : std::string();
  return Writer{dsn_.node(writer->state.index), next_generation()};
}

}  // namespace txmq::internal
