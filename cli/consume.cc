// txmq consume TOPIC --exec CMD: one /bin/sh -c CMD per message, payload on stdin.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "cli.h"

extern char** environ;

namespace txmq::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

struct ConsumeArgs {
  std::string topic;
  std::string exec;
  int concurrency = 1;
  double lease = 0;
  std::int64_t max_messages = 0;
  bool exit_when_empty = false;
};

struct Totals {
  std::atomic<std::int64_t> claimed{0};  // messages taken, against --max-messages
  std::atomic<std::int64_t> acked{0};
  std::atomic<std::int64_t> nacked{0};
  std::atomic<std::int64_t> lost{0};
};

// Retry delay after a failed handler: 1 s, 2 s, 4 s ... capped at 5 minutes, with jitter.
Micros retry_delay(int attempt) {
  thread_local std::mt19937 rng{std::random_device{}()};
  double base = std::min(300.0, std::pow(2.0, std::min(attempt - 1, 20)));
  double seconds = base * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
  return Micros(static_cast<std::int64_t>(seconds * 1e6));
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// Runs the handler for one message; returns its exit status (128+N for signal N, 127 when it
// could not start). Extends the lease every lease/3 while it runs.
int run_handler(Client& client, const ConsumeArgs& args, const Message& m, Micros lease) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(Errc::kInternal, "pipe failed");

  std::vector<std::string> env_strings = {
      "TXMQ_TOPIC=" + args.topic, fmt::format("TXMQ_MESSAGE_ID={}", m.id),
      fmt::format("TXMQ_ATTEMPT={}", m.attempt), "TXMQ_RECEIPT=" + m.receipt};
  if (m.key) env_strings.push_back("TXMQ_KEY=" + *m.key);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "TXMQ_", 5) != 0) envp.push_back(*e);
  }
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[0], STDIN_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: a Ctrl-C meant for txmq does not kill running handlers, which are
  // allowed to finish.
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  std::string command = args.exec;
  char sh[] = "/bin/sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, command.data(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[0]);
  if (rc != 0) {
    close(pipe_fds[1]);
    print_error(fmt::format("cannot start /bin/sh: {}", std::strerror(rc)));
    return 127;
  }

  // Feed stdin from a thread: a handler that does not read its input must not block us.
  std::thread writer([fd = pipe_fds[1], &m] {
    std::size_t done = 0;
    while (done < m.payload.size()) {
      ssize_t n = write(fd, m.payload.data() + done, m.payload.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // EPIPE: the handler closed its stdin
      done += static_cast<std::size_t>(n);
    }
    close(fd);
  });

  int pidfd = open_pidfd(pid);
  auto next_extend = std::chrono::steady_clock::now() + lease / 3;
  int status = 0;
  bool lease_ok = true;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    auto now = std::chrono::steady_clock::now();
    if (now >= next_extend && lease_ok) {
      try {
        if (client.extend(args.topic, m.receipt, lease) != Settle::kOk) {
          lease_ok = false;
          print_error(fmt::format("message {}: lease lost while its handler runs; another "
                                  "consumer may run it too",
                                  m.id));
        }
      } catch (const Error& e) {
        print_error(fmt::format("message {}: extending the lease failed: {}", m.id, e.what()));
      }
      next_extend = now + lease / 3;
    }
    int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       next_extend - std::chrono::steady_clock::now())
                                       .count());
    wait_ms = std::clamp(wait_ms, 1, 1000);
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, wait_ms);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(wait_ms, 10)));
    }
  }
  if (pidfd >= 0) close(pidfd);
  writer.join();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void consume_loop(Client& client, const ConsumeArgs& args, Micros lease, Totals& totals) {
  Micros idle = std::chrono::milliseconds(20);
  while (!g_stop.load()) {
    if (args.max_messages > 0 && totals.claimed.fetch_add(1) >= args.max_messages) return;
    std::vector<Message> messages;
    try {
      ReceiveOptions options;
      options.lease = lease;
      messages = client.receive(args.topic, options);
    } catch (const Error& e) {
      if (args.max_messages > 0) totals.claimed.fetch_sub(1);
      if (!e.retryable()) throw;
      print_error(fmt::format("receive failed, retrying: {}", e.what()));
      messages.clear();
    }
    if (messages.empty()) {
      if (args.max_messages > 0) totals.claimed.fetch_sub(1);
      if (args.exit_when_empty) return;
      // Idle: back off to at most 1 s between claims, waking early on a stop request.
      for (auto slept = Micros{0}; slept < idle && !g_stop.load();
           slept += std::chrono::milliseconds(20)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      idle = std::min<Micros>(idle * 2, std::chrono::seconds(1));
      continue;
    }
    idle = std::chrono::milliseconds(20);
    const Message& m = messages.front();
    int status = run_handler(client, args, m, lease);
    Settle s;
    if (status == 0) {
      s = client.ack(args.topic, m.receipt);
      if (s == Settle::kOk) totals.acked++;
    } else {
      Micros delay = retry_delay(m.attempt);
      print_error(fmt::format("message {} attempt {}: handler exited with {}; retry in {:.1f} s",
                              m.id, m.attempt, status, delay.count() / 1e6));
      s = client.nack(args.topic, m.receipt, delay);
      if (s == Settle::kOk) totals.nacked++;
    }
    if (s != Settle::kOk) {
      totals.lost++;
      print_error(fmt::format("message {}: the lease was lost before the handler finished; its "
                              "outcome was not applied (another consumer has it)",
                              m.id));
    }
  }
}

}  // namespace

void add_consume_command(CLI::App& app, Globals& g) {
  auto args = std::make_shared<ConsumeArgs>();
  CLI::App* consume = app.add_subcommand(
      "consume", "run a command for each message: payload on stdin, exit 0 acks");
  consume->add_option("topic", args->topic)->required();
  consume->add_option("--exec", args->exec, "command, run with /bin/sh -c")->required();
  consume->add_option("--concurrency", args->concurrency, "handlers at once (1)");
  CLI::Option* lease_opt =
      consume->add_option("--lease", args->lease, "lease seconds (topic's), extended while "
                                                  "a handler runs");
  consume->add_option("--max-messages", args->max_messages, "stop after this many (no limit)");
  consume->add_flag("--exit-when-empty", args->exit_when_empty,
                    "stop when nothing is claimable");
  consume->callback([&g, args, lease_opt] {
    if (args->concurrency < 1 || args->concurrency > 256) {
      throw Error(Errc::kInvalidArgument, "--concurrency must be from 1 to 256");
    }
    if (args->max_messages < 0) throw Error(Errc::kInvalidArgument, "--max-messages must be >= 0");
    auto client = connect(g);
    Micros lease = lease_opt->count() > 0 ? seconds_to_micros(args->lease, "--lease")
                                          : client->topic(args->topic).options.lease;

    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);

    Totals totals;
    std::mutex error_mutex;
    std::exception_ptr failure;
    std::vector<std::thread> threads;
    for (int i = 0; i < args->concurrency; ++i) {
      threads.emplace_back([&] {
        try {
          consume_loop(*client, *args, lease, totals);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!failure) failure = std::current_exception();
          g_stop.store(true);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    std::fprintf(stderr, "txmq: consumed %lld messages: %lld acked, %lld nacked, %lld leases lost\n",
                 static_cast<long long>(totals.acked + totals.nacked + totals.lost),
                 static_cast<long long>(totals.acked.load()),
                 static_cast<long long>(totals.nacked.load()),
                 static_cast<long long>(totals.lost.load()));
    if (failure) std::rethrow_exception(failure);
  });
}

}  // namespace txmq::cli
