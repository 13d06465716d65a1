#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>

#include "cli.h"
#include "util/codec.h"

namespace txmq::cli {

std::string read_all(std::FILE* in) {
  std::string out;
  char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), in)) > 0) out.append(buffer, n);
  if (std::ferror(in)) throw Error(Errc::kInvalidArgument, "cannot read standard input");
  return out;
}

std::pair<std::size_t, std::size_t> password_span(std::string_view text) {
  const std::size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return {0, 0};
  const std::size_t start = scheme_end + 3;
  std::size_t end = text.find_first_of("/?", start);
  if (end == std::string_view::npos) end = text.size();
  const std::size_t at = text.substr(start, end - start).rfind('@');
  if (at == std::string_view::npos) return {0, 0};
  const std::size_t colon = text.substr(start, at).find(':');
  if (colon == std::string_view::npos) return {0, 0};
  return {start + colon + 1, at - colon - 1};
}

std::vector<OutgoingMessage> batch_lines(std::string_view data) {
  std::vector<OutgoingMessage> messages;
  std::size_t start = 0;
  while (start < data.size()) {
    std::size_t nl = data.find('\n', start);
    if (nl == std::string_view::npos) nl = data.size();
    messages.emplace_back().payload = std::string(data.substr(start, nl - start));
    start = nl + 1;
  }
  return messages;
}

bool is_valid_utf8(std::string_view s) { return util::is_valid_utf8(s); }

std::string base64(std::string_view bytes) { return util::base64_encode(bytes); }

std::string iso_time(Clock::time_point t) {
  auto micros = std::chrono::duration_cast<Micros>(t.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(micros / 1000000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06}Z", buf, micros % 1000000);
}

std::string printable(std::string_view bytes, std::size_t max) {
  return util::printable(bytes, max, {.backslash = true});
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

void print_error(std::string_view message) {
  // One line: newlines inside a message would break scripts that read stderr by line.
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "txmq: %s\n", line.c_str());
}

Micros seconds_to_micros(double seconds, std::string_view what) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 366.0 * 24 * 3600) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{} must be a number of seconds from 0 to 31622400", what));
  }
  return Micros(static_cast<std::int64_t>(std::llround(seconds * 1e6)));
}

}  // namespace txmq::cli
