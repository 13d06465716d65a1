#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>

#include "cli.h"

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

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t len;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    std::uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                      (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                      static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

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
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (bytes.size() > max) out += fmt::format("... ({} bytes)", bytes.size());
  return out;
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
