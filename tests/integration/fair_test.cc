// Fair topics (TopicOptions::fair): tenants served in turn, with every other guarantee kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;

TopicOptions fair_options() {
  TopicOptions o;
  o.fair = true;
  return o;
}

std::vector<OutgoingMessage> of_tenant(const std::string& tenant, int n) {
  std::vector<OutgoingMessage> out;
  for (int i = 0; i < n; ++i) {
    OutgoingMessage m;
    m.payload = fmt::format("{} {}", tenant, i);
    m.tenant = tenant;
    out.push_back(std::move(m));
  }
  return out;
}

// Receives (and acks) one message at a time until `n` came or nothing is left; their tenants
// in the order received.
std::vector<std::string> drain_tenants(Client& c, const std::string& topic, std::size_t n) {
  std::vector<std::string> order;
  while (order.size() < n) {
    std::vector<Message> got = c.receive(topic);
    if (got.empty()) break;
    order.push_back(got[0].tenant.value_or(""));
    c.ack(topic, got[0].receipt);
  }
  return order;
}

// The noisy neighbour: a tenant's backlog does not hold up a tenant that sends after it. On a
// topic without fairness the quiet messages come after the whole backlog.
TEST(Fair, AQuietTenantIsNotHeldBehindANoisyBacklog) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, fair_options());
  c->send_batch(topic, of_tenant("noisy", 500));
  c->send(topic, "quiet a", {.tenant = "quiet-a"});
  c->send(topic, "quiet b", {.tenant = "quiet-b"});
  std::vector<Message> got = c->receive(topic, {.max_messages = 5});
  std::set<std::string> tenants;
  for (const Message& m : got) tenants.insert(m.tenant.value_or(""));
  EXPECT_TRUE(tenants.contains("quiet-a") && tenants.contains("quiet-b"))
      << "the quiet tenants waited behind the noisy one's backlog";
}

// Tenants with messages waiting are served in turn: the first rounds take one message of each.
TEST(Fair, TenantsWithMessagesWaitingAreServedInTurn) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, fair_options());
  c->send_batch(topic, of_tenant("noisy", 100));
  for (const char* t : {"q1", "q2", "q3"}) c->send_batch(topic, of_tenant(t, 5));
  const std::vector<std::string> order = drain_tenants(*c, topic, 20);
  ASSERT_EQ(order.size(), 20u);
  std::map<std::string, int> count;
  for (const std::string& t : order) ++count[t];
  EXPECT_EQ(count["q1"], 5);
  EXPECT_EQ(count["q2"], 5);
  EXPECT_EQ(count["q3"], 5);
  EXPECT_EQ(count["noisy"], 5);
  // Within a tenant, the order of its sends.
  std::vector<Message> rest = c->receive(topic, {.max_messages = 100});
  ASSERT_EQ(rest.size(), 95u);
  for (std::size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].payload, fmt::format("noisy {}", i + 5));
  }
}

// A tenant that is not fair's: refused, as a key and a tenant on one message, and a change of
// fairness after creation.
TEST(Fair, TenantsAreRefusedWhereTheyHaveNoMeaning) {
  auto c = client();
  const std::string plain = topic_for_test("plain");
  c->create_topic(plain);
  try {
    c->send(plain, "x", {.tenant = "t"});
    FAIL() << "a tenant on a topic without fairness was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
  }
  const std::string fair = topic_for_test("fair");
  c->create_topic(fair, fair_options());
  EXPECT_THROW(c->send(fair, "x", {.key = "k", .tenant = "t"}), Error);
  EXPECT_THROW(c->send(fair, "x", {.tenant = ""}), Error);
  EXPECT_THROW(c->send(fair, "x", {.tenant = std::string(256, 't')}), Error);
  EXPECT_THROW(c->update_topic(fair, TopicOptions{}), Error);
  TopicOptions again = c->topic(fair).options;
  EXPECT_TRUE(again.fair);
  again.max_attempts = 7;
  c->update_topic(fair, again);  // other settings still change
  EXPECT_EQ(c->topic(fair).options.max_attempts, 7);
}

// A topic becomes fair later (an SQS standard queue at its first MessageGroupId): its tables
// gain their columns, messages already there are served first, and fairness holds from then on.
TEST(Fair, APlainTopicBecomesFairAndStaysSo) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions o;
  c->create_topic(topic, o, TableCreation::kNow);  // shared storage is not fair yet
  c->create_group(topic, "audit");
  std::vector<OutgoingMessage> old(20);
  for (int i = 0; i < 20; ++i) old[static_cast<std::size_t>(i)].payload = fmt::format("old {}", i);
  c->send_batch(topic, old);
  std::vector<Message> leased = c->receive(topic, {.max_messages = 2});
  ASSERT_EQ(leased.size(), 2u);
  o.fair = true;
  c->update_topic(topic, o);
  EXPECT_TRUE(c->topic(topic).options.fair);
  c->update_topic(topic, o);  // again: nothing to do
  c->send_batch(topic, of_tenant("noisy", 200));
  c->send(topic, "quiet", {.tenant = "quiet"});
  for (const Message& m : leased) EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
  for (const std::string group : {"default", "audit"}) {
    // The old messages (place 0), then one of each tenant: the quiet one is not behind the 200.
    std::vector<std::string> order;
    for (const Message& m : c->receive(topic, {.max_messages = 25, .group = group})) {
      order.push_back(m.payload);
      EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
    }
    EXPECT_NE(std::find(order.begin(), order.end(), "quiet"), order.end()) << group;
    EXPECT_NE(std::find(order.begin(), order.end(), "old 19"), order.end()) << group;
  }
  o.fair = false;
  EXPECT_THROW(c->update_topic(topic, o), Error);
}

// Messages without a tenant, keyed messages and tenants' messages mix on a fair topic; every one
// is delivered, leases that run out are delivered again, nacks retry, dead letters still happen.
TEST(Fair, EveryMessageIsDeliveredWithLeasesRetriesAndDeadLetters) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions o = fair_options();
  o.max_attempts = 3;
  o.partitions = 2;
  o.retry.initial = std::chrono::milliseconds(0);
  o.retry.max = std::chrono::milliseconds(0);
  o.retry.jitter = 0;
  c->create_topic(topic, o);
  std::set<std::string> sent;
  for (int t = 0; t < 4; ++t) {
    auto batch = of_tenant(fmt::format("t{}", t), 50);
    for (const auto& m : batch) sent.insert(m.payload);
    c->send_batch(topic, batch);
  }
  for (int i = 0; i < 20; ++i) {
    const std::string p = fmt::format("plain {}", i);
    c->send(topic, p);
    sent.insert(p);
    const std::string k = fmt::format("keyed {}", i);
    c->send(topic, k, {.key = fmt::format("k{}", i % 3)});
    sent.insert(k);
  }
  c->send(topic, "doomed", {.tenant = "t0"});

  // One lease runs out unsettled, one message is nacked: both come back.
  std::vector<Message> first = c->receive(topic, {.max_messages = 2, .lease = 300ms});
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(c->nack(topic, first[1].receipt), Settle::kOk);
  std::this_thread::sleep_for(400ms);

  std::set<std::string> received;
  std::map<std::string, int> doomed_attempts;
  for (int rounds = 0; rounds < 200 && received.size() < sent.size(); ++rounds) {
    std::vector<Message> got = c->receive(topic, {.max_messages = 25, .lease = 300ms});
    if (got.empty()) {
      std::this_thread::sleep_for(100ms);
      continue;
    }
    for (const Message& m : got) {
      if (m.payload == "doomed") {
        ++doomed_attempts["doomed"];
        continue;  // never acked: its lease runs out, until it is dead-lettered
      }
      if (m.payload.starts_with("t")) {
        EXPECT_EQ(m.tenant, m.payload.substr(0, 2));
      } else {
        EXPECT_FALSE(m.tenant.has_value());
      }
      received.insert(m.payload);
      EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
    }
  }
  EXPECT_EQ(received, sent);
  // The doomed message is delivered max_attempts times, then dead-lettered.
  for (int rounds = 0; rounds < 30 && c->dead_letters(topic).empty(); ++rounds) {
    std::this_thread::sleep_for(350ms);
    for (const Message& m : c->receive(topic, {.max_messages = 5, .lease = 300ms})) {
      EXPECT_EQ(m.payload, "doomed");
      ++doomed_attempts["doomed"];
    }
  }
  const std::vector<DeadLetter> dead = c->dead_letters(topic);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].payload, "doomed");
  EXPECT_EQ(doomed_attempts["doomed"], 3);
}

// A second consumer group gets every message, with its tenants and in fair order too.
TEST(Fair, ConsumerGroupsEachGetTheFairOrder) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, fair_options());
  c->create_group(topic, "audit");
  c->send_batch(topic, of_tenant("noisy", 50));
  c->send(topic, "quiet", {.tenant = "quiet"});
  for (const std::string group : {"default", "audit"}) {
    std::vector<Message> got = c->receive(topic, {.max_messages = 3, .group = group});
    bool quiet = false;
    for (const Message& m : got) quiet = quiet || m.tenant == std::optional<std::string>("quiet");
    EXPECT_TRUE(quiet) << group;
  }
}

// Messages without a tenant come first, by id, and the claim starts them at its scan hint, as
// on a plain topic; those left below the hint (a lease ran out, another client's nack) come
// back at the next sweep, within a second. Sends from another client are seen at once.
TEST(Fair, MessagesWithoutATenantComeFirstAndAreFoundBelowTheScanHint) {
  auto consumer = client();
  auto producer = client();
  const std::string topic = topic_for_test();
  TopicOptions o = fair_options();
  o.retry.initial = std::chrono::milliseconds(0);  // a lease that runs out: claimable at once
  o.retry.max = std::chrono::milliseconds(0);
  o.retry.jitter = 0;
  consumer->create_topic(topic, o);
  producer->send_batch(topic, of_tenant("t", 5));
  for (int i = 0; i < 30; ++i) producer->send(topic, fmt::format("plain {:02}", i));

  std::vector<std::string> order;
  const auto take = [&](int n, Micros lease, bool ack) {
    std::vector<Message> got = consumer->receive(topic, {.max_messages = n, .lease = lease});
    for (const Message& m : got) {
      order.push_back(m.payload);
      if (ack) EXPECT_EQ(consumer->ack(topic, m.receipt), Settle::kOk);
    }
    return got.size();
  };
  ASSERT_EQ(take(10, 3s, false), 10u);  // in flight, then left to run out
  ASSERT_EQ(take(20, 30s, true), 20u);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(order[i], fmt::format("plain {:02}", i));
  producer->send(topic, "plain late");  // another client's send: above the hint, seen at once
  ASSERT_EQ(take(1, 30s, true), 1u);
  EXPECT_EQ(order.back(), "plain late");
  ASSERT_EQ(take(2, 30s, true), 2u);  // then the tenant's, the plain ones being in flight
  EXPECT_EQ(order.back(), "t 1");

  std::this_thread::sleep_for(3100ms);  // the leases ran out, and a sweep is due
  ASSERT_EQ(take(10, 30s, true), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(order[33 + i], fmt::format("plain {:02}", i));
  ASSERT_EQ(take(10, 30s, true), 3u);
  EXPECT_EQ(take(10, 30s, true), 0u);
  EXPECT_EQ(order.size(), 46u);
}

// DESIGN.md: a fair claim walks its index in order and stops after LIMIT rows (no filesort,
// which would lock every row it sorted).
TEST(Plan, FairClaimWalksTheFairOrder) {
  auto c = client();
  const std::string name = topic_for_test();
  c->create_topic(name, fair_options());
  c->send_batch(name, of_tenant("noisy", 2000));
  for (int i = 0; i < 20; ++i) c->send(name, "no tenant");
  auto a = test::admin();
  const std::string claim = fmt::format(
      "SELECT id FROM `txmq_q_{}` FORCE INDEX (fair_order) WHERE (fair_seq = 0 AND id >= 5 OR "
      "fair_seq > 0) AND visible_at <= NOW(6) ORDER BY fair_seq, id LIMIT 10 FOR UPDATE SKIP "
      "LOCKED",
      name);
  if (a->server().mysql) {
    internal::Result r = a->execute("EXPLAIN FORMAT=TREE " + claim, {});
    ASSERT_EQ(r.rows.size(), 1u);
    const std::string& plan = r.rows[0].bytes(0);
    EXPECT_NE(plan.find("fair_order"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("Sort"), std::string::npos) << plan;
    return;
  }
  internal::Result r = a->execute("EXPLAIN " + claim, {});
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].bytes(5), "fair_order");
  EXPECT_EQ(r.rows[0].bytes(9).find("filesort"), std::string::npos) << r.rows[0].bytes(9);
}

}  // namespace
}  // namespace txmq
