#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
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

}  // namespace

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
