#pragma once

// Message attributes (types.h, AttributeValue) in the tables: one LONGBLOB column per message
// row, NULL when a message has none (docs/schema.md gives the encoding).
#include <cstddef>
#include <optional>
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
// Empty for no attributes and no origin (bound as NULL). The origin of a message sent by
// dead-lettering travels with its attributes, under a name no attribute can have.
std::string encode_attributes(const Attributes& attributes,
                              const std::optional<MessageOrigin>& origin = std::nullopt);
// Adds the origin as the entry encode_attributes would write for it (for messages that go
// through the send path, which encodes attributes as they are).
void add_origin(Attributes& attributes, const MessageOrigin& origin);
// Throws kInternal for bytes that are not an encoding (a damaged row).
Attributes decode_attributes(std::string_view bytes, std::optional<MessageOrigin>* origin = nullptr);

}  // namespace txmq::internal
