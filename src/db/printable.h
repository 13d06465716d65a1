#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace txmq::internal {

// Untrusted text as an error message may show it: printable ASCII as is, other bytes (NUL,
// control characters, invalid or any UTF-8) as \xNN, cut after `max` bytes.
inline std::string printable(std::string_view text, std::size_t max = 64) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (text.size() > max) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace txmq::internal
