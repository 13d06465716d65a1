// txmq serve's log lines (server/base/log.h). No server, no database.
#include <algorithm>
#include "server/base/log.h"

#include <gtest/gtest.h>

#include <chrono>

#include <nlohmann/json.hpp>

namespace txmq::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

const system_clock::time_point kT{milliseconds(1795420254123)};  // 2026-11-23T07:50:54.123Z

TEST(Log, Rfc3339InUtcWithMilliseconds) {
  EXPECT_EQ(rfc3339_millis(kT), "2026-11-23T07:50:54.123Z");
  EXPECT_EQ(rfc3339_millis(system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339_millis(system_clock::time_point{milliseconds(5)}), "1970-01-01T00:00:00.005Z");
}

TEST(Log, TextIsTodaysFormat) {
  EXPECT_EQ(format_log_line(LogFormat::kText, LogLevel::kError, kT, "it broke", {{"a", 1}}),
            "txmq serve: it broke\n");
}

// A message quoting a request (a credential scope with a newline) cannot forge a line.
TEST(Log, TextEscapesControlCharactersSoThatAMessageIsOneLine) {
  const std::string line = format_log_line(LogFormat::kText, LogLevel::kWarning, {},
                                           "scope 'AKID\nFORGED-LINE\r\t\x01\\'", nullptr);
  EXPECT_EQ(line, "txmq serve: scope 'AKID\\nFORGED-LINE\\r\\t\\x01\\\\'\n");
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
}

TEST(Log, JsonIsOneObjectPerLineWithTheFields) {
  const std::string line = format_log_line(
      LogFormat::kJson, LogLevel::kWarning, kT, "SendMessage r1: 400 \"bad\"\nsecond line",
      {{"action", "SendMessage"}, {"status", 400}, {"msg", "not over the message"}});
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // the message's newline is escaped
  EXPECT_EQ(line.rfind(R"({"time":"2026-11-23T07:50:54.123Z","level":"warning","msg":)", 0), 0u);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], "2026-11-23T07:50:54.123Z");
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["msg"], "SendMessage r1: 400 \"bad\"\nsecond line");
  EXPECT_EQ(j["action"], "SendMessage");
  EXPECT_EQ(j["status"], 400);
  EXPECT_EQ(j.size(), 5u);
}

TEST(Log, JsonWithoutFieldsAndWithBadUtf8) {
  const nlohmann::json j = nlohmann::json::parse(
      format_log_line(LogFormat::kJson, LogLevel::kInfo, kT, "bytes \xff here", nullptr));
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(level_name(LogLevel::kError), "error");
}

TEST(Log, Formats) {
  EXPECT_EQ(parse_log_format("text"), LogFormat::kText);
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  EXPECT_FALSE(parse_log_format("JSON"));
}

TEST(Log, ThrottleLetsAFewLinesThroughPerWindowAndCountsTheRest) {
  LogThrottle throttle(2, std::chrono::seconds(10));
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  std::uint64_t held = 99;
  EXPECT_TRUE(throttle.allow(t0, held));
  EXPECT_EQ(held, 0u);
  EXPECT_TRUE(throttle.allow(t0 + std::chrono::seconds(1), held));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(throttle.allow(t0 + std::chrono::seconds(9), held));
  EXPECT_TRUE(throttle.allow(t0 + std::chrono::seconds(10), held));  // a new window
  EXPECT_EQ(held, 5u);
  EXPECT_TRUE(throttle.allow(t0 + std::chrono::seconds(11), held));
  EXPECT_EQ(held, 0u);
  EXPECT_FALSE(throttle.allow(t0 + std::chrono::seconds(12), held));
}

}  // namespace
}  // namespace txmq::server
