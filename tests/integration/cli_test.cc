// The txmq command's contract: arguments, outputs, exit codes (docs/command.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "db/dsn.h"
#include "xa/xa.h"
#include "support.h"
#include "txmq/local.h"

namespace txmq {
namespace {

using nlohmann::json;
using test::run_txmq;
using test::topic_for_test;

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> lines;
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t nl = out.find('\n', start);
    lines.push_back(json::parse(out.substr(start, nl - start)));
    start = nl + 1;
  }
  return lines;
}

std::string base64_decode(const std::string& in) {
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* p = std::strchr(table, c);
    if (c == '=' || p == nullptr) break;
    val = (val << 6) + static_cast<int>(p - table);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

TEST(Cli, AttributesPurgeAndDeadLetterTopics) {
  const std::string name = topic_for_test();
  const std::string dlq = topic_for_test("dlq");
  ASSERT_EQ(run_txmq({"topic", "create", dlq}).exit_code, 0);
  auto r = run_txmq({"topic", "create", name, "--dead-letter-topic", dlq, "--retention", "3600",
                     "--max-attempts", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_txmq({"--json", "topic", "list"});
  for (const json& j : json_lines(r.out)) {
    if (j["name"] != name) continue;
    EXPECT_EQ(j["dead_letter_topic"], dlq);
    EXPECT_EQ(j["retention_seconds"], 3600);
    EXPECT_EQ(j["max_attempts"], 0);
  }
  // The target cannot go while a topic names it.
  EXPECT_NE(run_txmq({"topic", "drop", dlq}).exit_code, 0);
  r = run_txmq({"send", name, "--attr", "color=red", "--attr", "n:Number=5", "payload"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_txmq({"send", name, "--attr", "no-equals", "x"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"send", name, "--attr", "bad name=1", "x"}).exit_code, 5);
  r = run_txmq({"--json", "receive", name});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json m = json::parse(r.out);
  EXPECT_EQ(m["payload"], "payload");
  EXPECT_EQ(m["attributes"]["color"], (json{{"type", "String"}, {"value", "red"}}));
  EXPECT_EQ(m["attributes"]["n"], (json{{"type", "Number"}, {"value", "5"}}));
  EXPECT_TRUE(m.contains("first_received_at"));
  run_txmq({"send", name, "second"});
  r = run_txmq({"--json", "purge", name});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["purged"], 2);  // the one in flight too
  EXPECT_EQ(run_txmq({"purge", "no_such_topic_here"}).exit_code, 3);
  EXPECT_EQ(run_txmq({"topic", "set", name, "--dead-letter-topic", ""}).exit_code, 0);
  EXPECT_EQ(run_txmq({"topic", "drop", dlq}).exit_code, 0);
}

// topic create --fair and send --tenant: the tenant comes back with the message; a plain topic
// refuses one with a clear error.
TEST(Cli, FairTopicsTakeTenants) {
  const std::string name = topic_for_test();
  const std::string plain = topic_for_test("plain");
  auto r = run_txmq({"topic", "create", name, "--fair"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(run_txmq({"topic", "create", plain}).exit_code, 0);
  r = run_txmq({"--json", "topic", "show", name});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["fair"], true);
  ASSERT_EQ(run_txmq({"send", name, "--tenant", "acme", "one"}).exit_code, 0);
  ASSERT_EQ(run_txmq({"send", name, "--tenant", "globex", "two"}).exit_code, 0);
  r = run_txmq({"--json", "receive", name, "--max", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> tenant_of;
  for (const json& m : json_lines(r.out)) tenant_of[m["payload"]] = m.value("tenant", "");
  EXPECT_EQ(tenant_of, (std::map<std::string, std::string>{{"one", "acme"}, {"two", "globex"}}));
  r = run_txmq({"send", plain, "--tenant", "acme", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("fair"), std::string::npos) << r.err;
  EXPECT_EQ(run_txmq({"topic", "drop", name}).exit_code, 0);
  EXPECT_EQ(run_txmq({"topic", "drop", plain}).exit_code, 0);
}

TEST(Cli, TopicLifecycleAndExitCodes) {
  std::string name = topic_for_test();
  auto r = run_txmq({"topic", "create", name, "--lease", "10", "--max-attempts", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_txmq({"topic", "create", name, "--lease", "10", "--max-attempts", "3"}).exit_code,
            0);
  r = run_txmq({"topic", "create", name, "--lease", "20"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("other settings"), std::string::npos) << r.err;
  r = run_txmq({"--json", "topic", "list"});
  EXPECT_EQ(r.exit_code, 0);
  bool listed = false;
  for (const json& j : json_lines(r.out)) {
    if (j["name"] == name) {
      listed = true;
      EXPECT_EQ(j["lease_seconds"], 10);
      EXPECT_EQ(j["max_attempts"], 3);
      EXPECT_EQ(j["max_payload_bytes"], 1048576);
    }
  }
  EXPECT_TRUE(listed) << r.out;
  EXPECT_EQ(run_txmq({"topic", "drop", name}).exit_code, 0);
  r = run_txmq({"topic", "drop", name});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos);
  EXPECT_EQ(run_txmq({"stats", name}).exit_code, 3);
  EXPECT_EQ(run_txmq({"send", name, "x"}).exit_code, 3);
}

TEST(Cli, SendWithADedupKeyIsSafeToRepeat) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name, "--dedup-window", "60"}).exit_code, 0);
  auto first = run_txmq({"send", name, "charge 42", "--dedup-key", "charge-42"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto again = run_txmq({"send", name, "charge 42", "--dedup-key", "charge-42"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, first.out);
  auto other = run_txmq({"send", name, "charge 43", "--dedup-key", "charge-43"});
  EXPECT_NE(other.out, first.out);
  auto stats = run_txmq({"--json", "stats", name});
  EXPECT_EQ(json::parse(stats.out)["ready"], 2) << stats.out;
  auto list = run_txmq({"--json", "topic", "list"});
  bool listed = false;
  for (const json& j : json_lines(list.out)) {
    if (j["name"] == name) {
      listed = true;
      EXPECT_EQ(j["dedup_window_seconds"], 60);
    }
  }
  EXPECT_TRUE(listed);
  auto empty = run_txmq({"send", name, "x", "--dedup-key", ""});
  EXPECT_EQ(empty.exit_code, 5);
  EXPECT_NE(empty.err.find("dedup key"), std::string::npos) << empty.err;
  EXPECT_EQ(run_txmq({"topic", "create", topic_for_test("_w"), "--dedup-window", "0"}).exit_code,
            5);
}

TEST(Cli, BadNamesExitFive) {
  for (const std::string& bad :
       {std::string("x; DROP TABLE t"), std::string(""), std::string(200, 'n'),
        std::string("UPPER"), std::string("a'b"), std::string("\xff\xfe")}) {
    for (const std::vector<std::string>& args : {std::vector<std::string>{"topic", "create", bad},
                                                 {"topic", "drop", bad},
                                                 {"send", bad, "x"},
                                                 {"receive", bad},
                                                 {"stats", bad},
                                                 {"inflight", bad},
                                                 {"dead", "list", bad}}) {
      auto r = run_txmq(args);
      EXPECT_EQ(r.exit_code, 5) << args[0] << " '" << bad << "': " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find("invalid topic name"), std::string::npos) << r.err;
    }
  }
}

TEST(Cli, UsageErrorsExitOne) {
  EXPECT_EQ(run_txmq({}).exit_code, 1);
  EXPECT_EQ(run_txmq({"frobnicate"}).exit_code, 1);
  EXPECT_EQ(run_txmq({"receive"}).exit_code, 1);
  EXPECT_EQ(run_txmq({"topic", "create", "x", "--max-attempts", "many"}).exit_code, 1);
  EXPECT_EQ(run_txmq({"--help"}).exit_code, 0);
}

TEST(Cli, SendReceiveAckJson) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name}).exit_code, 0);
  auto r = run_txmq({"send", name, "--key", "customer-7", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::uint64_t id = std::stoull(r.out);
  r = run_txmq({"stats", name, "--json"});
  json stats = json::parse(r.out);
  EXPECT_EQ(stats["topic"], name);
  EXPECT_EQ(stats["ready"], 1);
  EXPECT_EQ(stats["in_flight"], 0);
  EXPECT_EQ(stats["delayed"], 0);
  EXPECT_EQ(stats["dead"], 0);
  EXPECT_TRUE(stats["oldest_ready_age_seconds"].is_number());

  r = run_txmq({"receive", name, "--json", "--max", "5", "--lease", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["id"], id);
  EXPECT_EQ(lines[0]["attempt"], 1);
  EXPECT_EQ(lines[0]["key"], "customer-7");
  EXPECT_EQ(lines[0]["payload"], "hello world");
  EXPECT_TRUE(lines[0]["enqueued_at"].is_string());
  std::string receipt = lines[0]["receipt"];

  r = run_txmq({"inflight", name, "--json"});
  auto inflight = json_lines(r.out);
  ASSERT_EQ(inflight.size(), 1u);
  EXPECT_EQ(inflight[0]["id"], id);
  EXPECT_EQ(inflight[0]["attempt"], 1);
  EXPECT_NE(inflight[0]["owner"].get<std::string>().find(':'), std::string::npos);  // host:pid

  r = run_txmq({"extend", name, receipt, "--lease", "120"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_txmq({"ack", name, receipt});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_txmq({"ack", name, receipt});
  EXPECT_EQ(r.exit_code, 3);
  r = run_txmq({"ack", name, "12.zzzz"});
  EXPECT_EQ(r.exit_code, 5);

  // Nothing to receive: no output, exit 0.
  r = run_txmq({"receive", name, "--json"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, LateAckExitsFour) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name, "--retry-initial", "0"}).exit_code, 0);
  ASSERT_EQ(run_txmq({"send", name, "x"}).exit_code, 0);
  auto first = json_lines(run_txmq({"receive", name, "--json", "--lease", "0.2"}).out);
  ASSERT_EQ(first.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto second = json_lines(run_txmq({"receive", name, "--json"}).out);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]["attempt"], 2);
  auto r = run_txmq({"ack", name, first[0]["receipt"]});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("lease lost"), std::string::npos);
  r = run_txmq({"nack", name, first[0]["receipt"]});
  EXPECT_EQ(r.exit_code, 4);
  // A good receipt of another message and the stale one in one call: the good one is applied,
  // the stale one refused, and the exit code says so.
  ASSERT_EQ(run_txmq({"send", name, "y"}).exit_code, 0);
  auto other = json_lines(run_txmq({"receive", name, "--json"}).out);
  ASSERT_EQ(other.size(), 1u);
  r = run_txmq({"--json", "ack", name, other[0]["receipt"], first[0]["receipt"]});
  EXPECT_EQ(r.exit_code, 4);
  auto results = json_lines(r.out);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["result"], "ok");
  EXPECT_EQ(results[1]["result"], "lease_lost");
  EXPECT_EQ(json::parse(run_txmq({"stats", name, "--json"}).out)["in_flight"], 1);
  EXPECT_EQ(run_txmq({"ack", name, second[0]["receipt"]}).exit_code, 0);
  // Its message is gone now: the stale receipt finds nothing.
  EXPECT_EQ(run_txmq({"ack", name, first[0]["receipt"]}).exit_code, 3);
}

TEST(Cli, BinaryPayloadFromStdinRoundTrips) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name}).exit_code, 0);
  std::string payload;
  for (int i = 0; i < 256; ++i) payload += static_cast<char>(i);
  payload += std::string("\0\0end\n", 6);
  auto r = run_txmq({"send", name}, payload);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_txmq({"receive", name, "--json"});
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(lines[0].contains("payload_base64")) << r.out;
  EXPECT_FALSE(lines[0].contains("payload"));
  EXPECT_EQ(base64_decode(lines[0]["payload_base64"]), payload);
}

TEST(Cli, SendBatchLines) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name}).exit_code, 0);
  // An empty line is an empty message; a missing final newline is fine; bytes are kept.
  auto r = run_txmq({"--json", "send-batch", name}, std::string("a\n\nb c\r\n\xff\x01", 10));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json summary = json::parse(r.out);
  EXPECT_EQ(summary["count"], 4);
  EXPECT_EQ(summary["last_id"].get<std::uint64_t>() - summary["first_id"].get<std::uint64_t>(), 3u);
  auto lines = json_lines(run_txmq({"receive", name, "--json", "--max", "10"}).out);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["payload"], "a");
  EXPECT_EQ(lines[1]["payload"], "");
  EXPECT_EQ(lines[2]["payload"], "b c\r");
  EXPECT_EQ(base64_decode(lines[3]["payload_base64"]), "\xff\x01");

  // From a file, with a final newline: it does not make an extra message.
  std::string file = test::scratch_dir() + "/batch.txt";
  std::ofstream(file) << "one\ntwo\nthree\n";
  r = run_txmq({"send-batch", name, file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sent 3 messages, ids "), std::string::npos) << r.out;
}

TEST(Cli, SendBatchIsRefusedWholeWhenOneLineIsTooLarge) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name, "--max-payload", "10"}).exit_code, 0);
  auto r = run_txmq({"send-batch", name}, "ok\nfine\nthis line is too long\nok\n");
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("message 3 of the batch"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(run_txmq({"stats", name, "--json"}).out)["ready"], 0);
  r = run_txmq({"send", name, "0123456789"});
  EXPECT_EQ(r.exit_code, 0);
  r = run_txmq({"send", name, "0123456789x"});
  EXPECT_EQ(r.exit_code, 5);
}

TEST(Cli, HostileInputsLeaveTheDatabaseIntact) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name}).exit_code, 0);
  std::string hostile = "'); DROP TABLE txmq_topics; -- \" ` \\ %";
  auto r = run_txmq({"send", name, "--key", hostile, hostile});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(run_txmq({"receive", name, "--json"}).out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["payload"], hostile);
  EXPECT_EQ(lines[0]["key"], hostile);
  EXPECT_EQ(run_txmq({"nack", name, lines[0]["receipt"], "--delay", "-5"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"receive", name, "--max", "0"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"receive", name, "--max", "99999999"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"send", name, "--delay", "1e300", "x"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"send", name, "--key", std::string(300, 'k'), "x"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"--dsn", "mysql://u@h/db?sockte=/x", "topic", "list"}).exit_code, 5);
  EXPECT_EQ(run_txmq({"topic", "list"}).exit_code, 0);  // catalog still there
}

TEST(Cli, DeadLettersListAndRequeue) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name, "--max-attempts", "1"}).exit_code, 0);
  ASSERT_EQ(run_txmq({"send", name, "doomed"}).exit_code, 0);
  auto got = json_lines(run_txmq({"receive", name, "--json"}).out);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(run_txmq({"nack", name, got[0]["receipt"]}).exit_code, 0);
  auto dead = json_lines(run_txmq({"dead", "list", name, "--json"}).out);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]["payload"], "doomed");
  EXPECT_EQ(dead[0]["attempts"], 1);
  auto r = run_txmq({"dead", "requeue", name, fmt::format("{}", dead[0]["id"].get<long>())});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto again = json_lines(run_txmq({"receive", name, "--json"}).out);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["attempt"], 1);
  EXPECT_EQ(run_txmq({"dead", "requeue", name, "123456789"}).exit_code, 3);
}

TEST(Cli, DelayedSendAndNackDelay) {
  std::string name = topic_for_test();
  ASSERT_EQ(run_txmq({"topic", "create", name}).exit_code, 0);
  ASSERT_EQ(run_txmq({"send", name, "--delay", "30", "later"}).exit_code, 0);
  EXPECT_TRUE(run_txmq({"receive", name}).out.empty());
  EXPECT_EQ(json::parse(run_txmq({"stats", name, "--json"}).out)["delayed"], 1);
}

TEST(Cli, EmbeddedDefaultStartsReusesAndStops) {
  std::string home = test::scratch_dir() + "/home";
  std::map<std::string, std::string> env = {{"TXMQ_DSN", ""}, {"TXMQ_HOME", home}};
  // Whatever fails below, the server this test starts is stopped when it ends.
  struct StopAtEnd {
    std::map<std::string, std::string> env;
    ~StopAtEnd() { run_txmq({"local", "stop"}, "", env); }
  } stop_at_end{env};
  auto r = run_txmq({"topic", "create", "embedded"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("started the local MariaDB server"), std::string::npos) << r.err;
  r = run_txmq({"send", "embedded", "kept"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // reused, not started again
  r = run_txmq({"--json", "local", "status"}, "", env);
  json status = json::parse(r.out);
  EXPECT_TRUE(status["running"].get<bool>());
  EXPECT_EQ(status["home"], home);
  r = run_txmq({"local", "stop"}, "", env);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "stopped\n");
  EXPECT_FALSE(json::parse(run_txmq({"--json", "local", "status"}, "", env).out)["running"]);
  // Data survives a restart: the message sent before the stop is still there.
  r = run_txmq({"--json", "receive", "embedded"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"payload\":\"kept\""), std::string::npos) << r.out;
  EXPECT_EQ(run_txmq({"local", "stop"}, "", env).exit_code, 0);
  EXPECT_EQ(run_txmq({"local", "stop"}, "", env).out, "not running\n");
}

// The bench's JSON document: machine, durability, rows with figures and ratios, targets.
// Figures are not asserted (a benchmark is not a timed test); the shape and the bookkeeping are.
TEST(Cli, BenchReportsRowsAndTargetsAsJson) {
  auto r = run_txmq({"--json", "bench", "--quick", "--only", "claim"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json doc = json::parse(r.out);
  EXPECT_EQ(doc["server"]["txmq_session_isolation"], "READ-COMMITTED");
  EXPECT_TRUE(doc["server"].contains("innodb_flush_log_at_trx_commit"));
  EXPECT_TRUE(doc["server"].contains("sync_binlog"));
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_EQ(doc["results"][0]["id"], "claim.idle");
  EXPECT_EQ(doc["results"][1]["id"], "claim.inflight");
  for (const json& row : doc["results"]) {
    EXPECT_EQ(row["messages"], 300);
    EXPECT_GT(row["p50_ms"].get<double>(), 0);
    EXPECT_GE(row["p99_ms"].get<double>(), row["p50_ms"].get<double>());
  }
  EXPECT_DOUBLE_EQ(
      doc["results"][1]["ratio"].get<double>(),
      doc["results"][1]["p50_ms"].get<double>() / doc["results"][0]["p50_ms"].get<double>());
  ASSERT_EQ(doc["targets"].size(), 1u);
  EXPECT_EQ(doc["targets"][0]["row"], "claim.inflight");
  // The bench leaves no topic behind.
  EXPECT_EQ(run_txmq({"topic", "list"}).out.find("txmq_bench"), std::string::npos);
  EXPECT_EQ(run_txmq({"bench", "--only", "nope"}).exit_code, 5);
}

// --binlog: the bench runs on a private server of its own with the binary log on and synced at
// every commit, and stops it at the end; it cannot be combined with a server named by DSN.
TEST(Cli, BenchBinlogRunsOnAPrivateServerWithTheBinaryLogOn) {
  const std::string home = test::scratch_dir() + "/home";
  std::map<std::string, std::string> env = {{"TXMQ_DSN", ""}, {"TXMQ_HOME", home}};
  struct StopAtEnd {
    std::map<std::string, std::string> env;
    ~StopAtEnd() {
      run_txmq({"local", "stop"}, "", env);
      env["TXMQ_HOME"] += "-binlog";
      run_txmq({"local", "stop"}, "", env);
    }
  } stop_at_end{env};
  auto r = run_txmq({"--json", "bench", "--binlog", "--quick", "--only", "claim"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(home + "-binlog"), std::string::npos) << r.err;
  json doc = json::parse(r.out);
  EXPECT_TRUE(doc["server"]["log_bin"].get<bool>());
  EXPECT_EQ(doc["server"]["sync_binlog"], 1);
  EXPECT_EQ(doc["server"]["binlog_format"], "ROW");
  EXPECT_EQ(doc["results"].size(), 2u);
  // Stopped at the end; the embedded default was never started.
  EXPECT_FALSE(json::parse(run_txmq({"--json", "local", "status"}, "",
                                    {{"TXMQ_DSN", ""}, {"TXMQ_HOME", home + "-binlog"}})
                               .out)["running"]);
  EXPECT_FALSE(json::parse(run_txmq({"--json", "local", "status"}, "", env).out)["running"]);

  r = run_txmq({"--dsn", "mysql://root@localhost/nowhere", "bench", "--binlog"}, "", env);
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("--binlog"), std::string::npos) << r.err;
}

// --- txmq xa status | recover (exactly-once across databases) -----------------------------------

// The XA resource of these tests: shard-server-3 of the CTest fixture (TXMQ_SHARD_HOMES). Not
// shard-server-2, which xa_test.cc uses: recovery looks at every txmq branch of the queue's
// database on a server, whatever resource name a batch was run under, so tests on one server
// would finish each other's hand-made branches.
std::string xa_resource_dsn() {
  const char* env = std::getenv("TXMQ_SHARD_HOMES");
  std::stringstream in(env ? env : TXMQ_SHARD_HOMES);
  std::vector<std::string> homes;
  for (std::string h; std::getline(in, h, ',');) homes.push_back(h);
  if (homes.size() != 2) throw std::runtime_error("TXMQ_SHARD_HOMES must name two homes");
  return LocalServer::status({homes[1]}).dsn;
}

std::unique_ptr<internal::Connection> xa_resource_admin() {
  return std::make_unique<internal::Connection>(internal::parse_dsn(xa_resource_dsn()));
}

TEST(Cli, XaResourceIsCheckedBeforeAnythingConnects) {
  // Usage: the option is required.
  auto r = run_txmq({"xa", "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--resource"), std::string::npos) << r.err;
  // Input refused (exit 5, as a bad name or DSN anywhere else), with what is wrong.
  r = run_txmq({"xa", "status", "--resource", "ledger"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("NAME=DSN"), std::string::npos) << r.err;
  // A DSN without its name; the password is not echoed.
  r = run_txmq({"xa", "recover", "--resource", "mysql://app:s3cret@db2/ledger?socket=/x"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("NAME=DSN"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
  r = run_txmq({"xa", "status", "--resource", "Ledger-1=" + xa_resource_dsn()});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("'Ledger-1' is not a resource name"), std::string::npos) << r.err;
  r = run_txmq({"xa", "recover", "--resource", "ledger="});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("DSN"), std::string::npos) << r.err;
  // A typo in the resource's DSN: refused with the DSN's problem and the resource's name.
  r = run_txmq({"xa", "status", "--resource", "ledger=mysql://root@localhost/txmq?sockte=/x"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("resource 'ledger'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sockte"), std::string::npos) << r.err;
  r = run_txmq({"xa", "status", "--resource", "ledger=mysq://root@localhost/txmq"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("resource 'ledger'"), std::string::npos) << r.err;
  // A resource that cannot be reached: the database exit code, naming the resource.
  r = run_txmq({"xa", "recover", "--resource",
                "ledger=mysql://root@127.0.0.1:1/txmq?connect_timeout=2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("resource 'ledger'"), std::string::npos) << r.err;
  // One line on stderr each time, no crash.
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

// status and recover on a fresh resource, after process_xa batches, and on branches made by hand
// as a consumer that died (or is still at work) leaves them. One test: they share the server.
TEST(Cli, XaStatusListsWhatIsInDoubtAndRecoverFinishesIt) {
  const std::string resource = "cli_xa_ledger";
  const std::string spec = resource + "=" + xa_resource_dsn();
  // The resource server is shared by the runs on each server under test: a table of this run's.
  const std::string table = fmt::format("cli_xa_{}", topic_for_test());
  {
    auto b = xa_resource_admin();
    b->query(fmt::format("DROP TABLE IF EXISTS {}", table));
    b->query(fmt::format("CREATE TABLE {} (message_id BIGINT UNSIGNED NOT NULL PRIMARY KEY) "
                         "ENGINE=InnoDB",
                         table));
  }
  struct DropAtEnd {
    std::string table;
    ~DropAtEnd() {
      try {
        xa_resource_admin()->query(fmt::format("DROP TABLE IF EXISTS {}", table));
      } catch (const std::exception&) {
      }
    }
  } drop_at_end{table};
  const auto rows_in_b = [&] {
    return xa_resource_admin()
        ->execute(fmt::format("SELECT COUNT(*) FROM {}", table), {})
        .rows.at(0)
        .i64(0);
  };

  // Nothing in doubt yet: a line saying so, an empty array, exit 0. (A pass first, in case an
  // aborted run of this test left a branch behind.)
  run_txmq({"xa", "recover", "--resource", spec});
  auto r = run_txmq({"xa", "status", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "nothing in doubt on resource cli_xa_ledger\n");
  r = run_txmq({"--json", "xa", "status", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::array());

  // process_xa batches leave nothing in doubt.
  const std::string topic = topic_for_test();
  {
    auto c = test::client();
    ASSERT_TRUE(c->create_topic(topic));
    for (int i = 0; i < 25; ++i) c->send(topic, std::to_string(i));
    std::size_t done = 0;
    for (int round = 0; round < 10 && done < 25; ++round) {
      done += c->process_xa(topic, {resource, xa_resource_dsn()}, {.max_messages = 10},
                            [&](Transaction& tx, std::span<const Message> messages) {
                              for (const Message& m : messages) {
                                tx.execute(fmt::format("INSERT INTO {} VALUES (?)", table),
                                           {m.id});
                              }
                            });
    }
    ASSERT_EQ(done, 25u);
  }
  EXPECT_EQ(rows_in_b(), 25);
  r = run_txmq({"--json", "xa", "status", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Nothing in doubt: at most the last batch's decision record, which the process's next batch
  // or a recovery pass deletes.
  const json after_batches = json::parse(r.out);
  EXPECT_LE(after_batches.size(), 1u) << after_batches;
  for (const json& s : after_batches) {
    EXPECT_EQ(s["action"], "purge") << s;
    EXPECT_EQ(s["decision"], "commit") << s;
    EXPECT_FALSE(s["prepared"].get<bool>()) << s;
    EXPECT_EQ(s["topic"], topic) << s;
  }
  r = run_txmq({"xa", "recover", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("committed    0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rolled back  0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("live         0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nothing left in doubt"), std::string::npos) << r.out;
  r = run_txmq({"xa", "status", "--resource", spec});
  EXPECT_EQ(r.out, "nothing in doubt on resource cli_xa_ledger\n") << r.out;

  // A consumer that died between XA PREPARE and the queue's commit: a prepared branch in B with
  // no decision in the queue's database. status shows it to be fenced; recover rolls it back.
  const std::uint64_t instance =
      test::admin()->execute("SELECT instance_id FROM txmq_schema", {}).rows.at(0).u64(0);
  ASSERT_NE(instance, 0u);
  std::mt19937_64 random(std::random_device{}());
  const auto prepared_branch = [&](std::uint64_t token, std::uint64_t message_id) {
    auto b = xa_resource_admin();
    const internal::XaBranchName name{
        instance, token, 7, b->execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0),
        internal::xa_resource_hash("cli_xa_ledger")};
    b->query(fmt::format("XA START {}", name.sql()));
    b->execute(fmt::format("INSERT INTO {} VALUES (?)", table), {message_id});
    b->query(fmt::format("XA END {}", name.sql()));
    b->query(fmt::format("XA PREPARE {}", name.sql()));
  };  // the connection closes; the prepared branch stays
  const std::uint64_t dead = random() | 1;
  prepared_branch(dead, 1'000'001);
  const std::string dead_hex = fmt::format("{:016x}", dead);
  r = run_txmq({"xa", "status", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(dead_hex), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fence"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rolls the branch back if its consumer died"), std::string::npos) << r.out;
  r = run_txmq({"--json", "xa", "status", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json list = json::parse(r.out);
  ASSERT_EQ(list.size(), 1u) << list;
  EXPECT_EQ(list[0]["token"], dead_hex);
  EXPECT_TRUE(list[0]["prepared"].get<bool>());
  EXPECT_TRUE(list[0]["decision"].is_null());
  EXPECT_EQ(list[0]["owner_id"], 7);
  EXPECT_TRUE(list[0]["decided_at"].is_null());
  EXPECT_EQ(list[0]["action"], "fence");
  r = run_txmq({"--json", "xa", "recover", "--resource", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), (json{{"resource", resource},
                                      {"committed", 0},
                                      {"rolled_back", 1},
                                      {"purged", 0},
                                      {"live", 0}}));
  EXPECT_EQ(rows_in_b(), 25);  // the dead consumer's row never committed
  EXPECT_EQ(run_txmq({"xa", "status", "--resource", spec}).out,
            "nothing in doubt on resource cli_xa_ledger\n");

  // A consumer still at work: its open transaction in the queue's database holds its decision
  // row. recover leaves its branch alone and exits 1, saying so; once the consumer commits, the
  // branch is committed.
  const std::uint64_t live = random() | 1;
  prepared_branch(live, 1'000'002);
  auto owner = test::admin();
  owner->begin();
  owner->execute(
      "INSERT INTO txmq_xa (token, outcome, resource, owner_id, topic, grp, first_id, messages, "
      "created_at) VALUES (?, 'commit', ?, 7, ?, 'default', 1, 1, NOW(6))",
      {live, resource, topic});
  r = run_txmq({"xa", "recover", "--resource", spec});
  EXPECT_EQ(r.exit_code, 6) << r.out << r.err;
  EXPECT_NE(r.out.find("live         1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("belongs to a consumer still running"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("again later"), std::string::npos) << r.err;
  owner->commit();
  r = run_txmq({"--json", "xa", "status", "--resource", spec});
  list = json::parse(r.out);
  ASSERT_EQ(list.size(), 1u) << list;
  EXPECT_EQ(list[0]["token"], fmt::format("{:016x}", live));
  EXPECT_EQ(list[0]["decision"], "commit");
  EXPECT_EQ(list[0]["topic"], topic);
  EXPECT_EQ(list[0]["group"], "default");
  EXPECT_TRUE(list[0]["decision_age_seconds"].is_number());
  EXPECT_EQ(list[0]["action"], "commit");
  r = run_txmq({"xa", "recover", "--resource", spec});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("committed    1"), std::string::npos) << r.out;
  EXPECT_EQ(rows_in_b(), 26);
  EXPECT_EQ(run_txmq({"xa", "status", "--resource", spec}).out,
            "nothing in doubt on resource cli_xa_ledger\n");
}

}  // namespace
}  // namespace txmq
