#pragma once

// SQS's digests and encodings: MD5OfMessageBody, MD5OfMessageAttributes, base64 for binary
// values, and the body character rule. (SHA-256, of content-based deduplication among others:
// server/auth/crypto.h.)
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/codec.h"

namespace txmq::server {

std::string md5_hex(std::string_view bytes);
// MD5OfMessageAttributes as SQS computes it, over {name: {"DataType", "StringValue" |
// "BinaryValue" (base64)}}: for each attribute in name order, its name, its DataType (each as a
// 4-byte big-endian length and the bytes), one byte 1 for a string value or 2 for a binary one,
// and the value (length and bytes; binary values decoded). Also MD5OfMessageSystemAttributes.
std::string md5_of_message_attributes(const nlohmann::json& attributes);
// SQS's rule for bodies and string values: valid UTF-8 of #x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF. The byte offset of the first character that breaks it.
std::optional<std::size_t> invalid_body_character(std::string_view text);
// Base64 (binary values, NextToken) is util's; strict by default: SQS refuses bad padding.
using util::base64_decode;
using util::base64_encode;

}  // namespace txmq::server
