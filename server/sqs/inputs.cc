#include "server/sqs/inputs.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "server/sqs/digests.h"

namespace txmq::server {

using json = nlohmann::json;

// Reads an integer member that may arrive as a number (JSON) or as text.
std::optional<std::int64_t> int_member(const json& input, const char* name) {
  auto it = input.find(name);
  if (it == input.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    const std::string s = it->get<std::string>();
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
  }
  fail("InvalidParameterValue", fmt::format("Value for parameter {} must be an integer", name));
}

std::int64_t int_in(const json& input, const char* name, std::int64_t lo, std::int64_t hi,
                    std::int64_t fallback) {
  auto v = int_member(input, name);
  if (!v) return fallback;
  if (*v < lo || *v > hi) {
    fail("InvalidParameterValue",
         fmt::format("Value {} for parameter {} is invalid. Reason: Must be between {} and {}, "
                     "if provided.",
                     *v, name, lo, hi));
  }
  return *v;
}

std::string string_member(const json& input, const char* name, bool required) {
  auto it = input.find(name);
  if (it == input.end() || it->is_null()) {
    if (required) {
      fail("MissingParameter", fmt::format("The request must contain the parameter {}.", name));
    }
    return {};
  }
  if (!it->is_string()) {
    fail("InvalidParameterValue", fmt::format("Value for parameter {} must be a string", name));
  }
  return it->get<std::string>();
}

std::map<std::string, std::string> string_map(const json& input, const char* name) {
  std::map<std::string, std::string> out;
  auto it = input.find(name);
  if (it == input.end() || it->is_null()) return out;
  if (!it->is_object()) fail("InvalidParameterValue", fmt::format("{} must be a map", name));
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) fail("InvalidParameterValue", fmt::format("{}.{} must be a string", name, k));
    out[k] = v.get<std::string>();
  }
  return out;
}

std::vector<std::string> string_list(const json& input, const char* name) {
  std::vector<std::string> out;
  auto it = input.find(name);
  if (it == input.end() || it->is_null()) return out;
  if (!it->is_array()) fail("InvalidParameterValue", fmt::format("{} must be a list", name));
  for (const auto& v : *it) {
    if (!v.is_string()) fail("InvalidParameterValue", fmt::format("{} must hold strings", name));
    out.push_back(v.get<std::string>());
  }
  return out;
}

namespace {

bool valid_batch_id(const std::string& id) {
  return !id.empty() && id.size() <= 80 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

// Entries of a batch request: present, at most `max`, ids valid and distinct.
const json& batch_entries(const json& input, std::size_t max, std::string_view entry_name) {
  auto it = input.find("Entries");
  if (it == input.end() || !it->is_array() || it->empty()) {
    fail("EmptyBatchRequest",
         fmt::format("There should be at least one {} in the request.", entry_name));
  }
  if (it->size() > max) {
    fail("TooManyEntriesInBatchRequest",
         fmt::format("Maximum number of entries per request are {}. You have sent {}.", max,
                     it->size()));
  }
  std::set<std::string> ids;
  for (const auto& e : *it) {
    if (!e.is_object()) fail("InvalidParameterValue", "Each entry must be a structure");
    const std::string id = string_member(e, "Id", true);
    if (!valid_batch_id(id)) {
      fail("InvalidBatchEntryId",
           "A batch entry id can only contain alphanumeric characters, hyphens and "
           "underscores. It can be at most 80 letters long.");
    }
    if (!ids.insert(id).second) {
      fail("BatchEntryIdsNotDistinct", fmt::format("Id {} repeated.", id));
    }
  }
  return *it;
}

json failed_entry(const std::string& id, const SqsError& e) {
  return {{"Id", id}, {"SenderFault", e.sender_fault}, {"Code", e.code}, {"Message", e.what()}};
}

Page page_of(const json& input) {
  Page page;
  if (const auto max = int_member(input, "MaxResults")) {
    if (*max < 1 || *max > 1000) {
      fail("InvalidParameterValue",
           fmt::format("Value {} for parameter MaxResults is invalid. Reason: Must be between 1 "
                       "and 1000, if provided.",
                       *max));
    }
    page.paged = true;
    page.limit = static_cast<std::size_t>(*max);
  }
  if (std::string token = string_member(input, "NextToken", false); !token.empty()) {
    auto decoded = base64_decode(token);
    if (!decoded) fail("InvalidParameterValue", "Invalid NextToken value.");
    page.after = std::move(*decoded);
  }
  return page;
}

// SQS's rule for MessageGroupId, MessageDeduplicationId and ReceiveRequestAttemptId: 1 to 128
// alphanumerics and punctuation.
bool punctuation_id(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string queue_name_of_url(std::string_view url) {
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  const std::size_t slash = url.rfind('/');
  return std::string(slash == std::string_view::npos ? url : url.substr(slash + 1));
}

}  // namespace txmq::server
