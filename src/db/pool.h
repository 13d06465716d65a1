#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "util/backoff.h"
#include "db/cluster.h"
#include "db/connection.h"
#include "db/dsn.h"
#include "txmq/error.h"

namespace txmq::internal {

// Which retry is safe when the connection is lost while `fn` runs.
enum class OnLostConnection {
  kRetry,          // fn only reads, or its writes are in a transaction it commits itself
  kCommitUnknown,  // fn writes in autocommit: a lost reply means the outcome is unknown
};

// What a function run on a pooled connection does: the pool prefers a connection left in the
// matching autocommit mode (Connection::begin), which saves a round trip per transaction.
enum class Work {
  kStatements,   // autocommit statements
  kTransaction,  // begin() ... commit()
};

// Tells a retried function what happened before it.
struct Attempt {
  int number = 1;
  bool after_connection_loss = false;
};

// A bounded pool of connections to one database: one server, or the writer node of a Galera
// cluster when the DSN lists several hosts (db/cluster.h). Thread-safe.
class Pool {
 public:
  Pool(Dsn dsn, int max_size);
  ~Pool();

  class Handle {
   public:
    Handle(Pool* pool, std::unique_ptr<Connection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    Handle(Handle&&) = default;
    ~Handle() {
      if (connection_) pool_->release(std::move(connection_));
    }
    Connection& operator*() { return *connection_; }
    Connection* operator->() { return connection_.get(); }

   private:
    Pool* pool_;
    std::unique_ptr<Connection> connection_;
  };

  // A healthy connection (to the writer node, for a cluster); blocks while all max_size are in
  // use. Throws kUnavailable when a new connection cannot be made.
  Handle acquire(Work work = Work::kStatements);
  // A connection of its own (not pooled) to the same node as acquire()'s: for long polling,
  // whose statements must run where the senders' do.
  std::unique_ptr<Connection> connect();
  // Whether a connection made by connect() still points where acquire()'s go (false once a
  // cluster's writer failed or moved: then make a new one).
  bool is_current(const Connection& connection);

  // Runs fn(Connection&, const Attempt&) and retries it, with jittered backoff and a bound, on a
  // deadlock or lock-wait timeout (its transaction was rolled back) and on a lost connection
  // (with a new connection) where `policy` says that is safe. A transaction fn left open is
  // rolled back. kCommitUnknown is never retried. Against a cluster, a node that fails (lost,
  // error 1047 or 1180, no connection) sends the retry to the next writer, for up to
  // kClusterOutage: Galera freezes commits for its suspect timeout when a node dies. A commit
  // that failed with 1180 is not retried: kCommitUnknown (see Connection::commit).
  template <typename F>
  auto run(OnLostConnection policy, Work work, F&& fn)
      -> std::invoke_result_t<F&, Connection&, const Attempt&>;
  template <typename F>
  auto run(OnLostConnection policy, F&& fn)
      -> std::invoke_result_t<F&, Connection&, const Attempt&> {
    return run(policy, Work::kStatements, std::forward<F>(fn));
  }

  const Dsn& dsn() const { return dsn_; }
  // The cluster behind a host list; nullptr for one server.
  Cluster* cluster() { return cluster_.get(); }

  // For the calling thread from now on (nullptr: no more): each time a pool hands this thread
  // a connection, or starts connecting for it, *at gets steady_clock's now in nanoseconds,
  // before the connection is checked. Then the thread waits on the server, no longer for a
  // free connection (shards/visits.h times only the former).
  static void note_acquisitions(std::atomic<std::int64_t>* at);

  // Closes the idle connections: after one connection was found lost (a server restart, a
  // failover), its idle siblings are most likely lost too.
  void discard_idle();
  // A connection handed out by acquire() broke under its holder (lost, or its cluster node left
  // the cluster): what run() does for its own, for a holder that cannot simply retry (a held
  // batch): the outage is reported, a cluster moves off the node, idle siblings are closed.
  void connection_broke(const Connection& connection, const Error& error);

  // Told once when connections start failing (a restart, a failover, a killed connection) and
  // once when a new connection succeeds again, so that long-running consumers can say so.
  // Set before the pool is shared between threads.
  void set_outage_reporter(std::function<void(std::string_view)> report) {
    report_ = std::move(report);
  }

 private:
  static constexpr int kMaxConflictRetries = 8;
  static constexpr int kMaxReconnects = 3;
  static constexpr auto kClusterOutage = std::chrono::seconds(40);

  // How run() is doing with lost connections.
  struct Outage {
    int reconnects = 0;
    std::optional<std::chrono::steady_clock::time_point> since;
  };
  // After a lost connection or a failed connect: whether to try again (after sleeping the
  // backoff), or to give up. A first connect that fails is the caller's to report at once (a
  // wrong DSN, a server that is down), unless a cluster's node answered.
  bool ride_out(const Error& error, Outage& outage, bool connecting);
  // acquire(), or nullopt when a cluster's writer was found to have moved.
  std::optional<Handle> try_acquire(Work work);
  // The node to connect to now and its generation (0 for one server).
  std::pair<const Dsn*, std::uint64_t> target(Dsn& writer_dsn);

  void release(std::unique_ptr<Connection> connection);
  // The outage bookkeeping behind set_outage_reporter.
  void connection_lost(const Error& error);
  void connected();
  // A new connection to `dsn`, the writer of `generation` (tracked by the cluster, if any).
  std::unique_ptr<Connection> open(const Dsn& dsn, std::uint64_t generation);

  Dsn dsn_;
  std::unique_ptr<Cluster> cluster_;
  int max_size_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int open_ = 0;

  std::function<void(std::string_view)> report_;
  std::mutex outage_mutex_;
  std::optional<std::chrono::steady_clock::time_point> outage_since_;
  bool ever_connected_ = false;
};

template <typename F>
auto Pool::run(OnLostConnection policy, Work work, F&& fn)
    -> std::invoke_result_t<F&, Connection&, const Attempt&> {
  Attempt attempt;
  int conflicts = 0;
  Outage outage;
  const Backoff backoff;
  for (;; ++attempt.number) {
    std::optional<Handle> held;
    try {
      held.emplace(acquire(work));
    } catch (const Error& error) {
      if (error.code() != Errc::kUnavailable || !ride_out(error, outage, true)) throw;
      continue;
    }
    Connection& connection = **held;
    try {
      return fn(connection, static_cast<const Attempt&>(attempt));
    } catch (const Error& error) {
      if (connection.in_transaction()) connection.rollback();
      if (error.code() == Errc::kCommitUnknown) throw;
      if (connection.broken()) {
        connection_lost(error);
        if (cluster_) cluster_->failed(connection.generation());
        // CR_SERVER_GONE_ERROR (2006) means the request was never sent, and 1047 that the node
        // refused it (not ready): both ran nothing. 1180 is a write whose commit could not
        // replicate: a writer cut off from the other nodes while it commits may have delivered
        // the write set to them, and they commit it (the cluster fault run's network cuts:
        // a message stored twice), so it is unknown too.
        // A group member's refusals (super_read_only, offline, a held statement given up) ran
        // nothing either.
        if (policy == OnLostConnection::kCommitUnknown && error.server_errno() != 2006 &&
            error.server_errno() != 1047 &&
            !(connection.group_member() && is_group_refusal(error.server_errno()))) {
          throw Error(Errc::kCommitUnknown,
                      std::string(error.server_errno() == 1180 ||
                                          (connection.group_member() &&
                                           error.server_errno() == 3100)
                                      ? "the node lost the cluster while committing: the write "
                                        "may or may not have committed ("
                                      : "the connection broke before the server answered: the "
                                        "write may or may not have committed (") +
                          error.what() + ")",
                      error.server_errno());
        }
        held.reset();
        discard_idle();
        if (!ride_out(error, outage, false)) throw;
        attempt.after_connection_loss = true;
        continue;
      }
      if (error.code() == Errc::kAborted && ++conflicts <= kMaxConflictRetries) {
        std::this_thread::sleep_for(backoff.delay(conflicts));
        continue;
      }
      throw;
    }
  }
}

}  // namespace txmq::internal
