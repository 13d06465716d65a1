// Real faults: connections killed by the server, a database that is not there.
#include <gtest/gtest.h>

#include <thread>

#include <fmt/format.h>

#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;
using test::client;
using test::topic_for_test;

// Kills every connection of `user` (as a failover or a DBA would), and only those: other tests
// run in parallel on the same server.
int kill_connections_of(internal::Connection& admin, const std::string& user) {
  internal::Result r = admin.execute(
      "SELECT id FROM information_schema.processlist WHERE user = ? AND id <> CONNECTION_ID()",
      {std::string_view(user)});
  int killed = 0;
  for (const internal::Row& row : r.rows) {
    try {
      // As text: MySQL prepares no KILL (error 6413). An id the server gave out.
      admin.query(fmt::format("KILL CONNECTION {}", row.u64(0)));
      ++killed;
    } catch (const Error& e) {
      if (e.server_errno() != 1094) throw;  // ER_NO_SUCH_THREAD: it ended by itself
    }
  }
  return killed;
}

// A client connected as its own user, so that its connections can be told apart.
std::unique_ptr<Client> client_as(internal::Connection& admin, const std::string& user) {
  for (const char* host : {"localhost", "%"}) {
    admin.query(fmt::format("CREATE USER IF NOT EXISTS '{}'@'{}'", user, host));
    admin.query(fmt::format("GRANT ALL ON *.* TO '{}'@'{}'", user, host));
  }
  std::string dsn = test::dsn();
  ClientOptions o;
  o.dsn = dsn.substr(0, dsn.find("://") + 3) + user + "@" + dsn.substr(dsn.find('@') + 1);
  o.pool_size = 4;
  return std::make_unique<Client>(o);
}

// Killing every pooled connection of a client does not surface to it: the lost connection is
// re-established and the operation retried where that is safe.
TEST(Faults, KilledConnectionsAreReestablished) {
  auto admin = test::admin();
  auto c = client_as(*admin, "txmq_fault_kill");
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send_batch(name, std::vector<OutgoingMessage>(50, OutgoingMessage{"x", {}, {}, {}}));
  ASSERT_GT(kill_connections_of(*admin, "txmq_fault_kill"), 0);
  std::vector<std::string> receipts;
  for (int i = 0; i < 10; ++i) {
    for (auto& m : c->receive(name, ReceiveOptions{.max_messages = 5})) {
      receipts.push_back(m.receipt);
    }
  }
  EXPECT_EQ(receipts.size(), 50u);
  ASSERT_GT(kill_connections_of(*admin, "txmq_fault_kill"), 0);
  for (Settle s : c->ack(name, receipts)) EXPECT_EQ(s, Settle::kOk);
  TopicStats stats = c->stats(name);
  EXPECT_EQ(stats.in_flight + stats.ready, 0u);
}

// A send whose connection is gone before it is written is retried; the message is stored once.
TEST(Faults, SendAfterKilledConnectionIsStoredOnce) {
  auto admin = test::admin();
  auto c = client_as(*admin, "txmq_fault_send");
  std::string name = topic_for_test();
  c->create_topic(name);
  c->send(name, "warm up the pool");
  ASSERT_GT(kill_connections_of(*admin, "txmq_fault_send"), 0);
  std::this_thread::sleep_for(2500ms);  // idle long enough to be pinged before use
  std::uint64_t id = c->send(name, "after the kill");
  EXPECT_GT(id, 0u);
  EXPECT_EQ(c->stats(name).ready, 2u);
}

TEST(Faults, DatabaseDownIsAClearErrorNotAHang) {
  std::string dir = test::scratch_dir();
  for (std::string bad : {fmt::format("mysql://root@localhost/txmq?socket={}/none.sock", dir),
                          std::string("mysql://root@127.0.0.1:1/txmq?connect_timeout=3")}) {
    auto start = std::chrono::steady_clock::now();
    try {
      ClientOptions o;
      o.dsn = bad;
      Client c(o);
      FAIL() << "connected to " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kUnavailable) << e.what();
      EXPECT_TRUE(e.retryable());
      EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);

    test::ProcessResult r = test::run_txmq({"--dsn", bad, "topic", "list"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(r.out.empty());
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("cannot connect"), std::string::npos) << r.err;
    EXPECT_LT(r.seconds, 10);
  }
}

TEST(Faults, WrongPasswordIsRefusedWithoutEchoingIt) {
  std::string dsn = test::dsn();
  // Same server, a user that does not exist, with a password that must not be printed.
  std::string bad = "mysql://nobody:hunter2secret@" + dsn.substr(dsn.find('@') + 1);
  test::ProcessResult r = test::run_txmq({"--dsn", bad, "topic", "list"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.find("hunter2secret"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nobody"), std::string::npos) << r.err;
}

TEST(Faults, WarnsWhenTheServerWouldLoseAcknowledgedSends) {
  auto admin = test::admin();
  admin->query("SET GLOBAL innodb_flush_log_at_trx_commit = 2");
  std::vector<std::string> warnings;
  try {
    ClientOptions o;
    o.dsn = test::dsn();
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Client first(o);
    Client second(o);  // once per process, not once per client
  } catch (...) {
    admin->query("SET GLOBAL innodb_flush_log_at_trx_commit = 1");
    throw;
  }
  admin->query("SET GLOBAL innodb_flush_log_at_trx_commit = 1");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("innodb_flush_log_at_trx_commit=2"), std::string::npos);
}

}  // namespace
}  // namespace txmq
