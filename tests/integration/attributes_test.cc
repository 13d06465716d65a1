// What the SQS server needs of the library (schema 6): message attributes through every path,
// the first receive's time, purge, forgetting dedup keys, max_attempts 0 and dead-letter topics.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include <fmt/format.h>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;

Attributes sample_attributes() {
  return {{"text", {"String", "h\xc3\xa9llo & <x>"}},
          {"count", {"Number.int", "42"}},
          {"raw", {"Binary", std::string("\0\x01\xff", 3)}}};
}

OutgoingMessage with_attributes(std::string payload, Attributes a, std::optional<std::string> key = {}) {
  OutgoingMessage m;
  m.payload = std::move(payload);
  m.attributes = std::move(a);
  m.key = std::move(key);
  return m;
}

std::vector<Message> receive_all(Client& c, const std::string& topic, int expected,
                                 ReceiveOptions options = {}) {
  options.max_messages = 100;
  std::vector<Message> out;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (static_cast<int>(out.size()) < expected && std::chrono::steady_clock::now() < deadline) {
    options.wait = 200ms;
    for (Message& m : c.receive(topic, options)) out.push_back(std::move(m));
  }
  return out;
}

TEST(Attributes, RoundTripThroughSendsBatchesTransactionsAndKeys) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const Attributes a = sample_attributes();
  c->send(topic, "single", {.attributes = a});
  c->send(topic, "plain");
  c->send(topic, "keyed", {.key = "k", .attributes = a});
  std::vector<OutgoingMessage> batch = {with_attributes("b1", a), with_attributes("b2", {}),
                                        with_attributes("b3", {{"only", {"String", "one"}}}, "k")};
  c->send_batch(topic, batch);
  c->transact([&](Transaction& t) { t.send(topic, "in-transaction", {.attributes = a}); });

  std::map<std::string, Attributes> got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.size() < 7 && std::chrono::steady_clock::now() < deadline) {
    for (const Message& m : c->receive(topic, {.max_messages = 100, .wait = 200ms})) {
      got[m.payload] = m.attributes;
      EXPECT_EQ(m.attempt, 1);
      // The first receive is this one: its time is the claim's, after the send.
      EXPECT_GE(m.first_received_at, m.enqueued_at);
      EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);  // lets the parked "b3" in
    }
  }
  ASSERT_EQ(got.size(), 7u);
  EXPECT_EQ(got["single"], a);
  EXPECT_TRUE(got["plain"].empty());
  EXPECT_EQ(got["keyed"], a);
  EXPECT_EQ(got["b1"], a);
  EXPECT_TRUE(got["b2"].empty());
  EXPECT_EQ(got["b3"].at("only").value, "one");  // parked behind "keyed", then moved in
  EXPECT_EQ(got["in-transaction"], a);
}

TEST(Attributes, CountTowardTheSizeLimitAndAreChecked) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {.max_payload_bytes = 100});
  // 90 bytes of payload + "n" + "String" + 3 bytes = 100: at the limit.
  c->send(topic, std::string(90, 'x'), {.attributes = {{"n", {"String", "abc"}}}});
  try {
    c->send(topic, std::string(90, 'x'), {.attributes = {{"n", {"String", "abcd"}}}});
    FAIL() << "over the limit with attributes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("attributes"), std::string::npos) << e.what();
  }
  for (const std::string& bad : std::vector<std::string>{"", "has space", "semi;colon", std::string(257, 'a')}) {
    EXPECT_THROW(c->send(topic, "x", {.attributes = {{bad, {"String", "v"}}}}), Error) << bad;
  }
  EXPECT_THROW(c->send(topic, "x", {.attributes = {{"n", {"", "v"}}}}), Error);
  Attributes many;
  for (int i = 0; i < 65; ++i) many[fmt::format("a{}", i)] = {"String", "v"};
  EXPECT_THROW(c->send(topic, "x", {.attributes = many}), Error);
  many.erase("a64");
  TopicOptions big;
  big.max_payload_bytes = 1 << 20;
  c->update_topic(topic, big);
  std::this_thread::sleep_for(5100ms);  // other clients' caches: this one forgot at once
  c->send(topic, "x", {.attributes = many});
}

TEST(Attributes, KeptByDeadLettersRequeueExactlyOnceAndTheArchive) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {.max_attempts = 1, .archive = 3600s});
  const Attributes a = sample_attributes();
  c->send(topic, "dies", {.attributes = a});
  auto first = receive_all(*c, topic, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(c->nack(topic, first[0].receipt, 0us), Settle::kOk);
  auto dead = c->dead_letters(topic);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].attributes, a);
  EXPECT_EQ(c->requeue_dead(topic), 1u);
  std::size_t processed = c->process(topic, {.max_messages = 10, .wait = 2s},
                                     [&](Transaction&, std::span<const Message> ms) {
                                       ASSERT_EQ(ms.size(), 1u);
                                       EXPECT_EQ(ms[0].attributes, a);
                                     });
  EXPECT_EQ(processed, 1u);
  auto archived = c->archived(topic);
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].attributes, a);
}

TEST(Attributes, CopiedToEveryGroup) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {.partitions = 2});
  c->create_group(topic, "audit");
  const Attributes a = sample_attributes();
  c->send(topic, "fan-out", {.attributes = a});
  ReceiveOptions audit;
  audit.group = "audit";
  auto in_audit = receive_all(*c, topic, 1, audit);
  auto in_default = receive_all(*c, topic, 1);
  ASSERT_EQ(in_audit.size(), 1u);
  ASSERT_EQ(in_default.size(), 1u);
  EXPECT_EQ(in_audit[0].attributes, a);
  EXPECT_EQ(in_default[0].attributes, a);
}

TEST(Purge, RemovesReadyInFlightDelayedAndParkedAndKeysMoveOn) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  for (int i = 0; i < 5; ++i) c->send(topic, fmt::format("ready{}", i));
  c->send(topic, "delayed", {.delay = 3600s});
  c->send(topic, "head", {.key = "k"});
  c->send(topic, "parked", {.key = "k"});
  auto in_flight = c->receive(topic, {.max_messages = 2});
  ASSERT_EQ(in_flight.size(), 2u);
  EXPECT_EQ(c->purge(topic), 8u);
  const TopicStats s = c->stats(topic);
  EXPECT_EQ(s.ready + s.in_flight + s.delayed + s.waiting_on_key, 0u);
  EXPECT_EQ(c->ack(topic, in_flight[0].receipt), Settle::kNotFound);
  // A keyed send after the purge is not held behind the purged head.
  c->send(topic, "after", {.key = "k"});
  auto after = receive_all(*c, topic, 1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].payload, "after");
}

TEST(Purge, ForgettingDedupKeysMakesTheSameKeyANewMessage) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const auto first = c->send(topic, "a", {.dedup_key = "d"});
  EXPECT_EQ(c->send(topic, "a", {.dedup_key = "d"}), first);
  c->forget_dedup_keys(topic);
  EXPECT_NE(c->send(topic, "a", {.dedup_key = "d"}), first);
}

TEST(DeadLetterTopic, MovesExhaustedMessagesWithAttributesAndOrigin) {
  auto c = client();
  const std::string source = topic_for_test("src");
  const std::string target = topic_for_test("dlq");
  c->create_topic(target);
  c->create_topic(source, {.max_attempts = 2, .retry = {.initial = 0us, .max = 0us},
                           .dead_letter_topic = target});
  const Attributes a = sample_attributes();
  const auto id = c->send(source, "poison", {.key = "k", .attributes = a});
  c->send(source, "next", {.key = "k"});
  for (int i = 0; i < 2; ++i) {
    auto got = receive_all(*c, source, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payload, "poison");
    c->nack(source, got[0].receipt, 0us);
  }
  auto moved = receive_all(*c, target, 1);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].payload, "poison");
  EXPECT_EQ(moved[0].attributes, a);
  ASSERT_TRUE(moved[0].dead_lettered_from.has_value());
  EXPECT_EQ(moved[0].dead_lettered_from->topic, source);
  EXPECT_EQ(moved[0].dead_lettered_from->id, id);
  EXPECT_TRUE(c->dead_letters(source).empty());
  // The key moved on in the source.
  auto next = receive_all(*c, source, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, "next");
  // The target cannot be dropped while a topic names it; itself is refused as a target.
  EXPECT_THROW(c->drop_topic(target), Error);
  TopicOptions self = c->topic(source).options;
  self.dead_letter_topic = source;
  EXPECT_THROW(c->update_topic(source, self), Error);
}

TEST(DeadLetterTopic, MaxAttemptsZeroNeverDeadLetters) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {.max_attempts = 0, .retry = {.initial = 0us, .max = 0us}});
  c->send(topic, "forever");
  for (int i = 0; i < 12; ++i) {
    auto got = receive_all(*c, topic, 1);
    ASSERT_EQ(got.size(), 1u) << "delivery " << i + 1;
    EXPECT_EQ(got[0].attempt, i + 1);
    c->nack(topic, got[0].receipt, 0us);
  }
  EXPECT_TRUE(c->dead_letters(topic).empty());
}

TEST(Retention, MessagesOlderThanTheTopicKeepsAreDeletedNotDelivered) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {.retention = 1s});
  c->send(topic, "old", {.key = "k"});
  c->send(topic, "old-parked", {.key = "k"});
  std::this_thread::sleep_for(1200ms);
  c->send(topic, "fresh");
  c->send(topic, "fresh-keyed", {.key = "k"});
  std::set<std::string> got;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    for (const Message& m : c->receive(topic, {.max_messages = 10, .wait = 200ms})) {
      got.insert(m.payload);
      c->ack(topic, m.receipt);
    }
  }
  // The expired head let its key move on; the parked one expired too.
  EXPECT_EQ(got, (std::set<std::string>{"fresh", "fresh-keyed"}));
  EXPECT_TRUE(c->receive(topic, {.max_messages = 10}).empty());
  EXPECT_TRUE(c->dead_letters(topic).empty());
}

}  // namespace
}  // namespace txmq
