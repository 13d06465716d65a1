// Transactional messaging against a real server: outbox sends (Transaction and an enlisted
// MYSQL*), exactly-once processing (also across SIGKILLs of the consuming process), dedup keys
// (also between racing processes), and unknown commit outcomes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mysql.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "db/dsn.h"
#include "support.h"

namespace txmq::test {
namespace {

using namespace std::chrono_literals;

std::int64_t count_rows(const std::string& table) {
  auto a = admin();
  return a->execute(fmt::format("SELECT COUNT(*) FROM {}", table), {}).rows.at(0).i64(0);
}

std::uint64_t waiting(Client& c, const std::string& topic) {
  TopicStats s = c.stats(topic);
  return s.ready + s.in_flight + s.delayed;
}

// A business table named after the topic, so that parallel tests do not share it.
std::string business_table(const std::string& topic, const std::string& what,
                           const std::string& columns) {
  std::string table = fmt::format("app_{}_{}", what, topic);
  auto a = admin();
  a->query(fmt::format("DROP TABLE IF EXISTS {}", table));
  a->query(fmt::format("CREATE TABLE {} ({}) ENGINE=InnoDB", table, columns));
  return table;
}

std::vector<OutgoingMessage> numbered(int n, const std::string& prefix) {
  std::vector<OutgoingMessage> out;
  for (int i = 0; i < n; ++i) out.push_back({fmt::format("{}{}", prefix, i), {}, {}, {}});
  return out;
}

// --- Outbox: Transaction ------------------------------------------------------------------------

TEST(Outbox, TransactionRollsBackOrCommitsRowsAndMessagesTogether) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string orders = business_table(topic, "orders", "id INT PRIMARY KEY, total BIGINT");

  for (bool commit : {false, true}) {
    Transaction tx = c->begin();
    for (int i = 0; i < 1000; ++i) {
      tx.execute(fmt::format("INSERT INTO {} (id, total) VALUES (?, ?)", orders),
                 {std::int64_t{i}, std::int64_t{i * 10}});
    }
    std::vector<std::uint64_t> ids = tx.send_batch(topic, numbered(1000, "order-"));
    ASSERT_EQ(ids.size(), 1000u);
    // Not visible to anyone else before the commit.
    EXPECT_EQ(waiting(*c, topic), 0u);
    EXPECT_EQ(count_rows(orders), 0);
    if (commit) {
      tx.commit();
    } else {
      tx.rollback();
    }
    EXPECT_FALSE(tx.open());
    EXPECT_EQ(waiting(*c, topic), commit ? 1000u : 0u);
    EXPECT_EQ(count_rows(orders), commit ? 1000 : 0);
  }
  // What was committed is what consumers get.
  std::vector<Message> got = c->receive(topic, {.max_messages = 1000});
  ASSERT_EQ(got.size(), 1000u);
  EXPECT_EQ(got.front().payload, "order-0");
  EXPECT_EQ(got.back().payload, "order-999");
}

TEST(Outbox, TransactionReadsItsOwnWritesAndDestructionRollsBack) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string t = business_table(topic, "kv", "k VARCHAR(20) PRIMARY KEY, v DECIMAL(10,2)");
  {
    Transaction tx = c->begin();
    tx.execute(fmt::format("INSERT INTO {} VALUES (?, ?)", t), {std::string_view("a"), 12.5});
    SqlResult r = tx.execute(fmt::format("SELECT k, v, LENGTH(k) FROM {} WHERE k = ?", t),
                             {std::string_view("a")});
    ASSERT_EQ(r.rows.size(), 1u);
    EXPECT_EQ(r.rows[0].as_string(0), "a");
    EXPECT_EQ(r.rows[0].as_string(1), "12.50");
    EXPECT_EQ(r.rows[0].as_int(2), 1);
    EXPECT_THROW(r.rows[0].as_int(0), Error);
    // Literals of any type bind without casts.
    SqlResult lit = tx.execute("SELECT ?, ?, ?, ?, ?", {1, -2, 2.5, "s", nullptr});
    EXPECT_EQ(lit.rows.at(0).as_int(0), 1);
    EXPECT_EQ(lit.rows.at(0).as_int(1), -2);
    EXPECT_EQ(lit.rows.at(0).as_string(3), "s");
    EXPECT_TRUE(lit.rows.at(0).is_null(4));
    tx.send(topic, "x");
  }  // never committed
  EXPECT_EQ(count_rows(t), 0);
  EXPECT_EQ(waiting(*c, topic), 0u);
}

// A transaction holds one of the pool's connections; its sends must not need a second (a
// client with pool_size 1 used to wait forever for the topic's settings).
TEST(Outbox, APoolOfOneConnectionSendsInATransaction) {
  const std::string topic = topic_for_test();
  client()->create_topic(topic);
  ClientOptions o;
  o.dsn = dsn();
  o.pool_size = 1;
  auto c = std::make_unique<Client>(o);  // a new client: nothing cached
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([&c, topic, done] {
    try {
      c->transact([&](Transaction& tx) {
        tx.send(topic, "one");
        tx.send_batch(topic, numbered(3, "b"));
      });
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (finished.wait_for(30s) != std::future_status::ready) {
    ADD_FAILURE() << "a transaction's send on a pool of one connection did not return in 30 s";
    std::_Exit(1);  // the thread is stuck on the pool; nothing can end it
  }
  finished.get();
  EXPECT_EQ(waiting(*c, topic), 4u);
}

TEST(Outbox, TransactRetriesAfterADeadlockAndCommitsOnce) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string t = business_table(topic, "pair", "id INT PRIMARY KEY, n INT");
  admin()->query(fmt::format("INSERT INTO {} VALUES (1, 0), (2, 0)", t));
  // Two transactions lock 1 and 2 in opposite orders: InnoDB kills one, transact runs it again.
  std::atomic<int> runs{0};
  auto body = [&](int first, int second) {
    return [&, first, second](Transaction& tx) {
      ++runs;
      tx.execute(fmt::format("UPDATE {} SET n = n + 1 WHERE id = ?", t), {std::int64_t{first}});
      std::this_thread::sleep_for(200ms);
      tx.execute(fmt::format("UPDATE {} SET n = n + 1 WHERE id = ?", t), {std::int64_t{second}});
      tx.send(topic, fmt::format("{}-{}", first, second));
    };
  };
  std::thread other([&] { c->transact(body(2, 1)); });
  c->transact(body(1, 2));
  other.join();
  EXPECT_GE(runs.load(), 3);  // one of them ran twice
  auto a = admin();
  internal::Result r = a->execute(fmt::format("SELECT SUM(n) FROM {}", t), {});
  EXPECT_EQ(std::stoll(r.rows.at(0).bytes(0)), 4);
  EXPECT_EQ(waiting(*c, topic), 2u);
  // transact commits when fn returns: fn may not commit or roll back itself.
  EXPECT_THROW(c->transact([](Transaction& tx) { tx.commit(); }), Error);
}

// --- Outbox: an enlisted MYSQL* -----------------------------------------------------------------

TEST(Outbox, EnlistedConnectionRollsBackOrCommitsWithTheApplication) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string orders = business_table(topic, "orders", "id INT PRIMARY KEY");
  MysqlHandle app = open_mysql();
  // The application's session is not txmq's: another time zone, REPEATABLE READ.
  mysql_run(app.get(), "SET time_zone = '+05:00'");
  mysql_run(app.get(), "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  Outbox outbox = c->enlist(app.get());

  for (bool commit : {false, true}) {
    mysql_run(app.get(), "START TRANSACTION");
    for (int i = 0; i < 1000; i += 100) {
      std::string values;
      for (int j = i; j < i + 100; ++j) values += fmt::format("{}({})", j == i ? "" : ",", j);
      mysql_run(app.get(), fmt::format("INSERT INTO {} VALUES {}", orders, values));
    }
    std::vector<std::uint64_t> ids = outbox.send_batch(topic, numbered(1000, "m"));
    EXPECT_EQ(ids.size(), 1000u);
    outbox.send(topic, "one more", {.key = "k"});
    EXPECT_EQ(waiting(*c, topic), 0u);
    mysql_run(app.get(), commit ? "COMMIT" : "ROLLBACK");
    EXPECT_EQ(waiting(*c, topic), commit ? 1001u : 0u);
    EXPECT_EQ(count_rows(orders), commit ? 1000 : 0);
  }
  // Sent in another time zone, yet claimable now: times are UTC.
  EXPECT_EQ(c->receive(topic, {.max_messages = 2000}).size(), 1001u);
}

TEST(Outbox, EnlistedConnectionWithoutATransactionIsRefused) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  MysqlHandle app = open_mysql();
  Outbox outbox = c->enlist(app.get());
  try {
    outbox.send(topic, "would commit alone");
    FAIL() << "expected kFailedPrecondition";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kFailedPrecondition) << e.what();
    EXPECT_NE(std::string(e.what()).find("no transaction open"), std::string::npos) << e.what();
  }
  EXPECT_EQ(waiting(*c, topic), 0u);
  // autocommit=0 counts as a transaction.
  mysql_run(app.get(), "SET autocommit = 0");
  outbox.send(topic, "in an implicit transaction");
  mysql_run(app.get(), "ROLLBACK");
  EXPECT_EQ(waiting(*c, topic), 0u);
  EXPECT_THROW(c->enlist(nullptr), Error);
}

// --- Exactly-once -------------------------------------------------------------------------------

TEST(ExactlyOnce, HandlerWorkAndAcknowledgementCommitTogether) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string done = business_table(topic, "done", "msg_id BIGINT PRIMARY KEY, body TEXT");
  c->send_batch(topic, numbered(25, "p"));
  std::size_t total = 0;
  for (;;) {
    std::size_t n = c->process(topic, {.max_messages = 10},
                               [&](Transaction& tx, std::span<const Message> batch) {
                                 EXPECT_LE(batch.size(), 10u);
                                 for (const Message& m : batch) {
                                   EXPECT_EQ(m.attempt, 1);
                                   EXPECT_TRUE(m.receipt.empty());
                                   tx.execute(fmt::format("INSERT INTO {} VALUES (?, ?)", done),
                                              {m.id, std::string_view(m.payload)});
                                 }
                               });
    if (n == 0) break;
    total += n;
  }
  EXPECT_EQ(total, 25u);
  EXPECT_EQ(count_rows(done), 25);
  EXPECT_EQ(waiting(*c, topic), 0u);
}

TEST(ExactlyOnce, AThrowingHandlerRollsBackAndTheMessagesAreClaimableAtOnce) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.lease = std::chrono::minutes(5);  // a lease would make the retry wait 5 minutes
  options.max_attempts = 3;
  options.retry.initial = Micros{0};  // and no retry delay either
  c->create_topic(topic, options);
  const std::string done = business_table(topic, "done", "msg_id BIGINT PRIMARY KEY");
  c->send_batch(topic, numbered(3, "p"));

  auto failing = [&](Transaction& tx, std::span<const Message> batch) {
    for (const Message& m : batch) {
      tx.execute(fmt::format("INSERT INTO {} VALUES (?)", done), {m.id});
    }
    throw std::runtime_error("handler failed");
  };
  EXPECT_THROW(c->process(topic, {.max_messages = 10}, failing), std::runtime_error);
  EXPECT_EQ(count_rows(done), 0);  // the handler's insert was rolled back with the claim

  // Another client (no scan hint of its own) gets them at once, on their second attempt.
  auto peer = client("peer");
  auto start = std::chrono::steady_clock::now();
  std::vector<Message> again = peer->receive(topic, {.max_messages = 10});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].attempt, 2);
  for (const Message& m : again) peer->nack(topic, m.receipt);

  // Third failure: attempts reach max_attempts; the next claim dead-letters them.
  EXPECT_THROW(c->process(topic, {.max_messages = 10}, failing), std::runtime_error);
  std::size_t n = c->process(topic, {.max_messages = 10},
                             [&](Transaction&, std::span<const Message>) { ADD_FAILURE(); });
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(c->stats(topic).dead, 3u);
}

// The contract in client.h: a throwing handler's messages come back after the topic's retry
// delay, as after a nack (a crash gives them back at once: no lease to wait out).
TEST(ExactlyOnce, AThrowingHandlersMessagesComeBackAfterTheRetryDelay) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.retry.initial = 3s;
  options.retry.jitter = 0;
  c->create_topic(topic, options);
  c->send(topic, "p");
  EXPECT_THROW(c->process(topic, {},
                          [](Transaction&, std::span<const Message>) {
                            throw std::runtime_error("handler failed");
                          }),
               std::runtime_error);
  const auto failed_at = std::chrono::steady_clock::now();
  auto peer = client("peer");
  EXPECT_TRUE(peer->receive(topic, {}).empty());  // not at once
  std::vector<Message> again = peer->receive(topic, {.wait = 10s});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - failed_at, 2500ms);
  EXPECT_EQ(again[0].attempt, 2);
}

// The handler's own statement on a table that does not exist fails with the server's error
// (1146), not "topic does not exist": the topic is fine and its messages are claimable again.
TEST(ExactlyOnce, AHandlersMissingTableIsNotReportedAsAMissingTopic) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.retry.initial = Micros{0};
  c->create_topic(topic, options);
  c->send(topic, "m");
  try {
    c->process(topic, {.max_messages = 10}, [&](Transaction& tx, std::span<const Message>) {
      tx.execute("INSERT INTO txmq_no_such_business_table VALUES (1)", {});
    });
    FAIL() << "the handler's failing statement was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.server_errno(), 1146u) << e.what();
    EXPECT_EQ(std::string(e.what()).find("topic '"), std::string::npos) << e.what();
  }
  std::vector<Message> again = c->receive(topic, {.max_messages = 10});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
}

TEST(ExactlyOnce, CommitAndRollbackBelongToProcess) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic, TopicOptions{.retry = {.initial = Micros{0}}});
  c->send(topic, "x");
  EXPECT_THROW(c->process(topic, {}, [](Transaction& tx, auto) { tx.commit(); }), Error);
  std::size_t n = c->process(topic, {}, [](Transaction&, auto) {});
  EXPECT_EQ(n, 1u);
  EXPECT_THROW(c->process(topic, {.max_messages = 0}, [](Transaction&, auto) {}), Error);
}

// The crash test: a child consumes 20,000 messages on 4 threads, each handler adding the
// message's amount to one account row and recording the message in `processed`; the parent
// SIGKILLs it at random moments and starts it again until the topic is empty.
TEST(ExactlyOnce, SurvivesSigkillsWithoutLosingOrRepeatingWork) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string accounts = business_table(topic, "acct", "id INT PRIMARY KEY, total BIGINT");
  // Not unique: a duplicate must be counted, not refused (which would hide it by a retry).
  const std::string processed = business_table(
      topic, "proc", "seq BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id BIGINT NOT NULL, KEY (msg_id)");
  admin()->query(fmt::format("INSERT INTO {} VALUES (1, 0)", accounts));

  constexpr int kMessages = 20000;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> amount(1, 1000);
  std::int64_t expected = 0;
  std::vector<OutgoingMessage> batch;
  for (int i = 0; i < kMessages; ++i) {
    int a = amount(rng);
    expected += a;
    batch.push_back({std::to_string(a), {}, {}, {}});
  }
  c->send_batch(topic, batch);

  std::uniform_int_distribution<int> kill_after_ms(50, 400);
  int kills = 0, runs = 0;
  const auto give_up = std::chrono::steady_clock::now() + 240s;
  while (waiting(*c, topic) > 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "the topic did not empty";
    ++runs;
    Background child =
        start_process(TXMQ_TEST_HELPER, {"exactly-once", topic, accounts, processed, "4", "10"});
    auto kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_after_ms(rng));
    std::optional<int> code;
    while (!(code = child.poll()) && std::chrono::steady_clock::now() < kill_at) {
      std::this_thread::sleep_for(5ms);
    }
    if (!code) {
      kill(child.pid, SIGKILL);
      ++kills;
      EXPECT_EQ(child.wait(), 128 + SIGKILL);
    } else {
      ASSERT_EQ(*code, 0) << child.err();
    }
  }
  auto a = admin();
  std::int64_t total =
      a->execute(fmt::format("SELECT total FROM {} WHERE id = 1", accounts), {}).rows.at(0).i64(0);
  internal::Result counts =
      a->execute(fmt::format("SELECT COUNT(*), COUNT(DISTINCT msg_id) FROM {}", processed), {});
  std::cout << fmt::format("{} runs, {} SIGKILLs\n", runs, kills);
  EXPECT_GE(kills, 3) << "the child finished too fast to be killed: the test proved little";
  EXPECT_EQ(total, expected);
  EXPECT_EQ(counts.rows.at(0).i64(0), kMessages);
  EXPECT_EQ(counts.rows.at(0).i64(1), kMessages);
  EXPECT_EQ(c->stats(topic).dead, 0u);
}

// --- Dedup --------------------------------------------------------------------------------------

TEST(Dedup, ASecondSendWithTheKeyReturnsTheFirstId) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  std::uint64_t first = c->send(topic, "a", {.dedup_key = "order-1"});
  EXPECT_EQ(c->send(topic, "a again", {.dedup_key = "order-1"}), first);
  EXPECT_NE(c->send(topic, "b", {.dedup_key = "order-2"}), first);
  EXPECT_EQ(waiting(*c, topic), 2u);

  // Within a batch, and against earlier sends; messages without keys are always sent.
  std::vector<OutgoingMessage> batch = {{"c", {}, {}, "order-3"},
                                        {"a3", {}, {}, "order-1"},
                                        {"c2", {}, {}, "order-3"},
                                        {"free", {}, {}, {}}};
  std::vector<std::uint64_t> ids = c->send_batch(topic, batch);
  EXPECT_EQ(ids[1], first);
  EXPECT_EQ(ids[0], ids[2]);
  EXPECT_NE(ids[0], ids[3]);
  EXPECT_EQ(waiting(*c, topic), 4u);

  // Still deduplicated after the message was acknowledged (the window counts, not the ack).
  std::vector<Message> got = c->receive(topic, {.max_messages = 10});
  for (const Message& m : got) c->ack(topic, m.receipt);
  EXPECT_EQ(c->send(topic, "late", {.dedup_key = "order-1"}), first);
  EXPECT_EQ(waiting(*c, topic), 0u);

  // A rolled-back send does not hold its key.
  {
    Transaction tx = c->begin();
    tx.send(topic, "never", {.dedup_key = "order-9"});
    tx.rollback();
  }
  std::uint64_t nine = c->send(topic, "now", {.dedup_key = "order-9"});
  EXPECT_EQ(c->receive(topic).at(0).id, nine);
}

TEST(Dedup, KeysExpireAfterTheTopicsWindow) {
  auto c = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.dedup_window = std::chrono::seconds(1);
  c->create_topic(topic, options);
  EXPECT_EQ(c->topic(topic).options.dedup_window, std::chrono::seconds(1));
  std::uint64_t first = c->send(topic, "a", {.dedup_key = "k"});
  EXPECT_EQ(c->send(topic, "a", {.dedup_key = "k"}), first);
  std::this_thread::sleep_for(1200ms);
  std::uint64_t second = c->send(topic, "a", {.dedup_key = "k"});
  EXPECT_NE(second, first);
  EXPECT_EQ(c->send(topic, "a", {.dedup_key = "k"}), second);
  EXPECT_EQ(waiting(*c, topic), 2u);

  TopicOptions bad;
  bad.dedup_window = std::chrono::milliseconds(10);
  EXPECT_THROW(c->create_topic(topic_for_test("_bad"), bad), Error);
  EXPECT_THROW(c->send(topic, "x", {.dedup_key = ""}), Error);
  EXPECT_THROW(c->send(topic, "x", {.dedup_key = std::string(256, 'k')}), Error);
}

TEST(Dedup, KeysLongExpiredArePurgedBySends) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  for (const char* key : {"a", "b", "c"}) c->send(topic, "x", {.dedup_key = key});
  const test::TopicRows dd = test::topic_rows(topic, "dd");
  admin()->query(fmt::format("UPDATE {} SET expires_at = NOW(6) - INTERVAL 2 MINUTE WHERE {} AND "
                             "dedup_key IN ('a', 'b')",
                             dd.table, dd.where));
  auto fresh = client("another");  // its first send with a key purges
  fresh->send(topic, "y", {.dedup_key = "d"});
  auto a = admin();
  internal::Result left =
      a->execute(fmt::format("SELECT dedup_key FROM {} WHERE {} ORDER BY dedup_key", dd.table,
                             dd.where),
                 {});
  ASSERT_EQ(left.rows.size(), 2u);
  EXPECT_EQ(left.rows[0].bytes(0), "c");
  EXPECT_EQ(left.rows[1].bytes(0), "d");
  // A purged key is free again.
  std::uint64_t again = fresh->send(topic, "x", {.dedup_key = "a"});
  EXPECT_EQ(waiting(*c, topic), 5u);
  EXPECT_EQ(fresh->send(topic, "x", {.dedup_key = "a"}), again);
}

// The race: two processes send the same 1,000 keys in different orders and batch sizes.
TEST(Dedup, TwoRacingProcessesProduceOneMessagePerKey) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  const std::string start =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         (std::chrono::system_clock::now() + 500ms).time_since_epoch())
                         .count());
  Background one = start_process(TXMQ_TEST_HELPER, {"dedup-send", topic, "1000", "1", start});
  Background two = start_process(TXMQ_TEST_HELPER, {"dedup-send", topic, "1000", "2", start});
  ASSERT_EQ(one.wait(), 0) << one.err();
  ASSERT_EQ(two.wait(), 0) << two.err();
  EXPECT_EQ(waiting(*c, topic), 1000u);

  // Both processes were told the same id for each key.
  auto parse = [](const std::string& out) {
    std::map<std::string, std::uint64_t> ids;
    std::istringstream in(out);
    std::string key;
    std::uint64_t id = 0;
    while (in >> key >> id) ids[key] = id;
    return ids;
  };
  std::map<std::string, std::uint64_t> a = parse(one.out()), b = parse(two.out());
  ASSERT_EQ(a.size(), 1000u);
  EXPECT_EQ(a, b);
  std::set<std::uint64_t> distinct;
  for (auto& [k, id] : a) distinct.insert(id);
  EXPECT_EQ(distinct.size(), 1000u);
  // They did race: each inserted some of the messages.
  std::map<std::string, int> by_sender;
  for (const Message& m : c->receive(topic, {.max_messages = 1000})) ++by_sender[m.payload];
  EXPECT_GT(by_sender["seed 1"], 0);
  EXPECT_GT(by_sender["seed 2"], 0);
  EXPECT_EQ(by_sender["seed 1"] + by_sender["seed 2"], 1000);
}

// --- Schema migration ---------------------------------------------------------------------------

// A database written by the previous release (schema 2: no dedup window or table) is upgraded
// in place by the first client that connects, its messages kept.
TEST(Schema, Version2IsMigratedWithItsMessages) {
  const std::string db = "txmq_migration_test";
  auto a = admin();
  a->query(fmt::format("DROP DATABASE IF EXISTS {}", db));
  a->query(fmt::format("CREATE DATABASE {}", db));
  a->query(fmt::format("USE {}", db));
  a->query(
      "CREATE TABLE txmq_schema (singleton TINYINT UNSIGNED NOT NULL PRIMARY KEY, version INT "
      "UNSIGNED NOT NULL, updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
  a->query("INSERT INTO txmq_schema VALUES (1, 2, NOW(6))");
  a->query(
      "CREATE TABLE txmq_topics (name VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL "
      "PRIMARY KEY, lease_us BIGINT UNSIGNED NOT NULL, max_attempts INT UNSIGNED NOT NULL, "
      "max_payload_bytes BIGINT UNSIGNED NOT NULL, created_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
  a->query("INSERT INTO txmq_topics VALUES ('old', 30000000, 5, 1048576, NOW(6))");
  a->query(
      "CREATE TABLE txmq_q_old (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, visible_at "
      "DATETIME(6) NOT NULL, attempts INT UNSIGNED NOT NULL DEFAULT 0, lease_token BIGINT "
      "UNSIGNED NOT NULL DEFAULT 0, owner_id BIGINT UNSIGNED NOT NULL DEFAULT 0, enqueued_at "
      "DATETIME(6) NOT NULL, msg_key VARBINARY(255) NULL, payload LONGBLOB NOT NULL, PRIMARY KEY "
      "(id)) ENGINE=InnoDB");
  a->query(
      "CREATE TABLE txmq_dlq_old (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, attempts INT UNSIGNED "
      "NOT NULL, last_owner VARCHAR(255) CHARACTER SET utf8mb4 NULL, enqueued_at DATETIME(6) NOT "
      "NULL, died_at DATETIME(6) NOT NULL, msg_key VARBINARY(255) NULL, payload LONGBLOB NOT "
      "NULL) ENGINE=InnoDB");
  a->query(
      "INSERT INTO txmq_q_old (visible_at, enqueued_at, msg_key, payload) VALUES (NOW(6), "
      "NOW(6), NULL, 'kept'), (NOW(6), NOW(6), 'k', 'k1'), (NOW(6), NOW(6), 'k', 'k2')");

  std::string other = dsn();
  const std::string from = "/" + internal::parse_dsn(other).database;
  other.replace(other.rfind(from), from.size(), "/" + db);
  ClientOptions options;
  options.dsn = other;
  Client c(options);
  EXPECT_EQ(c.topic("old").options.dedup_window, std::chrono::minutes(5));
  std::uint64_t id = c.send("old", "new", {.dedup_key = "d"});
  EXPECT_EQ(c.send("old", "new", {.dedup_key = "d"}), id);
  // Keyed messages from before version 4 all count as their key's current ones: a new message
  // with the key waits for both.
  c.send("old", "k3", {.key = "k"});
  std::vector<Message> got = c.receive("old", {.max_messages = 10});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].payload, "kept");
  EXPECT_EQ(got[1].payload, "k1");
  EXPECT_EQ(got[2].payload, "k2");
  EXPECT_EQ(c.ack("old", got[1].receipt), Settle::kOk);
  EXPECT_TRUE(c.receive("old").empty());
  EXPECT_EQ(c.ack("old", got[2].receipt), Settle::kOk);
  got = c.receive("old");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "k3");
  EXPECT_EQ(a->execute("SELECT version FROM txmq_schema", {}).rows.at(0).i64(0), 16);
  // Version 14: topics are not fair until made so.
  EXPECT_FALSE(c.topic("old").options.fair);
  // Version 15: the topics that name a dead-letter topic are found through an index.
  EXPECT_EQ(a->execute("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? "
                       "AND TABLE_NAME = 'txmq_topics' AND INDEX_NAME = 'dead_letter_topic'",
                       {db})
                .rows.at(0)
                .i64(0),
            1);
  // Version 16: the old topic keeps its tables; every topic has a sid; the shared tables exist.
  EXPECT_FALSE(c.topic("old").shared_storage);
  EXPECT_EQ(a->execute("SELECT COUNT(*) FROM txmq_topics WHERE sid = 0", {}).rows.at(0).i64(0), 0);
  EXPECT_EQ(a->execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? "
                       "AND TABLE_NAME LIKE 'txmq\\_sh\\_%'",
                       {db})
                .rows.at(0)
                .i64(0),
            6);
  // Version 11: the topic's send fence (it has one group).
  // COUNT(*) of an information_schema query about the migrated database.
  const auto count = [&](const char* sql) { return a->execute(sql, {db}).rows.at(0).i64(0); };
  const auto fences = [&] {
    return count("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND "
                 "TABLE_NAME = 'txmq_q_old' AND COLUMN_NAME = 'send_fence'");
  };
  const auto views = [&] {
    return count("SELECT COUNT(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = ? AND "
                 "TABLE_NAME = 'txmq_sv_old'");
  };
  EXPECT_EQ(fences(), 1);
  EXPECT_EQ(views(), 0);
  // Version 10 -> 11: the send view of version 10 goes, the fence comes.
  a->query("ALTER TABLE txmq_q_old DROP COLUMN send_fence");
  a->query("CREATE SQL SECURITY INVOKER VIEW txmq_sv_old AS SELECT id, visible_at, enqueued_at, "
           "msg_key, payload, attributes FROM txmq_q_old");
  a->query("UPDATE txmq_schema SET version = 10");
  {
    Client upgraded(options);
    EXPECT_EQ(a->execute("SELECT version FROM txmq_schema", {}).rows.at(0).i64(0), 16);
    EXPECT_EQ(views(), 0);
    EXPECT_EQ(fences(), 1);
    upgraded.send("old", "after 11");
  }
  // Version 11 -> 12: txmq_waiters keyed by (connection_id, topic), its rows kept; a
  // registration of a version-11 client (one channel per connection) still fits.
  const auto key_columns = [&] {
    return count("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND "
                 "TABLE_NAME = 'txmq_waiters' AND INDEX_NAME = 'PRIMARY'");
  };
  EXPECT_EQ(key_columns(), 2);
  a->query("ALTER TABLE txmq_waiters DROP PRIMARY KEY, ADD PRIMARY KEY (connection_id)");
  a->query("INSERT INTO txmq_waiters VALUES (4242, 'old', NOW(6))");
  a->query("UPDATE txmq_schema SET version = 11");
  {
    Client upgraded(options);
    EXPECT_EQ(a->execute("SELECT version FROM txmq_schema", {}).rows.at(0).i64(0), 16);
    EXPECT_EQ(key_columns(), 2);
    EXPECT_EQ(a->execute("SELECT COUNT(*) FROM txmq_waiters WHERE connection_id = 4242", {})
                  .rows.at(0)
                  .i64(0),
              1);
    a->query("REPLACE INTO txmq_waiters VALUES (4242, 'old', NOW(6))");  // a version-11 renewal
    a->query("INSERT INTO txmq_waiters VALUES (4242, 'old$1', NOW(6))");  // a watch's second
    a->query("DELETE FROM txmq_waiters WHERE connection_id = 4242");
    EXPECT_EQ(a->execute("SELECT COUNT(*) FROM txmq_waiters", {}).rows.at(0).i64(0), 0);
    upgraded.send("old", "after 12");
  }
  // Version 12 -> 13: the SQL interface's routines (docs/sql.md).
  const auto routines = [&] {
    return count("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ? AND "
                 "ROUTINE_NAME = 'txmq_send'");
  };
  EXPECT_EQ(routines(), 1);
  a->query("DROP PROCEDURE txmq_send");
  a->query("UPDATE txmq_schema SET version = 12");
  {
    Client upgraded(options);
    EXPECT_EQ(a->execute("SELECT version FROM txmq_schema", {}).rows.at(0).i64(0), 16);
    EXPECT_EQ(routines(), 1);
    internal::Result sent = a->query_rows("CALL txmq_send('old', 'through SQL', NULL)");
    ASSERT_EQ(sent.rows.size(), 1u);
  }
  // Version 5: one partition, no archive, the group "default" with the topic's old tables;
  // version 6: messages without attributes, no dead-letter topic, no retention.
  EXPECT_TRUE(got[0].attributes.empty());
  EXPECT_TRUE(c.topic("old").options.dead_letter_topic.empty());
  EXPECT_EQ(c.topic("old").options.retention, Micros{0});
  EXPECT_EQ(c.topic("old").options.partitions, 1);
  EXPECT_EQ(c.topic("old").options.archive, Micros{0});
  ASSERT_EQ(c.list_groups("old").size(), 1u);
  EXPECT_EQ(c.list_groups("old")[0].name, "default");
  Client again(options);  // a second client finds it migrated
  a->query(fmt::format("DROP DATABASE {}", db));
}

// Clients that start together on a database of version 6 migrate it once: one wins the claim on
// txmq_schema's row (replicated on Galera, unlike the GET_LOCK it replaces), the others wait
// for it and find the version current. A claim left by a client that died is overtaken when it
// runs out. A trigger logs every migration step (the only writes of updated_at).
TEST(Schema, ClientsStartingTogetherMigrateOnceAndOvertakeAClaimThatRanOut) {
  const std::string db = "txmq_migration_race_test";
  auto a = admin();
  a->query(fmt::format("DROP DATABASE IF EXISTS {}", db));
  a->query(fmt::format("CREATE DATABASE {}", db));
  std::string other = dsn();
  const std::string from = "/" + internal::parse_dsn(other).database;
  other.replace(other.rfind(from), from.size(), "/" + db);
  ClientOptions options;
  options.dsn = other;
  {
    Client first(options);  // a new database: created at the current version, nothing migrated
    first.create_topic("kept");
    first.send("kept", "from before");
  }
  a->query(fmt::format("USE {}", db));
  a->query("CREATE TABLE migrations (version INT UNSIGNED NOT NULL, at DATETIME(6) NOT NULL)");
  a->query(
      "CREATE TRIGGER log_migrations AFTER UPDATE ON txmq_schema FOR EACH ROW "
      "IF NEW.updated_at <> OLD.updated_at THEN "
      "INSERT INTO migrations VALUES (NEW.version, NOW(6)); END IF");
  const auto back_to_version_6 = [&] {
    a->query(
        "ALTER TABLE txmq_topics DROP COLUMN layout_claimed_by, DROP COLUMN "
        "layout_claimed_until");
    a->query("ALTER TABLE txmq_schema DROP COLUMN claimed_by, DROP COLUMN claimed_until");
    a->query("UPDATE txmq_schema SET version = 6");
  };
  const auto migrations = [&] {
    return a->execute("SELECT COUNT(*) FROM migrations WHERE version = 7", {}).rows.at(0).i64(0);
  };
  back_to_version_6();

  std::vector<std::thread> clients;
  std::atomic<int> ready{0};
  std::atomic<int> failures{0};
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&] {
      ++ready;
      while (ready < 6) std::this_thread::yield();
      try {
        Client c(options);
        c.send("kept", "after");
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(migrations(), 1);
  EXPECT_EQ(a->execute("SELECT version FROM txmq_schema", {}).rows.at(0).i64(0), 16);
  EXPECT_EQ(a->execute("SELECT claimed_by IS NULL FROM txmq_schema", {}).rows.at(0).i64(0), 1);

  // A migrating client died holding the claim, which runs out in 1.5 s.
  a->query("UPDATE txmq_schema SET version = 6");
  a->query(
      "UPDATE txmq_schema SET claimed_by = 'dead client', claimed_until = NOW(6) + INTERVAL "
      "1500000 MICROSECOND");
  const auto start = std::chrono::steady_clock::now();
  {
    Client late(options);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 1300ms);
    EXPECT_TRUE(late.create_group("kept", "second"));  // the layout claim's columns are there
    EXPECT_EQ(late.receive("kept", {.max_messages = 10}).size(), 7u);
  }
  EXPECT_EQ(migrations(), 2);
  EXPECT_EQ(a->execute("SELECT claimed_by IS NULL FROM txmq_schema", {}).rows.at(0).i64(0), 1);
  a->query(fmt::format("DROP DATABASE {}", db));
}

// --- Unknown outcomes ---------------------------------------------------------------------------

// The connection is killed from the server side just before COMMIT: the client cannot know
// whether the COMMIT arrived, and says so; with dedup keys, sending again is safe.
TEST(CommitUnknown, IsNamedAndADedupRetryIsSafe) {
  auto c = client();
  const std::string topic = topic_for_test();
  c->create_topic(topic);
  Transaction tx = c->begin();
  std::int64_t connection_id = tx.execute("SELECT CONNECTION_ID()").rows.at(0).as_int(0);
  tx.send(topic, "payment", {.dedup_key = "pay-77"});
  admin()->query(fmt::format("KILL CONNECTION {}", connection_id));
  try {
    tx.commit();
    FAIL() << "expected kCommitUnknown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCommitUnknown) << e.what();
    EXPECT_FALSE(e.retryable());
  }
  std::uint64_t id = c->send(topic, "payment", {.dedup_key = "pay-77"});
  EXPECT_EQ(c->send(topic, "payment", {.dedup_key = "pay-77"}), id);
  EXPECT_EQ(waiting(*c, topic), 1u);
}

}  // namespace
}  // namespace txmq::test
