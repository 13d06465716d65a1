#include "server/web/metrics.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <fmt/format.h>

#include "server/auth/web_guard.h"

namespace txmq::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

// The SQS actions txmq serve answers; anything else is counted as "other", so that a client
// cannot make up label values.
const std::set<std::string, std::less<>> kActions = {
    "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "CreateQueue",
    "DeleteMessage",           "DeleteMessageBatch",           "DeleteQueue",
    "GetQueueAttributes",      "GetQueueUrl",                  "ListDeadLetterSourceQueues",
    "ListQueueTags",           "ListQueues",                   "PurgeQueue",
    "ReceiveMessage",          "SendMessage",                  "SendMessageBatch",
    "SetQueueAttributes",      "TagQueue",                     "UntagQueue"};

// A label value, escaped as the text format wants.
std::string label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string number(double v) { return fmt::format("{}", v); }

void family(std::string& out, std::string_view name, std::string_view type,
            std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, number(value));
}

// buckets: cumulative counts per bound of kMetricBuckets, then all.
void histogram(std::string& out, std::string_view name, std::string_view labels,
               const std::vector<std::uint64_t>& buckets, double sum, double count) {
  for (std::size_t b = 0; b < std::size(kMetricBuckets); ++b) {
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels,
                   number(kMetricBuckets[b]), b < buckets.size() ? buckets[b] : 0);
  }
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels,
                 static_cast<std::uint64_t>(count));
  fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels,
                 number(sum), name, labels, static_cast<std::uint64_t>(count));
}

struct Gauge {
  std::string_view name;
  std::string_view help;
  double (*of)(const TopicStats&);
};

const Gauge kGauges[] = {
    {"txmq_messages_ready", "Messages claimable now (new, retried, or with an expired lease).",
     [](const TopicStats& s) { return static_cast<double>(s.ready); }},
    {"txmq_messages_in_flight", "Messages leased to a consumer whose lease has not expired.",
     [](const TopicStats& s) { return static_cast<double>(s.in_flight); }},
    {"txmq_messages_delayed", "Messages not yet claimable: delayed sends and nacks with a delay.",
     [](const TopicStats& s) { return static_cast<double>(s.delayed); }},
    {"txmq_messages_waiting_on_key",
     "Messages waiting behind an earlier message with the same key (keyed FIFO).",
     [](const TopicStats& s) { return static_cast<double>(s.waiting_on_key); }},
    {"txmq_dead_letters", "Messages in the group's dead-letter table.",
     [](const TopicStats& s) { return static_cast<double>(s.dead); }},
    {"txmq_oldest_ready_age_seconds", "Age of the oldest ready message; 0 when none is ready.",
     [](const TopicStats& s) { return s.oldest_ready_age_seconds; }},
    {"txmq_lag_seconds",
     "Age of the group's oldest unacknowledged message (ready, in flight, delayed or waiting on "
     "its key); 0 when none.",
     [](const TopicStats& s) { return s.lag_seconds; }},
    {"txmq_stats_estimated",
     "1 when the group's counts are estimates: a table held more rows than are counted exactly "
     "per scrape.",
     [](const TopicStats& s) { return s.estimated ? 1.0 : 0.0; }},
};

struct Total {
  std::string_view recorded;  // RecordedMetric::name
  std::string_view name;
  std::string_view help;
  bool per_group;
};

const Total kCounters[] = {
    {"sent", "txmq_messages_sent_total",
     "Messages whose send committed (Client::send, send_batch, Transaction and process sends; "
     "not Outbox sends, whose commit txmq does not see).",
     false},
    {"received", "txmq_messages_received_total", "Deliveries: messages claimed by receive or process.",
     true},
    {"acked", "txmq_messages_acked_total",
     "Messages acknowledged (ack, or committed by process).", true},
    {"nacked", "txmq_messages_nacked_total", "Nacks that took effect.", true},
    {"lease_expired", "txmq_lease_expiries_total",
     "Deliveries of messages whose previous lease ended unsettled (ran out, or was given back "
     "with a lease of 0).",
     true},
    {"dead_lettered", "txmq_messages_dead_lettered_total",
     "Messages moved to the dead-letter table or topic.", true},
};

const Total kHistograms[] = {
    {"send_seconds", "txmq_send_duration_seconds",
     "Duration of Client::send and send_batch calls that succeeded.", false},
    {"claim_seconds", "txmq_claim_duration_seconds",
     "Duration of claims that got messages (without the wait for them).", true},
    {"end_to_end_seconds", "txmq_end_to_end_latency_seconds",
     "From a send's commit to its message's acknowledgement (database clock).", true},
};

std::string topic_labels(std::string_view topic, std::string_view group) {
  return group.empty() ? fmt::format("topic=\"{}\"", label(topic))
                       : fmt::format("topic=\"{}\",group=\"{}\"", label(topic), label(group));
}

}  // namespace

void RequestMetrics::record(std::string_view action, bool txmq_action, std::string_view outcome,
                            double seconds) {
  std::string name = kActions.count(action) > 0
                         ? (txmq_action ? fmt::format("Txmq.{}", action) : std::string(action))
                         : "other";
  seconds = std::max(seconds, 0.0);
  const std::size_t bucket = metric_bucket(seconds);
  std::lock_guard lock(mutex_);
  PerAction& a = actions_[name];
  auto it = a.outcomes.find(outcome);
  if (it == a.outcomes.end()) it = a.outcomes.emplace(std::string(outcome), 0).first;
  ++it->second;
  ++a.buckets[bucket];
  a.sum += seconds;
  ++a.count;
}

void RequestMetrics::render(std::string& out) const {
  std::lock_guard lock(mutex_);
  family(out, "txmq_sqs_requests_total", "counter",
         "SQS API requests answered, by action and outcome (ok, or the SQS error code).");
  for (const auto& [action, a] : actions_) {
    for (const auto& [outcome, n] : a.outcomes) {
      sample(out, "txmq_sqs_requests_total",
             fmt::format("action=\"{}\",outcome=\"{}\"", label(action), label(outcome)),
             static_cast<double>(n));
    }
  }
  family(out, "txmq_sqs_request_duration_seconds", "histogram",
         "Time from a request's arrival to its answer, by action (long polls included).");
  for (const auto& [action, a] : actions_) {
    std::vector<std::uint64_t> cumulative(a.buckets.size());
    std::uint64_t running = 0;
    for (std::size_t b = 0; b < a.buckets.size(); ++b) cumulative[b] = running += a.buckets[b];
    histogram(out, "txmq_sqs_request_duration_seconds",
              fmt::format("action=\"{}\"", label(action)), cumulative, a.sum,
              static_cast<double>(a.count));
  }
}

namespace {

// The series of topic="_all": every used topic's counters and histograms added up.
struct AllTotals {
  std::map<std::string, RecordedMetric, std::less<>> by_name;  // RecordedMetric::name ->

  void add(const RecordedMetric& m) {
    RecordedMetric& t = by_name[m.name];
    t.value += m.value;
    t.sum += m.sum;
    if (t.buckets.size() < m.buckets.size()) t.buckets.resize(m.buckets.size());
    for (std::size_t b = 0; b < m.buckets.size(); ++b) t.buckets[b] += m.buckets[b];
  }
  const RecordedMetric* find(std::string_view name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &it->second;
  }
};

constexpr std::string_view kAllTopics = "_all";  // topic names start with a letter
constexpr std::string_view kAllGroups = "_all";

}  // namespace

std::string render_metrics(Client& client, std::uint64_t exact_up_to, const ServerMetrics* server,
                           const MetricsSelection& selection, MetricsActivity* activity) {
  const auto start = std::chrono::steady_clock::now();
  // Topics never used (no tables yet: nothing sent, nothing recorded) cost no statement and no
  // series. Of the used ones, those named and the busiest get series of their own, read from
  // their tables (a few milliseconds each); the others only count in topic="_all", the totals
  // of every used topic, read from txmq_metrics alone, so that a scrape of 10,000 used queues
  // stays short. "_all" holds every topic, not only the others, so that its counters never go
  // down when a topic joins or leaves the busiest (rate() would see a reset).
  // Grouped by the database: each topic's counters added up (to rank), and the sums of every
  // topic for "_all". Full series are read below for the exported topics only. Read beside the
  // list of names, on another of the pool's connections: each takes about a third of a second
  // with 10,000 used topics of 100,000.
  std::future<MetricSummary> summing =
      std::async(std::launch::async, [&client] { return client.metric_summary(); });
  const std::vector<TopicName> listed = client.list_topic_names();
  const MetricSummary summary = summing.get();
  std::unordered_map<std::string_view, double> totals;  // topic -> its counters added up
  totals.reserve(summary.counters_by_topic.size());
  for (const auto& [topic, total] : summary.counters_by_topic) totals.emplace(topic, total);
  std::uint64_t unused = 0;
  std::uint64_t used = 0;  // topics with tables: those counted in "_all"
  std::set<std::string_view> exported;
  struct Candidate {
    double since_last = 0;  // its counters' growth since the previous scrape
    double total = 0;
    std::string_view topic;
  };
  std::vector<Candidate> candidates;
  for (const TopicName& t : listed) {
    if (!t.has_tables) {
      ++unused;
      continue;
    }
    ++used;
    if (selection.named != nullptr && std::regex_match(t.name, *selection.named)) {
      exported.insert(t.name);
    } else {
      const auto it = totals.find(t.name);
      Candidate c{.total = it == totals.end() ? 0 : it->second, .topic = t.name};
      c.since_last = c.total;
      if (activity != nullptr) {
        const auto before = activity->totals.find(t.name);
        if (before != activity->totals.end()) c.since_last -= std::min(c.total, before->second);
      }
      candidates.push_back(c);
    }
  }
  const std::size_t busiest = std::min(selection.busiest, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(busiest),
                    candidates.end(), [](const Candidate& a, const Candidate& b) {
                      if (a.since_last != b.since_last) return a.since_last > b.since_last;
                      if (a.total != b.total) return a.total > b.total;
                      return a.topic < b.topic;
                    });
  for (std::size_t i = 0; i < busiest; ++i) exported.insert(candidates[i].topic);
  const std::size_t summed = candidates.size() - busiest;
  if (activity != nullptr) {
    activity->totals.clear();  // rebuilt: dropped topics leave it
    for (const auto& [topic, total] : summary.counters_by_topic) activity->totals.emplace(topic, total);
  }

  struct GroupGauges {
    std::string_view topic;
    std::string group;
    TopicStats stats;
  };
  std::vector<GroupGauges> groups;
  std::vector<std::string_view> topics;
  for (const std::string_view name : exported) {
    try {
      for (const GroupInfo& g : client.list_groups(name)) {
        groups.push_back({name, g.name, client.stats(name, g.name, exact_up_to)});
      }
    } catch (const Error& e) {
      if (e.code() == Errc::kNotFound) continue;  // dropped meanwhile
      throw;
    }
    topics.push_back(name);
  }
  const std::vector<RecordedMetric> recorded =
      client.recorded_metrics(std::vector<std::string>(topics.begin(), topics.end()));
  AllTotals all;
  for (const RecordedMetric& m : summary.sums) all.add(m);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::string out;
  out.reserve(4096 + groups.size() * 2048);
  for (const Gauge& g : kGauges) {
    family(out, g.name, "gauge", g.help);
    for (const GroupGauges& gg : groups) {
      sample(out, g.name, topic_labels(gg.topic, gg.group), g.of(gg.stats));
    }
  }
  // By (topic, group, name): every series below looks one up.
  std::map<std::tuple<std::string_view, std::string_view, std::string_view>, const RecordedMetric*>
      by_series;
  for (const RecordedMetric& m : recorded) by_series[{m.topic, m.group, m.name}] = &m;
  auto find = [&](std::string_view topic, std::string_view group,
                  std::string_view name) -> const RecordedMetric* {
    auto it = by_series.find({topic, group, name});
    return it == by_series.end() ? nullptr : it->second;
  };
  const std::string all_topic = topic_labels(kAllTopics, "");
  const std::string all_group = topic_labels(kAllTopics, kAllGroups);
  // Every exported topic and group has every series, at 0 before anything happened; so has
  // "_all" when any topic is used.
  for (const Total& c : kCounters) {
    family(out, c.name, "counter", c.help);
    if (c.per_group) {
      for (const GroupGauges& gg : groups) {
        const RecordedMetric* m = find(gg.topic, gg.group, c.recorded);
        sample(out, c.name, topic_labels(gg.topic, gg.group), m ? m->value : 0);
      }
    } else {
      for (const std::string_view topic : topics) {
        const RecordedMetric* m = find(topic, "", c.recorded);
        sample(out, c.name, topic_labels(topic, ""), m ? m->value : 0);
      }
    }
    if (used > 0) {
      const RecordedMetric* m = all.find(c.recorded);
      sample(out, c.name, c.per_group ? all_group : all_topic, m ? m->value : 0);
    }
  }
  const std::vector<std::uint64_t> none;
  for (const Total& h : kHistograms) {
    family(out, h.name, "histogram", h.help);
    auto one = [&](const RecordedMetric* m, const std::string& labels) {
      histogram(out, h.name, labels, m ? m->buckets : none, m ? m->sum : 0, m ? m->value : 0);
    };
    if (h.per_group) {
      for (const GroupGauges& gg : groups) {
        one(find(gg.topic, gg.group, h.recorded), topic_labels(gg.topic, gg.group));
      }
    } else {
      for (const std::string_view topic : topics) {
        one(find(topic, "", h.recorded), topic_labels(topic, ""));
      }
    }
    if (used > 0) one(all.find(h.recorded), h.per_group ? all_group : all_topic);
  }
  family(out, "txmq_metrics_topics", "gauge",
         "Topics by whether this exposition has their series: exported (named by "
         "--metrics-topics, or among the --metrics-busiest); summed (counted only in "
         "topic=\"_all\", the totals of every used topic, without gauges); unused (never used, "
         "so without tables and without series).");
  fmt::format_to(std::back_inserter(out),
                 "txmq_metrics_topics{{state=\"exported\"}} {}\n"
                 "txmq_metrics_topics{{state=\"summed\"}} {}\n"
                 "txmq_metrics_topics{{state=\"unused\"}} {}\n",
                 topics.size(), summed, unused);
  family(out, "txmq_metrics_read_seconds", "gauge",
         "Time this exposition took to read the gauges and totals from the database.");
  fmt::format_to(std::back_inserter(out), "txmq_metrics_read_seconds {}\n", number(took));
  if (server != nullptr) {
    if (server->requests != nullptr) server->requests->render(out);
    if (server->long_polls) {
      family(out, "txmq_sqs_long_polls", "gauge", "ReceiveMessage calls waiting for messages now.");
      fmt::format_to(std::back_inserter(out), "txmq_sqs_long_polls {}\n", server->long_polls());
    }
    if (server->connections) {
      family(out, "txmq_http_connections", "gauge", "HTTP connections open now.");
      fmt::format_to(std::back_inserter(out), "txmq_http_connections {}\n",
                     server->connections());
    }
  }
  return out;
}

std::regex metrics_topics(const std::string& pattern) {
  constexpr std::size_t kMaxPattern = 1024;
  if (pattern.size() > kMaxPattern) {
    throw std::invalid_argument(
        fmt::format("a pattern of topics has at most {} characters", kMaxPattern));
  }
  try {
    return std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument(
        fmt::format("'{}' is not a regular expression of topics ({})", pattern, e.what()));
  }
}

// --- GET /metrics --------------------------------------------------------------------------------

struct MetricsEndpoint::State {
  State(Client& c, ServerMetrics s, std::uint64_t e, std::optional<std::regex> t, std::size_t b)
      : client(c), server(std::move(s)), exact_up_to(e), topics(std::move(t)), busiest(b) {}
  Client& client;
  const ServerMetrics server;
  const std::uint64_t exact_up_to;
  const std::optional<std::regex> topics;
  const std::size_t busiest;
  MetricsActivity activity;  // only the pool's one thread touches it
  asio::thread_pool pool{1};  // one scrape at a time; they queue
  std::atomic<bool> stopping{false};
};

MetricsEndpoint::MetricsEndpoint(Client& client, ServerMetrics server, std::uint64_t exact_up_to,
                                 const std::string& topics, std::size_t busiest)
    : state_(std::make_shared<State>(client, std::move(server), exact_up_to,
                                     topics.empty() ? std::nullopt
                                                    : std::optional(metrics_topics(topics)),
                                     busiest)) {}

MetricsEndpoint::~MetricsEndpoint() { stop(); }

void MetricsEndpoint::stop() {
  if (state_->stopping.exchange(true)) return;
  state_->pool.join();
}

bool MetricsEndpoint::handle(HttpRequest& request, Responder& respond,
                             const std::shared_ptr<const Credentials>& credentials) {
  const std::string_view target(request.target().data(), request.target().size());
  if (target.substr(0, target.find('?')) != "/metrics") return false;
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    HttpResponse r = plain_text(405, "GET only\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    respond(std::move(r));
    return true;
  }
  if (std::optional<HttpResponse> refused =
          web_guard::refusal(request, credentials.get(), "/metrics")) {
    respond(std::move(*refused));
    return true;
  }
  if (state_->stopping) {
    respond(plain_text(503, "txmq serve is stopping\n"));
    return true;
  }
  const bool head = request.method() == http::verb::head;
  asio::post(state_->pool, [state = state_, respond, head] {
    HttpResponse r;
    try {
      const MetricsSelection selection{.named = state->topics ? &*state->topics : nullptr,
                                       .busiest = state->busiest};
      r = plain_text(200, render_metrics(state->client, state->exact_up_to, &state->server,
                                         selection, &state->activity));
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    } catch (const std::exception& e) {
      r = plain_text(503, fmt::format("metrics unavailable: {}\n", e.what()));
    }
    if (head) r.body.clear();
    respond(std::move(r));
  });
  return true;
}

}  // namespace txmq::server
