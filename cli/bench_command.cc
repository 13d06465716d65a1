// txmq bench: hands the command line to txmq-bench, the benchmark program installed beside txmq,
// so that the shipped command carries neither the bench nor its harness (docs/benchmarks.md).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"

namespace txmq::cli {
namespace {

// txmq-bench in the folder of this very binary (the build folder, or /usr/bin), else on PATH.
std::string bench_program() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string path(self, static_cast<std::size_t>(n));
    path = path.substr(0, path.rfind('/') + 1) + "txmq-bench";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "txmq-bench";
}

}  // namespace

void add_bench_command(CLI::App& app, Globals& g) {
  CLI::App* bench = app.add_subcommand(
      "bench", "measure txmq against the raw INSERT speed of the same server and a plain "
               "UPDATE...LIMIT claim, in one run (docs/benchmarks.md; `txmq bench --help` "
               "lists its options)");
  // Everything after `bench`, --help included, is txmq-bench's to read.
  bench->prefix_command();
  bench->set_help_flag();
  bench->callback([&g, bench] {
    std::vector<std::string> args = {"txmq-bench"};
    if (g.json) args.emplace_back("--json");
    args.emplace_back("bench");
    for (const std::string& a : bench->remaining()) args.push_back(a);
    // A --dsn given before `bench` travels in the environment, off the command line.
    if (!g.dsn.empty()) setenv("TXMQ_DSN", g.dsn.c_str(), 1);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string program = bench_program();
    if (program.find('/') != std::string::npos) {
      execv(program.c_str(), argv.data());
    } else {
      execvp(program.c_str(), argv.data());
    }
    throw Error(Errc::kFailedPrecondition,
                fmt::format("txmq bench runs txmq-bench, which was not found beside txmq nor on "
                            "PATH ({}): build it (cmake --build build --target txmq_bench_cli) or "
                            "install the package that ships it",
                            std::strerror(errno)));
  });
}

}  // namespace txmq::cli
