// Topics in shared storage (TableCreation::kShared, docs/design/shared-queues.md): no tables
// of their own, their rows in txmq_sh_* under their own numbers. What only shared storage has
// is tested here; the features they share with other topics run in CTest's shared/ run of the
// suite (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "support.h"

namespace txmq {
namespace {

using test::client;
using test::topic_for_test;

std::int64_t count(const std::string& sql) {
  return test::admin()->execute(sql, {}).rows.at(0).i64(0);
}

std::int64_t tables_in_database() {
  return count(
      "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()");
}

// Rows of the topic's group 0, partition 0 in a shared table ("q", "dlq", "k", "kp"), or of the
// whole topic ("dd", "a").
std::int64_t rows_of(const std::string& topic, std::string_view kind) {
  const test::TopicRows r = test::topic_rows(topic, kind);
  return count(fmt::format("SELECT COUNT(*) FROM {} WHERE {}", r.table, r.where));
}

std::vector<OutgoingMessage> payloads(const std::string& prefix, int n) {
  std::vector<OutgoingMessage> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)].payload = fmt::format("{}{}", prefix, i);
  return out;
}

// Creating and dropping shared topics runs no DDL: the database's tables stay as they are, and
// each create is a few catalog writes.
TEST(Shared, CreateAndDropMakeNoTables) {
  auto c = client();
  const std::string base = topic_for_test();
  c->create_topic(base + "_0", {}, TableCreation::kShared);  // the catalog's tables exist now
  const std::int64_t before = tables_in_database();
  std::vector<double> create_ms;
  for (int i = 1; i <= 20; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(c->create_topic(fmt::format("{}_{}", base, i), {}, TableCreation::kShared));
    create_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  EXPECT_EQ(tables_in_database(), before);
  const TopicInfo info = c->topic(base + "_3");
  EXPECT_TRUE(info.shared_storage);
  EXPECT_TRUE(info.has_tables);  // it can hold messages
  // The same create again: it exists with the same settings.
  EXPECT_FALSE(c->create_topic(base + "_3", {}, TableCreation::kShared));
  for (int i = 0; i <= 20; ++i) c->drop_topic(fmt::format("{}_{}", base, i));
  EXPECT_EQ(tables_in_database(), before);
  std::sort(create_ms.begin(), create_ms.end());
  std::printf("shared create: p50 %.2f ms, max %.2f ms\n", create_ms[create_ms.size() / 2],
              create_ms.back());
}

// Two shared topics keep their messages apart; dropping one deletes its rows (waiting, in
// flight, dead, parked, dedup keys, archive) and leaves the other's.
TEST(Shared, TopicsKeepTheirRowsApartAndADropDeletesOnlyItsOwn) {
  auto c = client();
  const std::string a = topic_for_test("_a");
  const std::string b = topic_for_test("_b");
  TopicOptions o;
  o.max_attempts = 1;
  o.archive = std::chrono::hours(1);
  for (const std::string& t : {a, b}) ASSERT_TRUE(c->create_topic(t, o, TableCreation::kShared));
  c->send_batch(a, payloads("a", 30));
  c->send_batch(b, payloads("b", 20));
  // Keys, dedup keys, a dead letter and an archived message in a.
  c->send(a, "k1", {.key = "k"});
  c->send(a, "k2", {.key = "k"});
  c->send(a, "d", {.dedup_key = "once"});
  std::vector<Message> got = c->receive(b, ReceiveOptions{.max_messages = 100});
  ASSERT_EQ(got.size(), 20u);
  for (const Message& m : got) EXPECT_EQ(m.payload[0], 'b');
  got = c->receive(a, ReceiveOptions{.max_messages = 2});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(c->ack(a, got[0].receipt), Settle::kOk);  // archived
  EXPECT_EQ(c->nack(a, got[1].receipt), Settle::kOk);  // past max attempts: dead
  EXPECT_EQ(c->stats(a).dead, 1u);
  EXPECT_EQ(rows_of(a, "k"), 1);
  EXPECT_EQ(rows_of(a, "kp"), 1);
  EXPECT_EQ(rows_of(a, "dd"), 1);
  EXPECT_EQ(rows_of(a, "a"), 1);
  EXPECT_EQ(rows_of(a, "dlq"), 1);
  const test::TopicRows rows_a = test::topic_rows(a, "q");
  const test::TopicRows dd_a = test::topic_rows(a, "dd");
  c->drop_topic(a);
  // Its sid's rows are gone from every shared table (checked by the numbers it had).
  EXPECT_EQ(count(fmt::format("SELECT COUNT(*) FROM {} WHERE {}", rows_a.table, rows_a.where)), 0);
  for (std::string_view kind : {"dlq", "k", "kp"}) {
    EXPECT_EQ(count(fmt::format("SELECT COUNT(*) FROM `txmq_sh_{}` WHERE {}", kind, rows_a.where)), 0)
        << kind;
  }
  for (std::string_view kind : {"dd", "a"}) {
    EXPECT_EQ(count(fmt::format("SELECT COUNT(*) FROM `txmq_sh_{}` WHERE {}", kind, dd_a.where)), 0)
        << kind;
  }
  EXPECT_EQ(count("SELECT COUNT(*) FROM txmq_dropped"), 0);
  // b's in-flight messages are still b's to settle.
  std::vector<std::string> receipts;
  for (const Message& m : got) receipts.push_back(m.receipt);
  for (const Message& m : c->receive(b, ReceiveOptions{.max_messages = 1})) receipts.push_back(m.receipt);
  EXPECT_EQ(rows_of(b, "q"), 20);
  // A topic made again under a dropped name is a new topic: a new number, none of the old rows.
  ASSERT_TRUE(c->create_topic(a, o, TableCreation::kShared));
  EXPECT_NE(test::topic_rows(a, "q").where, rows_a.where);
  EXPECT_TRUE(c->receive(a, ReceiveOptions{.max_messages = 10}).empty());
  EXPECT_EQ(c->stats(a).dead, 0u);
  // The dedup key is free again in the new topic.
  const std::uint64_t id = c->send(a, "again", {.dedup_key = "once"});
  EXPECT_EQ(c->send(a, "again", {.dedup_key = "once"}), id);
}

// Dead letters move between storages in both directions (RedrivePolicy between a shared queue
// and a dedicated one).
TEST(Shared, DeadLettersCrossBetweenStorages) {
  auto c = client();
  // The sources first: topic_for_test drops a name left by an earlier run, and a dead-letter
  // topic cannot go before the topics that name it.
  const std::string from_shared = topic_for_test("_fs");
  const std::string from_own = topic_for_test("_fo");
  const std::string shared_dlq = topic_for_test("_sdlq");
  const std::string own_dlq = topic_for_test("_odlq");
  ASSERT_TRUE(c->create_topic(shared_dlq, {}, TableCreation::kShared));
  ASSERT_TRUE(c->create_topic(own_dlq, {}, TableCreation::kNow));
  TopicOptions o;
  o.max_attempts = 1;
  o.dead_letter_topic = own_dlq;
  ASSERT_TRUE(c->create_topic(from_shared, o, TableCreation::kShared));
  o.dead_letter_topic = shared_dlq;
  ASSERT_TRUE(c->create_topic(from_own, o, TableCreation::kNow));
  c->send(from_shared, "s", {.key = "k"});
  c->send(from_own, "o");
  for (const std::string& t : {from_shared, from_own}) {
    std::vector<Message> got = c->receive(t);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(c->nack(t, got[0].receipt), Settle::kOk);
  }
  std::vector<Message> in_own = c->receive(own_dlq);
  ASSERT_EQ(in_own.size(), 1u);
  EXPECT_EQ(in_own[0].payload, "s");
  EXPECT_EQ(in_own[0].key, std::optional<std::string>("k"));
  ASSERT_TRUE(in_own[0].dead_lettered_from.has_value());
  EXPECT_EQ(in_own[0].dead_lettered_from->topic, from_shared);
  std::vector<Message> in_shared = c->receive(shared_dlq);
  ASSERT_EQ(in_shared.size(), 1u);
  EXPECT_EQ(in_shared[0].payload, "o");
  EXPECT_EQ(c->ack(shared_dlq, in_shared[0].receipt), Settle::kOk);
  EXPECT_EQ(c->stats(from_shared).ready + c->stats(from_own).ready, 0u);
}

// A long poll on one shared queue is woken by a send to it, not by sends to its neighbours.
TEST(Shared, ALongPollWakesForItsOwnQueueOnly) {
  auto c = client();
  auto other = client("neighbour");
  const std::string mine = topic_for_test("_m");
  const std::string next = topic_for_test("_n");
  ASSERT_TRUE(c->create_topic(mine, {}, TableCreation::kShared));
  ASSERT_TRUE(c->create_topic(next, {}, TableCreation::kShared));
  other->send(next, "not yours");
  const auto start = std::chrono::steady_clock::now();
  std::vector<Message> got =
      c->receive(mine, ReceiveOptions{.wait = std::chrono::milliseconds(700)});
  EXPECT_TRUE(got.empty());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(600));
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    other->send(mine, "yours");
  });
  got = c->receive(mine, ReceiveOptions{.wait = std::chrono::seconds(10)});
  sender.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "yours");
}

// What shared storage does not take yet is refused with a clear error, not half made; the SQL
// interface says so too.
TEST(Shared, WhatSharedStorageDoesNotTakeYetIsRefusedClearly) {
  auto c = client();
  const std::string name = topic_for_test();
  TopicOptions partitioned;
  partitioned.partitions = 4;
  try {
    c->create_topic(name, partitioned, TableCreation::kShared);
    FAIL() << "a partitioned topic in shared storage was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("shared storage"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(c->create_topic(name, {}, TableCreation::kShared));
  TopicOptions more = c->topic(name).options;
  more.partitions = 2;
  EXPECT_THROW(c->update_topic(name, more), Error);
  EXPECT_EQ(c->topic(name).options.partitions, 1);
  auto sql = test::admin();
  for (const std::string& call :
       {fmt::format("CALL txmq_send('{}', 'x', NULL)", name),
        fmt::format("CALL txmq_take('{}', NULL, 1)", name)}) {
    try {
      sql->begin();
      sql->query(call);
      ADD_FAILURE() << call << " worked";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shared storage"), std::string::npos) << e.what();
    }
    sql->rollback();
  }
}

// The command line makes one, and says which storage a topic has.
TEST(Shared, TheCommandLineCreatesAndShowsOne) {
  const std::string name = topic_for_test();
  test::ProcessResult r = test::run_txmq({"topic", "create", name, "--storage", "shared"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_txmq({"--json", "topic", "show", name});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"storage\":\"shared\""), std::string::npos) << r.out;
  r = test::run_txmq({"send", name, "hello"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_txmq({"topic", "create", topic_for_test("_bad"), "--storage", "elsewhere"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(client()->stats(name).ready, 1u);
}

}  // namespace
}  // namespace txmq
