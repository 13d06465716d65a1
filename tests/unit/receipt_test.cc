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
                           "42.deadbeef0123456g", "42;drop.deadbeef01234567"}) {
    try {
      Receipt::parse(text);
      FAIL() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument) << text;
    }
  }
}

}  // namespace
}  // namespace txmq
