#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace txmq::bench {

Row row(std::string id, std::string name, std::string basis) {
  Row r;
  r.id = std::move(id);
  r.name = std::move(name);
  r.basis = std::move(basis);
  return r;
}

std::string with_commas(double value) {
  std::string digits = fmt::format("{:.0f}", value);
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n > 0 && n % 3 == 0 && *it != '-') out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++n;
  }
  return out;
}

void Report::section(const std::string& title) {
  if (json_) {
    std::fprintf(stderr, "bench: %s\n", title.c_str());
    return;
  }
  std::printf("\n%s\n", title.c_str());
  std::fflush(stdout);
}

Row& Report::add(Row row, Measured measured) {
  row.messages = measured.messages;
  row.seconds = measured.seconds;
  row.rate = measured.rate();
  row.p50_ms = measured.latencies.percentile(50);
  row.p99_ms = measured.latencies.percentile(99);
  row.cpu = std::move(measured.cpu);
  // Rounds that scatter by more than 10 % around their mean say so: the row's figure is then
  // less sure than its digits.
  const std::vector<double>& rounds = measured.round_rates;
  if (rounds.size() >= 2) {
    const auto [low, high] = std::minmax_element(rounds.begin(), rounds.end());
    double mean = 0;
    for (double r : rounds) mean += r / static_cast<double>(rounds.size());
    if (mean > 0 && (*high - *low) / mean > 0.10) {
      row.note += fmt::format("{}rounds scatter: {:.0f} to {:.0f} msgs/s ({:.0f} % of their mean)",
                              row.note.empty() ? "" : "; ", *low, *high,
                              100.0 * (*high - *low) / mean);
    }
  }
  add_row(std::move(row));
  return rows_.back();
}

void Report::add_row(Row row) {
  rows_.push_back(std::move(row));
  print_row(rows_.back());
}

const Row* Report::find(const std::string& id) const {
  for (const Row& r : rows_) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

std::optional<double> Report::ratio_of(const Row& row) const {
  const Row* basis = row.basis.empty() ? nullptr : find(row.basis);
  if (basis == nullptr) return std::nullopt;
  if (row.latency_ratio) {
    if (basis->p50_ms <= 0) return std::nullopt;
    return row.p50_ms / basis->p50_ms;
  }
  if (basis->rate <= 0) return std::nullopt;
  return row.rate / basis->rate;
}

namespace {

// "CPU cores (us/msg): bench 0.52 (41), load 0.20 (16), db 0.81 (64), machine 1.90 (150)": each
// process's CPU seconds over the row's seconds, and per message, the servers in name order
// between the bench (then its timed threads, "load") and the machine.
std::string cpu_note(const Row& row) {
  if (row.cpu.empty() || row.seconds <= 0) return {};
  std::string out = "CPU cores (us/msg):";
  auto add = [&](const std::string& name, double seconds) {
    out += fmt::format("{} {} {:.2f}", out.back() == ':' ? "" : ",", name, seconds / row.seconds);
    if (row.messages > 0) {
      const double us = seconds * 1e6 / static_cast<double>(row.messages);
      // Three significant digits, with no exponent past 1,000.
      out += us >= 100 ? fmt::format(" ({:.0f})", us) : fmt::format(" ({:.3g})", us);
    }
  };
  if (auto it = row.cpu.find("bench"); it != row.cpu.end()) add(it->first, it->second);
  if (auto it = row.cpu.find("load"); it != row.cpu.end()) add(it->first, it->second);
  for (const auto& [name, seconds] : row.cpu) {
    if (name != "bench" && name != "load" && name != "machine" && name != "steal" &&
        !name.starts_with('#')) {
      add(name, seconds);
    }
  }
  if (auto it = row.cpu.find("machine"); it != row.cpu.end()) add(it->first, it->second);
  if (auto it = row.cpu.find("steal"); it != row.cpu.end() && it->second > 0) {
    add(it->first, it->second);
  }
  // The database server's work per message: "per msg: 0.1 commits, 0.1 fsyncs, ...".
  std::string counts;
  for (const auto& [name, n] : row.cpu) {
    if (!name.starts_with('#') || row.messages == 0) continue;
    counts += fmt::format("{}{:.3g} {}", counts.empty() ? "; per msg: " : ", ",
                          n / static_cast<double>(row.messages), name.substr(1));
  }
  return out + counts;
}

}  // namespace

void Report::print_row(const Row& row) const {
  if (json_) {
    std::fprintf(stderr, "bench:   %-46s %12s msgs/s\n", row.name.c_str(),
                 with_commas(row.rate).c_str());
    return;
  }
  std::optional<double> ratio = ratio_of(row);
  const Row* basis = row.basis.empty() ? nullptr : find(row.basis);
  std::string note = row.note;
  if (std::string cpu = cpu_note(row); !cpu.empty()) {
    note += (note.empty() ? "" : "; ") + cpu;
  }
  std::printf("  %-46s %10s %8.2f %8.2f %8s  %s%s\n", row.name.c_str(),
              with_commas(row.rate).c_str(), row.p50_ms, row.p99_ms,
              ratio ? fmt::format("{:.2f}x", *ratio).c_str() : "",
              basis == nullptr ? ""
              : row.latency_ratio ? fmt::format("p50 of {}", basis->name).c_str()
                                  : basis->name.c_str(),
              note.empty() ? "" : fmt::format("{}{}", basis ? "; " : "", note).c_str());
  std::fflush(stdout);
}

void Report::finish(const std::vector<Target>& targets) {
  nlohmann::json checks = nlohmann::json::array();
  for (const Target& t : targets) {
    const Row* row = find(t.row);
    const Row* basis = t.basis.empty() ? nullptr : find(t.basis);
    if (row == nullptr || (!t.basis.empty() && basis == nullptr)) continue;
    double measured = 0;
    bool met = false;
    std::string shown;
    std::string wanted;
    std::string against;
    switch (t.kind) {
      case Target::Kind::kRateAtLeast:
        measured = basis->rate > 0 ? row->rate / basis->rate : 0;
        met = measured >= t.bound;
        shown = fmt::format("{:.2f}x", measured);
        wanted = fmt::format(">= {:.2f}x", t.bound);
        against = basis->name;
        break;
      case Target::Kind::kP50RatioAtMost:
        measured = basis->p50_ms > 0 ? row->p50_ms / basis->p50_ms : 0;
        met = measured <= t.bound;
        shown = fmt::format("{:.2f}x", measured);
        wanted = fmt::format("<= {:.2f}x", t.bound);
        against = basis->name + " (p50)";
        break;
      case Target::Kind::kP99AtMostMs:
        measured = row->p99_ms;
        met = measured <= t.bound;
        shown = fmt::format("{:.1f} ms", measured);
        wanted = fmt::format("<= {:.0f} ms", t.bound);
        against = "p99";
        break;
      case Target::Kind::kP50AtMostMs:
        measured = row->p50_ms;
        met = measured <= t.bound;
        shown = fmt::format("{:.1f} ms", measured);
        wanted = fmt::format("<= {:.0f} ms", t.bound);
        against = "p50";
        break;
      case Target::Kind::kRateAtMost:
        measured = row->rate;
        met = measured <= t.bound;
        shown = fmt::format("{:.1f}/s", measured);
        wanted = fmt::format("<= {:.0f}/s", t.bound);
        against = "statements per second";
        break;
    }
    checks.push_back({{"row", t.row},
                      {"basis", t.basis},
                      {"measured", measured},
                      {"bound", t.bound},
                      {"kind", t.kind == Target::Kind::kRateAtLeast      ? "rate_ratio_at_least"
                               : t.kind == Target::Kind::kP50RatioAtMost ? "p50_ratio_at_most"
                               : t.kind == Target::Kind::kP99AtMostMs    ? "p99_ms_at_most"
                               : t.kind == Target::Kind::kP50AtMostMs    ? "p50_ms_at_most"
                                                                          : "rate_at_most"},
                      {"met", met}});
    if (!json_) {
      if (checks.size() == 1) {
        std::printf("\nTargets (ratios within this run)\n");
        std::printf("  %-46s %-40s %10s %10s\n", "workload", "against", "measured", "target");
      }
      std::printf("  %-46s %-40s %10s %10s  %s\n", row->name.c_str(), against.c_str(),
                  shown.c_str(), wanted.c_str(), met ? "met" : "MISSED");
    }
  }
  if (json_) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Row& r : rows_) {
      nlohmann::json j = {{"id", r.id},         {"name", r.name},     {"messages", r.messages},
                          {"seconds", r.seconds}, {"msgs_per_s", r.rate}, {"p50_ms", r.p50_ms},
                          {"p99_ms", r.p99_ms}};
      if (!r.basis.empty()) j["basis"] = r.basis;
      if (auto ratio = ratio_of(r)) j["ratio"] = *ratio;
      if (!r.note.empty()) j["note"] = r.note;
      if (!r.cpu.empty()) j["cpu_seconds"] = r.cpu;
      rows.push_back(std::move(j));
    }
    nlohmann::json doc = context_;
    doc["results"] = std::move(rows);
    doc["targets"] = std::move(checks);
    std::printf("%s\n", doc.dump(2).c_str());
  }
  std::fflush(stdout);
}

}  // namespace txmq::bench
