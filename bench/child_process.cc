#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace txmq::bench {
namespace {

std::string self_exe() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("cannot find the txmq binary (/proc/self/exe)");
  return std::string(path, static_cast<std::size_t>(n));
}

// Runs `argv` (argv[0] a path) with stdin from /dev/null and stdout captured, stderr passed on;
// returns its exit status (-1 killed by a signal) and sets `out` to what it printed.
int run_program(const std::vector<std::string>& args, std::string& out) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<std::string> all = args;
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw std::runtime_error(fmt::format("cannot start {}: {}", all[0], std::strerror(rc)));
  }
  out.clear();
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

std::string server_script() {
  namespace fs = std::filesystem;
  if (const char* e = std::getenv("TXMQ_SERVER_SCRIPT"); e != nullptr && *e != '\0') {
    if (access(e, X_OK) != 0) {
      throw std::runtime_error(fmt::format("TXMQ_SERVER_SCRIPT={} is not an executable file", e));
    }
    return e;
  }
  fs::path dir = fs::path(self_exe()).parent_path();
  // A build folder names its source tree in CMakeCache.txt (CMAKE_HOME_DIRECTORY), wherever it is.
  {
    std::ifstream cache(dir / "CMakeCache.txt");
    const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
    for (std::string line; std::getline(cache, line);) {
      if (line.rfind(key, 0) != 0) continue;
      const fs::path script = fs::path(line.substr(key.size())) / "scripts" / "server";
      if (access(script.c_str(), X_OK) == 0) return script.string();
    }
  }
  for (int up = 0; up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
    const fs::path script = dir / "scripts" / "server";
    if (access(script.c_str(), X_OK) == 0) return script.string();
    if (dir == dir.root_path()) break;
  }
  throw std::runtime_error(
      fmt::format("--server runs scripts/server of txmq's source tree, and none was named by a "
                  "CMakeCache.txt beside {} nor found above it; name it with "
                  "TXMQ_SERVER_SCRIPT=/path/to/txmq/scripts/server",
                  self_exe()));
}

ScriptServer::ScriptServer(std::string script, std::string name, std::string home, bool binlog)
    : script_(std::move(script)), name_(std::move(name)), home_(std::move(home)),
      binlog_(binlog) {}

ScriptServer::~ScriptServer() {
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: stopping %s in %s: %s\n", name_.c_str(), home_.c_str(), e.what());
  }
}

std::string ScriptServer::start() {
  std::string out;
  const std::vector<std::string> status = {script_, name_, "status", "--home", home_};
  if (run_program(status, out) != 0) {
    throw std::runtime_error(fmt::format("{} failed (its message is above)", joined(status)));
  }
  was_running_ = out.starts_with(name_ + ": running");
  std::vector<std::string> start = {script_, name_, "start", "--home", home_};
  if (binlog_) start.emplace_back("--binlog");
  // Stopped at the end even if the start fails half-way (stop acts only on its own pid file).
  started_ = !was_running_;
  if (run_program(start, out) != 0) {
    throw std::runtime_error(fmt::format("{} failed (its message is above)", joined(start)));
  }
  const std::vector<std::string> dsn = {script_, name_, "dsn", "--home", home_};
  if (run_program(dsn, out) != 0) {
    throw std::runtime_error(fmt::format("{} failed (its message is above)", joined(dsn)));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

void ScriptServer::stop() {
  if (!started_) return;
  started_ = false;
  std::string out;
  const std::vector<std::string> stop = {script_, name_, "stop", "--home", home_};
  if (run_program(stop, out) != 0) {
    throw std::runtime_error(fmt::format("{} failed (its message is above)", joined(stop)));
  }
}

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::string& dsn) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<std::string> all = {self_exe()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string dsn_variable = "TXMQ_DSN=" + dsn;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "TXMQ_DSN=", 9) != 0) envp.push_back(*e);
  }
  envp.push_back(dsn_variable.data());
  envp.push_back(nullptr);
  const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw std::runtime_error(fmt::format("cannot start {}: {}", all[0], std::strerror(rc)));
  }
  out_ = fdopen(fds[0], "r");
}

ChildProcess::~ChildProcess() {
  signal(SIGKILL);
  if (!reaped_) waitpid(pid_, nullptr, 0);
  if (out_ != nullptr) fclose(out_);
}

std::string ChildProcess::line() {
  char buffer[256];
  if (fgets(buffer, sizeof(buffer), out_) == nullptr) return "";
  std::string s(buffer);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

void ChildProcess::signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

bool ChildProcess::wait_exit(double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!reaped_) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace txmq::bench
