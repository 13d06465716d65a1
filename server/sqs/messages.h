#pragma once

// Messages between SQS's shape and the library's: message attributes read from a request and
// written in an answer, the MessageId, and a send entry's size as SQS counts it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "txmq/client.h"

namespace txmq::server {

// Stored as library attributes with names SQS forbids to users ("AWS." is reserved).
inline constexpr std::string_view kDedupIdAttribute = "AWS.SQS.MessageDeduplicationId";
inline constexpr std::string_view kTraceHeaderAttribute = "AWS.SQS.AWSTraceHeader";

// MessageId: a UUID-shaped name of (topic, id); a dead-lettered message keeps its origin's.
std::string message_id(std::string_view topic, std::uint64_t id);
// A request's MessageAttributes (and MessageSystemAttributes) as library attributes; returns
// the bytes SQS counts for them. Throws SqsError for an attribute SQS refuses.
std::size_t read_attributes(const nlohmann::json& entry, Attributes& out);
// The user's attributes of a stored message in SQS's JSON shape, filtered by the names asked
// for ("All", "*" or ".*", a name, or a prefix followed by ".*"); all of them.
nlohmann::json user_attributes(const Attributes& attributes,
                               const std::vector<std::string>& wanted);
nlohmann::json user_attributes_all(const Attributes& attributes);
// The bytes of a send entry as SQS counts them toward a batch's limit: the body and the
// message attributes' names, types and values (binary ones decoded), before any check; system
// attributes do not count.
std::size_t entry_bytes(const nlohmann::json& entry);

}  // namespace txmq::server
