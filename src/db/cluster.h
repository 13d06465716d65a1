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

  // A node that may take the queue's writes: synced, ready, in the primary component.
  bool qualifies() const {
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
// A host list whose nodes are not Galera nodes (wsrep_on = OFF) is a list of alternatives:
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

  static constexpr auto kCheckEvery = std::chrono::seconds(2);
  // The heartbeat (Galera only): a statement on a connection of its own to the writer every
  // kHeartbeatEvery, which may take kHeartbeatReadSeconds. A writer that does not answer in
  // time (frozen, or a host gone dark without resets) is failed and every tracked connection to
  // it is cancelled, so that statements blocked on it return at once, not after the DSN's
  // read_timeout (30 s), and their retries go to the next writer: a client moves off a frozen
  // writer within about 7 s (docs/galera.md).
  static constexpr auto kHeartbeatEvery = std::chrono::seconds(1);
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
