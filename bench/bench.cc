#include "bench.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "chaos.h"
#include "fair.h"
#include "child_process.h"
#include "db/connection.h"
#include "db/dsn.h"
#include "reference.h"
#include "report.h"
#include "queues.h"
#include "serve_load.h"
#include "sql.h"
#include "server/sqs/queues.h"
#include "server/app/sqs_server.h"
#include "server/sqs/service.h"
#include "waiting.h"
#include "txmq/client.h"
#include "txmq/local.h"
#include "workloads.h"

namespace txmq::bench {
namespace {

// Sizes of a run. Default: a few minutes on 2 cores; quick: about a minute.
struct Sizes {
  double timed_seconds;      // each timed rate run (raw INSERT, send), split in rounds
  int rounds;                // alternating rounds of txmq and its raw reference
  int multirow_rows;         // raw multi-row INSERT, and each send_batch size
  int drain_backlog;         // leased and seed drains
  double drain_cap_seconds;  // no drain runs longer
  double drain_basis_seconds;  // raw INSERT at 4 threads before each drain
  int seed_deep_backlog;     // the seed at a deep backlog
  double seed_deep_seconds;
  double e2e_seconds;
  std::vector<int> depths;   // drain rate at these backlogs
  int depth_rounds;          // each drains depth_round messages then tops the backlog up
  int depth_round;
  int claim_samples;
  int wake_samples;          // single sends to a consumer waiting in another process
  double idle_window;        // seconds over which idle consumers' statements are counted
  bool idle_all;             // all idle configurations, or only 16 processes x 1 s wait
  int sql_batch_rows;        // sql: messages sent by each side's batches of 1,000, per round
  int sql_drain_backlog;     // sql: the backlog each exactly-once drain takes
  int sql_drain_rounds;
  int sql_wake_samples;      // sql: sends committed to a consumer waiting in another process
};

Sizes sizes_for(const BenchOptions& o) {
  Sizes s = o.quick ? Sizes{.timed_seconds = 2,
                            .rounds = 2,
                            .multirow_rows = 20000,
                            .drain_backlog = 5000,
                            .drain_cap_seconds = 5,
                            .drain_basis_seconds = 0.3,
                            .seed_deep_backlog = 100000,
                            .seed_deep_seconds = 3,
                            .e2e_seconds = 3,
                            .depths = {10000, 100000},
                            .depth_rounds = 4,
                            .depth_round = 5000,
                            .claim_samples = 300,
                            .wake_samples = 50,
                            .idle_window = 4,
                            .idle_all = false,
                            .sql_batch_rows = 10000,
                            .sql_drain_backlog = 10000,
                            .sql_drain_rounds = 1,
                            .sql_wake_samples = 50}
                    : Sizes{.timed_seconds = 9,
                            .rounds = 3,
                            .multirow_rows = 600000,
                            .drain_backlog = 20000,
                            .drain_cap_seconds = 20,
                            .drain_basis_seconds = 1,
                            .seed_deep_backlog = 100000,
                            .seed_deep_seconds = 10,
                            .e2e_seconds = 10,
                            .depths = {10000, 100000, 1000000},
                            .depth_rounds = 20,
                            .depth_round = 5000,
                            .claim_samples = 2000,
                            .wake_samples = 300,
                            .idle_window = 10,
                            .idle_all = true,
                            .sql_batch_rows = 50000,
                            .sql_drain_backlog = 20000,
                            .sql_drain_rounds = 2,
                            .sql_wake_samples = 100};
  if (o.huge) s.depths.push_back(10000000);
  return s;
}

constexpr std::size_t kSmall = 100;
constexpr std::size_t kLarge = 4096;

const std::vector<std::string> kSections = {"send",  "batch", "seed", "drain", "e2e",
                                            "depth", "claim", "keys", "wake", "idle",
                                            "partitions", "serve", "sql", "fair", "queues",
                                            "storage", "chaos", "pressure"};
// Sections that take many minutes (and chaos and pressure stop the server): run only when named
// with --only.
const std::vector<std::string> kNamedOnly = {"queues", "storage", "chaos", "pressure"};

std::string read_first_line_with(const char* path, const char* prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      std::size_t colon = line.find(':');
      std::string v = colon == std::string::npos ? line : line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "unknown";
}

// The machine and the server's durability, printed first: figures mean nothing without them.
// `topics`: lines saying where the bench's topics are, when not in the client's own database.
nlohmann::json describe(const internal::Dsn& dsn, bool json, const std::string& topics) {
  internal::Connection c(dsn);
  // MySQL names the isolation transaction_isolation and sizes its redo log by
  // innodb_redo_log_capacity (9.x has no innodb_log_file_size).
  const bool mysql = c.server().mysql;
  internal::Result r = c.execute(fmt::format(
      "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin, "
      "@@binlog_format, @@global.{0}, @@session.{0}, @@innodb_buffer_pool_size, "
      "@@{1}, @@innodb_flush_method, @@innodb_doublewrite, @@max_allowed_packet",
      mysql ? "transaction_isolation" : "tx_isolation",
      mysql ? "innodb_redo_log_capacity" : "innodb_log_file_size"));
  const internal::Row& row = r.rows.at(0);
  // MariaDB says ON/OFF as 1/0; MySQL's innodb_doublewrite is a word (ON, OFF, DETECT_ONLY, ...).
  const auto on = [&row](std::size_t i) {
    return row.cell(i).is_integer ? row.i64(i) != 0 : row.bytes(i) != "OFF";
  };
  utsname u{};
  uname(&u);
  nlohmann::json machine = {
      {"cpus", std::thread::hardware_concurrency()},
      {"cpu_model", read_first_line_with("/proc/cpuinfo", "model name")},
      {"memory", read_first_line_with("/proc/meminfo", "MemTotal")},
      {"kernel", fmt::format("{} {}", u.sysname, u.release)}};
  nlohmann::json server = {
      {"dsn", dsn.describe()},
      {"version", row.bytes(0)},
      {"innodb_flush_log_at_trx_commit", row.i64(1)},
      {"sync_binlog", row.i64(2)},
      {"log_bin", row.i64(3) != 0},
      {"binlog_format", row.bytes(4)},
      {"global_isolation", row.bytes(5)},
      {"txmq_session_isolation", row.bytes(6)},
      {"innodb_buffer_pool_size", row.i64(7)},
      {mysql ? "innodb_redo_log_capacity" : "innodb_log_file_size", row.i64(8)},
      {"innodb_flush_method", row.bytes(9)},
      {"innodb_doublewrite", on(10)},
      {"max_allowed_packet", row.i64(11)}};
  const bool durable = row.i64(1) == 1 && (row.i64(3) == 0 || row.i64(2) == 1);
  server["durable"] = durable;
  if (!json) {
    std::printf("txmq bench: txmq against the raw speed of the same server, in one run\n\n");
    std::printf("Machine  %u CPUs (%s), %s, %s\n", std::thread::hardware_concurrency(),
                machine["cpu_model"].get<std::string>().c_str(),
                machine["memory"].get<std::string>().c_str(),
                machine["kernel"].get<std::string>().c_str());
    std::printf("Server   %s %s at %s\n", mysql ? "MySQL" : "MariaDB", row.bytes(0).c_str(),
                dsn.describe().c_str());
    std::printf("         innodb_flush_log_at_trx_commit=%lld sync_binlog=%lld binlog=%s%s "
                "isolation: global %s, sessions %s\n",
                static_cast<long long>(row.i64(1)), static_cast<long long>(row.i64(2)),
                row.i64(3) != 0 ? "ON format " : "OFF", row.i64(3) != 0 ? row.bytes(4).c_str() : "",
                row.bytes(5).c_str(), row.bytes(6).c_str());
    std::printf("         buffer pool %lld MiB, redo log %lld MiB, flush method %s, doublewrite %s\n",
                static_cast<long long>(row.i64(7) >> 20), static_cast<long long>(row.i64(8) >> 20),
                row.bytes(9).c_str(), on(10) ? "ON" : "OFF");
    std::printf("         %s\n", durable ? "full durability: every commit is on disk when acknowledged"
                                          : "NOT DURABLE: a crash can lose acknowledged commits; "
                                            "figures are not comparable with a durable server");
    std::printf("%s", topics.c_str());
    std::printf("\n  %-46s %10s %8s %8s %8s  %s\n", "workload", "msgs/s", "p50 ms", "p99 ms",
                "ratio", "against");
  }
  return {{"machine", machine}, {"server", server}};
}

void accumulate(Measured& total, Measured part) {
  // A total that was one run so far (not built by accumulate) is its first round.
  if (total.round_rates.empty() && total.seconds > 0) total.round_rates.push_back(total.rate());
  if (part.round_rates.empty()) {
    total.round_rates.push_back(part.rate());
  } else {
    total.round_rates.insert(total.round_rates.end(), part.round_rates.begin(),
                             part.round_rates.end());
  }
  total.messages += part.messages;
  total.seconds += part.seconds;
  total.latencies.merge(part.latencies);
  for (const auto& [name, seconds] : part.cpu) total.cpu[name] += seconds;
}

class Bench {
 public:
  Bench(const BenchOptions& options, const internal::Dsn& dsn)
      : options_(options), dsn_(dsn), sizes_(sizes_for(options)), report_(options.json) {
    if (!options.servers.empty()) {
      topic_options_.servers = options.servers;
      topic_options_.partitions = static_cast<int>(options.servers.size()) * 2;
    }
    if (options.partitions > 0) topic_options_.partitions = options.partitions;
  }

  void run() {
    std::string topics;
    if (spread()) {
      topics = fmt::format(
          "Topics   txmq_bench_*: {} partitions{}{}\n"
          "         raw references and the seed: in the client's own database\n",
          topic_options_.partitions, servers_text(),
          topic_options_.servers.empty()
              ? ""
              : fmt::format(", partition p on server p % {}", topic_options_.servers.size()));
    }
    nlohmann::json context = describe(dsn_, options_.json, topics);
    if (spread()) {
      context["topics"] = {{"partitions", topic_options_.partitions},
                           {"servers", topic_options_.servers}};
    }
    report_.set_context(std::move(context));
    ClientOptions co;
    co.dsn = options_.dsn;
    co.pool_size = 32;
    co.consumer_name = "txmq-bench";
    if (options_.shared_storage) co.topic_tables = TableCreation::kShared;
    Client client(co);
    co.consumer_name = "txmq-bench-consumer";
    Client consumers(co);
    prepare_reference_tables(dsn_);
    if (wanted("send")) sends(client);
    if (wanted("batch")) batches(client);
    if (wanted("seed")) seed();
    if (wanted("drain")) drains(client);
    if (wanted("e2e")) e2e(client, consumers);
    if (wanted("depth")) depth(client);
    if (wanted("claim")) claim(client);
    if (wanted("keys")) keys(client);
    if (wanted("wake")) wake(client);
    if (wanted("idle")) idle(client);
    if (wanted("partitions")) partitions(client);
    if (wanted("serve")) serve(client);
    if (wanted("sql")) sql(client);
    if (wanted("fair")) fair(client);
    if (wanted("storage")) storage(client);
    if (wanted("queues")) {
      queues_section(report_, {.dsn = options_.dsn,
                               .queues = options_.quick ? 1000 : 100000,
                               .calls = options_.quick ? 200 : 500,
                               .used = options_.quick ? 200 : 10000,
                               .deletes_timed = options_.quick ? 1000 : 2000,
                               .shared_storage = options_.shared_storage});
    }
    // --only chaos / pressure, or single cells of them (--only pressure.held_snapshot).
    std::vector<std::string> cells;
    for (const std::string& s : options_.sections) {
      if (s.starts_with("chaos.") || s.starts_with("pressure.")) cells.push_back(s);
    }
    const auto asks = [&](const std::string& section) {
      return wanted(section) || std::any_of(cells.begin(), cells.end(), [&](const std::string& c) {
               return c.starts_with(section + ".");
             });
    };
    if (asks("chaos") || asks("pressure")) {
      if (!cells.empty()) {  // cells named: those, and every cell of a section named whole
        for (const std::string& id : chaos_cell_ids()) {
          if (wanted(id.substr(0, id.find('.')))) cells.push_back(id);
        }
      }
      report_.attach("chaos", run_chaos_cells({.dsn = options_.dsn,
                                               .local_home = options_.local_home,
                                               .chaos = asks("chaos"),
                                               .pressure = asks("pressure"),
                                               .cells = cells,
                                               .quick = options_.quick,
                                               .json = options_.json}));
    }
    for (const char* t : kTopics) drop_if_exists(client, t);
    drop_reference_tables(dsn_);
    report_.finish(targets());
  }

 private:
  static constexpr const char* kTopics[] = {"txmq_bench_send", "txmq_bench_batch",
                                            "txmq_bench_drain", "txmq_bench_e2e",
                                            "txmq_bench_depth", "txmq_bench_claim",
                                            "txmq_bench_keys",  "txmq_bench_wake",
                                            "txmq_bench_idle",  "txmq_bench_partitions",
                                            "txmq_bench_sql",   "txmq_bench_sql_wake",
                                            "txmq_bench_fair",  "txmq_bench_fair_off"};

  // A noisy neighbour: ten tenants send 400 messages/s, one of them 90 %, to consumers that
  // take 320/s (4 threads, 12.5 ms of work per message), so that a backlog builds. The quiet
  // tenants' dwell (send to receive) on a fair topic, alone and beside the noisy tenant, and the
  // same load on a topic without fairness.
  void fair(Client& client) {
    report_.section("Fair topics: quiet tenants' dwell time (send to receive) beside a noisy "
                    "one, 400 msgs/s offered to consumers that take 320/s");
    const std::string on = "txmq_bench_fair";
    const std::string off = "txmq_bench_fair_off";
    TopicOptions fair_options = topic_options_;
    fair_options.fair = true;
    fresh_topic(client, on, fair_options);
    fresh_topic(client, off);
    const double seconds = options_.quick ? 8 : 20;
    constexpr double kRate = 400;
    constexpr int kConsumers = 4;
    constexpr double kCostMs = 12.5;
    const auto add = [&](const std::string& id, const std::string& name, TenantDwell d,
                         double alone_p95) {
      Row r = row(id, name);
      r.messages = d.quiet.size();
      r.seconds = d.seconds;
      r.rate = static_cast<double>(d.quiet.size()) / d.seconds;
      r.p50_ms = d.quiet.percentile(50);
      r.p99_ms = d.quiet.percentile(99);
      const double p95 = d.quiet.percentile(95);
      r.note = fmt::format("quiet p95 {:.1f} ms", p95);
      if (alone_p95 > 0) r.note += fmt::format(" = {:.2f}x alone (target <= 2x)", p95 / alone_p95);
      if (d.noisy.size() > 0) {
        r.note += fmt::format("; noisy p50 {:.0f} ms, {} received", d.noisy.percentile(50),
                              d.noisy.size());
      }
      if (d.quiet_unreceived > 0) r.note += fmt::format("; {} quiet never received", d.quiet_unreceived);
      report_.add_row(r);
      return p95;
    };
    const double alone =
        add("fair.alone", "fair topic, the 9 quiet tenants alone (40/s)",
            noisy_neighbour(client, on, false, true, kRate, seconds, kConsumers, kCostMs), 0);
    client.purge(on);
    const double beside =
        add("fair.noisy", "fair topic, beside the noisy tenant (360/s)",
            noisy_neighbour(client, on, true, true, kRate, seconds, kConsumers, kCostMs), alone);
    const double unfair =
        add("fair.off", "no fairness, the same load",
            noisy_neighbour(client, off, true, false, kRate, seconds, kConsumers, kCostMs), alone);
    // What fairness costs messages without a tenant (an SQS standard queue's topic is fair
    // whether or not its senders give MessageGroupId): sends and drains, a fair topic against a
    // plain one, in alternating rounds.
    Measured plain_send, fair_send, plain_drain, fair_drain;
    const double round_seconds = sizes_.timed_seconds / sizes_.rounds;
    const auto backlog = static_cast<std::uint64_t>(options_.quick ? 20000 : 50000);
    for (int r = 0; r < sizes_.rounds; ++r) {
      for (const std::string& t : {off, on}) {
        client.purge(t);
        accumulate(t == on ? fair_send : plain_send, send_rate(client, t, 4, round_seconds, kSmall));
        client.purge(t);
        fill(client, t, static_cast<int>(backlog), kSmall);
        accumulate(t == on ? fair_drain : plain_drain,
                   drain(client, t, 4, 10, backlog, sizes_.timed_seconds));
      }
    }
    report_.add(row("fair.plain.send", "no tenants: send, plain topic, 4 threads"),
                std::move(plain_send));
    report_.add(row("fair.fair.send", "no tenants: send, fair topic, 4 threads", "fair.plain.send"),
                std::move(fair_send));
    report_.add(row("fair.plain.drain", "no tenants: receive 10 + ack, plain topic, 4 threads"),
                std::move(plain_drain));
    report_.add(row("fair.fair.drain", "no tenants: receive 10 + ack, fair topic, 4 threads",
                    "fair.plain.drain"),
                std::move(fair_drain));
    report_.attach("fair", {{"quiet_p95_ms_alone", alone},
                            {"quiet_p95_ms_beside_noisy", beside},
                            {"quiet_p95_ms_without_fairness", unfair},
                            {"ratio", alone > 0 ? beside / alone : 0.0}});
    drop_if_exists(client, on);
    drop_if_exists(client, off);
  }

  // Issue 52's gate: a queue in shared storage against a queue with tables of its own, side by
  // side in alternating rounds, with other queues in the shared tables around it (a message
  // each, so that the measured queue's rows sit among theirs): send from 4 threads, send_batch
  // of 1,000, and drains of 4 consumers receiving 10 and 100 (+ ack).
  void storage(Client& client) {
    const int others = options_.quick ? 1000 : 10000;
    report_.section(fmt::format("Shared storage against tables of its own, among {} other shared "
                                "queues (alternating rounds)",
                                with_commas(others)));
    const std::string own = "txmq_bench_storage_own";
    const std::string shared = "txmq_bench_storage_shared";
    drop_if_exists(client, own);
    drop_if_exists(client, shared);
    client.create_topic(own, {}, TableCreation::kNow);
    std::vector<std::string> neighbours;
    for (int i = 0; i < others; ++i) {
      neighbours.push_back(fmt::format("txmq_bench_storage_n{:05}", i));
      drop_if_exists(client, neighbours.back());
      client.create_topic(neighbours.back(), {}, TableCreation::kShared);
      // Half before the measured queue is made, half after: its ids and qid in the middle.
      if (i == others / 2) client.create_topic(shared, {}, TableCreation::kShared);
      client.send(neighbours.back(), "neighbour");
    }
    if (others == 0) client.create_topic(shared, {}, TableCreation::kShared);
    const double round_seconds = sizes_.timed_seconds / sizes_.rounds;
    const int batch_rows = options_.quick ? 20000 : 100000;
    const auto backlog = static_cast<std::uint64_t>(options_.quick ? 20000 : 50000);
    std::map<std::string, Measured> m;  // "own.send" ...
    for (int r = 0; r < sizes_.rounds; ++r) {
      for (const std::string& t : {own, shared}) {
        const std::string side = t == own ? "own" : "shared";
        client.purge(t);
        accumulate(m[side + ".send"], send_rate(client, t, 4, round_seconds, kSmall));
        client.purge(t);
        accumulate(m[side + ".batch"], send_batch_rate(client, t, 1000, batch_rows, kSmall));
        client.purge(t);
        fill(client, t, static_cast<int>(backlog), kSmall);
        accumulate(m[side + ".drain10"], drain(client, t, 4, 10, backlog, sizes_.timed_seconds));
        client.purge(t);
        fill(client, t, static_cast<int>(backlog), kSmall);
        accumulate(m[side + ".drain100"], drain(client, t, 4, 100, backlog, sizes_.timed_seconds));
      }
    }
    const std::vector<std::pair<std::string, std::string>> rows = {
        {"send", "send, 4 threads"},
        {"batch", "send_batch of 1,000"},
        {"drain10", "receive 10 + ack, 4 consumers"},
        {"drain100", "receive 100 + ack, 4 consumers"}};
    for (const auto& [key, label] : rows) {
      report_.add(row("storage.own." + key, label + ", tables of its own"),
                  std::move(m["own." + key]));
      report_.add(row("storage.shared." + key, label + ", shared storage", "storage.own." + key),
                  std::move(m["shared." + key]));
    }
    drop_if_exists(client, own);
    drop_if_exists(client, shared);
    for (const std::string& n : neighbours) drop_if_exists(client, n);
  }

  // txmq serve in this process, driven over HTTP (JSON protocol, SigV4-signed, keep-alive), against
  // the library doing the same batches, and single calls against raw autocommit INSERTs, all
  // measured in this section.
  void serve(Client& client) {
    report_.section("txmq serve: SQS API over HTTP (JSON 1.0, SigV4, keep-alive) against the "
                    "library in the same run");
    server::ServeOptions so;
    so.dsn = options_.dsn;
    so.listen = "127.0.0.1:0";
    server::Server srv(so);
    SqsHttpClient admin(srv.port());
    const std::string name = "txmq-bench-serve";
    const std::string url = admin.call("CreateQueue", {{"QueueName", name}})["QueueUrl"];
    const std::string topic = server::QueueCatalog::topic_of(name);
    const double seconds = sizes_.timed_seconds / 2;
    for (int clients : {4, 16}) {
      client.purge(topic);
      report_.add(row(fmt::format("serve.lib.batch10.{}", clients),
                      fmt::format("library send_batch(10), {} threads", clients)),
                  library_send_batch_rate(client, topic, clients, 10, seconds, kSmall));
      client.purge(topic);
      report_.add(row(fmt::format("serve.http.batch10.{}", clients),
                      fmt::format("SendMessageBatch(10), {} clients", clients),
                      fmt::format("serve.lib.batch10.{}", clients)),
                  http_send_batch_rate(srv.port(), url, clients, 10, seconds, kSmall));
    }
    const int backlog = sizes_.drain_backlog;
    for (int clients : {4, 16}) {
      client.purge(topic);
      fill(client, topic, backlog, kSmall);
      report_.add(row(fmt::format("serve.lib.drain10.{}", clients),
                      fmt::format("library receive(10) + ack(10), {} threads", clients)),
                  drain(client, topic, clients, 10, static_cast<std::uint64_t>(backlog),
                        sizes_.drain_cap_seconds));
      client.purge(topic);
      fill(client, topic, backlog, kSmall);
      report_.add(row(fmt::format("serve.http.drain10.{}", clients),
                      fmt::format("ReceiveMessage(10) + DeleteMessageBatch, {} clients", clients),
                      fmt::format("serve.lib.drain10.{}", clients)),
                  http_drain(srv.port(), url, clients, static_cast<std::uint64_t>(backlog),
                             sizes_.drain_cap_seconds));
    }
    // Single calls against raw autocommit INSERTs, in alternating rounds (as sends() does), with
    // the mean size of the server's group commits.
    const server::Counters& counters = srv.service().counters();
    auto group_note = [](std::uint64_t groups, std::uint64_t calls) {
      const double mean =
          groups == 0 ? 0.0 : static_cast<double>(calls) / static_cast<double>(groups);
      return fmt::format("{} group commits, {:.1f} calls each on average", groups, mean);
    };
    Measured raw;
    Measured sent;
    Measured deleted;
    const std::uint64_t send_groups = counters.send_groups.load();
    const std::uint64_t sends_grouped = counters.sends_grouped.load();
    const std::uint64_t delete_groups = counters.delete_groups.load();
    const std::uint64_t deletes_grouped = counters.deletes_grouped.load();
    for (int r = 0; r < sizes_.rounds; ++r) {
      client.purge(topic);
      accumulate(raw, raw_insert(dsn_, 16, seconds / sizes_.rounds, kSmall));
      accumulate(sent, http_send_rate(srv.port(), url, 16, seconds / sizes_.rounds, kSmall));
      client.purge(topic);
      accumulate(deleted, http_delete_rate(srv.port(), client, topic, url, 16,
                                           backlog / sizes_.rounds, [&](const std::string& receipt) {
                                             return srv.service().receipt_handle(name, receipt);
                                           }));
    }
    client.purge(topic);
    report_.add(row("serve.raw.insert.16", "raw INSERT, 16 threads (for single calls)"),
                std::move(raw));
    Row send_row = row("serve.http.send.16", "SendMessage (one message), 16 clients",
                       "serve.raw.insert.16");
    send_row.note = group_note(counters.send_groups.load() - send_groups,
                               counters.sends_grouped.load() - sends_grouped);
    report_.add(std::move(send_row), std::move(sent));
    Row delete_row = row("serve.http.delete.16", "DeleteMessage (one message), 16 clients",
                         "serve.raw.insert.16");
    delete_row.note = group_note(counters.delete_groups.load() - delete_groups,
                                 counters.deletes_grouped.load() - deletes_grouped);
    report_.add(std::move(delete_row), std::move(deleted));
    const int polls = options_.quick ? 200 : 1000;
    const LongPollFigures lp = hold_long_polls(srv.port(), url, options_.dsn, polls);
    Row held = row("serve.longpoll", fmt::format("{} long polls held (WaitTimeSeconds=20)", polls));
    held.note = fmt::format("threads {} -> {}, RSS {} -> {} MiB, {:.1f} statements/s while waiting, "
                            "a send woke one in {:.1f} ms",
                            lp.threads_before, lp.threads_during, lp.rss_kib_before / 1024,
                            lp.rss_kib_during / 1024, lp.statements_per_second, lp.wake_ms);
    report_.add_row(std::move(held));
    // The polls still wait on the server's side: stopping it answers them; then the queue goes
    // the way DeleteQueue would take it.
    srv.stop();
    drop_if_exists(client, topic);
    client.transact([&](Transaction& t) {
      t.execute("DELETE FROM txmq_sqs_queues WHERE name = ?", {name});
    });
  }

  // The SQL interface (src/catalog/routines.sql) as an application calls it, through the text
  // protocol (bench/sql.h), against the library doing the same in the same run (alternating
  // rounds) and against raw INSERTs. The topic is one partition in the client's own database
  // even when the others are spread: a CALL runs on the server it is sent to.
  void sql(Client& client) {
    report_.section("SQL interface: CALL txmq_send / txmq_send_batch / txmq_take + txmq_ack "
                    "against the library (alternating rounds)");
    const std::string topic = "txmq_bench_sql";
    const std::string orders = "txmq_bench_sql_orders";
    const std::string work = "txmq_bench_sql_work";
    const double round_seconds = sizes_.timed_seconds / sizes_.rounds;
    const auto times = [](const Measured& a, const Measured& b) {
      return b.rate() > 0 ? a.rate() / b.rate() : 0.0;
    };
    fresh_topic(client, topic);

    // 1. One message a call, autocommit, 4 producers: raw INSERT, library send, CALL txmq_send.
    // The topic's own procedure (txmq_send_to_<topic>) beside the general one.
    Measured raw;
    Measured lib;
    Measured sql;
    Measured sql_to;
    for (int r = 0; r < sizes_.rounds; ++r) {
      client.purge(topic);
      accumulate(raw, raw_insert(dsn_, 4, round_seconds, kSmall));
      accumulate(lib, send_rate(client, topic, 4, round_seconds, kSmall));
      accumulate(sql, sql_send_rate(dsn_, topic, 4, round_seconds, kSmall));
      accumulate(sql_to, sql_send_rate(dsn_, topic, 4, round_seconds, kSmall, SqlSend::kPerTopic));
    }
    Row sql_send = row("sql.send.4", "CALL txmq_send (autocommit), 4 threads", "sql.lib.send.4");
    sql_send.note = fmt::format("{:.2f}x raw INSERT, 4 threads", times(sql, raw));
    Row sql_send_to =
        row("sql.send_to.4", "CALL txmq_send_to_<topic> (autocommit), 4 thr.", "sql.lib.send.4");
    sql_send_to.note = fmt::format("{:.2f}x raw INSERT, 4 threads", times(sql_to, raw));
    report_.add(row("sql.raw.insert.4", "raw INSERT, 4 threads"), std::move(raw));
    Row lib_send = row("sql.lib.send.4", "library send, 4 threads", "sql.raw.insert.4");
    report_.add(std::move(lib_send), std::move(lib));
    report_.add(std::move(sql_send), std::move(sql));
    report_.add(std::move(sql_send_to), std::move(sql_to));

    // The same inside the application's transaction, with its business row.
    sql_business_table(dsn_, orders, true);
    Measured lib_tx;
    Measured sql_tx;
    Measured sql_to_tx;
    for (int r = 0; r < sizes_.rounds; ++r) {
      client.purge(topic);
      accumulate(lib_tx, library_send_in_transaction_rate(client, topic, orders, 4, round_seconds,
                                                          kSmall));
      accumulate(sql_tx, sql_send_in_transaction_rate(dsn_, topic, orders, 4, round_seconds,
                                                      kSmall));
      accumulate(sql_to_tx, sql_send_in_transaction_rate(dsn_, topic, orders, 4, round_seconds,
                                                         kSmall, SqlSend::kPerTopic));
    }
    report_.add(row("sql.lib.send_tx.4", "library: txn of INSERT + send, 4 threads"),
                std::move(lib_tx));
    report_.add(row("sql.send_tx.4", "START TRANSACTION; INSERT; CALL; COMMIT, 4 thr.",
                    "sql.lib.send_tx.4"),
                std::move(sql_tx));
    report_.add(row("sql.send_to_tx.4", "the same with CALL txmq_send_to_<topic>",
                    "sql.lib.send_tx.4"),
                std::move(sql_to_tx));
    sql_business_table(dsn_, orders, false);

    // Where a send's time goes: the server's counters per message, one thread (not alternated;
    // the rate is one connection's).
    client.purge(topic);
    {
      StatusDelta before(dsn_);
      Measured m = send_rate(client, topic, 1, 1.0, kSmall);
      Row r = row("sql.lib.send.1", "library send, 1 thread (counters per msg)");
      r.note = before.per_message(m.messages);
      report_.add(std::move(r), std::move(m));
    }
    {
      StatusDelta before(dsn_);
      Measured m = sql_send_rate(dsn_, topic, 1, 1.0, kSmall);
      Row r = row("sql.send.1", "CALL txmq_send, 1 thread (counters per msg)", "sql.lib.send.1");
      r.note = before.per_message(m.messages);
      report_.add(std::move(r), std::move(m));
    }

    // 2. Batches of 1,000: send_batch against CALL txmq_send_batch of a JSON array of strings,
    // with the raw multi-row INSERT of 1,000 rows per transaction beside them.
    Measured raw_batch;
    Measured lib_batch;
    Measured sql_batch;
    Measured sql_batch_to;
    std::string batch_counters;
    for (int r = 0; r < sizes_.rounds; ++r) {
      client.purge(topic);
      accumulate(raw_batch, raw_multirow(dsn_, sizes_.sql_batch_rows, 1000, kSmall));
      accumulate(lib_batch, send_batch_rate(client, topic, 1000, sizes_.sql_batch_rows, kSmall));
      client.purge(topic);
      StatusDelta before(dsn_);
      Measured m = sql_send_batch_rate(dsn_, topic, 1000, sizes_.sql_batch_rows, kSmall);
      if (r == 0) batch_counters = before.per_message(m.messages);
      accumulate(sql_batch, std::move(m));
      client.purge(topic);
      accumulate(sql_batch_to, sql_send_batch_rate(dsn_, topic, 1000, sizes_.sql_batch_rows, kSmall,
                                                   SqlSend::kPerTopic));
    }
    Row sql_batch_row = row("sql.send_batch.1000", "CALL txmq_send_batch of 1,000 strings",
                            "sql.lib.send_batch.1000");
    sql_batch_row.note = fmt::format("{:.2f}x raw multi-row INSERT; per msg: {}",
                                     times(sql_batch, raw_batch), batch_counters);
    Row sql_batch_to_row = row("sql.send_batch_to.1000", "CALL txmq_batch_to_<topic> of 1,000",
                               "sql.lib.send_batch.1000");
    sql_batch_to_row.note = fmt::format("{:.2f}x raw multi-row INSERT", times(sql_batch_to, raw_batch));
    report_.add(row("sql.raw.multirow", "raw multi-row INSERT, 1,000 rows/txn"),
                std::move(raw_batch));
    report_.add(row("sql.lib.send_batch.1000", "library send_batch of 1,000", "sql.raw.multirow"),
                std::move(lib_batch));
    report_.add(std::move(sql_batch_row), std::move(sql_batch));
    report_.add(std::move(sql_batch_to_row), std::move(sql_batch_to));

    // 3. Exactly-once drains of a backlog by 4 consumers, 100 a transaction, each writing one
    // row per message into a work table (one multi-row INSERT per batch): Client::process
    // against START TRANSACTION; CALL txmq_take; INSERT; CALL txmq_ack; COMMIT.
    Measured lib_drain;
    Measured sql_drain;
    std::string lib_counters;
    std::string sql_counters;
    std::uint64_t deadlocks = 0;
    std::string mismatch;
    const auto backlog = static_cast<std::uint64_t>(sizes_.sql_drain_backlog);
    for (int r = 0; r < sizes_.sql_drain_rounds; ++r) {
      fresh_topic(client, topic);
      fill(client, topic, sizes_.sql_drain_backlog, kSmall);
      reset_work_table(client, work);
      {
        StatusDelta before(dsn_);
        Measured m = drain_exactly_once(client, topic, 4, 100, backlog,
                                        sizes_.drain_cap_seconds, work);
        if (r == 0) lib_counters = before.per_message(m.messages);
        accumulate(lib_drain, std::move(m));
      }
      fresh_topic(client, topic);
      fill(client, topic, sizes_.sql_drain_backlog, kSmall);
      reset_work_table(client, work);
      {
        StatusDelta before(dsn_);
        std::uint64_t retries = 0;
        Measured m = sql_drain_exactly_once(dsn_, topic, 4, 100, backlog,
                                            sizes_.drain_cap_seconds, work, retries);
        if (r == 0) sql_counters = before.per_message(m.messages);
        deadlocks += retries;
        internal::Connection c(dsn_);
        const std::uint64_t done =
            c.execute(fmt::format("SELECT COUNT(*) FROM {}", work), {}).rows.at(0).u64(0);
        if (done != m.messages) {
          mismatch = fmt::format("; MISMATCH: {} work rows for {} messages", done, m.messages);
        }
        accumulate(sql_drain, std::move(m));
      }
    }
    reset_work_table(client, work, false);
    Row lib_drain_row = row("sql.lib.drain.4x100", "library process (exactly-once) 100, 4 cons.");
    lib_drain_row.note = "per msg: " + lib_counters;
    report_.add(std::move(lib_drain_row), std::move(lib_drain));
    Row sql_drain_row = row("sql.drain.4x100", "SQL take 100 + INSERT + ack + COMMIT, 4 cons.",
                            "sql.lib.drain.4x100");
    sql_drain_row.note = fmt::format("{} deadlocks retried{}; per msg: {}", deadlocks, mismatch,
                                     sql_counters);
    report_.add(std::move(sql_drain_row), std::move(sql_drain));
    drop_if_exists(client, topic);

    // 4. Wake-up: a library consumer in another process waits (receive, 20 s wait) while a
    // transaction sends one message, holds 50 ms and commits; from the COMMIT's return to the
    // receipt. The library's own transaction first, then the SQL one.
    const std::string wake_topic = "txmq_bench_sql_wake";
    constexpr auto kHold = std::chrono::milliseconds(50);
    fresh_topic(client, wake_topic);
    Row lib_wake = row("sql.lib.wake", "library txn: send, 50 ms, commit -> receipt");
    lib_wake.note = "rate: sends per second, 50 ms in each transaction, 20-60 ms gaps";
    report_.add(std::move(lib_wake),
                wake_after_commit_latency(options_.dsn, sizes_.sql_wake_samples, wake_topic, [&] {
                  Transaction tx = client.begin();
                  const std::uint64_t id = tx.send(wake_topic, "wake");
                  std::this_thread::sleep_for(kHold);
                  tx.commit();
                  return std::pair<std::uint64_t, std::int64_t>(id, monotonic_ns());
                }));
    fresh_topic(client, wake_topic);
    internal::Connection producer(dsn_);
    const std::string call = fmt::format("CALL txmq_send('{}', X'77616B65', NULL)", wake_topic);
    Row sql_wake = row("sql.wake", "START TRANSACTION; CALL; 50 ms; COMMIT -> receipt");
    sql_wake.note = "rate: sends per second, 50 ms in each transaction, 20-60 ms gaps";
    report_.add(std::move(sql_wake),
                wake_after_commit_latency(options_.dsn, sizes_.sql_wake_samples, wake_topic, [&] {
                  producer.query("START TRANSACTION");
                  const internal::Result r = producer.query_rows(call);
                  std::this_thread::sleep_for(kHold);
                  producer.query("COMMIT");
                  return std::pair<std::uint64_t, std::int64_t>(r.rows.at(0).u64(0),
                                                                monotonic_ns());
                }));

    // 5. A SQL consumer that waits (txmq_take_wait, 20 s) is woken by the library's send and by
    // txmq_send's COMMIT; from the COMMIT's return to the CALL's.
    for (const bool through_sql : {false, true}) {
      fresh_topic(client, wake_topic);
      int interrupted = 0;
      double idle = 0;
      Measured m = sql_take_wait_latency(
          options_.dsn, sizes_.sql_wake_samples, wake_topic,
          [&] {
            if (!through_sql) {
              const std::uint64_t id = client.send(wake_topic, "wake");
              return std::pair<std::uint64_t, std::int64_t>(id, monotonic_ns());
            }
            producer.query("START TRANSACTION");
            const internal::Result r = producer.query_rows(call);
            std::this_thread::sleep_for(kHold);
            producer.query("COMMIT");
            return std::pair<std::uint64_t, std::int64_t>(r.rows.at(0).u64(0), monotonic_ns());
          },
          interrupted, idle);
      Row take = through_sql ? row("sql.take_wait", "txmq_take_wait <- txn: CALL; 50 ms; COMMIT")
                             : row("sql.take_wait.lib", "txmq_take_wait <- library send");
      take.note = fmt::format("COMMIT -> CALL returns; {} CALLs ended by a wake-up (1317); idle: "
                              "{:.1f} statements/s",
                              interrupted, idle);
      report_.add(std::move(take), std::move(m));
    }
    drop_if_exists(client, wake_topic);
  }

  // The bench's topics: spread over --servers with --partitions, else the defaults.
  bool spread() const { return topic_options_.partitions > 1 || !topic_options_.servers.empty(); }
  void fresh(Client& client, const std::string& topic) {
    fresh_topic(client, topic, topic_options_);
  }
  // A backlog, in batches small enough to reach every partition (each batch goes whole to one)
  // when the topic is spread.
  void fill_topic(Client& client, const std::string& topic, int count, std::size_t payload) {
    fill(client, topic, count, payload, spread() ? 500 : 10000);
  }

  bool wanted(const std::string& section) const {
    const bool named = std::find(options_.sections.begin(), options_.sections.end(), section) !=
                       options_.sections.end();
    if (std::find(kNamedOnly.begin(), kNamedOnly.end(), section) != kNamedOnly.end()) {
      return named;
    }
    return options_.sections.empty() || named;
  }

  // Sends and their raw references, measured in alternating rounds so that a drift of the
  // machine's disk or CPU during the run weighs on both sides alike.
  void sends(Client& client) {
    report_.section("Sends against the raw INSERT limit (alternating rounds, autocommit)");
    const std::string topic = "txmq_bench_send";
    struct Pair {
      int threads;
      std::size_t payload;
      std::string suffix;
      std::string label;
    };
    const std::vector<Pair> pairs = {{1, kSmall, "1", "1 thread"},
                                     {4, kSmall, "4", "4 threads"},
                                     {16, kSmall, "16", "16 threads"},
                                     {4, kLarge, "4.4k", "4 threads, 4 KiB"}};
    const double round_seconds = sizes_.timed_seconds / sizes_.rounds;
    for (const Pair& p : pairs) {
      fresh(client, topic);
      Measured raw;
      Measured ours;
      for (int r = 0; r < sizes_.rounds; ++r) {
        accumulate(raw, raw_insert(dsn_, p.threads, round_seconds, p.payload));
        accumulate(ours, send_rate(client, topic, p.threads, round_seconds, p.payload));
      }
      report_.add(row("raw.insert." + p.suffix, "raw INSERT, " + p.label), std::move(raw));
      report_.add(row("send." + p.suffix, "send, " + p.label, "raw.insert." + p.suffix),
                  std::move(ours));
    }
    drop_if_exists(client, topic);
  }

  void batches(Client& client) {
    report_.section("send_batch against raw multi-row INSERTs of 1,000 rows per transaction "
                    "(alternating rounds)");
    const std::string topic = "txmq_bench_batch";
    struct Case {
      int size;
      std::size_t payload;
      std::string id;
      std::string name;
      std::string basis;
    };
    const std::vector<Case> cases = {
        {100, kSmall, "batch.100", "send_batch of 100", "raw.multirow"},
        {1000, kSmall, "batch.1000", "send_batch of 1,000", "raw.multirow"},
        {10000, kSmall, "batch.10000", "send_batch of 10,000", "raw.multirow"},
        {1000, kLarge, "batch.1000.4k", "send_batch of 1,000, 4 KiB", "raw.multirow.4k"}};
    Measured raw_small;
    Measured raw_large;
    std::vector<Measured> ours(cases.size());
    const int rows = sizes_.multirow_rows / sizes_.rounds;
    for (int r = 0; r < sizes_.rounds; ++r) {
      accumulate(raw_small, raw_multirow(dsn_, rows, 1000, kSmall));
      accumulate(raw_large, raw_multirow(dsn_, rows / 4, 1000, kLarge));
      for (std::size_t i = 0; i < cases.size(); ++i) {
        fresh(client, topic);
        // At least 5 batches a round: --quick's rows made one batch of 10,000 a round, whose
        // time says little.
        const int n = std::max(cases[i].payload == kLarge ? rows / 4 : rows, 5 * cases[i].size);
        accumulate(ours[i], send_batch_rate(client, topic, cases[i].size, n, cases[i].payload));
      }
    }
    report_.add(row("raw.multirow", "raw multi-row INSERT, 1,000 rows/txn"), std::move(raw_small));
    report_.add(row("raw.multirow.4k", "raw multi-row INSERT, 1,000 rows/txn, 4 KiB"),
                std::move(raw_large));
    for (std::size_t i = 0; i < cases.size(); ++i) {
      report_.add(row(cases[i].id, cases[i].name, cases[i].basis), std::move(ours[i]));
    }
    if (spread()) {
      // One thread sends one batch at a time, to one server at a time: what several servers
      // can add to batches shows with several threads.
      for (int size : {100, 1000}) {
        fresh(client, topic);
        report_.add(row(fmt::format("batch.{}.4t", size),
                        fmt::format("send_batch of {}, 4 threads", with_commas(size)),
                        "raw.multirow"),
                    library_send_batch_rate(client, topic, 4, size, sizes_.timed_seconds / 2,
                                            kSmall));
      }
    }
    drop_if_exists(client, topic);
  }

  void seed() {
    report_.section("The seed's claim (UPDATE ... SET owner LIMIT 10; SELECT; DELETE)");
    for (int consumers : {1, 4, 8}) {
      seed_fill(dsn_, sizes_.drain_backlog, kSmall);
      report_.add(row(fmt::format("seed.drain.{}", consumers),
                   fmt::format("seed drain {}k, {} consumer{}", sizes_.drain_backlog / 1000,
                               consumers, consumers == 1 ? "" : "s"), "raw.insert.4"),
                  seed_drain(dsn_, consumers, sizes_.drain_cap_seconds));
    }
    seed_fill(dsn_, sizes_.seed_deep_backlog, kSmall);
    report_.add(row("seed.drain.4.deep",
                 fmt::format("seed drain at {}k backlog, 4 consumers",
                             sizes_.seed_deep_backlog / 1000), "seed.drain.4"),
                seed_drain(dsn_, 4, sizes_.seed_deep_seconds));
  }

  // The exactly-once handler's business table: in the client's database, and on a spread topic
  // in every server's (a handler's statements run on the server of the messages' partition).
  // `create` false: only dropped.
  void reset_work_table(Client& client, const std::string& table, bool create = true) {
    client.transact([&](Transaction& tx) {
      tx.execute(fmt::format("DROP TABLE IF EXISTS {}", table));
      if (create) {
        tx.execute(fmt::format(
            "CREATE TABLE {} (msg_id BIGINT UNSIGNED PRIMARY KEY) ENGINE=InnoDB", table));
      }
    });
    if (topic_options_.servers.empty()) return;
    for (const ServerInfo& server : client.list_servers()) {
      if (std::find(topic_options_.servers.begin(), topic_options_.servers.end(), server.name) ==
          topic_options_.servers.end()) {
        continue;
      }
      internal::Connection c(internal::parse_dsn(server.dsn));
      c.query(fmt::format("DROP TABLE IF EXISTS {}", table));
      if (create) {
        c.query(fmt::format("CREATE TABLE {} (msg_id BIGINT UNSIGNED PRIMARY KEY) ENGINE=InnoDB",
                            table));
      }
    }
  }

  // Each drain is preceded by a short raw INSERT run at 4 threads; their sum is the basis the
  // drains are compared with, measured alongside them rather than minutes earlier.
  void drains(Client& client) {
    report_.section(fmt::format("Drain of a {}k backlog: leased receive + ack, and exactly-once",
                                sizes_.drain_backlog / 1000));
    const std::string topic = "txmq_bench_drain";
    enum class Mode { kLeased, kRiding, kWorker, kWorkerGrouped, kWorkerLeased, kWorkerSlow,
                      kWorkerSlowLeased, kExactlyOnce, kExactlyOnceWithWork, kExactlyOnceXa };
    struct Case {
      int consumers;
      int batch;
      std::size_t payload;
      Mode mode = Mode::kLeased;
    };
    std::vector<Case> cases;
    for (int batch : {1, 10, 100}) {
      for (int consumers : {1, 4, 8}) cases.push_back({consumers, batch, kSmall});
    }
    cases.push_back({4, 100, kLarge});
    // Each batch's acknowledgements riding in the next claim's transaction
    // (Client::ack_and_receive), against receive + ack of the same batch.
    for (int batch : {1, 10, 100}) cases.push_back({batch == 1 ? 1 : 4, batch, kSmall, Mode::kRiding});
    // A Worker whose handler takes one message at a time: leasing 1 and acknowledging each (as
    // receive 1 + ack), then leasing 100 ahead and acknowledging 100 at a time (WorkerOptions),
    // each against the receive + ack of its batch size.
    cases.push_back({1, 1, kSmall, Mode::kWorker});
    cases.push_back({1, 100, kSmall, Mode::kWorkerGrouped});
    cases.push_back({4, 100, kSmall, Mode::kWorkerGrouped});
    // The same Worker with every claim leased (hold_up_to 0, as before held batches), and both
    // forms with handlers of 20 ms (4 threads, batch 10: each batch held 200 ms).
    cases.push_back({4, 100, kSmall, Mode::kWorkerLeased});
    cases.push_back({4, 10, kSmall, Mode::kWorkerSlow});
    cases.push_back({4, 10, kSmall, Mode::kWorkerSlowLeased});
    // Exactly-once: one transaction (one commit) per batch instead of a claim and an ack.
    for (int batch : {10, 100}) cases.push_back({4, batch, kSmall, Mode::kExactlyOnce});
    cases.push_back({1, 100, kSmall, Mode::kExactlyOnce});
    cases.push_back({8, 100, kSmall, Mode::kExactlyOnce});
    cases.push_back({4, 100, kSmall, Mode::kExactlyOnceWithWork});
    // The same work in a second database B (Client::process_xa): B prepares, the queue commits
    // (the decision), B commits; compared with the row above.
    cases.push_back({4, 100, kSmall, Mode::kExactlyOnceXa});
    const std::string work_table = "txmq_bench_work";
    Measured raw;
    std::vector<Row> rows;
    std::vector<std::optional<Measured>> measured;
    // Rounds of every case in turn, as the other sections: a drain of the backlog at 4 x 100
    // lasts a tenth of a second, and one such run scatters by tens of percent.
    for (int round = 0; round < sizes_.rounds; ++round) {
      std::vector<Row> round_rows;
      std::vector<std::optional<Measured>> round_measured;
      for (const Case& k : cases) {
        const auto limit = static_cast<std::uint64_t>(sizes_.drain_backlog);
        const std::string consumers_text =
            fmt::format("{} consumer{}", k.consumers, k.consumers == 1 ? "" : "s");
        if (k.mode == Mode::kExactlyOnceXa) {
          Row r = row(fmt::format("drain.exactly_once_xa.{}x{}", k.consumers, k.batch),
                      fmt::format("exactly-once XA {}, {}, INSERTs in B", k.batch, consumers_text),
                      fmt::format("drain.exactly_once.{}x{}.work", k.consumers, k.batch));
          const XaServer& b = xa_server();
          if (b.dsn.empty()) {
            r.note = "skipped: " + b.reason;
            r.basis.clear();
            round_rows.push_back(std::move(r));
            round_measured.emplace_back();
            continue;
          }
          accumulate(raw, raw_insert(dsn_, 4, sizes_.drain_basis_seconds, kSmall));
          fresh(client, topic);
          fill_topic(client, topic, sizes_.drain_backlog, k.payload);
          round_measured.push_back(
              drain_xa(client, topic, b, k.consumers, k.batch, limit, work_table, r.note));
          round_rows.push_back(std::move(r));
          continue;
        }
        accumulate(raw, raw_insert(dsn_, 4, sizes_.drain_basis_seconds, kSmall));
        fresh(client, topic);
        fill_topic(client, topic, sizes_.drain_backlog, k.payload);
        if (k.mode == Mode::kLeased) {
          round_rows.push_back(row(fmt::format("drain.leased.{}x{}{}", k.consumers, k.batch,
                                               k.payload == kLarge ? ".4k" : ""),
                                   fmt::format("receive {} + ack, {}{}", k.batch, consumers_text,
                                               k.payload == kLarge ? ", 4 KiB" : ""),
                                   "raw.insert.4.drains"));
          round_measured.push_back(
              drain(client, topic, k.consumers, k.batch, limit, sizes_.drain_cap_seconds));
          continue;
        }
        if (k.mode == Mode::kRiding) {
          round_rows.push_back(
              row(fmt::format("drain.riding.{}x{}", k.consumers, k.batch),
                  fmt::format("ack riding receive {}, {}", k.batch, consumers_text),
                  fmt::format("drain.leased.{}x{}", k.consumers, k.batch)));
          round_measured.push_back(
              drain(client, topic, k.consumers, k.batch, limit, sizes_.drain_cap_seconds, true));
          continue;
        }
        if (k.mode == Mode::kWorker || k.mode == Mode::kWorkerGrouped) {
          const bool grouped = k.mode == Mode::kWorkerGrouped;
          const int ack_every = grouped ? k.batch : 1;
          round_rows.push_back(row(
              fmt::format("drain.worker.{}x{}{}", k.consumers, k.batch, grouped ? ".grouped" : ""),
              fmt::format("Worker, {} thread{}, batch {}, ack every {}", k.consumers,
                          k.consumers == 1 ? "" : "s", k.batch, ack_every),
              // Against the receive + ack of the same batch: how near a
              // one-message handler gets to the batched rate.
              fmt::format("drain.leased.{}x{}", k.consumers, k.batch)));
          round_measured.push_back(drain_worker(client, topic, k.consumers, k.batch, ack_every,
                                                limit, sizes_.drain_cap_seconds));
          continue;
        }
        if (k.mode == Mode::kWorkerLeased) {
          round_rows.push_back(
              row(fmt::format("drain.worker.{}x{}.leased", k.consumers, k.batch),
                  fmt::format("Worker, {} threads, batch {}, ack every {}, hold_up_to 0",
                              k.consumers, k.batch, k.batch),
                  fmt::format("drain.worker.{}x{}.grouped", k.consumers, k.batch)));
          round_measured.push_back(drain_worker(client, topic, k.consumers, k.batch, k.batch,
                                                limit, sizes_.drain_cap_seconds, Micros{0}));
          continue;
        }
        if (k.mode == Mode::kWorkerSlow || k.mode == Mode::kWorkerSlowLeased) {
          // 20 ms a message: 4 threads take 200 a second, so a few seconds' worth, not the
          // whole backlog.
          const bool held = k.mode == Mode::kWorkerSlow;
          const auto slow_limit = static_cast<std::uint64_t>(std::min(800, sizes_.drain_backlog));
          round_rows.push_back(row(
              fmt::format("drain.worker.{}x{}.20ms{}", k.consumers, k.batch, held ? "" : ".leased"),
              fmt::format("Worker, {} threads, batch {}, 20 ms handlers{}", k.consumers, k.batch,
                          held ? "" : ", hold_up_to 0"),
              held ? fmt::format("drain.worker.{}x{}.20ms.leased", k.consumers, k.batch)
                   : std::string()));
          round_measured.push_back(drain_worker(
              client, topic, k.consumers, k.batch, 1, slow_limit, sizes_.drain_cap_seconds,
              held ? Micros(std::chrono::seconds(1)) : Micros{0}, std::chrono::milliseconds(20)));
          continue;
        }
        const bool work = k.mode == Mode::kExactlyOnceWithWork;
        if (work) reset_work_table(client, work_table);
        round_rows.push_back(row(
            fmt::format("drain.exactly_once.{}x{}{}", k.consumers, k.batch, work ? ".work" : ""),
            fmt::format("exactly-once {}, {}{}", k.batch, consumers_text,
                        work ? ", handler INSERTs a row each" : ""),
            "raw.insert.4.drains"));
        round_measured.push_back(drain_exactly_once(client, topic, k.consumers, k.batch, limit,
                                                    sizes_.drain_cap_seconds,
                                                    work ? work_table : ""));
      }
      if (round == 0) {
        rows = std::move(round_rows);
        measured = std::move(round_measured);
        continue;
      }
      for (std::size_t i = 0; i < measured.size(); ++i) {
        if (measured[i] && round_measured[i])
          accumulate(*measured[i], std::move(*round_measured[i]));
      }
    }
    report_.add(row("raw.insert.4.drains", "raw INSERT, 4 threads, between the drains"),
                std::move(raw));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (measured[i]) {
        report_.add(std::move(rows[i]), std::move(*measured[i]));
      } else {
        report_.add_row(std::move(rows[i]));
      }
    }
    drop_if_exists(client, topic);
    reset_work_table(client, work_table, false);
  }

  // The second database of drain.exactly_once_xa: --xa-dsn, else a private server in xa_home
  // (started on first use, stopped when the bench ends): txmq's local server, or with
  // --server NAME one of scripts/server NAME; else none, with the reason.
  struct XaServer {
    std::string dsn;
    std::string home;    // the bench's own server: stopped at the end
    std::string reason;  // why there is none
    std::unique_ptr<ScriptServer> script;  // --server NAME: stopped at the end if started here
    XaServer() = default;
    XaServer(const XaServer&) = delete;
    XaServer& operator=(const XaServer&) = delete;
    ~XaServer() {
      if (home.empty() || script) return;
      try {
        LocalServer::stop({home});
      } catch (const std::exception&) {
      }
    }
  };

  const XaServer& xa_server() {
    if (xa_) return *xa_;
    xa_ = std::make_unique<XaServer>();
    if (!options_.xa_dsn.empty()) {
      xa_->dsn = options_.xa_dsn;
    } else if (!options_.xa_home.empty() && !options_.xa_server_name.empty()) {
      std::fprintf(stderr, "bench: starting a second private %s in %s for the XA row\n",
                   options_.xa_server_name.c_str(), options_.xa_home.c_str());
      try {
        xa_->home = options_.xa_home;
        xa_->script = std::make_unique<ScriptServer>(
            options_.xa_server_script, options_.xa_server_name, options_.xa_home, false);
        xa_->dsn = xa_->script->start();
      } catch (const std::exception& e) {
        xa_->reason = fmt::format("no second server: starting {} in {} failed: {}",
                                  options_.xa_server_name, options_.xa_home, e.what());
      }
    } else if (!options_.xa_home.empty()) {
      std::fprintf(stderr, "bench: starting a second private server in %s for the XA row\n",
                   options_.xa_home.c_str());
      try {
        xa_->home = options_.xa_home;  // stopped at the end even if the start fails half-way
        xa_->dsn = LocalServer::ensure_running({options_.xa_home});
      } catch (const Error& e) {
        xa_->reason = fmt::format("no second server: starting one in {} failed: {}",
                                  options_.xa_home, e.what());
      }
    } else {
      xa_->reason =
          "no second server: the bench runs on a given --dsn or TXMQ_DSN; name one with --xa-dsn";
    }
    return *xa_;
  }

  // The XA drain: the work table in B, made fresh; B's recovery pass before the clock starts (a
  // consumer's first process_xa runs one; here it is not timed); afterwards the rows in B are
  // counted against the messages processed, and a last pass leaves no decision record behind.
  // `note` gets what B is and what the checks found.
  Measured drain_xa(Client& client, const std::string& topic, const XaServer& b, int consumers,
                    int batch, std::uint64_t limit, const std::string& work_table,
                    std::string& note) {
    const XaResource resource{"txmq_bench", b.dsn};
    const internal::Dsn dsn = internal::parse_dsn(b.dsn);
    {
      internal::Connection c(dsn);
      c.query(fmt::format("DROP TABLE IF EXISTS {}", work_table));
      c.query(fmt::format("CREATE TABLE {} (msg_id BIGINT UNSIGNED PRIMARY KEY) ENGINE=InnoDB",
                          work_table));
      const internal::Result r = c.execute(
          "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog", {});
      const internal::Row& v = r.rows.at(0);
      const bool durable = v.i64(1) == 1 && (v.i64(2) == 0 || v.i64(3) == 1);
      note = fmt::format("B: {} {}, {}{}", b.home.empty() ? "--xa-dsn" : "2nd private server",
                         v.bytes(0), durable ? "durable" : "NOT DURABLE",
                         v.i64(2) != 0 ? ", binlog ON" : "");
    }
    client.recover_xa(resource);
    Measured m = drain_exactly_once_xa(client, topic, resource, consumers, batch, limit,
                                       sizes_.drain_cap_seconds, work_table);
    const XaRecovery after = client.recover_xa(resource);
    internal::Connection c(dsn);
    const std::uint64_t in_b =
        c.execute(fmt::format("SELECT COUNT(*) FROM {}", work_table), {}).rows.at(0).u64(0);
    c.query(fmt::format("DROP TABLE IF EXISTS {}", work_table));
    if (in_b != m.messages) {
      note += fmt::format("; MISMATCH: {} rows in B for {} messages", in_b, m.messages);
    }
    if (after.committed + after.rolled_back + after.live > 0) {
      note += fmt::format("; left in doubt: {} committed, {} rolled back, {} live by recovery",
                          after.committed, after.rolled_back, after.live);
    }
    return m;
  }

  void e2e(Client& producers, Client& consumers) {
    report_.section("4 producers + 4 consumers at once, 1,000 msgs/s offered (latency: send to receipt)");
    const std::string topic = "txmq_bench_e2e";
    fresh(producers, topic);
    report_.add(row("e2e.4+4", "4 producers + 4 consumers, 1,000/s"),
                end_to_end(producers, consumers, topic, 4, 4, 1000, sizes_.e2e_seconds));
    drop_if_exists(producers, topic);
  }

  void depth(Client& client) {
    report_.section("Drain rate against backlog depth (receive 100 + ack, 4 consumers)");
    const std::string topic = "txmq_bench_depth";
    for (int depth : sizes_.depths) {
      fresh(client, topic);
      fill_topic(client, topic, depth, kSmall);
      Measured total;
      for (int round = 0; round < sizes_.depth_rounds; ++round) {
        Measured m = drain(client, topic, 4, 100, static_cast<std::uint64_t>(sizes_.depth_round),
                           sizes_.drain_cap_seconds);
        const auto drained = static_cast<int>(m.messages);
        accumulate(total, std::move(m));
        fill_topic(client, topic, drained, kSmall);  // back to depth
      }
      const std::string label = depth >= 1000000 ? fmt::format("{}M", depth / 1000000)
                                                 : fmt::format("{}k", depth / 1000);
      report_.add(row(fmt::format("depth.{}", depth), fmt::format("drain at a {} backlog", label),
                      "depth.10000"),
                  std::move(total));
    }
    drop_if_exists(client, topic);
  }

  void claim(Client& client) {
    if (spread()) return claim_spread(client);
    report_.section("Claim latency: receive of 1 message (then ack, not timed)");
    const std::string topic = "txmq_bench_claim";
    constexpr int kInFlight = 10000;
    fresh(client, topic);
    fill(client, topic, kInFlight + 2 * sizes_.claim_samples, kSmall);
    report_.add(row("claim.idle", "claim, nothing in flight"),
                claim_latency(client, topic, sizes_.claim_samples, 0));
    Row inflight = row("claim.inflight", "claim, 10,000 in flight", "claim.idle");
    inflight.latency_ratio = true;
    report_.add(std::move(inflight),
                claim_latency(client, topic, sizes_.claim_samples, kInFlight));
    drop_if_exists(client, topic);
  }

  // On a spread topic: a receive of 1 and of 10 from a backlog spread over every partition, and a
  // receive (no wait) of an empty topic, which asks every partition, on every server, in vain.
  void claim_spread(Client& client) {
    report_.section(fmt::format(
        "Claim latency on a topic of {} partitions{}: receive of 1 and 10 (then ack, not timed), "
        "and of nothing",
        topic_options_.partitions, servers_text()));
    const std::string topic = "txmq_bench_claim";
    const int samples = sizes_.claim_samples;
    fresh(client, topic);
    // 11 messages a sample and a half again, so that no partition runs dry before the end.
    fill_topic(client, topic, samples * 11 * 3 / 2, kSmall);
    report_.add(row("claim.backlog.1", "receive 1 of a backlog"),
                receive_latency(client, topic, samples, 1));
    report_.add(row("claim.backlog.10", "receive 10 of a backlog"),
                receive_latency(client, topic, samples, 10));
    fresh(client, topic);
    Row empty = row("claim.empty", "receive of an empty topic, no wait");
    empty.note = "rate: receives per second";
    report_.add(std::move(empty), empty_receive_latency(client, topic, samples));
    drop_if_exists(client, topic);
  }

  std::string servers_text() const {
    if (topic_options_.servers.empty()) return "";
    std::string names;
    for (const std::string& s : topic_options_.servers) names += (names.empty() ? "" : ", ") + s;
    return fmt::format(" on {} server{} ({})", topic_options_.servers.size(),
                       topic_options_.servers.size() == 1 ? "" : "s", names);
  }

  // What partitions buy on one server: send() from 8 producer threads, and a drain by 8
  // consumers (receive 100 + ack) of a backlog, for 1, 4 and 16 partitions. Ratios are to P = 1.
  void partitions(Client& client) {
    report_.section("Partitions: 8 producers (send), then 8 consumers (receive 100 + ack)");
    const std::string topic = "txmq_bench_partitions";
    const int backlog = options_.quick ? 20000 : 100000;
    for (int p : {1, 4, 16}) {
      TopicOptions options;
      options.partitions = p;
      options.servers = options_.servers;
      drop_if_exists(client, topic);
      client.create_topic(topic, options);
      report_.add(row(fmt::format("partitions.send.{}", p),
                      fmt::format("send, 8 producers, {} partition{}", p, p == 1 ? "" : "s"),
                      p == 1 ? "" : "partitions.send.1"),
                  send_rate(client, topic, 8, sizes_.timed_seconds, kSmall));
      drop_if_exists(client, topic);
      client.create_topic(topic, options);
      // Batches of 500: each batch goes to one partition, so the backlog spreads over all.
      for (int done = 0; done < backlog; done += 500) fill(client, topic, 500, kSmall);
      report_.add(row(fmt::format("partitions.drain.{}", p),
                      fmt::format("drain {}k, 8 consumers, {} partition{}", backlog / 1000, p,
                                  p == 1 ? "" : "s"),
                      p == 1 ? "" : "partitions.drain.1"),
                  drain(client, topic, 8, 100, static_cast<std::uint64_t>(backlog),
                        sizes_.drain_cap_seconds * 4));
    }
    drop_if_exists(client, topic);
  }

  // Keyed FIFO at 100,000 keys: claims see only each key's head, so draining keyed messages
  // should cost about what draining unkeyed ones does, apart from the keys' own bookkeeping.
  void keys(Client& client) {
    const int keys = options_.quick ? 20000 : 100000;
    report_.section(fmt::format(
        "Keyed FIFO: drain (receive 100 + ack, 4 consumers) with {} keys", with_commas(keys)));
    const std::string topic = "txmq_bench_keys";
    auto fill_keyed = [&](bool keyed) {
      fresh(client, topic);
      std::vector<OutgoingMessage> batch;
      for (int round = 0; round < 2; ++round) {  // two messages per key: one waits behind
        for (int k = 0; k < keys; ++k) {
          OutgoingMessage m;
          m.payload = std::string(kSmall, 'k');
          if (keyed) m.key = fmt::format("key{}", k);
          batch.push_back(std::move(m));
          if (batch.size() == 5000) {
            client.send_batch(topic, batch);
            batch.clear();
          }
        }
      }
      if (!batch.empty()) client.send_batch(topic, batch);
    };
    fill_keyed(false);
    report_.add(row("keys.none", fmt::format("drain {} unkeyed messages", 2 * keys)),
                drain(client, topic, 4, 100, static_cast<std::uint64_t>(2 * keys),
                             sizes_.drain_cap_seconds * 4));
    fill_keyed(true);
    report_.add(row("keys.100k", fmt::format("drain {} messages of {} keys", 2 * keys, keys),
                    "keys.none"),
                drain(client, topic, 4, 100, static_cast<std::uint64_t>(2 * keys),
                             sizes_.drain_cap_seconds * 4));
    drop_if_exists(client, topic);
  }

  void wake(Client& client) {
    report_.section("Long polling: a send to a consumer waiting in another process");
    const std::string topic = "txmq_bench_wake";
    fresh(client, topic);
    Row r = row("wake.1", "wake-up: send to receipt, other process");
    r.note = "rate: sends per second, with 20-60 ms idle gaps";
    report_.add(std::move(r), wake_latency(options_.dsn, client, topic, sizes_.wake_samples));
    drop_if_exists(client, topic);
  }

  void idle(Client& client) {
    report_.section("Long polling: statements per second while consumers wait on an empty topic "
                    "(the rate column)");
    const std::string topic = "txmq_bench_idle";
    struct Config {
      int processes;
      int threads;
      double wait;
      std::string id;
      std::string name;
    };
    std::vector<Config> configs = {
        {16, 1, 1, "idle.16p.1s", "16 consumer processes, receive wait 1 s"}};
    if (sizes_.idle_all) {
      configs.push_back({16, 1, 20, "idle.16p.20s", "16 consumer processes, receive wait 20 s"});
      configs.push_back({1, 16, 1, "idle.16t.1s", "16 threads in 1 process, receive wait 1 s"});
    }
    for (const Config& c : configs) {
      fresh(client, topic);
      Row r = row(c.id, c.name);
      r.rate = idle_statements_per_second(options_.dsn, topic, c.processes, c.threads, c.wait,
                                          sizes_.idle_window);
      r.seconds = sizes_.idle_window;
      r.note = "statements/s on the server (SHOW GLOBAL STATUS Questions)";
      report_.add_row(std::move(r));
    }
    drop_if_exists(client, topic);
  }

  static std::vector<Target> targets() {
    using K = Target::Kind;
    return {
        {"send.4", "raw.insert.4", K::kRateAtLeast, 0.95},
        {"serve.http.batch10.4", "serve.lib.batch10.4", K::kRateAtLeast, 0.6},
        {"serve.http.batch10.16", "serve.lib.batch10.16", K::kRateAtLeast, 0.6},
        {"serve.http.drain10.4", "serve.lib.drain10.4", K::kRateAtLeast, 0.6},
        {"serve.http.drain10.16", "serve.lib.drain10.16", K::kRateAtLeast, 0.6},
        {"serve.http.send.16", "serve.raw.insert.16", K::kRateAtLeast, 0.9},
        {"serve.http.delete.16", "serve.raw.insert.16", K::kRateAtLeast, 0.9},
        {"send.16", "raw.insert.16", K::kRateAtLeast, 0.95},
        {"batch.10000", "raw.multirow", K::kRateAtLeast, 0.9},
        {"keys.100k", "keys.none", K::kRateAtLeast, 0.7},
        // 1.5x what PGMQ 1.5's read + delete reaches against raw INSERT on the same machine
        // (2.09x and 7.93x; docs/benchmarks.md), for receive + ack and for acknowledgements
        // riding the next claim; the Worker's one-message handler 1.5x receive 100 + ack.
        {"drain.leased.4x10", "raw.insert.4.drains", K::kRateAtLeast, 3.1},
        {"drain.leased.4x100", "raw.insert.4.drains", K::kRateAtLeast, 11.9},
        {"drain.riding.4x10", "raw.insert.4.drains", K::kRateAtLeast, 3.1},
        {"drain.riding.4x100", "raw.insert.4.drains", K::kRateAtLeast, 11.9},
        {"drain.worker.4x100.grouped", "drain.leased.4x100", K::kRateAtLeast, 1.5},
        // Held batches (issue 53): the Worker at the one-transaction drain's speed, and no slower
        // than leased batches with handlers of 20 ms.
        {"drain.worker.4x100.grouped", "drain.exactly_once.4x100", K::kRateAtLeast, 0.9},
        {"drain.worker.4x10.20ms", "drain.worker.4x10.20ms.leased", K::kRateAtLeast, 0.95},
        {"drain.leased.4x100", "seed.drain.4", K::kRateAtLeast, 10},
        {"drain.exactly_once.4x100", "raw.insert.4.drains", K::kRateAtLeast, 7.5},
        // One commit per batch instead of two: exactly-once should not cost throughput.
        {"drain.exactly_once.4x100", "drain.leased.4x100", K::kRateAtLeast, 1.0},
        {"depth.1000000", "depth.10000", K::kRateAtLeast, 0.8},
        {"claim.inflight", "claim.idle", K::kP50RatioAtMost, 1.5},
        {"e2e.4+4", "", K::kP99AtMostMs, 20},
        {"wake.1", "", K::kP50AtMostMs, 10},
        {"wake.1", "", K::kP99AtMostMs, 50},
        {"idle.16p.1s", "", K::kRateAtMost, 50},
        {"idle.16p.20s", "", K::kRateAtMost, 50},
        {"idle.16t.1s", "", K::kRateAtMost, 50},
        {"sql.send_to.4", "sql.lib.send.4", K::kRateAtLeast, 0.8},
        {"sql.send_to.4", "sql.raw.insert.4", K::kRateAtLeast, 0.75},
        {"sql.send_to_tx.4", "sql.lib.send_tx.4", K::kRateAtLeast, 0.9},
        {"sql.send_batch_to.1000", "sql.lib.send_batch.1000", K::kRateAtLeast, 0.5},
        {"sql.drain.4x100", "sql.lib.drain.4x100", K::kRateAtLeast, 0.7},
        {"sql.wake", "", K::kP50AtMostMs, 50},
        {"sql.wake", "", K::kP99AtMostMs, 250},
        {"sql.take_wait", "", K::kP50AtMostMs, 10},
        {"sql.take_wait", "", K::kP99AtMostMs, 50},
        {"sql.take_wait.lib", "", K::kP50AtMostMs, 10},
        {"sql.take_wait.lib", "", K::kP99AtMostMs, 50},
        {"queues.create", "", K::kP50AtMostMs, 20},
        {"queues.metrics", "", K::kP50AtMostMs, 1000},
        // Issue 52's: 100,000 queues, 10,000 used.
        {"queues.create", "", K::kP50AtMostMs, 5},
        {"queues.create", "", K::kP99AtMostMs, 25},
        {"queues.delete", "", K::kP50AtMostMs, 10},
        {"queues.delete.used", "", K::kP50AtMostMs, 10},
        {"queues.metrics.used", "", K::kP50AtMostMs, 1000},
        {"queues.send.many", "queues.send.one", K::kP50RatioAtMost, 1.2},
        {"queues.receive.many", "queues.receive.one", K::kP50RatioAtMost, 1.2},
    };
  }

  BenchOptions options_;
  TopicOptions topic_options_;
  internal::Dsn dsn_;
  Sizes sizes_;
  Report report_;
  std::unique_ptr<XaServer> xa_;  // the XA row's second server, once asked for
};

// The database server's pid when it runs on this machine: its host name is this machine's and
// its pid file (@@pid_file) names a process whose command is mariadbd or mysqld. A server
// elsewhere (whose default pid file may name a local server's), or one whose pid file this user
// cannot read, has none: the rows then show the machine's CPU, not the server's.
std::optional<int> local_server_pid(internal::Connection& c) {
  const internal::Result r = c.execute("SELECT @@pid_file, @@hostname", {});
  if (r.rows.empty() || r.rows[0].null(0) || r.rows[0].null(1)) return std::nullopt;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || r.rows[0].bytes(1) != host) return std::nullopt;
  std::ifstream file(r.rows[0].bytes(0));
  int pid = 0;
  if (!(file >> pid) || pid <= 0) return std::nullopt;
  std::ifstream comm(fmt::format("/proc/{}/comm", pid));
  std::string name;
  if (!std::getline(comm, name) || (name != "mariadbd" && name != "mysqld")) return std::nullopt;
  return pid;
}

// Whether --cpu-pids names this process, or names another one "db".
bool watched_pid(const BenchOptions& options, int pid) {
  return std::any_of(options.cpu_pids.begin(), options.cpu_pids.end(), [&](const auto& named) {
    return named.second == pid || named.first == "db";
  });
}

}  // namespace

const std::vector<std::string>& bench_sections() { return kSections; }

int run_bench(const BenchOptions& options) {
  for (const std::string& s : options.sections) {
    const std::vector<std::string> cells = chaos_cell_ids();
    if (std::find(kSections.begin(), kSections.end(), s) == kSections.end() &&
        std::find(cells.begin(), cells.end(), s) == cells.end()) {
      throw Error(Errc::kInvalidArgument, fmt::format("unknown bench section '{}'", s));
    }
  }
  CpuWatch watch;
  for (const auto& [name, pid] : options.cpu_pids) watch.watch(name, pid);
  // What the database server did per message: its status counters, read on a connection of
  // the bench's own around each timed run. Server-wide: other clients of the server count too.
  std::unique_ptr<internal::Connection> status;
  std::mutex status_mutex;
  if (options.cpu || !options.cpu_pids.empty()) {
    try {
      status = std::make_unique<internal::Connection>(internal::parse_dsn(options.dsn));
      // Transactions: InnoDB's count of read-write transactions committed (an autocommit
      // statement that writes is one), a monitor that is off by default; the bench turns it on
      // only on a server of its own. On another server, Handler_commit stands in for it, which
      // also counts the end of every statement that touched InnoDB.
      bool transactions = false;
      if (options.private_server) {
        try {
          status->query("SET GLOBAL innodb_monitor_enable = 'trx_rw_commits'");
          transactions = true;
        } catch (const std::exception&) {
        }
      }
      // The watch's own statements in each reading, and the readings so far: the Questions
      // between two readings count the later one's SHOW and the earlier one's other statements.
      const double own_statements = transactions ? 2 : 1;
      double readings = 0;
      watch.count([&, transactions, own_statements]() -> CpuSeconds {
        std::lock_guard lock(status_mutex);
        CpuSeconds out;
        readings += 1;
        try {
          internal::Result r = status->execute(
              "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_commit', "
              "'Innodb_data_fsyncs', 'Questions')",
              {});
          for (const internal::Row& row : r.rows) {
            const std::string name(row.bytes(0));
            const double value = std::stod(std::string(row.bytes(1)));
            if (name == "Handler_commit" && !transactions) out["#handler commits"] = value;
            if (name == "Innodb_data_fsyncs") out["#fsyncs"] = value;  // InnoDB's, log and data
            // Less the watch's own statements so far, so that a row's difference has none.
            if (name == "Questions") out["#statements"] = value - own_statements * readings;
          }
          if (transactions) {
            internal::Result m = status->execute(
                "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = "
                "'trx_rw_commits'",
                {});
            if (!m.rows.empty()) out["#transactions"] = static_cast<double>(m.rows[0].i64(0));
          }
        } catch (const std::exception&) {
          // The server is down (a chaos cell): no counts for this run.
        }
        return out;
      });
      if (auto pid = local_server_pid(*status); pid && !watched_pid(options, *pid)) {
        watch.watch("db", *pid);
      }
    } catch (const std::exception&) {
      // No connection: no counts; the CPU figures stand alone.
    }
  }
  if (options.cpu || !options.cpu_pids.empty()) g_cpu_watch = &watch;
  // Off again at the end: the monitor is InnoDB's default off (the server may be the user's
  // embedded one, kept between runs).
  struct Unwatch {
    internal::Connection* status;
    std::mutex& mutex;
    ~Unwatch() {
      g_cpu_watch = nullptr;
      if (status == nullptr) return;
      std::lock_guard lock(mutex);
      try {
        status->query("SET GLOBAL innodb_monitor_disable = 'trx_rw_commits'");
      } catch (const std::exception&) {
      }
    }
  } unwatch{options.private_server ? status.get() : nullptr, status_mutex};
  Bench bench(options, internal::parse_dsn(options.dsn));
  bench.run();
  return 0;
}

}  // namespace txmq::bench
