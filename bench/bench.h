#pragma once
// txmq bench: txmq against the raw speed of the same server and the seed's algorithm, in one run.

#include <string>
#include <utility>
#include <vector>

namespace txmq::bench {

struct BenchOptions {
  std::string dsn;                    // where to run (resolved by the caller)
  bool quick = false;                 // about a minute: shorter runs, smaller backlogs
  bool json = false;                  // one JSON document on stdout instead of tables
  bool huge = false;                  // also the 10M backlog
  std::vector<std::string> sections;  // run only these sections (empty: all)
  // CPU taken during each timed run by the bench, these processes (name, pid), the database
  // server when it runs on this machine ("db") and the machine, and the server's fsyncs,
  // statements and transactions, printed with each row and in the JSON document's rows
  // ("cpu_seconds"). On by default (txmq bench --no-cpu: off).
  bool cpu = true;
  std::vector<std::pair<std::string, int>> cpu_pids;
  // The bench's topics spread over these servers (registered with Client::add_server; partition
  // p on servers[p % n]) with `partitions` partitions (0: two per server). Empty: the client's
  // own database, one partition, as always.
  std::vector<std::string> servers;
  int partitions = 0;
  // The bench's topics in shared storage (TableCreation::kShared) where they can be, not in
  // tables of their own: to set a run against a run without it.
  bool shared_storage = false;
  // The second database of the drain section's exactly-once-across-databases row
  // (drain.exactly_once_xa.4x100, Client::process_xa): this DSN; else, when xa_home is set, a
  // private server the bench starts in that folder (and stops at the end); else the row is
  // skipped, saying why.
  std::string xa_dsn;
  std::string xa_home;
  // With xa_home: the private server there is scripts/server's NAME (this script), as the
  // queue's server of `--server NAME` is; empty: txmq's own local server (LocalServer).
  std::string xa_server_script;
  std::string xa_server_name;
  // The embedded server's folder when the bench runs on it (the chaos section restarts it by
  // its pid file); empty on a --dsn or TXMQ_DSN server.
  std::string local_home;
  // The bench's server is one of its own (the embedded one, --binlog's or --server's), whose
  // settings it may change: it turns on InnoDB's count of transactions there.
  bool private_server = false;
};

// Runs the workloads, printing each row as it completes, then the table of targets.
// Returns 0 when the run completed; figures are reported, never asserted.
int run_bench(const BenchOptions& options);

// The section names, in run order, for --only. The last two, chaos and pressure, run only when
// named (bench/chaos.h).
const std::vector<std::string>& bench_sections();

}  // namespace txmq::bench
