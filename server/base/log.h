#pragma once

// txmq serve's log, which every layer writes to (docs/operations.md): one line per event,
// written with one write() so that lines from several threads never interleave. `text` is
// "txmq serve: MESSAGE"; `json` is one JSON object per line for log collectors:
//   {"time":"2026-11-23T07:50:54.123Z","level":"error","msg":"...", FIELDS...}
// with the event's structured fields (action, request_id, status, ...) beside msg.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace txmq::server {

enum class LogLevel { kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

// Where the server's parts log an event: a message (never a secret) and, for the JSON format,
// fields (an object, or null for none). Called from any thread.
using Log = std::function<void(LogLevel level, std::string_view msg, const nlohmann::json& fields)>;

// "text" or "json"; nullopt for anything else.
std::optional<LogFormat> parse_log_format(std::string_view name);
std::string_view level_name(LogLevel level);  // "info", "warning", "error"
// RFC 3339 in UTC with milliseconds: 2026-11-23T07:50:54.123Z.
std::string rfc3339_millis(std::chrono::system_clock::time_point t);
// `text` with control characters and backslashes escaped (\n, \r, \t, \\, \xNN): one line.
std::string one_line(std::string_view text);
// One line, '\n' included; in the text format the message is one_line()'s. Fields named
// time, level or msg are not written over the line's own.
std::string format_log_line(LogFormat format, LogLevel level,
                            std::chrono::system_clock::time_point t, std::string_view msg,
                            const nlohmann::json& fields);

// Writes lines to a stdio stream (stderr by default). Thread-safe.
class LogWriter {
 public:
  explicit LogWriter(LogFormat format = LogFormat::kText, std::FILE* out = stderr)
      : format_(format), out_(out) {}
  void operator()(LogLevel level, std::string_view msg, const nlohmann::json& fields = nullptr,
                  std::FILE* out = nullptr) const;
  LogFormat format() const { return format_; }

 private:
  LogFormat format_;
  std::FILE* out_;
};

// At most `lines` lines of one kind per `period` (a fixed window): events a client can cause at
// will, such as refused signatures, must not fill the disk. What it holds back is counted and
// told with the next line it lets through. Thread-safe.
class LogThrottle {
 public:
  LogThrottle(std::uint64_t lines, std::chrono::steady_clock::duration period)
      : lines_(lines), period_(period) {}
  // Whether to write this event's line; `held_back` is then how many were not written since the
  // last line that was.
  bool allow(std::chrono::steady_clock::time_point now, std::uint64_t& held_back);

 private:
  const std::uint64_t lines_;
  const std::chrono::steady_clock::duration period_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point window_start_{};
  std::uint64_t written_ = 0;  // in this window
  std::uint64_t held_back_ = 0;
};

}  // namespace txmq::server
