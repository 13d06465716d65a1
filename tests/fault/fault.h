// The fault suite (docs/faults.md): an orchestrator that starts a private MariaDB server,
// producers and consumers as separate processes, injects faults, and checks the histories the
// processes wrote.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace txmq::fault {

// The at-least-once topic: 2 partitions (6 over 3 servers in the shards mode), 3 consumer groups, keyed and unkeyed messages, batches,
// an archive. The exactly-once topic: sent in transactions with a business row, processed with
// Client::process into an effects table.
inline constexpr std::string_view kTopic = "fault_alo";
inline constexpr std::string_view kExactlyOnceTopic = "fault_eo";
inline constexpr std::string_view kOrdersTable = "fault_orders";
inline constexpr std::string_view kEffectsTable = "fault_effects";
inline constexpr std::string_view kRawGroup = "default";   // receive + ack, logged in full
inline constexpr std::string_view kWorkerGroup = "audit";  // the library's Worker
inline constexpr std::string_view kCliGroup = "cli";       // `txmq consume --exec`

// Microseconds on CLOCK_MONOTONIC, which all processes of one machine share: the histories of
// different processes can be ordered by it.
inline std::int64_t now_us() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1000;
}

// A history file: one write() per line, so a SIGKILL loses no line that was written and tears
// none (O_APPEND writes of one line are atomic with respect to each other).
class History {
 public:
  explicit History(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  ~History() {
    if (fd_ >= 0) ::close(fd_);
  }
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  template <typename... Args>
  void line(fmt::format_string<Args...> format, Args&&... args) {
    std::string text = fmt::format("{} ", now_us());
    fmt::format_to(std::back_inserter(text), format, std::forward<Args>(args)...);
    text += '\n';
    for (std::size_t done = 0; done < text.size();) {
      ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
};

// A child's part: argv after the role name. Returns the exit code.
struct RoleArgs {
  int id = 0;
  int generation = 0;  // how many times this child was started before (restarts after kills)
  std::string history;
  std::uint64_t seed = 0;
  std::string group;
};
int run_producer(const RoleArgs& args);
int run_consumer(const RoleArgs& args);
int run_worker(const RoleArgs& args);
int run_exactly_once(const RoleArgs& args);

}  // namespace txmq::fault

namespace txmq::fault {

// What the orchestrator did and collected; check() judges it.
struct Faults {
  int consumer_kills = 0;
  int consumer_kills_mid_claim = 0, consumer_kills_mid_handler = 0, consumer_kills_mid_ack = 0;
  int producer_kills = 0, producer_kills_mid_send = 0;
  int server_kills = 0;
  int connection_kills = 0;  // connections killed (KILL CONNECTION), in kill_rounds rounds
  int connection_kill_rounds = 0;
  int pauses = 0;
  int pauses_holding_messages = 0;  // a receive+ack consumer paused between receive and ack
  int observations = 0;             // snapshots of the queue looking for a partly visible batch
  int partial_batches_seen = 0;
  std::vector<std::string> unbidden_exits;  // children that exited without being told to
  bool drained = false;
  std::uint64_t dead_letters = 0;
};

// The cluster mode's node faults and what the nodes said (cluster.cc); check.cc measures from
// the histories how long clients went without service after each fault.
struct NodeFault {
  // kill (kill -9, restart a few seconds later), pause (SIGSTOP past the suspect timeout),
  // restart, freeze (the writer SIGSTOPped for 15 s; 35 s in a soak, past the read_timeout);
  // partitions (network namespaces): cut (the writer from the other nodes, not from the
  // clients), isolate (a node from everything), bridge (the link between the writer and one
  // other node), flap (that link cut and healed in turn)
  std::string kind;
  int node = 0;
  int other = 0;            // bridge, flap: the other end of the link
  bool writer = false;      // the node was the writer when it was hit
  std::int64_t at_us = 0;   // now_us() of the fault
  std::int64_t synced_us = 0;  // every node Synced again (0: not seen)
  std::int64_t healed_us = 0;  // a partition: every link healed
};

// Certification failures and BF aborts one node counted between two samples.
struct ConflictSample {
  std::int64_t from_us = 0, to_us = 0;
  int node = 0;
  std::uint64_t cert_failures = 0, bf_aborts = 0;
};

struct ClusterRecord {
  bool enabled = false;
  int nodes = 0;
  std::int64_t faults_started_us = 0, producers_stopped_us = 0;
  std::vector<NodeFault> node_faults;
  std::vector<ConflictSample> conflicts;
  std::vector<std::int64_t> writer_changes_us;  // faults that hit the writer, moves of its row
  std::vector<std::int64_t> multi_writer_us;    // samples in which 2+ nodes committed locally
  std::vector<std::string> notes;               // how the writer was found, ...
  std::vector<std::string> problems;            // a node that did not come back, ...
  bool tables_checked = false;
  std::size_t tables_compared = 0;
  std::vector<std::string> table_mismatches;
};

// The shards mode's server kills (shards.h); check.cc measures from the producers' histories
// whether unkeyed sends went on while a server was down.
struct ShardFault {
  int server = 0;
  bool catalog = false;         // server 1, whose database is the catalog
  std::string kind = "kill";    // "kill" (kill -9, restart) or "freeze" (SIGSTOP, SIGCONT)
  std::int64_t at_us = 0;       // now_us() of the kill -9 or SIGSTOP
  std::int64_t restart_us = 0;  // the restart (or SIGCONT) began
  std::int64_t back_us = 0;     // accepting connections again (0: never)
};

struct ShardRecord {
  bool enabled = false;
  int servers = 0, partitions = 0;
  std::vector<std::string> placement;  // the at-least-once topic's: server per partition
  std::int64_t faults_started_us = 0, producers_stopped_us = 0;
  std::vector<ShardFault> faults;
  std::vector<std::string> unkeyed_histories;  // the producer that sends unkeyed messages only
  std::vector<std::string> notes, problems;
  std::vector<std::string> per_server;  // "s1: 1234 messages, 56 effects" after the drain
  std::uint64_t effects_elsewhere = 0;  // exactly-once effects not on their order's server
};

struct RunRecord {
  std::vector<std::string> producer_histories;
  std::vector<std::string> consumer_histories;  // receive + ack, group kRawGroup
  std::vector<std::string> worker_histories;    // Worker, group kWorkerGroup
  std::vector<std::string> exactly_once_histories;  // Client::process: when, and errors
  std::vector<std::string> cli_logs;            // txmq consume's stderr
  std::string cli_deliveries;                   // what its --exec handlers wrote, group kCliGroup
  std::vector<std::string> effects;             // the effects table's tags
  std::vector<std::string> orders;              // the orders table's tags
  std::vector<std::string> logs;  // every history and output file: searched for error 1047
  Faults faults;
  ClusterRecord cluster;
  ShardRecord shards;
};

// Prints the table and returns the checks that failed (none: every check held).
std::vector<std::string> check(const RunRecord& run);

}  // namespace txmq::fault
