// Long polling in separate processes: wake-up latency and the idle cost of waiting consumers.
#include "waiting.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include "child_process.h"
#include "db/connection.h"
#include "db/dsn.h"

namespace txmq::bench {
namespace {

// A `txmq bench-consumer` child: THREADS threads receive with WAIT and print "ID MONOTONIC_NS".
class ConsumerProcess : public ChildProcess {
 public:
  ConsumerProcess(const std::string& dsn, const std::string& topic, int threads, double wait)
      : ChildProcess({"bench-consumer", topic, "--threads", std::to_string(threads), "--wait",
                      fmt::format("{}", wait)},
                     dsn) {}
};

// The consumer's next line: the id it received and when (monotonic ns).
std::pair<std::uint64_t, std::int64_t> next_receipt(ConsumerProcess& consumer) {
  const std::string line = consumer.line();
  unsigned long long id = 0;
  long long at = 0;
  if (std::sscanf(line.c_str(), "%llu %lld", &id, &at) != 2) {
    throw std::runtime_error("the bench consumer stopped: " + line);
  }
  return {id, at};
}

std::uint64_t questions(internal::Connection& admin) {
  internal::Result r = admin.execute("SHOW GLOBAL STATUS LIKE 'Questions'", {});
  return std::stoull(r.rows.at(0).bytes(1));
}

}  // namespace

Measured wake_latency(const std::string& dsn, Client& producer, const std::string& topic,
                      int samples) {
  ConsumerProcess consumer(dsn, topic, 1, 20);
  if (consumer.line() != "ready") throw std::runtime_error("the bench consumer did not start");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // it is waiting by now
  std::mt19937 rng(42);
  Measured m;
  std::map<std::uint64_t, std::int64_t> sent;
  const auto start = SteadyClock::now();
  for (int i = 0; i < samples; ++i) {
    // Idle gaps, so that each send finds the consumer waiting again.
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 40));
    const std::int64_t before = monotonic_ns();
    const std::uint64_t id = producer.send(topic, "wake");
    sent[id] = before;
    // Its receipt, read before the next send.
    const auto [got_id, at] = next_receipt(consumer);
    auto it = sent.find(got_id);
    if (it == sent.end()) throw std::runtime_error("the bench consumer got an unknown message");
    m.latencies.add(static_cast<double>(at - it->second) / 1e6);
    ++m.messages;
  }
  m.seconds = seconds_between(start, SteadyClock::now());
  return m;
}

Measured wake_after_commit_latency(const std::string& dsn, int samples, const std::string& topic,
                                   const std::function<std::pair<std::uint64_t, std::int64_t>()>& send) {
  ConsumerProcess consumer(dsn, topic, 1, 20);
  if (consumer.line() != "ready") throw std::runtime_error("the bench consumer did not start");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // it is waiting by now
  std::mt19937 rng(42);
  Measured m;
  const auto start = SteadyClock::now();
  for (int i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 40));
    const auto [id, committed] = send();
    const auto [got_id, at] = next_receipt(consumer);
    if (got_id != id) throw std::runtime_error("the bench consumer got an unknown message");
    m.latencies.add(static_cast<double>(at - committed) / 1e6);
    ++m.messages;
  }
  m.seconds = seconds_between(start, SteadyClock::now());
  return m;
}

namespace {

std::int64_t session_statements(internal::Connection& c) {
  std::int64_t n = 0;
  for (const internal::Row& row : c.query_rows("SHOW SESSION STATUS LIKE 'Com\\_%'").rows) {
    n += row.i64(1);
  }
  return n;
}

// One CALL txmq_take_wait in a transaction, acknowledged and committed; the ids and when the CALL
// returned. A CALL that a wake-up ended (1317) is taken again, counted.
std::vector<std::uint64_t> take_waiting(internal::Connection& c, const std::string& topic,
                                        double seconds, std::int64_t& returned, int& interrupted) {
  internal::Result r;
  for (;;) {
    c.begin();
    try {
      r = c.query_rows(fmt::format("CALL txmq_take_wait('{}', NULL, 10, {})", topic, seconds));
      break;
    } catch (const Error& e) {
      c.rollback();
      if (e.server_errno() != 1317) throw;
      ++interrupted;
    }
  }
  returned = monotonic_ns();
  std::vector<std::uint64_t> ids;
  std::string list;
  for (const internal::Row& row : r.rows) {
    ids.push_back(row.u64(0));
    list += fmt::format("{}{}", list.empty() ? "" : ",", row.u64(0));
  }
  if (!ids.empty()) c.query(fmt::format("CALL txmq_ack('{}', NULL, '[{}]')", topic, list));
  c.commit();
  return ids;
}

}  // namespace

Measured sql_take_wait_latency(const std::string& dsn, int samples, const std::string& topic,
                               const std::function<std::pair<std::uint64_t, std::int64_t>()>& send,
                               int& interrupted, double& idle_statements_per_second) {
  internal::Connection taker(internal::parse_dsn(dsn));
  interrupted = 0;
  std::int64_t returned = 0;
  std::int64_t counted = session_statements(taker);
  take_waiting(taker, topic, 1, returned, interrupted);
  const std::int64_t short_wait = session_statements(taker) - counted;
  counted = session_statements(taker);
  take_waiting(taker, topic, 6, returned, interrupted);
  const std::int64_t long_wait = session_statements(taker) - counted;
  idle_statements_per_second = static_cast<double>(long_wait - short_wait) / 5;

  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::uint64_t, std::int64_t> got;  // id -> when its CALL returned
  std::atomic<bool> stop{false};
  std::exception_ptr failed;
  std::thread consumer([&] {
    try {
      while (!stop) {
        std::int64_t at = 0;
        const std::vector<std::uint64_t> ids = take_waiting(taker, topic, 2, at, interrupted);
        std::lock_guard lock(mutex);
        for (std::uint64_t id : ids) got[id] = at;
        arrived.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      failed = std::current_exception();
      arrived.notify_all();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // it is waiting by now
  std::mt19937 rng(42);
  Measured m;
  const auto start = SteadyClock::now();
  try {
    for (int i = 0; i < samples; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 40));
      const auto [id, committed] = send();
      std::unique_lock lock(mutex);
      if (!arrived.wait_for(lock, std::chrono::seconds(30),
                            [&] { return failed != nullptr || got.contains(id); })) {
        throw std::runtime_error("the SQL consumer did not take a message within 30 s");
      }
      if (failed) std::rethrow_exception(failed);
      m.latencies.add(static_cast<double>(got[id] - committed) / 1e6);
      ++m.messages;
    }
  } catch (...) {
    stop = true;
    consumer.join();
    throw;
  }
  m.seconds = seconds_between(start, SteadyClock::now());
  stop = true;
  consumer.join();
  return m;
}

double idle_statements_per_second(const std::string& dsn, const std::string& topic,
                                  int processes, int threads, double wait, double window) {
  std::vector<std::unique_ptr<ConsumerProcess>> consumers;
  for (int i = 0; i < processes; ++i) {
    consumers.push_back(std::make_unique<ConsumerProcess>(dsn, topic, threads, wait));
  }
  for (auto& c : consumers) {
    if (c->line() != "ready") throw std::runtime_error("a bench consumer did not start");
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past their start-up statements
  internal::Connection admin(internal::parse_dsn(dsn));
  const std::uint64_t before = questions(admin);
  const auto start = SteadyClock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(window));
  const std::uint64_t after = questions(admin);
  const double seconds = seconds_between(start, SteadyClock::now());
  // Less the SHOW of `after` itself; nothing else runs on the server meanwhile.
  return static_cast<double>(after - before - 1) / seconds;
}

}  // namespace txmq::bench
