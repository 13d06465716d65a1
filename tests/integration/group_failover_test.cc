// Failover on a MySQL Group Replication group (docs/group-replication.md): a client whose DSN
// lists every member follows the primary through a SIGKILL of it and a planned switch, and
// refuses a multi-primary group. The CTest fixture txmq_group starts a 3-member group of MySQL
// 9.7 (scripts/group) in TXMQ_GROUP_HOME and stops it at the end; without TXMQ_GROUP_HOME the
// tests are skipped (scripts/test runs them in a stage of their own).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support.h"
#include "txmq/cluster.h"
#include "txmq/error.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const char* group_home() { return std::getenv("TXMQ_GROUP_HOME"); }

const std::string& group_dsn();

// scripts/group COMMAND ARGS... on the fixture's group; its stdout, trimmed. Throws on failure.
std::string group(const std::vector<std::string>& args) {
  group_dsn();  // first: run_program's TXMQ_DSN is then the group's
  std::vector<std::string> all = args;
  test::ProcessResult r =
      test::run_program(std::string(TXMQ_SOURCE_DIR) + "/scripts/group", all, "",
                        {{"TXMQ_GROUP_HOME", group_home()}}, std::chrono::seconds(240));
  if (r.exit_code != 0) {
    throw std::runtime_error(fmt::format("scripts/group {} failed ({}): {}", args.at(0),
                                         r.exit_code, r.err));
  }
  while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == ' ')) r.out.pop_back();
  return r.out;
}

// The group's DSN (`scripts/group dsn`, read once). It becomes TXMQ_TEST_DSN too, so that the
// helpers of support.h (which give their children TXMQ_DSN = test::dsn()) never start or touch
// the fixture's local server: these tests run in a stage of their own, where it is not running.
const std::string& group_dsn() {
  static const std::string value = [] {
    const std::string command = fmt::format("TXMQ_GROUP_HOME='{}' '{}/scripts/group' dsn",
                                            group_home(), TXMQ_SOURCE_DIR);
    std::string out;
    if (FILE* f = ::popen(command.c_str(), "r"); f != nullptr) {
      char buffer[512];
      while (std::fgets(buffer, sizeof buffer, f) != nullptr) out += buffer;
      ::pclose(f);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (out.rfind("mysql://", 0) != 0) throw std::runtime_error("scripts/group dsn: " + out);
    ::setenv("TXMQ_TEST_DSN", out.c_str(), 1);
    return out;
  }();
  return value;
}

class GroupFailover : public ::testing::Test {
 protected:
  void SetUp() override {
    if (group_home() == nullptr) GTEST_SKIP() << "no group (TXMQ_GROUP_HOME): scripts/test's group stage runs these";
    dsn_ = group_dsn();
  }
  std::unique_ptr<Client> client(std::vector<std::string>* warnings = nullptr) {
    ClientOptions o;
    o.dsn = dsn_;
    o.pool_size = 4;
    o.on_warning = [warnings](std::string_view w) {
      if (warnings != nullptr) warnings->emplace_back(w);
    };
    return std::make_unique<Client>(o);
  }
  // Each test its own topic, dropped first through the group (a rerun finds the group as the
  // last run left it). Not test::topic_for_test, which drops on the fixture's server.
  std::string topic(Client& c, const std::string& suffix) {
    const std::string name = "group_failover_" + suffix;
    test::drop_topic_if_exists(c, name);
    return name;
  }
  std::string dsn_;
};

// What the producer and consumer threads saw.
struct History {
  std::mutex mutex;
  std::set<std::string> sent;      // acknowledged sends
  std::set<std::string> unknown;   // kCommitUnknown: may or may not be stored
  std::set<std::string> received;  // acknowledged receipts' payloads
  std::vector<std::string> errors;  // anything else a caller saw
  int claims_cut_off = 0;
  std::vector<Clock::time_point> send_times;
  std::vector<Clock::time_point> receive_times;
};

// The longest gap between successive successful sends (or receives) from `from` on: its length
// and its end.
std::pair<double, Clock::time_point> longest_gap(const std::vector<Clock::time_point>& times,
                                                 Clock::time_point from) {
  double longest = 0;
  Clock::time_point last = from, end = from;
  for (Clock::time_point t : times) {
    if (t < from) continue;
    if (std::chrono::duration<double>(t - last).count() > longest) {
      longest = std::chrono::duration<double>(t - last).count();
      end = t;
    }
    last = t;
  }
  return {longest, end};
}

// Sends, receives and acks go on through a SIGKILL of the primary: the callers see no error (no
// lost connection, no super_read_only), nothing acknowledged is lost, and the killed member
// rejoins. Prints how long sends and deliveries stopped.
TEST_F(GroupFailover, SendsReceivesAndAcksRideAKillOfThePrimary) {
  auto producer = client();
  auto consumer = client();
  const std::string name = topic(*producer, "kill");
  producer->create_topic(name);
  History h;
  std::atomic<bool> sending{true};
  std::atomic<bool> consuming{true};
  std::thread send_thread([&] {
    for (int i = 0; sending.load(); ++i) {
      const std::string payload = fmt::format("m{}", i);
      try {
        producer->send(name, payload);
        std::lock_guard lock(h.mutex);
        h.sent.insert(payload);
        h.send_times.push_back(Clock::now());
      } catch (const Error& e) {
        std::lock_guard lock(h.mutex);
        if (e.code() == Errc::kCommitUnknown) {
          h.unknown.insert(payload);
        } else {
          h.errors.push_back(fmt::format("send {}: {}", payload, e.what()));
        }
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  std::thread receive_thread([&] {
    while (consuming.load()) {
      try {
        std::vector<Message> got =
            consumer->receive(name, ReceiveOptions{.max_messages = 10, .lease = 10s});
        if (got.empty()) {
          std::this_thread::sleep_for(50ms);
          continue;
        }
        for (const Message& m : got) {
          Settle s = Settle::kOk;
          try {
            s = consumer->ack(name, m.receipt);
          } catch (const Error& e) {
            if (e.code() != Errc::kCommitUnknown) throw;
            // The ack's reply was lost: it is applied or the message comes back after its lease.
          }
          std::lock_guard lock(h.mutex);
          if (s == Settle::kOk) h.received.insert(m.payload);
          h.receive_times.push_back(Clock::now());
        }
      } catch (const Error& e) {
        std::lock_guard lock(h.mutex);
        // A claim whose COMMIT lost its reply: src/engine/claim.cc reports it as kUnavailable on
        // one server too (what it leased comes back when the lease ends). Counted, tolerated.
        if (e.code() == Errc::kUnavailable &&
            std::string_view(e.what()).find("while a claim committed") != std::string_view::npos) {
          ++h.claims_cut_off;
        } else {
          h.errors.push_back(fmt::format("receive/ack: {}", e.what()));
        }
      }
    }
  });

  std::this_thread::sleep_for(2s);
  const std::string killed = group({"primary"});
  const Clock::time_point kill_at = Clock::now();
  group({"kill", killed});
  // Until sends have come back and gone on for a few seconds (at most 60 s).
  Clock::time_point resumed{};
  while (Clock::now() - kill_at < 60s) {
    {
      std::lock_guard lock(h.mutex);
      if (!h.send_times.empty() && h.send_times.back() > kill_at + 1s && resumed == Clock::time_point{}) {
        resumed = h.send_times.back();
      }
    }
    if (resumed != Clock::time_point{} && Clock::now() - resumed > 3s) break;
    std::this_thread::sleep_for(100ms);
  }
  sending = false;
  send_thread.join();
  // Every acknowledged send delivered (at most 30 s more).
  const Clock::time_point drain_from = Clock::now();
  while (Clock::now() - drain_from < 30s) {
    {
      std::lock_guard lock(h.mutex);
      if (std::includes(h.received.begin(), h.received.end(), h.sent.begin(), h.sent.end())) break;
    }
    std::this_thread::sleep_for(200ms);
  }
  consuming = false;
  receive_thread.join();

  const std::string new_primary = group({"primary"});
  double send_gap = 0, receive_gap = 0, first_send = 0;
  {
    std::lock_guard lock(h.mutex);
    const auto [gap, end] = longest_gap(h.send_times, kill_at - 1s);
    send_gap = gap;
    // The first send after the outage: the end of the longest gap around the kill.
    first_send = std::chrono::duration<double>(end - kill_at).count();
    receive_gap = longest_gap(h.receive_times, kill_at - 1s).first;
  }
  std::printf(
      "group failover: killed member %s (primary), new primary %s; first send after the outage "
      "%.2f s after the kill; longest time without a send %.2f s, without a delivery %.2f s; "
      "sends %zu acknowledged, %zu unknown; claims cut off %d; errors %zu\n",
      killed.c_str(), new_primary.c_str(), first_send, send_gap, receive_gap, h.sent.size(),
      h.unknown.size(), h.claims_cut_off, h.errors.size());
  EXPECT_NE(new_primary, killed);
  for (const std::string& e : h.errors) ADD_FAILURE() << "a caller saw: " << e;
  EXPECT_GT(first_send, 0.0) << "no send succeeded after the kill";
  EXPECT_LT(send_gap, 40.0);
  std::vector<std::string> lost;
  for (const std::string& p : h.sent) {
    if (!h.received.contains(p)) lost.push_back(p);
  }
  EXPECT_TRUE(lost.empty()) << lost.size() << " acknowledged sends never delivered, first "
                            << lost.front();
  for (const std::string& p : h.received) {
    EXPECT_TRUE(h.sent.contains(p) || h.unknown.contains(p)) << "unexpected " << p;
  }
  // The killed member rejoins (distributed recovery), for the tests after this one.
  group({"restart", killed});
}

// A planned switch of primary (group_replication_set_as_primary): the old primary turns
// super_read_only under the client's connections; sends go on without an error.
TEST_F(GroupFailover, SendsFollowAPlannedSwitchOfPrimary) {
  auto c = client();
  const std::string name = topic(*c, "switch");
  c->create_topic(name);
  const std::string old_primary = group({"primary"});
  const int next = std::stoi(old_primary) % 3 + 1;
  const std::string next_uuid =
      group({"sql", std::to_string(next), "-N", "-B", "-e", "SELECT @@server_uuid"});
  std::atomic<bool> sending{true};
  std::vector<std::string> errors;
  int sent = 0;
  std::thread send_thread([&] {
    while (sending.load()) {
      try {
        c->send(name, "x");
        ++sent;
      } catch (const Error& e) {
        errors.emplace_back(e.what());
      }
    }
  });
  std::this_thread::sleep_for(500ms);
  group({"sql", old_primary, "-e",
         fmt::format("SELECT group_replication_set_as_primary('{}')", next_uuid)});
  std::this_thread::sleep_for(3s);
  sending = false;
  send_thread.join();
  EXPECT_EQ(group({"primary"}), std::to_string(next));
  for (const std::string& e : errors) ADD_FAILURE() << "a send saw: " << e;
  EXPECT_EQ(c->stats(name).ready, static_cast<std::uint64_t>(sent));
}

// txmq cluster status names each member's state and role and the writer (the primary).
TEST_F(GroupFailover, ClusterStatusShowsMembersRolesAndTheWriter) {
  const std::string primary = group({"primary"});
  test::ProcessResult r =
      test::run_txmq({"cluster", "status", "--json"}, "", {{"TXMQ_DSN", dsn_}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["nodes"].size(), 3u);
  int writers = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const nlohmann::json& n = j["nodes"][i];
    EXPECT_TRUE(n["group"].get<bool>());
    EXPECT_EQ(n["member_state"], "ONLINE");
    const bool is_primary = std::to_string(i + 1) == primary;
    EXPECT_EQ(n["member_role"], is_primary ? "PRIMARY" : "SECONDARY");
    EXPECT_EQ(n["writer"].get<bool>(), is_primary);
    writers += n["writer"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(writers, 1);
  r = test::run_txmq({"cluster", "status"}, "", {{"TXMQ_DSN", dsn_}});
  EXPECT_NE(r.out.find("PRIMARY"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SECONDARY"), std::string::npos) << r.out;
}

// A multi-primary group is refused with an error that says so (txmq needs one writer).
TEST_F(GroupFailover, AMultiPrimaryGroupIsRefused) {
  const std::string primary = group({"primary"});
  group({"sql", primary, "-e", "SELECT group_replication_switch_to_multi_primary_mode()"});
  struct Back {
    std::string primary;
    ~Back() {
      try {
        group({"sql", primary, "-e",
               "SELECT group_replication_switch_to_single_primary_mode((SELECT @@server_uuid))"});
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
  } back{primary};
  try {
    auto c = client();
    c->create_topic(topic(*c, "multi"));
    ADD_FAILURE() << "a multi-primary group was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kFailedPrecondition) << e.what();
    EXPECT_NE(std::string(e.what()).find("multi-primary"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace txmq
