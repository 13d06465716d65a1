// Deleting dead letters (Client::delete_dead): by id across partitions, per group, all at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;

// Receives and nacks every ready message of the group once: with max_attempts 1, each goes to
// the group's dead letters. Returns their ids.
std::vector<std::uint64_t> kill_all(Client& c, const std::string& topic, const std::string& group,
                                    std::size_t want) {
  std::vector<std::uint64_t> ids;
  for (int round = 0; round < 50 && ids.size() < want; ++round) {
    for (const Message& m :
         c.receive(topic, ReceiveOptions{.max_messages = 100, .wait = 1s, .group = group})) {
      EXPECT_EQ(c.nack(topic, m.receipt, 0s), Settle::kOk);
      ids.push_back(m.id);
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::set<std::uint64_t> dead_ids(Client& c, const std::string& topic, const std::string& group) {
  std::set<std::uint64_t> out;
  for (const DeadLetter& d : c.dead_letters(topic, 1000, group)) out.insert(d.id);
  return out;
}

TEST(DeadLetters, DeleteByIdAcrossPartitionsLeavesTheRestAndOtherGroups) {
  auto c = client("dead-letters");
  const std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.max_attempts = 1, .partitions = 3});
  ASSERT_TRUE(c->create_group(name, "audit"));
  for (int i = 0; i < 9; ++i) c->send(name, "m" + std::to_string(i));

  const std::vector<std::uint64_t> ids = kill_all(*c, name, "default", 9);
  ASSERT_EQ(ids.size(), 9u);
  ASSERT_EQ(kill_all(*c, name, "audit", 9), ids);
  ASSERT_EQ(c->stats(name).dead, 9u);
  std::set<unsigned> partitions;
  for (std::uint64_t id : ids) partitions.insert(static_cast<unsigned>(id >> 48));
  EXPECT_GT(partitions.size(), 1u);  // the ids to delete live in several tables

  // Three of them, one id twice, plus an id that is no dead letter: three go.
  const std::vector<std::uint64_t> doomed = {ids[0], ids[4], ids[8], ids[4], 999999999};
  EXPECT_EQ(c->delete_dead(name, doomed), 3u);
  std::set<std::uint64_t> left(ids.begin(), ids.end());
  for (std::uint64_t id : doomed) left.erase(id);
  EXPECT_EQ(dead_ids(*c, name, "default"), left);
  EXPECT_EQ(c->stats(name).dead, 6u);
  EXPECT_EQ(c->stats(name).ready, 0u);  // deleted, not requeued
  // The other group keeps its own copies.
  EXPECT_EQ(c->stats(name, "audit").dead, 9u);

  // Again: nothing left to delete with those ids.
  EXPECT_EQ(c->delete_dead(name, doomed), 0u);

  // Per group: the audit group's copies by id, then all of the default group's at once.
  const std::vector<std::uint64_t> two = {ids[1], ids[2]};
  EXPECT_EQ(c->delete_dead(name, two, "audit"), 2u);
  EXPECT_EQ(c->stats(name, "audit").dead, 7u);
  EXPECT_EQ(c->stats(name).dead, 6u);
  EXPECT_EQ(c->delete_dead(name), 6u);
  EXPECT_EQ(c->stats(name).dead, 0u);
  EXPECT_EQ(c->stats(name, "audit").dead, 7u);

  // A requeued message is no dead letter any more: deleting its id afterwards does nothing.
  const std::vector<std::uint64_t> one = {ids[3]};
  EXPECT_EQ(c->requeue_dead(name, one, "audit"), 1u);
  EXPECT_EQ(c->delete_dead(name, one, "audit"), 0u);
  EXPECT_EQ(c->stats(name, "audit").ready, 1u);
}

// A listing of previews (the dashboard's) reads the first bytes of each payload from the
// server, with the whole size beside them; the lowest ids over all partitions, never more.
TEST(DeadLetters, APreviewListingReadsOnlyTheFirstBytesOfEachPayload) {
  auto c = client("dead-letters");
  const std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.max_attempts = 1, .partitions = 4});
  const std::string big(300'000, 'x');
  for (int i = 0; i < 12; ++i) c->send(name, std::to_string(i % 10) + big);
  c->send(name, "short");
  const std::vector<std::uint64_t> ids = kill_all(*c, name, "default", 13);
  ASSERT_EQ(ids.size(), 13u);

  const std::vector<DeadLetter> previews = c->dead_letters(name, 5, {}, 304);
  ASSERT_EQ(previews.size(), 5u);
  for (std::size_t i = 0; i < previews.size(); ++i) {
    EXPECT_EQ(previews[i].id, ids[i]);  // the five lowest of all four partitions
    const bool small = previews[i].payload_size == 5;
    EXPECT_EQ(previews[i].payload.size(), small ? 5u : 304u);
    if (!small) EXPECT_EQ(previews[i].payload_size, big.size() + 1);
  }
  // Whole payloads by default, their size beside them.
  for (const DeadLetter& d : c->dead_letters(name, 13)) {
    EXPECT_EQ(d.payload.size(), d.payload_size);
    EXPECT_TRUE(d.payload == "short" || d.payload.size() == big.size() + 1);
  }
}

TEST(DeadLetters, DeleteAllTakesMoreThanOneStatement) {
  auto c = client();
  const std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.max_attempts = 1});
  std::vector<OutgoingMessage> batch(1200);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].payload = std::to_string(i);
  const std::uint64_t before = c->stats(name).ids_taken;
  c->send_batch(name, batch);
  // The id counter (the dashboard's send rate) grew by one per message (a topic in shared
  // storage has none of its own).
  if (!c->topic(name).shared_storage) EXPECT_EQ(c->stats(name).ids_taken - before, 1200u);
  for (;;) {
    auto got = c->receive(name, ReceiveOptions{.max_messages = 1000});
    if (got.empty()) break;
    for (const Message& m : got) ASSERT_EQ(c->nack(name, m.receipt, 0s), Settle::kOk);
  }
  ASSERT_EQ(c->stats(name).dead, 1200u);
  EXPECT_EQ(c->delete_dead(name), 1200u);
  EXPECT_EQ(c->stats(name).dead, 0u);
}

TEST(DeadLetters, DeleteInAMissingTopicOrGroupIsNotFound) {
  auto c = client();
  const std::string name = topic_for_test();
  try {
    c->delete_dead(name);
    FAIL() << "expected kNotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kNotFound);
  }
  c->create_topic(name);
  try {
    c->delete_dead(name, {}, "nobody");
    FAIL() << "expected kNotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kNotFound);
  }
}

TEST(DeadLetters, TheCommandDeletesByIdOrAll) {
  auto c = client();
  const std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.max_attempts = 1});
  for (int i = 0; i < 3; ++i) c->send(name, "doomed");
  const std::vector<std::uint64_t> ids = kill_all(*c, name, "default", 3);
  ASSERT_EQ(ids.size(), 3u);

  // Neither ids nor --all: a usage error that deletes nothing; both: refused too.
  EXPECT_EQ(test::run_txmq({"dead", "delete", name}).exit_code, 1);
  EXPECT_EQ(test::run_txmq({"dead", "delete", name, std::to_string(ids[0]), "--all"}).exit_code, 1);
  EXPECT_EQ(c->stats(name).dead, 3u);

  auto r = test::run_txmq({"--json", "dead", "delete", name, std::to_string(ids[0])});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"deleted\":1,\"topic\":\"" + name + "\"}\n");
  // An id that is no dead letter (any more): exit 3, the others deleted.
  r = test::run_txmq({"dead", "delete", name, std::to_string(ids[0]), std::to_string(ids[1])});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "deleted 1 dead letters\n");
  r = test::run_txmq({"dead", "delete", name, "--all"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "deleted 1 dead letters\n");
  EXPECT_EQ(c->stats(name).dead, 0u);
}

}  // namespace
}  // namespace txmq
