// txmq bench: see bench/bench.h and docs/benchmarks.md.
#include <sstream>

#include "bench/bench.h"
#include "cli.h"

namespace txmq::cli {

void add_bench_command(CLI::App& app, Globals& g) {
  struct Args {
    bool quick = false;
    bool huge = false;
    std::string only;
  };
  auto a = std::make_shared<Args>();
  CLI::App* bench = app.add_subcommand(
      "bench", "measure txmq against the raw INSERT speed of the same server and the seed's "
               "UPDATE...LIMIT claim, in one run (docs/benchmarks.md)");
  bench->add_flag("--quick", a->quick, "smaller sizes: about a minute");
  bench->add_flag("--huge", a->huge, "also drain at a 10M backlog (adds several minutes)");
  std::string sections;
  for (const std::string& s : bench::bench_sections()) sections += (sections.empty() ? "" : ",") + s;
  bench->add_option("--only", a->only, "comma-separated sections to run: " + sections);
  bench->callback([&g, a] {
    bench::BenchOptions o;
    o.dsn = resolve_dsn(g);
    o.quick = a->quick;
    o.huge = a->huge;
    o.json = g.json;
    std::stringstream in(a->only);
    for (std::string s; std::getline(in, s, ',');) {
      if (!s.empty()) o.sections.push_back(s);
    }
    g.exit_code = bench::run_bench(o);
  });
}

}  // namespace txmq::cli
