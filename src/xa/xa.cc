#include "xa/xa.h"

#include <fmt/format.h>

#include <charconv>

#include "util/codec.h"

namespace txmq::internal {

namespace {

constexpr std::string_view kGtridPrefix = "txmq1.";
constexpr std::size_t kHexDigits = 16;
constexpr std::size_t kGtridLength = kGtridPrefix.size() + kHexDigits + 1 + kHexDigits;

// Exactly 16 lower-case hex digits.
std::optional<std::uint64_t> parse_hex16(std::string_view text) {
  if (text.size() != kHexDigits) return std::nullopt;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  std::uint64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value, 16);
  return value;
}

// Decimal digits, no sign, no leading zero (but "0"), within 64 bits.
std::optional<std::uint64_t> parse_decimal(std::string_view text) {
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string XaBranchName::gtrid() const {
  return fmt::format("{}{:016x}.{:016x}", kGtridPrefix, instance, token);
}

std::string XaBranchName::bqual() const {
  return fmt::format("{}.{}.{:08x}", owner, connection, resource);
}

std::uint32_t xa_resource_hash(std::string_view name) {
  std::uint32_t h = 2166136261u;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

std::string XaBranchName::sql() const {
  return fmt::format("X'{}',X'{}',{}", util::hex_encode(gtrid()), util::hex_encode(bqual()), kXaFormatId);
}

std::optional<XaBranchName> XaBranchName::from_recovered(std::int64_t format_id,
                                                         std::int64_t gtrid_length,
                                                         std::int64_t bqual_length,
                                                         std::string_view data) {
  if (format_id != kXaFormatId || gtrid_length != static_cast<std::int64_t>(kGtridLength) ||
      bqual_length < 12 || static_cast<std::size_t>(gtrid_length + bqual_length) != data.size()) {
    return std::nullopt;
  }
  const std::string_view gtrid = data.substr(0, kGtridLength);
  const std::string_view bqual = data.substr(kGtridLength);
  if (!gtrid.starts_with(kGtridPrefix) || gtrid[kGtridPrefix.size() + kHexDigits] != '.') {
    return std::nullopt;
  }
  const auto instance = parse_hex16(gtrid.substr(kGtridPrefix.size(), kHexDigits));
  const auto token = parse_hex16(gtrid.substr(kGtridPrefix.size() + kHexDigits + 1));
  const std::size_t dot = bqual.find('.');
  const std::size_t last = bqual.rfind('.');
  if (!instance || !token || dot == std::string_view::npos || last == dot ||
      bqual.size() - last - 1 != 8) {
    return std::nullopt;
  }
  const auto owner = parse_decimal(bqual.substr(0, dot));
  const auto connection = parse_decimal(bqual.substr(dot + 1, last - dot - 1));
  const auto resource = parse_hex16(fmt::format("00000000{}", bqual.substr(last + 1)));
  if (!owner || !connection || !resource) return std::nullopt;
  return XaBranchName{*instance, *token, *owner, *connection,
                      static_cast<std::uint32_t>(*resource)};
}

XaAction recovery_action(bool listed, XaDecision decision, std::chrono::microseconds age) {
  if (!listed) {
    // Finished (committed, rolled back, or read-only and dropped): the row has served.
    return decision == XaDecision::kNone ? XaAction::kNothing : XaAction::kPurge;
  }
  switch (decision) {
    case XaDecision::kCommit:
      return XaAction::kCommit;
    case XaDecision::kAbort:
      return XaAction::kRollback;
    case XaDecision::kNone:
      break;
  }
  // No decision yet: its owner is between PREPARE and A's commit, or died there. A young branch
  // is left alone; an older one is fenced, which tells the two apart exactly.
  return age < kXaYoungBranch ? XaAction::kWait : XaAction::kFence;
}

}  // namespace txmq::internal
