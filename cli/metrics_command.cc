// txmq metrics: the Prometheus exposition of txmq serve's /metrics, without the server's own
// request figures, printed once (for node_exporter's textfile collector and for scripts).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>
#include <unistd.h>

#include "cli.h"
#include "server/web/metrics.h"

namespace txmq::cli {

void add_metrics_command(CLI::App& app, Globals& g) {
  struct Args {
    std::uint64_t exact_up_to = server::kDefaultExactUpTo;
    std::string output;
    std::string topics;
    std::size_t busiest = server::kDefaultBusiest;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "metrics", "print topics' and groups' gauges and the totals all clients recorded, in "
                 "Prometheus's text format (docs/metrics.md)");
  cmd->add_option("--exact-up-to", a->exact_up_to,
                  "rows counted exactly at each end of a table; beyond 2 x N rows, counts are estimated (1000)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000}));
  cmd->add_option("--output", a->output,
                  "write to FILE instead, atomically (a temporary file renamed over it), as "
                  "node_exporter's textfile collector wants");
  cmd->add_option("--topics", a->topics,
                  "regular expression of the topics whose series are always printed, matched "
                  "against whole names (topics never used have none either way)");
  cmd->add_option("--busiest", a->busiest,
                  "and series for this many of the other used topics, those whose counters "
                  "added up most; the rest count only in topic=\"_all\" (100)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1'000'000}));
  cmd->callback([&g, a] {
    std::optional<std::regex> topics;
    try {
      if (!a->topics.empty()) topics = server::metrics_topics(a->topics);
    } catch (const std::invalid_argument& e) {
      print_error(e.what());
      g.exit_code = kExitUsage;
      return;
    }
    const std::string text = server::render_metrics(
        *connect(g), a->exact_up_to, nullptr,
        server::MetricsSelection{.named = topics ? &*topics : nullptr, .busiest = a->busiest});
    if (a->output.empty()) {
      std::cout << text << std::flush;
      return;
    }
    const std::string temporary = fmt::format("{}.{}.tmp", a->output, getpid());
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      if (!out) {
        std::remove(temporary.c_str());
        print_error(fmt::format("cannot write {}", temporary));
        g.exit_code = kExitUsage;
        return;
      }
    }
    if (std::rename(temporary.c_str(), a->output.c_str()) != 0) {
      std::remove(temporary.c_str());
      print_error(fmt::format("cannot rename {} to {}", temporary, a->output));
      g.exit_code = kExitUsage;
    }
  });
}

}  // namespace txmq::cli
