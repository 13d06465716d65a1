// Receipt (include/txmq/types.h): a leased message's id, lease token and group, as text.
#include <charconv>

#include <fmt/format.h>

#include "util/codec.h"
#include "txmq/error.h"
#include "txmq/types.h"

namespace txmq {

// Text form: "<id>.<token as 16 hex digits>".
Receipt Receipt::parse(std::string_view text) {
  auto refuse = [&] {
    return Error(Errc::kInvalidArgument,
                 fmt::format("malformed receipt '{}': expected ID.TOKEN or ID.TOKEN.GROUP as "
                             "printed by receive",
                             util::printable(text)));
  };
  Receipt r;
  std::size_t dot = text.find('.');
  // One spelling per receipt: no leading zeros (found by tests/fuzz/fuzz_receipt.cc).
  if (dot == std::string_view::npos || dot == 0 || text[0] == '0') throw refuse();
  std::size_t group_dot = text.find('.', dot + 1);
  std::string_view token_text = text.substr(dot + 1, group_dot == std::string_view::npos
                                                         ? std::string_view::npos
                                                         : group_dot - dot - 1);
  if (token_text.size() != 16) throw refuse();
  const char* end = text.data() + dot;
  auto [p1, e1] = std::from_chars(text.data(), end, r.id);
  if (e1 != std::errc() || p1 != end || r.id == 0) throw refuse();
  const char* tok_end = token_text.data() + token_text.size();
  auto [p2, e2] = std::from_chars(token_text.data(), tok_end, r.token, 16);
  if (e2 != std::errc() || p2 != tok_end || r.token == 0) throw refuse();
  for (char c : token_text) {
    if (c >= 'A' && c <= 'F') throw refuse();  // one spelling per receipt
  }
  if (group_dot != std::string_view::npos) {
    std::string_view g = text.substr(group_dot + 1);
    auto [p3, e3] = std::from_chars(g.data(), g.data() + g.size(), r.group);
    if (g.empty() || e3 != std::errc() || p3 != g.data() + g.size() || r.group == 0 ||
        g[0] == '0' || g[0] == '+' || r.group > 999) {
      throw refuse();
    }
  }
  return r;
}

std::string Receipt::str() const {
  return group == 0 ? fmt::format("{}.{:016x}", id, token)
                    : fmt::format("{}.{:016x}.{}", id, token, group);
}

}  // namespace txmq
