#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "db/backoff.h"
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

// A bounded pool of connections to one database. Thread-safe.
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

  // A healthy connection; blocks while all max_size are in use. Throws kUnavailable when a new
  // connection cannot be made.
  Handle acquire(Work work = Work::kStatements);

  // Runs fn(Connection&, const Attempt&) and retries it, with jittered backoff and a bound, on a
  // deadlock or lock-wait timeout (its transaction was rolled back) and on a lost connection
  // (with a new connection) where `policy` says that is safe. A transaction fn left open is
  // rolled back. kCommitUnknown is never retried.
  template <typename F>
  auto run(OnLostConnection policy, Work work, F&& fn)
      -> std::invoke_result_t<F&, Connection&, const Attempt&>;
  template <typename F>
  auto run(OnLostConnection policy, F&& fn)
      -> std::invoke_result_t<F&, Connection&, const Attempt&> {
    return run(policy, Work::kStatements, std::forward<F>(fn));
  }

  const Dsn& dsn() const { return dsn_; }

  // Closes the idle connections: after one connection was found lost (a server restart, a
  // failover), its idle siblings are most likely lost too.
  void discard_idle();

  // Told once when connections start failing (a restart, a failover, a killed connection) and
  // once when a new connection succeeds again, so that long-running consumers can say so.
  // Set before the pool is shared between threads.
  void set_outage_reporter(std::function<void(std::string_view)> report) {
    report_ = std::move(report);
  }

 private:
  static constexpr int kMaxConflictRetries = 8;
  static constexpr int kMaxReconnects = 3;

  void release(std::unique_ptr<Connection> connection);
  // The outage bookkeeping behind set_outage_reporter.
  void connection_lost(const Error& error);
  void connected();

  Dsn dsn_;
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
  int reconnects = 0;
  const Backoff backoff;
  for (;; ++attempt.number) {
    Handle connection = acquire(work);
    try {
      return fn(*connection, static_cast<const Attempt&>(attempt));
    } catch (const Error& error) {
      if (connection->in_transaction()) connection->rollback();
      if (error.code() == Errc::kCommitUnknown) throw;
      if (connection->broken()) {
        connection_lost(error);
        // CR_SERVER_GONE_ERROR (2006) means the request was never sent.
        if (policy == OnLostConnection::kCommitUnknown && error.server_errno() != 2006) {
          throw Error(Errc::kCommitUnknown,
                      std::string("the connection broke before the server answered: the write may "
                                  "or may not have committed (") +
                          error.what() + ")",
                      error.server_errno());
        }
        if (++reconnects > kMaxReconnects) throw;
        attempt.after_connection_loss = true;
        discard_idle();
        std::this_thread::sleep_for(backoff.delay(reconnects + 3));
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
