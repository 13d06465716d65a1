#pragma once
// Timing helpers shared by the workloads: latency samples, threads started together, payloads.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "cpu.h"

namespace txmq::bench {

using SteadyClock = std::chrono::steady_clock;

// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine, so that a child
// process's receipt can be set against the bench's send.
inline std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

inline double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Latency samples in milliseconds.
class Latencies {
 public:
  void add(double ms) { samples_.push_back(ms); }
  void add_since(SteadyClock::time_point start) {
    add(seconds_between(start, SteadyClock::now()) * 1000.0);
  }
  void merge(const Latencies& other) {
    samples_.insert(samples_.end(), other.samples_.begin(), other.samples_.end());
  }
  std::size_t size() const { return samples_.size(); }
  // Nearest-rank percentile; 0 when there are no samples.
  double percentile(double p) {
    if (samples_.empty()) return 0;
    std::size_t rank = static_cast<std::size_t>(p / 100.0 * static_cast<double>(samples_.size()));
    rank = std::min(rank, samples_.size() - 1);
    std::nth_element(samples_.begin(), samples_.begin() + static_cast<std::ptrdiff_t>(rank),
                     samples_.end());
    return samples_[rank];
  }

 private:
  std::vector<double> samples_;
};

// What a timed run of many threads measured.
struct Measured {
  std::uint64_t messages = 0;
  double seconds = 0;
  Latencies latencies;
  CpuSeconds cpu;  // CPU taken during the run (empty unless the bench watches CPU)
  // Each round's rate, when the row adds up several rounds (accumulate): how far they scatter.
  std::vector<double> round_rates;
  double rate() const { return seconds > 0 ? static_cast<double>(messages) / seconds : 0; }
};

// Runs body(thread_index, latencies) on `threads` threads released together; each returns how
// many messages it handled. The clock runs from the release to the last thread's end. The first
// exception of any thread is rethrown after all have joined. CPU is sampled at the release and
// after the join (the threads' spinning before the release is not counted).
template <typename Body>
Measured run_threads(int threads, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::mutex mutex;
  std::exception_ptr failure;
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(threads), 0);
  std::vector<Latencies> latencies(static_cast<std::size_t>(threads));
  std::vector<double> thread_cpu(static_cast<std::size_t>(threads), 0);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      ready++;
      while (!go.load()) std::this_thread::yield();
      const double cpu_start = thread_cpu_seconds();
      try {
        counts[static_cast<std::size_t>(i)] = body(i, latencies[static_cast<std::size_t>(i)]);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
      }
      thread_cpu[static_cast<std::size_t>(i)] = thread_cpu_seconds() - cpu_start;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const CpuSeconds cpu_before = cpu_now();
  const auto start = SteadyClock::now();
  go = true;
  for (auto& t : pool) t.join();
  Measured m;
  m.seconds = seconds_between(start, SteadyClock::now());
  if (!cpu_before.empty()) {
    m.cpu = CpuWatch::difference(cpu_before, cpu_now());
    double load = 0;
    for (double s : thread_cpu) load += s;
    m.cpu["load"] = load;
  }
  if (failure) std::rethrow_exception(failure);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    m.messages += counts[i];
    m.latencies.merge(latencies[i]);
  }
  return m;
}

// A payload of `size` printable bytes that differ from message to message (no compression
// flatters anyone; distinct bytes keep it honest).
inline std::string make_payload(std::size_t size, std::uint64_t seed) {
  std::string p(size, 'x');
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (char& c : p) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>('!' + x % 90);
  }
  return p;
}

// A few distinct payloads made before the clock starts, used in turn by a timed loop.
inline std::vector<std::string> make_payloads(std::size_t size, std::uint64_t seed,
                                              std::size_t count = 64) {
  std::vector<std::string> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) out.push_back(make_payload(size, seed * count + i));
  return out;
}

}  // namespace txmq::bench
