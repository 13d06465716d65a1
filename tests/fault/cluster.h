// The fault suite's cluster mode (docs/faults.md, "On a Galera cluster"): a 3-node cluster run
// by scripts/galera, node faults injected one at a time, and what the nodes say about them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.h"
#include "fault.h"

namespace txmq::fault {

// What one node's SHOW GLOBAL STATUS says.
struct NodeStatus {
  std::string state;           // wsrep_local_state_comment: Synced, Joined, Donor/Desynced, ...
  std::string cluster_status;  // wsrep_cluster_status: Primary or non-Primary
  std::string gcomm_uuid;      // this incarnation of the node: a restart gives a new one
  std::uint64_t cluster_size = 0, recv_queue = 0, last_committed = 0;
  std::uint64_t cert_failures = 0, bf_aborts = 0, local_commits = 0;
  bool synced() const { return state == "Synced" && cluster_status == "Primary"; }
};

// A cluster in a folder of scripts/galera (TXMQ_GALERA_HOME). Nodes are numbered 1..size().
// A cluster that scripts/galera made in network namespaces (TXMQ_GALERA_NETNS; the harness asks
// for them when it may) can also be partitioned: links cut silently and healed.
class GaleraCluster {
 public:
  // home: the cluster's folder; log: where the script's output goes; database: the one the run
  // uses (dropped and created again by recreate_database).
  GaleraCluster(std::string home, std::string log, std::string database);

  // `scripts/galera start`: a new cluster when the folder holds none, else the nodes that do
  // not run. Throws when it fails.
  void start();
  // `scripts/galera stop`: only the nodes recorded in the folder (their pids, checked).
  void stop() noexcept;

  int size() const { return static_cast<int>(ports_.size()); }
  const std::string& database() const { return database_; }
  // userinfo is "user" or "user:escaped-password"; the run's database unless one is named.
  // Over TCP, as the clients come: cut off by a partition.
  std::string dsn(int node, std::string_view userinfo, std::string_view database = {}) const;
  std::string multi_dsn(std::string_view userinfo) const;
  // root on the node's Unix socket: reaches a partitioned node (not a stopped one).
  std::string socket_dsn(int node, std::string_view database = {}) const;
  // The address the clients' connections come from (for their accounts).
  const std::string& client_host() const { return client_host_; }
  // The nodes run in network namespaces: cut, isolate and heal work.
  bool partitions() const { return partitions_; }
  // Drops every packet between nodes `a` and `b` (b = 0: between node a and the clients).
  void cut(int a, int b);
  void isolate(int node);  // from the other nodes and the clients
  void heal();             // every link

  // The script, waited for (kill, pause, resume: quick). Returns its exit status.
  int script(const std::vector<std::string>& args);
  // The script in the background (restart waits until the node is Synced again).
  pid_t script_async(const std::vector<std::string>& args);

  // The harness marks nodes it has killed or paused: nothing is sent to them (a query to a
  // stopped process would hang until the read timeout).
  void set_reachable(int node, bool reachable);
  bool reachable(int node) const { return reachable_.at(node - 1); }
  // root's session on the node, connected again when broken; nullptr when it cannot connect.
  internal::Connection* admin(int node);
  void forget(int node);
  std::optional<NodeStatus> status(int node);
  // The node's transactions open longer than `seconds` and its statements running (or waiting)
  // that long, a line each (thread, age, state, locks, what it runs or waits for), for the
  // run's record of stalls; empty when there are none or the node does not answer.
  std::vector<std::string> long_waits(int node, int seconds);
  // Appends every node's long_waits(10) to HOME/long-waits.log, each line stamped with `at_us`
  // (now_us(), the histories' clock).
  void record_long_waits(std::int64_t at_us);
  // Every node answers, Synced and Primary, in a cluster of all of them.
  bool healthy();
  // healthy() and nothing left to apply: every node at the same last committed seqno.
  bool settled();

  // The writer the client library records (txmq_cluster_writer.node_uuid), as a node number;
  // node 1 when the table does not exist (a library from before writer failover), 0 when the
  // row names no node that answers. `uuid` gets the row's value ("" without one).
  int writer(std::string* uuid = nullptr);
  // evs.suspect_timeout of node 1, from wsrep_provider_options.
  std::chrono::seconds suspect_timeout();

  // The first [ERROR] line of the node's error log, for reports ("" without one).
  std::string first_error(int node) const;
  // Prints the last `lines` lines of a node's error.log (to see, in CI's output, why it left).
  void print_log_tail(int node, std::size_t lines) const;
  // The size of a node's error.log now, and its first line after byte `from` that holds `text`
  // ("" without one).
  std::uintmax_t log_size(int node) const;
  std::string first_log_line(int node, std::uintmax_t from, std::string_view text) const;
  // Restarts every node that is not Synced in a whole cluster, one after the other, each
  // written down in `problems` with its state and first error. Returns how many.
  int restart_sick_nodes(std::vector<std::string>& problems, std::string_view when);

  // Drops and creates the run's database (through node 1; DDL replicates).
  void recreate_database();
  // CHECKSUM TABLE of every InnoDB table of the run's database on every node; returns the
  // tables compared and writes each disagreement into `mismatches`.
  std::size_t compare_tables(std::vector<std::string>& mismatches);

 private:
  std::string log_path(int node) const;  // its error.log
  std::string home_, log_, database_;
  std::vector<unsigned> ports_;  // client port per node
  std::vector<std::string> hosts_;  // its address per node
  std::string client_host_ = "127.0.0.1";
  bool partitions_ = false;
  std::vector<bool> reachable_;
  std::vector<std::unique_ptr<internal::Connection>> admins_;
  std::vector<std::uint64_t> fc_paused_ns_;  // per node, wsrep_flow_control_paused_ns last seen
};

// Kills, pauses and restarts nodes one at a time, each only once the cluster is whole and
// Synced again, and samples the nodes' conflict counters. Driven by the orchestrator's loop.
class NodeFaults {
 public:
  NodeFaults(GaleraCluster& cluster, ClusterRecord& record, std::uint64_t seed, bool soak);

  // One step of the state machine; new faults start only while `may_start` (not too near the
  // end of the run, so that every outage's end is seen).
  void step(bool may_start);
  // Every 2 s: counters and the writer row.
  void sample();
  // Ends the fault in progress (resumes, restarts) and waits until the cluster is settled.
  void finish(std::chrono::seconds patience);

 private:
  enum class Phase { kIdle, kDown, kPaused, kCut, kFlapping, kRestoring, kRejoining };
  void begin_fault();
  void begin_partition(std::string_view kind, int writer);
  void flap();
  void restore();
  void repair(const std::string& when);
  void restart_async(int node);

  GaleraCluster& cluster_;
  ClusterRecord& record_;
  std::mt19937_64 rng_;
  bool soak_;
  std::chrono::seconds suspect_;
  Phase phase_ = Phase::kIdle;
  int node_ = 0;   // the node of the fault in progress
  int other_ = 0;  // a partition between two nodes: the other one
  std::vector<std::string_view> first_kinds_;  // the short run's: one of each, in this order
  std::vector<std::string_view> kinds_;        // then any of these
  bool flap_cut_ = false;  // a flapping link: cut now
  bool resynced_ = false;  // the fault in progress's node was given a full SST
  std::chrono::steady_clock::time_point flap_toggle_at_;
  std::chrono::steady_clock::time_point next_at_, until_, last_health_check_;
  std::optional<std::chrono::steady_clock::time_point> unhealthy_since_;
  pid_t helper_ = -1;  // scripts/galera restart, running
  int started_ = 0;    // faults begun
  struct Counters {
    std::string uuid;
    std::uint64_t cert = 0, bf = 0, commits = 0;
    std::int64_t at_us = 0;
  };
  std::vector<std::optional<Counters>> last_;
  std::string writer_uuid_;
  bool writer_row_missing_noted_ = false;
  // Per node, the size of its error.log when the fault in progress began (see gave_up()).
  std::vector<std::uintmax_t> log_marks_;
  // A node whose group communication gave up since the fault began; 0 when none.
  int gave_up();
};

}  // namespace txmq::fault
