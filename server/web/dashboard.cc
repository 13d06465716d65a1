#include "server/web/dashboard.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http/verb.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/auth/crypto.h"
#include "server/auth/web_guard.h"
#include "util/codec.h"

namespace txmq::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace dashboard_internal {


Preview preview(std::string_view payload, std::size_t max_bytes, bool cut) {
  Preview p;
  std::size_t i = 0;
  bool text = true;
  while (i < payload.size() && i < max_bytes) {
    const std::optional<util::Utf8Char> c = util::utf8_char(payload.substr(i));
    if (!c) {
      text = false;
      break;
    }
    if (i + c->size > max_bytes) break;
    i += c->size;
  }
  if (text) {
    // Valid so far; the rest must be valid too for the payload to count as text (what was
    // read of it: a cut payload may end inside a character).
    const std::string_view rest = payload.substr(i);
    text = util::is_valid_utf8(rest);
    for (std::size_t drop = 1; cut && !text && drop <= std::min<std::size_t>(3, rest.size()); ++drop) {
      text = util::is_valid_utf8(rest.substr(0, rest.size() - drop));
    }
  }
  if (text) {
    p.kind = "text";
    p.text = std::string(payload.substr(0, i));
    p.truncated = cut || i < payload.size();
    return p;
  }
  p.kind = "hex";
  const std::size_t n = std::min(payload.size(), std::max<std::size_t>(max_bytes / 4, 16));
  for (std::size_t k = 0; k < n; ++k) {
    if (k > 0) p.text.push_back(' ');
    p.text += util::hex_encode(payload.substr(k, 1));
  }
  p.truncated = cut || n < payload.size();
  return p;
}

}  // namespace dashboard_internal

namespace {

using dashboard_internal::Preview;

// A dead letter's preview in the dashboard, in bytes.
constexpr std::size_t kPreviewBytes = 300;
// Topics on a page of the overview (the page may ask for up to 200).
constexpr std::size_t kOverviewPage = 50;

// One sample of a group.
struct Point {
  double at = 0;  // seconds since the epoch (this server's clock)
  std::uint64_t ready = 0, in_flight = 0, delayed = 0, waiting_on_key = 0, dead = 0;
  std::uint64_t ids_taken = 0;
  double oldest_ready_age_seconds = 0, lag_seconds = 0;
  bool estimated = false;  // a table was too deep to count exactly (Client::stats)
};

struct Series {
  std::deque<Point> points;  // the ring: at most options.points, one per sample_every
  Point latest;              // the newest sample, also when it did not go into the ring
};

struct TopicView {
  TopicInfo info;
  std::vector<GroupInfo> groups;
};

double epoch_seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

std::int64_t epoch_ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

double seconds_of(Micros m) { return static_cast<double>(m.count()) / 1e6; }

json settings_json(const TopicInfo& t) {
  const TopicOptions& o = t.options;
  return {{"lease_seconds", seconds_of(o.lease)},
          {"max_attempts", o.max_attempts},
          {"max_payload_bytes", o.max_payload_bytes},
          {"dedup_window_seconds", seconds_of(o.dedup_window)},
          {"retry_initial_seconds", seconds_of(o.retry.initial)},
          {"retry_multiplier", o.retry.multiplier},
          {"retry_max_seconds", seconds_of(o.retry.max)},
          {"retry_jitter", o.retry.jitter},
          {"partitions", o.partitions},
          {"archive_seconds", seconds_of(o.archive)},
          {"dead_letter_topic", o.dead_letter_topic},
          {"retention_seconds", seconds_of(o.retention)},
          {"created_at", epoch_ms(t.created_at)}};
}

// Rates between two samples: sends from the growth of the id counter, and "finished" (left
// the group's queue: acknowledged, dead-lettered, purged, expired) as sends minus the growth of
// what is unfinished. Null when they cannot be told (one sample, or a counter that went back:
// the topic was dropped and created again).
json rates_between(const Point& a, const Point& b) {
  const double dt = b.at - a.at;
  if (dt <= 0.5 || b.ids_taken < a.ids_taken) return {{"sent", nullptr}, {"finished", nullptr}};
  const double sent = static_cast<double>(b.ids_taken - a.ids_taken) / dt;
  const auto unfinished = [](const Point& p) {
    return static_cast<double>(p.ready + p.in_flight + p.delayed + p.waiting_on_key);
  };
  const double finished = std::max(0.0, sent - (unfinished(b) - unfinished(a)) / dt);
  return {{"sent", sent}, {"finished", finished}};
}

json point_json(const Point& p) {
  return {{"at", p.at},
          {"ready", p.ready},
          {"in_flight", p.in_flight},
          {"delayed", p.delayed},
          {"waiting_on_key", p.waiting_on_key},
          {"dead", p.dead},
          {"ids_taken", p.ids_taken},
          {"oldest_ready_age_seconds", p.oldest_ready_age_seconds},
          {"lag_seconds", p.lag_seconds},
          {"estimated", p.estimated}};
}

std::string param(const std::vector<std::pair<std::string, std::string>>& params,
                  std::string_view name) {
  for (const auto& [k, v] : params) {
    if (k == name) return v;
  }
  return {};
}

// Thrown by handlers for a refused request: its status and message.
struct Refused {
  unsigned status;
  std::string message;
};

std::vector<std::uint64_t> ids_of(const json& body) {
  if (!body.contains("ids") || !body["ids"].is_array() || body["ids"].empty() ||
      body["ids"].size() > 1000) {
    throw Refused{400, "ids: a list of 1 to 1000 message ids"};
  }
  std::vector<std::uint64_t> ids;
  for (const json& v : body["ids"]) {
    // Ids above 2^53 do not survive a JavaScript number: the page sends strings.
    if (v.is_number_unsigned()) {
      ids.push_back(v.get<std::uint64_t>());
      continue;
    }
    if (!v.is_string()) throw Refused{400, "ids: numbers or decimal strings"};
    const std::string& s = v.get_ref<const std::string&>();
    std::uint64_t id = 0;
    if (s.empty() || s.size() > 20) throw Refused{400, "ids: numbers or decimal strings"};
    for (char c : s) {
      if (c < '0' || c > '9') throw Refused{400, "ids: numbers or decimal strings"};
      id = id * 10 + static_cast<std::uint64_t>(c - '0');
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

struct Dashboard::State : std::enable_shared_from_this<Dashboard::State> {
  State(Client& c, DashboardOptions o) : client(c), options(std::move(o)) {}

  Client& client;
  const DashboardOptions options;
  asio::thread_pool pool{2};
  std::atomic<bool> stopping{false};
  // When the last page or API request came (steady clock, ns since its epoch); 0: never.
  std::atomic<std::int64_t> last_view{0};

  std::mutex sample_mutex;  // one sampling at a time; held while sampling
  std::mutex data_mutex;    // guards what follows
  std::map<std::pair<std::string, std::string>, Series> series;
  std::vector<TopicName> listed;                 // every topic, by name, at the last sampling
  std::map<std::string, TopicView, std::less<>> views;  // the topics sampled, with their groups
  std::set<std::string, std::less<>> wanted;     // the topics the page shows: sampled in the background
  std::optional<SteadyClock::time_point> sampled_at;
  std::string sample_error;

  std::mutex sampler_mutex;
  std::condition_variable sampler_wake;
  std::thread sampler;

  void log(LogLevel level, std::string_view line, const json& fields = nullptr) const {
    if (options.log) options.log(level, line, fields);
  }

  void touch() {
    last_view.store(SteadyClock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }

  bool viewed_recently() const {
    const std::int64_t v = last_view.load(std::memory_order_relaxed);
    if (v == 0) return false;
    const auto last = SteadyClock::time_point(SteadyClock::duration(v));
    return SteadyClock::now() - last < options.idle_after;
  }

  // Lists the topics, and reads the groups and counts of those `choose` picks from the list
  // (the page in view: reading every topic would cost a few statements per used queue, seconds
  // for thousands); records them (into a group's ring when its last point is about
  // sample_every old). The series of topics not read now are kept for as long as their ring
  // spans, so that paging back finds their history. Takes sample_mutex; a caller that waited
  // for another sampling uses its result when it is fresh enough and read what it wants.
  using Chooser = std::function<std::set<std::string, std::less<>>(const std::vector<TopicName>&)>;
  void sample(std::chrono::milliseconds fresh_enough, const Chooser& choose) {
    std::lock_guard sampling(sample_mutex);
    {
      std::lock_guard lock(data_mutex);
      if (sampled_at && SteadyClock::now() - *sampled_at < fresh_enough) {
        bool covered = true;
        for (const std::string& name : choose(listed)) {
          if (views.find(name) == views.end()) covered = false;
        }
        if (covered) return;
      }
    }
    std::vector<TopicName> all;
    std::map<std::string, TopicView, std::less<>> read;
    std::vector<std::pair<std::pair<std::string, std::string>, Point>> points;
    try {
      // Names only (reading every topic's settings took 0.5 s with 100,000 topics), then the
      // settings of the topics chosen.
      all = client.list_topic_names();
      const std::set<std::string, std::less<>> chosen = choose(all);
      for (const TopicName& listed_topic : all) {
        if (stopping) return;
        if (chosen.count(listed_topic.name) == 0) continue;
        TopicView view;
        try {
          view.info = client.topic(listed_topic.name);
        } catch (const Error& e) {
          if (e.code() != Errc::kNotFound) throw;  // dropped meanwhile: left out
          continue;
        }
        view.info.has_tables = listed_topic.has_tables;
        if (!view.info.has_tables) {
          // Never used: its one group is empty, and reading it would cost statements that
          // thousands of idle queues add up (docs/sqs.md, "Many queues").
          view.groups.push_back(GroupInfo{"default", view.info.created_at});
          Point p;
          p.at = epoch_seconds(Clock::now());
          points.push_back({{view.info.name, "default"}, p});
          read.emplace(view.info.name, std::move(view));
          continue;
        }
        try {
          view.groups = client.list_groups(view.info.name);
          for (const GroupInfo& g : view.groups) {
            // As /metrics: exact up to 2 x 1,000 rows per table, estimated beyond, so that a
            // sample stays well under a second on deep queues (docs/metrics.md).
            const TopicStats s = client.stats(view.info.name, g.name, kDefaultExactUpTo);
            Point p;
            p.at = epoch_seconds(Clock::now());
            p.ready = s.ready;
            p.in_flight = s.in_flight;
            p.delayed = s.delayed;
            p.waiting_on_key = s.waiting_on_key;
            p.dead = s.dead;
            p.ids_taken = s.ids_taken;
            p.oldest_ready_age_seconds = s.oldest_ready_age_seconds;
            p.lag_seconds = s.lag_seconds;
            p.estimated = s.estimated;
            points.push_back({{view.info.name, g.name}, p});
          }
        } catch (const Error& e) {
          if (e.code() != Errc::kNotFound) throw;  // dropped meanwhile: left out
          continue;
        }
        read.emplace(view.info.name, std::move(view));
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(data_mutex);
      sample_error = e.what();
      log(LogLevel::kError, fmt::format("dashboard: sampling failed: {}", e.what()),
          {{"error", e.what()}});
      return;
    }
    std::lock_guard lock(data_mutex);
    sample_error.clear();
    sampled_at = SteadyClock::now();
    const double every = std::chrono::duration<double>(options.sample_every).count();
    const double now = epoch_seconds(Clock::now());
    const double kept_for = every * static_cast<double>(options.points);
    std::set<std::string, std::less<>> existing;
    for (const TopicName& t : all) existing.insert(t.name);
    std::map<std::pair<std::string, std::string>, Series> next;
    for (auto& [key, p] : points) {
      Series& s = next[key];
      if (auto old = series.find(key); old != series.end()) s = std::move(old->second);
      // A topic dropped and created again starts a new history.
      if (!s.points.empty() && p.ids_taken < s.points.back().ids_taken) s.points.clear();
      s.latest = p;
      if (s.points.empty() || p.at - s.points.back().at >= every * 0.9) {
        s.points.push_back(p);
        while (s.points.size() > options.points) s.points.pop_front();
      }
    }
    for (auto& [key, s] : series) {
      // Not read now: kept while its topic exists and its history is within the ring's span.
      if (read.count(key.first) > 0 || next.count(key) > 0) continue;
      if (existing.count(key.first) == 0 || now - s.latest.at > kept_for) continue;
      next.emplace(key, std::move(s));
    }
    series = std::move(next);  // dropped topics and groups go
    listed = std::move(all);
    views = std::move(read);
  }

  void run_sampler() {
    std::unique_lock lock(sampler_mutex);
    while (!stopping) {
      sampler_wake.wait_for(lock, options.sample_every);
      if (stopping) break;
      if (!viewed_recently()) continue;
      lock.unlock();
      std::set<std::string, std::less<>> names;
      {
        std::lock_guard data(data_mutex);
        names = wanted;
      }
      sample(options.sample_every / 2, [&names](const std::vector<TopicName>&) { return names; });
      lock.lock();
    }
  }

  // --- API ------------------------------------------------------------------------------------

  json topic_json(const TopicView& t) const {
    json topic = {{"name", t.info.name}, {"settings", settings_json(t.info)},
                  {"groups", json::array()}};
    for (const GroupInfo& g : t.groups) {
      auto it = series.find({t.info.name, g.name});
      if (it == series.end()) continue;
      const Series& s = it->second;
      json group = point_json(s.latest);
      group["name"] = g.name;
      group["created_at"] = epoch_ms(g.created_at);
      // Rates over the last minute of samples (or what there is of it).
      const Point* from = nullptr;
      for (const Point& p : s.points) {
        if (s.latest.at - p.at <= 65 && s.latest.at - p.at > 0.5) {
          from = &p;
          break;
        }
      }
      group["rates"] = from ? rates_between(*from, s.latest)
                            : json{{"sent", nullptr}, {"finished", nullptr}};
      topic["groups"].push_back(std::move(group));
    }
    return topic;
  }

  // The topics whose names contain `search`, by name: how many, and those of the window
  // [offset, offset + limit).
  struct Page {
    std::vector<std::string> names;
    std::size_t total = 0;
  };
  static Page page_of(const std::vector<TopicName>& all, const std::string& search,
                      std::size_t offset, std::size_t limit) {
    Page page;
    for (const TopicName& t : all) {
      if (!search.empty() && t.name.find(search) == std::string::npos) continue;
      if (page.total >= offset && page.total - offset < limit) page.names.push_back(t.name);
      ++page.total;
    }
    return page;
  }

  // One page of the topics whose names contain `search`, by name, and the `selected` topic
  // (shown in detail, wherever it is in the list).
  json overview(const std::string& search, std::size_t offset, std::size_t limit,
                const std::string& selected) {
    const auto to_read = [&](const std::vector<TopicName>& all) {
      const Page page = page_of(all, search, offset, limit);
      std::set<std::string, std::less<>> names(page.names.begin(), page.names.end());
      if (!selected.empty()) names.insert(selected);
      return names;
    };
    sample(std::chrono::milliseconds(2000), to_read);
    std::lock_guard lock(data_mutex);
    const Page page = page_of(listed, search, offset, limit);
    wanted = std::set<std::string, std::less<>>(page.names.begin(), page.names.end());
    if (!selected.empty()) wanted.insert(selected);
    json out = {{"now", epoch_seconds(Clock::now())},
                {"sample_every_seconds",
                 std::chrono::duration<double>(options.sample_every).count()},
                {"points", options.points},
                {"error", sample_error.empty() ? json(nullptr) : json(sample_error)},
                {"search", search},
                {"offset", offset},
                {"limit", limit},
                {"topics", json::array()},
                {"total", page.total},
                {"all_topics", listed.size()},
                {"selected", nullptr}};
    for (const std::string& name : page.names) {
      if (auto v = views.find(name); v != views.end()) out["topics"].push_back(topic_json(v->second));
    }
    if (!selected.empty()) {
      if (auto v = views.find(selected); v != views.end()) out["selected"] = topic_json(v->second);
    }
    return out;
  }

  json history(const std::string& topic, const std::string& group) {
    std::lock_guard lock(data_mutex);
    auto it = series.find({topic, group.empty() ? "default" : group});
    json points = json::array();
    if (it != series.end()) {
      const Series& s = it->second;
      const Point* before = nullptr;
      const auto add = [&](const Point& p) {
        json j = point_json(p);
        j["rates"] = before ? rates_between(*before, p) : json{{"sent", nullptr}, {"finished", nullptr}};
        points.push_back(std::move(j));
        before = &p;
      };
      for (const Point& p : s.points) add(p);
      // The newest sample too, when it is newer than the ring's last: the charts end now.
      if (!s.points.empty() && s.latest.at > s.points.back().at + 0.5) add(s.latest);
    }
    return {{"topic", topic}, {"group", group}, {"points", std::move(points)}};
  }

  json in_flight(const std::string& topic, const std::string& group, std::size_t limit) {
    json out = json::array();
    for (const InFlightMessage& m : client.in_flight(topic, limit, group)) {
      out.push_back({{"id", std::to_string(m.id)},
                     {"owner", m.owner},
                     {"attempt", m.attempt},
                     {"lease_expires_at", epoch_ms(m.lease_expires_at)}});
    }
    return {{"topic", topic}, {"group", group}, {"messages", std::move(out)},
            {"limit", limit}, {"now", epoch_ms(Clock::now())}};
  }

  json dead(const std::string& topic, const std::string& group, std::size_t limit) {
    json out = json::array();
    // The previews' bytes only (and one more, to tell a longer payload), not whole payloads.
    for (const DeadLetter& d : client.dead_letters(topic, limit, group, kPreviewBytes + 4)) {
      const Preview p = dashboard_internal::preview(d.payload, kPreviewBytes,
                                                    d.payload.size() < d.payload_size);
      json attributes = json::object();
      for (const auto& [name, value] : d.attributes) {
        const Preview v = dashboard_internal::preview(value.value, 100);
        attributes[name] = {{"type", value.type}, {"kind", v.kind}, {"value", v.text},
                            {"truncated", v.truncated}};
      }
      out.push_back({{"id", std::to_string(d.id)},
                     {"key", d.key ? json(*d.key) : json(nullptr)},
                     {"attempts", d.attempts},
                     {"last_owner", d.last_owner},
                     {"enqueued_at", epoch_ms(d.enqueued_at)},
                     {"died_at", epoch_ms(d.died_at)},
                     {"size", d.payload_size},
                     {"preview", p.text},
                     {"preview_kind", p.kind},
                     {"truncated", p.truncated},
                     {"attributes", std::move(attributes)}});
    }
    return {{"topic", topic}, {"group", group}, {"messages", std::move(out)}, {"limit", limit}};
  }

  json change_dead(bool requeue, const json& body) {
    if (!body.is_object() || !body.contains("topic") || !body["topic"].is_string()) {
      throw Refused{400, "topic: the topic's name"};
    }
    const std::string topic = body["topic"].get<std::string>();
    const std::string group =
        body.contains("group") && body["group"].is_string() ? body["group"].get<std::string>() : "";
    const std::vector<std::uint64_t> ids = ids_of(body);  // never empty: empty means all
    const std::size_t n = requeue ? client.requeue_dead(topic, ids, group)
                                  : client.delete_dead(topic, ids, group);
    log(LogLevel::kInfo,
        fmt::format("dashboard: {} {} of {} dead letters of {} (group {})",
                    requeue ? "requeued" : "deleted", n, ids.size(), topic,
                    group.empty() ? "default" : group),
        {{"action", requeue ? "requeue_dead" : "delete_dead"},
         {"topic", topic},
         {"group", group.empty() ? "default" : group},
         {"asked", ids.size()},
         {"done", n}});
    // The next overview shows the change.
    {
      std::lock_guard lock(data_mutex);
      sampled_at.reset();
    }
    return {{requeue ? "requeued" : "deleted", n}};
  }
};

Dashboard::Dashboard(Client& client, DashboardOptions options)
    : state_(std::make_shared<State>(client, std::move(options))) {
  state_->sampler = std::thread([s = state_.get()] { s->run_sampler(); });
}

Dashboard::~Dashboard() { stop(); }

void Dashboard::stop() {
  {
    std::lock_guard lock(state_->sampler_mutex);
    if (state_->stopping.exchange(true)) return;
  }
  state_->sampler_wake.notify_all();
  if (state_->sampler.joinable()) state_->sampler.join();
  state_->pool.join();
}

namespace {

void secure(HttpResponse& r) {
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; "
                         "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                         "form-action 'none'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Cache-Control", "no-store");
}

}  // namespace

bool Dashboard::handle(HttpRequest& request, Responder& respond,
                       const std::shared_ptr<const Credentials>& credentials) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const bool index = target == "/" && request.method() == http::verb::get;
  if (!index && !path.starts_with("/ui/")) return false;

  auto answer = [&respond](HttpResponse r) {
    secure(r);
    respond(std::move(r));
  };
  if (std::optional<HttpResponse> refused =
          web_guard::refusal(request, credentials.get(), "the txmq dashboard")) {
    answer(std::move(*refused));
    return true;
  }
  state_->touch();

  if (request.method() == http::verb::get) {
    for (std::size_t i = 0; i < kDashboardAssetCount; ++i) {
      const DashboardAsset& a = kDashboardAssets[i];
      if (a.path == path && (path != "/" || index)) {
        HttpResponse r;
        r.content_type = std::string(a.content_type);
        r.body = std::string(a.body);
        answer(std::move(r));
        return true;
      }
    }
  }

  const bool api = path.starts_with("/ui/api/");
  if (!api) {
    answer(plain_text(404, "no such page"));
    return true;
  }
  const std::string_view name = path.substr(std::string_view("/ui/api/").size());
  const bool post = name == "dead/requeue" || name == "dead/delete";
  const bool get = name == "overview" || name == "history" || name == "inflight" || name == "dead";
  if (!post && !get) {
    answer(plain_text(404, "no such API call"));
    return true;
  }
  if ((post && request.method() != http::verb::post) ||
      (get && request.method() != http::verb::get)) {
    HttpResponse r = plain_text(405, post ? "POST only" : "GET only");
    r.headers.emplace_back("Allow", post ? "POST" : "GET");
    answer(std::move(r));
    return true;
  }
  if (post) {
    // Cross-site requests: a form or a simple fetch cannot set this header, and a fetch that
    // sets it needs a CORS preflight, which is never granted.
    if (request["X-Txmq-Dashboard"] != "1") {
      answer(plain_text(403, "changes need the header X-Txmq-Dashboard: 1"));
      return true;
    }
    const std::string_view origin = header_of(request, http::field::origin);
    const std::string_view host = header_of(request, http::field::host);
    if (!origin.empty() && origin != fmt::format("http://{}", host) &&
        origin != fmt::format("https://{}", host)) {
      answer(plain_text(403, "cross-origin changes are refused"));
      return true;
    }
  }

  util::FormPairs params;
  if (q != std::string_view::npos) {
    // The page sends at most topic, group, limit, search, offset and selected: a query of
    // more is not the page's.
    constexpr std::size_t kMaxQueryPairs = 64;
    util::FormFault fault = util::FormFault::kNone;
    std::optional<util::FormPairs> decoded =
        util::form_decode(target.substr(q + 1), util::BadEscape::kRefuse, kMaxQueryPairs, fault);
    if (!decoded) {
      answer(plain_text(400, fault == util::FormFault::kTooManyPairs
                                 ? fmt::format("the query has more than {} parameters",
                                               kMaxQueryPairs)
                                 : "the query has a '%' not followed by two hex digits"));
      return true;
    }
    params = std::move(*decoded);
  }
  std::string body = std::move(request.body());
  if (state_->stopping) {
    answer(plain_text(503, "txmq serve is stopping"));
    return true;
  }
  asio::post(state_->pool, [state = state_, name = std::string(name), params = std::move(params),
                            body = std::move(body), respond = std::move(respond)]() mutable {
    HttpResponse r;
    r.content_type = "application/json";
    try {
      const std::string topic = param(params, "topic");
      const std::string group = param(params, "group");
      std::size_t limit = 100;
      if (const std::string l = param(params, "limit"); !l.empty()) {
        limit = std::clamp<std::size_t>(std::strtoul(l.c_str(), nullptr, 10), 1, 1000);
      }
      if (name != "overview" && topic.empty() && (name == "history" || name == "inflight" ||
                                                  name == "dead")) {
        throw Refused{400, "topic: the topic's name"};
      }
      json out;
      if (name == "overview") {
        // The page's search (a part of a topic's name) and its window of the list.
        const std::string search = param(params, "search");
        if (search.size() > 64) throw Refused{400, "search: at most 64 characters"};
        std::size_t offset = 0;
        if (const std::string o = param(params, "offset"); !o.empty()) {
          if (o.size() > 9 || o.find_first_not_of("0123456789") != std::string::npos) {
            throw Refused{400, "offset: a number of topics to skip"};
          }
          offset = std::stoul(o);
        }
        const std::size_t page = param(params, "limit").empty() ? kOverviewPage
                                                                : std::min<std::size_t>(limit, 200);
        const std::string selected = param(params, "selected");
        if (selected.size() > 64) throw Refused{400, "selected: a topic's name"};
        out = state->overview(search, offset, page, selected);
      }
      else if (name == "history") out = state->history(topic, group);
      else if (name == "inflight") out = state->in_flight(topic, group, limit);
      else if (name == "dead") out = state->dead(topic, group, limit);
      else {
        json input = json::parse(body, nullptr, false);
        if (input.is_discarded()) throw Refused{400, "the body must be a JSON object"};
        out = state->change_dead(name == "dead/requeue", input);
      }
      r.body = out.dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const Refused& e) {
      r.status = e.status;
      r.body = json{{"error", e.message}}.dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const Error& e) {
      r.status = e.code() == Errc::kNotFound          ? 404
                 : e.code() == Errc::kInvalidArgument ? 400
                 : e.retryable()                      ? 503
                                                      : 500;
      r.body = json{{"error", e.what()}}.dump(-1, ' ', false, json::error_handler_t::replace);
      if (r.status >= 500) {
        state->log(LogLevel::kError, fmt::format("dashboard: {}: {}", name, e.what()),
                   {{"api", name}, {"status", r.status}, {"error", e.what()}});
      }
    } catch (const std::exception& e) {
      r.status = 500;
      r.body = json{{"error", e.what()}}.dump(-1, ' ', false, json::error_handler_t::replace);
      state->log(LogLevel::kError, fmt::format("dashboard: {}: {}", name, e.what()),
                 {{"api", name}, {"status", r.status}, {"error", e.what()}});
    }
    secure(r);
    respond(std::move(r));
  });
  return true;
}

}  // namespace txmq::server
