#pragma once

// The readers of the SQS actions' inputs, in the JSON 1.0 shape (server/sqs/wire.h turns the
// Query protocol's into it): members of the expected types, in range, or the SQS error a wrong
// one gets (thrown as SqsError: MissingParameter, InvalidParameterValue, the batch errors).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/sqs/wire.h"

namespace txmq::server {

// An integer member that may arrive as a number (JSON) or as text; nullopt when absent.
std::optional<std::int64_t> int_member(const nlohmann::json& input, const char* name);
// An integer member from `lo` to `hi`; `fallback` when absent.
std::int64_t int_in(const nlohmann::json& input, const char* name, std::int64_t lo,
                    std::int64_t hi, std::int64_t fallback);
// A string member; empty when absent and not `required`.
std::string string_member(const nlohmann::json& input, const char* name, bool required);
std::map<std::string, std::string> string_map(const nlohmann::json& input, const char* name);
std::vector<std::string> string_list(const nlohmann::json& input, const char* name);

// Entries of a batch request: present, at most `max`, ids valid and distinct. `entry_name` is
// the Query protocol's name of an entry ("SendMessageBatchRequestEntry"), which SQS's
// EmptyBatchRequest names.
const nlohmann::json& batch_entries(const nlohmann::json& input, std::size_t max,
                                    std::string_view entry_name);
// A batch's Failed entry for `id`.
nlohmann::json failed_entry(const std::string& id, const SqsError& e);

// A listing's MaxResults and NextToken (the base64 of the last name of the page before).
struct Page {
  bool paged = false;      // MaxResults given: then a NextToken says there is more
  std::size_t limit = 1000;
  std::string after;       // list names after this one
};
Page page_of(const nlohmann::json& input);

// SQS's rule for MessageGroupId, MessageDeduplicationId and ReceiveRequestAttemptId: 1 to 128
// alphanumerics and punctuation.
bool punctuation_id(std::string_view id);
// The queue's name: the last segment of its QueueUrl.
std::string queue_name_of_url(std::string_view url);

}  // namespace txmq::server
