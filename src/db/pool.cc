#include "db/pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

namespace txmq::internal {

namespace {
// A connection idle longer than this is pinged before use: a server restart or a wait_timeout
// would otherwise surface as an error on the caller's first statement.
constexpr auto kPingAfterIdle = std::chrono::seconds(2);
}  // namespace

Pool::Pool(Dsn dsn, int max_size)
    : dsn_(std::move(dsn)),
      cluster_(dsn_.is_host_list() ? std::make_unique<Cluster>(dsn_) : nullptr),
      max_size_(max_size < 1 ? 1 : max_size) {}

Pool::~Pool() = default;

std::pair<const Dsn*, std::uint64_t> Pool::target(Dsn& writer_dsn) {
  if (!cluster_) return {&dsn_, 0};
  Cluster::Writer writer = cluster_->writer();
  writer_dsn = std::move(writer.dsn);
  return {&writer_dsn, writer.generation};
}

Pool::Handle Pool::acquire(Work work) {
  for (;;) {
    std::optional<Handle> handle = try_acquire(work);
    if (handle) return std::move(*handle);
  }
}

namespace {

thread_local std::atomic<std::int64_t>* t_acquisitions = nullptr;

void note_acquisition() {
  if (t_acquisitions == nullptr) return;
  t_acquisitions->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count());
}

}  // namespace

void Pool::note_acquisitions(std::atomic<std::int64_t>* at) { t_acquisitions = at; }

std::optional<Pool::Handle> Pool::try_acquire(Work work) {
  Dsn writer_dsn;
  auto [dsn, generation] = target(writer_dsn);
  std::unique_lock lock(mutex_);
  for (;;) {
    std::unique_ptr<Connection> connection;
    if (!idle_.empty()) {
      // The most recently used connection in the wanted mode, else the most recently used.
      const bool want_autocommit = work == Work::kStatements;
      auto match = std::find_if(idle_.rbegin(), idle_.rend(),
                                [&](const auto& c) { return c->autocommit() == want_autocommit; });
      if (match != idle_.rend()) std::iter_swap(match, idle_.rbegin());
      connection = std::move(idle_.back());
      idle_.pop_back();
      lock.unlock();
      note_acquisition();
      if (connection->generation() != generation ||
          (std::chrono::steady_clock::now() - connection->last_used() >= kPingAfterIdle &&
           !connection->ping())) {
        connection.reset();  // to an old writer, or lost
        lock.lock();
        --open_;
        continue;
      }
    } else if (open_ < max_size_) {
      ++open_;
      lock.unlock();
      note_acquisition();
      try {
        connection = open(*dsn, generation);
        connected();
      } catch (const Error& error) {
        if (cluster_) cluster_->failed(generation);
        if (error.code() == Errc::kUnavailable) connection_lost(error);
        lock.lock();
        --open_;
        available_.notify_one();
        throw;
      } catch (...) {
        lock.lock();
        --open_;
        available_.notify_one();
        throw;
      }
    } else {
      available_.wait(lock);
      continue;
    }
    // Every few seconds one caller makes sure the writer is still the cluster's writer.
    if (cluster_ && cluster_->check_due()) {
      try {
        cluster_->check(*connection, generation);
      } catch (const Error&) {
        cluster_->failed(generation);
      }
      if (!cluster_->is_current(generation)) {
        connection.reset();
        {
          std::lock_guard relock(mutex_);
          --open_;
        }
        available_.notify_one();
        discard_idle();
        return std::nullopt;  // the writer moved: look again
      }
    }
    return Handle(this, std::move(connection));
  }
}

std::unique_ptr<Connection> Pool::open(const Dsn& dsn, std::uint64_t generation) {
  auto connection = std::make_unique<Connection>(dsn);
  connection->set_generation(generation);
  if (cluster_) {
    cluster_->track(*connection);  // the heartbeat may cancel it
    cluster_->prepare(*connection);
  }
  return connection;
}

std::unique_ptr<Connection> Pool::connect() {
  Dsn writer_dsn;
  auto [dsn, generation] = target(writer_dsn);
  note_acquisition();
  try {
    return open(*dsn, generation);
  } catch (const Error&) {
    if (cluster_) cluster_->failed(generation);
    throw;
  }
}

bool Pool::is_current(const Connection& connection) {
  return !cluster_ || cluster_->is_current(connection.generation());
}

bool Pool::ride_out(const Error& error, Outage& outage, bool connecting) {
  const auto now = std::chrono::steady_clock::now();
  if (!outage.since) outage.since = now;
  ++outage.reconnects;
  if (cluster_) {
    // Nothing answered yet and never did: most likely a wrong DSN, said at once.
    bool ever;
    {
      std::lock_guard lock(outage_mutex_);
      ever = ever_connected_;
    }
    if (connecting && !ever && !cluster_->replicated() && outage.reconnects > 1) return false;
    if (now - *outage.since > kClusterOutage) return false;
  } else {
    if (connecting) {
      std::lock_guard lock(outage_mutex_);
      if (!ever_connected_) return false;
    }
    if (outage.reconnects > kMaxReconnects) return false;
  }
  (void)error;
  std::this_thread::sleep_for(Backoff{}.delay(std::min(outage.reconnects, 6) + 3));
  return true;
}

void Pool::connection_broke(const Connection& connection, const Error& error) {
  connection_lost(error);
  if (cluster_) cluster_->failed(connection.generation());
  discard_idle();
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
