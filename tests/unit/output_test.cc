#include <gtest/gtest.h>

#include "cli.h"

namespace txmq::cli {
namespace {

TEST(OutputTest, Base64) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\0\xff", 2)), "AP8=");
}

TEST(OutputTest, Utf8Validity) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(is_valid_utf8(std::string("a\0b", 3)));
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\xc3"));           // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));       // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));   // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(OutputTest, IsoTime) {
  EXPECT_EQ(iso_time(Clock::time_point(std::chrono::microseconds(1700000000123456))),
            "2023-11-14T22:13:20.123456Z");
}

TEST(OutputTest, SecondsToMicros) {
  EXPECT_EQ(seconds_to_micros(1.5, "x"), Micros(1500000));
  EXPECT_THROW(seconds_to_micros(-1, "x"), Error);
  EXPECT_THROW(seconds_to_micros(1e12, "x"), Error);
}

}  // namespace
}  // namespace txmq::cli
