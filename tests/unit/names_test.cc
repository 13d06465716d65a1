#include "queue/names.h"

#include <gtest/gtest.h>

#include "txmq/error.h"

namespace txmq::internal {
namespace {

TEST(NamesTest, AcceptsValidNames) {
  for (const char* name : {"a", "orders", "order_events_2", "x1_"}) {
    EXPECT_TRUE(is_valid_topic_name(name)) << name;
    EXPECT_NO_THROW(check_topic_name(name));
  }
  EXPECT_TRUE(is_valid_topic_name(std::string(48, 'a')));
}

TEST(NamesTest, RefusesInvalidNames) {
  for (std::string name : {std::string(""), std::string("x; DROP TABLE t"), std::string(49, 'a'),
                           std::string(200, 'b'), std::string("Orders"), std::string("1abc"),
                           std::string("_abc"), std::string("a-b"), std::string("a`b"),
                           std::string("a b"), std::string("a\0b", 3), std::string("caf\xc3\xa9")}) {
    EXPECT_FALSE(is_valid_topic_name(name)) << name;
    try {
      check_topic_name(name);
      FAIL() << "accepted " << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("invalid topic name"), std::string::npos);
    }
  }
}

TEST(NamesTest, RefusedNamesAreShownSafely) {
  try {
    check_topic_name(std::string("a\nb\0", 4));
    FAIL();
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos);
    EXPECT_NE(what.find("\\x0a"), std::string::npos);
  }
}

TEST(NamesTest, TablesAreQuoted) {
  TopicTables t = topic_tables("orders");
  EXPECT_EQ(t.queue, "`txmq_q_orders`");
  EXPECT_EQ(t.dead, "`txmq_dlq_orders`");
  EXPECT_THROW(topic_tables("Bad"), Error);
}

}  // namespace
}  // namespace txmq::internal
