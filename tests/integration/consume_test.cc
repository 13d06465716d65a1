// txmq consume --exec: real handler processes, real signals.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::run_txmq;
using test::topic_for_test;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

TEST(Consume, RunsTheCommandPerMessageAndAcks) {
  auto c = test::client();
  std::string name = topic_for_test();
  c->create_topic(name);
  std::vector<OutgoingMessage> batch;
  for (int i = 0; i < 40; ++i) batch.push_back({fmt::format("payload-{}", i), {}, {}, {}});
  auto ids = c->send_batch(name, batch);
  std::string dir = test::scratch_dir();
  // Each handler writes its own file: payload, then the environment it was given.
  std::string cmd = fmt::format(
      "f={}/$TXMQ_MESSAGE_ID; cat > $f.tmp; echo \" $TXMQ_TOPIC $TXMQ_ATTEMPT\" >> $f.tmp; "
      "mv $f.tmp $f",
      dir);
  auto r = run_txmq({"consume", name, "--exec", cmd, "--concurrency", "4", "--exit-when-empty"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(read_file(fmt::format("{}/{}", dir, ids[i])),
              fmt::format("payload-{} {} 1\n", i, name));
  }
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.ready + s.in_flight + s.delayed, 0u);
  EXPECT_NE(r.err.find("40 acked"), std::string::npos) << r.err;
}

TEST(Consume, FailingHandlerNacksWithBackoff) {
  auto c = test::client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "will fail");
  auto r = run_txmq({"consume", name, "--exec", "cat > /dev/null; exit 3", "--max-messages", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("exited with 3"), std::string::npos) << r.err;
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.delayed, 1u);  // back later, not at once
  auto again = c->receive(name, ReceiveOptions{.wait = 5s});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
}

TEST(Consume, LongHandlerKeepsItsLease) {
  auto c = test::client();
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "slow");
  auto consumer = test::start_txmq(
      {"consume", name, "--exec", "sleep 3", "--lease", "1", "--max-messages", "1"});
  for (int i = 0; i < 100 && c->stats(name).in_flight == 0; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(c->stats(name).in_flight, 1u);
  // For 2.5 s more, over twice the 1 s lease, nobody else may take the message.
  auto until = std::chrono::steady_clock::now() + 2500ms;
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_TRUE(c->receive(name).empty());
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(consumer.wait(), 0) << consumer.err();
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.ready + s.in_flight + s.delayed, 0u) << consumer.err();
}

TEST(Consume, SigtermLetsRunningHandlersFinish) {
  auto c = test::client();
  std::string name = topic_for_test();
  c->create_topic(name);
  for (int i = 0; i < 3; ++i) c->send(name, fmt::format("m{}", i));
  std::string dir = test::scratch_dir();
  auto consumer = test::start_txmq(
      {"consume", name, "--exec", fmt::format("sleep 1.5; cat >> {}/done", dir)});
  for (int i = 0; i < 100 && c->stats(name).in_flight == 0; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(c->stats(name).in_flight, 1u);
  kill(consumer.pid, SIGTERM);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(consumer.wait(), 0) << consumer.err();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(read_file(dir + "/done"), "m0");  // the running handler finished...
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.in_flight, 0u);  // ...and was acked
  EXPECT_EQ(s.ready, 2u);      // nothing more was claimed after the signal
}

// Waits up to 10 s for the file at `path` to hold `needle`.
bool wait_for_text(const std::string& path, const std::string& needle) {
  for (int i = 0; i < 200; ++i) {
    if (read_file(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// A handler that records each payload, and on "m3" writes its pid and sleeps (until killed).
std::string recording_handler(const std::string& dir) {
  return fmt::format(
      "p=$(cat); echo $p >> {0}/seen; if [ \"$p\" = m3 ]; then echo $$ > {0}/sleeper; exec sleep "
      "30; fi",
      dir);
}

void kill_sleeper(const std::string& dir) {
  const std::string pid = read_file(dir + "/sleeper");
  if (!pid.empty()) kill(std::stoi(pid), SIGKILL);
}

// Makes topic `name` with `options`, sends it m0..m5, and starts `txmq consume` on it with
// recording_handler(dir), one batch of 6, and --hold-up-to `hold_up_to` seconds.
test::Background consume_six(Client& c, const std::string& name, const TopicOptions& options,
                             const std::string& dir, const std::string& hold_up_to) {
  c.create_topic(name, options);
  for (int i = 0; i < 6; ++i) c.send(name, fmt::format("m{}", i));
  return test::start_txmq({"consume", name, "--exec", recording_handler(dir), "--batch", "6",
                           "--hold-up-to", hold_up_to});
}

// kill -9 while a batch is held by its transaction (the short mode): nothing of the batch was
// committed, so all of it is claimable again at once (not after the 60 s lease), as first
// deliveries; nothing is lost.
TEST(Consume, KilledWhileHoldingABatchGivesItAllBackAtOnce) {
  auto c = test::client();
  std::string name = topic_for_test();
  std::string dir = test::scratch_dir();
  auto consumer = consume_six(*c, name, TopicOptions{.lease = 60s}, dir, "20");
  ASSERT_TRUE(wait_for_text(dir + "/seen", "m3")) << consumer.err();
  ASSERT_TRUE(wait_for_text(dir + "/sleeper", "\n"));
  EXPECT_EQ(c->stats(name).in_flight, 0u);  // held, not leased
  kill(consumer.pid, SIGKILL);
  consumer.wait();
  kill_sleeper(dir);
  const auto killed = std::chrono::steady_clock::now();
  auto again = c->receive(name, ReceiveOptions{.max_messages = 10, .wait = 10s});
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s);
  ASSERT_EQ(again.size(), 6u);
  for (std::size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].payload, fmt::format("m{}", i));
    EXPECT_EQ(again[i].attempt, 1);
  }
  EXPECT_EQ(read_file(dir + "/seen"), "m0\nm1\nm2\nm3\n");
}

// A consumer frozen (SIGSTOP: a paused VM, a host cut off) while it holds a batch cannot lease
// it: the server closes its connection after the lease without a statement (10 s at least) and
// the batch comes back, as leased messages would; not earlier, and nothing is lost.
TEST(Consume, FrozenWhileHoldingABatchGivesItBackAfterTheLease) {
  auto c = test::client();
  std::string name = topic_for_test();
  std::string dir = test::scratch_dir();
  auto consumer = consume_six(*c, name, TopicOptions{.lease = 6s}, dir, "20");
  ASSERT_TRUE(wait_for_text(dir + "/seen", "m3")) << consumer.err();
  kill(consumer.pid, SIGSTOP);  // within hold_up_to (capped at 2 s, a third of the lease)
  const auto frozen = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_for_text(dir + "/sleeper", "\n"));
  EXPECT_EQ(c->stats(name).in_flight, 0u);  // held, not leased
  auto again = c->receive(name, ReceiveOptions{.max_messages = 10, .wait = 20s});
  const auto waited = std::chrono::steady_clock::now() - frozen;
  kill(consumer.pid, SIGKILL);
  kill(consumer.pid, SIGCONT);
  consumer.wait();
  kill_sleeper(dir);
  EXPECT_GT(waited, 7s);   // not before the bound (10 s from the claim)
  EXPECT_LT(waited, 16s);  // the server closed the frozen holder's connection
  ASSERT_EQ(again.size(), 6u);
  for (std::size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].payload, fmt::format("m{}", i));
  }
}

// kill -9 after the batch ran past --hold-up-to and was leased (the long mode): the leases keep
// the messages from peers until they end, then they come back as second attempts; the ones
// handled before the switch were acknowledged by it.
TEST(Consume, KilledAfterItsBatchWasLeasedKeepsTheLeases) {
  auto c = test::client();
  std::string name = topic_for_test();
  std::string dir = test::scratch_dir();
  auto consumer =
      consume_six(*c, name, TopicOptions{.lease = 3s, .retry = {.initial = 0ms}}, dir, "0.3");
  ASSERT_TRUE(wait_for_text(dir + "/seen", "m3")) << consumer.err();
  for (int i = 0; i < 100 && c->stats(name).in_flight < 3; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(c->stats(name).in_flight, 3u);  // m3, m4, m5 leased; m0..m2 acknowledged
  kill(consumer.pid, SIGKILL);
  consumer.wait();
  kill_sleeper(dir);
  EXPECT_TRUE(c->receive(name, ReceiveOptions{.max_messages = 10}).empty());
  auto again = c->receive(name, ReceiveOptions{.max_messages = 10, .wait = 15s});
  if (again.size() < 3) {
    auto more = c->receive(name, ReceiveOptions{.max_messages = 10, .wait = 5s});
    again.insert(again.end(), more.begin(), more.end());
  }
  ASSERT_EQ(again.size(), 3u);
  for (std::size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].payload, fmt::format("m{}", i + 3));
    EXPECT_EQ(again[i].attempt, 2);
  }
  TopicStats s = c->stats(name);
  EXPECT_EQ(s.ready + s.delayed, 0u);
}

}  // namespace
}  // namespace txmq
