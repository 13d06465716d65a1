#include "db/pool.h"

#include <fmt/format.h>

#include <algorithm>

namespace txmq::internal {

namespace {
// A connection idle longer than this is pinged before use: a server restart or a wait_timeout
// would otherwise surface as an error on the caller's first statement.
constexpr auto kPingAfterIdle = std::chrono::seconds(2);
}  // namespace

Pool::Pool(Dsn dsn, int max_size) : dsn_(std::move(dsn)), max_size_(max_size < 1 ? 1 : max_size) {}

Pool::~Pool() = default;

Pool::Handle Pool::acquire(Work work) {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!idle_.empty()) {
      // The most recently used connection in the wanted mode, else the most recently used.
      const bool want_autocommit = work == Work::kStatements;
      auto match = std::find_if(idle_.rbegin(), idle_.rend(),
                                [&](const auto& c) { return c->autocommit() == want_autocommit; });
      if (match != idle_.rend()) std::iter_swap(match, idle_.rbegin());
      std::unique_ptr<Connection> connection = std::move(idle_.back());
      idle_.pop_back();
      lock.unlock();
      if (std::chrono::steady_clock::now() - connection->last_used() < kPingAfterIdle ||
          connection->ping()) {
        return Handle(this, std::move(connection));
      }
      connection.reset();
      lock.lock();
      --open_;
      continue;
    }
    if (open_ < max_size_) {
      ++open_;
      lock.unlock();
      auto give_back_slot = [&] {
        lock.lock();
        --open_;
        available_.notify_one();
      };
      try {
        auto connection = std::make_unique<Connection>(dsn_);
        connected();
        return Handle(this, std::move(connection));
      } catch (const Error& error) {
        if (error.code() == Errc::kUnavailable) connection_lost(error);
        give_back_slot();
        throw;
      } catch (...) {
        give_back_slot();
        throw;
      }
    }
    available_.wait(lock);
  }
}

void Pool::discard_idle() {
  std::vector<std::unique_ptr<Connection>> closing;
  {
    std::lock_guard lock(mutex_);
    closing.swap(idle_);
    open_ -= static_cast<int>(closing.size());
  }
  available_.notify_all();
}

void Pool::connection_lost(const Error& error) {
  {
    std::lock_guard lock(outage_mutex_);
    // Failing to connect at all is the caller's error to report, not an outage.
    if (outage_since_ || !ever_connected_) return;
    outage_since_ = std::chrono::steady_clock::now();
  }
  if (report_) report_(fmt::format("database connection lost: {}; reconnecting", error.what()));
}

void Pool::connected() {
  std::chrono::steady_clock::duration down{};
  {
    std::lock_guard lock(outage_mutex_);
    ever_connected_ = true;
    if (!outage_since_) return;
    down = std::chrono::steady_clock::now() - *outage_since_;
    outage_since_.reset();
  }
  if (report_) {
    report_(fmt::format("connected to {} again after {:.1f} s", dsn_.describe(),
                        std::chrono::duration<double>(down).count()));
  }
}

void Pool::release(std::unique_ptr<Connection> connection) {
  if (connection->in_transaction()) connection->rollback();
  std::lock_guard lock(mutex_);
  if (connection->broken()) {
    --open_;
    connection.reset();
  } else {
    idle_.push_back(std::move(connection));
  }
  available_.notify_one();
}

}  // namespace txmq::internal
