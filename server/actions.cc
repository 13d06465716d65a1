// The SQS actions, on the JSON 1.0 shapes of their inputs and outputs (server/wire.h turns the
// Query protocol's into these).
#include <algorithm>
#include <charconv>
#include <set>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "server/digests.h"
#include "server/fail.h"
#include "server/call.h"
#include "server/wire.h"

namespace txmq::server {

namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

constexpr std::size_t kMaxBatchBytes = 1 << 20;
// Stored as library attributes with names SQS forbids to users ("AWS." is reserved).
constexpr std::string_view kDedupIdAttribute = "AWS.SQS.MessageDeduplicationId";
constexpr std::string_view kTraceHeaderAttribute = "AWS.SQS.AWSTraceHeader";
constexpr std::string_view kSystemPrefix = "AWS.SQS.";
constexpr auto kAttemptIdsKeptFor = std::chrono::minutes(5);
constexpr std::size_t kMaxTraceHeaderBytes = 1024;
// FIFO receive attempts remembered at once, and the bytes of their answers.
constexpr std::size_t kMaxAttemptIds = 10000;
constexpr std::size_t kMaxAttemptBytes = 64u << 20;

std::int64_t epoch_ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

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

// MessageId: a UUID-shaped name of (topic, id); a dead-lettered message keeps its origin's.
std::string message_id(std::string_view topic, std::uint64_t id) {
  const std::string h = sha256_hex(fmt::format("{}/{}", topic, id));
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4),
                     h.substr(16, 4), h.substr(20, 12));
}

bool is_binary_type(std::string_view type) { return type.starts_with("Binary"); }

// SQS's rules for a message attribute, and its bytes as SQS counts them toward the size limit.
std::size_t check_attribute(const std::string& name, const json& value, AttributeValue& out) {
  auto bad = [&](std::string_view why) {
    fail("InvalidParameterValue", fmt::format("Message attribute '{}' is invalid: {}", name, why));
  };
  const bool name_ok =
      !name.empty() && name.size() <= 256 && name.front() != '.' && name.back() != '.' &&
      name.find("..") == std::string::npos &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      });
  if (!name_ok) bad("names are 1 to 256 of A-Z a-z 0-9 _ - . and do not start or end with '.'");
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower.starts_with("aws.") || lower.starts_with("amazon.")) {
    bad("names starting with AWS. or Amazon. are reserved");
  }
  if (!value.is_object()) bad("the value must be a structure");
  const auto type_member = value.find("DataType");
  if (type_member == value.end() || type_member->is_null()) {
    bad("The message attribute data type is required");
  }
  if (!type_member->is_string()) bad("DataType must be a string");
  const std::string type = type_member->get<std::string>();
  if (type.empty()) bad("The message attribute data type is required");
  const std::string base = type.substr(0, type.find('.'));
  if (base != "String" && base != "Number" && base != "Binary") {
    bad("DataType must be String, Number or Binary, optionally with a .custom suffix");
  }
  if (type.size() > 256) bad("DataType is up to 256 characters");
  out.type = type;
  if (base == "Binary") {
    if (!value.contains("BinaryValue") || !value["BinaryValue"].is_string()) {
      bad("a Binary attribute needs a BinaryValue");
    }
    auto bytes = base64_decode(value["BinaryValue"].get<std::string>());
    if (!bytes) bad("BinaryValue is not valid base64");
    out.value = std::move(*bytes);
  } else {
    if (!value.contains("StringValue") || !value["StringValue"].is_string()) {
      bad("a String or Number attribute needs a StringValue");
    }
    out.value = value["StringValue"].get<std::string>();
    if (out.value.empty()) bad("the value must not be empty");
    if (auto at = invalid_body_character(out.value)) {
      bad(fmt::format("StringValue has a character SQS does not allow at byte {}", *at));
    }
    if (base == "Number") {
      const std::string& v = out.value;
      std::size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
      bool digits = false;
      bool ok = i < v.size();
      for (bool dot = false, exp = false; ok && i < v.size(); ++i) {
        const char ch = v[i];
        if (ch >= '0' && ch <= '9') digits = true;
        else if (ch == '.' && !dot && !exp) dot = true;
        else if ((ch == 'e' || ch == 'E') && digits && !exp) {
          exp = true;
          if (i + 1 < v.size() && (v[i + 1] == '-' || v[i + 1] == '+')) ++i;
        } else ok = false;
      }
      if (!ok || !digits) bad("a Number's StringValue must be a number");
    }
  }
  return name.size() + type.size() + out.value.size();
}

// A request's MessageAttributes (and MessageSystemAttributes) as library attributes; returns
// the bytes SQS counts for them.
std::size_t read_attributes(const json& entry, Attributes& out) {
  std::size_t bytes = 0;
  if (auto it = entry.find("MessageAttributes"); it != entry.end() && !it->is_null()) {
    if (!it->is_object()) fail("InvalidParameterValue", "MessageAttributes must be a map");
    if (it->size() > 10) {
      fail("InvalidParameterValue", "Number of message attributes [" +
                                        std::to_string(it->size()) + "] exceeds the allowed maximum [10].");
    }
    for (const auto& [name, value] : it->items()) {
      AttributeValue a;
      bytes += check_attribute(name, value, a);
      out.emplace(name, std::move(a));
    }
  }
  if (auto it = entry.find("MessageSystemAttributes"); it != entry.end() && !it->is_null()) {
    if (!it->is_object()) fail("InvalidParameterValue", "MessageSystemAttributes must be a map");
    for (const auto& [name, value] : it->items()) {
      if (name != "AWSTraceHeader") {
        fail("InvalidParameterValue",
             fmt::format("Message system attribute name '{}' is invalid.", name.substr(0, 64)));
      }
      const auto type = value.is_object() ? value.find("DataType") : value.end();
      const auto text = value.is_object() ? value.find("StringValue") : value.end();
      if (!value.is_object() || type == value.end() || !type->is_string() ||
          type->get_ref<const std::string&>() != "String" || text == value.end() ||
          !text->is_string()) {
        fail("InvalidParameterValue",
             "AWSTraceHeader must have DataType String and a string StringValue");
      }
      const std::string& trace = text->get_ref<const std::string&>();
      // An X-Ray trace header: Root=1-...;Parent=...;Sampled=1, printable ASCII.
      const bool trace_ok =
          !trace.empty() && trace.size() <= kMaxTraceHeaderBytes &&
          std::all_of(trace.begin(), trace.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
      if (!trace_ok) {
        fail("InvalidParameterValue",
             fmt::format("AWSTraceHeader must be 1 to {} printable ASCII characters",
                         kMaxTraceHeaderBytes));
      }
      out[std::string(kTraceHeaderAttribute)] = {"String", trace};
    }
  }
  return bytes;
}

// The user's attributes of a stored message in SQS's JSON shape, filtered by the names asked for.
json user_attributes(const Attributes& attributes, const std::vector<std::string>& wanted) {
  json out = json::object();
  auto asked = [&](const std::string& name) {
    for (const auto& w : wanted) {
      if (w == "All" || w == ".*" || w == name) return true;
      if (w.size() > 2 && w.ends_with(".*") && name.starts_with(w.substr(0, w.size() - 1))) {
        return true;
      }
    }
    return false;
  };
  for (const auto& [name, a] : attributes) {
    if (name.starts_with(kSystemPrefix) || !asked(name)) continue;
    json v = {{"DataType", a.type}};
    if (is_binary_type(a.type)) v["BinaryValue"] = base64_encode(a.value);
    else v["StringValue"] = a.value;
    out[name] = std::move(v);
  }
  return out;
}

json user_attributes_all(const Attributes& attributes) { return user_attributes(attributes, {"All"}); }

// The bytes of a send entry as SQS counts them toward a batch's limit: the body and the
// message attributes' names, types and values (as sent, before any check).
std::size_t entry_bytes(const json& entry) {
  const auto text_size = [](const json& v) {
    return v.is_string() ? v.get_ref<const std::string&>().size() : std::size_t{0};
  };
  std::size_t bytes = 0;
  if (auto body = entry.find("MessageBody"); body != entry.end()) bytes += text_size(*body);
  for (const char* member : {"MessageAttributes", "MessageSystemAttributes"}) {
    auto attributes = entry.find(member);
    if (attributes == entry.end() || !attributes->is_object()) continue;
    for (const auto& [name, value] : attributes->items()) {
      bytes += name.size();
      if (!value.is_object()) continue;
      for (const char* field : {"DataType", "StringValue", "BinaryValue"}) {
        if (auto f = value.find(field); f != value.end()) bytes += text_size(*f);
      }
    }
  }
  return bytes;
}

bool valid_batch_id(const std::string& id) {
  return !id.empty() && id.size() <= 80 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// Entries of a batch request: present, at most `max`, ids valid and distinct.
const json& batch_entries(const json& input, std::size_t max) {
  auto it = input.find("Entries");
  if (it == input.end() || !it->is_array() || it->empty()) {
    fail("EmptyBatchRequest", "There should be at least one entry in the request.");
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

// A listing's MaxResults and NextToken (the base64 of the last name of the page before).
struct Page {
  bool paged = false;      // MaxResults given: then a NextToken says there is more
  std::size_t limit = 1000;
  std::string after;       // list names after this one
};

Page page_of(const json& input) {
  Page page;
  if (const auto max = int_member(input, "MaxResults")) {
    if (*max < 1 || *max > 1000) {
      fail("InvalidParameterValue", "Value for parameter MaxResults is invalid. Reason: Must be "
                                    "between 1 and 1000, if provided.");
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

}  // namespace

// --- Queues --------------------------------------------------------------------------------------

std::string SqsService::queue_url(const Call& c, std::string_view name) const {
  return fmt::format("http://{}/{}/{}", c.host, options_.account, name);
}

std::shared_ptr<const QueueInfo> SqsService::queue_of(Call& c) {
  const std::string url = string_member(c.input, "QueueUrl", true);
  return catalog_.get(queue_name_of_url(url));
}

json SqsService::create_queue(Call& c) {
  const std::string name = string_member(c.input, "QueueName", true);
  auto q = catalog_.create(name, string_map(c.input, "Attributes"), string_map(c.input, "tags"));
  return {{"QueueUrl", queue_url(c, q->name)}};
}

json SqsService::get_queue_url(Call& c) {
  const std::string name = string_member(c.input, "QueueName", true);
  QueueCatalog::check_name(name);
  auto q = catalog_.get(name);
  return {{"QueueUrl", queue_url(c, q->name)}};
}

json SqsService::list_queues(Call& c) {
  const std::string prefix = string_member(c.input, "QueueNamePrefix", false);
  const Page page = page_of(c.input);
  // One more than asked: whether there is a next page.
  std::vector<std::string> names = catalog_.list(prefix, page.after, page.limit + 1);
  json out = json::object();
  const bool more = names.size() > page.limit;
  if (more) names.resize(page.limit);
  json urls = json::array();
  for (const auto& n : names) urls.push_back(queue_url(c, n));
  if (!urls.empty()) out["QueueUrls"] = std::move(urls);
  if (more && page.paged) out["NextToken"] = base64_encode(names.back());
  return out;
}

json SqsService::delete_queue(Call& c) {
  auto q = queue_of(c);
  catalog_.remove(q->name);
  return json::object();
}

json SqsService::get_queue_attributes(Call& c) {
  auto q = queue_of(c);
  std::vector<std::string> names = string_list(c.input, "AttributeNames");
  const bool all = std::find(names.begin(), names.end(), "All") != names.end();
  std::shared_ptr<const QueueInfo> source;
  if (q->source_queue) source = catalog_.find(*q->source_queue);
  std::map<std::string, std::string> values =
      effective_attributes(*q, options_.region, options_.account, source.get());
  const bool counts =
      all || std::any_of(names.begin(), names.end(), [](const std::string& n) {
        return n.starts_with("ApproximateNumberOfMessages");
      });
  if (counts) {
    const TopicStats s = client_.stats(q->topic, q->group);
    values["ApproximateNumberOfMessages"] = std::to_string(s.ready + s.waiting_on_key);
    values["ApproximateNumberOfMessagesNotVisible"] = std::to_string(s.in_flight);
    values["ApproximateNumberOfMessagesDelayed"] = std::to_string(s.delayed);
  }
  json attributes = json::object();
  if (all) {
    for (const auto& [k, v] : values) attributes[k] = v;
  } else {
    static const std::set<std::string, std::less<>> kKnown = {
        "All", "Policy", "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod",
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
        "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn",
        "ApproximateNumberOfMessagesDelayed", "DelaySeconds", "ReceiveMessageWaitTimeSeconds",
        "RedrivePolicy", "FifoQueue", "ContentBasedDeduplication", "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds", "DeduplicationScope", "FifoThroughputLimit",
        "RedriveAllowPolicy", "SqsManagedSseEnabled", std::string(kSourceQueueAttribute),
        std::string(kConsumerGroupAttribute), std::string(kGroupStartAttribute),
        std::string(kServersAttribute), std::string(kPartitionsAttribute)};
    for (const auto& n : names) {
      if (!kKnown.contains(n)) fail("InvalidAttributeName", fmt::format("Unknown Attribute {}.", n));
      if (auto it = values.find(n); it != values.end()) attributes[n] = it->second;
    }
  }
  json out = json::object();
  if (!attributes.empty()) out["Attributes"] = std::move(attributes);
  return out;
}

json SqsService::set_queue_attributes(Call& c) {
  auto q = queue_of(c);
  auto attributes = string_map(c.input, "Attributes");
  if (attributes.empty()) {
    fail("MissingParameter", "The request must contain the parameter Attributes.");
  }
  catalog_.set_attributes(q->name, attributes);
  return json::object();
}

json SqsService::purge_queue(Call& c) {
  auto q = queue_of(c);
  client_.purge(q->topic, q->group);
  // Deduplication is the topic's, on sending: a group queue's purge leaves the source's.
  if (q->fifo && !q->source_queue) client_.forget_dedup_keys(q->topic);
  {
    std::lock_guard lock(attempts_mutex_);
    for (auto it = receive_attempts_.begin(); it != receive_attempts_.end();) {
      if (!it->first.starts_with(q->name + "\n")) {
        ++it;
        continue;
      }
      attempts_bytes_ -= it->second.bytes;
      it = receive_attempts_.erase(it);
    }
  }
  return json::object();
}

json SqsService::tag_queue(Call& c) {
  auto q = queue_of(c);
  auto tags = string_map(c.input, "Tags");
  if (tags.empty()) fail("MissingParameter", "The request must contain the parameter Tags.");
  catalog_.set_tags(q->name, tags, {});
  return json::object();
}

json SqsService::untag_queue(Call& c) {
  auto q = queue_of(c);
  auto keys = string_list(c.input, "TagKeys");
  if (keys.empty()) fail("MissingParameter", "The request must contain the parameter TagKeys.");
  catalog_.set_tags(q->name, {}, keys);
  return json::object();
}

json SqsService::list_queue_tags(Call& c) {
  auto q = queue_of(c);
  json out = json::object();
  if (!q->tags.empty()) out["Tags"] = q->tags;
  return out;
}

json SqsService::list_dead_letter_source_queues(Call& c) {
  auto q = queue_of(c);
  const Page page = page_of(c.input);
  json urls = json::array();
  std::string last;
  bool more = false;
  for (const auto& n : catalog_.dead_letter_sources(q->name)) {
    if (n <= page.after) continue;
    if (urls.size() == page.limit) {
      more = true;
      break;
    }
    urls.push_back(queue_url(c, n));
    last = n;
  }
  json out = {{"queueUrls", urls}};
  if (more && page.paged) out["NextToken"] = base64_encode(last);
  return out;
}

// --- Sending ---------------------------------------------------------------------------------------

namespace {

// A consumer group cannot be sent to alone: a send reaches every group of the topic.
void check_sendable(const QueueInfo& q) {
  if (!q.source_queue) return;
  fail("UnsupportedOperation",
       fmt::format("Queue {} is a consumer-group queue of {}: send to {}, and every one of its "
                   "consumer-group queues receives the message.",
                   q.name, *q.source_queue, *q.source_queue));
}

// One message of SendMessage or a batch entry, checked against SQS's rules and the queue's
// settings; returns the message to send.
OutgoingMessage outgoing(const json& entry, const QueueInfo& q) {
  OutgoingMessage m;
  const auto body = entry.find("MessageBody");
  if (body == entry.end() || !body->is_string()) {
    fail("MissingParameter", "The request must contain the parameter MessageBody.");
  }
  m.payload = body->get<std::string>();
  if (m.payload.empty()) {
    fail("MissingParameter", "The request must contain the parameter MessageBody.");
  }
  if (auto at = invalid_body_character(m.payload)) {
    fail("InvalidMessageContents",
         fmt::format("Invalid binary character in the message body at byte {}. Allowed: #x9 | "
                     "#xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
                     *at));
  }
  const std::size_t size = m.payload.size() + read_attributes(entry, m.attributes);
  if (static_cast<std::int64_t>(size) > q.maximum_message_size) {
    fail("InvalidParameterValue",
         fmt::format("One or more parameters are invalid. Reason: Message must be shorter than "
                     "{} bytes.",
                     q.maximum_message_size));
  }
  const auto delay = int_member(entry, "DelaySeconds");
  if (delay) {
    if (q.fifo) {
      fail("InvalidParameterValue",
           "Value " + std::to_string(*delay) +
               " for parameter DelaySeconds is invalid. Reason: The request include parameter "
               "that is not valid for this queue type.");
    }
    if (*delay < 0 || *delay > 366LL * 24 * 3600) {
      fail("InvalidParameterValue",
           fmt::format("Value {} for parameter DelaySeconds is invalid. Reason: must be from 0 "
                       "to 31622400 seconds (txmq allows more than SQS's 900).",
                       *delay));
    }
  }
  m.delay = std::chrono::seconds(delay.value_or(q.delay_seconds));
  auto id_member = [&](const char* name) -> std::string {
    std::string v = string_member(entry, name, false);
    if (!v.empty() && !punctuation_id(v)) {
      fail("InvalidParameterValue",
           fmt::format("Value for parameter {} is invalid: 1 to 128 characters of "
                       "alphanumerics and punctuation",
                       name));
    }
    return v;
  };
  const std::string group = id_member("MessageGroupId");
  std::string dedup = id_member("MessageDeduplicationId");
  if (q.fifo) {
    if (group.empty()) {
      fail("MissingParameter", "The request must contain the parameter MessageGroupId.");
    }
    m.key = group;
    if (dedup.empty()) {
      if (!q.content_based_deduplication) {
        fail("InvalidParameterValue",
             "The queue should either have ContentBasedDeduplication enabled or "
             "MessageDeduplicationId provided explicitly");
      }
      m.attributes[std::string(kDedupIdAttribute)] = {"String", sha256_hex(m.payload)};
      dedup = m.attributes[std::string(kDedupIdAttribute)].value;
    } else {
      m.attributes[std::string(kDedupIdAttribute)] = {"String", dedup};
    }
    // DeduplicationScope=messageGroup: the same id in two groups is two messages.
    m.dedup_key = q.deduplication_per_group ? group + '\n' + dedup : dedup;
  } else if (!dedup.empty()) {
    fail("InvalidParameterValue",
         "The request include parameter MessageDeduplicationId that is not valid for this "
         "queue type");
  }
  return m;
}

// The answer to a send of message m, but its ids (sent_ids adds them).
json sent_digests(const OutgoingMessage& m) {
  json out = {{"MD5OfMessageBody", md5_hex(m.payload)}};
  json user = user_attributes_all(m.attributes);
  if (!user.empty()) out["MD5OfMessageAttributes"] = md5_of_message_attributes(user);
  if (auto it = m.attributes.find(kTraceHeaderAttribute); it != m.attributes.end()) {
    json sys = {{"AWSTraceHeader", {{"DataType", "String"}, {"StringValue", it->second.value}}}};
    out["MD5OfMessageSystemAttributes"] = md5_of_message_attributes(sys);
  }
  return out;
}

void sent_ids(json& out, const QueueInfo& q, std::uint64_t id) {
  out["MessageId"] = message_id(q.topic, id);
  if (q.fifo) out["SequenceNumber"] = fmt::format("{:020}", id);
}

// The answer to a send of message m that got id.
json sent_json(const QueueInfo& q, const OutgoingMessage& m, std::uint64_t id) {
  json out = sent_digests(m);
  sent_ids(out, q, id);
  return out;
}

}  // namespace

void SqsService::send_message(const std::shared_ptr<Call>& call) {
  auto q = queue_of(*call);
  check_sendable(*q);
  OutgoingMessage m = outgoing(call->input, *q);
  // The digests are made here, on this call's worker, not by the drain, which answers the calls
  // of its group commit one after another (and the message is not copied for them).
  json answer = sent_digests(m);
  enqueue_send(q->topic, {call, std::move(m), [this, call, q, answer = std::move(answer)](
                                            std::uint64_t id, std::exception_ptr error) mutable {
                            if (error) return reply_error(*call, error);
                            sent_ids(answer, *q, id);
                            reply(*call, answer);
                          }});
}

void SqsService::enqueue_send(const std::string& topic, PendingSend pending) {
  if (sends_.add(topic, std::move(pending))) drain_sends(topic);
}

// Group commit: the first sender of a topic sends, in one transaction, every single send that
// arrived for it meanwhile, and again until none is left; a failed batch is retried one message
// at a time, so that one message's error stays its own.
void SqsService::drain_sends(const std::string& topic) {
  for (;;) {
    std::vector<PendingSend> group = sends_.next(topic);
    if (group.empty()) return;
    // Calls answered meanwhile (their deadline passed while the database did not answer) are
    // not sent: their callers were told to retry.
    std::erase_if(group, [](const PendingSend& p) { return p.call && p.call->answered; });
    if (group.empty()) continue;
    counters_.send_groups.fetch_add(1, std::memory_order_relaxed);
    counters_.sends_grouped.fetch_add(group.size(), std::memory_order_relaxed);
    std::vector<OutgoingMessage> messages;
    messages.reserve(group.size());
    for (auto& p : group) messages.push_back(std::move(p.message));
    try {
      const std::vector<std::uint64_t> ids = client_.send_batch(topic, messages);
      for (std::size_t i = 0; i < group.size(); ++i) group[i].done(ids[i], nullptr);
    } catch (const Error& e) {
      if (group.size() == 1 || e.code() == Errc::kNotFound || e.code() == Errc::kCommitUnknown) {
        for (auto& p : group) p.done(0, std::current_exception());
        continue;
      }
      for (std::size_t i = 0; i < group.size(); ++i) {
        try {
          group[i].done(client_.send_batch(topic, std::span(&messages[i], 1)).at(0), nullptr);
        } catch (...) {
          group[i].done(0, std::current_exception());
        }
      }
    } catch (...) {
      for (auto& p : group) p.done(0, std::current_exception());
    }
  }
}

json SqsService::send_message_batch(Call& c, std::size_t max_entries) {
  auto q = queue_of(c);
  check_sendable(*q);
  const json& entries = batch_entries(c.input, max_entries);
  std::size_t total = 0;
  for (const auto& e : entries) total += entry_bytes(e);
  if (max_entries == 10 && total > kMaxBatchBytes) {
    fail("BatchRequestTooLong",
         fmt::format("Batch requests cannot be longer than {} bytes. You have sent {} bytes.",
                     kMaxBatchBytes, total));
  }
  json successful = json::array();
  json failed = json::array();
  std::vector<OutgoingMessage> messages;
  std::vector<std::string> ids;
  for (const auto& e : entries) {
    const std::string id = e["Id"].get<std::string>();
    try {
      messages.push_back(outgoing(e, *q));
      ids.push_back(id);
    } catch (const SqsError& error) {
      if (c.txmq_action) throw;  // all or nothing
      failed.push_back(failed_entry(id, error));
    }
  }
  if (!messages.empty()) {
    // One transaction for the valid entries.
    const std::vector<std::uint64_t> sent = client_.send_batch(q->topic, messages);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      json s = sent_json(*q, messages[i], sent[i]);
      s["Id"] = ids[i];
      successful.push_back(std::move(s));
    }
  }
  return {{"Successful", successful}, {"Failed", failed}};
}

// --- Receiving -------------------------------------------------------------------------------------

// A ReceiveMessage: claims at once; when nothing is there and it may wait, a subscription wakes
// it (Client::subscribe: no thread, no connection of its own) and a timer ends the wait.
struct SqsService::Poll {
  Poll(std::shared_ptr<Call> c, asio::io_context& io) : call(std::move(c)), timer(io) {}
  std::shared_ptr<Call> call;
  std::shared_ptr<const QueueInfo> queue;
  ReceiveOptions options;
  std::chrono::steady_clock::time_point deadline;
  asio::steady_timer timer;
  std::string attempt_key;  // FIFO ReceiveRequestAttemptId, with the queue's name
  // The attributes asked for, read (and checked) before anything is claimed.
  std::vector<std::string> system_names;  // AttributeNames and MessageSystemAttributeNames
  std::vector<std::string> attribute_names;  // MessageAttributeNames

  std::mutex mutex;
  Client::Subscription subscription;
  bool done = false;
  bool claiming = false;  // a claim runs: a wake-up or the end of the wait leaves it to finish
  bool again = false;     // woken while claiming: claim once more
  bool expired = false;   // the wait ended while claiming
};

json SqsService::message_json(const Poll& poll, const Message& m) {
  const QueueInfo& q = *poll.queue;
  json out;
  const std::string_view id_topic = m.dead_lettered_from ? m.dead_lettered_from->topic : q.topic;
  const std::uint64_t id = m.dead_lettered_from ? m.dead_lettered_from->id : m.id;
  out["MessageId"] = message_id(id_topic, id);
  out["ReceiptHandle"] = catalog_.seal(q.name, m.receipt);
  out["MD5OfBody"] = md5_hex(m.payload);
  out["Body"] = m.payload;

  const std::vector<std::string>& system = poll.system_names;
  const bool all = std::find(system.begin(), system.end(), "All") != system.end();
  auto wanted = [&](std::string_view name) {
    return all || std::find(system.begin(), system.end(), name) != system.end();
  };
  json attributes = json::object();
  if (wanted("SenderId")) attributes["SenderId"] = options_.account;
  if (wanted("SentTimestamp")) attributes["SentTimestamp"] = std::to_string(epoch_ms(m.enqueued_at));
  if (wanted("ApproximateReceiveCount")) attributes["ApproximateReceiveCount"] = std::to_string(m.attempt);
  if (wanted("ApproximateFirstReceiveTimestamp")) {
    attributes["ApproximateFirstReceiveTimestamp"] = std::to_string(epoch_ms(m.first_received_at));
  }
  if (auto it = m.attributes.find(kTraceHeaderAttribute);
      it != m.attributes.end() && wanted("AWSTraceHeader")) {
    attributes["AWSTraceHeader"] = it->second.value;
  }
  if (m.dead_lettered_from && wanted("DeadLetterQueueSourceArn")) {
    if (auto source = catalog_.name_of_topic(m.dead_lettered_from->topic)) {
      attributes["DeadLetterQueueSourceArn"] = queue_arn(options_.region, options_.account, *source);
    }
  }
  if (q.fifo) {
    if (wanted("MessageGroupId") && m.key) attributes["MessageGroupId"] = *m.key;
    if (auto it = m.attributes.find(kDedupIdAttribute);
        it != m.attributes.end() && wanted("MessageDeduplicationId")) {
      attributes["MessageDeduplicationId"] = it->second.value;
    }
    if (wanted("SequenceNumber")) attributes["SequenceNumber"] = fmt::format("{:020}", m.id);
  }
  if (!attributes.empty()) out["Attributes"] = std::move(attributes);

  const json user = user_attributes(m.attributes, poll.attribute_names);
  if (!user.empty()) {
    out["MD5OfMessageAttributes"] = md5_of_message_attributes(user);
    out["MessageAttributes"] = user;
  }
  return out;
}

void SqsService::receive_message(const std::shared_ptr<Call>& call) {
  auto q = queue_of(*call);
  const json& in = call->input;
  auto poll = std::make_shared<Poll>(call, io_);
  poll->queue = q;
  poll->options.max_messages = static_cast<int>(int_in(in, "MaxNumberOfMessages", 1, 10, 1));
  poll->options.group = q->group;
  const std::int64_t visibility = int_in(in, "VisibilityTimeout", 0, 43200, q->visibility_timeout);
  poll->options.lease = std::max<Micros>(std::chrono::milliseconds(1), std::chrono::seconds(visibility));
  const std::int64_t wait = int_in(in, "WaitTimeSeconds", 0, 20, q->wait_seconds);
  poll->deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
  call->deadline = (poll->deadline + options_.request_timeout).time_since_epoch().count();
  poll->system_names = string_list(in, "AttributeNames");
  for (auto& n : string_list(in, "MessageSystemAttributeNames")) {
    poll->system_names.push_back(std::move(n));
  }
  poll->attribute_names = string_list(in, "MessageAttributeNames");
  // SQS ignores an attempt id on a standard queue.
  const std::string attempt = q->fifo ? string_member(in, "ReceiveRequestAttemptId", false) : "";
  if (!attempt.empty() && !punctuation_id(attempt)) {
    fail("InvalidParameterValue",
         "Value for parameter ReceiveRequestAttemptId is invalid. Reason: 1 to 128 characters "
         "of alphanumerics and punctuation (!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~).");
  }
  if (q->fifo) {
    if (!attempt.empty()) {
      poll->attempt_key = q->name + "\n" + attempt;
      std::lock_guard lock(attempts_mutex_);
      auto it = receive_attempts_.find(poll->attempt_key);
      if (it != receive_attempts_.end() &&
          std::chrono::steady_clock::now() - it->second.at < kAttemptIdsKeptFor) {
        return reply(*call, it->second.answer);
      }
    }
  }
  std::vector<Message> now = client_.receive(q->topic, poll->options);
  if (!now.empty() || wait == 0 || stopping_) return finish_poll(poll, std::move(now));
  {
    std::lock_guard lock(polls_mutex_);
    polls_.insert(poll);
  }
  counters_.polls_held.fetch_add(1, std::memory_order_relaxed);
  poll->timer.expires_at(poll->deadline);
  poll->timer.async_wait([this, poll](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the poll is done
    {
      std::lock_guard lock(poll->mutex);
      if (poll->done) return;
      if (poll->claiming) {
        poll->expired = true;
        return;
      }
    }
    finish_poll(poll, {});
  });
  if (stopping_) return finish_poll(poll, {});  // shutdown began meanwhile
  {
    std::lock_guard lock(poll->mutex);
    poll->claiming = true;
  }
  try_claim(poll);
}

// Runs with poll->claiming set, on a worker: subscribes (before looking, so that a send after
// the look wakes it), claims, and finishes the poll or leaves it waiting.
void SqsService::try_claim(const std::shared_ptr<Poll>& poll) {
  for (;;) {
    std::weak_ptr<Poll> weak = poll;
    Client::Subscription fresh;
    std::vector<Message> got;
    try {
      fresh = client_.subscribe(poll->queue->topic, poll->queue->group, [this, weak] {
        auto p = weak.lock();
        if (!p) return;
        {
          std::lock_guard lock(p->mutex);
          if (p->done) return;
          if (p->claiming) {
            p->again = true;
            return;
          }
          p->claiming = true;
        }
        asio::post(workers_, [this, p] { try_claim(p); });
      });
      Client::Subscription old;
      {
        std::lock_guard lock(poll->mutex);
        old = std::move(poll->subscription);
        poll->subscription = std::move(fresh);
        poll->again = false;
      }
      got = client_.receive(poll->queue->topic, poll->options);
    } catch (...) {
      {
        std::lock_guard lock(poll->mutex);
        poll->claiming = false;
      }
      reply_error(*poll->call, std::current_exception());
      finish_poll(poll, {});
      return;
    }
    bool finish = !got.empty() || stopping_ || std::chrono::steady_clock::now() >= poll->deadline;
    {
      std::lock_guard lock(poll->mutex);
      finish = finish || poll->expired;
      if (!finish && poll->again) continue;  // woken while claiming: look again
      poll->claiming = false;
    }
    if (finish) finish_poll(poll, std::move(got));
    return;
  }
}

void SqsService::finish_poll(const std::shared_ptr<Poll>& poll, std::vector<Message> messages) {
  Client::Subscription subscription;
  {
    std::lock_guard lock(poll->mutex);
    if (poll->done) return;
    poll->done = true;
    subscription = std::move(poll->subscription);
  }
  poll->timer.cancel();
  {
    std::lock_guard lock(polls_mutex_);
    if (polls_.erase(poll) > 0) counters_.polls_held.fetch_sub(1, std::memory_order_relaxed);
  }
  if (poll->call->answered && !messages.empty()) {
    // The caller was answered already (503 at its deadline) and will never see these: they are
    // made visible again at once instead of when their lease ends (up to 12 hours; a FIFO
    // queue's group would wait as long).
    for (const Message& m : messages) {
      try {
        client_.extend(poll->queue->topic, m.receipt, std::chrono::seconds(0));
      } catch (const std::exception&) {
        // The lease runs out by itself.
      }
    }
    return;
  }
  json list = json::array();
  try {
    for (const Message& m : messages) list.push_back(message_json(*poll, m));
  } catch (...) {
    return reply_error(*poll->call, std::current_exception());
  }
  json out = json::object();
  if (!list.empty()) out["Messages"] = std::move(list);
  if (!poll->attempt_key.empty() && !messages.empty()) {
    std::size_t bytes = poll->attempt_key.size();
    for (const Message& m : messages) bytes += m.payload.size() + m.receipt.size() + 256;
    std::lock_guard lock(attempts_mutex_);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = receive_attempts_.begin(); it != receive_attempts_.end();) {
      if (now - it->second.at < kAttemptIdsKeptFor) {
        ++it;
        continue;
      }
      attempts_bytes_ -= it->second.bytes;
      it = receive_attempts_.erase(it);
    }
    // Bounded: past it, a retry with the same attempt id receives anew (what SQS does after its
    // 5 minutes), which at-least-once delivery allows.
    if (receive_attempts_.size() < kMaxAttemptIds && attempts_bytes_ + bytes <= kMaxAttemptBytes &&
        !receive_attempts_.contains(poll->attempt_key)) {
      receive_attempts_[poll->attempt_key] = {now, out, bytes};
      attempts_bytes_ += bytes;
    }
  }
  reply(*poll->call, out);
}

// --- Deleting and visibility --------------------------------------------------------------------

namespace {

// The library's receipt in a ReceiptHandle that this queue gave out; ReceiptHandleIsInvalid for
// anything else (forged, altered, another queue's).
std::string receipt_of(const QueueCatalog& catalog, const QueueInfo& q, const std::string& handle) {
  std::optional<std::string> receipt = catalog.unseal(q.name, handle);
  try {
    if (receipt) Receipt::parse(*receipt);
  } catch (const Error&) {
    receipt.reset();
  }
  if (!receipt) {
    fail("ReceiptHandleIsInvalid",
         fmt::format("The input receipt handle \"{}\" is not a valid receipt handle.",
                     handle.substr(0, 100)));
  }
  return std::move(*receipt);
}

// SQS: a standard queue's stale handle still deletes (txmq's fencing decides whether the
// message goes: only if nobody received it since); a FIFO queue's is refused.
std::optional<SqsError> delete_outcome(const QueueInfo& q, Settle outcome) {
  if (outcome == Settle::kOk || !q.fifo) return std::nullopt;
  return SqsError::of("InvalidParameterValue",
                      "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle "
                      "has expired.");
}

}  // namespace

void SqsService::delete_message(const std::shared_ptr<Call>& call) {
  auto q = queue_of(*call);
  const std::string receipt =
      receipt_of(catalog_, *q, string_member(call->input, "ReceiptHandle", true));
  enqueue_delete(q->topic, {call, receipt, [this, call, q](Settle outcome, std::exception_ptr error) {
                              if (error) return reply_error(*call, error);
                              if (auto e = delete_outcome(*q, outcome)) {
                                return reply_error(*call, std::make_exception_ptr(*e));
                              }
                              reply(*call, json::object());
                            }});
}

void SqsService::enqueue_delete(const std::string& topic, PendingDelete pending) {
  if (deletes_.add(topic, std::move(pending))) drain_deletes(topic);
}

// Group commit of deletes, as drain_sends: Client::ack settles a batch of receipts together.
void SqsService::drain_deletes(const std::string& topic) {
  for (;;) {
    std::vector<PendingDelete> group = deletes_.next(topic);
    if (group.empty()) return;
    std::erase_if(group, [](const PendingDelete& p) { return p.call && p.call->answered; });
    if (group.empty()) continue;
    counters_.delete_groups.fetch_add(1, std::memory_order_relaxed);
    counters_.deletes_grouped.fetch_add(group.size(), std::memory_order_relaxed);
    std::vector<std::string> receipts;
    receipts.reserve(group.size());
    for (auto& p : group) receipts.push_back(p.receipt);
    try {
      const std::vector<Settle> outcomes = client_.ack(topic, receipts);
      for (std::size_t i = 0; i < group.size(); ++i) group[i].done(outcomes[i], nullptr);
    } catch (...) {
      for (auto& p : group) p.done(Settle::kNotFound, std::current_exception());
    }
  }
}

json SqsService::delete_message_batch(Call& c) {
  auto q = queue_of(c);
  const json& entries = batch_entries(c.input, 10);
  json successful = json::array();
  json failed = json::array();
  std::vector<std::string> receipts;
  std::vector<std::string> ids;
  for (const auto& e : entries) {
    const std::string id = e["Id"].get<std::string>();
    try {
      std::string receipt = receipt_of(catalog_, *q, string_member(e, "ReceiptHandle", true));
      receipts.push_back(std::move(receipt));
      ids.push_back(id);
    } catch (const SqsError& error) {
      failed.push_back(failed_entry(id, error));
    }
  }
  if (!receipts.empty()) {
    const std::vector<Settle> outcomes = client_.ack(q->topic, receipts);
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      if (auto e = delete_outcome(*q, outcomes[i])) {
        failed.push_back(failed_entry(ids[i], *e));
      } else {
        successful.push_back({{"Id", ids[i]}});
      }
    }
  }
  return {{"Successful", successful}, {"Failed", failed}};
}

namespace {

std::optional<SqsError> visibility_outcome(Settle outcome) {
  if (outcome == Settle::kOk) return std::nullopt;
  return SqsError::of("InvalidParameterValue",
                      "Value for parameter ReceiptHandle is invalid. Reason: Message does not "
                      "exist or is not available for visibility timeout change.");
}

}  // namespace

json SqsService::change_message_visibility(Call& c) {
  auto q = queue_of(c);
  const std::string receipt =
      receipt_of(catalog_, *q, string_member(c.input, "ReceiptHandle", true));
  if (!int_member(c.input, "VisibilityTimeout")) {
    fail("MissingParameter", "The request must contain the parameter VisibilityTimeout.");
  }
  const std::int64_t seconds = int_in(c.input, "VisibilityTimeout", 0, 43200, 0);
  if (auto e = visibility_outcome(client_.extend(q->topic, receipt, std::chrono::seconds(seconds)))) {
    throw *e;
  }
  return json::object();
}

json SqsService::change_message_visibility_batch(Call& c) {
  auto q = queue_of(c);
  const json& entries = batch_entries(c.input, 10);
  json successful = json::array();
  json failed = json::array();
  for (const auto& e : entries) {
    const std::string id = e["Id"].get<std::string>();
    try {
      const std::string receipt =
          receipt_of(catalog_, *q, string_member(e, "ReceiptHandle", true));
      const std::int64_t seconds = int_in(e, "VisibilityTimeout", 0, 43200, 0);
      if (auto error =
              visibility_outcome(client_.extend(q->topic, receipt, std::chrono::seconds(seconds)))) {
        throw *error;
      }
      successful.push_back({{"Id", id}});
    } catch (const SqsError& error) {
      failed.push_back(failed_entry(id, error));
    }
  }
  return {{"Successful", successful}, {"Failed", failed}};
}

}  // namespace txmq::server
