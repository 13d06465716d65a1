// Judges a fault run from the histories (fault.h), in the manner of Jepsen's total-queue
// checker: every message whose send was acknowledged is delivered (lost = 0), nothing is
// delivered that was never sent (unexpected = 0), and more that a queue's users count on.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "fault.h"
#include "engine/partitions.h"

namespace txmq::fault {
namespace {

enum class Outcome { kOk, kFail, kUnknown };

struct Attempt {
  char kind = '?';  // S single send, B batch, T transaction (exactly-once topic)
  std::size_t count = 0;
  std::string key = "-";  // "-": none; "*": a batch with several keys
  std::int64_t at = 0;    // when it was made
  Outcome outcome = Outcome::kUnknown;  // no outcome line: the producer was killed meanwhile
};

struct Delivery {
  std::int64_t time = -1;  // when it was written down; -1: not timed (txmq consume's handlers)
  std::uint64_t id = 0;
  int attempt = 0;  // the database's count: a higher attempt was claimed later
  std::string receipt, key, payload;
};

struct Acks {
  std::unordered_map<std::string, std::int64_t> started;  // receipt → time the ack began
  std::unordered_set<std::string> ok;                     // receipts whose ack returned kOk
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

template <typename T>
T number(const std::string& text) {
  T value{};
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// payload → (tag of its attempt, index); false when it is not of a form any producer sends.
bool parse_payload(const std::string& payload, std::string& tag, std::size_t& index) {
  if (payload.empty()) return false;
  if (payload[0] == 's') {
    tag = payload;
    index = 0;
    return true;
  }
  std::size_t dot = payload.rfind('.');
  if (dot == std::string::npos) return false;
  tag = payload.substr(0, dot);
  auto [end, ec] =
      std::from_chars(payload.data() + dot + 1, payload.data() + payload.size(), index);
  return ec == std::errc() && end == payload.data() + payload.size();
}

// How long clients went without a success after a node fault: from the fault to the first
// success after it, wherever that falls (an outage can outlast the fault's window: the next fault
// starts 3 s after the nodes are Synced, not after the clients are served again), and the longest
// time between two successes from the fault to the end of its window (the next node fault). An
// outage that began before the fault belongs to the earlier fault, which is judged for it.
// Negative: no success after the fault at all.
struct Service {
  double first = -1, longest = -1;
  bool past_window = false;  // the first success came after the window's end
};

Service service_after(const std::vector<std::int64_t>& times, std::int64_t at, std::int64_t end) {
  Service s;
  auto it = std::upper_bound(times.begin(), times.end(), at);
  if (it == times.end()) return s;
  s.first = static_cast<double>(*it - at) / 1e6;
  s.longest = s.first;
  s.past_window = *it > end;
  std::int64_t previous = *it;
  for (++it; it != times.end() && *it <= end; ++it) {
    s.longest = std::max(s.longest, static_cast<double>(*it - previous) / 1e6);
    previous = *it;
  }
  return s;
}

// Clients must have service again this soon after any node fault (docs/faults.md: within 25 s
// of the writer's death).
constexpr double kServiceBackSeconds = 25;
// ... and this soon after the writer froze (the library's heartbeat, db/cluster.h): a client
// must not wait for its read_timeout (30 s) on a writer that stopped answering.
constexpr double kFrozenWriterSeconds = 10;
// Conflicts (certification failures, BF aborts) are expected only this near a change of writer.
constexpr std::int64_t kWriterChangeWindowUs = 30'000'000;
// The shards mode: the longest time the unkeyed producer may go without a successful send
// while one server of three is down. A send that meets the dead server fails over to another
// (after the pool's reconnect attempts) and the server is then skipped for a while; a gap near
// the whole outage (3 to 6 s and the restart) would mean that sends wait for the dead server.
constexpr double kUnkeyedGapSeconds = 3.0;
// ... and the longest time without a delivery while one server is frozen (SIGSTOP: it accepts
// connections and answers nothing): receive, process, ack and send go on without a server that
// has not answered within a second (src/shards/visits.h). The unkeyed producer keeps the kill's
// bound: its send in flight on the frozen server ends in commit_unknown after that second.
constexpr double kFrozenServerGapSeconds = 2.0;

struct GroupResult {
  std::string name;
  std::uint64_t deliveries = 0, distinct = 0, lost = 0, unexpected = 0, failed_delivered = 0,
                duplicates = 0, partial = 0, order_violations = 0, stale_acks = 0,
                redelivered_after_ack = 0;
  bool timed = false, acks_logged = false;
};

class Checker {
 public:
  explicit Checker(const RunRecord& run) : run_(run) {
    for (const std::string& path : run.producer_histories) read_producer(path);
    for (const auto& [tag, a] : attempts_) {
      if (a.outcome == Outcome::kOk) ++sent_ok_;
      if (a.outcome == Outcome::kFail) ++sent_failed_;
      if (a.outcome == Outcome::kUnknown) ++sent_unknown_;
    }
  }

  bool judge() {
    std::vector<GroupResult> groups;
    {
      std::vector<Delivery> deliveries;
      Acks acks;
      for (const std::string& path : run_.consumer_histories) read_consumer(path, deliveries, acks);
      groups.push_back(judge_group(fmt::format("{} (receive+ack)", kRawGroup), deliveries, &acks));
    }
    {
      std::vector<Delivery> deliveries;
      for (const std::string& path : run_.worker_histories) {
        read_worker(path, deliveries);
      }
      groups.push_back(judge_group(fmt::format("{} (Worker)", kWorkerGroup), deliveries, nullptr));
    }
    {
      std::vector<Delivery> deliveries;
      for (const std::string& line : lines_of(run_.cli_deliveries)) {
        std::vector<std::string> w = split(line);
        if (w.size() < 4 || w[0] != "C") continue;
        deliveries.push_back({-1, number<std::uint64_t>(w[1]), number<int>(w[2]), {}, "-", w[3]});
      }
      groups.push_back(
          judge_group(fmt::format("{} (txmq consume)", kCliGroup), deliveries, nullptr));
    }
    GroupResult eo = judge_exactly_once();
    print(groups, eo);

    // Each failed check is named, so that the verdict's last line says what failed (CI shows
    // only the end of the output).
    auto require = [this](bool held, std::string what) {
      if (!held) failures_.push_back(std::move(what));
    };
    require(run_.faults.drained, "not drained");
    require(run_.faults.dead_letters == 0, "dead letters");
    require(run_.faults.unbidden_exits.empty(), "children exited unbidden");
    require(run_.faults.partial_batches_seen == 0, "partly visible batches");
    require(eo.duplicates == 0, "exactly-once duplicates");
    require(torn_transactions_ == 0, "torn transactions");
    for (const GroupResult* g : {&groups[0], &groups[1], &groups[2], &eo}) {
      require(g->lost == 0, g->name + ": lost");
      require(g->unexpected == 0, g->name + ": unexpected");
      require(g->failed_delivered == 0, g->name + ": failed sends delivered");
      require(g->partial == 0, g->name + ": partial batches");
      require(g->order_violations == 0, g->name + ": key order");
      require(g->stale_acks == 0, g->name + ": stale acks");
      require(g->redelivered_after_ack == 0, g->name + ": redelivered after ack");
    }
    require(resilience_ok(), "no outage and recovery reported by the Worker and txmq consume");
    require(scan_logs(), "error 1047 reached a client");
    if (run_.cluster.enabled) require(judge_cluster(), "cluster checks");
    if (run_.shards.enabled) require(judge_shards(), "shards checks");
    return failures_.empty();
  }

  const std::vector<std::string>& failures() const { return failures_; }

 private:
  void read_producer(const std::string& path) {
    const auto& unkeyed = run_.shards.unkeyed_histories;
    const bool unkeyed_history = std::find(unkeyed.begin(), unkeyed.end(), path) != unkeyed.end();
    for (const std::string& line : lines_of(path)) {
      std::vector<std::string> w = split(line);
      if (w.size() >= 5 && w[1] == "A") {
        attempts_[w[3]] = Attempt{w[2][0], number<std::size_t>(w[4]),
                                  w.size() >= 6 ? w[5] : "-", number<std::int64_t>(w[0]),
                                  Outcome::kUnknown};
      } else if (w.size() >= 4 && w[1] == "O") {
        if (w[3] == "ok") sends_ok_at_.push_back(number<std::int64_t>(w[0]));
        auto it = attempts_.find(w[2]);
        if (it == attempts_.end()) continue;
        if (w[3] == "ok" && it->second.kind != 'T' && it->second.key == "-") {
          unkeyed_ok_at_.push_back(number<std::int64_t>(w[0]));
          if (unkeyed_history) unkeyed_producer_ok_at_.push_back(number<std::int64_t>(w[0]));
        }
        if (w.size() >= 5 && w[3] == "fail" && w[4] == "invalid_argument" &&
            it->second.key == "*") {
          ++batches_refused_;
        }
        it->second.outcome = w[3] == "ok"     ? Outcome::kOk
                             : w[3] == "fail" ? Outcome::kFail
                                              : Outcome::kUnknown;
      }
    }
  }

  // The attempt a delivered payload came from, with its tag and index; nullptr when no producer
  // sent it to that topic (transactions send to the exactly-once one, the rest to the other).
  const Attempt* attempt_of(const std::string& payload, bool exactly_once, std::string& tag,
                            std::size_t& index) const {
    if (!parse_payload(payload, tag, index)) return nullptr;
    auto it = attempts_.find(tag);
    if (it == attempts_.end() || (it->second.kind == 'T') != exactly_once ||
        index >= it->second.count) {
      return nullptr;
    }
    return &it->second;
  }

  static Delivery delivery_of(const std::vector<std::string>& w) {
    // TIME D id attempt receipt key payload
    return {number<std::int64_t>(w[0]),
            number<std::uint64_t>(w[2]),
            number<int>(w[3]),
            w[4],
            w[5],
            w[6]};
  }

  void read_consumer(const std::string& path, std::vector<Delivery>& deliveries, Acks& acks) {
    for (const std::string& line : lines_of(path)) {
      std::vector<std::string> w = split(line);
      if (w.size() >= 7 && w[1] == "D") {
        deliveries.push_back(delivery_of(w));
        delivered_at_.push_back(deliveries.back().time);
        group_delivered_at_["receive+ack"].push_back(deliveries.back().time);
      }
      if (w.size() >= 3 && w[1] == "E" && w[2] == "receive") {
        claim_errors_at_.push_back(number<std::int64_t>(w[0]));
      }
      if (w.size() >= 4 && w[1] == "S") acks.started[w[3]] = number<std::int64_t>(w[0]);
      if (w.size() >= 5 && w[1] == "K" && w[4] == "ok") acks.ok.insert(w[3]);
      if (w.size() >= 5 && w[1] == "K" && (w[4] == "lease_lost" || w[4] == "not_found")) {
        ++late_acks_refused_;
      }
    }
  }

  void read_worker(const std::string& path, std::vector<Delivery>& deliveries) {
    for (const std::string& line : lines_of(path)) {
      std::vector<std::string> w = split(line);
      if (w.size() >= 7 && w[1] == "D") {
        deliveries.push_back(delivery_of(w));
        delivered_at_.push_back(deliveries.back().time);
        group_delivered_at_["Worker"].push_back(deliveries.back().time);
      }
      if (reports_outage(line)) ++worker_outages_;
      if (reports_recovery(line)) ++worker_recoveries_;
      if (line.find(" V ") != std::string::npos &&
          line.find("lease was lost") != std::string::npos) {
        ++late_acks_refused_;
      }
    }
  }

  // What the client (W lines, "txmq: ...") and the Worker (V lines) say about an outage.
  static bool reports_outage(const std::string& line) {
    return line.find("connection lost") != std::string::npos ||
           line.find("retrying") != std::string::npos;
  }
  static bool reports_recovery(const std::string& line) {
    return line.find("again after") != std::string::npos ||
           line.find("receiving again") != std::string::npos;
  }

  GroupResult judge_group(std::string name, std::vector<Delivery>& deliveries, const Acks* acks) {
    GroupResult g;
    g.name = std::move(name);
    g.deliveries = deliveries.size();
    g.timed = !deliveries.empty() && deliveries.front().time >= 0;
    g.acks_logged = acks != nullptr;
    std::stable_sort(deliveries.begin(), deliveries.end(),
                     [](const Delivery& a, const Delivery& b) { return a.time < b.time; });
    std::unordered_map<std::string, std::uint64_t> count;  // payload → deliveries
    std::map<std::string, std::set<std::size_t>> batches;  // batch tag → indexes delivered
    for (const Delivery& d : deliveries) {
      if (count[d.payload]++ > 0) {
        ++g.duplicates;
        continue;
      }
      std::string tag;
      std::size_t index = 0;
      const Attempt* a = attempt_of(d.payload, false, tag, index);
      if (a == nullptr) {
        ++g.unexpected;
        continue;
      }
      if (a->outcome == Outcome::kFail) ++g.failed_delivered;
      if (a->kind == 'B') batches[tag].insert(index);
    }
    g.distinct = count.size();
    for (const auto& [tag, a] : attempts_) {
      if (a.kind == 'T') continue;
      if (a.kind == 'B') {
        auto it = batches.find(tag);
        const std::size_t got = it == batches.end() ? 0 : it->second.size();
        if (got != 0 && got != a.count) ++g.partial;
        if (a.outcome == Outcome::kOk) g.lost += a.count - got;
      } else if (a.outcome == Outcome::kOk && count.find(tag) == count.end()) {
        ++g.lost;
      }
    }
    if (g.timed) g.order_violations = key_order_violations(deliveries);
    if (acks != nullptr) check_acks(deliveries, *acks, g);
    return g;
  }

  // Keyed FIFO: the next message of a key is not delivered before the one before it (by id)
  // was first delivered.
  static std::uint64_t key_order_violations(const std::vector<Delivery>& deliveries) {
    std::map<std::string, std::map<std::uint64_t, std::int64_t>> first;  // key → id → time
    for (const Delivery& d : deliveries) {
      if (d.key == "-") continue;
      first[d.key].emplace(d.id, d.time);  // sorted by time: the first one stays
    }
    std::uint64_t violations = 0;
    for (const auto& [key, by_id] : first) {
      std::int64_t last = -1;
      for (const auto& [id, time] : by_id) {
        if (time < last) ++violations;
        last = std::max(last, time);
      }
    }
    return violations;
  }

  // A receipt's ack may succeed only while no one else was given the message (a late ack from a
  // paused or slow consumer must be refused), and a message acknowledged is not delivered again.
  // Claims are ordered by their attempt number, not by when they were written down: a consumer
  // paused between its claim and its history line writes it late.
  static void check_acks(const std::vector<Delivery>& deliveries, const Acks& acks,
                         GroupResult& g) {
    std::unordered_map<std::uint64_t, std::vector<const Delivery*>> by_id;
    for (const Delivery& d : deliveries) by_id[d.id].push_back(&d);
    for (const auto& [id, list] : by_id) {
      for (const Delivery* acked : list) {
        if (acks.ok.count(acked->receipt) == 0) continue;
        auto started = acks.started.find(acked->receipt);
        for (const Delivery* later : list) {
          if (later->attempt <= acked->attempt) continue;
          // Claimed after the acknowledged delivery: by then the ack should have deleted it.
          // Written down before the ack began: the ack succeeded though someone else held it.
          ++g.redelivered_after_ack;
          if (started != acks.started.end() && later->time < started->second) ++g.stale_acks;
        }
      }
    }
  }

  GroupResult judge_exactly_once() {
    GroupResult g;
    g.name = "exactly-once (process)";
    g.deliveries = run_.effects.size();
    std::unordered_map<std::string, std::uint64_t> count;
    for (const std::string& payload : run_.effects) {
      if (count[payload]++ > 0) ++g.duplicates;
    }
    g.distinct = count.size();
    std::set<std::string> orders(run_.orders.begin(), run_.orders.end());
    for (const auto& [payload, n] : count) {
      std::string tag;
      std::size_t index = 0;
      const Attempt* a = attempt_of(payload, true, tag, index);
      if (a == nullptr) {
        ++g.unexpected;
      } else if (a->outcome == Outcome::kFail) {
        ++g.failed_delivered;
      }
    }
    for (const std::string& tag : orders) {
      auto it = attempts_.find(tag);
      if (it == attempts_.end()) ++g.unexpected;
    }
    for (const auto& [tag, a] : attempts_) {
      if (a.kind != 'T') continue;
      std::size_t got = 0;
      for (std::size_t i = 0; i < a.count; ++i) got += count.count(fmt::format("{}.{}", tag, i));
      const bool ordered = orders.count(tag) > 0;
      // The business row and the messages commit together or not at all.
      if ((got != 0 && got != a.count) || ordered != (got == a.count)) ++torn_transactions_;
      if (got != 0 && got != a.count) ++g.partial;
      if (a.outcome == Outcome::kOk) g.lost += a.count - got + (ordered ? 0 : 1);
      if (a.outcome == Outcome::kFail && ordered) ++g.failed_delivered;
    }
    return g;
  }

  // Every history and output file: the errors that reached the children, by server error
  // number, and none may be 1047 (a Galera node not ready: the library must go elsewhere).
  bool scan_logs() const {
    // The library names the server it talks to: "MariaDB error N", "MySQL error N".
    static const std::regex kErrno(R"((?:MariaDB|MySQL) error (\d+))");
    std::map<std::string, std::uint64_t> by_errno;
    std::uint64_t not_ready = 0;
    std::uint64_t ridden_out = 0;
    std::vector<std::string> examples;
    for (const std::string& path : run_.logs) {
      for (const std::string& line : lines_of(path)) {
        if (line.find("rror ") == std::string::npos && line.find("WSREP") == std::string::npos) {
          continue;  // most lines: deliveries and sends
        }
        for (std::sregex_iterator m(line.begin(), line.end(), kErrno), done; m != done; ++m) {
          ++by_errno[(*m)[1]];
        }
        if (line.find("error 1047") != std::string::npos ||
            line.find("WSREP has not yet prepared") != std::string::npos) {
          // The pool's own outage report ("database connection lost: ...; reconnecting") says
          // what it is riding out: nothing failed. Anything else is an error that reached the
          // caller.
          if (line.find("database connection lost") != std::string::npos &&
              line.find("reconnecting") != std::string::npos) {
            ++ridden_out;
            continue;
          }
          ++not_ready;
          if (examples.size() < 3) examples.push_back(fmt::format("{}: {}", path, line));
        }
      }
    }
    std::string summary;
    for (const auto& [number, n] : by_errno) summary += fmt::format(" {} x{}", number, n);
    fmt::print("errors in the children's histories and logs, by server error number:{}\n",
               summary.empty() ? " none" : summary);
    fmt::print("error 1047 (node not ready) reaching a client: {} (ridden out by the library, "
               "in its outage reports: {})\n",
               not_ready, ridden_out);
    for (const std::string& e : examples) fmt::print("  {}\n", e);
    return not_ready == 0;
  }

  // What the children reported (errors, outages, warnings) from `from` to `to`: for a node fault
  // whose clients went without service too long, the run's output then says what they met.
  void print_reports_between(std::int64_t from, std::int64_t to) const {
    std::map<std::string, std::uint64_t> count;  // the report's first words -> how many
    std::vector<std::pair<std::int64_t, std::string>> lines;  // in time order below
    for (const std::string& path : run_.logs) {
      for (const std::string& line : lines_of(path)) {
        const std::size_t space = line.find(' ');
        if (space == std::string::npos || space + 2 >= line.size() || line[space + 2] != ' ') {
          continue;
        }
        const char kind = line[space + 1];
        if (kind != 'E' && kind != 'W' && kind != 'V') continue;
        std::int64_t t = 0;
        auto [end, ec] = std::from_chars(line.data(), line.data() + space, t);
        if (ec != std::errc() || t < from || t > to) continue;
        const std::string text = line.substr(space + 3);
        ++count[text.substr(0, 60)];
        if (lines.size() < 10'000) {
          const std::size_t slash = path.rfind('/');
          lines.emplace_back(t, fmt::format("    +{:.2f} s {}: {}",
                                            static_cast<double>(t - from) / 1e6,
                                            slash == std::string::npos ? path : path.substr(slash + 1),
                                            text.substr(0, 240)));
        }
      }
    }
    fmt::print("  what the clients reported in the {:.1f} s after it ({} kinds):\n",
               static_cast<double>(to - from) / 1e6, count.size());
    std::vector<std::pair<std::uint64_t, std::string>> by_count;
    for (const auto& [text, n] : count) by_count.emplace_back(n, text);
    std::sort(by_count.rbegin(), by_count.rend());
    for (std::size_t i = 0; i < by_count.size() && i < 10; ++i) {
      fmt::print("    {:>5} x {}\n", by_count[i].first, by_count[i].second);
    }
    std::sort(lines.begin(), lines.end());
    for (std::size_t i = 0; i < lines.size() && i < 12; ++i) fmt::print("{}\n", lines[i].second);
  }

  static bool near_writer_change(const ConflictSample& c, const std::vector<std::int64_t>& at) {
    for (std::int64_t t : at) {
      if (c.from_us <= t + kWriterChangeWindowUs && c.to_us >= t - kWriterChangeWindowUs) {
        return true;
      }
    }
    return false;
  }

  // The cluster mode: service after each node fault, writes on one node at a time, the nodes'
  // tables identical at the end.
  bool judge_cluster() {
    const ClusterRecord& c = run_.cluster;
    bool ok = true;
    std::sort(sends_ok_at_.begin(), sends_ok_at_.end());
    std::sort(delivered_at_.begin(), delivered_at_.end());
    for (auto& [group, times] : group_delivered_at_) std::sort(times.begin(), times.end());
    auto seconds = [](double s) { return s < 0 ? std::string("none") : fmt::format("{:.1f}", s); };
    fmt::print(
        "\nnode faults (s: at = since the faults began, at monotonic {} us; healed = a partition's "
        "links back; without service = to the first success after the fault / longest time "
        "between two successes from the fault until the next node fault; bound {:.0f} s)\n",
        c.faults_started_us, kServiceBackSeconds);
    fmt::print("{:<8} {:>4} {:>6} {:>7} {:>7} {:>13} {:>22} {:>22}\n", "fault", "node", "writer",
               "at", "healed", "Synced after", "without a send", "without a delivery");
    for (std::size_t i = 0; i < c.node_faults.size(); ++i) {
      const NodeFault& f = c.node_faults[i];
      const std::int64_t end = i + 1 < c.node_faults.size() ? c.node_faults[i + 1].at_us
                                                             : c.producers_stopped_us;
      const Service send = service_after(sends_ok_at_, f.at_us, end);
      const Service delivery = service_after(delivered_at_, f.at_us, end);
      const double bound = f.kind == "freeze" ? kFrozenWriterSeconds : kServiceBackSeconds;
      auto bad = [&](const Service& s) {
        return s.first < 0 || s.first > bound || s.longest > bound;
      };
      // Each consumer group on its own too, against the longer bound: one group stuck while
      // the others deliver is hidden in the deliveries of all (the Worker group waited 46 s in
      // a CI run while the receive+ack consumers went on).
      std::vector<std::string> stuck_groups;
      for (auto& [group, times] : group_delivered_at_) {
        const Service g = service_after(times, f.at_us, end);
        if (g.first > kServiceBackSeconds || g.longest > kServiceBackSeconds) {
          stuck_groups.push_back(
              fmt::format("the {} group: {} / {} s without a delivery (bound {:.0f} s)", group,
                          seconds(g.first), seconds(g.longest), kServiceBackSeconds));
        }
      }
      const bool held =
          f.synced_us != 0 && !bad(send) && !bad(delivery) && stuck_groups.empty();
      ok = ok && held;
      fmt::print("{:<8} {:>4} {:>6} {:>7.1f} {:>7} {:>13} {:>22} {:>22}{}\n", f.kind,
                 f.other != 0 ? fmt::format("{}-{}", f.node, f.other) : std::to_string(f.node),
                 f.writer ? "yes" : "no", static_cast<double>(f.at_us - c.faults_started_us) / 1e6,
                 f.healed_us == 0 ? "-" : seconds(static_cast<double>(f.healed_us - f.at_us) / 1e6),
                 f.synced_us == 0 ? "never" : seconds(static_cast<double>(f.synced_us - f.at_us) / 1e6),
                 fmt::format("{} / {}", seconds(send.first), seconds(send.longest)),
                 fmt::format("{} / {}", seconds(delivery.first), seconds(delivery.longest)),
                 held ? "" : fmt::format("  <- over {:.0f} s", bound));
      if (send.past_window || delivery.past_window) {
        fmt::print("         (its clients were first served again after the next fault began)\n");
      }
      for (const std::string& g : stuck_groups) fmt::print("         {}  <- stuck\n", g);
      if (!held) {
        double longest = std::max({send.first, send.longest, delivery.first, delivery.longest,
                                   bound});
        for (auto& [group, times] : group_delivered_at_) {
          const Service g = service_after(times, f.at_us, end);
          longest = std::max({longest, g.first, g.longest});
        }
        print_reports_between(f.at_us, f.at_us + static_cast<std::int64_t>(longest * 1e6));
      }
    }
    // Writes on one node at a time: conflicts between nodes' transactions show up as
    // certification failures and BF aborts; with one writer only a change of writer (old
    // writer's transactions still in flight) may cause them.
    std::map<int, std::pair<std::uint64_t, std::uint64_t>> per_node;
    std::uint64_t outside = 0;
    for (const ConflictSample& s : c.conflicts) {
      per_node[s.node].first += s.cert_failures;
      per_node[s.node].second += s.bf_aborts;
      if (!near_writer_change(s, c.writer_changes_us)) outside += s.cert_failures + s.bf_aborts;
    }
    std::string totals;
    for (const auto& [node, n] : per_node) {
      totals += fmt::format(" node {} {}/{}", node, n.first, n.second);
    }
    std::uint64_t multi_outside = 0;
    for (std::int64_t t : c.multi_writer_us) {
      ConflictSample at{t, t, 0, 0, 0};
      if (!near_writer_change(at, c.writer_changes_us)) ++multi_outside;
    }
    fmt::print(
        "\nconflicts (certification failures / BF aborts):{}; outside +-{} s of a writer change "
        "({}): {}\n",
        totals.empty() ? " none" : totals, kWriterChangeWindowUs / 1'000'000,
        c.writer_changes_us.size(), outside);
    fmt::print("samples (every 2 s) with local commits on 2+ nodes: {} ({} outside those windows)\n",
               c.multi_writer_us.size(), multi_outside);
    ok = ok && outside == 0;
    if (c.tables_checked) {
      fmt::print("tables identical on all {} nodes: {} of {}\n", c.nodes,
                 c.tables_compared - c.table_mismatches.size(), c.tables_compared);
    } else {
      fmt::print("tables identical on all nodes: NOT CHECKED\n");
    }
    for (const std::string& m : c.table_mismatches) fmt::print("  {}\n", m);
    ok = ok && c.tables_checked && c.tables_compared > 0 && c.table_mismatches.empty();
    for (const std::string& n : c.notes) fmt::print("note: {}\n", n);
    for (const std::string& p : c.problems) fmt::print("problem: {}\n", p);
    return ok && c.problems.empty() && !c.node_faults.empty();
  }

  // The shards mode: while a server is down, unkeyed sends go on on the others. Per kill, the
  // longest time without a successful unkeyed send around the outage (from the last success
  // before the kill to the first after the restart), compared with the outage itself.
  bool judge_shards() {
    const ShardRecord& r = run_.shards;
    bool ok = true;
    std::sort(unkeyed_ok_at_.begin(), unkeyed_ok_at_.end());
    std::sort(unkeyed_producer_ok_at_.begin(), unkeyed_producer_ok_at_.end());
    std::sort(delivered_at_.begin(), delivered_at_.end());
    std::vector<std::int64_t> processed_at;
    for (const std::string& path : run_.exactly_once_histories) {
      for (const std::string& line : lines_of(path)) {
        std::vector<std::string> w = split(line);
        if (w.size() >= 3 && w[1] == "P") processed_at.push_back(number<std::int64_t>(w[0]));
        if (w.size() >= 3 && w[1] == "E" && w[2] == "process") {
          claim_errors_at_.push_back(number<std::int64_t>(w[0]));
        }
      }
    }
    std::sort(processed_at.begin(), processed_at.end());
    auto seconds = [](double s) { return s < 0 ? std::string("none") : fmt::format("{:.1f}", s); };
    std::string placement;
    for (const std::string& s : r.placement) placement += " " + s;
    fmt::print("\nshards: {} servers, topic {} placed (partition 0 to {}):{}\n", r.servers, kTopic,
               r.placement.size() - 1, placement);
    for (const std::string& line : r.per_server) fmt::print("  {}\n", line);
    fmt::print("exactly-once effects on another server than their order's: {}\n",
               r.effects_elsewhere);
    ok = ok && r.effects_elsewhere == 0;
    std::uint64_t keyed_batches_ok = 0, mixed_batches_ok = 0;
    for (const auto& [tag, a] : attempts_) {
      if (a.kind != 'B' || a.outcome != Outcome::kOk || a.key == "-") continue;
      (a.key == "*" ? mixed_batches_ok : keyed_batches_ok)++;
    }
    fmt::print(
        "batches with one key acknowledged: {}; with several keys: {} acknowledged (all on one "
        "server), {} refused (keys on several servers)\n",
        keyed_batches_ok, mixed_batches_ok, batches_refused_);
    fmt::print(
        "\nserver faults (s: at = since the faults began; down = from the kill -9 until the "
        "restarted server accepted connections, or from SIGSTOP to SIGCONT; the longest gap "
        "without a successful unkeyed send, of the unkeyed producer and of all producers, and "
        "without a delivery (receive+ack and Worker), from the last success before the fault to "
        "the first after its end; bound for the unkeyed producer {:.1f} s, for deliveries {:.1f} s "
        "after a kill and {:.1f} s during a freeze)\n",
        kUnkeyedGapSeconds, kUnkeyedGapSeconds, kFrozenServerGapSeconds);
    fmt::print("{:<6} {:<6} {:>7} {:>6} {:>5} {:>16} {:>11} {:>10} {:>9} {:>11} {:>15} {:>14} {:>12}\n",
               "server", "fault", "catalog", "at", "down", "unkeyed producer", "all unkeyed",
               "deliveries", "processed", "keyed to it", "keyed to others", "unkeyed failed",
               "claim errors");
    double worst = 0, worst_down = 0, worst_frozen_deliveries = -1;
    for (const ShardFault& f : r.faults) {
      const std::int64_t back = f.back_us != 0 ? f.back_us : r.producers_stopped_us;
      const double producer = longest_gap(unkeyed_producer_ok_at_, f.at_us, back);
      const double all = longest_gap(unkeyed_ok_at_, f.at_us, back);
      const double deliveries = longest_gap(delivered_at_, f.at_us, back);
      const double processed = longest_gap(processed_at, f.at_us, back);
      const auto claim_errors = std::count_if(
          claim_errors_at_.begin(), claim_errors_at_.end(),
          [&](std::int64_t t) { return t >= f.at_us && t <= back; });
      // Sends begun while the server was down: keyed ones (single sends and batches with one
      // key) to its partitions and to the others' (ok / failed or unknown), and unkeyed ones
      // that failed.
      std::uint64_t here_ok = 0, here_failed = 0, there_ok = 0, there_failed = 0;
      std::uint64_t unkeyed_failed = 0;
      const std::string down_server = fmt::format("s{}", f.server);
      for (const auto& [tag, a] : attempts_) {
        if (a.kind == 'T' || a.at < f.at_us || a.at > back || a.key == "*") continue;
        if (a.key == "-") {
          unkeyed_failed += a.outcome != Outcome::kOk;
          continue;
        }
        const unsigned p = internal::partition_of_key(a.key, static_cast<unsigned>(r.placement.size()));
        const bool here = p < r.placement.size() && r.placement[p] == down_server;
        const bool sent = a.outcome == Outcome::kOk;
        (here ? (sent ? here_ok : here_failed) : (sent ? there_ok : there_failed))++;
      }
      const double down = static_cast<double>(back - f.at_us) / 1e6;
      const bool frozen = f.kind == "freeze";
      const double bound = frozen ? kFrozenServerGapSeconds : kUnkeyedGapSeconds;
      const bool held = f.back_us != 0 && deliveries >= 0 && deliveries <= bound &&
                        producer >= 0 && producer <= kUnkeyedGapSeconds;
      ok = ok && held;
      if (frozen) {
        worst_frozen_deliveries = std::max(worst_frozen_deliveries, deliveries);
      } else if (producer > worst) {
        worst = producer;
        worst_down = down;
      }
      fmt::print("{:<6} {:<6} {:>7} {:>6.1f} {:>5.1f} {:>16} {:>11} {:>10} {:>9} {:>11} {:>15} {:>14} {:>12}{}\n",
                 fmt::format("s{}", f.server), f.kind, f.catalog ? "yes" : "no",
                 static_cast<double>(f.at_us - r.faults_started_us) / 1e6, down,
                 seconds(producer), seconds(all), seconds(deliveries), seconds(processed),
                 fmt::format("{}/{}", here_ok, here_failed),
                 fmt::format("{}/{}", there_ok, there_failed), unkeyed_failed, claim_errors,
                 held ? "" : f.back_us == 0 ? "  <- not restarted"
                                            : fmt::format("  <- over {:.1f} s", bound));
    }
    // The same measure with no server down, for comparison: the machine's own hiccups.
    double calm = 0;
    {
      std::int64_t from = r.faults_started_us;
      auto calm_gap = [&](std::int64_t to) {
        if (to > from) calm = std::max(calm, longest_gap_within(unkeyed_producer_ok_at_, from, to));
      };
      for (const ShardFault& f : r.faults) {
        calm_gap(f.at_us);
        from = f.back_us != 0 ? f.back_us + 2'000'000 : r.producers_stopped_us;
      }
      calm_gap(r.producers_stopped_us);
    }
    fmt::print(
        "processed: the longest gap between two exactly-once commits (Client::process), reported "
        "only; keyed: sends with a key (and batches with one key) begun while the server was "
        "down, to a partition on it and on the others: succeeded / failed or unknown; claim "
        "errors: receive and process calls that failed meanwhile\n");
    fmt::print(
        "longest gap of the unkeyed producer: {:.1f} s during a kill's outage of {:.1f} s; {:.1f} "
        "s with every server up\n",
        worst, worst_down, calm);
    if (worst_frozen_deliveries >= 0) {
      fmt::print("longest gap in deliveries while a server was frozen: {:.1f} s (bound {:.1f} s)\n",
                 worst_frozen_deliveries, kFrozenServerGapSeconds);
    }
    for (const std::string& n : r.notes) fmt::print("note: {}\n", n);
    for (const std::string& p : r.problems) fmt::print("problem: {}\n", p);
    if (r.faults.empty()) fmt::print("problem: no server was killed or frozen\n");
    return ok && r.problems.empty() && !r.faults.empty();
  }

  // The longest time between two successes around [from, to]: from the last success at or
  // before `from` (or `from`) to the first after `to`, counting the stretch to `to` when none
  // came after. -1 without any success after `from`.
  static double longest_gap(const std::vector<std::int64_t>& times, std::int64_t from,
                            std::int64_t to) {
    auto it = std::upper_bound(times.begin(), times.end(), from);
    std::int64_t previous = it == times.begin() ? from : *std::prev(it);
    if (it == times.end()) return -1;
    double longest = 0;
    for (; it != times.end(); ++it) {
      longest = std::max(longest, static_cast<double>(*it - previous) / 1e6);
      previous = *it;
      if (*it > to) return longest;
    }
    return std::max(longest, static_cast<double>(to - previous) / 1e6);
  }
  // The longest time between two successes within [from, to] (the ends count as successes).
  static double longest_gap_within(const std::vector<std::int64_t>& times, std::int64_t from,
                                   std::int64_t to) {
    std::int64_t previous = from;
    double longest = 0;
    for (auto it = std::upper_bound(times.begin(), times.end(), from);
         it != times.end() && *it <= to; ++it) {
      longest = std::max(longest, static_cast<double>(*it - previous) / 1e6);
      previous = *it;
    }
    return std::max(longest, static_cast<double>(to - previous) / 1e6);
  }

  std::uint64_t writer_kills() const {
    std::uint64_t n = 0;
    for (const NodeFault& f : run_.cluster.node_faults) n += f.writer && f.kind == "kill";
    return n;
  }

  bool resilience_ok() const {
    // A shards-mode server kill stops only that server's partitions; the clients carry on with
    // the others without an outage to report (judge_shards bounds their gaps instead).
    if (run_.faults.server_kills + writer_kills() < 2) return true;
    return worker_outages_ > 0 && worker_recoveries_ > 0 && cli_outages() > 0 &&
           cli_recoveries() > 0;
  }
  std::size_t cli_count(bool (*matches)(const std::string&)) const {
    std::size_t n = 0;
    for (const std::string& path : run_.cli_logs) {
      for (const std::string& line : lines_of(path)) n += matches(line);
    }
    return n;
  }
  std::size_t cli_outages() const { return cli_count(reports_outage); }
  std::size_t cli_recoveries() const { return cli_count(reports_recovery); }

  void print(const std::vector<GroupResult>& groups, const GroupResult& eo) const {
    const Faults& f = run_.faults;
    fmt::print(
        "\nsend attempts: {} acknowledged, {} failed, {} unknown (killed mid-send or "
        "commit unknown)\n\n",
        sent_ok_, sent_failed_, sent_unknown_);
    fmt::print("{:<28} {:>10} {:>10} {:>6} {:>10} {:>16} {:>10} {:>8} {:>10} {:>11} {:>14}\n",
               "group", "deliveries", "messages", "lost", "unexpected", "failed-delivered",
               "duplicates", "partial", "key-order", "stale-acks", "acked-redeliv");
    auto row = [](const GroupResult& g) {
      fmt::print("{:<28} {:>10} {:>10} {:>6} {:>10} {:>16} {:>10} {:>8} {:>10} {:>11} {:>14}\n",
                 g.name, g.deliveries, g.distinct, g.lost, g.unexpected, g.failed_delivered,
                 g.duplicates, g.partial, g.timed ? std::to_string(g.order_violations) : "-",
                 g.acks_logged ? std::to_string(g.stale_acks) : "-",
                 g.acks_logged ? std::to_string(g.redelivered_after_ack) : "-");
    };
    for (const GroupResult& g : groups) row(g);
    row(eo);
    fmt::print(
        "\nexactly-once: {} transactions torn (business row without its messages or the "
        "reverse)\n",
        torn_transactions_);
    fmt::print(
        "faults: {} consumer kills (mid-claim {}, mid-handler {}, mid-ack {}), {} producer "
        "kills ({} mid-send), {} server kills, {} connections killed in {} rounds, {} "
        "consumers paused past their lease ({} holding messages)\n",
        f.consumer_kills, f.consumer_kills_mid_claim, f.consumer_kills_mid_handler,
        f.consumer_kills_mid_ack, f.producer_kills, f.producer_kills_mid_send, f.server_kills,
        f.connection_kills, f.connection_kill_rounds, f.pauses, f.pauses_holding_messages);
    fmt::print("late acks refused: {}; partly visible batches in {} snapshots: {}\n",
               late_acks_refused_, f.observations, f.partial_batches_seen);
    fmt::print("outages reported / recoveries reported: Worker {} / {}, txmq consume {} / {}\n",
               worker_outages_, worker_recoveries_, cli_outages(), cli_recoveries());
    fmt::print("drained: {}; dead letters: {}; children that exited unbidden: {}\n",
               f.drained ? "yes" : "NO", f.dead_letters, f.unbidden_exits.size());
    for (const std::string& e : f.unbidden_exits) fmt::print("  {}\n", e);
  }

  const RunRecord& run_;
  std::unordered_map<std::string, Attempt> attempts_;
  std::uint64_t sent_ok_ = 0, sent_failed_ = 0, sent_unknown_ = 0;
  std::uint64_t late_acks_refused_ = 0, worker_outages_ = 0, worker_recoveries_ = 0;
  std::uint64_t torn_transactions_ = 0;
  std::vector<std::int64_t> sends_ok_at_, delivered_at_;  // successes, for the node faults
  std::map<std::string, std::vector<std::int64_t>> group_delivered_at_;  // the same per group
  // Successful sends without a key (single sends and batches), of every producer and of the
  // shards mode's unkeyed producer, for the server kills.
  std::vector<std::int64_t> unkeyed_ok_at_, unkeyed_producer_ok_at_;
  std::uint64_t batches_refused_ = 0;  // batches with keys on several servers (shards mode)
  std::vector<std::int64_t> claim_errors_at_;  // receive (and, shards mode, process) errors
  std::vector<std::string> failures_;
};

}  // namespace

std::vector<std::string> check(const RunRecord& run) {
  Checker checker(run);
  checker.judge();
  return checker.failures();
}

}  // namespace txmq::fault
