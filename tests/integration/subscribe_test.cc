// Client::subscribe: long polling with a callback instead of a blocked thread (waiting.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
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
  // One waiter thread per topic, the dispatcher, a spare.
  EXPECT_LE(threads_grew, kTopics + 2);
  // One registered watch connection per topic, not per subscription.
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

}  // namespace
}  // namespace txmq
