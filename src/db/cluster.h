#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

#include "db/connection.h"
#include "db/dsn.h"

namespace txmq::internal {

// What a probe of one node of a host list saw.
struct NodeState {
  std::size_t index = 0;  // in the DSN's list
  bool answered = false;
  std::string error;  // why it did not answer
  bool wsrep_on = false;
  bool ready = false;          // wsrep_ready
  std::string status;          // wsrep_cluster_status: Primary, non-Primary, Disconnected
  std::string state;           // wsrep_local_state_comment: Synced, Joining, Donor/Desynced, ...
  std::uint64_t conf_id = 0;   // wsrep_cluster_conf_id: the membership view's number
  std::uint64_t local_index = 0;
  std::string uuid;  // wsrep_gcomm_uuid: new at each start of the node
  std::uint64_t cluster_size = 0;
  // Settings that decide what a commit survives (Client checks them: docs/galera.md).
  std::string flush_log_at_trx_commit;
  std::string binlog_format;
  std::string autoinc_lock_mode;
  std::string provider_options;  // wsrep_provider_options

  // MySQL Group Replication (docs/group-replication.md): a member of a group, as it sees itself.
  bool group = false;            // the plugin runs and the server is in (or joining) a group
  bool single_primary = true;    // group_replication_single_primary_mode
  std::string member_state;      // ONLINE, RECOVERING, UNREACHABLE, ERROR, OFFLINE
  std::string member_role;       // PRIMARY, SECONDARY
  bool super_read_only = false;
  std::uint64_t view_epoch = 0;  // VIEW_ID "epoch:counter": the group's bootstrap, then the view
  std::uint64_t view = 0;
  std::uint64_t members = 0;         // in its view
  std::uint64_t online_members = 0;  // of them ONLINE
  std::uint64_t unreachable_members = 0;  // of them UNREACHABLE (the others count for quorum)
  std::string primary_address;   // host:port of the ONLINE PRIMARY in its view, if any
  std::string consistency;       // group_replication_consistency
  std::string sync_binlog;
  std::string gtid_mode;
  std::string exit_state_action;  // group_replication_exit_state_action
  std::string expel_timeout;      // group_replication_member_expel_timeout

  // A node that may take the queue's writes. Galera: synced, ready, in the primary component.
  // A group: ONLINE PRIMARY, writable, in a view where a majority is reachable (ONLINE or
  // RECOVERING: both vote; a primary cut off in a minority, or just resumed from a freeze, can
  // still call itself ONLINE PRIMARY, with the others UNREACHABLE).
  bool qualifies() const {
    if (group) {
      return answered && member_state == "ONLINE" && member_role == "PRIMARY" &&
             !super_read_only && 2 * (members - unreachable_members) > members;
    }
    return answered && wsrep_on && ready && status == "Primary" && state == "Synced";
  }
  // "127.0.0.1:24000 Synced, Primary" or "127.0.0.1:24000: cannot connect (...)".
  std::string describe(const Dsn& dsn) const;
};

// Which node of a DSN's host list takes the queue's work (docs/galera.md, "The writer").
//
// Galera makes every node writable, but row locks (SKIP LOCKED included), GET_LOCK, the MEMORY
// waiters table and KILL QUERY are local to a node: a queue written through two nodes at once
// meets certification failures and misses wake-ups. So every client of a cluster writes through
// one node, the writer, which the clients agree on through a replicated row
// (txmq_cluster_writer): the writer stays while it is synced in the primary component, and the
// first client that finds it gone moves the row (compare-and-set, certified by Galera) to the
// synced node with the lowest wsrep_local_index. The row names the node by its gcomm UUID,
// which is new at every start of a node: a node that restarts never gets the writer back by
// itself, so there is no flapping. Clients look at the row every few seconds (check()).
//
// A host list of MySQL Group Replication members (docs/group-replication.md) needs no row: the
// group elects its primary by consensus, so every client that asks agrees. The writer is the
// member that says of itself ONLINE PRIMARY in a view where a majority is ONLINE (the newest
// view when two say so); a multi-primary group is refused (kFailedPrecondition). The same
// failover, checks and heartbeat as for Galera follow it.
//
// A host list whose nodes are neither (wsrep_on = OFF, no group) is a list of alternatives:
// the first that answers serves.
class Cluster {
 public:
  explicit Cluster(Dsn dsn);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  struct Writer {
    Dsn dsn;  // names the writer node only
    std::uint64_t generation = 0;
  };

  // The node to use now. The first call, and the first after failed() or a check that found
  // the writer changed, probes every node and agrees on the writer; the others wait for it.
  // Throws kUnavailable naming each node's state when no node can take writes (quorum lost,
  // every node joining, none reachable).
  Writer writer();
  // The writer of `generation` failed (lost connection, error 1047 or 1180, no connection):
  // the next writer() looks again. Connections of older generations are not to be reused.
  void failed(std::uint64_t generation);
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Whether `generation` is the writer in use (no failure or move seen since).
  bool is_current(std::uint64_t generation);

  // True, for one caller at a time, every kCheckEvery: that caller then runs check() on a
  // connection to the writer of `generation`.
  bool check_due();
  // Whether the writer is still the writer and still synced in the primary component; when
  // not, the next writer() chooses again. Errors on the connection are thrown (the caller
  // treats them as for any statement).
  void check(Connection& c, std::uint64_t generation);

  // Registers a connection made to the writer of its generation (Connection::generation) for
  // as long as it lives, so that the heartbeat can cancel it when that writer stops answering.
  void track(Connection& c);
  // What the last probe of the nodes saw (empty before the first writer()).
  std::vector<NodeState> last_probe();
  // Whether the nodes are Galera nodes (known after the first writer()).
  bool galera() const { return galera_.load(std::memory_order_acquire); }
  // Whether they are members of a MySQL Group Replication group (known after the first writer()).
  bool group() const { return group_.load(std::memory_order_acquire); }
  // Galera or a group: a writer that can change under the clients.
  bool replicated() const { return galera() || group(); }
  // Sets up a new connection to the writer (Pool::open): on a group whose consistency is
  // EVENTUAL, the session's is raised to BEFORE_ON_PRIMARY_FAILOVER, so that a new primary
  // shows this client what the old one acknowledged before running its statements.
  void prepare(Connection& c);

  static constexpr auto kCheckEvery = std::chrono::seconds(2);
  // The heartbeat (Galera only): a statement on a connection of its own to the writer every
  // kHeartbeatEvery, which may take kHeartbeatReadSeconds. A writer that does not answer in
  // time (frozen, or a host gone dark without resets) is failed and every tracked connection to
  // it is cancelled, so that statements blocked on it return at once, not after the DSN's
  // read_timeout (30 s), and their retries go to the next writer: a client moves off a frozen
  // writer within about 7 s (docs/galera.md).
  static constexpr auto kHeartbeatEvery = std::chrono::seconds(1);
  // (The same for a group: a frozen primary is left within about 5 s, and the group elects
  // another after its expel timeout.)
  static constexpr int kHeartbeatReadSeconds = 4;

 private:
  struct Live {
    std::mutex mutex;
    std::unordered_map<Connection*, std::uint64_t> connections;  // -> generation
  };
  Writer choose();
  void heartbeat();
  void cancel(std::uint64_t generation);

  const Dsn dsn_;
  std::mutex choosing_;
  std::mutex mutex_;  // guards current_
  std::optional<Writer> current_;
  std::vector<NodeState> last_probe_;
  std::string writer_uuid_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> galera_{false};
  std::atomic<bool> group_{false};
  std::atomic<bool> raise_consistency_{false};
  std::atomic<std::int64_t> next_check_{0};  // steady clock, in microseconds
  const std::shared_ptr<Live> live_ = std::make_shared<Live>();
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_wake_;
  bool heartbeat_stopping_ = false;
  std::thread heartbeat_;  // started by the first writer() that finds a Galera cluster
};

// Probes every node of the list in parallel (connect timeout 2 s); exposed for tests and
// `txmq cluster`.
std::vector<NodeState> probe_nodes(const Dsn& dsn);

// The value of `key` in a wsrep_provider_options string ("a = 1; b = PT5S; ..."), or "".
std::string provider_option(std::string_view options, std::string_view key);

}  // namespace txmq::internal
