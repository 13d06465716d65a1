// txmq_take_wait (docs/sql.md, "Waiting for messages"): a SQL consumer that waits for a message
// is woken by a send's COMMIT, library or SQL, within milliseconds; idle, it costs a few
// statements a second; it leaves no registration behind; and it refuses what it cannot do.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace txmq::test {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const std::size_t i =
      std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

double ms_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::uint64_t connection_id(internal::Connection& c) {
  return c.execute("SELECT CONNECTION_ID()", {}).rows.at(0).u64(0);
}

// A SQL take's registration (registered_at 1000-01-01) of this connection on this channel.
bool registered(internal::Connection& admin, std::uint64_t id, const std::string& channel) {
  return admin
             .execute("SELECT COUNT(*) FROM txmq_waiters WHERE connection_id = ? AND topic = ? "
                      "AND registered_at < '1001-01-01'",
                      {id, std::string_view(channel)})
             .rows.at(0)
             .i64(0) > 0;
}

// The statements a session ran, by its Com_ counters (statements inside procedures included).
std::int64_t statements_of_session(internal::Connection& c) {
  std::int64_t n = 0;
  for (const internal::Row& row : c.query_rows("SHOW SESSION STATUS LIKE 'Com\\_%'").rows) {
    n += row.i64(1);
  }
  return n;
}

// One waiting take in a transaction; acknowledges what it got and commits. A wake-up that lands
// between two of the procedure's statements ends the CALL with 1317 (docs/sql.md): then, as an
// application does, roll back and take again (counted in `interrupted`).
struct Taken {
  std::vector<std::string> payloads;
  SteadyClock::time_point returned;
};
Taken take_wait(internal::Connection& c, const std::string& topic, double seconds,
                int* interrupted = nullptr) {
  internal::Result r;
  for (;;) {
    c.begin();
    try {
      r = c.query_rows(fmt::format("CALL txmq_take_wait('{}', NULL, 10, {})", topic, seconds));
      break;
    } catch (const Error& e) {
      c.rollback();
      if (e.server_errno() != 1317 || interrupted == nullptr) throw;
      ++*interrupted;
    }
  }
  Taken t{{}, SteadyClock::now()};
  std::string ids;
  for (const internal::Row& row : r.rows) {
    t.payloads.push_back(row.bytes(1));
    ids += fmt::format("{}{}", ids.empty() ? "" : ",", row.u64(0));
  }
  if (!ids.empty()) c.query(fmt::format("CALL txmq_ack('{}', NULL, '[{}]')", topic, ids));
  c.commit();
  return t;
}

// Sends from the library (committed at once) and from txmq_send in a transaction left open
// 50 ms after the CALL: each is taken within milliseconds of its COMMIT by a take that waits for
// it (registered before the send), and no registration outlives the takes.
TEST(SqlTakeWait, ASendsCommitWakesTheWaitingTake) {
  const std::string topic = topic_for_test();
  auto lib = client();
  ASSERT_TRUE(lib->create_topic(topic));
  auto taker = admin();
  auto sender = admin();
  auto watcher = admin();
  const std::uint64_t taker_id = connection_id(*taker);
  int interrupted = 0;
  for (const bool through_sql : {false, true}) {
    std::vector<double> ms;
    for (int i = 0; i < 25; ++i) {
      const std::string payload = fmt::format("{}{}", through_sql ? "sql" : "lib", i);
      std::optional<Taken> got;
      std::thread taking([&] { got = take_wait(*taker, topic, 10, &interrupted); });
      bool waiting = false;
      for (int k = 0; k < 500 && !waiting; ++k) {
        waiting = registered(*watcher, taker_id, topic);
        if (!waiting) std::this_thread::sleep_for(2ms);
      }
      SteadyClock::time_point committed;
      if (through_sql) {
        sender->begin();
        ASSERT_EQ(sender->query_rows(fmt::format("CALL txmq_send('{}', '{}', NULL)", topic, payload))
                      .rows.size(),
                  1u);
        std::this_thread::sleep_for(50ms);
        sender->commit();
        committed = SteadyClock::now();
      } else {
        lib->send(topic, payload);
        committed = SteadyClock::now();
      }
      taking.join();
      ASSERT_TRUE(waiting) << "the take did not register";
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(got->payloads, std::vector<std::string>{payload});
      ms.push_back(std::max(0.0, ms_between(committed, got->returned)));
    }
    std::printf("txmq_take_wait woken by a %s send: COMMIT to return p50 %.1f ms, p90 %.1f ms, "
                "max %.1f ms (%zu sends; CALLs ended by a wake-up so far: %d)\n",
                through_sql ? "txmq_send" : "library", percentile(ms, 0.5), percentile(ms, 0.9),
                percentile(ms, 1.0), ms.size(), interrupted);
    // The targets are p50 <= 10 ms and p99 <= 50 ms (txmq bench --only sql); a sanitizer build on
    // a loaded machine gets room.
    EXPECT_LE(percentile(ms, 0.5), 25.0);
    EXPECT_LE(percentile(ms, 0.9), 100.0);
  }
  EXPECT_LE(interrupted, 5);  // of 50 wake-ups
  // A library sender puts back the watches' registrations it took, not a take's.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(watcher->execute("SELECT COUNT(*) FROM txmq_waiters WHERE connection_id = ?", {taker_id})
                .rows.at(0)
                .i64(0),
            0);
  lib->drop_topic(topic);
}

// Nothing sent: the take returns empty at the end of its wait, having run a few statements a
// second while it waits (a look and a wait each second, after the setup and first claim of any
// take); a send that rolls back wakes it (a fence and a claim) but does not end it early.
TEST(SqlTakeWait, AnIdleWaitEndsOnTimeAtAFewStatementsASecond) {
  const std::string topic = topic_for_test();
  auto lib = client();
  ASSERT_TRUE(lib->create_topic(topic));
  auto taker = admin();
  auto sender = admin();
  std::map<int, std::int64_t> statements;  // by the wait's seconds
  for (const int wait : {1, 5}) {
    const std::int64_t before = statements_of_session(*taker);
    const auto started = SteadyClock::now();
    const Taken t = take_wait(*taker, topic, wait);
    const double seconds = ms_between(started, t.returned) / 1000;
    statements[wait] = statements_of_session(*taker) - before;
    EXPECT_TRUE(t.payloads.empty());
    EXPECT_GE(seconds, wait - 0.05);
    EXPECT_LE(seconds, wait + 1.0);
  }
  const double per_second = static_cast<double>(statements[5] - statements[1]) / 4;
  std::printf("txmq_take_wait, nothing sent: %lld statements for a wait of 1 s, %lld for 5 s: "
              "%.1f a second of waiting\n",
              static_cast<long long>(statements[1]), static_cast<long long>(statements[5]),
              per_second);
  EXPECT_LE(per_second, 10.0);  // the library's budget is 50 a waiting consumer
  std::thread rolling_back([&] {
    std::this_thread::sleep_for(500ms);
    sender->begin();
    sender->query_rows(fmt::format("CALL txmq_send('{}', 'gone', NULL)", topic));
    std::this_thread::sleep_for(100ms);
    sender->rollback();
  });
  const auto started = SteadyClock::now();
  const Taken t = take_wait(*taker, topic, 2);
  rolling_back.join();
  EXPECT_TRUE(t.payloads.empty());
  EXPECT_GE(ms_between(started, t.returned), 1950.0);
  lib->drop_topic(topic);
}

TEST(SqlTakeWait, RefusesWhatItCannotDo) {
  const std::string topic = topic_for_test();
  auto lib = client();
  ASSERT_TRUE(lib->create_topic(topic));
  auto c = admin();
  const auto refusal = [&](const std::string& sql) -> std::string {
    try {
      c->query_rows(sql);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(fmt::format("CALL txmq_take_wait('{}', NULL, 1, 1)", topic))
                .find("txmq_take_wait needs a transaction"),
            std::string::npos);
  c->begin();
  EXPECT_NE(refusal(fmt::format("CALL txmq_take_wait('{}', NULL, 1, 21)", topic))
                .find("wait_seconds must be from 0 to 20"),
            std::string::npos);
  EXPECT_NE(refusal(fmt::format("CALL txmq_take_wait('{}', NULL, 1, NULL)", topic))
                .find("wait_seconds must be from 0 to 20"),
            std::string::npos);
  c->rollback();
  // REPEATABLE READ: its claim of an empty queue would hold every send up for the whole wait.
  c->query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  c->begin();
  EXPECT_NE(refusal(fmt::format("CALL txmq_take_wait('{}', NULL, 1, 1)", topic))
                .find("txmq_take_wait needs READ COMMITTED"),
            std::string::npos);
  // A take that does not wait works in any level, and so does a wait of 0.
  EXPECT_EQ(refusal(fmt::format("CALL txmq_take_wait('{}', NULL, 1, 0)", topic)), "accepted");
  c->rollback();
  c->query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  lib->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test
