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
#include "txmq/worker.h"

extern char** environ;

namespace txmq::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

struct ConsumeArgs {
  std::string topic, group;
  std::string exec;
  int concurrency = 1;
  int batch = 1;
  double hold_up_to = 1;
  double lease = 0;
  std::int64_t max_messages = 0;
  bool exit_when_empty = false;
};

// A consumer started while the database is busy (a lock held by another process's start, a
// cluster node catching up) waits for it instead of exiting: errors the database answered and
// that are worth retrying (deadlock, lock wait) are retried for up to a minute. A database that
// cannot be reached fails at once, so that a wrong DSN is told at once.
std::unique_ptr<Client> connect_when_free(const Globals& g) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  auto pause = std::chrono::milliseconds(100);
  for (;;) {
    try {
      return connect(g);
    } catch (const Error& e) {
      if (e.code() != Errc::kAborted || g_stop.load() ||
          std::chrono::steady_clock::now() + pause > give_up) {
        throw;
      }
      print_error(fmt::format("the database is busy ({}): trying again", e.what()));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(5000));
    }
  }
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
// could not start). The Worker extends the lease while it runs.
int run_handler(const ConsumeArgs& args, const Message& m) {
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
  int status = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, pidfd >= 0 ? WNOHANG : 0);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, 1000);
    }
  }
  if (pidfd >= 0) close(pidfd);
  writer.join();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct HandlerFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

void add_consume_command(CLI::App& app, Globals& g) {
  auto args = std::make_shared<ConsumeArgs>();
  CLI::App* consume = app.add_subcommand(
      "consume", "run a command for each message: payload on stdin, exit 0 acks");
  consume->add_option("topic", args->topic)->required();
  consume->add_option("--exec", args->exec, "command, run with /bin/sh -c")->required();
  consume->add_option("--concurrency", args->concurrency, "handlers at once (1)");
  consume->add_option("--batch", args->batch,
                      "messages each handler thread claims at once and runs in turn (1, at most "
                      "100)");
  consume->add_option("--hold-up-to", args->hold_up_to,
                      "seconds a claimed batch is held by a transaction before its leases are "
                      "written (1, at most a third of the lease; 0: lease at once)");
  CLI::Option* lease_opt =
      consume->add_option("--lease", args->lease, "lease seconds (topic's), extended while "
                                                  "a handler runs");
  consume->add_option("--max-messages", args->max_messages, "stop after this many (no limit)");
  consume->add_flag("--exit-when-empty", args->exit_when_empty,
                    "stop when nothing is claimable");
  consume->add_option("--group", args->group, "consumer group (default)");
  consume->callback([&g, args, lease_opt] {
    if (args->concurrency < 1 || args->concurrency > 256) {
      throw Error(Errc::kInvalidArgument, "--concurrency must be from 1 to 256");
    }
    if (args->batch < 1 || args->batch > 100) {
      throw Error(Errc::kInvalidArgument, "--batch must be from 1 to 100");
    }
    if (args->max_messages < 0) throw Error(Errc::kInvalidArgument, "--max-messages must be >= 0");
    auto client = connect_when_free(g);
    WorkerOptions options;
    options.threads = args->concurrency;
    options.batch = args->batch;
    options.hold_up_to = seconds_to_micros(args->hold_up_to, "--hold-up-to");
    if (lease_opt->count() > 0) options.lease = seconds_to_micros(args->lease, "--lease");
    options.limit = static_cast<std::uint64_t>(args->max_messages);
    options.stop_when_empty = args->exit_when_empty;
    options.group = args->group;
    options.on_event = [](std::string_view text) { print_error(std::string(text)); };

    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);

    // The Worker long polls, extends leases while handlers run, retries the database with
    // backoff, and on stop lets running handlers finish.
    Worker worker(*client, args->topic,
                  [&](const Message& m) {
                    const int status = run_handler(*args, m);
                    if (status != 0) {
                      throw HandlerFailed(fmt::format("handler exited with {}", status));
                    }
                  },
                  options);
    while (!g_stop.load() && !worker.stopping()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_stop.load()) print_error("stopping: waiting for running handlers to finish");
    worker.stop();
    std::exception_ptr failure;
    try {
      worker.join();
    } catch (...) {
      failure = std::current_exception();
    }
    const WorkerCounts totals = worker.counts();
    std::fprintf(stderr, "txmq: consumed %llu messages: %llu acked, %llu retried, %llu leases lost\n",
                 static_cast<unsigned long long>(totals.acked + totals.retried + totals.leases_lost),
                 static_cast<unsigned long long>(totals.acked),
                 static_cast<unsigned long long>(totals.retried),
                 static_cast<unsigned long long>(totals.leases_lost));
    if (failure) std::rethrow_exception(failure);
  });
}

}  // namespace txmq::cli
