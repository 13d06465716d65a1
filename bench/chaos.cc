// Chaos and pressure cells: open-loop producers in this process, consumers as two child processes
// (`txmq bench-worker`, a txmq::Worker each), phases warm-up, clean, fault, recovery, a sample
// every 5 s, and every message counted by identity at the end.
#include "chaos.h"

#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "child_process.h"
#include "db/connection.h"
#include "db/dsn.h"
#include "harness.h"
#include "report.h"
#include "txmq/client.h"
#include "txmq/error.h"
#include "txmq/local.h"
#include "workloads.h"

namespace txmq::bench {
namespace {

// The load. 400 messages/s is well under what 2 x 8 Worker threads drain on the 2-core test
// machine (about 1,000/s with 1 ms of work each: the burst cell), so that a recovered queue can
// catch up; the
// published PostgreSQL runs offered 600/s (chaos) and 800/s (pressure) on a 24-core machine.
constexpr double kOfferedRate = 400;
constexpr int kConsumerProcesses = 2;
constexpr int kThreadsPerProcess = 8;
constexpr double kWorkMs = 1;
// Enough that a send slowed down (purge lag, a loaded machine) still leaves each thread time for
// its share of the offered rate: 16 threads at 400/s give every send 40 ms. With 4, sends of
// over 10 ms during the snapshot cells held the offered load back, which measured the
// producers rather than the queue.
constexpr int kProducerThreads = 16;
constexpr double kSampleSeconds = 5;
// A killed consumer's messages come back after this; Workers extend it while handlers run.
constexpr double kLeaseSeconds = 10;
constexpr std::size_t kPayloadSize = 256;
constexpr double kHighLoadMultiplier = 1.5;
constexpr int kReaders = 4;
// The cells' targets (docs/benchmarks.md, "Chaos and pressure").
constexpr double kAfterTarget = 0.95;
constexpr double kDuringPressureTarget = 0.90;
constexpr double kRecoveredShare = 0.90;  // "time back to 90 % of clean"

const std::string kTopic = "txmq_bench_chaos";
// The topic's message table (group default, partition 0: doc/schema.md), which the readers and
// the held snapshot count. A constant, never input.
const std::string kMessageTable = "txmq_q_txmq_bench_chaos";

using TimePoint = SteadyClock::time_point;

TimePoint after(TimePoint t, double seconds) {
  return t + std::chrono::duration_cast<SteadyClock::duration>(
                 std::chrono::duration<double>(seconds));
}

enum class Fault {
  kServerRestartTerm,
  kServerRestartKill,
  kConnectionKills,
  kPoolExhaustion,
  kConsumerKill,
  kRepeatedConsumerKills,
  kHeldSnapshot,
  kActiveReaders,
  kHighLoad,
  kBurst,
};

struct Phases {
  double warmup;
  double clean;
  double fault;
  double recovery;
  double fault_start() const { return warmup + clean; }
  double recovery_start() const { return fault_start() + fault; }
  double end() const { return recovery_start() + recovery; }
};

struct Cell {
  std::string id;
  std::string name;
  Fault fault;
  bool needs_restartable_server = false;
  bool pressure = false;  // also: during the fault >= 90 % of clean
  Phases phases;
};

std::vector<Cell> all_cells_for(const ChaosOptions& o) {
  // Phase lengths of the published harness for chaos (30 s, 60 s, 60 s, 60 s); its pressure
  // faults last 240 s, ours 120 s (the full set then fits in under 40 minutes).
  const Phases chaos{30, 60, 60, 60};
  const Phases pressure{30, 60, 120, 60};
  const Phases quick{5, 20, 20, 20};
  if (o.quick) {
    return {{"chaos.restart_kill", "database SIGKILL, restarted after 10 s",
             Fault::kServerRestartKill, true, false, quick},
            {"pressure.held_snapshot", "REPEATABLE READ snapshot held 20 s", Fault::kHeldSnapshot,
             false, true, quick}};
  }
  std::vector<Cell> cells;
  if (o.chaos) {
    cells.push_back({"chaos.restart_term", "database SIGTERM, restarted after 30 s",
                     Fault::kServerRestartTerm, true, false, chaos});
    cells.push_back({"chaos.restart_kill", "database SIGKILL, restarted after 30 s",
                     Fault::kServerRestartKill, true, false, chaos});
    cells.push_back({"chaos.connection_kills", "busy sessions KILLed twice a second",
                     Fault::kConnectionKills, false, false, chaos});
    cells.push_back({"chaos.pool_exhaustion", "another client holds max_connections less 10",
                     Fault::kPoolExhaustion, false, false, chaos});
    cells.push_back({"chaos.consumer_kill", "1 of 2 consumer processes SIGKILLed for 30 s",
                     Fault::kConsumerKill, false, false, chaos});
    cells.push_back({"chaos.repeated_kills", "a consumer process SIGKILLed every 20 s",
                     Fault::kRepeatedConsumerKills, false, false, chaos});
  }
  if (o.pressure) {
    cells.push_back({"pressure.held_snapshot", "REPEATABLE READ snapshot held 120 s",
                     Fault::kHeldSnapshot, false, true, pressure});
    cells.push_back({"pressure.active_readers", "4 snapshots counting the topic every 0.1 s",
                     Fault::kActiveReaders, false, true, pressure});
    cells.push_back({"pressure.high_load", "offered load 1.5x for 120 s", Fault::kHighLoad,
                     false, false, pressure});
    cells.push_back({"pressure.burst", "a burst of 30 s of load at once", Fault::kBurst, false,
                     false, pressure});
  }
  return cells;
}

std::vector<Cell> cells_for(const ChaosOptions& o) {
  std::vector<Cell> cells = all_cells_for(o);
  if (o.cells.empty()) return cells;
  std::erase_if(cells, [&](const Cell& c) {
    return std::find(o.cells.begin(), o.cells.end(), c.id) == o.cells.end();
  });
  return cells;
}

// A handled message as a consumer process reported it.
struct Completion {
  std::uint64_t seq;
  std::int64_t send_ns;   // the producer's clock just before send()
  std::int64_t start_ns;  // the handler's start
};

class Completions {
 public:
  void add(const Completion& c) {
    std::lock_guard lock(mutex_);
    all_.push_back(c);
  }
  // Those added since *cursor, which moves past them.
  std::vector<Completion> take_new(std::size_t& cursor) const {
    std::lock_guard lock(mutex_);
    std::vector<Completion> out(all_.begin() + static_cast<std::ptrdiff_t>(cursor), all_.end());
    cursor = all_.size();
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Completion> all_;
};

// The two consumer processes, each with a thread reading its completions.
class ConsumerFleet {
 public:
  ConsumerFleet(std::string dsn, Completions& sink) : dsn_(std::move(dsn)), sink_(sink) {
    for (int i = 0; i < kConsumerProcesses; ++i) start(i);
  }
  ~ConsumerFleet() {
    for (Slot& s : slots_) end(s, SIGKILL, 0);
  }
  ConsumerFleet(const ConsumerFleet&) = delete;
  ConsumerFleet& operator=(const ConsumerFleet&) = delete;

  // Starts process i and returns once its Worker runs.
  void start(int i) {
    std::lock_guard lock(mutex_);
    Slot& s = slots_[static_cast<std::size_t>(i)];
    end(s, SIGKILL, 0);
    s.process = std::make_unique<ChildProcess>(
        std::vector<std::string>{"bench-worker", kTopic, "--threads",
                                 std::to_string(kThreadsPerProcess), "--work-ms",
                                 fmt::format("{}", kWorkMs), "--lease",
                                 fmt::format("{}", kLeaseSeconds)},
        dsn_);
    const std::string first = s.process->line();
    if (first != "ready") {
      throw std::runtime_error("a bench-worker process did not start (see its stderr above)");
    }
    ChildProcess* process = s.process.get();
    s.reader = std::thread([this, process] {
      for (std::string line = process->line(); !line.empty(); line = process->line()) {
        unsigned long long seq = 0;
        long long sent = 0;
        long long start = 0;
        if (std::sscanf(line.c_str(), "%llu %lld %lld", &seq, &sent, &start) == 3) {
          sink_.add({seq, sent, start});
        }
      }
    });
  }
  void kill(int i) {
    std::lock_guard lock(mutex_);
    end(slots_[static_cast<std::size_t>(i)], SIGKILL, 0);
  }
  // SIGTERM: each Worker finishes its running handlers and gives back what it holds.
  void stop_all() {
    std::lock_guard lock(mutex_);
    for (Slot& s : slots_) end(s, SIGTERM, 30);
  }

 private:
  struct Slot {
    std::unique_ptr<ChildProcess> process;
    std::thread reader;
  };

  // Signals the process, waits up to `grace` seconds before a SIGKILL, then reads its output to
  // the end (the reader stops at EOF).
  static void end(Slot& s, int sig, double grace) {
    if (!s.process) return;
    s.process->signal(sig);
    if (!s.process->wait_exit(grace)) {
      s.process->signal(SIGKILL);
      s.process->wait_exit(30);
    }
    if (s.reader.joinable()) s.reader.join();
    s.process.reset();
  }

  std::string dsn_;
  Completions& sink_;
  std::mutex mutex_;
  Slot slots_[kConsumerProcesses];
};

// Open-loop producers: kProducerThreads threads send at the offered rate (times a multiplier) on
// a fixed schedule, whatever the queue does; sends that fall behind (an outage) are made as soon
// as the queue takes them again. A failed send is retried after 100 ms as a new message (a new
// sequence number): only acknowledged sends are owed a delivery.
class Producers {
 public:
  explicit Producers(Client& client) : client_(client) {}
  ~Producers() { stop(); }
  Producers(const Producers&) = delete;
  Producers& operator=(const Producers&) = delete;

  void start() {
    const TimePoint begin = SteadyClock::now();
    for (int i = 0; i < kProducerThreads; ++i) {
      threads_.emplace_back([this, begin, i] { run(begin, i); });
    }
  }
  void stop() {
    stopping_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  void set_multiplier(double m) { multiplier_ = m; }
  std::uint64_t next_seq() { return seq_++; }
  void acknowledged(const std::vector<std::uint64_t>& seqs) {
    std::lock_guard lock(mutex_);
    acked_.insert(acked_.end(), seqs.begin(), seqs.end());
    acked_count_ += seqs.size();
  }
  std::uint64_t acked_count() const { return acked_count_.load(); }
  std::uint64_t failed_sends() const { return failed_.load(); }
  // Whether the send of `seq` failed (it may have committed all the same).
  bool failed(std::uint64_t seq) const {
    std::lock_guard lock(mutex_);
    return std::find(failed_seqs_.begin(), failed_seqs_.end(), seq) != failed_seqs_.end();
  }
  std::vector<std::uint64_t> acked() const {
    std::lock_guard lock(mutex_);
    return acked_;
  }
  static std::string payload(std::uint64_t seq) {
    std::string p = fmt::format("{} {} ", seq, monotonic_ns());
    p.resize(kPayloadSize, '.');
    return p;
  }

 private:
  void run(TimePoint begin, int index) {
    // Threads start a fraction of the interval apart, so that sends are spread evenly.
    TimePoint next = after(begin, index / kOfferedRate);
    while (!stopping_) {
      const TimePoint now = SteadyClock::now();
      if (now < next) {
        std::this_thread::sleep_until(std::min(next, after(now, 0.05)));
        continue;
      }
      const std::uint64_t seq = next_seq();
      try {
        client_.send(kTopic, payload(seq));
        acknowledged({seq});
        next = after(next, kProducerThreads / (kOfferedRate * multiplier_.load()));
      } catch (const Error&) {
        ++failed_;
        {
          std::lock_guard lock(mutex_);
          failed_seqs_.push_back(seq);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  Client& client_;
  std::atomic<bool> stopping_{false};
  std::atomic<double> multiplier_{1.0};
  std::atomic<std::uint64_t> seq_{1};
  std::atomic<std::uint64_t> acked_count_{0};
  std::atomic<std::uint64_t> failed_{0};
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> acked_;
  std::vector<std::uint64_t> failed_seqs_;  // a few hundred at most: an outage's retries
  std::vector<std::thread> threads_;
};

// InnoDB's history list length (undo logs not yet purged), on a connection of its own that is
// made again after an outage. nullopt while the server cannot be asked.
class HistoryLength {
 public:
  explicit HistoryLength(internal::Dsn dsn) : dsn_(std::move(dsn)) {}
  std::optional<std::int64_t> read() {
    try {
      if (!connection_) connection_ = std::make_unique<internal::Connection>(dsn_);
      // MariaDB says whether a metric is on in ENABLED (1/0), MySQL in STATUS ('enabled').
      internal::Result r = connection_->execute(fmt::format(
          "SELECT `COUNT`, {} FROM information_schema.INNODB_METRICS "
          "WHERE NAME = 'trx_rseg_history_len'",
          connection_->server().mysql ? "`STATUS` = 'enabled'" : "`ENABLED`"));
      if (!r.rows.empty() && r.rows[0].i64(1) != 0) return r.rows[0].i64(0);
      // Off on this server: the status variable says the same.
      r = connection_->execute("SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'");
      if (!r.rows.empty()) return internal::Row::parse_integer(r.rows[0].bytes(1));
      return std::nullopt;
    } catch (const Error&) {
      connection_.reset();
      return std::nullopt;
    }
  }

 private:
  internal::Dsn dsn_;
  std::unique_ptr<internal::Connection> connection_;
};

// What a fault thread has to work with, and what it tells back.
struct FaultRun {
  const Cell& cell;
  const ChaosOptions& options;
  internal::Dsn dsn;
  TimePoint start;  // the fault phase's
  TimePoint deadline;
  ConsumerFleet& fleet;
  Producers& producers;
  Client& client;
  std::atomic<bool>& abort;
  // When the disturbance ended (server back, consumer restarted, holders released): time back
  // to 90 % is counted from here.
  TimePoint disturbance_end{};
  std::string note;
  std::string error;

  void sleep_until(TimePoint t) const {
    while (!abort && SteadyClock::now() < t) {
      std::this_thread::sleep_until(std::min(t, after(SteadyClock::now(), 0.1)));
    }
  }
  double since_start() const { return seconds_between(start, SteadyClock::now()); }
};

void restart_server(FaultRun& run, int sig) {
  const LocalServerStatus status = LocalServer::status({.home = run.options.local_home});
  if (!status.pid) throw std::runtime_error("the local server is not running");
  const int pid = *status.pid;
  kill(pid, sig);
  // A SIGTERM shuts down cleanly (seconds); a SIGKILL is gone at once. The server may be our
  // child (this process started it): reap it, or it lingers as a zombie.
  while (!run.abort) {
    waitpid(pid, nullptr, WNOHANG);
    if (::kill(pid, 0) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double stopped = run.since_start();
  run.sleep_until(after(run.start, run.cell.phases.fault / 2));
  const double starting = run.since_start();
  LocalServer::ensure_running({.home = run.options.local_home});
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("stopped in {:.1f} s; started at +{:.1f} s, accepting at +{:.1f} s",
                         stopped, starting, run.since_start());
  run.sleep_until(run.deadline);
}

// Twice a second, KILL CONNECTION for every session of the queue's database that is running a
// statement or holds a transaction open (the published harness's pg_terminate_backend filter:
// active or idle in transaction); idle pooled connections are left. That hits consumers and
// producers alike.
void kill_connections(FaultRun& run) {
  std::unique_ptr<internal::Connection> admin;
  std::uint64_t kills = 0;
  int rounds = 0;
  while (!run.abort && SteadyClock::now() < run.deadline) {
    const TimePoint round = SteadyClock::now();
    try {
      if (!admin) admin = std::make_unique<internal::Connection>(run.dsn);
      const internal::Result r = admin->execute(
          "SELECT p.ID FROM information_schema.PROCESSLIST p "
          "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
          "WHERE p.DB = DATABASE() AND p.ID <> CONNECTION_ID() "
          "AND p.COMMAND NOT IN ('Daemon', 'Binlog Dump') "
          "AND (p.COMMAND <> 'Sleep' OR t.trx_id IS NOT NULL)");
      for (const internal::Row& row : r.rows) {
        try {
          // An id the server just gave us, formatted as an integer (KILL takes no placeholder).
          admin->query(fmt::format("KILL CONNECTION {}", row.u64(0)));
          ++kills;
        } catch (const Error&) {
          if (admin->broken()) throw;  // else it had gone by itself: unknown thread id
        }
      }
    } catch (const Error&) {
      admin.reset();
    }
    ++rounds;
    run.sleep_until(std::min(run.deadline, after(round, 0.5)));
  }
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("{} connections killed in {} rounds", kills, rounds);
}

// Another client opens connections until the server has 10 left, holds them through the fault
// and closes them at its end.
void exhaust_connections(FaultRun& run) {
  std::int64_t max_connections = 0;
  std::int64_t in_use = 0;
  {
    internal::Connection admin(run.dsn);
    max_connections = admin.execute("SELECT @@max_connections").rows.at(0).i64(0);
    in_use = internal::Row::parse_integer(
        admin.execute("SHOW GLOBAL STATUS LIKE 'Threads_connected'").rows.at(0).bytes(1));
  }
  const std::int64_t wanted = max_connections - in_use - 10;
  std::vector<std::unique_ptr<internal::Connection>> held;
  std::string refused;
  while (!run.abort && static_cast<std::int64_t>(held.size()) < wanted) {
    try {
      held.push_back(std::make_unique<internal::Connection>(run.dsn));
    } catch (const Error& e) {
      refused = fmt::format(" (the next was refused: {})", e.what());
      break;
    }
  }
  const double filled = run.since_start();
  const std::size_t holding = held.size();
  run.sleep_until(run.deadline);
  held.clear();
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("held {} of max_connections {} ({} in use before), all open at +{:.1f} s{}",
                         holding, max_connections, in_use, filled, refused);
}

void kill_consumer(FaultRun& run) {
  run.fleet.kill(0);
  run.sleep_until(after(run.start, run.cell.phases.fault / 2));
  run.fleet.start(0);
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("consumer 1 of 2 SIGKILLed at +0 s, running again at +{:.1f} s",
                         run.since_start());
  run.sleep_until(run.deadline);
}

void kill_consumer_repeatedly(FaultRun& run) {
  int kills = 0;
  for (TimePoint next = run.start; !run.abort && next < run.deadline; next = after(next, 20)) {
    run.sleep_until(next);
    run.fleet.kill(0);
    run.fleet.start(0);
    ++kills;
  }
  run.sleep_until(run.deadline);
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("consumer 1 of 2 SIGKILLed and restarted {} times, every 20 s", kills);
}

// A REPEATABLE READ transaction with a read view of the topic's table: InnoDB can purge no
// undo log younger than it (the history list grows), and claims walk delete-marked rows that
// cannot be purged.
std::unique_ptr<internal::Connection> open_snapshot(const internal::Dsn& dsn) {
  auto c = std::make_unique<internal::Connection>(dsn);
  c->query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  c->query("START TRANSACTION WITH CONSISTENT SNAPSHOT");
  c->execute(fmt::format("SELECT COUNT(*) FROM {}", kMessageTable));
  return c;
}

void hold_snapshot(FaultRun& run) {
  auto c = open_snapshot(run.dsn);
  run.sleep_until(run.deadline);
  c->query("COMMIT");
  run.disturbance_end = SteadyClock::now();
  run.note = "one snapshot held for the whole fault phase";
}

void run_readers(FaultRun& run) {
  std::atomic<std::uint64_t> scans{0};
  std::mutex mutex;
  Latencies scan_ms;
  std::string failure;
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      try {
        auto c = open_snapshot(run.dsn);
        Latencies mine;
        while (!run.abort && SteadyClock::now() < run.deadline) {
          const TimePoint begin = SteadyClock::now();
          c->execute(fmt::format("SELECT COUNT(*) FROM {}", kMessageTable));
          mine.add_since(begin);
          ++scans;
          run.sleep_until(std::min(run.deadline, after(SteadyClock::now(), 0.1)));
        }
        c->query("COMMIT");
        std::lock_guard lock(mutex);
        scan_ms.merge(mine);
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        failure = e.what();
      }
    });
  }
  for (std::thread& t : readers) t.join();
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("{} counts by {} readers, p50 {:.1f} ms, p99 {:.1f} ms{}", scans.load(),
                         kReaders, scan_ms.percentile(50), scan_ms.percentile(99),
                         failure.empty() ? "" : "; a reader failed: " + failure);
}

void high_load(FaultRun& run) {
  run.producers.set_multiplier(kHighLoadMultiplier);
  run.sleep_until(run.deadline);
  run.producers.set_multiplier(1.0);
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("offered {:.0f}/s", kOfferedRate * kHighLoadMultiplier);
}

// 30 s of the offered load (10 s in the short form) sent at once, in batches of 500, on top of
// the steady sends.
void burst(FaultRun& run) {
  const int total = static_cast<int>(kOfferedRate * run.cell.phases.fault / 4);
  std::vector<std::string> payloads;
  std::vector<std::uint64_t> seqs;
  int sent = 0;
  while (sent < total && !run.abort) {
    payloads.clear();
    seqs.clear();
    for (int i = 0; i < 500 && sent + i < total; ++i) {
      seqs.push_back(run.producers.next_seq());
      payloads.push_back(Producers::payload(seqs.back()));
    }
    std::vector<OutgoingMessage> batch;
    for (std::string& p : payloads) {
      OutgoingMessage m;
      m.payload = std::move(p);
      batch.push_back(std::move(m));
    }
    run.client.send_batch(kTopic, batch);
    run.producers.acknowledged(seqs);
    sent += static_cast<int>(seqs.size());
  }
  run.disturbance_end = SteadyClock::now();
  run.note = fmt::format("{} messages sent in {:.1f} s", sent, run.since_start());
  run.sleep_until(run.deadline);
}

void inject(FaultRun& run) {
  switch (run.cell.fault) {
    case Fault::kServerRestartTerm: return restart_server(run, SIGTERM);
    case Fault::kServerRestartKill: return restart_server(run, SIGKILL);
    case Fault::kConnectionKills: return kill_connections(run);
    case Fault::kPoolExhaustion: return exhaust_connections(run);
    case Fault::kConsumerKill: return kill_consumer(run);
    case Fault::kRepeatedConsumerKills: return kill_consumer_repeatedly(run);
    case Fault::kHeldSnapshot: return hold_snapshot(run);
    case Fault::kActiveReaders: return run_readers(run);
    case Fault::kHighLoad: return high_load(run);
    case Fault::kBurst: return burst(run);
  }
}

struct Sample {
  double t;  // end of the 5 s window, seconds from the start
  std::string phase;
  double enqueued_per_s;
  double completed_per_s;
  std::int64_t depth;  // acknowledged sends not yet handled
  double p50_ms, p95_ms, p99_ms;  // claim latency: send to handler start
  std::optional<std::int64_t> history_length;
};

struct CellResult {
  std::vector<Sample> samples;
  double clean_rate = 0;
  double during_share = 0;
  double after_share = 0;
  std::optional<double> seconds_back;  // to 90 % of clean, from the disturbance's end
  double clean_p99_ms = 0;
  double fault_p99_ms = 0;
  std::int64_t max_history_length = 0;
  std::uint64_t acked = 0;
  std::uint64_t lost = 0;
  std::uint64_t duplicated = 0;
  std::uint64_t failed_sends = 0;
  std::uint64_t delivered_unacknowledged = 0;  // sends that failed but had committed
  std::string note;
  std::vector<std::string> missed;
};

const char* phase_at(const Phases& p, double t) {
  if (t <= p.warmup) return "warm-up";
  if (t <= p.fault_start()) return "clean";
  if (t <= p.recovery_start()) return "fault";
  if (t <= p.end()) return "recovery";
  return "drain";
}

class CellRunner {
 public:
  CellRunner(const ChaosOptions& options, const Cell& cell, FILE* out)
      : options_(options), cell_(cell), out_(out), dsn_(internal::parse_dsn(options.dsn)) {}

  CellResult run() {
    ClientOptions co;
    co.dsn = options_.dsn;
    co.pool_size = kProducerThreads + 4;
    co.consumer_name = "txmq-bench-producer";
    co.on_warning = [](std::string_view) {};  // reconnections: the outage is what is measured
    Client client(co);
    TopicOptions topic;
    topic.lease = std::chrono::seconds(static_cast<int>(kLeaseSeconds));
    // Repeated kills must not dead-letter a message (that would count as lost service).
    topic.max_attempts = 1000;
    fresh_topic(client, kTopic, topic);

    const Phases& ph = cell_.phases;
    std::fprintf(out_, "\n%s: %s\n", cell_.id.c_str(), cell_.name.c_str());
    std::fprintf(out_, "  %6s %-9s %8s %8s %7s %8s %8s %8s %9s\n", "t s", "phase", "enq/s",
                 "done/s", "depth", "p50 ms", "p95 ms", "p99 ms", "history");
    std::fflush(out_);

    Completions completions;
    ConsumerFleet fleet(options_.dsn, completions);
    Producers producers(client);
    HistoryLength history(dsn_);
    std::atomic<bool> abort{false};
    const TimePoint t0 = SteadyClock::now();
    const std::int64_t t0_ns = monotonic_ns();
    producers.start();

    std::unique_ptr<FaultRun> fault;
    std::thread fault_thread;
    struct JoinOnExit {
      std::atomic<bool>& abort;
      std::thread& thread;
      ~JoinOnExit() {
        abort = true;
        if (thread.joinable()) thread.join();
      }
    } join_on_exit{abort, fault_thread};

    CellResult result;
    std::size_t cursor = 0;
    std::vector<Completion> all;
    std::unordered_map<std::uint64_t, int> handled;  // seq -> times handled
    std::uint64_t acked_before = 0;
    std::uint64_t handled_acked = 0;  // acknowledged sends handled at least once
    auto absorb = [&](std::vector<Completion> fresh, Latencies* latencies) {
      for (const Completion& c : fresh) {
        if (++handled[c.seq] == 1 && !producers.failed(c.seq)) ++handled_acked;
        if (latencies != nullptr) latencies->add(static_cast<double>(c.start_ns - c.send_ns) / 1e6);
      }
      all.insert(all.end(), fresh.begin(), fresh.end());
      return fresh.size();
    };

    const int windows = static_cast<int>(ph.end() / kSampleSeconds + 0.5);
    for (int w = 1; w <= windows; ++w) {
      const double t = w * kSampleSeconds;
      const double window_start = t - kSampleSeconds;
      if (!fault && window_start >= ph.fault_start() - 1e-9) {
        fault = std::make_unique<FaultRun>(FaultRun{cell_, options_, dsn_, SteadyClock::now(),
                                                    after(t0, ph.recovery_start()), fleet,
                                                    producers, client, abort, TimePoint{}, {},
                                                    {}});
        FaultRun* f = fault.get();
        fault_thread = std::thread([f] {
          try {
            inject(*f);
          } catch (const std::exception& e) {
            f->error = e.what();
            if (f->disturbance_end == TimePoint{}) f->disturbance_end = SteadyClock::now();
          }
        });
      }
      std::this_thread::sleep_until(after(t0, t));
      Latencies latencies;
      const std::size_t done = absorb(completions.take_new(cursor), &latencies);
      const std::uint64_t acked = producers.acked_count();
      Sample s;
      s.t = t;
      s.phase = phase_at(ph, t);
      s.enqueued_per_s = static_cast<double>(acked - acked_before) / kSampleSeconds;
      s.completed_per_s = static_cast<double>(done) / kSampleSeconds;
      s.depth = static_cast<std::int64_t>(acked) - static_cast<std::int64_t>(handled_acked);
      s.p50_ms = latencies.percentile(50);
      s.p95_ms = latencies.percentile(95);
      s.p99_ms = latencies.percentile(99);
      s.history_length = history.read();
      acked_before = acked;
      print(s);
      result.samples.push_back(std::move(s));
    }
    producers.stop();
    if (fault_thread.joinable()) fault_thread.join();

    // The drain: until every acknowledged send was handled, or two leases and a minute passed.
    const std::vector<std::uint64_t> acked = producers.acked();
    const TimePoint drain_deadline = after(SteadyClock::now(), 60 + 2 * kLeaseSeconds);
    auto missing = [&] {
      std::uint64_t n = 0;
      for (std::uint64_t seq : acked) n += handled.count(seq) == 0 ? 1 : 0;
      return n;
    };
    while (missing() > 0 && SteadyClock::now() < drain_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      absorb(completions.take_new(cursor), nullptr);
    }
    const double drain_seconds = seconds_between(after(t0, ph.end()), SteadyClock::now());
    fleet.stop_all();
    absorb(completions.take_new(cursor), nullptr);

    if (!fault) throw std::runtime_error("the fault phase never started");
    summarize(result, all, handled, acked, t0_ns, t0, *fault);
    result.failed_sends = producers.failed_sends();
    result.note = fault->note + (fault->error.empty() ? "" : "; FAULT FAILED: " + fault->error);
    if (result.failed_sends > 0) {
      result.note += fmt::format("; {} sends failed and were retried", result.failed_sends);
    }
    if (result.delivered_unacknowledged > 0) {
      result.note += fmt::format(" ({} of them had committed)", result.delivered_unacknowledged);
    }
    result.note += fmt::format("; drained {:.1f} s after the recovery phase", drain_seconds);
    drop_if_exists(client, kTopic);
    return result;
  }

 private:
  void print(const Sample& s) const {
    std::fprintf(out_, "  %6.0f %-9s %8s %8s %7s %8.1f %8.1f %8.1f %9s\n", s.t, s.phase.c_str(),
                 with_commas(s.enqueued_per_s).c_str(), with_commas(s.completed_per_s).c_str(),
                 with_commas(static_cast<double>(s.depth)).c_str(), s.p50_ms, s.p95_ms, s.p99_ms,
                 s.history_length ? with_commas(static_cast<double>(*s.history_length)).c_str()
                                  : "-");
    std::fflush(out_);
  }

  void summarize(CellResult& r, const std::vector<Completion>& all,
                 const std::unordered_map<std::uint64_t, int>& handled,
                 const std::vector<std::uint64_t>& acked, std::int64_t t0_ns, TimePoint t0,
                 const FaultRun& fault) const {
    const Phases& ph = cell_.phases;
    // Completions by the second of their handler's start, counted from t0.
    const auto seconds = static_cast<std::size_t>(ph.end()) + 1;
    std::vector<double> per_second(seconds, 0);
    Latencies clean_latency;
    Latencies fault_latency;
    for (const Completion& c : all) {
      const double t = static_cast<double>(c.start_ns - t0_ns) / 1e9;
      if (t < 0 || t >= ph.end()) continue;
      per_second[static_cast<std::size_t>(t)] += 1;
      const double ms = static_cast<double>(c.start_ns - c.send_ns) / 1e6;
      if (t >= ph.warmup && t < ph.fault_start()) clean_latency.add(ms);
      if (t >= ph.fault_start() && t < ph.recovery_start()) fault_latency.add(ms);
    }
    auto rate = [&](double from, double to) {
      double n = 0;
      for (auto s = static_cast<std::size_t>(from); s < static_cast<std::size_t>(to); ++s) {
        n += per_second[s];
      }
      return n / (to - from);
    };
    r.clean_rate = rate(ph.warmup, ph.fault_start());
    if (r.clean_rate > 0) {
      r.during_share = rate(ph.fault_start(), ph.recovery_start()) / r.clean_rate;
      r.after_share = rate(ph.recovery_start(), ph.end()) / r.clean_rate;
      // The first second (of those counted from t0) not wholly before the disturbance's end
      // whose completions reach 90 % of the clean rate; counted from the disturbance's end to
      // that second's start (0 when the second of the end itself reaches it).
      const double from = seconds_between(t0, fault.disturbance_end);
      for (auto s = static_cast<std::size_t>(std::floor(from)); s < seconds - 1; ++s) {
        if (per_second[s] >= kRecoveredShare * r.clean_rate) {
          r.seconds_back = std::max(0.0, static_cast<double>(s) - from);
          break;
        }
      }
    }
    r.clean_p99_ms = clean_latency.percentile(99);
    r.fault_p99_ms = fault_latency.percentile(99);
    for (const Sample& s : r.samples) {
      if (s.history_length) r.max_history_length = std::max(r.max_history_length, *s.history_length);
    }
    // By identity: an acknowledged send never handled is lost; a message handled more than
    // once is duplicated (at-least-once allows it after a crash or a lost ack).
    r.acked = acked.size();
    std::unordered_map<std::uint64_t, bool> is_acked;
    for (std::uint64_t seq : acked) {
      is_acked[seq] = true;
      if (handled.count(seq) == 0) ++r.lost;
    }
    for (const auto& [seq, times] : handled) {
      r.duplicated += static_cast<std::uint64_t>(times - 1);
      if (is_acked.count(seq) == 0) ++r.delivered_unacknowledged;
    }
    if (!fault.error.empty()) r.missed.push_back("the fault failed");
    if (r.lost > 0) r.missed.push_back("lost > 0");
    if (r.after_share < kAfterTarget) r.missed.push_back("after < 95 %");
    if (cell_.pressure && r.during_share < kDuringPressureTarget) {
      r.missed.push_back("during < 90 %");
    }
  }

  const ChaosOptions& options_;
  const Cell& cell_;
  FILE* out_;
  internal::Dsn dsn_;
};

std::string percent(double share) { return fmt::format("{:.0f} %", share * 100); }

}  // namespace

std::vector<std::string> chaos_cell_ids() {
  std::vector<std::string> ids;
  ChaosOptions every;
  every.chaos = true;
  every.pressure = true;
  for (const Cell& c : all_cells_for(every)) ids.push_back(c.id);
  return ids;
}

nlohmann::json run_chaos_cells(const ChaosOptions& options) {
  FILE* out = options.json ? stderr : stdout;
  const std::vector<Cell> cells = cells_for(options);
  std::fprintf(out,
               "\nChaos and pressure: %s msgs/s offered by %d producer threads (open loop), "
               "%d consumer processes x %d Worker threads, %.0f ms of work per message; "
               "samples every %.0f s\n",
               with_commas(kOfferedRate).c_str(), kProducerThreads, kConsumerProcesses,
               kThreadsPerProcess, kWorkMs, kSampleSeconds);
  nlohmann::json doc = {{"offered_per_s", kOfferedRate},
                        {"consumer_processes", kConsumerProcesses},
                        {"threads_per_process", kThreadsPerProcess},
                        {"work_ms", kWorkMs},
                        {"cells", nlohmann::json::array()}};
  struct Line {
    const Cell* cell;
    std::optional<CellResult> result;
    std::string skipped;
  };
  std::vector<Line> lines;
  for (const Cell& cell : cells) {
    Line line{&cell, std::nullopt, {}};
    if (cell.needs_restartable_server && options.local_home.empty()) {
      line.skipped =
          "skipped: the bench runs on a server it does not restart (--dsn, TXMQ_DSN, "
          "--binlog or --server)";
      std::fprintf(out, "\n%s: %s\n", cell.id.c_str(), line.skipped.c_str());
    } else {
      try {
        line.result = CellRunner(options, cell, out).run();
        std::fprintf(out, "  %s\n", line.result->note.c_str());
      } catch (const std::exception& e) {
        line.skipped = fmt::format("failed: {}", e.what());
        std::fprintf(out, "  %s\n", line.skipped.c_str());
      }
    }
    nlohmann::json j = {{"id", cell.id}, {"name", cell.name}};
    j["phases_s"] = {cell.phases.warmup, cell.phases.clean, cell.phases.fault,
                     cell.phases.recovery};
    if (line.result) {
      const CellResult& r = *line.result;
      nlohmann::json samples = nlohmann::json::array();
      for (const Sample& s : r.samples) {
        samples.push_back({{"t", s.t},
                           {"phase", s.phase},
                           {"enqueued_per_s", s.enqueued_per_s},
                           {"completed_per_s", s.completed_per_s},
                           {"depth", s.depth},
                           {"claim_p50_ms", s.p50_ms},
                           {"claim_p95_ms", s.p95_ms},
                           {"claim_p99_ms", s.p99_ms},
                           {"history_length", s.history_length
                                                  ? nlohmann::json(*s.history_length)
                                                  : nlohmann::json(nullptr)}});
      }
      j.update({{"clean_per_s", r.clean_rate},
                {"during_share", r.during_share},
                {"after_share", r.after_share},
                {"seconds_back_to_90",
                 r.seconds_back ? nlohmann::json(*r.seconds_back) : nlohmann::json(nullptr)},
                {"claim_p99_clean_ms", r.clean_p99_ms},
                {"claim_p99_fault_ms", r.fault_p99_ms},
                {"max_history_length", r.max_history_length},
                {"acknowledged_sends", r.acked},
                {"lost", r.lost},
                {"duplicated", r.duplicated},
                {"failed_sends", r.failed_sends},
                {"note", r.note},
                {"met", r.missed.empty()},
                {"missed", r.missed},
                {"samples", std::move(samples)}});
    } else {
      j["skipped"] = line.skipped;
    }
    doc["cells"].push_back(std::move(j));
    lines.push_back(std::move(line));
  }

  std::fprintf(out, "\nChaos and pressure: summary (shares of the clean phase's completion rate; "
                    "targets: after >= 95 %%, lost 0, pressure.held_snapshot and "
                    "pressure.active_readers during >= 90 %%)\n");
  std::fprintf(out, "  %-24s %-44s %7s %7s %7s %8s %9s %9s %8s %6s %5s  %s\n", "cell", "fault",
               "clean/s", "during", "after", "back 90%", "p99 clean", "p99 fault", "history",
               "lost", "dup", "target");
  for (const Line& line : lines) {
    if (!line.result) {
      std::fprintf(out, "  %-24s %-44s %s\n", line.cell->id.c_str(), line.cell->name.c_str(),
                   line.skipped.c_str());
      continue;
    }
    const CellResult& r = *line.result;
    std::string target = "met";
    if (!r.missed.empty()) {
      target = "MISSED:";
      for (const std::string& m : r.missed) target += " " + m + ";";
      target.pop_back();
    }
    std::fprintf(out, "  %-24s %-44s %7s %7s %7s %8s %9.1f %9.1f %8s %6s %5s  %s\n",
                 line.cell->id.c_str(), line.cell->name.c_str(),
                 with_commas(r.clean_rate).c_str(), percent(r.during_share).c_str(),
                 percent(r.after_share).c_str(),
                 r.seconds_back ? fmt::format("{:.0f} s", *r.seconds_back).c_str() : "never",
                 r.clean_p99_ms, r.fault_p99_ms,
                 with_commas(static_cast<double>(r.max_history_length)).c_str(),
                 with_commas(static_cast<double>(r.lost)).c_str(),
                 with_commas(static_cast<double>(r.duplicated)).c_str(), target.c_str());
  }
  std::fflush(out);
  return doc;
}

}  // namespace txmq::bench
