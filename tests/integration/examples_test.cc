// The programs in examples/ build and do what they say against a real server.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "db/dsn.h"
#include "support.h"

namespace txmq::test {
namespace {

TEST(Examples, OrderServiceWritesEachOrderWithItsMessage) {
  auto a = admin();
  a->query("DROP TABLE IF EXISTS orders");
  auto c = client();
  drop_topic_if_exists(*c, "orders");
  const internal::Dsn d = internal::parse_dsn(dsn());
  std::map<std::string, std::string> env = {{"APP_DB_NAME", d.database}, {"APP_DB_USER", d.user}};
  if (!d.socket.empty()) {
    env["APP_DB_SOCKET"] = d.socket;
  } else {
    env["APP_DB_HOST"] = d.host;
    env["APP_DB_PORT"] = std::to_string(d.port);
  }
  if (!d.password.empty()) env["APP_DB_PASSWORD"] = d.password;
  ProcessResult r = run_program(EXAMPLE_ORDER_SERVICE, {"4"}, "", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("through a txmq transaction"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("through the application's own connection"), std::string::npos) << r.out;
  // Three through a Transaction, one through the enlisted connection: rows and messages match.
  EXPECT_EQ(a->execute("SELECT COUNT(*) FROM orders", {}).rows.at(0).i64(0), 4);
  EXPECT_EQ(c->stats("orders").ready, 4u);
  c->drop_topic("orders");
  a->query("DROP TABLE orders");
}

TEST(Examples, ApplyPaymentsAppliesEachPaymentOnce) {
  auto a = admin();
  a->query("DROP TABLE IF EXISTS accounts");
  auto c = client();
  drop_topic_if_exists(*c, "payments");
  ProcessResult sent = run_program(EXAMPLE_APPLY_PAYMENTS, {"--send", "500"});
  ASSERT_EQ(sent.exit_code, 0) << sent.err;
  // The sum the consumer must reach, read before it runs.
  std::int64_t expected = 0;
  for (const Message& m : c->receive("payments", {.max_messages = 500})) {
    expected += std::stoll(m.payload.substr(m.payload.find(' ') + 1));
    c->nack("payments", m.receipt);
  }
  ProcessResult applied = run_program(EXAMPLE_APPLY_PAYMENTS, {});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_NE(applied.out.find("applied 500 payments"), std::string::npos) << applied.out;
  internal::Result sum = a->execute("SELECT SUM(balance_cents) FROM accounts", {});
  EXPECT_EQ(std::stoll(sum.rows.at(0).bytes(0)), expected);
  c->drop_topic("payments");
  a->query("DROP TABLE accounts");
}

}  // namespace
}  // namespace txmq::test
