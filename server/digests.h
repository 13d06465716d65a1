#pragma once

// SQS's digests and encodings: MD5OfMessageBody, MD5OfMessageAttributes, the SHA-256 of
// content-based deduplication, and the body character rule (on util's UTF-8 decoding).
#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/codec.h"
#include "util/random.h"

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
// Random bytes (the receipt key) and base64 (binary values, NextToken) are util's.
using util::random_bytes;
using util::base64_encode;
using util::base64_decode;  // strict by default: SQS refuses bad padding
// MD5OfMessageAttributes as SQS computes it, over {name: {"DataType", "StringValue" |
// "BinaryValue" (base64)}}: for each attribute in name order, its name, its DataType (each as a
// 4-byte big-endian length and the bytes), one byte 1 for a string value or 2 for a binary one,
// and the value (length and bytes; binary values decoded). Also MD5OfMessageSystemAttributes.
std::string md5_of_message_attributes(const nlohmann::json& attributes);
// SQS's rule for bodies and string values: valid UTF-8 of #x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF. The byte offset of the first character that breaks it.
std::optional<std::size_t> invalid_body_character(std::string_view text);

}  // namespace txmq::server
