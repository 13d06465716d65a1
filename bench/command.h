#pragma once
// txmq-bench's subcommands: `bench` (what `txmq bench` runs) and the two consumer processes that
// the bench starts for its long-polling, chaos and pressure sections.

#include <CLI/CLI.hpp>

#include "cli/cli.h"

namespace txmq::bench {

void add_bench_command(CLI::App& app, cli::Globals& globals);
void add_bench_consumer_command(CLI::App& app, cli::Globals& globals);
void add_bench_worker_command(CLI::App& app, cli::Globals& globals);

}  // namespace txmq::bench
