#include "server/sqs/digests.h"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <stdexcept>

#include "server/auth/crypto.h"

namespace txmq::server {
namespace {

std::string hex_digest(const EVP_MD* md, std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, md, nullptr) != 1) {
    throw std::runtime_error("OpenSSL digest failed");
  }
  return lower_hex(digest.data(), size);
}

void append_length_prefixed(std::string& out, std::string_view bytes) {
  const auto n = static_cast<std::uint32_t>(bytes.size());
  out += static_cast<char>((n >> 24) & 0xff);
  out += static_cast<char>((n >> 16) & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  out += static_cast<char>(n & 0xff);
  out.append(bytes);
}

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string md5_hex(std::string_view bytes) { return hex_digest(EVP_md5(), bytes); }

std::string md5_of_message_attributes(const nlohmann::json& attributes) {
  std::string buffer;
  // nlohmann::json objects iterate in key order (std::map), which is SQS's order.
  for (const auto& [name, value] : attributes.items()) {
    append_length_prefixed(buffer, name);
    append_length_prefixed(buffer, value.value("DataType", ""));
    if (value.contains("BinaryValue")) {
      buffer += static_cast<char>(2);
      auto bytes = base64_decode(value["BinaryValue"].get<std::string>());
      append_length_prefixed(buffer, bytes.value_or(""));
    } else {
      buffer += static_cast<char>(1);
      append_length_prefixed(buffer, value.value("StringValue", ""));
    }
  }
  return md5_hex(buffer);
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    unsigned v = 0;
    int padding = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=') {
        // Only at the end, as the last one or two characters.
        if (i + 4 != text.size() || k < 2) return std::nullopt;
        ++padding;
        v <<= 6;
        continue;
      }
      if (padding > 0) return std::nullopt;
      const std::size_t pos = kAlphabet.find(c);
      if (pos == std::string_view::npos) return std::nullopt;
      v = (v << 6) | static_cast<unsigned>(pos);
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (padding < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (padding < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

std::optional<std::size_t> invalid_body_character(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    std::uint32_t cp = 0;
    std::size_t length = 0;
    if (b0 < 0x80) {
      cp = b0;
      length = 1;
    } else if ((b0 & 0xe0) == 0xc0) {
      cp = b0 & 0x1f;
      length = 2;
    } else if ((b0 & 0xf0) == 0xe0) {
      cp = b0 & 0x0f;
      length = 3;
    } else if ((b0 & 0xf8) == 0xf0) {
      cp = b0 & 0x07;
      length = 4;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3f);
    }
    // Overlong forms and surrogates are not valid UTF-8.
    const bool overlong = (length == 2 && cp < 0x80) || (length == 3 && cp < 0x800) ||
                          (length == 4 && cp < 0x10000);
    const bool allowed = cp == 0x9 || cp == 0xa || cp == 0xd || (cp >= 0x20 && cp <= 0xd7ff) ||
                         (cp >= 0xe000 && cp <= 0xfffd) || (cp >= 0x10000 && cp <= 0x10ffff);
    if (overlong || !allowed) return i;
    i += length;
  }
  return std::nullopt;
}

}  // namespace txmq::server
