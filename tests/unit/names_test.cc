#include "catalog/names.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/partitions.h"
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

TEST(NamesTest, GroupsAndPartitionsHaveTablesOfTheirOwn) {
  EXPECT_EQ(topic_tables("orders", 0, 0).queue, "`txmq_q_orders`");
  EXPECT_EQ(topic_tables("orders", 2, 15).queue, "`txmq_q_orders$2_15`");
  EXPECT_EQ(topic_tables("orders", 0, 3).dead, "`txmq_dlq_orders$0_3`");
  EXPECT_EQ(topic_tables("orders", 2, 15).dedup, "`txmq_dd_orders`");  // one per topic
  EXPECT_EQ(topic_tables("orders", 2, 15).archive, "`txmq_a_orders`");
  // The longest names still fit MariaDB's 64 characters.
  const std::string longest(kMaxTopicName, 'a');
  const TopicTables t = topic_tables(longest, kMaxGroupNumber, kMaxPartitions - 1);
  for (const std::string& name : {t.queue, t.dead, t.keys, t.parked}) {
    EXPECT_LE(name.size(), 64u + 2) << name;
  }
  EXPECT_EQ(partition_of(first_id_of(5)), 5u);
  EXPECT_EQ(first_id_of(0), 1u);
  EXPECT_EQ(wait_channel("orders", 0), "orders");
  EXPECT_EQ(wait_channel("orders", 3), "orders$3");
}

// The key -> partition map is part of the format (docs/library.md, "Partitions"): pinned here.
TEST(NamesTest, KeysMapToStablePartitions) {
  EXPECT_EQ(partition_of_key("anything", 1), 0u);
  std::vector<unsigned> at16;
  for (const char* key : {"customer-1", "customer-2", "order-42", ""}) {
    at16.push_back(partition_of_key(key, 16));
    EXPECT_LT(at16.back(), 16u);
  }
  EXPECT_EQ(at16, (std::vector<unsigned>{13, 14, 7, 13}));
  // Raising 4 -> 8 partitions moves about half of the keys, and only to the new partitions.
  int moved = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string key = "key" + std::to_string(i);
    const unsigned before = partition_of_key(key, 4);
    const unsigned after = partition_of_key(key, 8);
    if (before != after) {
      ++moved;
      EXPECT_GE(after, 4u);
    }
  }
  EXPECT_GT(moved, 4500);
  EXPECT_LT(moved, 5500);
}

}  // namespace
}  // namespace txmq::internal
