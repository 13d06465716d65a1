// The SQL interface (docs/sql.md, src/catalog/routines.sql) against the library: the same sends
// through both leave the same rows; exactly-once consumption by take/ack with peers and
// rollbacks; bad input refused with nothing written.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "support.h"
#include "txmq/client.h"
#include "util/codec.h"

namespace txmq::test {
namespace {

using Json = nlohmann::json;

std::string hex_literal(std::string_view bytes) {
  return fmt::format("X'{}'", util::hex_encode(bytes));
}
// A text argument that survives any byte: the bytes in hex, read as utf8mb4.
std::string text_literal(std::string_view utf8) {
  return fmt::format("CONVERT({} USING utf8mb4)", hex_literal(utf8));
}

// The message a test sends, as the library takes it and as JSON for the routines.
Json options_json(const OutgoingMessage& m) {
  Json o = Json::object();
  if (m.key) o["key"] = *m.key;
  if (m.dedup_key) o["dedup_key"] = *m.dedup_key;
  if (m.delay.count() != 0) o["delay_ms"] = m.delay.count() / 1000;
  if (!m.attributes.empty()) {
    Json a = Json::object();
    for (const auto& [name, value] : m.attributes) {
      if (value.type == "String") {
        a[name] = value.value;
      } else {
        a[name] = {{"type", value.type}, {"value", value.value}};
      }
    }
    o["attributes"] = a;
  }
  return o;
}

std::uint64_t connection_id(internal::Connection& c) {
  return c.execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0);
}

// Kills a connection (its open transaction rolls back) and waits until the server has done so:
// until a KILL of it finds no such thread (1094). (Not information_schema.PROCESSLIST: MySQL
// converts every session's statement text to utf8mb3 to fill it, and fails (3854) on another
// test's binary bytes.)
void kill_connection(internal::Connection& admin, std::uint64_t id) {
  for (int i = 0; i < 500; ++i) {
    try {
      admin.query(fmt::format("KILL CONNECTION {}", id));
    } catch (const Error& e) {
      if (e.server_errno() == 1094) return;
      throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "connection " << id << " is still there";
}

std::vector<std::uint64_t> ids_of(const internal::Result& r) {
  std::vector<std::uint64_t> ids;
  for (const internal::Row& row : r.rows) ids.push_back(static_cast<std::uint64_t>(row.i64(0)));
  return ids;
}

// Every other call through the topic's own send (txmq_send_to_<topic>), which must leave the
// same rows: its fast path for plain sends, txmq_send for the rest and after a group change.
std::vector<std::uint64_t> sql_send(internal::Connection& c, const std::string& topic,
                                    const OutgoingMessage& m) {
  static std::atomic<unsigned> calls{0};
  const Json o = options_json(m);
  const std::string options = o.empty() ? "NULL" : text_literal(o.dump());
  if (calls++ % 2 == 1) {
    return ids_of(c.query_rows(
        fmt::format("CALL txmq_send_to_{}({}, {})", topic, hex_literal(m.payload), options)));
  }
  return ids_of(c.query_rows(
      fmt::format("CALL txmq_send('{}', {}, {})", topic, hex_literal(m.payload), options)));
}

std::vector<std::uint64_t> sql_send_batch(internal::Connection& c, const std::string& topic,
                                          const std::vector<OutgoingMessage>& batch) {
  Json messages = Json::array();
  for (const OutgoingMessage& m : batch) {
    Json o = options_json(m);
    o["payload_base64"] = util::base64_encode(m.payload);
    messages.push_back(o);
  }
  return ids_of(c.query_rows(
      fmt::format("CALL txmq_send_batch('{}', {})", topic, text_literal(messages.dump()))));
}

// Random messages over a few keys and dedup keys, so that keys repeat and park, and dedup keys
// hit within and across sends.
OutgoingMessage random_message(std::mt19937_64& rng, int partitions) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  OutgoingMessage m;
  const int length = pick(4) == 0 ? 0 : pick(300);
  for (int i = 0; i < length; ++i) m.payload.push_back(static_cast<char>(rng()));
  // With several partitions, unkeyed sends go to partitions chosen differently (in turn by the
  // library, at random by the routines): there every message has a key.
  if (partitions > 1 || pick(3) == 0) m.key = fmt::format("k{}", pick(5));
  if (pick(4) == 0) m.dedup_key = fmt::format("d{}", pick(6));
  if (pick(5) == 0) m.delay = std::chrono::milliseconds(60'000 + pick(3) * 1000);
  const int attributes = pick(3) == 0 ? pick(4) : 0;
  for (int i = 0; i < attributes; ++i) {
    static const char* kTypes[] = {"String", "Number", "Binary.raw", "String.x"};
    m.attributes[fmt::format("{}{}", pick(2) == 0 ? "a.b" : "Z_", pick(8))] =
        AttributeValue{kTypes[pick(4)], fmt::format("v{}é{}", pick(1000), std::string(pick(3), '-'))};
  }
  return m;
}

// A topic's rows in a form both topics can be compared in: ids replaced by the number of the
// message (in send order) that got them.
struct Dump {
  std::vector<std::string> lines;
  bool operator==(const Dump&) const = default;
};

Dump dump(internal::Connection& a, const std::string& topic, int partitions,
          const std::vector<std::string>& groups, const std::map<std::uint64_t, int>& seq) {
  Dump d;
  const auto number = [&](std::uint64_t id) {
    const auto it = seq.find(id);
    return it == seq.end() ? std::string("?") + std::to_string(id) : std::to_string(it->second);
  };
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (int p = 0; p < partitions; ++p) {
      const std::string suffix = g == 0 && p == 0 ? "" : fmt::format("${}_{}", g, p);
      // Queue: in id order, which is send order within a partition.
      internal::Result q = a.execute(
          fmt::format("SELECT id, HEX(msg_key), HEX(payload), HEX(attributes), attempts, "
                      "visible_at > enqueued_at + INTERVAL 10 SECOND FROM `txmq_q_{}{}` ORDER BY id",
                      topic, suffix),
          {});
      for (internal::Row& r : q.rows) {
        d.lines.push_back(fmt::format("q g{} p{} #{} key={} payload={} attrs={} attempts={} delayed={}",
                                      g, p, number(r.u64(0)), r.null(1) ? "-" : r.bytes(1),
                                      r.bytes(2), r.null(3) ? "-" : r.bytes(3), r.i64(4), r.i64(5)));
      }
      internal::Result kp = a.execute(
          fmt::format("SELECT msg_key, id, HEX(payload), HEX(attributes), "
                      "visible_at > enqueued_at + INTERVAL 10 SECOND FROM `txmq_kp_{}{}` "
                      "ORDER BY msg_key, park_id",
                      topic, suffix),
          {});
      for (internal::Row& r : kp.rows) {
        d.lines.push_back(fmt::format("parked g{} p{} key={} #{} payload={} attrs={} delayed={}", g,
                                      p, r.bytes(0), number(r.u64(1)), r.bytes(2),
                                      r.null(3) ? "-" : r.bytes(3), r.i64(4)));
      }
      internal::Result k = a.execute(
          fmt::format("SELECT msg_key, heads, parked FROM `txmq_k_{}{}` ORDER BY msg_key", topic,
                      suffix),
          {});
      for (internal::Row& r : k.rows) {
        d.lines.push_back(fmt::format("key g{} p{} {} heads={} parked={}", g, p, r.bytes(0),
                                      r.i64(1), r.i64(2)));
      }
    }
  }
  internal::Result dd = a.execute(
      fmt::format("SELECT dedup_key, message_id FROM `txmq_dd_{}` ORDER BY dedup_key", topic), {});
  for (internal::Row& r : dd.rows) {
    d.lines.push_back(fmt::format("dedup {} #{}", r.bytes(0), number(r.u64(1))));
  }
  return d;
}

// The property: random sequences of single sends and batches (keys, dedup keys, delays,
// attributes, binary payloads), through the library into one topic and through the routines
// into a twin, leave the same rows in every group's and partition's tables, and the same ids
// (as message numbers) come back.
void same_rows_for_random_sends(int partitions, bool second_group, std::uint64_t seed) {
  SCOPED_TRACE(fmt::format("seed {} partitions {} second group {}", seed, partitions, second_group));
  auto lib = client();
  auto a = admin();
  const std::string via_library = topic_for_test(fmt::format("lib{}", partitions));
  const std::string via_sql = topic_for_test(fmt::format("sql{}", partitions));
  TopicOptions options;
  options.partitions = partitions;
  ASSERT_TRUE(lib->create_topic(via_library, options));
  ASSERT_TRUE(lib->create_topic(via_sql, options));
  std::vector<std::string> groups = {"default"};
  if (second_group) {
    lib->create_group(via_library, "second");
    lib->create_group(via_sql, "second");
    groups.push_back("second");
  }
  std::mt19937_64 rng(seed);
  std::map<std::uint64_t, int> seq_library;
  std::map<std::uint64_t, int> seq_sql;
  int number = 0;
  for (int op = 0; op < 60; ++op) {
    const bool batch = rng() % 3 == 0;
    std::vector<OutgoingMessage> messages;
    const int n = batch ? 1 + static_cast<int>(rng() % 25) : 1;
    for (int i = 0; i < n; ++i) messages.push_back(random_message(rng, partitions));
    std::vector<std::uint64_t> from_library;
    std::vector<std::uint64_t> from_sql;
    if (batch) {
      from_library = lib->send_batch(via_library, messages);
      from_sql = sql_send_batch(*a, via_sql, messages);
    } else {
      const OutgoingMessage& m = messages[0];
      from_library = {lib->send(via_library, m.payload,
                                {.key = m.key, .delay = m.delay, .dedup_key = m.dedup_key,
                                 .attributes = m.attributes})};
      from_sql = sql_send(*a, via_sql, m);
    }
    ASSERT_EQ(from_library.size(), messages.size());
    ASSERT_EQ(from_sql.size(), messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const int me = number++;
      const int lib_number = seq_library.emplace(from_library[i], me).first->second;
      const int sql_number = seq_sql.emplace(from_sql[i], me).first->second;
      ASSERT_EQ(lib_number, sql_number) << "operation " << op << ", message " << i
                                        << ": the ids name different messages";
    }
  }
  const Dump library_rows = dump(*a, via_library, partitions, groups, seq_library);
  const Dump sql_rows = dump(*a, via_sql, partitions, groups, seq_sql);
  EXPECT_GT(library_rows.lines.size(), 40u);
  EXPECT_EQ(library_rows.lines, sql_rows.lines);

  // And a consumer of the library sees the same messages from both.
  std::vector<Message> got_library = lib->receive(via_library, {.max_messages = 500});
  std::vector<Message> got_sql = lib->receive(via_sql, {.max_messages = 500});
  // (in the order of their partitions' turns, which differ: compared as sets)
  const auto fields = [](const std::vector<Message>& got) {
    std::multiset<std::string> out;
    for (const Message& m : got) {
      std::string line = fmt::format("{}|{}|", m.key.value_or("-"), util::hex_encode(m.payload));
      for (const auto& [name, value] : m.attributes) {
        line += fmt::format("{}:{}:{};", name, value.type, value.value);
      }
      out.insert(line);
    }
    return out;
  };
  EXPECT_EQ(fields(got_library), fields(got_sql));
  lib->drop_topic(via_library);
  lib->drop_topic(via_sql);
}

TEST(SqlInterface, RandomSendsLeaveTheRowsOfTheLibrarysSends) {
  std::random_device random;
  const std::uint64_t seed = random();
  same_rows_for_random_sends(1, false, seed);
  same_rows_for_random_sends(1, true, seed + 1);
}

TEST(SqlInterface, RandomKeyedSendsOverPartitionsLeaveTheLibrarysRows) {
  std::random_device random;
  same_rows_for_random_sends(4, true, random());
}

// A key's partition computed in SQL (64-bit FNV-1a and the jump hash in 32-bit halves) is the
// library's, for many keys and partition counts.
TEST(SqlInterface, KeyPartitionsMatchTheLibrary) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.partitions = 64;
  ASSERT_TRUE(lib->create_topic(topic, options));
  std::mt19937_64 rng(7);
  std::string keys;
  for (int i = 0; i < 300; ++i) {
    std::string key;
    const int length = 1 + static_cast<int>(rng() % 40);
    for (int j = 0; j < length; ++j) key.push_back(static_cast<char>(rng()));
    const std::uint64_t id = lib->send(topic, "x", {.key = key});
    a->query(fmt::format("CALL txmq_i_key_partition({}, 64, @txmq_test_p)", hex_literal(key)));
    internal::Result r = a->execute("SELECT @txmq_test_p", {});
    EXPECT_EQ(r.rows.at(0).i64(0), static_cast<std::int64_t>(id >> 48)) << util::hex_encode(key);
  }
  lib->drop_topic(topic);
}

// Bad input is refused with a txmq message, and a batch with one bad message writes nothing.
TEST(SqlInterface, BadInputIsRefusedAndNothingIsHalfWritten) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.max_payload_bytes = 1000;
  ASSERT_TRUE(lib->create_topic(topic, options));
  const auto refused = [&](const std::string& sql, const std::string& words) {
    try {
      a->query_rows(sql);
      ADD_FAILURE() << sql << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("txmq: "), std::string::npos) << e.what();
    }
  };
  refused("CALL txmq_send('x`; DROP TABLE txmq_topics; --', 'p', NULL)", "invalid topic name");
  refused("CALL txmq_send('Upper', 'p', NULL)", "invalid topic name");
  refused("CALL txmq_send('no_such_topic_here', 'p', NULL)", "no such topic");
  refused(fmt::format("CALL txmq_send('{}', REPEAT('x', 1001), NULL)", topic), "limit of 1000");
  refused(fmt::format("CALL txmq_send('{}', 'p', '{{not json')", topic), "malformed JSON");
  refused(fmt::format("CALL txmq_send('{}', 'p', '{{\"delay_ms\": \"soon\"}}')", topic), "delay_ms");
  refused(fmt::format("CALL txmq_send('{}', 'p', '{{\"attributes\": {{\"bad name\": \"v\"}}}}')", topic),
          "attribute names");
  refused(fmt::format("CALL txmq_send('{}', 'p', '{{\"dedupe_key\": \"x\"}}')", topic),
          "unknown field \"dedupe_key\"");
  refused(fmt::format("CALL txmq_send_batch('{}', '[\"a\", {{\"payload\": \"b\", \"keyy\": \"k\"}}]')",
                      topic),
          "message 2 of the batch: unknown field \"keyy\"");
  refused(fmt::format("CALL txmq_send_batch('{}', '[]')", topic), "JSON array of 1 to 10000");
  refused(fmt::format("CALL txmq_send_batch('{}', '{{\"a\": 1}}')", topic), "JSON array");
  Json many = Json::array();
  for (int i = 0; i < 10001; ++i) many.push_back("m");
  refused(fmt::format("CALL txmq_send_batch('{}', '{}')", topic, many.dump()), "1 to 10000");
  // Message 700 of 1,000 is too large: none is written.
  Json batch = Json::array();
  for (int i = 0; i < 1000; ++i) batch.push_back(i == 699 ? std::string(2000, 'y') : "ok");
  refused(fmt::format("CALL txmq_send_batch('{}', '{}')", topic, batch.dump()),
          "message 700 of the batch");
  refused(fmt::format("CALL txmq_take('{}', NULL, 5)", topic), "needs a transaction");
  a->begin();
  refused(fmt::format("CALL txmq_take('{}', 'nope', 5)", topic), "has no group 'nope'");
  a->rollback();
  a->begin();
  refused(fmt::format("CALL txmq_ack('{}', NULL, '[1, \"x\"]')", topic), "ids must be");
  a->rollback();
  EXPECT_EQ(lib->stats(topic).ready, 0u);
  // Inside the caller's transaction, a failed call leaves the caller's own earlier work alone.
  a->begin();
  a->query_rows(fmt::format("CALL txmq_send('{}', 'kept', NULL)", topic));
  refused(fmt::format("CALL txmq_send_batch('{}', '[\"a\", 5]')", topic), "message 2 of the batch");
  a->commit();
  std::vector<Message> got = lib->receive(topic, {.max_messages = 10});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "kept");
  lib->drop_topic(topic);
}

// A topic whose tables come at its first use (txmq serve --tables-at-first-use) and that no SQS
// or library call has used yet: the calls make no tables (DDL would commit the caller's
// transaction), so they refuse it saying why, not with the server's "Table ... doesn't exist",
// and the caller's earlier work in its transaction stays. Once used, the calls work.
TEST(SqlInterface, ATopicWithoutItsTablesYetIsRefusedSayingWhy) {
  auto lib = client();
  auto a = admin();
  const std::string unused = topic_for_test("unused");
  const std::string plain = topic_for_test("plain");
  ASSERT_TRUE(lib->create_topic(unused, {}, TableCreation::kAtFirstUse));
  ASSERT_TRUE(lib->create_topic(plain));
  const std::string why = fmt::format("txmq: topic '{}' has no tables until its first use", unused);
  const auto refused = [&](const std::string& sql) {
    try {
      a->query_rows(sql);
      ADD_FAILURE() << sql << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << sql << ": " << e.what();
    }
  };
  refused(fmt::format("CALL txmq_send('{}', 'p', NULL)", unused));
  refused(fmt::format("CALL txmq_send('{}', 'p', '{{\"delay_ms\": 5}}')", unused));
  refused(fmt::format("CALL txmq_send_batch('{}', '[\"a\", \"b\"]')", unused));
  refused(fmt::format("CALL txmq_send_batch('{}', '[\"a\", {{\"payload\": \"b\", \"key\": \"k\"}}]')",
                      unused));
  a->begin();
  a->query_rows(fmt::format("CALL txmq_send('{}', 'kept', NULL)", plain));
  refused(fmt::format("CALL txmq_send('{}', 'p', NULL)", unused));
  refused(fmt::format("CALL txmq_take('{}', NULL, 5)", unused));
  a->commit();
  EXPECT_EQ(lib->stats(plain).ready, 1u);
  refused(fmt::format("CALL txmq_fail('{}', NULL, '[1]')", unused));
  // The first use by the library makes the tables; the calls then work.
  lib->send(unused, "first");
  a->query_rows(fmt::format("CALL txmq_send('{}', 'second', NULL)", unused));
  EXPECT_EQ(lib->stats(unused).ready, 2u);
  lib->drop_topic(unused);
  lib->drop_topic(plain);
}

// A send in a transaction commits and rolls back with it; a batch of 2,000 is one unit.
TEST(SqlInterface, SendsCommitAndRollBackWithTheCallersTransaction) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  ASSERT_TRUE(lib->create_topic(topic));
  Json batch = Json::array();
  for (int i = 0; i < 2000; ++i) batch.push_back(fmt::format("m{}", i));
  a->begin();
  a->query_rows(fmt::format("CALL txmq_send('{}', 'rolled back', NULL)", topic));
  a->query_rows(fmt::format("CALL txmq_send_batch('{}', '{}')", topic, batch.dump()));
  a->rollback();
  EXPECT_EQ(lib->stats(topic).ready, 0u);
  a->begin();
  const std::vector<std::uint64_t> ids =
      ids_of(a->query_rows(fmt::format("CALL txmq_send_batch('{}', '{}')", topic, batch.dump())));
  EXPECT_EQ(lib->stats(topic).ready, 0u);  // not before the commit
  a->commit();
  ASSERT_EQ(ids.size(), 2000u);
  std::vector<Message> got = lib->receive(topic, {.max_messages = 2000});
  ASSERT_EQ(got.size(), 2000u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, ids[i]);
    EXPECT_EQ(got[i].payload, fmt::format("m{}", i));
  }
  lib->drop_topic(topic);
}

// Consumers taking and acknowledging inside their transactions, beside a business row each:
// with peers racing, rollbacks at random and connections killed mid-work, every message's work
// is done exactly once. Keyed messages keep their order.
TEST(SqlInterface, TakeAndAckProcessEveryMessageExactlyOnce) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  const std::string done = topic + "_done";
  TopicOptions options;
  options.max_attempts = 0;  // deadlocks, rollbacks and kills count: none may dead-letter here
  ASSERT_TRUE(lib->create_topic(topic, options));
  a->query(fmt::format("DROP TABLE IF EXISTS {}", done));
  a->query(fmt::format("CREATE TABLE {} (id BIGINT UNSIGNED PRIMARY KEY, k VARCHAR(8) NULL, "
                       "seq BIGINT AUTO_INCREMENT UNIQUE) ENGINE=InnoDB",
                       done));
  constexpr int kMessages = 1200;
  std::vector<OutgoingMessage> messages;
  for (int i = 0; i < kMessages; ++i) {
    OutgoingMessage m;
    m.payload = std::to_string(i);
    if (i % 3 == 0) m.key = fmt::format("k{}", i % 7);
    messages.push_back(std::move(m));
  }
  const std::vector<std::uint64_t> ids = lib->send_batch(topic, messages);
  std::atomic<int> rolled_back{0};
  std::atomic<int> killed{0};
  std::atomic<int> acked{0};
  std::atomic<int> deadlocks{0};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 4; ++t) {
    consumers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      std::unique_ptr<internal::Connection> c = admin();
      std::unique_ptr<internal::Connection> killer = admin();  // a connection is one thread's
      int empty = 0;
      while (empty < 20) {
        try {
          c->begin();
          internal::Result got =
              c->query_rows(fmt::format("CALL txmq_take('{}', NULL, {})", topic, 1 + rng() % 20));
          if (got.rows.empty()) {
            c->commit();
            ++empty;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            continue;
          }
          empty = 0;
          Json taken = Json::array();
          for (internal::Row& row : got.rows) {
            taken.push_back(row.u64(0));
            c->execute(fmt::format("INSERT INTO {} (id, k) VALUES (?, ?)", done),
                       {row.u64(0), row.null(2) ? internal::Param(nullptr)
                                                : internal::Param(row.bytes(2))});
          }
          c->query_rows(fmt::format("CALL txmq_ack('{}', NULL, '{}')", topic, taken.dump()));
          const unsigned fate = rng() % 10;
          if (fate == 0) {
            c->rollback();
            ++rolled_back;
          } else if (fate == 1) {
            // The connection dies with the work and the acks uncommitted.
            kill_connection(*killer, connection_id(*c));
            c = admin();
            ++killed;
          } else {
            c->commit();
            acked += static_cast<int>(got.rows.size());
          }
        } catch (const Error& e) {
          // Peers' transactions can deadlock, as any application's: rolled back, tried again.
          if (e.server_errno() != 1213) ADD_FAILURE() << e.what();
          ++deadlocks;
          c = admin();
        }
      }
    });
  }
  for (std::thread& t : consumers) t.join();
  EXPECT_EQ(acked.load(), kMessages);
  EXPECT_GT(rolled_back.load() + killed.load(), 0);
  const TopicStats left = lib->stats(topic);
  std::printf("acked %d, rolled back %d, killed %d, deadlocks %d; left: ready %llu, in flight "
              "%llu, delayed %llu, on key %llu, dead %llu\n",
              acked.load(), rolled_back.load(), killed.load(), deadlocks.load(),
              static_cast<unsigned long long>(left.ready), static_cast<unsigned long long>(left.in_flight),
              static_cast<unsigned long long>(left.delayed),
              static_cast<unsigned long long>(left.waiting_on_key), static_cast<unsigned long long>(left.dead));
  EXPECT_EQ(a->execute(fmt::format("SELECT COUNT(*) FROM {}", done), {}).rows.at(0).i64(0),
            kMessages);
  std::set<std::uint64_t> sent(ids.begin(), ids.end());
  internal::Result rows = a->execute(fmt::format("SELECT id, k FROM {} ORDER BY seq", done), {});
  std::map<std::string, std::uint64_t> last_of_key;
  for (internal::Row& row : rows.rows) {
    EXPECT_EQ(sent.count(row.u64(0)), 1u);
    if (!row.null(1)) {
      // A key's messages were done in the order they were sent (ids rise per key).
      std::uint64_t& last = last_of_key[row.bytes(1)];
      EXPECT_GT(row.u64(0), last) << "key " << row.bytes(1);
      last = row.u64(0);
    }
  }
  EXPECT_EQ(lib->stats(topic).ready, 0u);
  a->query(fmt::format("DROP TABLE {}", done));
  lib->drop_topic(topic);
}

// A message whose work keeps failing (rollbacks, and a crash) is counted and dead-lettered after
// the topic's max_attempts; txmq_fail applies the retry delay.
TEST(SqlInterface, APoisonMessageIsDeadLetteredAfterMaxAttempts) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.max_attempts = 3;
  options.retry.initial = std::chrono::seconds(30);
  ASSERT_TRUE(lib->create_topic(topic, options));
  lib->send(topic, "poison");
  const std::uint64_t failing = lib->send(topic, "fails once");
  const auto take = [&](internal::Connection& c) {
    return c.query_rows(fmt::format("CALL txmq_take('{}', NULL, 10)", topic));
  };
  for (int attempt = 1; attempt <= 3; ++attempt) {
    if (attempt == 2) {  // a crash: the connection dies holding the messages
      std::unique_ptr<internal::Connection> c = admin();
      c->begin();
      EXPECT_EQ(take(*c).rows.size(), 1u);  // the other one waits out its retry delay
      kill_connection(*a, connection_id(*c));
      continue;
    }
    a->begin();
    internal::Result got = take(*a);
    ASSERT_FALSE(got.rows.empty());
    EXPECT_EQ(got.rows[0].i64(3), attempt);  // attempt
    a->rollback();
    if (attempt == 1) {
      // The second message's failure is reported: counted, and back after the retry delay.
      a->query_rows(fmt::format("CALL txmq_fail('{}', NULL, '{}')", topic, failing));
    }
  }
  a->begin();
  EXPECT_TRUE(take(*a).rows.empty());  // the poison message went to the dead letters
  a->commit();
  std::vector<DeadLetter> dead = lib->dead_letters(topic);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].payload, "poison");
  EXPECT_EQ(lib->stats(topic).delayed + lib->stats(topic).ready, 1u);
  lib->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test

namespace txmq::test {
namespace {

// A sharded topic's partitions that live on another server: a send through SQL that would go
// there is refused, naming the partition (the routines cannot route).
TEST(SqlInterface, SendsToPartitionsOnAnotherServerAreRefused) {
  auto lib = client();
  auto a = admin();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.partitions = 2;
  ASSERT_TRUE(lib->create_topic(topic, options));
  // As a shard map would leave it: only partition 1 on this server.
  a->execute("UPDATE txmq_topics SET placed = 2 WHERE name = ?", {topic});
  std::string to_zero;  // a key of partition 0
  for (int i = 0; to_zero.empty(); ++i) {
    const std::string key = fmt::format("key{}", i);
    a->query(fmt::format("CALL txmq_i_key_partition('{}', 2, @txmq_test_p)", key));
    if (a->execute("SELECT @txmq_test_p", {}).rows.at(0).i64(0) == 0) {
      to_zero = key;
    }
  }
  for (int i = 0; i < 5; ++i) {
    const std::vector<std::uint64_t> id =
        ids_of(a->query_rows(fmt::format("CALL txmq_send('{}', 'here', NULL)", topic)));
    EXPECT_EQ(id.at(0) >> 48, 1u);  // the partition on this server
  }
  try {
    a->query_rows(fmt::format("CALL txmq_send('{}', 'there', '{{\"key\": \"{}\"}}')", topic, to_zero));
    ADD_FAILURE() << "a send to partition 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("partition 0 of topic"), std::string::npos) << e.what();
  }
  a->execute("UPDATE txmq_topics SET placed = 0 WHERE name = ?", {topic});
  try {
    a->query_rows(fmt::format("CALL txmq_send('{}', 'nowhere', NULL)", topic));
    ADD_FAILURE() << "a send to a topic with no partition here was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not on this server"), std::string::npos) << e.what();
  }
  a->execute("UPDATE txmq_topics SET placed = NULL WHERE name = ?", {topic});
  lib->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test

namespace txmq::test {
namespace {

// Batches sent at once from several connections each get the ids of their own rows: the ids of
// a batch's INSERT are one block (INSERT ... SELECT under lock modes 0 and 1, VALUES else).
TEST(SqlInterface, ConcurrentBatchesGetTheIdsOfTheirOwnRows) {
  auto lib = client();
  const std::string topic = topic_for_test();
  ASSERT_TRUE(lib->create_topic(topic));
  std::vector<std::thread> senders;
  std::atomic<int> wrong{0};
  std::atomic<int> sent{0};
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      std::unique_ptr<internal::Connection> c = admin();
      std::mt19937 rng(static_cast<unsigned>(t) + 11);
      for (int b = 0; b < 15; ++b) {
        const int n = 1 + static_cast<int>(rng() % 700);
        Json batch = Json::array();
        for (int i = 0; i < n; ++i) batch.push_back(fmt::format("{}.{}.{}", t, b, i));
        const std::vector<std::uint64_t> ids = ids_of(c->query_rows(
            fmt::format("CALL txmq_send_batch('{}', {})", topic, text_literal(batch.dump()))));
        if (ids.size() != static_cast<std::size_t>(n)) {
          ++wrong;
          continue;
        }
        // Each id holds this batch's payload at its place.
        Json list = Json::array();
        for (std::uint64_t id : ids) list.push_back(id);
        internal::Result rows = c->execute(
            fmt::format("SELECT id, payload FROM `txmq_q_{}` WHERE id IN (SELECT j.id FROM "
                        "JSON_TABLE(CONVERT(? USING utf8mb4), '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS j)",
                        topic),
            {list.dump()});
        std::map<std::uint64_t, std::string> payload;
        for (internal::Row& row : rows.rows) payload[row.u64(0)] = row.bytes(1);
        for (int i = 0; i < n; ++i) {
          if (payload[ids[i]] != fmt::format("{}.{}.{}", t, b, i)) ++wrong;
        }
        sent += n;
      }
    });
  }
  for (std::thread& s : senders) s.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(lib->stats(topic).ready, static_cast<std::uint64_t>(sent.load()));
  lib->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test
