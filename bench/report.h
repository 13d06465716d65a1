#pragma once
// The bench's output: one row per workload as it completes, then the targets; or one JSON document.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.h"

namespace txmq::bench {

struct Row {
  std::string id;     // stable key, such as "drain.leased.4x100"
  std::string name;   // for people
  std::uint64_t messages = 0;
  double seconds = 0;
  double rate = 0;    // messages per second
  double p50_ms = 0;  // of one operation (a statement, a call, a receive+ack cycle, a delivery)
  double p99_ms = 0;
  std::string basis;  // id of the row the ratio column divides by ("": none)
  bool latency_ratio = false;  // the ratio is of p50 latencies (lower is better), not of rates
  std::string note;
  CpuSeconds cpu;  // CPU seconds taken during the measured runs, by process (bench --cpu)
};

// A goal from the issue, checked against rows of the same run.
struct Target {
  enum class Kind {
    kRateAtLeast,    // row.rate / basis.rate >= bound
    kP50RatioAtMost, // row.p50 / basis.p50 <= bound
    kP99AtMostMs,    // row.p99 <= bound (no basis)
    kP50AtMostMs,    // row.p50 <= bound (no basis)
    kRateAtMost,     // row.rate <= bound (no basis): a cost, such as statements per second
  };
  std::string row;
  std::string basis;
  Kind kind;
  double bound;
};

class Report {
 public:
  explicit Report(bool json) : json_(json) {}

  void set_context(nlohmann::json context) { context_ = std::move(context); }
  // Puts `part` into the JSON document under `key` (a section with a shape of its own).
  void attach(const std::string& key, nlohmann::json part) { context_[key] = std::move(part); }
  void section(const std::string& title);
  Row& add(Row row, Measured measured);
  void add_row(Row row);
  const Row* find(const std::string& id) const;
  // Prints the targets (human) or the whole document (JSON).
  void finish(const std::vector<Target>& targets);

 private:
  std::optional<double> ratio_of(const Row& row) const;
  void print_row(const Row& row) const;

  bool json_;
  nlohmann::json context_;
  std::vector<Row> rows_;
};

// A row to fill: its id, its name for people, and the id of the row its ratio divides by.
Row row(std::string id, std::string name, std::string basis = {});

std::string with_commas(double value);

}  // namespace txmq::bench
