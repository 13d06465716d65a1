// What the txmq command and txmq-bench share: where the DSN comes from, the client they connect,
// hiding passwords from `ps`, and how an error becomes an exit code.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "txmq/local.h"

namespace txmq::cli {
namespace {

int exit_code_for(Errc code) {
  switch (code) {
    case Errc::kInvalidArgument:
    case Errc::kAlreadyExists:
      return kExitRefused;
    case Errc::kNotFound:
      return kExitNotFound;
    default:
      return kExitDatabase;
  }
}

void allow_global_options_anywhere(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_prefix_command()) continue;  // its arguments are another program's (bench)
    sub->fallthrough();
    allow_global_options_anywhere(*sub);
  }
}

}  // namespace

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

void add_global_options(CLI::App& app, Globals& globals) {
  app.add_option("--dsn", globals.dsn,
                 "mysql://user:password@host:port/database[?socket=PATH] (else TXMQ_DSN, else "
                 "the local server in TXMQ_HOME)");
  app.add_flag("--json", globals.json, "machine-readable output");
}

int run_command_line(CLI::App& app, Globals& globals, std::string_view program, int argc,
                     char** argv) {
  allow_global_options_anywhere(app);
  // The parser gets copies; the password of a --dsn (or of xa's --resource NAME=DSN) is then
  // blanked in the process's own argv, which `ps` and /proc/PID/cmdline show to every user.
  // (TXMQ_DSN and password-file= keep it off the command line altogether: docs "Security".)
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
    print_error(fmt::format("{} (see {} --help)", e.what(), program));
    return kExitUsage;
  } catch (const Error& e) {
    print_error(e.what());
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitDatabase;
  }
  return globals.exit_code;
}

}  // namespace txmq::cli
