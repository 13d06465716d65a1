// Long polling in separate processes: wake-up latency and the idle cost of waiting consumers.
#include "waiting.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "db/connection.h"
#include "db/dsn.h"

extern char** environ;

namespace txmq::bench {
namespace {

std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

std::string self_exe() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("cannot find the txmq binary (/proc/self/exe)");
  return std::string(path, static_cast<std::size_t>(n));
}

// A `txmq bench-consumer` child with its stdout on a pipe; SIGKILLed when destroyed.
class ConsumerProcess {
 public:
  ConsumerProcess(const std::string& dsn, const std::string& topic, int threads, double wait) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<std::string> args = {self_exe(),       "bench-consumer",
                                     topic,            "--threads",
                                     std::to_string(threads), "--wait",
                                     fmt::format("{}", wait)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The DSN goes by the environment, not the command line (ps shows that to everyone).
    std::vector<std::string> env_strings = {"TXMQ_DSN=" + dsn};
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "TXMQ_DSN=", 9) != 0) envp.push_back(*e);
    }
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
      close(fds[0]);
      throw std::runtime_error(fmt::format("cannot start {}: {}", args[0], std::strerror(rc)));
    }
    out_ = fdopen(fds[0], "r");
  }
  ~ConsumerProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    if (out_ != nullptr) fclose(out_);
  }
  ConsumerProcess(const ConsumerProcess&) = delete;
  ConsumerProcess& operator=(const ConsumerProcess&) = delete;

  // The next line of its output ("" at the end).
  std::string line() {
    char buffer[256];
    if (fgets(buffer, sizeof(buffer), out_) == nullptr) return "";
    std::string s(buffer);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

std::uint64_t questions(internal::Connection& admin) {
  internal::Result r = admin.execute("SHOW GLOBAL STATUS LIKE 'Questions'", {});
  return std::stoull(r.rows.at(0).bytes(1));
}

}  // namespace

Measured wake_latency(const std::string& dsn, Client& producer, const std::string& topic,
                      int samples) {
  ConsumerProcess consumer(dsn, topic, 1, 20);
  if (consumer.line() != "ready") throw std::runtime_error("the bench consumer did not start");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // it is waiting by now
  std::mt19937 rng(42);
  Measured m;
  std::map<std::uint64_t, std::int64_t> sent;
  const auto start = SteadyClock::now();
  for (int i = 0; i < samples; ++i) {
    // Idle gaps, so that each send finds the consumer waiting again.
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 40));
    const std::int64_t before = monotonic_ns();
    const std::uint64_t id = producer.send(topic, "wake");
    sent[id] = before;
    // Its receipt, read before the next send.
    const std::string line = consumer.line();
    std::uint64_t got_id = 0;
    long long at = 0;
    if (std::sscanf(line.c_str(), "%llu %lld", reinterpret_cast<unsigned long long*>(&got_id),
                    &at) != 2) {
      throw std::runtime_error("the bench consumer stopped: " + line);
    }
    auto it = sent.find(got_id);
    if (it == sent.end()) throw std::runtime_error("the bench consumer got an unknown message");
    m.latencies.add(static_cast<double>(at - it->second) / 1e6);
    ++m.messages;
  }
  m.seconds = seconds_between(start, SteadyClock::now());
  return m;
}

double idle_statements_per_second(const std::string& dsn, const std::string& topic,
                                  int processes, int threads, double wait, double window) {
  std::vector<std::unique_ptr<ConsumerProcess>> consumers;
  for (int i = 0; i < processes; ++i) {
    consumers.push_back(std::make_unique<ConsumerProcess>(dsn, topic, threads, wait));
  }
  for (auto& c : consumers) {
    if (c->line() != "ready") throw std::runtime_error("a bench consumer did not start");
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past their start-up statements
  internal::Connection admin(internal::parse_dsn(dsn));
  const std::uint64_t before = questions(admin);
  const auto start = SteadyClock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(window));
  const std::uint64_t after = questions(admin);
  const double seconds = seconds_between(start, SteadyClock::now());
  // Less the SHOW of `after` itself; nothing else runs on the server meanwhile.
  return static_cast<double>(after - before - 1) / seconds;
}

}  // namespace txmq::bench
