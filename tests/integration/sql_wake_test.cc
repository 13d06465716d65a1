// Wake-ups for sends by the SQL interface's routines (docs/design/sql-calls.md): txmq_send runs
// inside the caller's transaction, so it KILLs the waiting watches *before* the COMMIT; the
// watch waits on the uncommitted row's lock (src/wait/waiters.cc, "fence").
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::topic_for_test;
using SteadyClock = std::chrono::steady_clock;

// CALL txmq_send on the caller's connection, in its transaction: the routine inserts the
// message, then KILLs the channel's oldest registered watch (read, not taken: it writes nothing
// but the message) before the caller's COMMIT. Payloads here are plain text.
void routine_send(internal::Connection& c, const std::string& topic, const std::string& payload) {
  internal::Result r =
      c.query_rows(fmt::format("CALL txmq_send('{}', '{}', NULL)", topic, payload));
  ASSERT_EQ(r.rows.size(), 1u);
}

// A consumer thread that receives with a wait, in a loop, and says when each message arrived.
class Consumer {
 public:
  struct Got {
    std::string payload;
    SteadyClock::time_point at;
  };
  Consumer(std::string topic, std::chrono::seconds wait)
      : client_(test::client()), topic_(std::move(topic)), wait_(wait) {
    thread_ = std::thread([this] { run(); });
  }
  ~Consumer() {
    stop_ = true;
    thread_.join();  // within one wait
  }
  std::optional<Got> next(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (!arrived_.wait_for(lock, limit, [&] { return !got_.empty(); })) return std::nullopt;
    Got g = std::move(got_.front());
    got_.pop_front();
    return g;
  }
  // Receives that returned with nothing, and when the last one did.
  int empty_returns() {
    std::lock_guard lock(mutex_);
    return empty_;
  }
  Client& client() { return *client_; }

 private:
  void run() {
    ReceiveOptions o;
    o.wait = wait_;
    while (!stop_) {
      std::vector<Message> got = client_->receive(topic_, o);
      const auto at = SteadyClock::now();
      {
        std::lock_guard lock(mutex_);
        if (got.empty()) ++empty_;
        for (Message& m : got) got_.push_back({m.payload, at});
      }
      arrived_.notify_all();
      for (Message& m : got) client_->ack(topic_, m.receipt);
    }
  }

  std::unique_ptr<Client> client_;
  const std::string topic_;
  const std::chrono::seconds wait_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<Got> got_;
  int empty_ = 0;
  std::thread thread_;
};

// The connection id of the watch registered for `channel` (0 when none is).
std::uint64_t watch_of(internal::Connection& admin, const std::string& channel) {
  for (int i = 0; i < 100; ++i) {
    internal::Result r = admin.execute("SELECT connection_id FROM txmq_waiters WHERE topic = ?",
                                       {std::string_view(channel)});
    if (!r.rows.empty()) return r.rows.at(0).u64(0);
    std::this_thread::sleep_for(20ms);
  }
  return 0;
}

// Statements one connection ran during `window`: exact from performance_schema (MySQL's
// default), else a lower bound from information_schema.PROCESSLIST's TIME_MS (MariaDB), which
// restarts with each statement: sampled every 10 ms, a watch that spins restarts it at nearly
// every sample, an idle one once a second.
double statements_per_second(internal::Connection& admin, std::uint64_t id,
                             std::chrono::milliseconds window) {
  const bool ps = admin.execute("SELECT @@performance_schema", {}).rows.at(0).i64(0) == 1;
  const auto count = [&] {
    return admin
        .execute(
            "SELECT COALESCE(SUM(e.COUNT_STAR), 0) FROM "
            "performance_schema.events_statements_summary_by_thread_by_event_name e JOIN "
            "performance_schema.threads t ON t.THREAD_ID = e.THREAD_ID WHERE "
            "t.PROCESSLIST_ID = ?",
            {id})
        .rows.at(0)
        .i64(0);
  };
  const auto start = SteadyClock::now();
  if (ps) {
    const std::int64_t before = count();
    std::this_thread::sleep_for(window);
    const std::int64_t after = count();
    return static_cast<double>(after - before) /
           std::chrono::duration<double>(SteadyClock::now() - start).count();
  }
  internal::Statement sample(admin, "SELECT TIME_MS FROM information_schema.PROCESSLIST "
                                    "WHERE ID = ?");
  const internal::Param params[] = {id};
  double last = -1;
  int restarts = 0;
  while (SteadyClock::now() - start < window) {
    internal::Result r = sample.execute(params);
    if (r.rows.empty()) break;
    const double ms = std::stod(r.rows.at(0).bytes(0));
    if (ms < last) ++restarts;
    last = ms;
    std::this_thread::sleep_for(10ms);
  }
  return restarts / std::chrono::duration<double>(SteadyClock::now() - start).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const std::size_t i =
      std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// A routine's send in a transaction that stays open 200 ms after its CALL: the consumer gets
// the message right after the COMMIT, not at its watch's next look (up to a second).
TEST(SqlWake, ARoutineSendWakesTheWaitingConsumerAtItsCommit) {
  const std::string topic = topic_for_test();
  test::client()->create_topic(topic);
  Consumer consumer(topic, 3s);
  auto sender = test::admin();
  auto admin = test::admin();
  ASSERT_NE(watch_of(*admin, topic), 0u) << "the consumer's watch did not register";
  std::mt19937 rng(7);
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i) {
    // An idle gap: the watch is back in its look.
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 100));
    const std::string payload = fmt::format("m{}", i);
    sender->begin();
    routine_send(*sender, topic, payload);
    std::this_thread::sleep_for(200ms);  // the caller's own work, after the CALL
    ASSERT_FALSE(consumer.next(0ms)) << "received before the COMMIT";
    const auto committing = SteadyClock::now();
    sender->commit();
    std::optional<Consumer::Got> got = consumer.next(5s);
    ASSERT_TRUE(got) << "message " << i << " not received";
    EXPECT_EQ(got->payload, payload);
    ms.push_back(std::chrono::duration<double, std::milli>(got->at - committing).count());
  }
  const double p50 = percentile(ms, 0.5);
  std::printf("routine send, 200 ms open, COMMIT to receive: p50 %.1f ms, p90 %.1f ms, max %.1f "
              "ms (%zu sends)\n",
              p50, percentile(ms, 0.9), percentile(ms, 1.0), ms.size());
  EXPECT_LE(p50, 50.0);
  EXPECT_LE(percentile(ms, 0.9), 250.0);
}

// A rolled-back send leaves the consumer waiting to the end of its wait, and the watch does not
// spin meanwhile.
TEST(SqlWake, ARolledBackRoutineSendLeavesTheConsumerWaiting) {
  const std::string topic = topic_for_test();
  test::client()->create_topic(topic);
  auto waiter = test::client();
  auto admin = test::admin();
  std::optional<std::vector<Message>> got;
  SteadyClock::time_point returned;
  const auto started = SteadyClock::now();
  std::thread receiving([&] {
    ReceiveOptions o;
    o.wait = 4s;
    got = waiter->receive(topic, o);
    returned = SteadyClock::now();
  });
  const std::uint64_t watch = watch_of(*admin, topic);
  ASSERT_NE(watch, 0u);
  std::this_thread::sleep_for(300ms);
  auto sender = test::admin();
  sender->begin();
  routine_send(*sender, topic, "never");
  std::thread rolling_back([&] {
    std::this_thread::sleep_for(200ms);
    sender->rollback();
  });
  const double rate = statements_per_second(*admin, watch, 2500ms);
  rolling_back.join();
  receiving.join();
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->empty());
  EXPECT_GE(returned - started, 3900ms) << "returned before the end of its wait";
  std::printf("watch statements/s after a rolled-back routine send: %.1f\n", rate);
  EXPECT_LE(rate, 4.0) << "the watch spins after the rollback";
}

// A sender that stays open longer than the watch's lock wait (a second) is still seen at its
// COMMIT, does not keep the watch from waking the consumers of its other channels, and costs
// about what an idle watch costs meanwhile.
TEST(SqlWake, ASenderOpenForSecondsDoesNotPinTheWatch) {
  const std::string slow = topic_for_test("slow");
  const std::string other = topic_for_test("other");
  auto producer = test::client();
  producer->create_topic(slow);
  producer->create_topic(other);
  // One client, so one watch for both channels.
  Consumer slow_consumer(slow, 3s);
  auto admin = test::admin();
  const std::uint64_t watch = watch_of(*admin, slow);
  ASSERT_NE(watch, 0u);
  std::optional<std::vector<Message>> other_got;
  SteadyClock::time_point other_at;
  std::thread other_receiver([&] {
    ReceiveOptions o;
    o.wait = 10s;
    other_got = slow_consumer.client().receive(other, o);
    other_at = SteadyClock::now();
  });
  ASSERT_EQ(watch_of(*admin, other), watch) << "the two channels are not on one watch";
  std::this_thread::sleep_for(300ms);

  auto sender = test::admin();
  const auto opened = SteadyClock::now();
  sender->begin();
  routine_send(*sender, slow, "slow");
  std::this_thread::sleep_for(1200ms);  // past the watch's first lock wait
  const auto sent_other = SteadyClock::now();
  producer->send(other, "other");  // the library's send: KILLs after its commit
  other_receiver.join();
  ASSERT_TRUE(other_got);
  ASSERT_EQ(other_got->size(), 1u);
  EXPECT_LT(other_at - sent_other, 250ms) << "the open sender pinned the watch";
  slow_consumer.client().ack(other, other_got->at(0).receipt);

  const double rate = statements_per_second(*admin, watch, 2000ms);
  std::printf("watch statements/s while a routine's sender is open: %.1f\n", rate);
  EXPECT_LE(rate, 4.0);
  ASSERT_FALSE(slow_consumer.next(0ms)) << "received before the COMMIT";
  const auto committing = SteadyClock::now();
  sender->commit();
  std::optional<Consumer::Got> got = slow_consumer.next(5s);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->payload, "slow");
  const double ms = std::chrono::duration<double, std::milli>(got->at - committing).count();
  std::printf("routine send open %.1f s: COMMIT to receive %.1f ms\n",
              std::chrono::duration<double>(committing - opened).count(), ms);
  EXPECT_LE(ms, 250.0);
}

// Waiting with nothing sent costs what it did: a look a second.
TEST(SqlWake, AnIdleWatchRunsAboutOneStatementASecond) {
  const std::string topic = topic_for_test();
  test::client()->create_topic(topic);
  Consumer consumer(topic, 3s);
  auto admin = test::admin();
  const std::uint64_t watch = watch_of(*admin, topic);
  ASSERT_NE(watch, 0u);
  std::this_thread::sleep_for(500ms);
  const double rate = statements_per_second(*admin, watch, 4000ms);
  std::printf("idle watch statements/s: %.1f\n", rate);
  EXPECT_LE(rate, 1.6);
  EXPECT_FALSE(consumer.next(0ms));
}

}  // namespace
}  // namespace txmq
