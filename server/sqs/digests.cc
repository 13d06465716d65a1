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

std::optional<std::size_t> invalid_body_character(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::optional<util::Utf8Char> c = util::utf8_char(text.substr(i));
    if (!c) return i;
    const char32_t cp = c->code_point;
    const bool allowed = cp == 0x9 || cp == 0xa || cp == 0xd || (cp >= 0x20 && cp <= 0xd7ff) ||
                         (cp >= 0xe000 && cp <= 0xfffd) || (cp >= 0x10000 && cp <= 0x10ffff);
    if (!allowed) return i;
    i += c->size;
  }
  return std::nullopt;
}

}  // namespace txmq::server
