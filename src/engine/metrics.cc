#include "engine/metrics.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace txmq::internal {
namespace {

constexpr std::string_view kCounterNames[] = {"sent",     "received",      "acked",
                                              "nacked",   "lease_expired", "dead_lettered"};
constexpr std::string_view kHistogramNames[] = {"send_seconds", "claim_seconds",
                                                "end_to_end_seconds"};
// The bucket column: a counter's value and a histogram's count; a histogram's sum; else the
// number of a histogram's bucket (kBucketCount: above the last bound).
constexpr int kValueRow = -1;
constexpr int kSumRow = -2;
// The SQL interface's counts (txmq_sql_counts, routines.sql) are added to the totals this often
// by a recording client, at most this many rows at a time.
constexpr auto kFoldEvery = std::chrono::seconds(5);
constexpr int kFoldRows = 500;
constexpr auto kFlushEvery = std::chrono::seconds(1);
constexpr std::size_t kRowsPerStatement = 500;

}  // namespace

std::string_view MetricsRecorder::Delta::metric() const {
  return histogram ? kHistogramNames[index] : kCounterNames[index];
}

MetricsRecorder::~MetricsRecorder() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();  // it flushes once more on its way out
}

MetricsRecorder::Series& MetricsRecorder::series(std::string_view topic, std::string_view group) {
  const std::pair<std::string_view, std::string_view> key{topic, group};
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    it = pending_.emplace(Key{std::string(topic), std::string(group)}, Series{}).first;
  }
  if (!flusher_.joinable() && !stopping_) start_flusher();
  return it->second;
}

void MetricsRecorder::start_flusher() {
  flusher_ = std::thread([this] { run_flusher(); });
}

void MetricsRecorder::count(std::string_view topic, std::string_view group, Counter counter,
                            std::uint64_t n) {
  if (!enabled_ || n == 0) return;
  std::lock_guard lock(mutex_);
  series(topic, group).counters[static_cast<std::size_t>(counter)] += n;
}

void MetricsRecorder::sent(std::string_view topic, std::chrono::steady_clock::time_point start,
                           std::uint64_t messages) {
  observe(topic, {}, Histogram::kSend,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  count(topic, {}, Counter::kSent, messages);
}

void MetricsRecorder::observe(std::string_view topic, std::string_view group,
                              Histogram histogram, double seconds) {
  if (!enabled_) return;
  seconds = std::max(seconds, 0.0);
  const std::size_t bucket = metric_bucket(seconds);
  std::lock_guard lock(mutex_);
  Hist& h = series(topic, group).histograms[static_cast<std::size_t>(histogram)];
  ++h.buckets[bucket];
  h.sum += seconds;
  ++h.count;
}

void MetricsRecorder::run_flusher() {
  std::unique_lock lock(mutex_);
  auto next_fold = std::chrono::steady_clock::now();
  for (;;) {
    wake_.wait_for(lock, kFlushEvery, [this] { return stopping_; });
    const bool last = stopping_;
    lock.unlock();
    flush();
    if (std::chrono::steady_clock::now() >= next_fold) {
      fold_sql_counts(pool_);
      next_fold = std::chrono::steady_clock::now() + kFoldEvery;
    }
    lock.lock();
    if (last) return;
  }
}

void MetricsRecorder::flush() {
  std::lock_guard writing(write_mutex_);
  Pending taken;
  {
    std::lock_guard lock(mutex_);
    taken.swap(pending_);
  }
  if (taken.empty()) return;
  std::vector<Delta> rows;
  for (const auto& [key, s] : taken) {
    for (std::size_t i = 0; i < s.counters.size(); ++i) {
      if (s.counters[i] == 0) continue;
      rows.push_back({key.first, key.second, i, false, kValueRow,
                      static_cast<double>(s.counters[i])});
    }
    for (std::size_t h = 0; h < s.histograms.size(); ++h) {
      const Hist& hist = s.histograms[h];
      if (hist.count == 0) continue;
      rows.push_back({key.first, key.second, h, true, kValueRow, static_cast<double>(hist.count)});
      rows.push_back({key.first, key.second, h, true, kSumRow, hist.sum});
      for (std::size_t b = 0; b < hist.buckets.size(); ++b) {
        if (hist.buckets[b] == 0) continue;
        rows.push_back({key.first, key.second, h, true, static_cast<int>(b),
                        static_cast<double>(hist.buckets[b])});
      }
    }
  }
  // In primary-key order, so that processes flushing the same rows lock them in the same order.
  std::sort(rows.begin(), rows.end(), [](const Delta& a, const Delta& b) {
    return std::make_tuple(a.topic, a.group, a.metric(), a.bucket) <
           std::make_tuple(b.topic, b.group, b.metric(), b.bucket);
  });
  const std::size_t written = write(rows);
  if (written == rows.size()) return;
  // Kept for the next flush, added to what was recorded meanwhile.
  std::lock_guard lock(mutex_);
  for (std::size_t i = written; i < rows.size(); ++i) {
    const Delta& d = rows[i];
    Series& into = series(d.topic, d.group);
    if (!d.histogram) {
      into.counters[d.index] += static_cast<std::uint64_t>(d.value);
      continue;
    }
    Hist& h = into.histograms[d.index];
    if (d.bucket == kValueRow) {
      h.count += static_cast<std::uint64_t>(d.value);
    } else if (d.bucket == kSumRow) {
      h.sum += d.value;
    } else {
      h.buckets[static_cast<std::size_t>(d.bucket)] += static_cast<std::uint64_t>(d.value);
    }
  }
}

std::size_t MetricsRecorder::write(const std::vector<Delta>& rows) {
  std::size_t written = 0;
  try {
    while (written < rows.size()) {
      const std::size_t to = std::min(rows.size(), written + kRowsPerStatement);
      std::string sql = "INSERT INTO txmq_metrics (topic, grp, metric, bucket, value) VALUES ";
      std::vector<Param> params;
      for (std::size_t i = written; i < to; ++i) {
        sql += i == written ? "(?,?,?,?,?)" : ",(?,?,?,?,?)";
        params.insert(params.end(), {rows[i].topic, rows[i].group, rows[i].metric(),
                                     static_cast<std::int64_t>(rows[i].bucket), rows[i].value});
      }
      sql += " ON DUPLICATE KEY UPDATE value = value + VALUES(value)";
      pool_.run(OnLostConnection::kCommitUnknown,
                [&](Connection& c, const Attempt&) { c.execute(sql, params); });
      written = to;
    }
  } catch (const Error& e) {
    // A lost reply may have added the rows: they are dropped rather than counted twice.
    if (e.code() == Errc::kCommitUnknown) {
      return std::min(rows.size(), written + kRowsPerStatement);
    }
  }
  return written;
}

void fold_sql_counts(Pool& pool) {
  try {
    pool.run(OnLostConnection::kCommitUnknown, [](Connection& c, const Attempt&) {
      c.begin();
      try {
        // Rows of connections in a transaction that counts are skipped: their counts may still
        // roll back, and waiting for them would hold this up.
        const Result r = c.execute(
            fmt::format("SELECT topic, grp, metric, conn, value FROM txmq_sql_counts "
                        "ORDER BY topic, grp, metric, conn LIMIT {} FOR UPDATE SKIP LOCKED",
                        kFoldRows),
            {});
        std::map<std::tuple<std::string, std::string, std::string>, std::int64_t> totals;
        std::string keys;
        std::vector<Param> key_params;
        for (const Row& row : r.rows) {
          totals[{row.bytes(0), row.bytes(1), row.bytes(2)}] += row.i64(4);
          keys += keys.empty() ? "(?,?,?,?)" : ",(?,?,?,?)";
          key_params.insert(key_params.end(),
                            {row.bytes(0), row.bytes(1), row.bytes(2), row.u64(3)});
        }
        if (!totals.empty()) {
          std::string insert = "INSERT INTO txmq_metrics (topic, grp, metric, bucket, value) VALUES ";
          std::vector<Param> params;
          for (const auto& [key, value] : totals) {
            insert += params.empty() ? "(?,?,?,?,?)" : ",(?,?,?,?,?)";
            params.insert(params.end(), {std::get<0>(key), std::get<1>(key), std::get<2>(key),
                                         std::int64_t{kValueRow}, static_cast<double>(value)});
          }
          c.execute(insert + " ON DUPLICATE KEY UPDATE value = value + VALUES(value)", params);
        }
        if (!keys.empty()) {
          c.execute("DELETE FROM txmq_sql_counts WHERE (topic, grp, metric, conn) IN (" + keys + ")",
                    key_params);
        }
        c.commit();
      } catch (...) {
        c.rollback();
        throw;
      }
    });
  } catch (const Error&) {
    // No SQL interface (the table is missing), or the server is away: the counts wait, and
    // read_metrics adds them meanwhile. An unknown commit outcome counts nothing twice: the
    // totals and the delete commit together.
  }
}

namespace {

// The joins that keep totals of topics and groups that exist (a dropped group's rows stay).
constexpr std::string_view kExisting =
    "JOIN txmq_topics AS t ON t.name = m.topic LEFT JOIN txmq_groups AS g ON g.topic = m.topic "
    "AND g.name = m.grp WHERE (m.grp = '' OR g.name IS NOT NULL)";

// The SQL interface's counts the fold left (rows of connections in a transaction): few. Each
// row: topic, group, metric, value.
Result left_sql_counts(Pool& pool) {
  return pool.run(OnLostConnection::kRetry, [](Connection& c, const Attempt&) {
    try {
      return c.execute(
          "SELECT s.topic, s.grp, s.metric, SUM(s.value) FROM txmq_sql_counts AS s JOIN "
          "txmq_topics AS t ON t.name = s.topic LEFT JOIN txmq_groups AS g ON g.topic = s.topic "
          "AND g.name = s.grp WHERE s.grp = '' OR g.name IS NOT NULL "
          "GROUP BY s.topic, s.grp, s.metric",
          {});
    } catch (const Error& e) {
      if (!is_missing_table(e.server_errno())) throw;
      return Result();  // no SQL interface
    }
  });
}

bool is_histogram(std::string_view metric) { return metric.ends_with("_seconds"); }

// Rows of (topic, group, metric, bucket, value), ordered by the first three, as metrics.
void add_rows(const Result& r, std::vector<RecordedMetric>& out) {
  const std::size_t first = out.size();
  for (const Row& row : r.rows) {
    const std::string topic = row.bytes(0);
    const std::string group = row.bytes(1);
    const std::string name = row.bytes(2);
    if (out.size() == first || out.back().topic != topic || out.back().group != group ||
        out.back().name != name) {
      RecordedMetric m;
      m.topic = topic;
      m.group = group;
      m.name = name;
      if (is_histogram(name)) m.buckets.assign(kBucketCount + 1, 0);
      out.push_back(std::move(m));
    }
    RecordedMetric& m = out.back();
    const std::int64_t bucket = row.i64(3);
    const double value = row.f64(4);
    if (bucket == kValueRow) {
      m.value = value;
    } else if (bucket == kSumRow) {
      m.sum = value;
    } else if (bucket >= 0 && static_cast<std::size_t>(bucket) < m.buckets.size()) {
      m.buckets[static_cast<std::size_t>(bucket)] = static_cast<std::uint64_t>(value);
    }
  }
  for (std::size_t i = first; i < out.size(); ++i) {  // cumulative, as Prometheus's buckets
    std::vector<std::uint64_t>& b = out[i].buckets;
    for (std::size_t k = 1; k < b.size(); ++k) b[k] += b[k - 1];
  }
}

// Adds the SQL interface's left counts to `out` (of those topics only, unless null), and sorts.
void add_left(const Result& left, const std::set<std::string, std::less<>>* topics,
              std::vector<RecordedMetric>& out) {
  if (left.rows.empty()) return;
  for (const Row& row : left.rows) {
    if (topics != nullptr && !topics->contains(row.bytes(0))) continue;
    const auto same = [&](const RecordedMetric& m) {
      return m.topic == row.bytes(0) && m.group == row.bytes(1) && m.name == row.bytes(2);
    };
    auto it = std::find_if(out.begin(), out.end(), same);
    if (it == out.end()) {
      RecordedMetric m;
      m.topic = row.bytes(0);
      m.group = row.bytes(1);
      m.name = row.bytes(2);
      it = out.insert(out.end(), std::move(m));
    }
    it->value += row.f64(3);
  }
  std::sort(out.begin(), out.end(), [](const RecordedMetric& a, const RecordedMetric& b) {
    return std::tie(a.topic, a.group, a.name) < std::tie(b.topic, b.group, b.name);
  });
}

}  // namespace

std::vector<RecordedMetric> read_metrics(Pool& pool) {
  fold_sql_counts(pool);
  Result r = pool.run(OnLostConnection::kRetry, [](Connection& c, const Attempt&) {
    return c.execute(fmt::format("SELECT m.topic, m.grp, m.metric, m.bucket, m.value FROM "
                                 "txmq_metrics AS m {} ORDER BY m.topic, m.grp, m.metric, m.bucket",
                                 kExisting),
                     {});
  });
  const Result left = left_sql_counts(pool);
  std::vector<RecordedMetric> out;
  add_rows(r, out);
  add_left(left, nullptr, out);
  return out;
}

std::vector<RecordedMetric> read_metrics(Pool& pool, const std::vector<std::string>& topics) {
  std::vector<RecordedMetric> out;
  if (topics.empty()) return out;
  fold_sql_counts(pool);
  // Sorted and unique, so that chunks come back in order and the rows of one topic stay whole.
  const std::set<std::string, std::less<>> wanted(topics.begin(), topics.end());
  constexpr std::size_t kChunk = 200;
  std::vector<std::string_view> chunk;
  auto read_chunk = [&] {
    std::string marks;
    std::vector<Param> params;
    for (const std::string_view topic : chunk) {
      marks += marks.empty() ? "?" : ", ?";
      params.emplace_back(topic);
    }
    Result r = pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      return c.execute(fmt::format("SELECT m.topic, m.grp, m.metric, m.bucket, m.value FROM "
                                   "txmq_metrics AS m {} AND m.topic IN ({}) ORDER BY m.topic, "
                                   "m.grp, m.metric, m.bucket",
                                   kExisting, marks),
                       params);
    });
    add_rows(r, out);
    chunk.clear();
  };
  for (const std::string& topic : wanted) {
    chunk.push_back(topic);
    if (chunk.size() == kChunk) read_chunk();
  }
  if (!chunk.empty()) read_chunk();
  add_left(left_sql_counts(pool), &wanted, out);
  return out;
}

MetricSummary read_metric_summary(Pool& pool) {
  fold_sql_counts(pool);
  // Counters are the value rows of metrics that are not histograms.
  const Param value_row(static_cast<std::int64_t>(kValueRow));
  Result by_topic = pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("SELECT m.topic, SUM(m.value) FROM txmq_metrics AS m {} AND "
                                 "m.bucket = ? AND RIGHT(m.metric, 8) <> '_seconds' GROUP BY "
                                 "m.topic ORDER BY m.topic",
                                 kExisting),
                     {value_row});
  });
  Result sums = pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("SELECT '', '', m.metric, m.bucket, SUM(m.value) FROM "
                                 "txmq_metrics AS m {} GROUP BY m.metric, m.bucket ORDER BY "
                                 "m.metric, m.bucket",
                                 kExisting),
                     {});
  });
  const Result left = left_sql_counts(pool);
  MetricSummary out;
  out.counters_by_topic.reserve(by_topic.rows.size());
  for (const Row& row : by_topic.rows) out.counters_by_topic.emplace_back(row.bytes(0), row.f64(1));
  add_rows(sums, out.sums);
  for (const Row& row : left.rows) {  // counters only: the SQL interface records no histogram
    const std::string topic = row.bytes(0);
    const std::string metric = row.bytes(2);
    const double value = row.f64(3);
    auto t = std::lower_bound(
        out.counters_by_topic.begin(), out.counters_by_topic.end(), topic,
        [](const std::pair<std::string, double>& a, const std::string& b) { return a.first < b; });
    if (t == out.counters_by_topic.end() || t->first != topic) {
      t = out.counters_by_topic.insert(t, {topic, 0});
    }
    if (!is_histogram(metric)) t->second += value;
    auto m = std::find_if(out.sums.begin(), out.sums.end(),
                          [&](const RecordedMetric& s) { return s.name == metric; });
    if (m == out.sums.end()) {
      RecordedMetric s;
      s.name = metric;
      m = out.sums.insert(out.sums.end(), std::move(s));
    }
    m->value += value;
  }
  std::sort(out.sums.begin(), out.sums.end(),
            [](const RecordedMetric& a, const RecordedMetric& b) { return a.name < b.name; });
  return out;
}

}  // namespace txmq::internal
