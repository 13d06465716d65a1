// Consumer groups, partitions and the archive.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include <nlohmann/json.hpp>

#include "catalog/names.h"
#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::admin;
using test::client;
using test::topic_for_test;
using SteadyClock = std::chrono::steady_clock;

unsigned partition_of(std::uint64_t id) { return static_cast<unsigned>(id >> 48); }

// What one group's consumers saw.
struct Seen {
  std::mutex mutex;
  std::map<std::string, int> payloads;  // payload -> deliveries
  std::size_t distinct() {
    std::lock_guard lock(mutex);
    return payloads.size();
  }
};

// Runs `threads` consumers of the group until `seen` holds `want` distinct payloads (or the
// deadline passes); each receives up to 100 with a short wait and acknowledges them together.
std::vector<std::thread> consume(Client& c, const std::string& topic, const std::string& group,
                                 int threads, Seen& seen, std::size_t want,
                                 SteadyClock::time_point deadline) {
  std::vector<std::thread> out;
  for (int i = 0; i < threads; ++i) {
    out.emplace_back([&c, &topic, group, &seen, want, deadline] {
      ReceiveOptions options;
      options.max_messages = 100;
      options.wait = 200ms;
      options.group = group;
      while (seen.distinct() < want && SteadyClock::now() < deadline) {
        std::vector<Message> got = c.receive(topic, options);
        std::vector<std::string> receipts;
        {
          std::lock_guard lock(seen.mutex);
          for (const Message& m : got) {
            ++seen.payloads[m.payload];
            receipts.push_back(m.receipt);
          }
        }
        for (Settle s : c.ack(topic, receipts)) EXPECT_EQ(s, Settle::kOk);
      }
    });
  }
  return out;
}

void join_all(std::vector<std::thread>& threads) {
  for (std::thread& t : threads) t.join();
  threads.clear();
}

// 4 producers send 50,000 messages to a topic of 4 partitions with 3 groups of 4 consumers:
// every group sees every message exactly once (no crash, so no duplicate), and a group that is
// stopped holds up nobody: the other two finish while it has everything still to do.
TEST(Groups, ThreeGroupsOfFourConsumersEachSeeEveryMessage) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.partitions = 4;
  c->create_topic(topic, options);
  for (const char* g : {"alpha", "beta", "gamma"}) EXPECT_TRUE(c->create_group(topic, g));
  // The group every topic starts with goes: "alpha" allocates the ids from now on.
  c->drop_group(topic, "default");
  ASSERT_EQ(c->list_groups(topic).size(), 3u);

  constexpr int kProducers = 4;
  constexpr int kPerProducer = 12500;
  constexpr std::size_t kTotal = kProducers * kPerProducer;
  const auto deadline = SteadyClock::now() + 240s;
  Seen alpha, beta, gamma;
  std::vector<std::thread> consumers = consume(*c, topic, "alpha", 4, alpha, kTotal, deadline);
  std::vector<std::thread> more = consume(*c, topic, "beta", 4, beta, kTotal, deadline);
  consumers.insert(consumers.end(), std::make_move_iterator(more.begin()),
                   std::make_move_iterator(more.end()));

  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&c, &topic, p] {
      for (int from = 0; from < kPerProducer; from += 250) {
        std::vector<OutgoingMessage> batch;
        for (int i = from; i < from + 250; ++i) {
          batch.push_back({fmt::format("p{}-{}", p, i), std::nullopt, Micros{0}, std::nullopt});
        }
        c->send_batch(topic, batch);
      }
    });
  }
  join_all(producers);
  join_all(consumers);
  EXPECT_EQ(alpha.distinct(), kTotal);
  EXPECT_EQ(beta.distinct(), kTotal);
  // gamma consumed nothing yet: all of it waits for it, and only for it.
  TopicStats waiting = c->stats(topic, "gamma");
  EXPECT_EQ(waiting.ready, kTotal);
  EXPECT_GT(waiting.lag_seconds, 0.0);
  EXPECT_EQ(c->stats(topic, "alpha").ready + c->stats(topic, "alpha").in_flight, 0u);

  consumers = consume(*c, topic, "gamma", 4, gamma, kTotal, deadline);
  join_all(consumers);
  EXPECT_EQ(gamma.distinct(), kTotal);
  for (Seen* seen : {&alpha, &beta, &gamma}) {
    std::size_t duplicates = 0;
    for (const auto& [payload, n] : seen->payloads) duplicates += n - 1;
    EXPECT_EQ(duplicates, 0u);
    // Nothing unexpected: every payload is one that was sent.
    for (int p = 0; p < kProducers; ++p) {
      EXPECT_EQ(seen->payloads.count(fmt::format("p{}-0", p)), 1u);
      EXPECT_EQ(seen->payloads.count(fmt::format("p{}-{}", p, kPerProducer - 1)), 1u);
    }
  }
  EXPECT_EQ(c->stats(topic, "gamma").ready, 0u);
  EXPECT_EQ(c->stats(topic, "gamma").lag_seconds, 0.0);
}

// Ids are allocated before commit: a transaction that sent first and commits last has the
// lower id. No group may skip it, though its consumers already passed higher ids.
TEST(Groups, AMessageCommittedLateIsNotSkipped) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->create_group(topic, "second");

  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> received;  // group -> payloads in order
  std::vector<std::thread> consumers;
  for (std::string group : {"default", "second"}) {
    consumers.emplace_back([&, group] {
      ReceiveOptions options;
      options.wait = 300ms;
      options.group = group;
      while (!stop) {
        for (const Message& m : c->receive(topic, options)) {
          EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
          std::lock_guard lock(mutex);
          received[group].push_back(m.payload);
        }
      }
    });
  }
  Transaction first = c->begin();
  const std::uint64_t early_id = first.send(topic, "sent first, committed last");
  Transaction second = c->begin();
  const std::uint64_t late_id = second.send(topic, "sent second, committed first");
  EXPECT_LT(early_id, late_id);
  std::this_thread::sleep_for(500ms);
  second.commit();
  // Both groups consume the higher id while the lower one is still uncommitted.
  const auto wait_for = [&](std::size_t n) {
    const auto until = SteadyClock::now() + 10s;
    while (SteadyClock::now() < until) {
      {
        std::lock_guard lock(mutex);
        if (received["default"].size() >= n && received["second"].size() >= n) return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  };
  ASSERT_TRUE(wait_for(1));
  std::this_thread::sleep_for(1500ms);
  first.commit();
  ASSERT_TRUE(wait_for(2));
  stop = true;
  for (std::thread& t : consumers) t.join();
  for (const std::string group : {"default", "second"}) {
    ASSERT_EQ(received[group].size(), 2u) << group;
    EXPECT_EQ(received[group][0], "sent second, committed first") << group;
    EXPECT_EQ(received[group][1], "sent first, committed last") << group;
  }
}

// A client that read the topic's groups before another client created one still sends into
// the new group: single sends, batches and sends in a transaction check the layout version.
TEST(Groups, ASendWithAnOldViewOfTheGroupsReachesANewGroup) {
  auto sender = client();
  auto admin = client();
  const std::string topic = topic_for_test();
  sender->create_topic(topic);
  sender->send(topic, "before");  // the sender now has the layout cached (for 5 s)
  ASSERT_TRUE(admin->create_group(topic, "newer"));
  sender->send(topic, "single");
  std::vector<OutgoingMessage> batch = {{"batch", std::nullopt, Micros{0}, std::nullopt}};
  sender->send_batch(topic, batch);
  Transaction tx = sender->begin();
  tx.send(topic, "transaction");
  tx.commit();
  ReceiveOptions options;
  options.max_messages = 10;
  options.group = "newer";
  std::set<std::string> got;
  for (const Message& m : admin->receive(topic, options)) got.insert(m.payload);
  EXPECT_EQ(got, (std::set<std::string>{"single", "batch", "transaction"}));
  options.group = "";
  EXPECT_EQ(admin->receive(topic, options).size(), 4u);
}

TEST(Groups, ALateGroupStartsFromNowOrFromTheEarliestRetained) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.archive = std::chrono::hours(1);
  options.partitions = 2;
  c->create_topic(topic, options);
  std::vector<OutgoingMessage> batch;
  for (int i = 0; i < 5; ++i) batch.push_back({fmt::format("old {}", i), std::nullopt, Micros{0}, std::nullopt});
  batch.push_back({"keyed 1", "k", Micros{0}, std::nullopt});
  batch.push_back({"keyed 2", "k", Micros{0}, std::nullopt});
  c->send_batch(topic, batch);
  // The default group finishes two messages: they are only in the archive now.
  auto two = c->receive(topic, {.max_messages = 2});
  ASSERT_EQ(two.size(), 2u);
  for (const Message& m : two) EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
  EXPECT_EQ(c->archived(topic).size(), 2u);

  ASSERT_TRUE(c->create_group(topic, "replay", GroupStart::kEarliest));
  ASSERT_TRUE(c->create_group(topic, "fresh", GroupStart::kNow));
  EXPECT_FALSE(c->create_group(topic, "fresh", GroupStart::kNow));
  c->send(topic, "new");

  ReceiveOptions replay;
  replay.max_messages = 100;
  replay.group = "replay";
  std::multiset<std::string> got;
  std::vector<std::string> keyed;
  // Keyed FIFO holds in the copy: "keyed 2" comes only after "keyed 1" is acknowledged.
  for (int round = 0; round < 3; ++round) {
    for (const Message& m : c->receive(topic, replay)) {
      got.insert(m.payload);
      if (m.key) keyed.push_back(m.payload);
      EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
    }
  }
  EXPECT_EQ(got, (std::multiset<std::string>{"old 0", "old 1", "old 2", "old 3", "old 4",
                                             "keyed 1", "keyed 2", "new"}));
  EXPECT_EQ(keyed, (std::vector<std::string>{"keyed 1", "keyed 2"}));
  ReceiveOptions fresh;
  fresh.max_messages = 100;
  fresh.group = "fresh";
  auto only_new = c->receive(topic, fresh);
  ASSERT_EQ(only_new.size(), 1u);
  EXPECT_EQ(only_new[0].payload, "new");
  // Each message is archived once, whichever groups acknowledged it.
  EXPECT_EQ(c->archived(topic).size(), 8u);
}

// Every message a group holds, received (and acknowledged) until the group is empty.
std::multiset<std::string> drain(Client& c, const std::string& topic, const std::string& group) {
  std::multiset<std::string> got;
  ReceiveOptions options;
  options.max_messages = 1000;
  options.group = group;
  for (;;) {
    std::vector<Message> batch = c.receive(topic, options);
    if (batch.empty()) return got;
    std::vector<std::string> receipts;
    for (const Message& m : batch) {
      got.insert(m.payload);
      receipts.push_back(m.receipt);
    }
    c.ack(topic, receipts);
  }
}

// The send fences (a column `send_fence` of the queue tables, catalog.cc "Send fences") that
// single sends name exist only while the topic has one group, on that group's tables; a topic
// without them (a server without the ALTER privilege) still sends, through the checked statement.
TEST(Groups, SendFencesExistOnlyWhileTheTopicHasOneGroup) {
  auto c = client();
  auto sql = test::admin();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {.partitions = 3});
  // The queue tables with a fence, of which those of group `number`.
  const auto fences = [&](std::optional<int> number = std::nullopt) {
    std::int64_t n = 0;
    for (const auto& row :
         sql->execute("SELECT TABLE_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                      "DATABASE() AND COLUMN_NAME = 'send_fence' AND TABLE_NAME LIKE ?",
                      {fmt::format("txmq\\_q\\_{}%", topic)})
             .rows) {
      const std::string& name = row.bytes(0);
      const std::size_t dollar = name.find('$');
      const int group = dollar == std::string::npos ? 0 : std::stoi(name.substr(dollar + 1));
      if (!number || *number == group) ++n;
    }
    return n;
  };
  EXPECT_EQ(fences(), 3);
  ASSERT_TRUE(c->create_group(topic, "second"));
  EXPECT_EQ(fences(), 0);
  c->drop_group(topic, "default");  // "second" is the only group: its tables take sends
  EXPECT_EQ(fences(1), 3);
  EXPECT_EQ(fences(), 3);
  for (int i = 0; i < 6; ++i) c->send(topic, fmt::format("m{}", i));
  EXPECT_EQ(drain(*c, topic, "second"),
            (std::multiset<std::string>{"m0", "m1", "m2", "m3", "m4", "m5"}));
  // No fences: sends take the checked statement, and still reach a group created meanwhile.
  for (int p = 0; p < 3; ++p) {
    sql->query(fmt::format("ALTER TABLE {} DROP COLUMN send_fence",
                           internal::topic_tables(topic, 1, static_cast<unsigned>(p)).queue));
  }
  c->send(topic, "no fence");
  auto other = client();
  ASSERT_TRUE(other->create_group(topic, "third"));
  c->send(topic, "no fence, after");
  std::vector<OutgoingMessage> batch = {{"no fence, batch", std::nullopt, Micros{0}, std::nullopt}};
  c->send_batch(topic, batch);
  EXPECT_EQ(drain(*other, topic, "third"),
            (std::multiset<std::string>{"no fence, after", "no fence, batch"}));
  EXPECT_EQ(drain(*other, topic, "second"),
            (std::multiset<std::string>{"no fence", "no fence, after", "no fence, batch"}));
  other->drop_group(topic, "third");
  EXPECT_EQ(fences(), 3);
  c->drop_topic(topic);
  EXPECT_EQ(fences(), 0);
}

// A group change waits for sends in progress that name the send fence: dropping the column
// waits for the table's metadata lock, which an uncommitted transaction holds (a single send
// holds it until its autocommit INSERT commits). Sends after the change reach the new group.
TEST(Groups, AGroupChangeWaitsForASendNamingTheFenceToCommit) {
  auto c = client();
  auto sql = test::admin();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {}, TableCreation::kNow);  // its own tables (and their fences)
  c->send(topic, "cached");  // c has the one-group layout cached now
  sql->begin();
  sql->execute(fmt::format("INSERT INTO {} (visible_at, enqueued_at, payload, send_fence) VALUES "
                           "(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 'in flight', NULL)",
                           internal::topic_tables(topic).queue));
  std::atomic<bool> created{false};
  std::thread admin([&] {
    auto a = client();
    EXPECT_TRUE(a->create_group(topic, "newer"));
    created = true;
  });
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(created) << "the group was created while a send naming the fence was open";
  sql->commit();
  admin.join();
  EXPECT_TRUE(created);
  c->send(topic, "after");  // through a stale cache: the fence is gone
  EXPECT_EQ(drain(*c, topic, "newer"), std::multiset<std::string>{"after"});
  EXPECT_EQ(drain(*c, topic, "default"),
            (std::multiset<std::string>{"cached", "in flight", "after"}));
}

// A transaction that holds the queue table longer than a group change waits for it (its fence
// cannot be dropped): the change fails with kUnavailable and changes nothing, sends and claims
// go on meanwhile, and the change succeeds once the transaction ended.
TEST(Groups, AGroupChangeGivesUpOnATransactionThatHoldsTheTableAndChangesNothing) {
  auto c = client();
  auto sql = test::admin();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {}, TableCreation::kNow);  // its own tables (and their fences)
  c->send(topic, "before");
  sql->begin();
  sql->execute(fmt::format("SELECT COUNT(*) FROM {}", internal::topic_tables(topic).queue));
  std::atomic<bool> done{false};
  std::atomic<int> sent{0};
  std::thread sender([&] {  // between the change's waits, sends go through
    auto s = client();
    while (!done) {
      s->send(topic, "during");
      ++sent;
      std::this_thread::sleep_for(50ms);
    }
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    c->create_group(topic, "blocked");
    ADD_FAILURE() << "the group was created while a transaction held the queue table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kUnavailable) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 10s);
  done = true;
  sender.join();
  EXPECT_GT(sent, 10);
  sql->commit();
  EXPECT_EQ(c->list_groups(topic).size(), 1u);
  ASSERT_TRUE(c->create_group(topic, "later"));
  c->send(topic, "after");
  EXPECT_EQ(drain(*c, topic, "later"), std::multiset<std::string>{"after"});
  EXPECT_EQ(drain(*c, topic, "default").size(), static_cast<std::size_t>(sent) + 2);
}

// Sends of every kind run in six threads (single sends and one-statement batches while the
// topic has one group, sends in transactions, keyed sends) while groups are created and one is
// dropped. The group created from the earliest message gets every message (none is acknowledged
// before the end), the group created from now every message whose send began after its
// creation returned, and no send fails: a send never misses a group that exists when it commits.
TEST(Groups, GroupsChangedDuringConcurrentSendsMissNoMessage) {
  auto admin_client = client();
  const std::string topic = topic_for_test();
  TopicOptions topic_options;
  topic_options.partitions = 2;
  admin_client->create_topic(topic, topic_options);

  struct Sent {
    std::string payload;
    SteadyClock::time_point began;
  };
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<Sent> sent;
  std::atomic<int> failures{0};
  std::vector<std::thread> senders;
  for (int kind = 0; kind < 6; ++kind) {
    senders.emplace_back([&, kind] {
      auto c = client();
      for (int n = 0; !stop; ++n) {
        const auto began = SteadyClock::now();
        std::vector<std::string> payloads;
        try {
          if (kind <= 1) {  // single sends
            payloads.push_back(fmt::format("s{}-{}", kind, n));
            c->send(topic, payloads[0]);
          } else if (kind <= 3) {  // batches of 20
            std::vector<OutgoingMessage> batch;
            for (int i = 0; i < 20; ++i) {
              payloads.push_back(fmt::format("b{}-{}-{}", kind, n, i));
              batch.push_back({payloads.back(), std::nullopt, Micros{0}, std::nullopt});
            }
            c->send_batch(topic, batch);
          } else if (kind == 4) {  // three sends in a transaction
            Transaction tx = c->begin();
            for (int i = 0; i < 3; ++i) {
              payloads.push_back(fmt::format("t-{}-{}", n, i));
              tx.send(topic, payloads.back());
            }
            tx.commit();
          } else {  // keyed sends
            payloads.push_back(fmt::format("k-{}", n));
            c->send(topic, payloads[0], {.key = fmt::format("key{}", n % 7)});
          }
        } catch (const Error& e) {
          ADD_FAILURE() << "send failed: " << e.what();
          ++failures;
          continue;
        }
        std::lock_guard lock(mutex);
        for (std::string& p : payloads) sent.push_back({std::move(p), began});
      }
    });
  }
  std::this_thread::sleep_for(400ms);
  ASSERT_TRUE(admin_client->create_group(topic, "early", GroupStart::kEarliest));
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(admin_client->create_group(topic, "late", GroupStart::kNow));
  const auto late_created = SteadyClock::now();
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(admin_client->create_group(topic, "doomed", GroupStart::kNow));
  std::this_thread::sleep_for(300ms);
  admin_client->drop_group(topic, "doomed");
  std::this_thread::sleep_for(300ms);
  stop = true;
  for (std::thread& t : senders) t.join();
  EXPECT_EQ(failures, 0);

  std::multiset<std::string> all;
  std::multiset<std::string> after_late;
  for (const Sent& s : sent) {
    all.insert(s.payload);
    if (s.began > late_created) after_late.insert(s.payload);
  }
  ASSERT_GT(after_late.size(), 20u);
  // What a group lacks of `want`, and what it has that was never sent (or has twice).
  const auto check = [&](const std::string& group, const std::multiset<std::string>& want) {
    const std::multiset<std::string> got = drain(*admin_client, topic, group);
    std::vector<std::string> missing;
    std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                        std::back_inserter(missing));
    EXPECT_TRUE(missing.empty()) << "group '" << group << "' lacks " << missing.size() << " of "
                                 << want.size() << " messages, e.g. " << missing.front();
    std::vector<std::string> extra;
    std::set_difference(got.begin(), got.end(), all.begin(), all.end(),
                        std::back_inserter(extra));
    EXPECT_TRUE(extra.empty()) << "group '" << group << "' has " << extra.size()
                               << " messages not sent or twice, e.g. " << extra.front();
  };
  check("default", all);
  check("early", all);
  check("late", after_late);
}

// Changes of one topic's groups and partitions are serialised by a claim on the topic's row
// (replicated on Galera, unlike the named lock it replaces): a claim another client holds makes a
// change wait until it is released, a claim its holder left to run out is overtaken then, and
// changes from racing clients all take effect.
TEST(Groups, LayoutChangesWaitForAClaimAndOvertakeOneThatRanOut) {
  auto c = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  c->create_topic(topic, {}, TableCreation::kNow);  // its own tables (and their fences)
  const auto claim = [&](std::string_view by, std::int64_t micros_left) {
    EXPECT_EQ(a->execute("UPDATE txmq_topics SET layout_claimed_by = ?, layout_claimed_until = "
                         "NOW(6) + INTERVAL ? MICROSECOND WHERE name = ?",
                         {by, micros_left, topic})
                  .affected_rows,
              1u);
  };
  const auto claimed_by = [&] {
    internal::Result r = a->execute(
        "SELECT layout_claimed_by IS NULL, layout_claimed_until IS NULL FROM txmq_topics WHERE "
        "name = ?",
        {topic});
    return r.rows.at(0).i64(0) == 1 && r.rows.at(0).i64(1) == 1 ? "" : "someone";
  };
  const auto seconds_since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };

  // Held by another client, which releases it after a second.
  claim("other client", 30'000'000);
  std::thread releaser([&] {
    auto b = admin();
    std::this_thread::sleep_for(1s);
    b->execute("UPDATE txmq_topics SET layout_claimed_by = NULL, layout_claimed_until = NULL "
               "WHERE name = ? AND layout_claimed_by = 'other client'",
               {topic});
  });
  auto start = SteadyClock::now();
  ASSERT_TRUE(c->create_group(topic, "g1"));
  EXPECT_GE(seconds_since(start), 0.9);
  EXPECT_LT(seconds_since(start), 10.0);
  releaser.join();
  EXPECT_EQ(claimed_by(), std::string());

  // Left by a client that died: overtaken when it runs out, 1.5 s from now.
  claim("dead client", 1'500'000);
  start = SteadyClock::now();
  c->drop_group(topic, "g1");
  EXPECT_GE(seconds_since(start), 1.3);
  EXPECT_EQ(claimed_by(), std::string());

  // Ran out long ago: no wait.
  claim("dead client", -3'600'000'000);
  start = SteadyClock::now();
  TopicOptions options = c->topic(topic).options;
  options.partitions = 2;
  c->update_topic(topic, options);
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(claimed_by(), std::string());

  // Racing clients: four create three groups each while one raises the partitions step by step.
  // A group whose creation interleaved with a raise would lack the new partitions' tables.
  std::vector<std::thread> racers;
  for (int i = 0; i < 4; ++i) {
    racers.emplace_back([&, i] {
      auto mine = client();
      for (int j = 0; j < 3; ++j) {
        EXPECT_TRUE(mine->create_group(topic, fmt::format("r{}_{}", i, j)));
      }
    });
  }
  racers.emplace_back([&] {
    auto mine = client();
    for (int p = 3; p <= 6; ++p) {
      TopicOptions raised = mine->topic(topic).options;
      raised.partitions = p;
      mine->update_topic(topic, raised);
    }
  });
  for (std::thread& t : racers) t.join();
  std::vector<GroupInfo> groups = c->list_groups(topic);
  EXPECT_EQ(groups.size(), 13u);
  std::set<std::string> messages;
  for (int i = 0; i < 60; ++i) {
    messages.insert(fmt::format("m{}", i));
    c->send(topic, fmt::format("m{}", i), {.key = fmt::format("key{}", i)});
  }
  for (const GroupInfo& g : groups) {
    std::multiset<std::string> got = drain(*c, topic, g.name);
    EXPECT_EQ(std::set<std::string>(got.begin(), got.end()), messages) << g.name;
    EXPECT_EQ(got.size(), messages.size()) << g.name;
  }
  EXPECT_EQ(claimed_by(), std::string());
}

TEST(Groups, MistakesAreClearErrors) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  auto code = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return Errc::kInternal;
  };
  EXPECT_EQ(code([&] { c->create_group(topic, "Bad-Name"); }), Errc::kInvalidArgument);
  EXPECT_EQ(code([&] { c->create_group("no_such_topic_x", "g"); }), Errc::kNotFound);
  EXPECT_EQ(code([&] { c->drop_group(topic, "default"); }), Errc::kFailedPrecondition);
  EXPECT_EQ(code([&] { c->drop_group(topic, "nope"); }), Errc::kNotFound);
  EXPECT_EQ(code([&] { c->receive(topic, {.group = "nope"}); }), Errc::kNotFound);
  EXPECT_EQ(code([&] { c->stats(topic, "nope"); }), Errc::kNotFound);
  // A dropped group's receipts settle nothing.
  c->create_group(topic, "short_lived");
  c->send(topic, "x");
  auto got = c->receive(topic, {.group = "short_lived"});
  ASSERT_EQ(got.size(), 1u);
  c->drop_group(topic, "short_lived");
  EXPECT_EQ(c->ack(topic, got[0].receipt), Settle::kNotFound);
  EXPECT_EQ(c->receive(topic).size(), 1u);  // the default group still has its copy
}

// Keys keep to one partition, in order; keyless sends spread over all partitions; a receiver
// assigned a partition gets only its messages; partitions can be raised, not lowered.
TEST(Partitions, KeysKeepOrderSendsSpreadAndAssignmentsHold) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.partitions = 4;
  options.retry.initial = Micros{0};
  c->create_topic(topic, options);
  std::map<unsigned, int> by_partition;
  for (int i = 0; i < 200; ++i) ++by_partition[partition_of(c->send(topic, "spread"))];
  EXPECT_EQ(by_partition.size(), 4u);
  for (const auto& [p, n] : by_partition) EXPECT_GE(n, 40) << "partition " << p;

  std::vector<OutgoingMessage> keyed;
  for (int i = 0; i < 10; ++i) {
    for (int k = 0; k < 20; ++k) {
      keyed.push_back({fmt::format("{}", i), fmt::format("key{}", k), Micros{0}, std::nullopt});
    }
  }
  std::vector<std::uint64_t> ids = c->send_batch(topic, keyed);
  std::map<std::string, std::set<unsigned>> partitions_of_key;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    partitions_of_key[*keyed[i].key].insert(partition_of(ids[i]));
  }
  std::set<unsigned> used;
  for (const auto& [key, ps] : partitions_of_key) {
    EXPECT_EQ(ps.size(), 1u) << key;
    used.insert(*ps.begin());
  }
  EXPECT_GT(used.size(), 1u);

  // Partition 2 only.
  ReceiveOptions only2;
  only2.max_messages = 1000;
  only2.partitions = {2};
  auto from2 = c->receive(topic, only2);
  EXPECT_EQ(static_cast<int>(from2.size()),
            by_partition[2] + static_cast<int>(std::count_if(
                                  partitions_of_key.begin(), partitions_of_key.end(),
                                  [](const auto& kv) { return *kv.second.begin() == 2; })));
  for (const Message& m : from2) {
    EXPECT_EQ(partition_of(m.id), 2u);
    EXPECT_EQ(c->nack(topic, m.receipt, Micros{0}), Settle::kOk);
  }

  // Everything, acknowledged as it comes: each key in order.
  std::map<std::string, int> next_of_key;
  std::size_t total = 0;
  ReceiveOptions all;
  all.max_messages = 100;
  for (int round = 0; round < 100 && total < 400; ++round) {
    std::vector<std::string> receipts;
    for (const Message& m : c->receive(topic, all)) {
      ++total;
      receipts.push_back(m.receipt);
      if (!m.key) continue;
      EXPECT_EQ(std::stoi(m.payload), next_of_key[*m.key]) << *m.key;
      next_of_key[*m.key] = std::stoi(m.payload) + 1;
    }
    c->ack(topic, receipts);
  }
  EXPECT_EQ(total, 400u);
  for (const auto& [key, next] : next_of_key) EXPECT_EQ(next, 10) << key;

  TopicOptions more = c->topic(topic).options;
  more.partitions = 8;
  c->update_topic(topic, more);
  std::set<unsigned> now_used;
  for (int i = 0; i < 80; ++i) now_used.insert(partition_of(c->send(topic, "later")));
  EXPECT_EQ(now_used.size(), 8u);
  more.partitions = 2;
  EXPECT_THROW(c->update_topic(topic, more), Error);
  ReceiveOptions bad;
  bad.partitions = {8};
  EXPECT_THROW(c->receive(topic, bad), Error);
}

// Acknowledged messages stay in the archive for the topic's retention; a purge deletes exactly
// those acknowledged longer ago.
TEST(Archive, PurgeRemovesExactlyWhatIsPastRetention) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.archive = 3s;
  c->create_topic(topic, options);
  auto send_and_ack = [&](const std::string& wave) {
    std::vector<OutgoingMessage> batch;
    for (int i = 0; i < 10; ++i) {
      batch.push_back({fmt::format("{} {}", wave, i), std::nullopt, Micros{0}, std::nullopt});
    }
    std::vector<std::uint64_t> ids = c->send_batch(topic, batch);
    std::vector<std::string> receipts;
    for (const Message& m : c->receive(topic, {.max_messages = 10})) receipts.push_back(m.receipt);
    EXPECT_EQ(receipts.size(), 10u);
    for (Settle s : c->ack(topic, receipts)) EXPECT_EQ(s, Settle::kOk);
    return std::set<std::uint64_t>(ids.begin(), ids.end());
  };
  const std::set<std::uint64_t> old_wave = send_and_ack("old");
  std::this_thread::sleep_for(2s);
  const std::set<std::uint64_t> new_wave = send_and_ack("new");
  EXPECT_EQ(c->archived(topic).size(), 20u);
  std::this_thread::sleep_for(1600ms);  // old: 3.6 s past acknowledgement, new: 1.6 s
  EXPECT_EQ(c->purge_archive(topic), 10u);
  std::set<std::uint64_t> left;
  for (const ArchivedMessage& m : c->archived(topic)) {
    left.insert(m.id);
    EXPECT_EQ(m.payload.substr(0, 3), "new");
    EXPECT_GE(m.acked_at, m.enqueued_at);
  }
  EXPECT_EQ(left, new_wave);
  // Exactly-once processing archives what it deletes, in its transaction.
  const std::uint64_t processed_id = c->send(topic, "processed");
  EXPECT_EQ(c->process(topic, {}, [](Transaction&, std::span<const Message>) {}), 1u);
  EXPECT_EQ(c->archived(topic, processed_id).at(0).payload, "processed");
  EXPECT_EQ(c->purge_archive(topic), 0u);
  // The archive off: everything in it is past retention.
  options.archive = Micros{0};
  c->update_topic(topic, options);
  EXPECT_EQ(c->purge_archive(topic), 11u);
  EXPECT_TRUE(c->archived(topic).empty());
  c->send(topic, "not archived");
  auto got = c->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  c->ack(topic, got[0].receipt);
  EXPECT_TRUE(c->archived(topic).empty());
}

TEST(GroupsCli, GroupAndArchiveCommands) {
  const std::string topic = topic_for_test();
  ASSERT_EQ(test::run_txmq({"topic", "create", topic, "--partitions", "3", "--archive", "60"}).exit_code, 0);
  ASSERT_EQ(test::run_txmq({"group", "create", topic, "audit", "--from", "earliest"}).exit_code, 0);
  EXPECT_EQ(test::run_txmq({"group", "create", topic, "x", "--from", "yesterday"}).exit_code, 5);
  ASSERT_EQ(test::run_txmq({"send", topic, "hello"}).exit_code, 0);
  auto listed = test::run_txmq({"--json", "group", "list", topic});
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.out.find("\"group\":\"audit\""), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("\"ready\":1"), std::string::npos) << listed.out;
  auto got = test::run_txmq({"--json", "receive", topic, "--group", "audit"});
  ASSERT_EQ(got.exit_code, 0);
  const auto message = nlohmann::json::parse(got.out);
  const std::string receipt = message["receipt"];
  EXPECT_EQ(test::run_txmq({"ack", topic, receipt, "--group", "nosuch"}).exit_code, 3);
  EXPECT_EQ(test::run_txmq({"ack", topic, receipt, "--group", "audit"}).exit_code, 0);
  auto stats = test::run_txmq({"--json", "stats", topic, "--group", "audit"});
  EXPECT_NE(stats.out.find("\"ready\":0"), std::string::npos) << stats.out;
  stats = test::run_txmq({"--json", "stats", topic});
  EXPECT_NE(stats.out.find("\"ready\":1"), std::string::npos) << stats.out;
  auto archived = test::run_txmq({"--json", "archive", "list", topic});
  EXPECT_NE(archived.out.find("\"payload\":\"hello\""), std::string::npos) << archived.out;
  auto purged = test::run_txmq({"--json", "archive", "purge", topic});
  EXPECT_NE(purged.out.find("\"purged\":0"), std::string::npos) << purged.out;
  EXPECT_EQ(test::run_txmq({"group", "drop", topic, "audit"}).exit_code, 0);
  EXPECT_EQ(test::run_txmq({"topic", "set", topic, "--partitions", "2"}).exit_code, 5);
  EXPECT_EQ(test::run_txmq({"topic", "drop", topic}).exit_code, 0);
}

}  // namespace
}  // namespace txmq
