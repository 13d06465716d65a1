// txmq-bench's commands: the bench (bench/bench.h, docs/benchmarks.md) and the consumer
// processes its sections start.
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/child_process.h"
#include "bench/command.h"
#include "cli/cli.h"
#include "txmq/local.h"
#include "txmq/worker.h"

namespace txmq::bench {
namespace {

using cli::connect;
using cli::Globals;
using cli::resolve_dsn;
using cli::seconds_to_micros;

long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

}  // namespace

void add_bench_command(CLI::App& app, Globals& g) {
  struct Args {
    bool quick = false;
    bool huge = false;
    std::string only;
    bool cpu = true;
    std::string cpu_pids;
    std::string servers;
    int partitions = 0;
    std::string storage = "dedicated";
    std::string xa_dsn;
    bool binlog = false;
    std::string server;
  };
  auto a = std::make_shared<Args>();
  CLI::App* bench = app.add_subcommand(
      "bench", "measure txmq against the raw INSERT speed of the same server and a plain "
               "UPDATE...LIMIT claim, in one run (docs/benchmarks.md)");
  bench->add_flag("--quick", a->quick, "smaller sizes: about a minute");
  bench->add_flag("--huge", a->huge, "also drain at a 10M backlog (adds several minutes)");
  std::string sections;
  for (const std::string& s : bench_sections()) sections += (sections.empty() ? "" : ",") + s;
  bench->add_option("--only", a->only,
                    "comma-separated sections to run: " + sections +
                        " (queues, storage, chaos and pressure run only when named: queues "
                        "makes 100,000 queues, 1,000 with --quick; storage sets a queue in "
                        "shared storage against one with tables of its own among 10,000 "
                        "others (1,000); chaos and pressure restart the "
                        "local server and take about 20 minutes each; with --quick, 2 cells in "
                        "under 3 minutes; one cell alone: --only pressure.held_snapshot)");
  bench->add_flag("--cpu,!--no-cpu", a->cpu,
                  "print with each row what it cost per message (the default): CPU of the "
                  "bench, of the database server when it runs on this machine, and of the "
                  "machine (/proc), and the server's fsyncs, statements and transactions; --no-cpu "
                  "leaves them out");
  bench->add_option("--cpu-pids", a->cpu_pids,
                    "also these processes, NAME=PID,... (such as the servers' mariadbd); "
                    "implies --cpu");
  bench->add_option("--servers", a->servers,
                    "spread the bench's topics over these servers (txmq server add), a,b,c: "
                    "partition p on server p % n");
  bench->add_option("--partitions", a->partitions,
                    "partitions of the bench's topics (default 1; with --servers, 2 per server)")
      ->check(CLI::Range(1, 64));
  bench->add_option("--storage", a->storage,
                    "where the bench's topics keep their messages: dedicated (tables of their "
                    "own, the default) or shared (TableCreation::kShared, where a topic can be)")
      ->check(CLI::IsMember({"dedicated", "shared"}));
  bench->add_option("--xa-dsn", a->xa_dsn,
                    "the second database of the exactly-once-across-databases row (process_xa): "
                    "a MariaDB/MySQL server other than the queue's. Default: a private server "
                    "beside the local one (in TXMQ_HOME-xa) when the bench runs on the local "
                    "server; with --dsn or TXMQ_DSN and no --xa-dsn the row is skipped");
  bench->add_flag("--binlog", a->binlog,
                  "run on a private server with the binary log on and sync_binlog=1, as "
                  "replicated production servers run (in TXMQ_HOME-binlog, stopped at the end); "
                  "every ratio is then against raw INSERTs on that server; with --server, "
                  "that server is started with its binary log on");
  bench->add_option("--server", a->server,
                    "run on a private server of scripts/server NAME (mysql-9.7, mariadb-11.8; "
                    "docs/servers.md) in TXMQ_HOME-NAME (TXMQ_HOME-NAME-binlog with --binlog), "
                    "started if it is not running and then stopped at the end; the XA row's "
                    "second server is another one of NAME (in that folder's -xa). Every ratio "
                    "is against raw INSERTs on that server. The script is the source tree's "
                    "that this binary was built from, or named by TXMQ_SERVER_SCRIPT");
  bench->callback([&g, a] {
    BenchOptions o;
    // Whether the queue's server is the embedded default, asked before resolve_dsn starts it.
    const char* env_dsn = std::getenv("TXMQ_DSN");
    const bool local = g.dsn.empty() && (env_dsn == nullptr || *env_dsn == '\0');
    std::string home = LocalServer::resolve_home({});
    while (home.size() > 1 && home.back() == '/') home.pop_back();
    // The --binlog server, stopped (by its pid file) however the bench ends.
    struct StopAtExit {
      std::optional<LocalServerOptions> server;
      ~StopAtExit() {
        try {
          if (server) LocalServer::stop(*server);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "bench: stopping the --binlog server: %s\n", e.what());
        }
      }
    } binlog_server;
    // The --server one, stopped at the end if the bench started it (by scripts/server stop).
    std::unique_ptr<ScriptServer> script_server;
    if (!a->server.empty()) {
      if (!local) {
        throw Error(Errc::kInvalidArgument,
                    "--server starts a private server of scripts/server, so it cannot be "
                    "combined with --dsn or TXMQ_DSN; to measure a server of your own, give "
                    "only its DSN");
      }
      const std::string script = server_script();
      const std::string server_home = home + "-" + a->server + (a->binlog ? "-binlog" : "");
      std::fprintf(stderr, "bench: a private %s%s in %s (%s)\n", a->server.c_str(),
                   a->binlog ? " with the binary log on (sync_binlog=1)" : "",
                   server_home.c_str(), script.c_str());
      script_server =
          std::make_unique<ScriptServer>(script, a->server, server_home, a->binlog);
      o.dsn = script_server->start();
      if (script_server->was_running()) {
        std::fprintf(stderr, "bench: %s was running already in %s: measured as it runs (the "
                             "header shows its binary log) and left running\n",
                     a->server.c_str(), server_home.c_str());
      }
      if (a->xa_dsn.empty()) {
        o.xa_home = server_home + "-xa";
        o.xa_server_script = script;
        o.xa_server_name = a->server;
      }
    } else if (a->binlog) {
      if (!local) {
        throw Error(Errc::kInvalidArgument,
                    "--binlog starts a private server with the binary log on, so it cannot be "
                    "combined with --dsn or TXMQ_DSN; to measure your own server, run the bench "
                    "on it: its header shows its binlog and sync_binlog settings");
      }
      LocalServerOptions binlog{.home = home + "-binlog", .binary_log = true};
      std::fprintf(stderr, "bench: a private server with the binary log on (sync_binlog=1) in %s\n",
                   binlog.home.c_str());
      binlog_server.server = binlog;
      o.dsn = LocalServer::ensure_running(binlog);
    } else {
      o.dsn = resolve_dsn(g);
    }
    o.xa_dsn = a->xa_dsn;
    o.private_server = local;
    if (o.xa_dsn.empty() && local && a->server.empty()) o.xa_home = home + "-xa";
    // The chaos cells restart the embedded server by its pid file (not the --binlog one, which
    // they would start again without its binary log, nor a --server one: they are skipped
    // there, saying why).
    if (local && !a->binlog && a->server.empty()) o.local_home = home;
    o.quick = a->quick;
    o.huge = a->huge;
    o.json = g.json;
    std::stringstream in(a->only);
    for (std::string s; std::getline(in, s, ',');) {
      if (!s.empty()) o.sections.push_back(s);
    }
    o.cpu = a->cpu;
    std::stringstream servers(a->servers);
    for (std::string s; std::getline(servers, s, ',');) {
      if (!s.empty()) o.servers.push_back(s);
    }
    o.partitions = a->partitions;
    o.shared_storage = a->storage == "shared";
    std::stringstream pids(a->cpu_pids);
    for (std::string s; std::getline(pids, s, ',');) {
      if (s.empty()) continue;
      const std::size_t eq = s.find('=');
      int pid = 0;
      try {
        pid = eq == std::string::npos ? 0 : std::stoi(s.substr(eq + 1));
      } catch (const std::exception&) {
      }
      if (eq == 0 || pid <= 0) {
        throw Error(Errc::kInvalidArgument,
                    "--cpu-pids: expected NAME=PID,... (such as s1=1234,s2=1240), got '" + s + "'");
      }
      o.cpu_pids.emplace_back(s.substr(0, eq), pid);
    }
    g.exit_code = run_bench(o);
  });
}

// A consumer process for the bench's long-polling sections (bench/bench.cc starts it):
// THREADS threads loop receive(wait) and ack; each message is printed as
// "ID MONOTONIC_NS" the moment it arrives. Killed by the bench.
void add_bench_consumer_command(CLI::App& app, Globals& g) {
  struct Args {
    std::string topic;
    int threads = 1;
    double wait = 20;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench-consumer", "");  // hidden: for the bench itself
  cmd->group("");
  cmd->add_option("topic", a->topic)->required();
  cmd->add_option("--threads", a->threads);
  cmd->add_option("--wait", a->wait);
  cmd->callback([&g, a] {
    auto client = connect(g);
    const Micros wait = seconds_to_micros(a->wait, "--wait");
    std::mutex out;
    std::printf("ready\n");
    std::fflush(stdout);
    std::vector<std::thread> threads;
    for (int i = 0; i < a->threads; ++i) {
      threads.emplace_back([&] {
        for (;;) {
          ReceiveOptions options;
          options.wait = wait;
          std::vector<Message> got = client->receive(a->topic, options);
          const long long ns = monotonic_ns();
          for (const Message& m : got) {
            {
              std::lock_guard lock(out);
              std::printf("%llu %lld\n", static_cast<unsigned long long>(m.id), ns);
              std::fflush(stdout);
            }
            client->ack(a->topic, m.receipt);
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  });
}

// A consumer process for the bench's chaos and pressure sections (bench/chaos.cc starts it): a
// txmq::Worker of THREADS threads whose handler works WORK_MS (sleeps) per message. Payloads are
// "SEQ SEND_NS ..."; each handled message is printed as "SEQ SEND_NS START_NS" (CLOCK_MONOTONIC
// of the handler's start) when its handler returns, before its ack: a line whose ack is lost
// comes again as a duplicate, never as a loss. SIGTERM stops the Worker gracefully; the bench's
// death kills it (PR_SET_PDEATHSIG).
void add_bench_worker_command(CLI::App& app, Globals& g) {
  struct Args {
    std::string topic;
    int threads = 8;
    double work_ms = 1;
    double lease = 10;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench-worker", "");  // hidden: for the bench itself
  cmd->group("");
  cmd->add_option("topic", a->topic)->required();
  cmd->add_option("--threads", a->threads);
  cmd->add_option("--work-ms", a->work_ms);
  cmd->add_option("--lease", a->lease);
  cmd->callback([&g, a] {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // SIGTERM is taken by a thread of ours (sigwait), blocked in every other thread.
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);
    auto client = connect(g);
    const auto work = std::chrono::duration<double, std::milli>(a->work_ms);
    WorkerOptions options;
    options.threads = a->threads;
    options.lease = seconds_to_micros(a->lease, "--lease");
    options.on_event = [](std::string_view) {};  // outages are what the bench measures
    std::printf("ready\n");  // before the Worker's threads write their first lines
    std::fflush(stdout);
    Worker worker(*client, a->topic, [work](const Message& m) {
      const long long start = monotonic_ns();
      unsigned long long seq = 0;
      long long sent = 0;
      std::sscanf(m.payload.c_str(), "%llu %lld", &seq, &sent);
      std::this_thread::sleep_for(work);
      char line[80];
      const int n = std::snprintf(line, sizeof(line), "%llu %lld %lld\n", seq, sent, start);
      // One write of under PIPE_BUF bytes: lines of the threads never interleave.
      if (write(STDOUT_FILENO, line, static_cast<std::size_t>(n)) != n) _exit(3);
    }, options);
    std::thread watcher([&worker, term] {
      int sig = 0;
      sigwait(&term, &sig);
      worker.stop();
    });
    // The watcher may wait for a SIGTERM that never comes (the Worker stopped on an error): the
    // process ends here, the watcher with it.
    int status = 0;
    try {
      worker.join();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "txmq: bench-worker: %s\n", e.what());
      status = 2;
    }
    _exit(status);
  });
}

}  // namespace txmq::bench
