// Metrics (docs/metrics.md): the totals clients record, the cheap estimated stats, and
// `txmq metrics`, whose exposition must pass promtool and agree with Client::stats.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;

const RecordedMetric* find(const std::vector<RecordedMetric>& all, const std::string& topic,
                           const std::string& group, const std::string& name) {
  for (const RecordedMetric& m : all) {
    if (m.topic == topic && m.group == group && m.name == name) return &m;
  }
  return nullptr;
}

double total(const std::vector<RecordedMetric>& all, const std::string& topic,
             const std::string& group, const std::string& name) {
  const RecordedMetric* m = find(all, topic, group, name);
  return m ? m->value : 0;
}

// The samples of an exposition: "name{labels}" -> value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// promtool's verdict on an exposition ("" when it passes).
std::string promtool_check(const std::string& text) {
  const std::string path = fmt::format("/tmp/txmq-metrics-test-{}.prom", getpid());
  std::ofstream(path) << text;
  const std::string command = fmt::format("promtool check metrics < {} 2>&1", path);
  std::string output;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return "cannot run promtool";
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), p) != nullptr) output += buffer;
  const int status = pclose(p);
  std::remove(path.c_str());
  if (status != 0 && output.empty()) output = "promtool failed (is it installed?)";
  return status == 0 ? "" : output;
}

// A known sequence of sends, receives, acks, nacks, a lease given back and a dead letter; every
// total is exact, and `txmq metrics` says the same as Client::stats.
TEST(Metrics, KnownSequenceGivesExactTotalsAndAPromtoolCleanExposition) {
  const std::string name = topic_for_test();
  {
    auto c = client("metrics-known");
    c->create_topic(name, TopicOptions{.max_attempts = 2});
    ASSERT_TRUE(c->create_group(name, "audit"));
    std::vector<OutgoingMessage> batch(6);
    for (std::size_t i = 0; i < batch.size(); ++i) batch[i].payload = "b" + std::to_string(i);
    c->send_batch(name, batch);
    for (int i = 0; i < 4; ++i) c->send(name, "s" + std::to_string(i));
    c->transact([&](Transaction& tx) {
      tx.send(name, "t1");
      tx.send(name, "t2");
    });
    // A rolled-back transaction's sends are not counted.
    EXPECT_THROW(c->transact([&](Transaction& tx) {
      tx.send(name, "never");
      throw std::runtime_error("roll back");
    }),
                 std::runtime_error);

    std::vector<Message> first = c->receive(name, ReceiveOptions{.max_messages = 5});
    ASSERT_EQ(first.size(), 5u);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(c->ack(name, first[i].receipt), Settle::kOk);
    ASSERT_EQ(c->nack(name, first[3].receipt, 0s), Settle::kOk);
    // Given back with a lease of 0: its next delivery counts as a lease expiry.
    ASSERT_EQ(c->extend(name, first[4].receipt, 0s), Settle::kOk);

    std::vector<Message> rest;
    for (int round = 0; round < 20 && rest.size() < 9; ++round) {
      for (Message& m : c->receive(name, ReceiveOptions{.max_messages = 20, .wait = 200ms})) {
        rest.push_back(std::move(m));
      }
    }
    ASSERT_EQ(rest.size(), 9u);
    for (const Message& m : rest) {
      if (m.id == first[3].id) {
        ASSERT_EQ(m.attempt, 2);
        ASSERT_EQ(c->nack(name, m.receipt, 0s), Settle::kOk);  // the second failure: dead
      } else {
        ASSERT_EQ(c->ack(name, m.receipt), Settle::kOk);
      }
    }
    ASSERT_EQ(c->receive(name, ReceiveOptions{.max_messages = 3, .group = "audit"}).size(), 3u);
  }  // the client's last flush

  auto c = client("metrics-reader");
  const std::vector<RecordedMetric> all = c->recorded_metrics();
  EXPECT_EQ(total(all, name, "", "sent"), 12);
  EXPECT_EQ(total(all, name, "default", "received"), 14);
  EXPECT_EQ(total(all, name, "default", "acked"), 11);
  EXPECT_EQ(total(all, name, "default", "nacked"), 2);
  EXPECT_EQ(total(all, name, "default", "lease_expired"), 1);
  EXPECT_EQ(total(all, name, "default", "dead_lettered"), 1);
  EXPECT_EQ(total(all, name, "audit", "received"), 3);
  EXPECT_EQ(total(all, name, "audit", "acked"), 0);
  const RecordedMetric* send = find(all, name, "", "send_seconds");
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->value, 5);  // one send_batch and four sends; transactions are not timed
  ASSERT_EQ(send->buckets.size(), std::size(kMetricBuckets) + 1);
  EXPECT_EQ(send->buckets.back(), 5u);
  EXPECT_GT(send->sum, 0);
  const RecordedMetric* e2e = find(all, name, "default", "end_to_end_seconds");
  ASSERT_NE(e2e, nullptr);
  EXPECT_EQ(e2e->value, 11);
  EXPECT_EQ(find(all, name, "default", "claim_seconds")->value, 2);

  // Named, so that it has series however many busier topics other tests leave in the database.
  test::ProcessResult r = test::run_txmq({"metrics", "--topics", name});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(promtool_check(r.out), "");
  const std::map<std::string, double> s = samples(r.out);
  const std::string d = fmt::format("{{topic=\"{}\",group=\"default\"}}", name);
  const std::string a = fmt::format("{{topic=\"{}\",group=\"audit\"}}", name);
  const TopicStats def = c->stats(name);
  const TopicStats audit = c->stats(name, "audit");
  EXPECT_EQ(s.at("txmq_messages_ready" + d), def.ready);
  EXPECT_EQ(s.at("txmq_messages_in_flight" + d), def.in_flight);
  EXPECT_EQ(s.at("txmq_dead_letters" + d), def.dead);
  EXPECT_EQ(def.dead, 1u);
  EXPECT_EQ(s.at("txmq_messages_ready" + a), audit.ready);
  EXPECT_EQ(s.at("txmq_messages_in_flight" + a), audit.in_flight);
  EXPECT_EQ(audit.in_flight, 3u);
  EXPECT_EQ(audit.ready, 9u);
  EXPECT_EQ(s.at("txmq_stats_estimated" + d), 0);
  EXPECT_EQ(s.at(fmt::format("txmq_messages_sent_total{{topic=\"{}\"}}", name)), 12);
  EXPECT_EQ(s.at("txmq_messages_acked_total" + d), 11);
  EXPECT_EQ(s.at("txmq_messages_dead_lettered_total" + d), 1);
  EXPECT_EQ(s.at("txmq_lease_expiries_total" + d), 1);
  EXPECT_EQ(s.at("txmq_messages_received_total" + a), 3);
  EXPECT_EQ(s.at("txmq_messages_acked_total" + a), 0);  // every group has every series
  EXPECT_EQ(s.at(fmt::format("txmq_end_to_end_latency_seconds_count{}", d)), 11);
  EXPECT_EQ(s.at(fmt::format("txmq_end_to_end_latency_seconds_bucket{{topic=\"{}\",group="
                             "\"default\",le=\"+Inf\"}}",
                             name)),
            11);

  // A dropped topic's totals go with it.
  c->drop_topic(name);
  const std::vector<RecordedMetric> after = c->recorded_metrics();
  EXPECT_EQ(find(after, name, "", "sent"), nullptr);
  EXPECT_EQ(find(after, name, "default", "acked"), nullptr);
}

// A live client adds its totals within about a second, without being destroyed; totals of
// several clients add up.
TEST(Metrics, LiveClientsFlushWithinSecondsAndAddUp) {
  const std::string name = topic_for_test();
  auto one = client("metrics-one");
  auto two = client("metrics-two");
  one->create_topic(name);
  for (int i = 0; i < 3; ++i) one->send(name, "one");
  for (int i = 0; i < 4; ++i) two->send(name, "two");
  double sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    sent = total(one->recorded_metrics(), name, "", "sent");
    if (sent >= 7) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(sent, 7);
}

// The SQL interface's calls count as the library's: sent by txmq_send and txmq_send_batch (only
// what commits), received and acked by txmq_take and txmq_ack, dead_lettered by a take; the
// totals include them at once (read beside txmq_metrics) and after a client folds them in, the
// same.
TEST(Metrics, SqlCallsCountAsTheLibrarysDo) {
  const std::string name = topic_for_test();
  auto lib = client();
  TopicOptions options;
  options.max_attempts = 1;
  ASSERT_TRUE(lib->create_topic(name, options, TableCreation::kNow));  // for the SQL interface
  auto c = test::admin();
  for (int i = 0; i < 3; ++i) c->query_rows(fmt::format("CALL txmq_send('{}', 'one', NULL)", name));
  c->query_rows(fmt::format("CALL txmq_send('{}', 'keyed', '{{\"key\": \"k\"}}')", name));
  c->query_rows(fmt::format("CALL txmq_send_batch('{}', '[\"a\", \"b\", {{\"payload\": \"c\"}}]')", name));
  // The topic's own send, plain (counted in the session, written to txmq_sql_counts at the
  // session's first, every 32nd, and in a later second of the clock) and with options
  // (txmq_send's count). The second plain one waits, unless the clock's second turned.
  c->query_rows(fmt::format("CALL txmq_send_to_{}('own', NULL)", name));
  c->query_rows(fmt::format("CALL txmq_send_to_{}('own', '{{\"key\": \"k\"}}')", name));
  c->query_rows(fmt::format("CALL txmq_send_to_{}('own 2', NULL)", name));
  const double before_the_second = total(lib->recorded_metrics(), name, "", "sent");
  EXPECT_GE(before_the_second, 9);
  EXPECT_LE(before_the_second, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  c->query_rows(fmt::format("CALL txmq_send_to_{}('own 3', NULL)", name));
  c->begin();
  c->query_rows(fmt::format("CALL txmq_send_batch('{}', '[\"rolled\", \"back\"]')", name));
  c->rollback();
  // 11 sent; take 9 and acknowledge them; take the other 2 and roll back: the next take
  // dead-letters them (one attempt each).
  c->begin();
  internal::Result taken = c->query_rows(fmt::format("CALL txmq_take('{}', NULL, 9)", name));
  ASSERT_EQ(taken.rows.size(), 9u);
  std::string ids;
  for (const internal::Row& row : taken.rows) ids += fmt::format("{}{}", ids.empty() ? "" : ",", row.u64(0));
  c->query(fmt::format("CALL txmq_ack('{}', NULL, '[{}]')", name, ids));
  c->commit();
  c->begin();
  ASSERT_EQ(c->query_rows(fmt::format("CALL txmq_take('{}', NULL, 5)", name)).rows.size(), 2u);
  c->rollback();
  c->begin();
  ASSERT_EQ(c->query_rows(fmt::format("CALL txmq_take('{}', NULL, 5)", name)).rows.size(), 0u);
  c->commit();
  const auto check = [&](const char* when) {
    const std::vector<RecordedMetric> all = lib->recorded_metrics();
    EXPECT_EQ(total(all, name, "", "sent"), 11) << when;
    EXPECT_EQ(total(all, name, "default", "received"), 9) << when;
    EXPECT_EQ(total(all, name, "default", "acked"), 9) << when;
    EXPECT_EQ(total(all, name, "default", "dead_lettered"), 2) << when;
  };
  check("read beside txmq_metrics");
  check("folded in by the read before");
  EXPECT_EQ(c->execute("SELECT COUNT(*) FROM txmq_sql_counts WHERE topic = ?", {name})
                .rows.at(0)
                .i64(0),
            0);
  // Dropped with the topic: one made again under its name starts at nothing.
  c->query_rows(fmt::format("CALL txmq_send('{}', 'one', NULL)", name));
  lib->drop_topic(name);
  ASSERT_TRUE(lib->create_topic(name));
  EXPECT_EQ(total(lib->recorded_metrics(), name, "", "sent"), 0);
  lib->drop_topic(name);
}

// Topics named by --topics and the --busiest others have series of their own; every used topic
// counts in topic="_all" (counters and histograms, no gauges); unused topics have none.
// In a database of the test's own, so that no other test's topics rank among the busiest.
TEST(Metrics, TheBusiestTopicsHaveSeriesAndAllCountInTheTotals) {
  const std::string db = "txmq_metrics_busiest_test";
  auto a = test::admin();
  a->query(fmt::format("DROP DATABASE IF EXISTS {}", db));
  a->query(fmt::format("CREATE DATABASE {}", db));
  const std::string dsn =
      std::regex_replace(test::dsn(), std::regex("^(mysql://[^/]*/)[^?]*"), "$1" + db);
  {
    ClientOptions o;
    o.dsn = dsn;
    Client c(o);
    c.create_topic("quiet");
    c.create_topic("busy");
    c.create_topic("middling");
    c.create_topic("named");
    c.create_topic("never_used", {}, TableCreation::kAtFirstUse);
    c.send("quiet", "q");
    for (int i = 0; i < 5; ++i) c.send("busy", "b");
    for (int i = 0; i < 4; ++i) c.send("middling", "m");
    std::vector<Message> got = c.receive("quiet", ReceiveOptions{.max_messages = 1});
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(c.ack("quiet", got[0].receipt), Settle::kOk);
  }  // the client's last flush
  {
    // What /metrics reads through the library: the summary's grouped totals agree with every
    // series read one by one, and a read of some topics gives exactly their series.
    ClientOptions o;
    o.dsn = dsn;
    o.record_metrics = false;
    Client c(o);
    const std::vector<RecordedMetric> every = c.recorded_metrics();
    const MetricSummary summary = c.metric_summary();
    std::map<std::string, double> counters;
    std::map<std::string, RecordedMetric> sums;
    for (const RecordedMetric& m : every) {
      if (!m.name.ends_with("_seconds")) counters[m.topic] += m.value;
      RecordedMetric& sum = sums[m.name];
      sum.value += m.value;
      sum.sum += m.sum;
      sum.buckets.resize(m.buckets.size());
      for (std::size_t b = 0; b < m.buckets.size(); ++b) sum.buckets[b] += m.buckets[b];
    }
    EXPECT_EQ(summary.counters_by_topic,
              (std::vector<std::pair<std::string, double>>{
                  {"busy", 5}, {"middling", 4}, {"quiet", 3}}));
    ASSERT_EQ(summary.sums.size(), sums.size());
    for (const RecordedMetric& m : summary.sums) {
      EXPECT_TRUE(m.topic.empty() && m.group.empty()) << m.name;
      EXPECT_EQ(m.value, sums[m.name].value) << m.name;
      EXPECT_DOUBLE_EQ(m.sum, sums[m.name].sum) << m.name;
      EXPECT_EQ(m.buckets, sums[m.name].buckets) << m.name;
    }
    const std::vector<RecordedMetric> some = c.recorded_metrics({"quiet", "busy", "nosuch"});
    std::vector<RecordedMetric> expected;
    for (const RecordedMetric& m : every) {
      if (m.topic == "busy" || m.topic == "quiet") expected.push_back(m);
    }
    ASSERT_EQ(some.size(), expected.size());
    for (std::size_t i = 0; i < some.size(); ++i) {
      EXPECT_EQ(std::tie(some[i].topic, some[i].group, some[i].name, some[i].value, some[i].buckets),
                std::tie(expected[i].topic, expected[i].group, expected[i].name,
                         expected[i].value, expected[i].buckets));
    }
    EXPECT_TRUE(c.recorded_metrics(std::vector<std::string>{}).empty());
  }
  const std::map<std::string, std::string> env = {{"TXMQ_DSN", dsn}};
  const auto totals_hold = [](const std::map<std::string, double>& s) {
    EXPECT_EQ(s.at("txmq_messages_sent_total{topic=\"_all\"}"), 10);
    EXPECT_EQ(s.at("txmq_send_duration_seconds_count{topic=\"_all\"}"), 10);
    EXPECT_EQ(s.at("txmq_messages_received_total{topic=\"_all\",group=\"_all\"}"), 1);
    EXPECT_EQ(s.at("txmq_messages_acked_total{topic=\"_all\",group=\"_all\"}"), 1);
    EXPECT_EQ(s.at("txmq_end_to_end_latency_seconds_count{topic=\"_all\",group=\"_all\"}"), 1);
  };

  // busy (5 sent) and middling (4) are the two busiest of the others; quiet (3 in all: a send,
  // a delivery, an ack) has no series of its own; named has them though nothing happened to it.
  test::ProcessResult r = test::run_txmq({"metrics", "--topics", "named", "--busiest", "2"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(promtool_check(r.out), "");
  std::map<std::string, double> s = samples(r.out);
  for (const char* topic : {"busy", "middling", "named"}) {
    EXPECT_EQ(s.count(fmt::format("txmq_messages_ready{{topic=\"{}\",group=\"default\"}}", topic)), 1u)
        << topic << "\n" << r.out;
  }
  EXPECT_EQ(s.at("txmq_messages_ready{topic=\"busy\",group=\"default\"}"), 5);
  EXPECT_EQ(r.out.find("topic=\"quiet\""), std::string::npos);
  EXPECT_EQ(r.out.find("topic=\"never_used\""), std::string::npos);
  EXPECT_EQ(r.out.find("txmq_messages_ready{topic=\"_all\""), std::string::npos);  // no gauges
  totals_hold(s);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"exported\"}"), 3);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"summed\"}"), 1);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"unused\"}"), 1);

  // --busiest 0 and nothing named: no topic's own series, the same totals.
  r = test::run_txmq({"metrics", "--busiest", "0"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(promtool_check(r.out), "");
  s = samples(r.out);
  totals_hold(s);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"exported\"}"), 0);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"summed\"}"), 4);
  EXPECT_EQ(r.out.find("txmq_messages_ready{"), std::string::npos);

  // The default (100 busiest): all four, and the same totals.
  r = test::run_txmq({"metrics"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = samples(r.out);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"exported\"}"), 4);
  EXPECT_EQ(s.at("txmq_metrics_topics{state=\"summed\"}"), 0);
  totals_hold(s);
  EXPECT_NE(test::run_txmq({"metrics", "--busiest", "-1"}, "", env).exit_code, 0);
  a->query(fmt::format("DROP DATABASE IF EXISTS {}", db));
}

// Past exact_up_to, stats estimate from the id range and say so; below, they are exact.
TEST(Metrics, StatsEstimateDeepQueuesAndCountShallowOnesExactly) {
  auto c = client("metrics-estimate");
  const std::string name = topic_for_test();
  c->create_topic(name);
  std::vector<OutgoingMessage> batch(4000);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].payload = "p";
  c->send_batch(name, batch);
  // Every other message of the first 2,000 acknowledged, and 100 left in flight: the lowest ids
  // are half as dense as the highest.
  std::vector<std::string> receipts;
  while (receipts.size() < 2000) {
    for (Message& m : c->receive(name, ReceiveOptions{.max_messages = 1000})) {
      receipts.push_back(std::move(m.receipt));
    }
  }
  std::vector<std::string> acked;
  std::vector<std::string> given_back;
  for (std::size_t i = 0; i < receipts.size(); ++i) {
    if (i % 2 == 0) {
      acked.push_back(receipts[i]);
    } else if (i >= 200) {
      given_back.push_back(receipts[i]);
    }
  }
  c->ack(name, acked);
  for (const std::string& r : given_back) ASSERT_EQ(c->extend(name, r, 0s), Settle::kOk);

  const TopicStats exact = c->stats(name);
  EXPECT_FALSE(exact.estimated);
  EXPECT_EQ(exact.ready, 3000u - 100u);
  EXPECT_EQ(exact.in_flight, 100u);
  EXPECT_EQ(c->stats(name, "", 2000).ready, exact.ready);  // 3,000 rows: both samples cover them
  EXPECT_FALSE(c->stats(name, "", 2000).estimated);

  const TopicStats estimate = c->stats(name, "", 300);
  EXPECT_TRUE(estimate.estimated);
  const double total_rows = static_cast<double>(estimate.ready + estimate.in_flight +
                                                estimate.delayed);
  EXPECT_NEAR(total_rows, 3000, 450);  // the density of both samples, averaged
  EXPECT_NEAR(static_cast<double>(estimate.ready), 2900, 450);
  EXPECT_EQ(estimate.in_flight, 100u);  // all of them among the lowest ids
  EXPECT_GT(estimate.lag_seconds, 0);
  EXPECT_THROW(c->stats(name, "", 0), Error);
}

}  // namespace
}  // namespace txmq
