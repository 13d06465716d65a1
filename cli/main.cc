// The txmq command. Exit codes and output formats are a stable contract: see docs/command.md.
#include "cli.h"

int main(int argc, char** argv) {
  using namespace txmq::cli;
  Globals globals;
  CLI::App app{"txmq: a durable, transactional message queue inside MariaDB/MySQL"};
  app.set_version_flag("--version", "txmq 0.1.0");
  add_global_options(app, globals);
  app.require_subcommand(1);
  add_topic_commands(app, globals);
  add_message_commands(app, globals);
  add_inspect_commands(app, globals);
  add_group_commands(app, globals);
  add_archive_commands(app, globals);
  add_sql_commands(app, globals);
  add_consume_command(app, globals);
  add_server_commands(app, globals);
  add_local_commands(app, globals);
  add_demo_command(app, globals);
  add_bench_command(app, globals);
  add_serve_command(app, globals);
  add_metrics_command(app, globals);
  add_cluster_command(app, globals);
  add_xa_commands(app, globals);
  return run_command_line(app, globals, "txmq", argc, argv);
}
