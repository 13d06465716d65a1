#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "txmq/client.h"

namespace txmq::cli {

// Exit codes: part of the stable contract (docs/command.md).
enum Exit : int {
  kExitOk = 0,
  kExitUsage = 1,
  kExitDatabase = 2,
  kExitNotFound = 3,
  kExitLeaseLost = 4,
  kExitRefused = 5,
};

struct Globals {
  std::string dsn;
  bool json = false;
  int exit_code = kExitOk;  // set by a command that finishes with a non-zero outcome
};

// --dsn, else TXMQ_DSN, else the embedded default (started when needed, with a note on stderr).
std::string resolve_dsn(const Globals& globals);
std::unique_ptr<Client> connect(const Globals& globals, const std::string& consumer_name = {});
// --dsn and --json, which every subcommand accepts too.
void add_global_options(CLI::App& app, Globals& globals);
// Parses and runs the command line (with --dsn passwords blanked in argv, so that `ps` does not
// show them); returns the exit code: the command's, or the one of the error that stopped it.
int run_command_line(CLI::App& app, Globals& globals, std::string_view program, int argc,
                     char** argv);

void add_topic_commands(CLI::App& app, Globals& globals);
void add_message_commands(CLI::App& app, Globals& globals);
void add_inspect_commands(CLI::App& app, Globals& globals);
void add_local_commands(CLI::App& app, Globals& globals);
void add_server_commands(CLI::App& app, Globals& globals);
void add_group_commands(CLI::App& app, Globals& globals);
void add_archive_commands(CLI::App& app, Globals& globals);
void add_sql_commands(CLI::App& app, Globals& globals);
void add_consume_command(CLI::App& app, Globals& globals);
void add_demo_command(CLI::App& app, Globals& globals);
// `txmq bench`: runs txmq-bench, the separate benchmark program (docs/benchmarks.md).
void add_bench_command(CLI::App& app, Globals& globals);
void add_serve_command(CLI::App& app, Globals& globals);
void add_metrics_command(CLI::App& app, Globals& globals);
void add_cluster_command(CLI::App& app, Globals& globals);
void add_xa_commands(CLI::App& app, Globals& globals);

// Output helpers (output.cc).
std::string read_all(std::FILE* in);
// Where the password of a DSN's text is, if its user part has one: (offset, length); (0, 0)
// when none. main() overwrites it in the process's own argv, so that `ps` does not show it.
std::pair<std::size_t, std::size_t> password_span(std::string_view dsn);
// send-batch's input: one message per line ('\n' ends a line; the last one may lack it).
std::vector<OutgoingMessage> batch_lines(std::string_view data);
bool is_valid_utf8(std::string_view bytes);
std::string base64(std::string_view bytes);
std::string iso_time(Clock::time_point t);
std::string printable(std::string_view bytes, std::size_t max = 200);
bool stderr_is_terminal();
void print_error(std::string_view message);
Micros seconds_to_micros(double seconds, std::string_view what);

}  // namespace txmq::cli
