// Exactly-once across databases (Client::process_xa) against two real servers: the fixture's
// (the queue, A) and shard-server-2 (the resource, B). Also txmq's XA branch names (a branch
// prepared under such a name survives its connection, XA RECOVER gives the name back, another
// connection finishes it by that name) and recovery's choice in each state. The crash matrix is
// tests/xa/crash.cc.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "db/connection.h"
#include "db/dsn.h"
#include "xa/xa.h"
#include "support.h"
#include "txmq/local.h"
#include "txmq/worker.h"

namespace txmq::test {
namespace {

using internal::XaBranchName;

std::optional<XaBranchName> recovered(internal::Connection& c, std::uint64_t token) {
  internal::Result r = c.query_rows("XA RECOVER");
  for (const internal::Row& row : r.rows) {
    auto name = XaBranchName::from_recovered(row.i64(0), row.i64(1), row.i64(2), row.bytes(3));
    if (name && name->token == token) return name;
  }
  return std::nullopt;
}

TEST(XaNames, APreparedBranchIsFoundByItsNameAndFinishedFromAnotherConnection) {
  const std::string table = fmt::format("xa_{}", topic_for_test());
  auto setup = admin();
  setup->query(fmt::format("DROP TABLE IF EXISTS {}", table));
  setup->query(fmt::format("CREATE TABLE {} (k INT PRIMARY KEY) ENGINE=InnoDB", table));
  std::mt19937_64 random(std::random_device{}());
  for (const bool commit : {true, false}) {
    XaBranchName name{random(), random(), 42, 0};
    {
      auto branch = admin();
      name.connection = branch->execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0);
      branch->query(fmt::format("XA START {}", name.sql()));
      branch->execute(fmt::format("INSERT INTO {} VALUES (?)", table), {commit ? 1 : 2});
      branch->query(fmt::format("XA END {}", name.sql()));
      branch->query(fmt::format("XA PREPARE {}", name.sql()));
    }  // the connection closes; the prepared branch stays
    auto other = admin();
    const auto found = recovered(*other, name.token);
    ASSERT_TRUE(found) << "XA RECOVER does not list " << name.gtrid();
    EXPECT_EQ(found->instance, name.instance);
    EXPECT_EQ(found->owner, 42u);
    EXPECT_EQ(found->connection, name.connection);
    other->query(fmt::format("XA {} {}", commit ? "COMMIT" : "ROLLBACK", found->sql()));
    EXPECT_FALSE(recovered(*other, name.token));
  }
  auto check = admin();
  const internal::Result rows =
      check->execute(fmt::format("SELECT k FROM {} ORDER BY k", table), {});
  ASSERT_EQ(rows.rows.size(), 1u);  // the committed branch's row, not the rolled-back one's
  EXPECT_EQ(rows.rows[0].i64(0), 1);
  check->query(fmt::format("DROP TABLE {}", table));
}

// --- process_xa ----------------------------------------------------------------------------------

using namespace std::chrono_literals;

// The resource: shard-server-2 of the CTest fixture.
std::string resource_dsn() {
  const char* env = std::getenv("TXMQ_SHARD_HOMES");
  std::stringstream in(env ? env : TXMQ_SHARD_HOMES);
  std::string home;
  std::getline(in, home, ',');
  return LocalServer::status({home}).dsn;
}

std::unique_ptr<internal::Connection> resource_admin() {
  return std::make_unique<internal::Connection>(internal::parse_dsn(resource_dsn()));
}

// A table of the test's own in the resource, dropped at the end.
struct Ledger {
  std::string table = fmt::format("ledger_{:016x}", std::random_device{}() * 0x9E3779B97F4A7C15ull);
  Ledger() {
    auto b = resource_admin();
    b->query(fmt::format("DROP TABLE IF EXISTS {}", table));
    b->query(fmt::format("CREATE TABLE {} (message_id BIGINT UNSIGNED NOT NULL, "
                         "amount INT NOT NULL, KEY (message_id)) ENGINE=InnoDB",
                         table));
  }
  ~Ledger() {
    try {
      resource_admin()->query(fmt::format("DROP TABLE IF EXISTS {}", table));
    } catch (const Error&) {
    }
  }
  std::int64_t count(std::string_view where = "TRUE") const {
    return resource_admin()
        ->execute(fmt::format("SELECT COUNT(*) FROM {} WHERE {}", table, where), {})
        .rows.at(0)
        .i64(0);
  }
  std::int64_t distinct() const {
    return resource_admin()
        ->execute(fmt::format("SELECT COUNT(DISTINCT message_id) FROM {}", table), {})
        .rows.at(0)
        .i64(0);
  }
  // Records each message once, in the transaction process_xa lends.
  TransactionalHandler recorder() const {
    return [table = table](Transaction& tx, std::span<const Message> messages) {
      for (const Message& m : messages) {
        tx.execute(fmt::format("INSERT INTO {} (message_id, amount) VALUES (?, ?)", table),
                   {m.id, std::stoi(m.payload)});
      }
    };
  }
};

std::int64_t decision_rows(std::string_view resource) {
  return admin()
      ->execute("SELECT COUNT(*) FROM txmq_xa WHERE resource = ?", {resource})
      .rows.at(0)
      .i64(0);
}

std::string xa_topic(Client& c, const std::string& suffix = "") {
  const std::string topic = topic_for_test(suffix);
  TopicOptions o;
  o.retry.initial = 50ms;
  o.retry.max = 50ms;
  o.retry.jitter = 0;
  EXPECT_TRUE(c.create_topic(topic, o));
  return topic;
}

TEST(XaProcess, TheHandlersWorkInTheResourceAndTheAcknowledgementCommitTogether) {
  auto c = client();
  const std::string topic = xa_topic(*c);
  const std::string follow = xa_topic(*c, "follow");
  Ledger ledger;
  const XaResource resource{"ledger_a", resource_dsn()};
  for (int i = 1; i <= 50; ++i) c->send(topic, std::to_string(i));
  std::size_t processed = 0;
  const TransactionalHandler record = ledger.recorder();
  for (int round = 0; round < 20 && processed < 50; ++round) {
    processed += c->process_xa(topic, resource, {.max_messages = 10},
                               [&](Transaction& tx, std::span<const Message> messages) {
                                 record(tx, messages);
                                 tx.send(follow, "done");  // into the queue's database
                               });
  }
  EXPECT_EQ(processed, 50u);
  EXPECT_EQ(ledger.count(), 50);
  EXPECT_EQ(ledger.distinct(), 50);
  EXPECT_EQ(c->stats(topic).ready + c->stats(topic).in_flight, 0u);
  EXPECT_EQ(c->stats(follow).ready, 5u);
  // Nothing in doubt; the decision records of finished batches go with later batches and
  // recovery passes.
  const XaRecovery pass = c->recover_xa(resource);
  EXPECT_EQ(pass.live, 0u);
  EXPECT_EQ(pass.committed + pass.rolled_back, 0u);
  EXPECT_TRUE(c->xa_status(resource).empty());
  EXPECT_EQ(decision_rows(resource.name), 0);
  EXPECT_EQ(c->process_xa(topic, resource, {.max_messages = 10}, record), 0u);
}

TEST(XaProcess, AThrowingHandlerRollsBothSidesBackAndCountsAnAttempt) {
  auto c = client();
  const std::string topic = xa_topic(*c);
  Ledger ledger;
  const XaResource resource{"ledger_b", resource_dsn()};
  const std::uint64_t id = c->send(topic, "7");
  const TransactionalHandler record = ledger.recorder();
  EXPECT_THROW(c->process_xa(topic, resource, {},
                             [&](Transaction& tx, std::span<const Message> messages) {
                               record(tx, messages);
                               throw std::runtime_error("business rule says no");
                             }),
               std::runtime_error);
  EXPECT_EQ(ledger.count(), 0);  // the branch was rolled back
  std::this_thread::sleep_for(100ms);  // the topic's retry delay
  int attempt = 0;
  EXPECT_EQ(c->process_xa(topic, resource, {.wait = 2s},
                          [&](Transaction& tx, std::span<const Message> messages) {
                            attempt = messages[0].attempt;
                            EXPECT_EQ(messages[0].id, id);
                            record(tx, messages);
                          }),
            1u);
  EXPECT_EQ(attempt, 2);
  EXPECT_EQ(ledger.count(), 1);
  // Nothing in doubt: the last batch's decision record waits for the next batch to delete it.
  const std::vector<XaBranchStatus> status = c->xa_status(resource);
  ASSERT_EQ(status.size(), 1u);
  EXPECT_FALSE(status[0].prepared);
  EXPECT_EQ(status[0].decision, "commit");
  EXPECT_EQ(status[0].action, "purge");
  EXPECT_EQ(status[0].first_id, id);
  EXPECT_EQ(status[0].messages, 1u);
}

TEST(XaProcess, BadResourcesAreRefusedAndLoseNothing) {
  auto c = client();
  const std::string topic = xa_topic(*c);
  c->send(topic, "1");
  const auto handler = [](Transaction&, std::span<const Message>) {};
  try {
    c->process_xa(topic, {"Bad-Name", resource_dsn()}, {}, handler);
    ADD_FAILURE() << "a bad resource name was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("Bad-Name"), std::string::npos) << e.what();
  }
  try {
    c->process_xa(topic, {"typo", "mysql://root@127.0.0.1:1/x?connect_timeout=2&bogus=1"}, {},
                  handler);
    ADD_FAILURE() << "a DSN with an unknown parameter was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
  }
  try {
    c->process_xa(topic, {"down", "mysql://root@127.0.0.1:1/x?connect_timeout=2"}, {}, handler);
    ADD_FAILURE() << "a resource that is down was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kUnavailable) << e.what();
  }
  try {
    c->process_xa(topic, {"ledger_c", resource_dsn()}, {}, handler);
    c->process_xa(topic, {"ledger_c", dsn()}, {}, handler);
    ADD_FAILURE() << "one resource name was taken for two databases";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
  }
  // The message went to the first good call, and nothing else was lost.
  EXPECT_EQ(c->stats(topic).ready + c->stats(topic).in_flight, 0u);
}

// Recovery's choice in each state, on branches and decision rows made by hand as a consumer
// that crashed (or is still at work) would leave them.
TEST(XaProcess, RecoveryFinishesEachStateAsItsDecisionSays) {
  auto c = client();
  Ledger ledger;
  const XaResource resource{"ledger_d", resource_dsn()};
  EXPECT_TRUE(c->xa_status(resource).empty());  // also gives the queue database its instance id
  const std::uint64_t instance =
      admin()->execute("SELECT instance_id FROM txmq_schema", {}).rows.at(0).u64(0);
  ASSERT_NE(instance, 0u);
  std::mt19937_64 random(std::random_device{}());
  // A prepared branch that writes `amount`, its connection closed (a crashed consumer).
  const auto prepared_branch = [&](std::uint64_t token, int amount) {
    auto b = resource_admin();
    XaBranchName name{instance, token, 7,
                      b->execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0),
                      internal::xa_resource_hash(resource.name)};
    b->query(fmt::format("XA START {}", name.sql()));
    b->execute(fmt::format("INSERT INTO {} (message_id, amount) VALUES (?, ?)", ledger.table),
               {token, amount});
    b->query(fmt::format("XA END {}", name.sql()));
    b->query(fmt::format("XA PREPARE {}", name.sql()));
  };
  const auto decide = [&](internal::Connection& a, std::uint64_t token, std::string_view outcome) {
    a.execute(
        "INSERT INTO txmq_xa (token, outcome, resource, owner_id, topic, grp, first_id, "
        "messages, created_at) VALUES (?, ?, ?, 7, 't', 'default', 1, 1, NOW(6))",
        {token, outcome, resource.name});
  };
  auto a = admin();
  const std::uint64_t committed = random() | 1, aborted = random() | 1, dead = random() | 1,
                      live = random() | 1, finished = random() | 1;
  prepared_branch(committed, 1);
  decide(*a, committed, "commit");  // the consumer died after its decision: commit
  prepared_branch(aborted, 2);
  decide(*a, aborted, "abort");  // fenced before: roll back
  prepared_branch(dead, 4);      // died before its decision: fence, roll back
  decide(*a, finished, "commit");  // both sides done: purge
  prepared_branch(live, 8);        // at work: its transaction holds the decision row
  auto owner = admin();
  owner->begin();
  decide(*owner, live, "commit");

  const std::vector<XaBranchStatus> status = c->xa_status(resource);
  std::map<std::uint64_t, std::string> actions;
  for (const XaBranchStatus& s : status) actions[s.token] = s.action;
  EXPECT_EQ(actions[committed], "commit");
  EXPECT_EQ(actions[aborted], "rollback");
  EXPECT_EQ(actions[dead], "fence");
  EXPECT_EQ(actions[finished], "purge");
  EXPECT_EQ(actions[live], "fence");

  XaRecovery pass = c->recover_xa(resource);
  EXPECT_EQ(pass.committed, 1u);
  EXPECT_EQ(pass.rolled_back, 2u);
  EXPECT_EQ(pass.purged, 1u);
  EXPECT_EQ(pass.live, 1u);  // the fence waited on the owner's lock and left it alone
  EXPECT_EQ(ledger.count(), 1);
  EXPECT_EQ(ledger.count("amount = 1"), 1);

  owner->commit();  // the live consumer decides; it would now commit its branch itself
  pass = c->recover_xa(resource);
  EXPECT_EQ(pass.committed, 1u);
  EXPECT_EQ(pass.live, 0u);
  EXPECT_EQ(ledger.count("amount IN (1, 8)"), 2);
  EXPECT_EQ(ledger.count(), 2);
  EXPECT_TRUE(c->xa_status(resource).empty());
  EXPECT_EQ(decision_rows(resource.name), 0);
}

TEST(XaProcess, AWorkerProcessesEveryMessageOnceInTheResource) {
  auto c = client();
  const std::string topic = xa_topic(*c);
  Ledger ledger;
  std::vector<OutgoingMessage> batch;
  for (int i = 0; i < 300; ++i) batch.push_back({.payload = std::to_string(i % 10)});
  c->send_batch(topic, batch);
  WorkerOptions o;
  o.threads = 3;
  o.batch = 20;
  o.stop_when_empty = true;
  Worker worker(*c, topic, XaResource{"ledger_e", resource_dsn()}, ledger.recorder(), o);
  worker.join();
  EXPECT_EQ(worker.counts().acked, 300u);
  EXPECT_EQ(ledger.count(), 300);
  EXPECT_EQ(ledger.distinct(), 300);
  EXPECT_EQ(c->stats(topic).ready, 0u);
}

}  // namespace
}  // namespace txmq::test
