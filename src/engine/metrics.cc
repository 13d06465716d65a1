#include "engine/metrics.h"

#include <algorithm>
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

std::vector<RecordedMetric> read_metrics(Pool& pool) {
  fold_sql_counts(pool);
  Result r = pool.run(OnLostConnection::kRetry, [](Connection& c, const Attempt&) {
    return c.execute(
        "SELECT m.topic, m.grp, m.metric, m.bucket, m.value FROM txmq_metrics AS m JOIN "
        "txmq_topics AS t ON t.name = m.topic LEFT JOIN txmq_groups AS g ON g.topic = m.topic "
        "AND g.name = m.grp WHERE m.grp = '' OR g.name IS NOT NULL "
        "ORDER BY m.topic, m.grp, m.metric, m.bucket",
        {});
  });
  // The SQL interface's counts the fold left (rows of connections in a transaction): few.
  Result left = pool.run(OnLostConnection::kRetry, [](Connection& c, const Attempt&) {
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
  std::vector<RecordedMetric> out;
  for (const Row& row : r.rows) {
    const std::string topic = row.bytes(0);
    const std::string group = row.bytes(1);
    const std::string name = row.bytes(2);
    if (out.empty() || out.back().topic != topic || out.back().group != group ||
        out.back().name != name) {
      RecordedMetric m;
      m.topic = topic;
      m.group = group;
      m.name = name;
      if (name.ends_with("_seconds")) m.buckets.assign(kBucketCount + 1, 0);
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
  for (RecordedMetric& m : out) {  // cumulative, as Prometheus's buckets
    for (std::size_t b = 1; b < m.buckets.size(); ++b) m.buckets[b] += m.buckets[b - 1];
  }
  if (!left.rows.empty()) {
    for (const Row& row : left.rows) {
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
  return out;
}

}  // namespace txmq::internal
