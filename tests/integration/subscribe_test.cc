// Client::subscribe: long polling with a callback instead of a blocked thread (waiting.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;
using SteadyClock = std::chrono::steady_clock;

// A wake-up the test can wait for.
class Signal {
 public:
  void raise() {
    {
      std::lock_guard lock(mutex_);
      ++count_;
      last_ = Clock::now();
    }
    raised_.notify_all();
  }
  // Waits until it was raised more than `seen` times; false when `limit` passed first.
  bool wait_past(int seen, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return raised_.wait_for(lock, limit, [&] { return count_ > seen; });
  }
  int count() {
    std::lock_guard lock(mutex_);
    return count_;
  }
  Clock::time_point last() {
    std::lock_guard lock(mutex_);
    return last_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable raised_;
  int count_ = 0;
  Clock::time_point last_;
};

int thread_count() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                        std::filesystem::directory_iterator{}));
}

long vm_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

std::uint64_t server_questions(internal::Connection& admin) {
  internal::Result r = admin.execute("SHOW GLOBAL STATUS LIKE 'Questions'", {});
  return std::stoull(r.rows.at(0).bytes(1));
}

TEST(Subscribe, ASendFromAnotherProcessWakesTheSubscriberWithinMilliseconds) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  // Three rounds: the waiter's one-second look alone would land within 100 ms of a send only
  // about one time in ten.
  for (int round = 0; round < 3; ++round) {
    Signal woken;
    Client::Subscription subscription = c->subscribe(topic, "", [&] { woken.raise(); });
    std::this_thread::sleep_for(300ms);  // its waiter watches by now
    ASSERT_EQ(woken.count(), 0) << "woken with nothing sent";
    const std::string payload = fmt::format("round {}", round);
    auto sent = test::run_txmq({"send", topic, payload});
    ASSERT_EQ(sent.exit_code, 0) << sent.err;
    ASSERT_TRUE(woken.wait_past(0, 5s)) << "the send did not wake the subscriber";
    auto got = c->receive(topic);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payload, payload);
    // From the server's clock at the insert to the wake-up (one machine, one clock).
    const double latency =
        std::chrono::duration<double>(woken.last() - got[0].enqueued_at).count();
    EXPECT_LT(latency, 0.100) << "round " << round;
    c->ack(topic, got[0].receipt);
  }
}

TEST(Subscribe, AThousandIdleSubscriptionsCostNoThreadOrConnectionEach) {
  auto c = client();
  constexpr int kTopics = 10;
  constexpr int kPerTopic = 100;
  std::vector<std::string> topics;
  for (int t = 0; t < kTopics; ++t) {
    topics.push_back(topic_for_test(fmt::format("t{}", t)));
    c->create_topic(topics.back());
  }
  auto admin = test::admin();
  const int threads_before = thread_count();
  const long rss_before = vm_rss_kib();
  std::vector<std::unique_ptr<std::atomic<int>>> woken;
  for (int t = 0; t < kTopics; ++t) woken.push_back(std::make_unique<std::atomic<int>>(0));
  std::vector<Client::Subscription> subscriptions;
  for (int i = 0; i < kTopics * kPerTopic; ++i) {
    std::atomic<int>* counter = woken[i % kTopics].get();
    subscriptions.push_back(c->subscribe(topics[i % kTopics], "", [counter] { ++*counter; }));
  }
  std::this_thread::sleep_for(1500ms);
  const int threads_grew = thread_count() - threads_before;
  const long rss_grew = vm_rss_kib() - rss_before;
  // A watch thread (ten topics share one), the dispatcher, the announcer (it pokes the watch
  // when a topic joins), a spare.
  EXPECT_LE(threads_grew, 4);
  // Each topic registered once (by the watch connection), not per subscription.
  for (const std::string& topic : topics) {
    internal::Result r =
        admin->execute("SELECT COUNT(*) FROM txmq_waiters WHERE topic = ?",
                       {std::string_view(topic)});
    EXPECT_EQ(r.rows.at(0).i64(0), 1) << topic;
  }
  // The figures for the record. Questions counts the whole server's statements, other tests'
  // too when they run at the same time.
  const std::uint64_t questions_before = server_questions(*admin);
  const auto measured_from = SteadyClock::now();
  std::this_thread::sleep_for(10s);
  const double per_second =
      static_cast<double>(server_questions(*admin) - questions_before - 1) /
      std::chrono::duration<double>(SteadyClock::now() - measured_from).count();
  std::printf(
      "1,000 idle subscriptions on %d topics: threads +%d, VmRSS +%ld KiB, server statements "
      "%.1f/s\n",
      kTopics, threads_grew, rss_grew, per_second);
  for (int t = 0; t < kTopics; ++t) EXPECT_EQ(woken[t]->load(), 0) << "woken while idle";

  auto producer = client();
  for (const std::string& topic : topics) producer->send(topic, "wake");
  const auto deadline = SteadyClock::now() + 5s;
  for (int t = 0; t < kTopics; ++t) {
    while (woken[t]->load() == 0 && SteadyClock::now() < deadline) std::this_thread::sleep_for(5ms);
    EXPECT_GE(woken[t]->load(), 1) << "no subscriber of " << topics[t] << " was woken";
  }
}

TEST(Subscribe, ADestroyedSubscriptionIsNeverWokenAndPassesItsTurnOn) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  Signal first;
  Signal second;
  auto cancelled = std::make_unique<Client::Subscription>(
      c->subscribe(topic, "", [&] { first.raise(); }));
  Client::Subscription kept = c->subscribe(topic, "", [&] { second.raise(); });
  std::this_thread::sleep_for(300ms);
  cancelled.reset();
  auto producer = client();
  const auto sent_at = SteadyClock::now();
  producer->send(topic, "one");
  EXPECT_TRUE(second.wait_past(0, 5s)) << "the remaining subscriber was not woken";
  EXPECT_LT(SteadyClock::now() - sent_at, 500ms) << "woken by the look, not by the send";
  std::this_thread::sleep_for(1500ms);  // the waiter's looks see the unclaimed message too
  EXPECT_EQ(first.count(), 0) << "a destroyed subscription was woken";
}

TEST(Subscribe, NoWakeRunsAfterTheSubscriptionsDestructorReturned) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  struct Shared {
    std::atomic<bool> destroyed{false};
    std::atomic<int> late{0};
    std::atomic<int> calls{0};
  };
  std::vector<std::shared_ptr<Shared>> all;
  for (int i = 0; i < 200; ++i) {
    auto shared = std::make_shared<Shared>();
    all.push_back(shared);
    auto subscription = std::make_unique<Client::Subscription>(c->subscribe(topic, "", [shared] {
      ++shared->calls;
      std::this_thread::sleep_for(1ms);  // a call still running when the destructor starts
      if (shared->destroyed) ++shared->late;
    }));
    c->send(topic, "m");  // this client's own send wakes its subscriber at once
    if (i % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 20)));
    subscription.reset();
    shared->destroyed = true;
  }
  std::this_thread::sleep_for(300ms);
  int calls = 0;
  for (const auto& shared : all) {
    EXPECT_EQ(shared->late.load(), 0);
    EXPECT_LE(shared->calls.load(), 1) << "called more than once";
    calls += shared->calls.load();
  }
  EXPECT_GT(calls, 0);  // the race was run, not avoided
}

TEST(Subscribe, SubscribersOfAnotherGroupAndOfPartitionedTopicsAreWoken) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.partitions = 3;
  c->create_topic(topic, options);
  ASSERT_TRUE(c->create_group(topic, "g2"));
  Signal g2;
  Signal standard;
  Client::Subscription on_g2 = c->subscribe(topic, "g2", [&] { g2.raise(); });
  Client::Subscription on_default = c->subscribe(topic, "", [&] { standard.raise(); });
  std::this_thread::sleep_for(300ms);
  auto producer = client();
  const auto sent_at = SteadyClock::now();
  producer->send(topic, "for every group", {.key = "k7"});
  ASSERT_TRUE(g2.wait_past(0, 5s)) << "the subscriber of g2 was not woken";
  EXPECT_LT(SteadyClock::now() - sent_at, 500ms);
  ASSERT_TRUE(standard.wait_past(0, 5s)) << "the subscriber of the default group was not woken";
  auto got = c->receive(topic, {.group = "g2"});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "for every group");

  // A subscription on one group is not woken by messages that only another group still has.
  c->ack(topic, got[0].receipt);
  Signal again;
  Client::Subscription g2_again = c->subscribe(topic, "g2", [&] { again.raise(); });
  std::this_thread::sleep_for(1500ms);  // the default group's copy is unclaimed all along
  EXPECT_EQ(again.count(), 0);
}

TEST(Subscribe, TheWakeReceiveResubscribeLoopDrainsMessagesSentOneByOne) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  constexpr int kMessages = 1000;
  const auto deadline = SteadyClock::now() + 90s;
  std::atomic<int> received{0};
  std::atomic<int> duplicates{0};
  std::vector<double> waits;  // seconds from a send to its message's receipt
  std::thread consumer([&] {
    std::vector<bool> seen(kMessages, false);
    Signal woken;
    while (received.load() < kMessages && SteadyClock::now() < deadline) {
      // Subscribed before the claim looks, so that a send committed after the look wakes it
      // (subscribing after an empty claim would miss a send in between, until the waiter's look).
      const int before = woken.count();
      Client::Subscription subscription = c->subscribe(topic, "", [&] { woken.raise(); });
      std::vector<Message> got = c->receive(topic, {.max_messages = 10});
      if (got.empty()) {
        woken.wait_past(before, 1s);  // past deadline checks only; a wake-up comes far sooner
        continue;
      }
      std::vector<std::string> receipts;
      for (const Message& m : got) {
        const int n = std::stoi(m.payload);
        if (seen.at(n)) ++duplicates;
        seen.at(n) = true;
        receipts.push_back(m.receipt);
      }
      c->ack(topic, receipts);
      received += static_cast<int>(got.size());
    }
  });
  // Another client sends each message once the one before was received, so that every message
  // needs a wake-up: one that was lost shows as a wait of up to a second (the waiter's look).
  auto producer = client();
  for (int i = 0; i < kMessages && SteadyClock::now() < deadline; ++i) {
    const auto sent_at = SteadyClock::now();
    producer->send(topic, std::to_string(i));
    while (received.load() <= i && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    waits.push_back(std::chrono::duration<double>(SteadyClock::now() - sent_at).count());
  }
  consumer.join();
  EXPECT_EQ(received.load(), kMessages);
  EXPECT_EQ(duplicates.load(), 0);
  std::sort(waits.begin(), waits.end());
  const auto slow = std::count_if(waits.begin(), waits.end(), [](double w) { return w > 0.5; });
  std::printf("send to receipt over %zu messages: median %.1f ms, p99 %.1f ms, max %.1f ms, "
              "over 0.5 s: %td\n",
              waits.size(), waits[waits.size() / 2] * 1e3, waits[waits.size() * 99 / 100] * 1e3,
              waits.back() * 1e3, slow);
  // A lost wake-up used to wait for the waiter's next look, up to a second: under
  // AddressSanitizer on a loaded 2-core machine 4 of 1,000 did (max 1.01 s). The cause was a
  // sender's KILL QUERY landing between two of the waiter's statements, which the server drops,
  // before a SLEEP that does not look; the waiter now checks its registration before such a
  // SLEEP and keeps it under 250 ms (waiting.cc). Scheduling on a loaded machine can still
  // delay a few; none may wait much past a look.
  EXPECT_LE(slow, 10) << "wake-ups were lost";
  EXPECT_LT(waits.back(), 2.5) << "a message waited past the waiter's look";
}


// Names for `count` topics of this test, dropped first if a previous run left them (one client for
// all: topic_for_test makes a client per name).
std::vector<std::string> topics_for_test(Client& c, const std::string& prefix, int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    names.push_back(fmt::format("{}{}", prefix, i));
    test::drop_topic_if_exists(c, names.back());
  }
  return names;
}

// The watch connections serving `topics` (their waiters' registrations) that are alive.
std::set<std::uint64_t> watch_connections(internal::Connection& admin,
                                          const std::vector<std::string>& topics) {
  const std::set<std::string> wanted(topics.begin(), topics.end());
  std::set<std::uint64_t> ids;
  internal::Result r = admin.execute(
      "SELECT w.connection_id, w.topic FROM txmq_waiters w JOIN information_schema.PROCESSLIST p "
      "ON p.ID = w.connection_id",
      {});
  for (const internal::Row& row : r.rows) {
    if (wanted.contains(row.bytes(1))) ids.insert(row.u64(0));
  }
  return ids;
}

std::size_t registered_topics(internal::Connection& admin, const std::vector<std::string>& topics) {
  const std::set<std::string> wanted(topics.begin(), topics.end());
  std::set<std::string> seen;
  internal::Result r = admin.execute("SELECT topic FROM txmq_waiters", {});
  for (const internal::Row& row : r.rows) {
    if (wanted.contains(row.bytes(0))) seen.insert(row.bytes(0));
  }
  return seen.size();
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * values.size()))];
}

// Long polls on many topics share a few watch threads and connections (waiting.cc): 1,000
// subscriptions on 1,000 topics cost a bounded number of each, and a send from another client
// wakes exactly the subscription of its topic, within milliseconds. TXMQ_WATCH_TOPICS sets the
// topic count (for the figures in the report), TXMQ_WATCH_IDLE_SECONDS the idle measurement.
TEST(Subscribe, AThousandTopicsShareABoundedNumberOfWatchThreadsAndConnections) {
  const int topic_count =
      std::getenv("TXMQ_WATCH_TOPICS") ? std::atoi(std::getenv("TXMQ_WATCH_TOPICS")) : 1000;
  const int idle_seconds = std::getenv("TXMQ_WATCH_IDLE_SECONDS")
                               ? std::atoi(std::getenv("TXMQ_WATCH_IDLE_SECONDS"))
                               : 10;
  auto c = client();
  auto producer = client();
  auto admin = test::admin();
  const std::vector<std::string> topics = topics_for_test(*c, "t_watch_many_", topic_count);
  {
    // Created from a few threads: a topic costs a few tables.
    std::vector<std::thread> creators;
    for (int k = 0; k < 4; ++k) {
      creators.emplace_back([&, k] {
        auto creator = client();
        for (int i = k; i < topic_count; i += 4) creator->create_topic(topics[i]);
      });
    }
    for (std::thread& t : creators) t.join();
  }
  const int threads_before = thread_count();
  std::vector<std::unique_ptr<Signal>> woken;
  std::vector<Client::Subscription> subscriptions;
  for (int i = 0; i < topic_count; ++i) {
    woken.push_back(std::make_unique<Signal>());
    Signal* signal = woken.back().get();
    subscriptions.push_back(c->subscribe(topics[i], "", [signal] { signal->raise(); }));
  }
  // Every channel is watched (registered) by now, or soon.
  const auto registered_by = SteadyClock::now() + 20s;
  while (registered_topics(*admin, topics) < topics.size() && SteadyClock::now() < registered_by) {
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(1500ms);
  const int threads_grew = thread_count() - threads_before;
  const std::size_t connections = watch_connections(*admin, topics).size();
  EXPECT_EQ(registered_topics(*admin, topics), topics.size());
  std::printf("%d subscribed topics: threads +%d, watch connections %zu\n", topic_count,
              threads_grew, connections);
  EXPECT_LE(threads_grew, 16);
  EXPECT_LE(connections, 16u);

  if (idle_seconds > 0) {
    const std::uint64_t questions_before = server_questions(*admin);
    const auto measured_from = SteadyClock::now();
    std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
    const double per_second =
        static_cast<double>(server_questions(*admin) - questions_before - 1) /
        std::chrono::duration<double>(SteadyClock::now() - measured_from).count();
    std::printf("%d idle topics: server statements %.1f/s (the whole server's)\n", topic_count,
                per_second);
  }
  // A subscription whose channel was not watched yet when due polls (fires once): subscribe
  // again. None is woken after.
  // (Their channels may have lingered out meanwhile, and join again.)
  for (int round = 0; round < 5; ++round) {
    int polled = 0;
    for (int i = 0; i < topic_count; ++i) {
      if (woken[i]->count() == 0) continue;
      ++polled;
      subscriptions[i] = {};  // no call after this: the old signal may go
      woken[i] = std::make_unique<Signal>();
      Signal* signal = woken[i].get();
      subscriptions[i] = c->subscribe(topics[i], "", [signal] { signal->raise(); });
    }
    std::printf("%d of %d subscriptions polled before their channel was watched\n", polled,
                topic_count);
    std::this_thread::sleep_for(1500ms);
    if (polled == 0) break;
  }
  for (int i = 0; i < topic_count; ++i) ASSERT_EQ(woken[i]->count(), 0) << "woken while idle";

  // Single sends to 50 random topics, one at a time, from another client.
  std::mt19937 random(42);
  std::vector<int> order(topic_count);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  order.resize(std::min(50, topic_count));
  std::vector<double> latencies;
  for (int i : order) {
    const auto sent_at = Clock::now();
    producer->send(topics[i], "wake");
    ASSERT_TRUE(woken[i]->wait_past(0, 1s)) << "the send to " << topics[i] << " woke nobody";
    latencies.push_back(std::chrono::duration<double>(woken[i]->last() - sent_at).count());
  }
  std::printf("wake-up after a send, %zu sends with %d topics watched: p50 %.1f ms, p99 %.1f ms, "
              "max %.1f ms\n",
              latencies.size(), topic_count, percentile(latencies, 0.5) * 1e3,
              percentile(latencies, 0.99) * 1e3, percentile(latencies, 1.0) * 1e3);
  std::this_thread::sleep_for(1500ms);  // a look after the sends wakes nobody else either
  const std::set<int> sent_to(order.begin(), order.end());
  for (int i = 0; i < topic_count; ++i) {
    EXPECT_EQ(woken[i]->count(), sent_to.contains(i) ? 1 : 0) << topics[i];
  }
  subscriptions.clear();
  for (const std::string& topic : topics) c->drop_topic(topic);
}

// Two channels of one watch: a send to one wakes only its subscribers, and sends to both at once
// (two announcements that may land as one KILL, or one during the other's handling) wake both.
TEST(Subscribe, AWakeUpOnOneChannelOfASharedWatchWakesOnlyThatChannel) {
  auto c = client();
  const std::string a = topic_for_test("a");
  const std::string b = topic_for_test("b");
  c->create_topic(a);
  c->create_topic(b);
  auto producer_a = client();
  auto producer_b = client();
  for (int round = 0; round < 10; ++round) {
    Signal on_a;
    Signal on_b;
    Client::Subscription sa = c->subscribe(a, "", [&] { on_a.raise(); });
    Client::Subscription sb = c->subscribe(b, "", [&] { on_b.raise(); });
    std::this_thread::sleep_for(round == 0 ? 500ms : 50ms);
    if (round % 2 == 0) {
      const auto sent_at = Clock::now();
      producer_a->send(a, "only a");
      ASSERT_TRUE(on_a.wait_past(0, 2s)) << "round " << round;
      EXPECT_LT(on_a.last() - sent_at, 500ms) << "round " << round;
      std::this_thread::sleep_for(1200ms);  // past a look
      EXPECT_EQ(on_b.count(), 0) << "a send to " << a << " woke a subscriber of " << b;
    } else {
      const auto sent_at = Clock::now();
      std::thread other([&] { producer_b->send(b, "b"); });
      producer_a->send(a, "a");
      other.join();
      ASSERT_TRUE(on_a.wait_past(0, 2s)) << "round " << round;
      ASSERT_TRUE(on_b.wait_past(0, 2s)) << "round " << round;
      EXPECT_LT(on_a.last() - sent_at, 500ms) << "round " << round;
      EXPECT_LT(on_b.last() - sent_at, 500ms) << "round " << round;
    }
    for (const std::string& topic : {a, b}) {
      for (const Message& m : c->receive(topic, {.max_messages = 10})) c->ack(topic, m.receipt);
    }
  }
}

// Channels join a watch (new subscriptions), leave it (dropped topics; idle ones after their
// linger) while another client sends to the channels that stay: no wake-up is lost (a lost one
// waits for the next look, up to a second).
TEST(Subscribe, NoWakeUpIsLostWhileChannelsJoinAndLeaveTheWatch) {
  auto c = client();
  auto producer = client();
  const std::vector<std::string> stable = topics_for_test(*c, "t_watch_stable_", 6);
  const std::vector<std::string> churn = topics_for_test(*c, "t_watch_churn_", 60);
  for (const std::string& t : stable) c->create_topic(t);
  const auto until = SteadyClock::now() + 14s;
  std::atomic<int> joined{0};
  std::thread churner([&] {
    auto admin_client = client();
    std::vector<Client::Subscription> held;
    for (std::size_t i = 0; i < churn.size() && SteadyClock::now() < until; ++i) {
      admin_client->create_topic(churn[i]);
      held.push_back(c->subscribe(churn[i], "", [] {}));
      ++joined;
      if (i % 3 == 2) {
        admin_client->drop_topic(churn[i - 1]);  // leaves at once
      } else if (i % 3 == 0 && !held.empty()) {
        held.erase(held.begin());  // lingers, then leaves
      }
      std::this_thread::sleep_for(150ms);
    }
  });
  std::vector<double> latencies;
  std::mt19937 random(7);
  while (SteadyClock::now() < until) {
    const std::size_t i = random() % stable.size();
    Signal woken;
    Client::Subscription s = c->subscribe(stable[i], "", [&] { woken.raise(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 40));
    const auto sent_at = Clock::now();
    producer->send(stable[i], "m");
    ASSERT_TRUE(woken.wait_past(0, 3s)) << stable[i];
    latencies.push_back(std::chrono::duration<double>(woken.last() - sent_at).count());
    for (const Message& m : c->receive(stable[i], {.max_messages = 10})) {
      c->ack(stable[i], m.receipt);
    }
  }
  churner.join();
  const auto slow = std::count_if(latencies.begin(), latencies.end(),
                                  [](double l) { return l > 0.3; });
  std::printf("%zu wake-ups while %d channels joined: p50 %.1f ms, p99 %.1f ms, max %.1f ms, "
              "over 300 ms: %td\n",
              latencies.size(), joined.load(), percentile(latencies, 0.5) * 1e3,
              percentile(latencies, 0.99) * 1e3, percentile(latencies, 1.0) * 1e3, slow);
  EXPECT_GT(latencies.size(), 50u);
  // A dropped KILL before a pause costs up to 250 ms (waiting.cc); a lost wake-up costs a look.
  EXPECT_LE(slow, 2) << "wake-ups were lost";
  for (const std::string& t : churn) test::drop_topic_if_exists(*c, t);
}

// Sends to one channel KILL its watch every announcer round (5 ms), faster than a pass over a
// full watch's channels: the pass resumes where the KILL stopped it, so the watch's other channels
// are still woken within milliseconds.
TEST(Subscribe, AStormOfSendsToOneChannelDoesNotStarveTheOtherChannelsOfItsWatch) {
  auto c = client();
  // 64: one full watch (TXMQ_STORM_TOPICS=1000 for the figures: 4 watches of about 250).
  const int topic_count =
      std::getenv("TXMQ_STORM_TOPICS") ? std::atoi(std::getenv("TXMQ_STORM_TOPICS")) : 64;
  const std::vector<std::string> topics = topics_for_test(*c, "t_watch_storm_", topic_count);
  for (const std::string& t : topics) c->create_topic(t);
  std::vector<std::unique_ptr<Signal>> woken;
  std::vector<Client::Subscription> subscriptions;
  for (const std::string& t : topics) {
    woken.push_back(std::make_unique<Signal>());
    Signal* signal = woken.back().get();
    subscriptions.push_back(c->subscribe(t, "", [signal] { signal->raise(); }));
  }
  std::this_thread::sleep_for(1500ms);
  std::atomic<bool> storming{true};
  std::atomic<int> stormed{0};
  std::thread storm([&] {
    auto producer = client();
    while (storming) {
      producer->send(topics[0], "storm");
      ++stormed;
    }
  });
  auto producer = client();
  std::mt19937 random(11);
  std::vector<double> latencies;
  for (int n = 0; n < 30; ++n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + random() % 30));
    const std::size_t i = 1 + random() % (topics.size() - 1);
    const int before = woken[i]->count();
    subscriptions[i] = {};
    Signal* signal = woken[i].get();
    subscriptions[i] = c->subscribe(topics[i], "", [signal] { signal->raise(); });
    for (const Message& m : c->receive(topics[i], {.max_messages = 10})) {
      c->ack(topics[i], m.receipt);
    }
    const auto sent_at = Clock::now();
    producer->send(topics[i], "m");
    ASSERT_TRUE(woken[i]->wait_past(before, 3s)) << topics[i];
    latencies.push_back(std::chrono::duration<double>(woken[i]->last() - sent_at).count());
  }
  storming = false;
  storm.join();
  std::printf("%zu wake-ups during a storm of %d sends to one channel of the watch: p50 %.1f ms, "
              "p99 %.1f ms, max %.1f ms\n",
              latencies.size(), stormed.load(), percentile(latencies, 0.5) * 1e3,
              percentile(latencies, 0.99) * 1e3, percentile(latencies, 1.0) * 1e3);
  EXPECT_LT(percentile(latencies, 1.0), 1.0) << "a wake-up waited for a look";
  subscriptions.clear();
  for (const std::string& t : topics) c->drop_topic(t);
}

}  // namespace
}  // namespace txmq
