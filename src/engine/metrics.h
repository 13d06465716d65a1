#pragma once

// Counters and latency histograms (ClientOptions::record_metrics): kept in memory per process,
// added to the txmq_metrics table about once a second, so that every process's operations show
// in one total (Client::recorded_metrics, txmq metrics, txmq serve's /metrics).
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "db/pool.h"
#include "txmq/types.h"

namespace txmq::internal {

enum class Counter { kSent, kReceived, kAcked, kNacked, kLeaseExpired, kDeadLettered };
enum class Histogram { kSend, kClaim, kEndToEnd };

inline constexpr std::size_t kBucketCount = std::size(kMetricBuckets);

class MetricsRecorder {
 public:
  MetricsRecorder(Pool& pool, bool enabled) : pool_(pool), enabled_(enabled) {}
  ~MetricsRecorder();
  MetricsRecorder(const MetricsRecorder&) = delete;
  MetricsRecorder& operator=(const MetricsRecorder&) = delete;

  // Cheap (a mutex and a map lookup); nothing is written until the next flush.
  void count(std::string_view topic, std::string_view group, Counter counter, std::uint64_t n);
  void observe(std::string_view topic, std::string_view group, Histogram histogram,
               double seconds);
  // A send or send_batch call that began at `start` and sent `messages`.
  void sent(std::string_view topic, std::chrono::steady_clock::time_point start,
            std::uint64_t messages);
  // Adds what was recorded since the last flush to the table now. Never throws: what could not
  // be written is kept for the next flush (dropped when the outcome of the write is unknown, so
  // that a total never counts a thing twice).
  void flush();

 private:
  struct Hist {
    std::array<std::uint64_t, kBucketCount + 1> buckets{};  // not cumulative; the last: +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  struct Series {
    std::array<std::uint64_t, 6> counters{};
    std::array<Hist, 3> histograms{};
  };
  using Key = std::pair<std::string, std::string>;  // topic, group ("" for a topic's sends)
  struct KeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const int t = std::string_view(a.first).compare(std::string_view(b.first));
      return t != 0 ? t < 0 : std::string_view(a.second) < std::string_view(b.second);
    }
  };
  using Pending = std::map<Key, Series, KeyLess>;

  // One row of txmq_metrics to add to.
  struct Delta {
    std::string_view topic;
    std::string_view group;
    std::size_t index;  // of the counter or histogram
    bool histogram;     // else a counter
    int bucket;         // the table's bucket column
    double value;
    std::string_view metric() const;
  };

  Series& series(std::string_view topic, std::string_view group);  // REQUIRES: mutex_ held
  void start_flusher();                                            // REQUIRES: mutex_ held
  void run_flusher();
  // Adds the rows to the table in order; returns how many are done with (written, or dropped
  // because a lost reply may have written them), the rest could not be written.
  std::size_t write(const std::vector<Delta>& rows);

  Pool& pool_;
  const bool enabled_;
  std::mutex mutex_;
  std::condition_variable wake_;
  Pending pending_;
  bool stopping_ = false;
  std::thread flusher_;  // started at the first record
  std::mutex write_mutex_;  // one write at a time, in order
};

// Adds the counts of the SQL interface's calls (txmq_sql_counts: one row per connection, written
// in the caller's transaction, so that concurrent callers share no row) to txmq_metrics, and
// deletes them, in one transaction. Never throws (a missing table: no SQL interface).
void fold_sql_counts(Pool& pool);
// The totals in txmq_metrics (with the SQL interface's counts, folded first) for topics and
// groups that exist, ordered by topic, group, name.
std::vector<RecordedMetric> read_metrics(Pool& pool);
// The same for these topics only (read in chunks of topics, each by its key range).
std::vector<RecordedMetric> read_metrics(Pool& pool, const std::vector<std::string>& topics);
// Every topic's counters added up and every metric summed over all topics and groups, grouped
// by the server (Client::metric_summary): what a scrape of thousands of topics needs, without
// reading each topic's rows.
MetricSummary read_metric_summary(Pool& pool);

}  // namespace txmq::internal
