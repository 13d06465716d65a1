// libFuzzer target: the command line's input readers and output encoders: send-batch's lines
// (joined again they give the input back), the UTF-8 check against a decoder written out
// again, base64 (decodes back), printable (only printable ASCII), and seconds given as numbers.
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "cli.h"
#include "fuzz.h"

namespace {

// RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF.
bool utf8_by_the_rfc(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (b(0) < 0x80) {
      n = 1;
      cp = b(0);
    } else if ((b(0) & 0xe0) == 0xc0) {
      n = 2;
      cp = b(0) & 0x1f;
    } else if ((b(0) & 0xf0) == 0xe0) {
      n = 3;
      cp = b(0) & 0x0f;
    } else if ((b(0) & 0xf8) == 0xf0) {
      n = 4;
      cp = b(0) & 0x07;
    } else
      return false;
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((b(k) & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b(k) & 0x3f);
    }
    const std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

std::string unbase64(std::string_view text) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    bits = (bits << 6) | static_cast<std::uint32_t>(alphabet.find(c));
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace txmq::cli;
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  std::string joined;
  for (const txmq::OutgoingMessage& m : batch_lines(input)) {
    txmq::fuzz::require(m.payload.find('\n') == std::string::npos, "a line holds a newline");
    joined += m.payload + "\n";
  }
  const bool ends_with_newline = !input.empty() && input.back() == '\n';
  txmq::fuzz::require(joined == (ends_with_newline || input.empty() ? std::string(input)
                                                                    : std::string(input) + "\n"),
                      "the lines do not give the input back");

  txmq::fuzz::require(is_valid_utf8(input) == utf8_by_the_rfc(input), "UTF-8 check differs");
  txmq::fuzz::require(unbase64(base64(input)) == input, "base64 does not decode back");
  txmq::fuzz::require(txmq::fuzz::printable(printable(input)), "printable() is not");

  if (size == sizeof(double)) {
    double seconds = 0;
    std::memcpy(&seconds, data, sizeof seconds);
    try {
      const txmq::Micros m = seconds_to_micros(seconds, "--lease");
      txmq::fuzz::require(std::isfinite(seconds) && seconds >= 0 && m.count() >= 0,
                          "a bad number of seconds was accepted");
    } catch (const txmq::Error& e) {
      txmq::fuzz::require(e.code() == txmq::Errc::kInvalidArgument, "not kInvalidArgument");
    }
  }
  return 0;
}
