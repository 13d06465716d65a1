#include "server/base/log.h"

#include <ctime>

#include <fmt/format.h>

#include "util/codec.h"

namespace txmq::server {

std::optional<LogFormat> parse_log_format(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return std::nullopt;
}

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "error";
}

std::string rfc3339_millis(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(t).time_since_epoch().count();
  const std::time_t seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     static_cast<int>(ms - static_cast<std::int64_t>(seconds) * 1000));
}

std::string one_line(std::string_view text) {
  return util::printable(text, std::string_view::npos,
                         {.backslash = true, .named_controls = true, .non_ascii_kept = true});
}

std::string format_log_line(LogFormat format, LogLevel level,
                            std::chrono::system_clock::time_point t, std::string_view msg,
                            const nlohmann::json& fields) {
  // Messages quote what requests carried (a queue name, a credential scope): a newline in them
  // must not start a line of its own that a reader would take for the server's.
  if (format == LogFormat::kText) return fmt::format("txmq serve: {}\n", one_line(msg));
  // nlohmann's object is ordered by key; the line is built by hand so that time, level and msg
  // come first, as a person reading the raw log expects.
  const auto dump = [](const nlohmann::json& v) {
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::string line = fmt::format(R"({{"time":"{}","level":"{}","msg":{})", rfc3339_millis(t),
                                 level_name(level), dump(nlohmann::json(std::string(msg))));
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) {
      if (key == "time" || key == "level" || key == "msg") continue;
      line += fmt::format(",{}:{}", dump(nlohmann::json(key)), dump(value));
    }
  }
  line += "}\n";
  return line;
}

void LogWriter::operator()(LogLevel level, std::string_view msg, const nlohmann::json& fields,
                           std::FILE* out) const {
  // One write per line, so that lines from several threads do not interleave.
  const std::string line =
      format_log_line(format_, level, std::chrono::system_clock::now(), msg, fields);
  std::FILE* to = out != nullptr ? out : out_;
  std::fwrite(line.data(), 1, line.size(), to);
  std::fflush(to);
}

bool LogThrottle::allow(std::chrono::steady_clock::time_point now, std::uint64_t& held_back) {
  std::lock_guard lock(mutex_);
  if (written_ == 0 || now - window_start_ >= period_) {
    window_start_ = now;
    written_ = 0;
  }
  if (written_ >= lines_) {
    ++held_back_;
    return false;
  }
  ++written_;
  held_back = held_back_;
  held_back_ = 0;
  return true;
}

}  // namespace txmq::server
