// A topic's own send, txmq_send_to_<topic> (docs/sql.md, "The fast send"): made with the topic,
// remade when its layout changes (partitions, shard map, payload limit), correct while stale (a
// change of groups drops the send fence it names, and it hands the call to txmq_send), in the
// caller's transaction, dropped with the topic; grants on it survive a remake.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace txmq::test {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

std::uint64_t send_to(internal::Connection& c, const std::string& topic,
                      const std::string& payload, const std::string& options = "NULL") {
  internal::Result r = c.query_rows(
      fmt::format("CALL txmq_send_to_{}('{}', {})", topic, payload, options));
  if (r.rows.size() != 1) throw std::runtime_error("no id");
  return r.rows[0].u64(0);
}

bool procedure_exists(internal::Connection& a, const std::string& topic) {
  return a.execute("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = "
                   "DATABASE() AND ROUTINE_NAME = ?",
                   {"txmq_send_to_" + topic})
             .rows.at(0)
             .i64(0) == 1;
}

std::int64_t rows_in(internal::Connection& a, const std::string& table) {
  return a.execute(fmt::format("SELECT COUNT(*) FROM `{}`", table), {}).rows.at(0).i64(0);
}

TEST(SqlSendTo, EveryTopicHasItsOwnSendThatFollowsItsLayout) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  ASSERT_TRUE(lib->create_topic(topic));
  ASSERT_TRUE(procedure_exists(*a, topic));

  // The fast path: the library receives what it sent, with the id it answered.
  const std::uint64_t id = send_to(*a, topic, "fast");
  std::vector<Message> got = lib->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id);
  EXPECT_EQ(got[0].payload, "fast");
  lib->ack(topic, got[0].receipt);

  // Options go through txmq_send: a key, a delay.
  send_to(*a, topic, "keyed", "'{\"key\": \"k1\"}'");
  got = lib->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key.value_or(""), "k1");
  lib->ack(topic, got[0].receipt);

  // A second group: the stale text's INSERT finds no send fence and hands over; both groups get
  // every message.
  lib->create_group(topic, "second");
  send_to(*a, topic, "both");
  EXPECT_EQ(lib->receive(topic).size(), 1u);
  EXPECT_EQ(lib->receive(topic, {.group = "second"}).size(), 1u);
  lib->drop_group(topic, "second");

  // Three partitions: the remade text spreads unkeyed sends over them.
  TopicOptions three;
  three.partitions = 3;
  lib->update_topic(topic, three);
  lib->purge(topic);
  for (int i = 0; i < 60; ++i) send_to(*a, topic, "spread");
  int used = 0;
  for (int p = 0; p < 3; ++p) {
    const std::string table = p == 0 ? "txmq_q_" + topic : fmt::format("txmq_q_{}$0_{}", topic, p);
    if (rows_in(*a, table) > 0) ++used;
  }
  EXPECT_EQ(used, 3) << "60 sends over 3 partitions";

  // A lower payload limit is in the remade text, and its message is txmq_send's.
  three.max_payload_bytes = 10;
  lib->update_topic(topic, three);
  try {
    send_to(*a, topic, "more than ten bytes");
    ADD_FAILURE() << "a payload over the limit was sent";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("over topic"), std::string::npos) << e.what();
  }
  EXPECT_GT(send_to(*a, topic, "ten bytes"), 0u);

  lib->drop_topic(topic);
  EXPECT_FALSE(procedure_exists(*a, topic));
}

std::vector<std::uint64_t> batch_to(internal::Connection& c, const std::string& topic,
                                    const std::string& messages) {
  std::vector<std::uint64_t> ids;
  for (const internal::Row& row :
       c.query_rows(fmt::format("CALL txmq_batch_to_{}('{}')", topic, messages)).rows) {
    ids.push_back(row.u64(0));
  }
  return ids;
}

// The topic's own batch, txmq_batch_to_<topic>: strings in one INSERT with their ids in order;
// anything else (objects, a payload over the limit, a stale layout) through txmq_send_batch,
// with its errors.
TEST(SqlSendTo, TheTopicsBatchSendsInOrderAndHandsOverTheRest) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.max_payload_bytes = 100;
  ASSERT_TRUE(lib->create_topic(topic, options));
  std::string strings = "[";
  for (int i = 0; i < 500; ++i) strings += fmt::format("{}\"m{}\"", i == 0 ? "" : ",", i);
  strings += "]";
  const std::vector<std::uint64_t> ids = batch_to(*a, topic, strings);
  ASSERT_EQ(ids.size(), 500u);
  std::vector<Message> got = lib->receive(topic, {.max_messages = 1000});
  ASSERT_EQ(got.size(), 500u);
  std::map<std::uint64_t, std::string> by_id;
  for (const Message& m : got) by_id[m.id] = m.payload;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(by_id[ids[i]], fmt::format("m{}", i)) << "id " << ids[i];
  }
  for (const Message& m : got) lib->ack(topic, m.receipt);

  // Objects, and a text that is no array: txmq_send_batch's path and errors.
  EXPECT_EQ(batch_to(*a, topic, R"(["a", {"payload": "b", "key": "k"}])").size(), 2u);
  for (const std::string bad : {std::string(R"("just a string")"), std::string("[1]"),
                                std::string("[\"a\""), std::string("[]"),
                                fmt::format("[\"{}\"]", std::string(101, 'x'))}) {
    try {
      batch_to(*a, topic, bad);
      ADD_FAILURE() << "sent: " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("txmq: "), std::string::npos) << e.what();
    }
  }
  // Exactly at the limit, in two-byte characters.
  std::string at_limit(90, 'y');
  for (int i = 0; i < 5; ++i) at_limit += "\xc3\xbc";  // ü
  EXPECT_EQ(batch_to(*a, topic, fmt::format("[\"{}\"]", at_limit)).size(), 1u);

  // A second group: the stale text hands over, both groups get them.
  lib->purge(topic);
  lib->create_group(topic, "second");
  EXPECT_EQ(batch_to(*a, topic, R"(["x", "y"])").size(), 2u);
  EXPECT_EQ(lib->receive(topic, {.max_messages = 10}).size(), 2u);
  EXPECT_EQ(lib->receive(topic, {.max_messages = 10, .group = "second"}).size(), 2u);
  lib->drop_topic(topic);
  EXPECT_EQ(a->execute("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = "
                       "DATABASE() AND ROUTINE_NAME = ?",
                       {"txmq_batch_to_" + topic})
                .rows.at(0)
                .i64(0),
            0);
}

TEST(SqlSendTo, CommitsAndRollsBackWithTheCallersTransaction) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  ASSERT_TRUE(lib->create_topic(topic));
  a->begin();
  send_to(*a, topic, "rolled back");
  a->rollback();
  a->begin();
  send_to(*a, topic, "committed");
  a->commit();
  std::vector<Message> got = lib->receive(topic, {.max_messages = 10});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "committed");
  lib->drop_topic(topic);
}

// The fence under load: senders call the topic's own send while a group is created. Every
// message whose CALL began after create_group returned is in the new group too.
TEST(SqlSendTo, NoSendMissesAGroupCreatedWhileItRuns) {
  auto lib = client();
  const std::string topic = topic_for_test();
  ASSERT_TRUE(lib->create_topic(topic));
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<std::pair<SteadyClock::time_point, std::uint64_t>> sent;
  std::vector<std::thread> senders;
  for (int t = 0; t < 3; ++t) {
    senders.emplace_back([&] {
      auto c = admin();
      while (!stop) {
        const auto began = SteadyClock::now();
        const std::uint64_t id = send_to(*c, topic, "x");
        std::lock_guard lock(mutex);
        sent.emplace_back(began, id);
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  lib->create_group(topic, "late", GroupStart::kNow);
  const auto created = SteadyClock::now();
  std::this_thread::sleep_for(500ms);
  stop = true;
  for (std::thread& t : senders) t.join();

  auto a = admin();
  std::set<std::uint64_t> in_late;
  for (const internal::Row& row :
       a->execute(fmt::format("SELECT id FROM `txmq_q_{}$1_0`", topic), {}).rows) {
    in_late.insert(row.u64(0));
  }
  int after = 0;
  for (const auto& [began, id] : sent) {
    if (began <= created) continue;
    ++after;
    EXPECT_TRUE(in_late.count(id) == 1) << "message " << id << " missed the new group";
  }
  EXPECT_GT(after, 10);
  lib->drop_topic(topic);
}

// An application granted EXECUTE on the topic's own send keeps it when a change remakes it
// (MariaDB replaces it in place; MySQL drops and creates it, and grants it again).
TEST(SqlSendTo, AGrantOnItSurvivesARemake) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  ASSERT_TRUE(lib->create_topic(topic));
  const std::string user = "txmq_send_to_app";
  a->query(fmt::format("DROP USER IF EXISTS '{}'@'localhost'", user));
  a->query(fmt::format("CREATE USER '{}'@'localhost' IDENTIFIED BY 'app-Pw-1'", user));
  const std::string database = a->execute("SELECT DATABASE()", {}).rows.at(0).bytes(0);
  a->query(fmt::format("GRANT EXECUTE ON PROCEDURE `{}`.txmq_send_to_{} TO '{}'@'localhost'",
                       database, topic, user));
  TopicOptions limit;
  limit.max_payload_bytes = 1000;
  lib->update_topic(topic, limit);  // a new text: remade

  const std::string dsn = test::dsn();
  const std::string app_dsn = dsn.substr(0, dsn.find("://") + 3) + user + ":app-Pw-1@" +
                              dsn.substr(dsn.find('@') + 1);
  internal::Connection app(internal::parse_dsn(app_dsn));
  EXPECT_GT(send_to(app, topic, "granted"), 0u);
  // Too big for the new limit: the text is the new one.
  EXPECT_THROW(send_to(app, topic, std::string(1001, 'x')), Error);
  a->query(fmt::format("DROP USER '{}'@'localhost'", user));
  lib->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test
