#pragma once

// SQS's digests and encodings: MD5OfMessageBody, MD5OfMessageAttributes, the SHA-256 of
// content-based deduplication, base64 for binary values, and the body character rule.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace txmq::server {

using Sha256 = std::array<unsigned char, 32>;
// SHA-256 of the concatenation of `parts`, and HMAC-SHA256 as RFC 2104 defines it, on an
// algorithm fetched from OpenSSL once and a context per thread (SigV4 and receipt handles run
// them on every request).
Sha256 sha256(std::initializer_list<std::string_view> parts);
Sha256 hmac_sha256(std::string_view key, std::string_view data);
std::string hex_of(const Sha256& digest);  // lower-case

std::string md5_hex(std::string_view bytes);
std::string sha256_hex(std::string_view bytes);
// HMAC-SHA256 of `data` under `key`, in lower-case hex.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);
// Whether two strings are equal, in a time that depends on their sizes only (for secrets).
bool constant_time_equal(std::string_view a, std::string_view b);
// `size` bytes from the kernel's cryptographic generator (getrandom), for values that must not
// be guessed.
std::string random_bytes(std::size_t size);
// MD5OfMessageAttributes as SQS computes it, over {name: {"DataType", "StringValue" |
// "BinaryValue" (base64)}}: for each attribute in name order, its name, its DataType (each as a
// 4-byte big-endian length and the bytes), one byte 1 for a string value or 2 for a binary one,
// and the value (length and bytes; binary values decoded). Also MD5OfMessageSystemAttributes.
std::string md5_of_message_attributes(const nlohmann::json& attributes);
std::string base64_encode(std::string_view bytes);
// Strict: nullopt for characters outside the alphabet or bad padding.
std::optional<std::string> base64_decode(std::string_view text);
// SQS's rule for bodies and string values: valid UTF-8 of #x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF. The byte offset of the first character that breaks it.
std::optional<std::size_t> invalid_body_character(std::string_view text);

}  // namespace txmq::server
