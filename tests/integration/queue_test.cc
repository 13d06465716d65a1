// The queue's guarantees against a real MariaDB, through the public API.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "db/dsn.h"
#include "util/scope_exit.h"
#include "engine/claim.h"
#include "engine/send.h"
#include "engine/settle.h"
#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;

std::vector<OutgoingMessage> numbered(int n, const std::string& prefix = "m") {
  std::vector<OutgoingMessage> out;
  for (int i = 0; i < n; ++i) out.push_back({fmt::format("{}{}", prefix, i), std::nullopt, {}, {}});
  return out;
}

TEST(Topics, CreateIsIdempotentAndRefusesOtherSettings) {
  auto c = client();
  std::string name = topic_for_test();
  TopicOptions options{.lease = 10s, .max_attempts = 3, .max_payload_bytes = 1000};
  EXPECT_TRUE(c->create_topic(name, options));
  EXPECT_FALSE(c->create_topic(name, options));
  try {
    c->create_topic(name, TopicOptions{.lease = 11s, .max_attempts = 3, .max_payload_bytes = 1000});
    FAIL() << "different settings accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kAlreadyExists);
  }
  TopicInfo info = c->topic(name);
  EXPECT_EQ(info.options, options);
  auto topics = c->list_topics();
  EXPECT_TRUE(std::any_of(topics.begin(), topics.end(), [&](auto& t) { return t.name == name; }));
  c->drop_topic(name);
  EXPECT_THROW(c->topic(name), Error);
  try {
    c->drop_topic(name);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kNotFound);
  }
}

TEST(Topics, BadNamesAreRefusedBeforeAnyStatement) {
  auto c = client();
  const std::vector<std::string> names = {std::string("x; DROP TABLE t"), std::string(""),
                                          std::string(200, 'a'), std::string("UPPER"),
                                          std::string("txmq_topics`; --"), std::string("a\0b", 3)};
  for (const std::string& bad : names) {
    for (auto op : std::vector<std::function<void()>>{
             [&] { c->create_topic(bad); }, [&] { c->send(bad, "x"); },
             [&] { c->receive(bad); }, [&] { c->stats(bad); }, [&] { c->drop_topic(bad); }}) {
      try {
        op();
        FAIL() << "accepted " << bad;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::kInvalidArgument) << bad;
        EXPECT_NE(std::string(e.what()).find("invalid topic name"), std::string::npos);
      }
    }
  }
  // The catalog is intact and holds none of them. (Not a count of all topics: tests running
  // beside this one create and drop theirs on the same server.)
  for (const TopicInfo& t : c->list_topics()) {
    EXPECT_EQ(std::find(names.begin(), names.end(), t.name), names.end()) << t.name;
  }
}

TEST(Topics, MissingTopicIsNotFound) {
  auto c = client();
  std::string name = topic_for_test();
  for (auto op : std::vector<std::function<void()>>{[&] { c->send(name, "x"); },
                                                    [&] { c->receive(name); },
                                                    [&] { c->stats(name); }}) {
    try {
      op();
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kNotFound);
      EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
    }
  }
}

TEST(Send, PayloadAtAndOverTheLimit) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.max_payload_bytes = 1000});
  EXPECT_GT(c->send(name, std::string(1000, 'x')), 0u);
  try {
    c->send(name, std::string(1001, 'x'));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("1001 bytes"), std::string::npos) << e.what();
  }
  auto batch = numbered(10);
  batch[7].payload = std::string(1001, 'y');
  try {
    c->send_batch(name, batch);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("message 8 of the batch"), std::string::npos);
  }
  EXPECT_EQ(c->stats(name).ready, 1u);  // only the first send
}

TEST(Send, BinaryPayloadsRoundTripByteForByte) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes += static_cast<char>(i);
  std::mt19937 rng(7);
  std::string random(300000, '\0');
  for (char& ch : random) ch = static_cast<char>(rng());
  std::vector<std::string> payloads = {all_bytes, std::string("\0\0\0", 3), "", random,
                                       "caf\xc3\xa9"};
  std::string binary_key("k\0\xff", 3);
  for (const std::string& p : payloads) c->send(name, p, SendOptions{.key = binary_key});
  // One key: one message at a time, in send order.
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    auto got = c->receive(name, ReceiveOptions{.max_messages = 10});
    ASSERT_EQ(got.size(), 1u) << i;
    EXPECT_EQ(got[0].payload, payloads[i]) << i;
    EXPECT_EQ(got[0].key, binary_key);
    EXPECT_EQ(c->ack(name, got[0].receipt), Settle::kOk);
  }
  EXPECT_TRUE(c->receive(name).empty());
}

// A batch that fails after several of its INSERT statements have run leaves nothing behind.
TEST(Send, BatchFailingMidwayLeavesNothing) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  auto a = test::admin();
  // A real server-side failure in the middle: a trigger that refuses one payload (of this
  // topic: in shared storage the table is every shared topic's).
  const test::TopicRows q = test::topic_rows(name, "q");
  a->query(fmt::format("CREATE TRIGGER `{}_poison` BEFORE INSERT ON {} FOR EACH ROW "
                       "IF NEW.payload = 'poison' THEN SIGNAL SQLSTATE '45000' SET "
                       "MESSAGE_TEXT = 'poisoned'; END IF",
                       name, q.table));
  const internal::ScopeExit drop_trigger([&] {
    try {
      test::admin()->query(fmt::format("DROP TRIGGER IF EXISTS `{}_poison`", name));
    } catch (const Error&) {
    }
  });
  auto batch = numbered(5000);
  batch[4321].payload = "poison";  // in the fifth multi-row INSERT
  EXPECT_THROW(c->send_batch(name, batch), Error);
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.ready + s.delayed + s.in_flight, 0u);
  EXPECT_TRUE(c->receive(name, ReceiveOptions{.max_messages = 100}).empty());
  batch[4321].payload = "fine";
  auto ids = c->send_batch(name, batch);
  EXPECT_EQ(ids.size(), 5000u);
  EXPECT_EQ(c->stats(name).ready, 5000u);
}

TEST(Send, LargeBatchesReturnIdsInOrder) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  for (int n : {10000, 100000}) {
    auto batch = numbered(n, "b");
    auto ids = c->send_batch(name, batch);
    ASSERT_EQ(ids.size(), static_cast<std::size_t>(n));
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    EXPECT_EQ(std::set<std::uint64_t>(ids.begin(), ids.end()).size(), ids.size());
  }
  EXPECT_EQ(c->stats(name).ready, 110000u);
  // The id of a received message maps back to its payload.
  auto got = c->receive(name, ReceiveOptions{.max_messages = 3});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "b0");
  EXPECT_EQ(got[2].payload, "b2");
}

// The ids a batch returns are its own rows', also while other batches insert into the table at
// the same time: MySQL gives no RETURNING, and txmq reads them as the first id and the ones
// after it (InnoDB reserves one block per multi-row INSERT, whatever innodb_autoinc_lock_mode).
TEST(Send, ConcurrentBatchesGetTheIdsOfTheirOwnRows) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  constexpr int kThreads = 4;
  constexpr int kBatches = 15;
  std::mutex mu;
  std::map<std::uint64_t, std::string> sent;  // id -> payload, as the sends said
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto producer = client();
      for (int b = 0; b < kBatches; ++b) {
        // Sizes that cut some batches into several statements (1,000 rows each).
        std::vector<OutgoingMessage> batch(1 + (b * 397 + t * 211) % 2500);
        for (std::size_t i = 0; i < batch.size(); ++i) {
          batch[i].payload = fmt::format("{}-{}-{}", t, b, i);
        }
        std::vector<std::uint64_t> ids = producer->send_batch(name, batch);
        std::lock_guard lock(mu);
        ASSERT_EQ(ids.size(), batch.size());
        for (std::size_t i = 0; i < ids.size(); ++i) {
          EXPECT_TRUE(sent.emplace(ids[i], batch[i].payload).second) << "id " << ids[i] << " twice";
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  auto a = test::admin();
  internal::Result rows =
      a->execute(fmt::format("SELECT id, payload FROM {} WHERE {} ORDER BY id",
                             test::topic_rows(name, "q").table, test::topic_rows(name, "q").where),
                 {});
  ASSERT_EQ(rows.rows.size(), sent.size());
  std::size_t wrong = 0;
  for (const internal::Row& row : rows.rows) {
    auto it = sent.find(row.u64(0));
    if (it == sent.end() || it->second != row.bytes(1)) ++wrong;
  }
  EXPECT_EQ(wrong, 0u) << "of " << sent.size() << " rows";
}

TEST(Claim, SingleProducerIdOrder) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  std::vector<std::uint64_t> sent;
  for (int i = 0; i < 200; ++i) sent.push_back(c->send(name, fmt::format("{}", i)));
  ASSERT_TRUE(std::is_sorted(sent.begin(), sent.end()));
  std::vector<std::uint64_t> got;
  for (;;) {
    auto batch = c->receive(name, ReceiveOptions{.max_messages = 7});
    if (batch.empty()) break;
    for (auto& m : batch) {
      got.push_back(m.id);
      EXPECT_EQ(m.payload, fmt::format("{}", got.size() - 1));
      EXPECT_EQ(c->ack(name, m.receipt), Settle::kOk);
    }
  }
  EXPECT_EQ(got, sent);
}

TEST(Claim, CompetingConsumersGetEveryIdExactlyOnce) {
  auto producer = client();
  std::string name = topic_for_test();
  producer->create_topic(name);
  auto ids = producer->send_batch(name, numbered(6000));
  constexpr int kThreads = 8;
  std::mutex mutex;
  std::vector<std::uint64_t> received;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = client(fmt::format("consumer-{}", t));
        for (;;) {
          auto batch = c->receive(name, ReceiveOptions{.max_messages = 1 + t * 5});
          if (batch.empty()) break;
          std::vector<std::string> receipts;
          for (auto& m : batch) receipts.push_back(m.receipt);
          for (Settle s : c->ack(name, receipts)) {
            if (s != Settle::kOk) errors++;
          }
          std::lock_guard lock(mutex);
          for (auto& m : batch) received.push_back(m.id);
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        errors++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  std::sort(received.begin(), received.end());
  EXPECT_EQ(received, ids);  // every id, once: nothing lost, nothing twice
  TopicStats s = producer->stats(name);
  EXPECT_EQ(s.ready + s.in_flight + s.delayed, 0u);
}

TEST(Lease, ExpiredLeaseRedeliversAndFencesTheOldReceipt) {
  auto a = client("first");
  auto b = client("second");
  std::string name = topic_for_test();
  a->create_topic(name, TopicOptions{.retry = {.initial = 0s}});
  std::uint64_t id = a->send(name, "work");
  auto first = a->receive(name, ReceiveOptions{.lease = 300ms});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].attempt, 1);
  EXPECT_TRUE(b->receive(name).empty());  // leased: nobody else gets it
  auto inflight = a->in_flight(name);
  ASSERT_EQ(inflight.size(), 1u);
  EXPECT_EQ(inflight[0].id, id);
  EXPECT_EQ(inflight[0].owner, "first");
  EXPECT_EQ(inflight[0].attempt, 1);

  std::this_thread::sleep_for(400ms);
  auto second = b->receive(name, ReceiveOptions{.lease = 30s});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].id, id);
  EXPECT_EQ(second[0].attempt, 2);
  EXPECT_NE(second[0].receipt, first[0].receipt);
  EXPECT_EQ(a->in_flight(name).at(0).owner, "second");

  // The late owner is refused, whatever it tries; the new owner's lease is untouched.
  EXPECT_EQ(a->ack(name, first[0].receipt), Settle::kLeaseLost);
  EXPECT_EQ(a->nack(name, first[0].receipt), Settle::kLeaseLost);
  EXPECT_EQ(a->extend(name, first[0].receipt, 60s), Settle::kLeaseLost);
  EXPECT_EQ(a->stats(name).in_flight, 1u);
  EXPECT_EQ(b->ack(name, second[0].receipt), Settle::kOk);
  EXPECT_EQ(b->ack(name, second[0].receipt), Settle::kNotFound);
  EXPECT_EQ(a->stats(name).in_flight, 0u);
}

TEST(Lease, ExtendKeepsTheMessage) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "long job");
  auto got = c->receive(name, ReceiveOptions{.lease = 300ms});
  ASSERT_EQ(got.size(), 1u);
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(150ms);
    EXPECT_EQ(c->extend(name, got[0].receipt, 300ms), Settle::kOk);
  }
  EXPECT_TRUE(c->receive(name).empty());  // 600 ms after a 300 ms lease: still ours
  EXPECT_EQ(c->ack(name, got[0].receipt), Settle::kOk);
}

// Several receipts at once: one statement per claim, each outcome in its receipt's place (the
// Worker's extender; SQS's ChangeMessageVisibilityBatch).
TEST(Lease, ExtendSeveralReceiptsAtOnce) {
  auto c = client("holder");
  auto peer = client("peer");
  std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.retry = {.initial = 0s}});
  std::vector<OutgoingMessage> batch(5);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].payload = fmt::format("m{}", i);
  c->send_batch(name, batch);
  auto first = c->receive(name, ReceiveOptions{.max_messages = 3, .lease = 1s});
  auto second = c->receive(name, ReceiveOptions{.max_messages = 2, .lease = 30s});
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 2u);
  // The first claim's third message: acknowledged (gone); its second: its lease runs out and a
  // peer takes it (another lease).
  ASSERT_EQ(c->ack(name, first[2].receipt), Settle::kOk);
  std::this_thread::sleep_for(500ms);
  std::vector<std::string> receipts = {first[0].receipt, second[0].receipt, first[2].receipt,
                                       second[1].receipt};
  std::vector<Settle> got = c->extend(name, receipts, 1500ms);
  EXPECT_EQ(got, (std::vector<Settle>{Settle::kOk, Settle::kOk, Settle::kNotFound, Settle::kOk}));
  std::this_thread::sleep_for(700ms);  // first[1]'s lease is over, first[0]'s is not
  auto taken = peer->receive(name, ReceiveOptions{.max_messages = 5, .lease = 30s});
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].id, first[1].id);
  receipts = {first[1].receipt, first[0].receipt};
  EXPECT_EQ(c->extend(name, receipts, 30s),
            (std::vector<Settle>{Settle::kLeaseLost, Settle::kOk}));
  EXPECT_TRUE(c->extend(name, std::vector<std::string>{}, 30s).empty());
  EXPECT_THROW(c->extend(name, receipts, -1s), Error);
}

TEST(Lease, NackWithDelay) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "retry me");
  auto got = c->receive(name);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(c->nack(name, got[0].receipt, 700ms), Settle::kOk);
  EXPECT_EQ(c->ack(name, got[0].receipt), Settle::kLeaseLost);  // nack released it
  EXPECT_TRUE(c->receive(name).empty());
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.delayed, 1u);
  EXPECT_EQ(s.ready, 0u);
  auto start = std::chrono::steady_clock::now();
  auto again = c->receive(name, ReceiveOptions{.wait = 5s});
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
  EXPECT_GE(waited, 400ms);
  EXPECT_LT(waited, 3s);
}

TEST(Lease, DelayedSend) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "later", SendOptions{.delay = 600ms});
  c->send(name, "now");
  auto first = c->receive(name, ReceiveOptions{.max_messages = 10});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].payload, "now");
  EXPECT_EQ(c->stats(name).delayed, 1u);
  auto later = c->receive(name, ReceiveOptions{.wait = 5s});
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].payload, "later");
}

TEST(DeadLetters, AfterMaxAttemptsThenRequeue) {
  auto c = client("worker");
  std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.lease = 30s, .max_attempts = 2});
  std::uint64_t id = c->send(name, "bad", SendOptions{.key = "k1"});
  c->send(name, "good");
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto got = c->receive(name);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].id, id);
    EXPECT_EQ(got[0].attempt, attempt);
    EXPECT_EQ(c->nack(name, got[0].receipt, 0s), Settle::kOk);
  }
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.dead, 1u);
  EXPECT_EQ(s.ready, 1u);
  auto dead = c->dead_letters(name);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  EXPECT_EQ(dead[0].payload, "bad");
  EXPECT_EQ(dead[0].key, "k1");
  EXPECT_EQ(dead[0].attempts, 2);
  EXPECT_EQ(dead[0].last_owner, "worker");

  EXPECT_EQ(c->requeue_dead(name), 1u);
  EXPECT_EQ(c->stats(name).dead, 0u);
  auto again = c->receive(name);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, id);  // keeps its id, so its place in order
  EXPECT_EQ(again[0].attempt, 1);
  EXPECT_EQ(again[0].payload, "bad");
}

TEST(DeadLetters, ExpiredLeasesCountAsAttempts) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name, TopicOptions{.lease = 30s, .max_attempts = 1, .retry = {.initial = 0s}});
  std::uint64_t id = c->send(name, "crashes its consumer");
  std::uint64_t next = c->send(name, "fine");
  ASSERT_EQ(c->receive(name, ReceiveOptions{.lease = 100ms}).size(), 1u);
  std::this_thread::sleep_for(200ms);
  // Claims start past the ids this client took: the next message comes first.
  auto got = c->receive(name);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, next);
  // Then the sweep finds the expired message and dead-letters it instead of delivering it.
  EXPECT_TRUE(c->receive(name).empty());
  auto dead = c->dead_letters(name);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  // Requeue by id; unknown ids are skipped.
  std::vector<std::uint64_t> ids = {id, 999999999};
  EXPECT_EQ(c->requeue_dead(name, ids), 1u);
}

TEST(Receive, WaitReturnsEarlyWhenAMessageArrives) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  std::thread producer([&] {
    std::this_thread::sleep_for(300ms);
    client()->send(name, "hello");
  });
  auto start = std::chrono::steady_clock::now();
  auto got = c->receive(name, ReceiveOptions{.wait = 10s});
  auto waited = std::chrono::steady_clock::now() - start;
  producer.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LT(waited, 3s);
  start = std::chrono::steady_clock::now();
  EXPECT_TRUE(c->receive(name, ReceiveOptions{.wait = 500ms}).empty());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 450ms);
}

TEST(Receive, RefusesBadOptions) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  EXPECT_THROW(c->receive(name, ReceiveOptions{.max_messages = 0}), Error);
  EXPECT_THROW(c->receive(name, ReceiveOptions{.max_messages = 10001}), Error);
  EXPECT_THROW(c->receive(name, ReceiveOptions{.lease = Micros(-1)}), Error);
  EXPECT_THROW(c->ack(name, "not-a-receipt"), Error);
}

TEST(Stats, CountsEachState) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send_batch(name, numbered(5));
  c->send(name, "delayed", SendOptions{.delay = 60s});
  std::this_thread::sleep_for(50ms);
  auto got = c->receive(name, ReceiveOptions{.max_messages = 2});
  ASSERT_EQ(got.size(), 2u);
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.topic, name);
  EXPECT_EQ(s.ready, 3u);
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.delayed, 1u);
  EXPECT_EQ(s.dead, 0u);
  EXPECT_GT(s.oldest_ready_age_seconds, 0.03);
  EXPECT_LT(s.oldest_ready_age_seconds, 60);
}

// DESIGN.md: the claim must walk the primary key in order, from the scan hint, and stop after
// LIMIT rows; a plan with a filesort would lock every row it sorts.
// Also in shared storage: the range (qid, id) .. (qid, +inf) on the primary key, read in order
// with no sort, whatever the other queues' rows.
TEST(Plan, ClaimWalksThePrimaryKey) {
  auto c = client();
  for (TableCreation storage : {TableCreation::kNow, TableCreation::kShared}) {
    std::string name = topic_for_test(storage == TableCreation::kShared ? "_sh" : "");
    c->create_topic(name, {}, storage);
    const std::vector<std::uint64_t> ids = c->send_batch(name, numbered(2000));
    auto a = test::admin();
    const test::TopicRows q = test::topic_rows(name, "q");
    const std::string claim = fmt::format(
        "SELECT id FROM {} FORCE INDEX (PRIMARY) WHERE {} AND id >= {} AND "
        "visible_at <= NOW(6) ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED",
        q.table, q.where, ids.at(1000));
    SCOPED_TRACE(claim);
    if (a->server().mysql) {  // MySQL 9 explains as a tree by default
      internal::Result r = a->execute("EXPLAIN FORMAT=TREE " + claim, {});
      ASSERT_EQ(r.rows.size(), 1u);
      const std::string& plan = r.rows[0].bytes(0);
      EXPECT_NE(plan.find("Index range scan on"), std::string::npos) << plan;
      EXPECT_NE(plan.find("using PRIMARY"), std::string::npos) << plan;
      EXPECT_EQ(plan.find("Sort"), std::string::npos) << plan;
      continue;
    }
    internal::Result r = a->execute("EXPLAIN " + claim, {});
    ASSERT_EQ(r.rows.size(), 1u);
    // EXPLAIN columns: id, select_type, table, type, possible_keys, key, key_len, ref, rows, Extra
    EXPECT_EQ(r.rows[0].bytes(3), "range");
    EXPECT_EQ(r.rows[0].bytes(5), "PRIMARY");
    EXPECT_EQ(r.rows[0].bytes(9).find("filesort"), std::string::npos) << r.rows[0].bytes(9);
  }
}

// A call resolves its topic once (TopicCatalog::resolve) and hands the result down:
// ack_and_receive's check, its riding acknowledgements and its claim share one resolution, and
// so do a receive, an ack, a nack, an extend and a single send.
TEST(Claim, OneCallResolvesItsTopicOnce) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send_batch(name, numbered(40));
  internal::QueueContext q(internal::parse_dsn(test::dsn()), 2, "resolve-once", false);
  ReceiveOptions ten;
  ten.max_messages = 10;
  const auto resolutions = [&](auto&& call) {
    const std::uint64_t before = q.catalog.resolutions();
    call();
    return q.catalog.resolutions() - before;
  };
  std::vector<Message> got;
  EXPECT_EQ(resolutions([&] { got = internal::receive(q, name, ten); }), 1u);
  ASSERT_EQ(got.size(), 10u);
  std::vector<std::string> receipts;
  for (const Message& m : got) receipts.push_back(m.receipt);
  std::vector<Settle> settled;
  EXPECT_EQ(resolutions([&] { got = internal::ack_and_receive(q, name, receipts, ten, settled); }),
            1u);
  ASSERT_EQ(settled, std::vector<Settle>(10, Settle::kOk));
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(resolutions([&] {
              EXPECT_EQ(internal::extend(q, name, got[0].receipt, std::chrono::seconds(30)),
                        Settle::kOk);
            }),
            1u);
  EXPECT_EQ(resolutions([&] {
              EXPECT_EQ(internal::nack(q, name, got[1].receipt, std::nullopt), Settle::kOk);
            }),
            1u);
  const std::vector<std::string> two = {got[2].receipt, got[3].receipt};
  EXPECT_EQ(resolutions([&] {
              EXPECT_EQ(internal::ack(q, name, two), std::vector<Settle>(2, Settle::kOk));
            }),
            1u);
  EXPECT_EQ(resolutions([&] { internal::send_one(q, name, "one more", SendOptions{}); }), 1u);
}

// Claims start past the ids this client already claimed; what becomes claimable below (an expired
// lease) is swept up within about a second while newer messages keep flowing.
TEST(Claim, ExpiredLeasesBelowTheScanHintAreSweptUp) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send_batch(name, numbered(400));
  ReceiveOptions short_lease;
  short_lease.max_messages = 10;
  short_lease.lease = std::chrono::milliseconds(100);
  std::vector<Message> first = c->receive(name, short_lease);  // ids 1..10, left to expire
  ASSERT_EQ(first.size(), 10u);
  std::set<std::uint64_t> expired;
  for (const Message& m : first) expired.insert(m.id);
  ReceiveOptions one;
  one.max_messages = 1;
  std::set<std::uint64_t> redelivered;
  int newer = 0;
  const auto start = std::chrono::steady_clock::now();
  while (redelivered.size() < expired.size() &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::vector<Message> got = c->receive(name, one);
    ASSERT_EQ(got.size(), 1u);
    if (expired.count(got[0].id) > 0) {
      redelivered.insert(got[0].id);
      EXPECT_EQ(got[0].attempt, 2);
    } else {
      ++newer;
    }
    ASSERT_EQ(c->ack(name, got[0].receipt), Settle::kOk);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(redelivered, expired);
  EXPECT_GT(newer, 0);  // newer messages were served while the expired ones waited for a sweep
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
}

// A message given back by another client lands below this client's scan hint; it is found at
// once when nothing else is claimable.
TEST(Claim, AMessageNackedByAnotherClientIsFoundWhenNothingElseIs) {
  auto a = client();
  auto b = client();
  std::string name = topic_for_test();
  a->create_topic(name);
  a->send_batch(name, numbered(3));
  ReceiveOptions all;
  all.max_messages = 3;
  std::vector<Message> got = a->receive(name, all);  // a's claims now start past id 3
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(a->ack(name, got[2].receipt), Settle::kOk);
  ASSERT_EQ(b->nack(name, got[0].receipt, 0s), Settle::kOk);  // receipts travel between clients
  std::vector<Message> again = a->receive(name, ReceiveOptions{});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, got[0].id);
  EXPECT_EQ(again[0].attempt, 2);
}

std::vector<std::string> receipts_of(const std::vector<Message>& messages) {
  std::vector<std::string> out;
  for (const Message& m : messages) out.push_back(m.receipt);
  return out;
}

// ack_and_receive: the acknowledgements ride in the next claim's transaction, with ack's
// outcomes.
TEST(AckAndReceive, AcknowledgesOneBatchAndLeasesTheNext) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send_batch(name, numbered(6));
  ReceiveOptions three{.max_messages = 3};
  std::vector<Message> first = c->receive(name, three);
  ASSERT_EQ(first.size(), 3u);
  std::vector<Settle> settled;
  std::vector<Message> second = c->ack_and_receive(name, receipts_of(first), settled, three);
  EXPECT_EQ(settled, std::vector<Settle>(3, Settle::kOk));
  ASSERT_EQ(second.size(), 3u);
  EXPECT_EQ(second[0].payload, "m3");
  EXPECT_EQ(c->stats(name).in_flight, 3u);
  EXPECT_EQ(c->stats(name).ready, 0u);
  // The last batch, with a receipt already acknowledged: kNotFound for it, nothing to lease.
  std::vector<std::string> last = receipts_of(second);
  last.push_back(first[0].receipt);
  EXPECT_TRUE(c->ack_and_receive(name, last, settled, three).empty());
  EXPECT_EQ(settled, (std::vector<Settle>{Settle::kOk, Settle::kOk, Settle::kOk,
                                          Settle::kNotFound}));
  EXPECT_EQ(c->stats(name).in_flight, 0u);
  // No receipts: a plain receive.
  EXPECT_TRUE(c->ack_and_receive(name, {}, settled, three).empty());
  EXPECT_TRUE(settled.empty());
}

// A receipt whose lease moved on is fenced out, pair by pair among receipts of several claims;
// the others apply.
TEST(AckAndReceive, AStaleReceiptIsRefusedAndTheOthersApply) {
  auto a = client("first");
  auto b = client("second");
  std::string name = topic_for_test();
  a->create_topic(name, TopicOptions{.retry = {.initial = 0s}});
  a->send_batch(name, numbered(2));
  std::vector<Message> early = a->receive(name, ReceiveOptions{.lease = 300ms});
  std::vector<Message> kept = a->receive(name, ReceiveOptions{.lease = 30s});
  ASSERT_EQ(early.size(), 1u);
  ASSERT_EQ(kept.size(), 1u);
  std::this_thread::sleep_for(400ms);
  std::vector<Message> taken = b->receive(name, ReceiveOptions{.lease = 30s});
  ASSERT_EQ(taken.size(), 1u);
  ASSERT_EQ(taken[0].id, early[0].id);
  std::vector<Settle> settled;
  const std::vector<std::string> both = {early[0].receipt, kept[0].receipt};
  EXPECT_TRUE(a->ack_and_receive(name, both, settled, {}).empty());
  EXPECT_EQ(settled, (std::vector<Settle>{Settle::kLeaseLost, Settle::kOk}));
  EXPECT_EQ(a->stats(name).in_flight, 1u);  // b's lease is untouched
  EXPECT_EQ(b->ack(name, taken[0].receipt), Settle::kOk);
}

// With a wait on an empty topic, the acknowledgements are committed before the wait.
TEST(AckAndReceive, AcknowledgementsAreCommittedBeforeTheWait) {
  auto a = client();
  auto b = client();
  std::string name = topic_for_test();
  a->create_topic(name);
  a->send(name, "done");
  std::vector<Message> got = a->receive(name);
  ASSERT_EQ(got.size(), 1u);
  std::vector<Settle> settled;
  std::vector<Message> next;
  std::atomic<bool> returned{false};
  std::thread waiting([&] {
    next = a->ack_and_receive(name, receipts_of(got), settled, ReceiveOptions{.wait = 5s});
    returned = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (b->stats(name).in_flight != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(b->stats(name).in_flight, 0u);
  EXPECT_FALSE(returned.load());  // still waiting, with the acknowledgement applied
  b->send(name, "next");
  waiting.join();
  EXPECT_EQ(settled, std::vector<Settle>{Settle::kOk});
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, "next");
}

// Options, groups and partitions are checked before anything is acknowledged, a keyed receipt
// (acknowledged on its own, before the claim) included.
TEST(AckAndReceive, BadOptionsAcknowledgeNothing) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "x", {.key = "k"});
  std::vector<Message> got = c->receive(name);
  ASSERT_EQ(got.size(), 1u);
  std::vector<Settle> settled;
  EXPECT_THROW(c->ack_and_receive(name, receipts_of(got), settled, {.lease = 0s}), Error);
  EXPECT_THROW(c->ack_and_receive(name, receipts_of(got), settled, {.max_messages = 0}), Error);
  try {
    c->ack_and_receive(name, receipts_of(got), settled, {.group = "nobody"});
    FAIL() << "an unknown group was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kNotFound);
  }
  try {
    c->ack_and_receive(name, receipts_of(got), settled, {.partitions = {3}});
    FAIL() << "a partition the topic does not have was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
  }
  const std::vector<std::string> bad = {"not a receipt"};
  EXPECT_THROW(c->ack_and_receive(name, bad, settled, {}), Error);
  EXPECT_EQ(c->stats(name).in_flight, 1u);
  EXPECT_EQ(c->ack(name, got[0].receipt), Settle::kOk);
}

// Keyed receipts and an archived topic's are acknowledged on their own first: a key's next
// message is claimable by the same call, and the archive keeps its copy.
TEST(AckAndReceive, KeyedAndArchivedAcknowledgementsKeepTheirGuarantees) {
  auto c = client();
  std::string keyed = topic_for_test();
  c->create_topic(keyed);
  c->send(keyed, "k-first", {.key = "k"});
  c->send(keyed, "k-second", {.key = "k"});
  c->send(keyed, "plain");
  std::vector<Message> got = c->receive(keyed, ReceiveOptions{.max_messages = 10});
  ASSERT_EQ(got.size(), 2u);  // the key's head and the plain one
  std::vector<Settle> settled;
  std::vector<Message> next =
      c->ack_and_receive(keyed, receipts_of(got), settled, ReceiveOptions{.max_messages = 10});
  EXPECT_EQ(settled, std::vector<Settle>(2, Settle::kOk));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, "k-second");

  std::string archived = topic_for_test("_a");  // dropped first if an earlier run left it
  c->create_topic(archived, TopicOptions{.archive = std::chrono::hours(1)});
  const std::uint64_t id = c->send(archived, "kept");
  got = c->receive(archived);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(c->ack_and_receive(archived, receipts_of(got), settled, {}).empty());
  EXPECT_EQ(settled, std::vector<Settle>{Settle::kOk});
  std::vector<ArchivedMessage> copies = c->archived(archived);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].id, id);
}

// Competing consumers that each acknowledge their batch with the next receive: every message
// once, every acknowledgement kOk, nothing left.
TEST(AckAndReceive, CompetingConsumersTakeEveryMessageOnce) {
  auto c = client();
  std::string name = topic_for_test();
  c->create_topic(name);
  constexpr int kMessages = 2000;
  c->send_batch(name, numbered(kMessages));
  std::mutex mutex;
  std::map<std::uint64_t, int> seen;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<std::string> receipts;
      std::vector<Settle> settled;
      for (;;) {
        std::vector<Message> got =
            c->ack_and_receive(name, receipts, settled, ReceiveOptions{.max_messages = 10});
        std::lock_guard lock(mutex);
        for (std::size_t i = 0; i < settled.size(); ++i) {
          if (settled[i] != Settle::kOk) {
            failures.push_back(fmt::format("{}: {}", receipts[i], static_cast<int>(settled[i])));
          }
        }
        receipts.clear();
        if (got.empty()) return;
        for (const Message& m : got) {
          ++seen[m.id];
          receipts.push_back(m.receipt);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " refused, first " << failures.front();
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kMessages));
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](auto& p) { return p.second == 1; }));
  const TopicStats stats = c->stats(name);
  EXPECT_EQ(stats.ready + stats.in_flight, 0u);
}

}  // namespace
}  // namespace txmq
