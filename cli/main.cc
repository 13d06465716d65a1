// The txmq command. Exit codes and output formats are a stable contract: see README.md.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "txmq/local.h"

namespace {

int exit_code_for(txmq::Errc code) {
  using txmq::Errc;
  switch (code) {
    case Errc::kInvalidArgument:
    case Errc::kAlreadyExists:
      return txmq::cli::kExitRefused;
    case Errc::kNotFound:
      return txmq::cli::kExitNotFound;
    default:
      return txmq::cli::kExitDatabase;
  }
}

void allow_global_options_anywhere(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    sub->fallthrough();
    allow_global_options_anywhere(*sub);
  }
}

}  // namespace

namespace txmq::cli {

std::string resolve_dsn(const Globals& globals) {
  if (!globals.dsn.empty()) return globals.dsn;
  if (const char* env = std::getenv("TXMQ_DSN"); env != nullptr && *env != '\0') return env;
  bool started = false;
  std::string dsn = LocalServer::ensure_running({}, &started);
  if (started) {
    std::fprintf(stderr, "txmq: started the local MariaDB server in %s\n",
                 LocalServer::resolve_home({}).c_str());
  }
  return dsn;
}

std::unique_ptr<Client> connect(const Globals& globals, const std::string& consumer_name) {
  ClientOptions options;
  options.dsn = resolve_dsn(globals);
  options.consumer_name = consumer_name;
  return std::make_unique<Client>(std::move(options));
}

}  // namespace txmq::cli

int main(int argc, char** argv) {
  using namespace txmq::cli;
  Globals globals;
  CLI::App app{"txmq: a durable, transactional message queue inside MariaDB/MySQL"};
  app.set_version_flag("--version", "txmq 0.1.0");
  app.add_option("--dsn", globals.dsn,
                 "mysql://user:password@host:port/database[?socket=PATH] (else TXMQ_DSN, else "
                 "the local server in TXMQ_HOME)");
  app.add_flag("--json", globals.json, "machine-readable output");
  app.require_subcommand(1);
  add_topic_commands(app, globals);
  add_message_commands(app, globals);
  add_inspect_commands(app, globals);
  add_group_commands(app, globals);
  add_archive_commands(app, globals);
  add_consume_command(app, globals);
  add_server_commands(app, globals);
  add_local_commands(app, globals);
  add_demo_command(app, globals);
  add_bench_command(app, globals);
  add_bench_consumer_command(app, globals);
  add_bench_worker_command(app, globals);
  add_serve_command(app, globals);
  add_metrics_command(app, globals);
  add_cluster_command(app, globals);
  add_xa_commands(app, globals);
  allow_global_options_anywhere(app);

  // The parser gets copies; the password of a --dsn (or of xa's --resource NAME=DSN) is then
  // blanked in the process's own argv, which `ps` and /proc/PID/cmdline show to every user.
  // (TXMQ_DSN and password-file= keep it off the command line altogether: README "Security".)
  std::vector<std::string> copies(argv, argv + argc);
  std::vector<char*> args;
  for (std::string& a : copies) args.push_back(a.data());
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    char* dsn = arg == "--dsn" && i + 1 < argc        ? argv[i + 1]
                : arg.starts_with("--dsn=")           ? argv[i] + 6
                : arg == "--resource" && i + 1 < argc ? argv[i + 1]
                : arg.starts_with("--resource=")      ? argv[i] + 11
                                                      : nullptr;
    if (dsn == nullptr) continue;
    const auto [offset, length] = password_span(dsn);
    std::memset(dsn + offset, 'x', length);
  }

  try {
    app.parse(argc, args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(std::string(e.what()) + " (see txmq --help)");
    return kExitUsage;
  } catch (const txmq::Error& e) {
    print_error(e.what());
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitDatabase;
  }
  return globals.exit_code;
}
