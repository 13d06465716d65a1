// txmq-bench: the benchmark program (docs/benchmarks.md, "Why a program of its own"). `txmq bench`
// runs it; it takes the same global options as txmq (--dsn, --json).
#include "bench/command.h"

int main(int argc, char** argv) {
  using namespace txmq;
  cli::Globals globals;
  CLI::App app{"txmq-bench: txmq against the raw speed of the same server, in one run"};
  app.set_version_flag("--version", "txmq-bench 0.1.0");
  cli::add_global_options(app, globals);
  app.require_subcommand(1);
  bench::add_bench_command(app, globals);
  bench::add_bench_consumer_command(app, globals);
  bench::add_bench_worker_command(app, globals);
  return cli::run_command_line(app, globals, "txmq-bench", argc, argv);
}
