// txmq bench: see bench/bench.h and docs/benchmarks.md.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "cli.h"
#include "txmq/local.h"

namespace txmq::cli {

void add_bench_command(CLI::App& app, Globals& g) {
  struct Args {
    bool quick = false;
    bool huge = false;
    std::string only;
    bool cpu = false;
    std::string cpu_pids;
    std::string servers;
    int partitions = 0;
    std::string xa_dsn;
    bool binlog = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* bench = app.add_subcommand(
      "bench", "measure txmq against the raw INSERT speed of the same server and a plain "
               "UPDATE...LIMIT claim, in one run (docs/benchmarks.md)");
  bench->add_flag("--quick", a->quick, "smaller sizes: about a minute");
  bench->add_flag("--huge", a->huge, "also drain at a 10M backlog (adds several minutes)");
  std::string sections;
  for (const std::string& s : bench::bench_sections()) sections += (sections.empty() ? "" : ",") + s;
  bench->add_option("--only", a->only, "comma-separated sections to run: " + sections);
  bench->add_flag("--cpu", a->cpu,
                  "print the CPU each row took: the bench process and the machine (/proc)");
  bench->add_option("--cpu-pids", a->cpu_pids,
                    "also these processes, NAME=PID,... (such as the servers' mariadbd); "
                    "implies --cpu");
  bench->add_option("--servers", a->servers,
                    "spread the bench's topics over these servers (txmq server add), a,b,c: "
                    "partition p on server p % n");
  bench->add_option("--partitions", a->partitions,
                    "partitions of the bench's topics (default 1; with --servers, 2 per server)")
      ->check(CLI::Range(1, 64));
  bench->add_option("--xa-dsn", a->xa_dsn,
                    "the second database of the exactly-once-across-databases row (process_xa): "
                    "a MariaDB/MySQL server other than the queue's. Default: a private server "
                    "beside the local one (in TXMQ_HOME-xa) when the bench runs on the local "
                    "server; with --dsn or TXMQ_DSN and no --xa-dsn the row is skipped");
  bench->add_flag("--binlog", a->binlog,
                  "run on a private server with the binary log on and sync_binlog=1, as "
                  "replicated production servers run (in TXMQ_HOME-binlog, stopped at the end); "
                  "every ratio is then against raw INSERTs on that server");
  bench->callback([&g, a] {
    bench::BenchOptions o;
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
    if (a->binlog) {
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
    if (o.xa_dsn.empty() && local) o.xa_home = home + "-xa";
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
    g.exit_code = bench::run_bench(o);
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
  CLI::App* cmd = app.add_subcommand("bench-consumer", "");  // hidden: for txmq bench
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
          timespec now{};
          clock_gettime(CLOCK_MONOTONIC, &now);
          const long long ns = static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
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

}  // namespace txmq::cli
