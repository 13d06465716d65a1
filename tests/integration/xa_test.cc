// txmq's XA branch names against a real server (src/queue/xa.h): a branch prepared under such a
// name survives its connection, XA RECOVER gives the name back, and another connection finishes
// it by that name.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <random>

#include "db/connection.h"
#include "queue/xa.h"
#include "support.h"

namespace txmq::test {
namespace {

using internal::XaBranchName;

std::optional<XaBranchName> recovered(internal::Connection& c, std::uint64_t token) {
  internal::Result r = c.execute("XA RECOVER", {});
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

}  // namespace
}  // namespace txmq::test
