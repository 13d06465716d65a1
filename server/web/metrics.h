#pragma once

// Prometheus metrics (docs/metrics.md): every topic's and group's gauges, the totals all clients
// record (ClientOptions::record_metrics), and txmq serve's own request figures. Served at
// GET /metrics by txmq serve, printed once by `txmq metrics`.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <string_view>

#include "server/http/http.h"
#include "server/web/endpoint.h"
#include "txmq/client.h"

namespace txmq::server {

// Requests of one txmq serve by action and outcome, and their latency. Thread-safe.
class RequestMetrics {
 public:
  // action: the SQS action (others count as "other"); outcome: "ok" or the SQS error code.
  void record(std::string_view action, bool txmq_action, std::string_view outcome,
              double seconds);
  void render(std::string& out) const;

 private:
  struct PerAction {
    std::map<std::string, std::uint64_t, std::less<>> outcomes;
    std::array<std::uint64_t, std::size(kMetricBuckets) + 1> buckets{};  // not cumulative
    double sum = 0;
    std::uint64_t count = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::string, PerAction, std::less<>> actions_;
};

// What txmq serve adds to the library's metrics.
struct ServerMetrics {
  const RequestMetrics* requests = nullptr;
  std::function<std::uint64_t()> long_polls;   // held now
  std::function<std::uint64_t()> connections;  // HTTP connections open now
};

// Which topics have series of their own (docs/metrics.md, "Which topics"): every used topic
// that `named` matches (whole names), and of the other used topics the `busiest`. Every used
// topic also counts in the counters and histograms labelled topic="_all" (a name no topic can
// have); the rest have no gauges, which would cost a read of each topic's tables.
inline constexpr std::size_t kDefaultBusiest = 100;
struct MetricsSelection {
  const std::regex* named = nullptr;
  std::size_t busiest = kDefaultBusiest;
};

// What each topic's counters added up to at the previous scrape, so that "busiest" means busiest
// since then (without it: over all time). One per /metrics endpoint; scrapes are serialized.
struct MetricsActivity {
  std::map<std::string, double, std::less<>> totals;
};

// The whole exposition (text format 0.0.4). Gauges count exactly up to `exact_up_to` rows per
// table, then estimate (Client::stats). Topics not used yet (TopicInfo::has_tables false) have
// no series. Throws txmq::Error when the database cannot be read.
std::string render_metrics(Client& client, std::uint64_t exact_up_to,
                           const ServerMetrics* server = nullptr,
                           const MetricsSelection& selection = {},
                           MetricsActivity* activity = nullptr);

// The pattern of txmq serve --metrics-topics and txmq metrics --topics (ECMAScript, matched
// against whole topic names). Throws std::invalid_argument for a bad or overlong one.
std::regex metrics_topics(const std::string& pattern);

// GET /metrics on txmq serve: protected as the dashboard (server/auth/web_guard.h: Basic auth
// with --credentials, else loopback Host names only); rendered on a thread of its own, one
// scrape at a time.
class MetricsEndpoint final : public WebEndpoint {
 public:
  // `topics`: --metrics-topics (empty: none named); `busiest`: --metrics-busiest.
  MetricsEndpoint(Client& client, ServerMetrics server, std::uint64_t exact_up_to,
                  const std::string& topics = {}, std::size_t busiest = kDefaultBusiest);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // True when it took the request (GET or HEAD /metrics).
  bool handle(HttpRequest& request, Responder& respond,
              const std::shared_ptr<const Credentials>& credentials) override;
  void stop() override;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace txmq::server
