// Waiting and ordering: long polling across processes, keyed FIFO, delays, the retry policy and
// the Worker.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support.h"
#include "txmq/worker.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;
using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// Polls with receive(wait = 0) until a message comes; returns it and the seconds it took.
std::pair<Message, double> poll_for_message(Client& c, const std::string& topic,
                                            std::chrono::seconds limit = 10s) {
  const auto start = SteadyClock::now();
  for (;;) {
    auto got = c.receive(topic);
    if (!got.empty()) return {got[0], seconds_since(start)};
    if (SteadyClock::now() - start > limit) return {Message{}, seconds_since(start)};
    std::this_thread::sleep_for(10ms);
  }
}

// --- Long polling -------------------------------------------------------------------------------

TEST(LongPoll, AConsumerWaitingInAnotherProcessReceivesASendAtOnce) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  auto consumer = test::start_txmq({"receive", topic, "--wait", "10", "--json"});
  std::this_thread::sleep_for(1500ms);  // it is waiting by now
  ASSERT_FALSE(consumer.poll().has_value()) << consumer.err();
  const auto sent = SteadyClock::now();
  c->send(topic, "wake up");
  EXPECT_EQ(consumer.wait(), 0) << consumer.err();
  const double took = seconds_since(sent);
  auto got = nlohmann::json::parse(consumer.out());
  EXPECT_EQ(got["payload"], "wake up");
  // Well within the wait, and far faster than the one-second look that backs up the wake-up.
  EXPECT_LT(took, 0.9) << "the waiting consumer was not woken by the send";
}

TEST(LongPoll, AWaitEndsEmptyWhenNothingComes) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const auto start = SteadyClock::now();
  EXPECT_TRUE(c->receive(topic, {.wait = 700ms}).empty());
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.69);
  EXPECT_LT(took, 2.0);
}

TEST(LongPoll, ManyWaitingThreadsShareTheWaitAndEachSendWakesOne) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  std::atomic<int> received{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int tries = 0; tries < 10 && received.load() < 8; ++tries) {
        auto got = c->receive(topic, {.wait = 1s});
        if (!got.empty()) {
          received++;
          c->ack(topic, got[0].receipt);
          return;
        }
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  auto producer = client();
  for (int i = 0; i < 8; ++i) {
    producer->send(topic, "m");
    std::this_thread::sleep_for(20ms);
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(received.load(), 8);
}

TEST(LongPoll, ADelayedMessageIsReceivedByAWaiterOnceDue) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const auto start = SteadyClock::now();
  c->send(topic, "later", {.delay = 1500ms});
  auto got = c->receive(topic, {.wait = 5s});
  const double took = seconds_since(start);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GE(took, 1.45);  // invisible until due
  EXPECT_LT(took, 3.0);   // seen by the waiter's next look
}

// --- Delays and the retry policy --------------------------------------------------------------

TEST(Delay, DelayedMessagesAreInvisibleUntilDue) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->send(topic, "now");
  c->send_batch(topic, std::vector<OutgoingMessage>{{.payload = "in 0.8 s", .delay = 800ms}});
  auto first = c->receive(topic, {.max_messages = 10});
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].payload, "now");
  auto [m, took] = poll_for_message(*c, topic);
  EXPECT_EQ(m.payload, "in 0.8 s");
  EXPECT_GE(took, 0.7);
  EXPECT_LT(took, 1.3);
  EXPECT_EQ(c->stats(topic).delayed, 0u);
}

TEST(Retry, NacksWaitTheTopicsBackoffAndItGrows) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.retry = {.initial = 400ms, .multiplier = 2, .max = 10s, .jitter = 0};
  options.max_attempts = 10;
  c->create_topic(topic, options);
  c->send(topic, "x");
  auto got = c->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  for (double expected : {0.4, 0.8, 1.6}) {
    ASSERT_EQ(c->nack(topic, got[0].receipt), Settle::kOk);
    auto stats = c->stats(topic);
    EXPECT_EQ(stats.delayed, 1u);
    auto [m, took] = poll_for_message(*c, topic);
    ASSERT_NE(m.id, 0u);
    EXPECT_GE(took, expected - 0.05) << expected;
    EXPECT_LT(took, expected + 0.35) << expected;
    got = {m};
  }
  // An explicit delay still wins.
  ASSERT_EQ(c->nack(topic, got[0].receipt, 0ms), Settle::kOk);
  EXPECT_EQ(c->receive(topic).size(), 1u);
}

TEST(Retry, AnExpiredLeaseIsRetriedAfterLeasePlusBackoffAndJitterOnlyShortens) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.lease = 300ms;
  options.retry = {.initial = 600ms, .multiplier = 2, .max = 600ms, .jitter = 0.5};
  c->create_topic(topic, options);
  c->send_batch(topic, std::vector<OutgoingMessage>(5, OutgoingMessage{.payload = "x"}));
  auto got = c->receive(topic, {.max_messages = 5});
  ASSERT_EQ(got.size(), 5u);
  const auto start = SteadyClock::now();
  std::vector<double> back;
  while (back.size() < 5 && seconds_since(start) < 5) {
    for (const Message& m : c->receive(topic, {.max_messages = 5})) {
      back.push_back(seconds_since(start));
      EXPECT_EQ(m.attempt, 2);
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(back.size(), 5u);
  for (double t : back) {
    // lease 0.3 s + retry 0.6 s shortened by up to half: between 0.6 and 0.9 s.
    EXPECT_GE(t, 0.55);
    EXPECT_LT(t, 1.2);
  }
}

TEST(Retry, TopicSetChangesThePolicyAndKeepsTheRest) {
  const std::string topic = topic_for_test();
  ASSERT_EQ(test::run_txmq({"topic", "create", topic, "--lease", "12", "--retry-initial", "2"})
                .exit_code,
            0);
  auto r = test::run_txmq({"topic", "set", topic, "--retry-initial", "0.25", "--retry-max", "60",
                           "--retry-multiplier", "3", "--retry-jitter", "0", "--max-attempts", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto c = client();
  const TopicOptions o = c->topic(topic).options;
  EXPECT_EQ(o.lease, 12s);
  EXPECT_EQ(o.max_attempts, 7);
  EXPECT_EQ(o.retry.initial, 250ms);
  EXPECT_EQ(o.retry.max, 60s);
  EXPECT_DOUBLE_EQ(o.retry.multiplier, 3);
  EXPECT_DOUBLE_EQ(o.retry.jitter, 0);
  r = test::run_txmq({"topic", "set", topic, "--retry-multiplier", "50"});
  EXPECT_EQ(r.exit_code, 5) << r.err;  // refused
  EXPECT_NE(r.err.find("multiplier"), std::string::npos) << r.err;
  EXPECT_EQ(test::run_txmq({"topic", "set", topic_for_test("_none"), "--lease", "1"}).exit_code,
            3);
  // A create with the old settings now refuses, naming the way to change them.
  r = test::run_txmq({"topic", "create", topic, "--lease", "12", "--retry-initial", "2"});
  EXPECT_NE(r.err.find("topic set"), std::string::npos) << r.err;
}

// --- Keyed FIFO --------------------------------------------------------------------------------

TEST(KeyedFifo, OneKeyIsDeliveredOneAtATimeInSendOrder) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.retry = {.initial = 0ms}});
  for (int i = 0; i < 5; ++i) c->send(topic, std::to_string(i), {.key = "k"});
  c->send(topic, "other", {.key = "j"});
  auto got = c->receive(topic, {.max_messages = 10});
  ASSERT_EQ(got.size(), 2u);  // the head of each key
  EXPECT_EQ(got[0].payload, "0");
  EXPECT_EQ(got[1].payload, "other");
  EXPECT_EQ(c->stats(topic).waiting_on_key, 4u);
  // A nack keeps the key's place; the next waits.
  ASSERT_EQ(c->nack(topic, got[0].receipt, 0ms), Settle::kOk);
  got = c->receive(topic, {.max_messages = 10});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "0");
  EXPECT_EQ(got[0].attempt, 2);
  for (int i = 1; i < 5; ++i) {
    ASSERT_EQ(c->ack(topic, got[0].receipt), Settle::kOk);
    got = c->receive(topic, {.max_messages = 10});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payload, std::to_string(i));
  }
  ASSERT_EQ(c->ack(topic, got[0].receipt), Settle::kOk);
  EXPECT_TRUE(c->receive(topic).empty());
  EXPECT_EQ(c->stats(topic).waiting_on_key, 0u);
}

TEST(KeyedFifo, ADeadLetteredHeadLetsTheNextGoAndRequeueGoesToTheBack) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.max_attempts = 1});
  c->send_batch(topic, std::vector<OutgoingMessage>{{.payload = "a", .key = "k"},
                                                    {.payload = "b", .key = "k"},
                                                    {.payload = "c", .key = "k"}});
  auto got = c->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  const std::uint64_t a = got[0].id;
  ASSERT_EQ(c->nack(topic, got[0].receipt), Settle::kOk);  // at max attempts: dead
  got = c->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "b");
  ASSERT_EQ(c->requeue_dead(topic, std::vector<std::uint64_t>{a}), 1u);
  ASSERT_EQ(c->ack(topic, got[0].receipt), Settle::kOk);
  got = c->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "c");
  ASSERT_EQ(c->ack(topic, got[0].receipt), Settle::kOk);
  got = c->receive(topic);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "a");  // requeued behind the key's others
  EXPECT_EQ(got[0].id, a);
}

TEST(KeyedFifo, ExactlyOnceProcessingMovesTheKeyOn) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  for (int i = 0; i < 3; ++i) c->send(topic, std::to_string(i), {.key = "k"});
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c->process(topic, {.max_messages = 10},
                         [&](Transaction&, std::span<const Message> batch) {
                           ASSERT_EQ(batch.size(), 1u);
                           seen.push_back(batch[0].payload);
                         }),
              1u);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "1", "2"}));
}

// keys x per_key messages, key0..keyN, each payload its sequence number within its key, sent in
// batches of about 2,000.
void send_keyed(Client& c, const std::string& topic, int keys, int per_key) {
  std::vector<OutgoingMessage> batch;
  for (int seq = 0; seq < per_key; ++seq) {
    for (int k = 0; k < keys; ++k) {
      batch.push_back({.payload = std::to_string(seq), .key = "key" + std::to_string(k)});
    }
    if (batch.size() >= 2000) {
      c.send_batch(topic, batch);
      batch.clear();
    }
  }
  if (!batch.empty()) c.send_batch(topic, batch);
}

// Checks keyed handlers (payloads from send_keyed): per key, handling never overlaps and
// follows send order.
struct KeyOrder {
  void begin(const Message& m) {
    std::lock_guard lock(mutex);
    if (busy[*m.key]) overlaps++;
    busy[*m.key] = true;
    if (std::stoi(m.payload) != next_seq[*m.key]) out_of_order++;
  }
  void end(const Message& m) {
    std::lock_guard lock(mutex);
    busy[*m.key] = false;
    next_seq[*m.key] = std::stoi(m.payload) + 1;
  }
  // Keys whose next message is below `seq`.
  int keys_before(int keys, int seq) {
    std::lock_guard lock(mutex);
    int behind = 0;
    for (int k = 0; k < keys; ++k) {
      if (next_seq["key" + std::to_string(k)] < seq) behind++;
    }
    return behind;
  }
  void expect_all_handled_in_order(int keys, int per_key) {
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_EQ(out_of_order.load(), 0);
    EXPECT_EQ(keys_before(keys, per_key), 0);
  }
  std::mutex mutex;
  std::map<std::string, int> next_seq;  // per key: the seq expected next
  std::map<std::string, bool> busy;
  std::atomic<int> overlaps{0}, out_of_order{0};
};

// The test: 100 keys x 200 messages, 8 consumers with random handler times. Per key,
// handling never overlaps and follows send order; all keys progress together.
TEST(KeyedFifo, HundredKeysEightConsumersNeverOverlapAndKeepOrder) {
  constexpr int kKeys = 100;
  constexpr int kPerKey = 200;
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  send_keyed(*c, topic, kKeys, kPerKey);

  KeyOrder order;
  std::atomic<int> handled{0};
  std::atomic<int> keys_behind_at_half{-1};
  WorkerOptions options;
  options.threads = 8;
  options.limit = kKeys * kPerKey;
  Worker worker(*c, topic, [&](const Message& m) {
    thread_local std::mt19937 rng{std::random_device{}()};
    order.begin(m);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1500));
    order.end(m);
    if (++handled == kKeys * kPerKey / 2) keys_behind_at_half = order.keys_before(kKeys, kPerKey / 4);
  }, options);
  worker.join();
  EXPECT_EQ(handled.load(), kKeys * kPerKey);
  EXPECT_EQ(worker.counts().acked, static_cast<std::uint64_t>(kKeys * kPerKey));
  order.expect_all_handled_in_order(kKeys, kPerKey);
  // Halfway through, no key is still in its first quarter: they all moved together.
  EXPECT_EQ(keys_behind_at_half.load(), 0);
  auto stats = c->stats(topic);
  EXPECT_EQ(stats.ready + stats.in_flight + stats.delayed + stats.waiting_on_key, 0u);
}

// --- Worker ------------------------------------------------------------------------------------

// What a peer claims from the topic, polling every `tick` for `d` (messages held under a kept
// lease: nothing).
int peer_claims_for(Client& peer, const std::string& topic, std::chrono::milliseconds d,
                    std::chrono::milliseconds tick) {
  int got = 0;
  const auto until = SteadyClock::now() + d;
  while (SteadyClock::now() < until) {
    got += static_cast<int>(peer.receive(topic).size());
    std::this_thread::sleep_for(tick);
  }
  return got;
}

// A worker that kept every lease it held: no peer got a message, all acknowledged, no event.
void expect_leases_kept(const Worker& worker, int peer_got, std::uint64_t acked,
                        const std::vector<std::string>& events) {
  EXPECT_EQ(peer_got, 0);
  EXPECT_EQ(worker.counts().acked, acked);
  EXPECT_EQ(worker.counts().leases_lost, 0u);
  EXPECT_TRUE(events.empty()) << events.front();
}

TEST(Worker, StopFinishesRunningHandlersAndLosesNothing) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->send_batch(topic, std::vector<OutgoingMessage>(40, OutgoingMessage{.payload = "x"}));
  std::atomic<int> started{0}, finished{0};
  WorkerOptions options;
  options.threads = 4;
  options.batch = 5;
  Worker worker(*c, topic, [&](const Message&) {
    started++;
    std::this_thread::sleep_for(200ms);
    finished++;
  }, options);
  std::this_thread::sleep_for(300ms);
  worker.stop();
  worker.join();
  EXPECT_EQ(started.load(), finished.load());
  EXPECT_EQ(worker.counts().acked, static_cast<std::uint64_t>(finished.load()));
  auto stats = c->stats(topic);
  EXPECT_EQ(stats.in_flight, 0u);  // the unstarted ones of each batch were given back
  EXPECT_EQ(stats.ready + static_cast<std::uint64_t>(finished.load()), 40u);
}

// The handler runs 2 s, past the 1.2 s lease (1.2 s rather than less: an extend is due each
// 400 ms, which a loaded machine still meets).
TEST(Worker, ExtendsTheLeaseWhileAHandlerRunsPastIt) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.lease = 1200ms, .retry = {.initial = 0ms}});
  c->send(topic, "slow");
  auto peer = client();
  std::atomic<int> peer_got{0};
  WorkerOptions options;
  options.limit = 1;
  std::vector<std::string> events;
  options.on_event = [&](std::string_view e) { events.emplace_back(e); };
  Worker worker(*c, topic, [&](const Message&) {
    peer_got += peer_claims_for(*peer, topic, 2s, 100ms);
  }, options);
  worker.join();
  expect_leases_kept(worker, peer_got.load(), 1, events);
}

TEST(Worker, AThrowingHandlerRetriesThenDeadLetters) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.max_attempts = 3, .retry = {.initial = 50ms}});
  c->send(topic, "poison");
  WorkerOptions options;
  options.limit = 3;
  options.on_event = [](std::string_view) {};
  std::atomic<int> calls{0};
  Worker worker(*c, topic, [&](const Message&) {
    calls++;
    throw std::runtime_error("boom");
  }, options);
  worker.join();
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(worker.counts().retried, 3u);
  EXPECT_EQ(c->stats(topic).dead, 1u);
}

// A limit is reached by handling messages, not by reserving them: threads that find it reserved
// by others end, and the last one stops the worker, so that nothing leased is given back
// unhandled. Riding acknowledgements (the last of each batch) are all sent.
TEST(Worker, ALimitSharedByFourThreadsIsHandledInFull) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->send_batch(topic, std::vector<OutgoingMessage>(500, OutgoingMessage{.payload = "x"}));
  WorkerOptions options;
  options.threads = 4;
  options.batch = 30;
  options.limit = 200;
  std::atomic<int> handled{0};
  Worker worker(*c, topic, [&](const Message&) {
    ++handled;
    std::this_thread::sleep_for(1ms);
  }, options);
  worker.join();
  EXPECT_EQ(handled.load(), 200);
  EXPECT_EQ(worker.counts().acked, 200u);
  const TopicStats stats = c->stats(topic);
  EXPECT_EQ(stats.in_flight, 0u);
  EXPECT_EQ(stats.ready, 300u);
}

TEST(Worker, AcknowledgesInGroupsAndHandlesEachMessageOnce) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  std::vector<OutgoingMessage> batch;
  for (int i = 0; i < 250; ++i) batch.push_back({.payload = std::to_string(i)});
  c->send_batch(topic, batch);
  std::mutex mutex;
  std::map<int, int> seen;
  WorkerOptions options;  // one thread: with more, the first to find nothing stops them all
  options.batch = 100;
  options.hold_up_to = 0us;  // leased batches: held acknowledgements are theirs
  options.ack_every = 50;
  options.stop_when_empty = true;
  Worker worker(*c, topic, [&](const Message& m) {
    std::lock_guard lock(mutex);
    seen[std::stoi(m.payload)]++;
  }, options);
  worker.join();
  EXPECT_EQ(seen.size(), 250u);
  for (const auto& [i, n] : seen) EXPECT_EQ(n, 1) << i;
  EXPECT_EQ(worker.counts().acked, 250u);
  auto stats = c->stats(topic);
  EXPECT_EQ(stats.ready + stats.in_flight + stats.delayed, 0u);
}

TEST(Worker, HeldAcknowledgementsKeepTheirLeases) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.lease = 3s, .retry = {.initial = 0ms}});
  c->send_batch(topic, std::vector<OutgoingMessage>(10, OutgoingMessage{.payload = "x"}));
  auto peer = client();
  std::atomic<int> handled{0}, peer_got{0};
  std::atomic<std::uint64_t> in_flight_seen{0}, acked_seen{99};
  WorkerOptions options;
  options.batch = 5;
  options.hold_up_to = 0us;  // leased batches: held acknowledgements are theirs
  options.ack_every = 1000;
  options.ack_max_delay = std::chrono::hours(1);
  std::vector<std::string> events;
  options.on_event = [&](std::string_view e) { events.emplace_back(e); };
  std::atomic<Worker*> self{nullptr};
  Worker worker(*c, topic, [&](const Message&) {
    if (++handled < 10) return;
    // 9 handled with their acknowledgements held, this one running: all stay leased for
    // longer than the lease, and no peer gets them.
    peer_got += peer_claims_for(*peer, topic, 4s, 100ms);
    in_flight_seen = c->stats(topic).in_flight;
    while (self.load() == nullptr) std::this_thread::sleep_for(1ms);
    acked_seen = self.load()->counts().acked;
  }, options);
  self = &worker;
  const auto until = SteadyClock::now() + 20s;
  while (worker.counts().acked < 10 && SteadyClock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  worker.stop();
  worker.join();
  EXPECT_EQ(in_flight_seen.load(), 10u);
  EXPECT_EQ(acked_seen.load(), 0u);
  // Sent once the topic had nothing more to claim, without waiting for the hour (an extend
  // that raced with that acknowledgement is not reported as a lost lease).
  expect_leases_kept(worker, peer_got.load(), 10, events);
  auto stats = c->stats(topic);
  EXPECT_EQ(stats.ready + stats.in_flight + stats.delayed, 0u);
}

// Stop sends the acknowledgements a thread holds.
TEST(Worker, StopSendsHeldAcknowledgements) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->send_batch(topic, std::vector<OutgoingMessage>(500, OutgoingMessage{.payload = "x"}));
  std::atomic<int> handled{0};
  WorkerOptions options;
  options.batch = 10;
  options.hold_up_to = 0us;  // leased batches: held acknowledgements are theirs
  options.ack_every = 1000;
  options.ack_max_delay = std::chrono::hours(1);
  Worker worker(*c, topic, [&](const Message&) {
    handled++;
    std::this_thread::sleep_for(1ms);
  }, options);
  std::this_thread::sleep_for(200ms);
  worker.stop();
  worker.join();
  const auto n = static_cast<std::uint64_t>(handled.load());
  EXPECT_GT(n, 0u);
  EXPECT_EQ(worker.counts().acked, n);
  auto stats = c->stats(topic);
  EXPECT_EQ(stats.in_flight, 0u);
  EXPECT_EQ(stats.ready, 500u - n);
}

// Messages leased ahead (batch > 1) keep their leases while they wait for their turn. The three
// held acknowledgements go at 1.8 s, past the 1.2 s lease: without extends the peer would get
// them. An extend is due each 400 ms, so a machine stalled for up to 800 ms (ASan beside other
// tests on 2 cores) still extends in time.
TEST(Worker, ExtendsTheLeasesOfMessagesWaitingTheirTurn) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.lease = 1200ms, .retry = {.initial = 0ms}});
  c->send_batch(topic, std::vector<OutgoingMessage>(3, OutgoingMessage{.payload = "x"}));
  auto peer = client();
  std::atomic<int> peer_got{0};
  WorkerOptions options;
  options.batch = 3;
  options.ack_every = 3;
  options.limit = 3;
  std::vector<std::string> events;
  options.on_event = [&](std::string_view e) { events.emplace_back(e); };
  Worker worker(*c, topic, [&](const Message& m) {
    EXPECT_EQ(m.attempt, 1);
    peer_got += peer_claims_for(*peer, topic, 600ms, 50ms);
  }, options);
  worker.join();
  expect_leases_kept(worker, peer_got.load(), 3, events);
}

// 3 Worker threads with `options` over 20 keys of 30 messages: per key, handling never overlaps
// and follows send order, and every message is acknowledged once.
void expect_keyed_order_kept(WorkerOptions options) {
  constexpr int kKeys = 20;
  constexpr int kPerKey = 30;
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  send_keyed(*c, topic, kKeys, kPerKey);
  KeyOrder order;
  options.threads = 3;
  options.batch = 10;
  std::atomic<int> handled{0};
  Worker worker(*c, topic, [&](const Message& m) {
    order.begin(m);
    std::this_thread::sleep_for(100us);
    order.end(m);
    handled++;
  }, options);
  const auto until = SteadyClock::now() + 60s;
  while (handled.load() < kKeys * kPerKey && SteadyClock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  worker.stop();
  worker.join();
  EXPECT_EQ(handled.load(), kKeys * kPerKey);
  EXPECT_EQ(worker.counts().acked, static_cast<std::uint64_t>(kKeys * kPerKey));
  order.expect_all_handled_in_order(kKeys, kPerKey);
  auto stats = c->stats(topic);
  EXPECT_EQ(stats.ready + stats.in_flight + stats.delayed + stats.waiting_on_key, 0u);
}

// Grouped acknowledgements hold a key's next message back until the group is sent.
TEST(Worker, GroupedAcknowledgementsKeepKeyedOrder) {
  WorkerOptions options;
  options.hold_up_to = 0us;  // leased batches: held acknowledgements are theirs
  options.ack_every = 10;
  options.ack_max_delay = 5ms;
  expect_keyed_order_kept(options);
}

// A held batch (hold_up_to 1 s): handled and settled with one commit, no lease
// written, and still no peer can take its messages while it is held.
TEST(Worker, AHeldBatchWritesNoLeaseAndNoPeerGetsItsMessages) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.lease = 30s});
  c->send_batch(topic, std::vector<OutgoingMessage>(10, OutgoingMessage{.payload = "x"}));
  auto peer = client();
  std::atomic<int> handled{0}, peer_got{0};
  std::atomic<std::uint64_t> in_flight_seen{99};
  WorkerOptions options;
  options.hold_up_to = 1s;
  options.batch = 10;
  options.limit = 10;
  std::vector<std::string> events;
  options.on_event = [&](std::string_view e) { events.emplace_back(e); };
  Worker worker(*c, topic, [&](const Message& m) {
    EXPECT_TRUE(m.receipt.empty());
    if (++handled > 1) return;
    in_flight_seen = c->stats(topic).in_flight;
    peer_got += peer_claims_for(*peer, topic, 200ms, 20ms);
  }, options);
  worker.join();
  EXPECT_EQ(in_flight_seen.load(), 0u);  // locked by the transaction, not leased
  expect_leases_kept(worker, peer_got.load(), 10, events);
  const TopicStats stats = c->stats(topic);
  EXPECT_EQ(stats.ready + stats.in_flight + stats.delayed, 0u);
}

// A held batch that runs past hold_up_to is leased while its handler runs, in the transaction
// that held it: a peer polling all the while never gets one of its messages, and once leased
// they are in flight and extended as any leased message.
TEST(Worker, AHeldBatchThatRunsLongIsLeasedWithoutAGap) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.lease = 1500ms, .retry = {.initial = 0ms}});
  c->send_batch(topic, std::vector<OutgoingMessage>(5, OutgoingMessage{.payload = "x"}));
  auto peer = client();
  std::atomic<int> handled{0}, peer_got{0};
  std::atomic<std::uint64_t> in_flight_seen{0};
  WorkerOptions options;
  options.batch = 5;
  options.limit = 5;
  options.hold_up_to = 200ms;
  std::vector<std::string> events;
  options.on_event = [&](std::string_view e) { events.emplace_back(e); };
  Worker worker(*c, topic, [&](const Message&) {
    if (++handled > 1) return;
    // Over the switch at 200 ms and past the 1.5 s lease, which the extender renews.
    peer_got += peer_claims_for(*peer, topic, 2500ms, 10ms);
    in_flight_seen = c->stats(topic).in_flight;
  }, options);
  worker.join();
  EXPECT_EQ(in_flight_seen.load(), 5u);
  expect_leases_kept(worker, peer_got.load(), 5, events);
  const TopicStats stats = c->stats(topic);
  EXPECT_EQ(stats.ready + stats.in_flight + stats.delayed, 0u);
}

// Held batches keep keyed order: a key's next message comes in only when the batch that held
// its current one commits.
TEST(Worker, HeldBatchesKeepKeyedOrder) {
  expect_keyed_order_kept(WorkerOptions{.hold_up_to = std::chrono::seconds(1)});
}

// Held batches of a consumer group's queue leave the other group's copies alone.
TEST(Worker, HeldBatchesConsumeTheirGroupOnly) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->create_group(topic, "audit");
  c->send_batch(topic, std::vector<OutgoingMessage>(50, OutgoingMessage{.payload = "x"}));
  WorkerOptions options;
  options.threads = 2;
  options.batch = 20;
  options.group = "audit";
  options.hold_up_to = 1s;
  options.stop_when_empty = true;
  Worker worker(*c, topic, [](const Message&) {}, options);
  worker.join();
  EXPECT_EQ(worker.counts().acked, 50u);
  EXPECT_EQ(c->stats(topic, "audit").ready, 0u);
  EXPECT_EQ(c->stats(topic).ready, 50u);
}

// Client::hold on its own: marks applied by one commit, the unmarked released at once.
TEST(HeldBatch, CommitAppliesTheMarksAndReleasesTheRest) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.retry = {.initial = 30s}});
  c->send_batch(topic, std::vector<OutgoingMessage>(5, OutgoingMessage{.payload = "x"}));
  HeldBatch batch = c->hold(topic, ReceiveOptions{.max_messages = 5});
  ASSERT_EQ(batch.size(), 5u);
  EXPECT_TRUE(batch.open());
  for (const Message& m : batch.messages()) {
    EXPECT_TRUE(m.receipt.empty());
    EXPECT_EQ(m.attempt, 1);
  }
  EXPECT_TRUE(client()->receive(topic, ReceiveOptions{.max_messages = 5}).empty());
  batch.ack(0);
  batch.ack(1);
  batch.nack(2);
  EXPECT_THROW(batch.ack(5), Error);
  const HeldResult result = batch.commit();
  EXPECT_FALSE(batch.open());
  EXPECT_EQ(result.acked, 2u);
  EXPECT_EQ(result.nacked, 1u);
  EXPECT_EQ(result.released, 2u);
  EXPECT_THROW(batch.ack(3), Error);
  const TopicStats stats = c->stats(topic);
  EXPECT_EQ(stats.ready, 2u);
  EXPECT_EQ(stats.delayed, 1u);  // the nacked one, after its retry delay
  auto again = c->receive(topic, ReceiveOptions{.max_messages = 5});
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].id, batch.messages()[3].id);
  EXPECT_EQ(again[0].attempt, 1);  // a released hold is not an attempt
}

TEST(HeldBatch, LeaseRestLeasesTheUnsettledInOneCommit) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  c->send_batch(topic, std::vector<OutgoingMessage>(3, OutgoingMessage{.payload = "x"}));
  HeldBatch batch = c->hold(topic, ReceiveOptions{.max_messages = 3});
  ASSERT_EQ(batch.size(), 3u);
  batch.ack(0);
  HeldResult result;
  std::vector<Message> leased = batch.lease_rest(5s, &result);
  EXPECT_EQ(result.acked, 1u);
  EXPECT_EQ(result.leased, 2u);
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(leased[0].id, batch.messages()[1].id);
  EXPECT_FALSE(leased[0].receipt.empty());
  EXPECT_EQ(c->stats(topic).in_flight, 2u);
  EXPECT_TRUE(c->receive(topic).empty());
  EXPECT_EQ(c->ack(topic, leased[0].receipt), Settle::kOk);
  EXPECT_EQ(c->nack(topic, leased[1].receipt, 0us), Settle::kOk);
  auto again = c->receive(topic);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);  // the lease counted as a delivery
}

TEST(HeldBatch, ADroppedBatchIsClaimableAtOnce) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.lease = 60s});
  c->send_batch(topic, std::vector<OutgoingMessage>(4, OutgoingMessage{.payload = "x"}));
  {
    HeldBatch batch = c->hold(topic, ReceiveOptions{.max_messages = 4});
    ASSERT_EQ(batch.size(), 4u);
    batch.ack(0);  // not committed: undone with the rest
  }
  auto again = c->receive(topic, ReceiveOptions{.max_messages = 10});
  EXPECT_EQ(again.size(), 4u);
  HeldBatch none = c->hold(topic, ReceiveOptions{.max_messages = 4, .wait = 50ms});
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.commit().released, 0u);
  EXPECT_THROW(c->hold(topic, ReceiveOptions{.max_messages = 0}), Error);
  EXPECT_THROW(c->hold(topic_for_test("_missing")), Error);
}

// A held batch's connection gets a short wait_timeout (a frozen holder's rows come back: see
// Consume.FrozenWhileHoldingABatchGivesItBackAfterTheLease); a transaction of the caller's own
// on that connection afterwards has the server's again.
TEST(HeldBatch, TheShortIdleBoundStaysWithHeldBatches) {
  const std::string topic = topic_for_test();
  client()->create_topic(topic, TopicOptions{.lease = 5s});
  ClientOptions o;
  o.dsn = test::dsn();
  o.pool_size = 1;  // one connection: the held batch's is the transaction's
  Client c(o);
  c.send(topic, "x");
  HeldBatch batch = c.hold(topic);
  ASSERT_EQ(batch.size(), 1u);
  batch.ack(0);
  batch.commit();
  // MariaDB bounds idle transactions; MySQL, which cannot, idle connections.
  const std::string variable =
      test::admin()->server().mysql ? "wait_timeout" : "idle_transaction_timeout";
  const std::string same = fmt::format("SELECT @@SESSION.{0} = @@GLOBAL.{0}", variable);
  {
    Transaction tx = c.begin();
    EXPECT_EQ(tx.execute(same, {}).rows.at(0).as_int(0), 1);
    tx.rollback();
  }
  HeldBatch none = c.hold(topic);  // sets it again, to max(10 s, the lease)
  c.transact([&](Transaction& t) { EXPECT_EQ(t.execute(same, {}).rows.at(0).as_int(0), 1); });
}

TEST(Worker, AMissingTopicStopsItWithTheError) {
  auto c = client();
  EXPECT_THROW(Worker(*c, topic_for_test("_missing"), [](const Message&) {}), Error);
}

}  // namespace
}  // namespace txmq
