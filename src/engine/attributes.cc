#include "engine/attributes.h"

#include <algorithm>

#include <fmt/format.h>

#include "txmq/error.h"

namespace txmq::internal {
namespace {

// Version 1: the byte 0x01, then per attribute (in name order) its name, type and value, each
// as a varint length (7 bits a byte, low bits first) and the bytes.
constexpr char kVersion = 0x01;
// The origin entry's name: a control character, which attribute names cannot contain. Its
// value is "TOPIC ID".
constexpr std::string_view kOriginName = "\x01origin";

bool valid_label(std::string_view s) {
  return !s.empty() && s.size() <= kMaxAttributeNameBytes &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
         });
}

void put(std::string& out, std::string_view bytes) {
  std::size_t n = bytes.size();
  do {
    char b = static_cast<char>(n & 0x7f);
    n >>= 7;
    if (n != 0) b = static_cast<char>(b | 0x80);
    out += b;
  } while (n != 0);
  out.append(bytes);
}

std::string_view take(std::string_view& in) {
  std::size_t n = 0;
  for (int shift = 0;; shift += 7) {
    if (in.empty() || shift > 56) throw Error(Errc::kInternal, "damaged message attributes");
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    n |= static_cast<std::size_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  if (n > in.size()) throw Error(Errc::kInternal, "damaged message attributes");
  std::string_view out = in.substr(0, n);
  in.remove_prefix(n);
  return out;
}

}  // namespace

void check_attributes(const Attributes& attributes, std::string_view where) {
  if (attributes.size() > kMaxAttributes) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{}{} attributes are over the limit of {}", where, attributes.size(),
                            kMaxAttributes));
  }
  for (const auto& [name, value] : attributes) {
    if (!valid_label(name)) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("{}attribute names are 1 to 256 characters of A-Z a-z 0-9 _ - . "
                              "(got '{}')",
                              where, name.substr(0, 64)));
    }
    if (!valid_label(value.type)) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("{}attribute '{}': types are 1 to 256 characters of A-Z a-z 0-9 _ "
                              "- . (got '{}')",
                              where, name, value.type.substr(0, 64)));
    }
  }
}

std::size_t attributes_size(const Attributes& attributes) {
  std::size_t n = 0;
  for (const auto& [name, value] : attributes) n += name.size() + value.type.size() + value.value.size();
  return n;
}

std::string encode_attributes(const Attributes& attributes,
                              const std::optional<MessageOrigin>& origin) {
  if (attributes.empty() && !origin) return {};
  std::string out(1, kVersion);
  if (origin) {
    put(out, kOriginName);
    put(out, "origin");
    put(out, fmt::format("{} {}", origin->topic, origin->id));
  }
  for (const auto& [name, value] : attributes) {
    put(out, name);
    put(out, value.type);
    put(out, value.value);
  }
  return out;
}

void add_origin(Attributes& attributes, const MessageOrigin& origin) {
  attributes[std::string(kOriginName)] = {"origin", fmt::format("{} {}", origin.topic, origin.id)};
}

Attributes decode_attributes(std::string_view bytes, std::optional<MessageOrigin>* origin) {
  Attributes out;
  if (bytes.empty()) return out;
  if (bytes.front() != kVersion) throw Error(Errc::kInternal, "damaged message attributes");
  bytes.remove_prefix(1);
  while (!bytes.empty()) {
    std::string name(take(bytes));
    AttributeValue v;
    v.type = std::string(take(bytes));
    v.value = std::string(take(bytes));
    if (name == kOriginName) {
      const std::size_t space = v.value.find(' ');
      if (origin != nullptr && space != std::string::npos) {
        *origin = MessageOrigin{v.value.substr(0, space),
                                std::stoull(v.value.substr(space + 1))};
      }
      continue;
    }
    out.emplace(std::move(name), std::move(v));
  }
  return out;
}

}  // namespace txmq::internal
