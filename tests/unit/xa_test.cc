// The pure parts of exactly-once across databases (src/xa/xa.h): branch names and recovery's
// choice in every state.
#include <gtest/gtest.h>

#include "xa/xa.h"

namespace txmq::internal {
namespace {

using std::chrono::seconds;

std::string data_of(const XaBranchName& n) { return n.gtrid() + n.bqual(); }

TEST(XaBranchName, RoundTripsThroughXaRecover) {
  const XaBranchName n{0x0123456789abcdefULL, 0xfedcba9876543210ULL, 42, 7};
  EXPECT_EQ(n.gtrid(), "txmq1.0123456789abcdef.fedcba9876543210");
  EXPECT_EQ(n.bqual(), "42.7.00000000");
  const auto back = XaBranchName::from_recovered(kXaFormatId, 39, 13, data_of(n));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->instance, n.instance);
  EXPECT_EQ(back->token, n.token);
  EXPECT_EQ(back->owner, 42u);
  EXPECT_EQ(back->connection, 7u);
  const XaBranchName zero{0, 1, 0, 0};
  ASSERT_TRUE(XaBranchName::from_recovered(kXaFormatId, 39, 12, data_of(zero)));
  const XaBranchName named{1, 2, 3, 4, xa_resource_hash("ledger")};
  const auto named_back = XaBranchName::from_recovered(kXaFormatId, 39, 12, data_of(named));
  ASSERT_TRUE(named_back);
  EXPECT_EQ(named_back->resource, xa_resource_hash("ledger"));
  EXPECT_NE(xa_resource_hash("ledger"), xa_resource_hash("billing"));
}

TEST(XaBranchName, SqlIsHexLiteralsAndTheFormatId) {
  const XaBranchName n{1, 2, 3, 4};
  // "txmq1." is 74 78 6d 71 31 2e; "3.4" is 33 2e 34.
  EXPECT_EQ(n.sql().substr(0, 14), "X'74786d71312e");
  EXPECT_NE(n.sql().find("',X'332e342e3030303030303030',1954049393"), std::string::npos)
      << n.sql();
  EXPECT_EQ(kXaFormatId, 1954049393);
}

TEST(XaBranchName, OtherBranchesAreNotTxmqs) {
  const XaBranchName n{1, 2, 3, 4};
  const std::string good = data_of(n);
  EXPECT_FALSE(XaBranchName::from_recovered(1, 39, 12, good));            // another formatID
  EXPECT_FALSE(XaBranchName::from_recovered(kXaFormatId, 38, 13, good));  // split elsewhere
  EXPECT_FALSE(XaBranchName::from_recovered(kXaFormatId, 39, 13, good));  // length mismatch
  for (const char* bad : {"txmq2.0000000000000001.0000000000000002",   // another version
                          "txmq1.000000000000000G.0000000000000002",   // not hex
                          "txmq1.000000000000000A.0000000000000002",   // upper case
                          "txmq1.0000000000000001-0000000000000002"}) {  // no dot
    EXPECT_FALSE(
        XaBranchName::from_recovered(kXaFormatId, 39, 12, std::string(bad) + "3.4.00000000"))
        << bad;
  }
  const std::string gtrid = n.gtrid();
  for (const char* bqual : {"34.00000000", "3..00000000", ".4.00000000", "03.4.00000000",
                            "3.-4.00000000", "3.4x.00000000", "3.18446744073709551616.00000000",
                            "3.4", "3.4.0000000", "3.4.0000000G", "3.4.000000000"}) {
    const std::string data = gtrid + bqual;
    EXPECT_FALSE(XaBranchName::from_recovered(kXaFormatId, 39,
                                              static_cast<std::int64_t>(std::string(bqual).size()),
                                              data))
        << bqual;
  }
}

TEST(XaRecovery, EveryStateHasItsAction) {
  const auto old = seconds(60), young = seconds(1);
  // Listed in B's XA RECOVER: the decision in A says what to do.
  EXPECT_EQ(recovery_action(true, XaDecision::kCommit, young), XaAction::kCommit);
  EXPECT_EQ(recovery_action(true, XaDecision::kCommit, old), XaAction::kCommit);
  EXPECT_EQ(recovery_action(true, XaDecision::kAbort, old), XaAction::kRollback);
  // No decision: a young branch is a batch in progress; an older one is fenced.
  EXPECT_EQ(recovery_action(true, XaDecision::kNone, young), XaAction::kWait);
  EXPECT_EQ(recovery_action(true, XaDecision::kNone, kXaYoungBranch), XaAction::kFence);
  EXPECT_EQ(recovery_action(true, XaDecision::kNone, old), XaAction::kFence);
  // Not listed: finished; a decision row left over is purged.
  EXPECT_EQ(recovery_action(false, XaDecision::kCommit, old), XaAction::kPurge);
  EXPECT_EQ(recovery_action(false, XaDecision::kAbort, young), XaAction::kPurge);
  EXPECT_EQ(recovery_action(false, XaDecision::kNone, old), XaAction::kNothing);
}

}  // namespace
}  // namespace txmq::internal
