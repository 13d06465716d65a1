#pragma once

// Message attributes (types.h, AttributeValue) in the tables: one MEDIUMBLOB column per message
// row, NULL when a message has none (doc/schema.md gives the encoding).
#include <cstddef>
#include <string>
#include <string_view>

#include "txmq/types.h"

namespace txmq::internal {

constexpr std::size_t kMaxAttributes = 64;
constexpr std::size_t kMaxAttributeNameBytes = 256;

// Throws kInvalidArgument (prefixed with `where`) for a name or type that breaks the rules.
void check_attributes(const Attributes& attributes, std::string_view where);
// What attributes count toward a topic's max_payload_bytes: name, type and value bytes.
std::size_t attributes_size(const Attributes& attributes);
// Empty for no attributes (bound as NULL).
std::string encode_attributes(const Attributes& attributes);
// Throws kInternal for bytes that are not an encoding (a damaged row).
Attributes decode_attributes(std::string_view bytes);

}  // namespace txmq::internal
