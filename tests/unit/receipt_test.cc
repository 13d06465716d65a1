#include <gtest/gtest.h>

#include "txmq/client.h"

namespace txmq {
namespace {

TEST(ReceiptTest, RoundTrips) {
  Receipt r{42, 0xdeadbeef01234567ULL};
  EXPECT_EQ(r.str(), "42.deadbeef01234567");
  Receipt back = Receipt::parse(r.str());
  EXPECT_EQ(back.id, 42u);
  EXPECT_EQ(back.token, 0xdeadbeef01234567ULL);
  EXPECT_EQ(Receipt::parse("1.0000000000000001").token, 1u);
}

TEST(ReceiptTest, RefusesMalformed) {
  for (const char* text : {"", "42", "42.", ".deadbeef01234567", "x.deadbeef01234567",
                           "42.deadbeef0123456", "42.deadbeef012345678", "42.DEADBEEF01234567",
                           "0.deadbeef01234567", "42.0000000000000000", "-1.deadbeef01234567",
                           "42.deadbeef0123456g", "42;drop.deadbeef01234567",
                           "42.deadbeef01234567.", "42.deadbeef01234567.0",
                           "42.deadbeef01234567.01", "42.deadbeef01234567.1000",
                           "42.deadbeef01234567.-1", "42.deadbeef01234567.1.2",
                           "42.deadbeef01234567.x", "042.deadbeef01234567",
                           "42.deadbeef01234567\x01"}) {
    try {
      Receipt::parse(text);
      FAIL() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument) << text;
      // Control bytes are shown escaped, never raw (found by tests/fuzz/fuzz_receipt.cc).
      EXPECT_EQ(std::string(e.what()).find('\x01'), std::string::npos) << e.what();
    }
  }
}

// Receipts of other groups than "default" name the group's number.
TEST(ReceiptTest, CarriesItsGroup) {
  Receipt r = Receipt::parse("281474976710657.deadbeef01234567.12");
  EXPECT_EQ(r.id, 281474976710657u);
  EXPECT_EQ(r.token, 0xdeadbeef01234567ULL);
  EXPECT_EQ(r.group, 12u);
  EXPECT_EQ(r.str(), "281474976710657.deadbeef01234567.12");
  EXPECT_EQ(Receipt::parse("5.deadbeef01234567").group, 0u);
  EXPECT_EQ((Receipt{5, 0xdeadbeef01234567ULL, 0}).str(), "5.deadbeef01234567");
}

}  // namespace
}  // namespace txmq
