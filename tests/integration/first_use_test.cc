// Topics whose tables are made at their first use (TableCreation::kAtFirstUse): an unused topic
// is its catalog rows only; its first send, receive, group or transaction makes every table,
// once, also when several clients start at the same time; reads leave it as it is.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace txmq {
namespace {

using test::client;
using test::topic_for_test;

// The topic's tables in the database (any kind, any group or partition).
std::int64_t tables_of(const std::string& topic) {
  auto admin = test::admin();
  const std::string like = fmt::format("txmq\\_%\\_{}", topic);
  internal::Result r = admin->execute(
      "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
      "(TABLE_NAME LIKE ? OR TABLE_NAME LIKE ?)",
      {std::string_view(like), std::string_view(like + "$%")});
  return r.rows.at(0).i64(0);
}

bool has_tables(Client& c, const std::string& topic) {
  for (const TopicInfo& t : c.list_topics()) {
    if (t.name == topic) return t.has_tables;
  }
  ADD_FAILURE() << "topic " << topic << " is not listed";
  return false;
}

TEST(FirstUse, AnUnusedTopicHasNoTablesAndReadsDoNotMakeThem) {
  auto c = client("first-use-reads");
  const std::string name = topic_for_test();
  ASSERT_TRUE(c->create_topic(name, {}, TableCreation::kAtFirstUse));
  EXPECT_FALSE(c->create_topic(name, {}, TableCreation::kAtFirstUse));  // same settings
  EXPECT_EQ(tables_of(name), 0);
  EXPECT_FALSE(has_tables(*c, name));
  const TopicStats s = c->stats(name);
  EXPECT_EQ(s.ready + s.in_flight + s.delayed + s.dead, 0u);
  EXPECT_EQ(tables_of(name), 0);

  // The first send makes all six tables (and the send fence), and the message is there.
  const std::uint64_t id = c->send(name, "first");
  EXPECT_EQ(tables_of(name), 6);
  EXPECT_TRUE(has_tables(*c, name));
  std::vector<Message> got = c->receive(name, ReceiveOptions{.max_messages = 10});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id);
  EXPECT_EQ(got[0].payload, "first");
  EXPECT_EQ(c->ack(name, got[0].receipt), Settle::kOk);
  c->drop_topic(name);
  EXPECT_EQ(tables_of(name), 0);
  EXPECT_THROW(c->send(name, "gone"), Error);
}

TEST(FirstUse, AReceiveOnAnUnusedTopicFindsNothing) {
  auto c = client("first-use-receive");
  const std::string name = topic_for_test();
  c->create_topic(name, {}, TableCreation::kAtFirstUse);
  EXPECT_TRUE(c->receive(name, ReceiveOptions{.max_messages = 10}).empty());
  c->send(name, "after");
  EXPECT_EQ(c->receive(name, ReceiveOptions{.max_messages = 10}).size(), 1u);
  c->drop_topic(name);
}

// Two clients (as two processes) and several threads each send the topic's first messages at
// once: every message arrives, once.
TEST(FirstUse, ConcurrentFirstSendsFromSeveralClientsAllArrive) {
  const std::string name = topic_for_test();
  auto a = client("first-use-a");
  auto b = client("first-use-b");
  a->create_topic(name, {}, TableCreation::kAtFirstUse);
  constexpr int kThreads = 4;
  constexpr int kEach = 25;
  std::vector<std::thread> threads;
  for (Client* c : {a.get(), b.get()}) {
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([c, t, &name] {
        for (int i = 0; i < kEach; ++i) {
          if (i % 5 == 4) {
            std::vector<OutgoingMessage> batch(3);
            for (auto& m : batch) m.payload = "batch";
            c->send_batch(name, batch);
          } else {
            c->send(name, fmt::format("t{} m{}", t, i));
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  const std::size_t expected = 2 * kThreads * (kEach / 5 * 4 + kEach / 5 * 3);
  std::set<std::uint64_t> ids;
  for (int round = 0; round < 100 && ids.size() < expected; ++round) {
    for (const Message& m : a->receive(name, ReceiveOptions{.max_messages = 100})) {
      EXPECT_TRUE(ids.insert(m.id).second) << "delivered twice: " << m.id;
      EXPECT_EQ(a->ack(name, m.receipt), Settle::kOk);
    }
  }
  EXPECT_EQ(ids.size(), expected);
  EXPECT_EQ(tables_of(name), 6);
  a->drop_topic(name);
}

// The first use inside an application's transaction: the tables are made beside it, and the
// send commits or rolls back with the transaction as always; dedup keys hold within it.
TEST(FirstUse, FirstSendInsideATransactionCommitsOrRollsBackWithIt) {
  auto c = client("first-use-tx");
  const std::string kept = topic_for_test("kept");
  const std::string undone = topic_for_test("undone");
  c->create_topic(kept, {}, TableCreation::kAtFirstUse);
  c->create_topic(undone, {}, TableCreation::kAtFirstUse);
  EXPECT_THROW(c->transact([&](Transaction& tx) {
    tx.send(undone, "never");
    throw std::runtime_error("roll back");
  }),
               std::runtime_error);
  EXPECT_TRUE(c->receive(undone, ReceiveOptions{.max_messages = 10}).empty());
  std::uint64_t first = 0;
  std::uint64_t again = 0;
  c->transact([&](Transaction& tx) {
    first = tx.send(kept, "once", SendOptions{.dedup_key = "k1"});
    again = tx.send(kept, "twice", SendOptions{.dedup_key = "k1"});
  });
  EXPECT_EQ(first, again);
  std::vector<Message> got = c->receive(kept, ReceiveOptions{.max_messages = 10});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "once");
  c->drop_topic(kept);
  c->drop_topic(undone);
}

// A group made on an unused topic makes the topic's tables first; sends reach every group.
TEST(FirstUse, AGroupOnAnUnusedTopicMakesItsTables) {
  auto c = client("first-use-group");
  const std::string name = topic_for_test();
  c->create_topic(name, {}, TableCreation::kAtFirstUse);
  ASSERT_TRUE(c->create_group(name, "audit"));
  EXPECT_EQ(tables_of(name), 10);  // the topic's six, the group's four
  c->send(name, "both");
  EXPECT_EQ(c->receive(name, ReceiveOptions{.max_messages = 10}).size(), 1u);
  EXPECT_EQ(c->receive(name, ReceiveOptions{.max_messages = 10, .group = "audit"}).size(), 1u);
  c->drop_topic(name);
}

// Raising the partitions of an unused topic makes nothing; its first send makes them all.
TEST(FirstUse, MorePartitionsOnAnUnusedTopicComeWithItsFirstUse) {
  auto c = client("first-use-partitions");
  const std::string name = topic_for_test();
  c->create_topic(name, {}, TableCreation::kAtFirstUse);
  TopicOptions more = c->topic(name).options;
  more.partitions = 3;
  c->update_topic(name, more);
  EXPECT_EQ(tables_of(name), 0);
  std::vector<OutgoingMessage> batch(9);
  for (auto& m : batch) m.payload = "spread";
  c->send_batch(name, batch);
  EXPECT_EQ(tables_of(name), 2 + 3 * 4);
  std::size_t got = 0;
  for (int round = 0; round < 20 && got < 9; ++round) {
    got += c->receive(name, ReceiveOptions{.max_messages = 10}).size();
  }
  EXPECT_EQ(got, 9u);
  c->drop_topic(name);
}

// A topic not used yet gets its tables when another topic names it as its dead-letter topic:
// messages die into it inside a claim's or a nack's transaction.
TEST(FirstUse, AnUnusedDeadLetterTopicTakesItsFirstDeadLetter) {
  auto c = client("first-use-dead");
  const std::string dead = topic_for_test("dead");
  const std::string work = topic_for_test("work");
  c->create_topic(dead, {}, TableCreation::kAtFirstUse);
  c->create_topic(work,
                  TopicOptions{.max_attempts = 1, .retry = {.initial = {}, .max = {}},
                               .dead_letter_topic = dead},
                  TableCreation::kAtFirstUse);
  EXPECT_EQ(tables_of(dead), 6);  // named as a dead-letter topic: made then
  c->send(work, "dies");
  std::vector<Message> got = c->receive(work, ReceiveOptions{.max_messages = 1});
  ASSERT_EQ(got.size(), 1u);
  c->nack(work, got[0].receipt, std::chrono::microseconds(0));
  std::vector<Message> moved = c->receive(dead, ReceiveOptions{.max_messages = 10});
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].payload, "dies");
  c->drop_topic(work);
  c->drop_topic(dead);
}

// list_topic_names says what list_topics says of names and tables, without the settings.
TEST(FirstUse, TopicNamesSayWhichTopicsHaveTables) {
  auto c = client("first-use-names");
  const std::string unused = topic_for_test("unused");
  const std::string used = topic_for_test("used");
  c->create_topic(unused, {}, TableCreation::kAtFirstUse);
  c->create_topic(used, {}, TableCreation::kAtFirstUse);
  c->send(used, "makes its tables");
  const std::vector<TopicInfo> topics = c->list_topics();
  const std::vector<TopicName> names = c->list_topic_names();
  ASSERT_TRUE(std::is_sorted(names.begin(), names.end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  std::map<std::string, bool> by_name;
  for (const TopicName& n : names) by_name[n.name] = n.has_tables;
  EXPECT_EQ(by_name.at(unused), false);
  EXPECT_EQ(by_name.at(used), true);
  // Other tests make, use and drop topics meanwhile: a topic of both lists that had tables at
  // the first still has them at the second (tables go only with their topic), and ours are in
  // both.
  std::size_t both = 0;
  for (const TopicInfo& t : topics) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) continue;
    ++both;
    if (t.has_tables) EXPECT_TRUE(it->second) << t.name;
    if (t.name == unused || t.name == used) EXPECT_EQ(it->second, t.has_tables) << t.name;
  }
  EXPECT_GE(both, 2u);
  c->drop_topic(unused);
  c->drop_topic(used);
}

// `txmq metrics`: unused topics have no series and are counted, even when named; --topics names
// the topics that always have series (others only when among the busiest: Metrics tests);
// promtool's checks are made by the Metrics tests on the same exposition's format.
TEST(FirstUse, MetricsLeaveOutUnusedTopics) {
  auto c = client("first-use-metrics");
  const std::string unused = topic_for_test("unused");
  const std::string used = topic_for_test("used");
  c->create_topic(unused, {}, TableCreation::kAtFirstUse);
  c->create_topic(used, {}, TableCreation::kAtFirstUse);
  c->send(used, "counted");
  test::ProcessResult all = test::run_txmq({"metrics", "--topics", unused + "|" + used});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find(fmt::format("txmq_messages_ready{{topic=\"{}\",group=\"default\"}} 1", used)),
            std::string::npos);
  EXPECT_EQ(all.out.find(fmt::format("topic=\"{}\"", unused)), std::string::npos);
  EXPECT_NE(all.out.find("txmq_metrics_topics{state=\"unused\"}"), std::string::npos);
  test::ProcessResult only =
      test::run_txmq({"metrics", "--topics", unused + "|nothing_else", "--busiest", "0"});
  ASSERT_EQ(only.exit_code, 0) << only.err;
  EXPECT_EQ(only.out.find(fmt::format("topic=\"{}\"", used)), std::string::npos);
  EXPECT_NE(only.out.find("txmq_metrics_topics{state=\"exported\"} 0"), std::string::npos);
  test::ProcessResult bad = test::run_txmq({"metrics", "--topics", "(unclosed"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("not a regular expression"), std::string::npos) << bad.err;
  c->drop_topic(unused);
  c->drop_topic(used);
}

}  // namespace
}  // namespace txmq
