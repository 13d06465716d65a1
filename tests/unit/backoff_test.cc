#include "util/backoff.h"

#include <gtest/gtest.h>

namespace txmq::internal {
namespace {

using std::chrono::microseconds;

TEST(BackoffTest, GrowsExponentiallyWithinJitterWindow) {
  Backoff b{microseconds(1000), microseconds(1000000)};
  EXPECT_EQ(b.delay(1, 0.0), microseconds(500));
  EXPECT_EQ(b.delay(1, 1.0), microseconds(1000));
  EXPECT_EQ(b.delay(3, 0.0), microseconds(2000));
  EXPECT_EQ(b.delay(3, 1.0), microseconds(4000));
}

TEST(BackoffTest, IsCapped) {
  Backoff b{microseconds(1000), microseconds(50000)};
  EXPECT_EQ(b.delay(30, 1.0), microseconds(50000));
  EXPECT_EQ(b.delay(1000, 0.0), microseconds(25000));
}

TEST(BackoffTest, RandomDrawStaysInWindow) {
  Backoff b{microseconds(1000), microseconds(1000000)};
  for (int i = 0; i < 1000; ++i) {
    auto d = b.delay(4);
    EXPECT_GE(d, microseconds(4000));
    EXPECT_LE(d, microseconds(8000));
  }
}

}  // namespace
}  // namespace txmq::internal
