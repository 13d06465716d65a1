#include "server/sqs/wire.h"

#include <algorithm>
#include <charconv>
#include <map>

#include <fmt/format.h>

#include "server/sqs/digests.h"
#include "util/codec.h"

namespace txmq::server {
namespace {

using json = nlohmann::json;

// --- Errors ----------------------------------------------------------------------------------

struct ErrorSpec {
  std::string_view code;        // the JSON protocol's name
  std::string_view query_code;  // the Query protocol's code
  int status;
  bool sender;
};

// From SQS's service models: the Query model's error traits (botocore 1.29) and the JSON model's
// awsQueryError traits (Smithy model, 2025), which add InvalidAddress, InvalidSecurity,
// RequestThrottled, ResourceNotFoundException and the KMS errors (the model gives
// ReceiptHandleIsInvalid 404; SQS answers 400, as here); then SQS's common errors (the API reference's CommonErrors), which have no shape.
constexpr ErrorSpec kErrors[] = {
    {"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400, true},
    {"QueueNameExists", "QueueAlreadyExists", 400, true},
    {"QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently", 400, true},
    {"BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400, true},
    {"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400, true},
    {"EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400, true},
    {"InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400, true},
    {"TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400,
     true},
    {"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400, true},
    {"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400, true},
    {"PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403, true},
    {"OverLimit", "OverLimit", 403, true},
    {"InvalidAttributeName", "InvalidAttributeName", 400, true},
    {"InvalidAttributeValue", "InvalidAttributeValue", 400, true},
    {"InvalidMessageContents", "InvalidMessageContents", 400, true},
    {"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 400, true},
    {"InvalidIdFormat", "InvalidIdFormat", 400, true},
    {"InvalidAddress", "InvalidAddress", 404, true},
    {"RequestThrottled", "RequestThrottled", 403, true},
    {"ResourceNotFoundException", "ResourceNotFoundException", 404, true},
    {"KmsAccessDenied", "KMS.AccessDeniedException", 400, true},
    {"KmsDisabled", "KMS.DisabledException", 400, true},
    {"KmsInvalidKeyUsage", "KMS.InvalidKeyUsageException", 400, true},
    {"KmsInvalidState", "KMS.InvalidStateException", 400, true},
    {"KmsNotFound", "KMS.NotFoundException", 400, true},
    {"KmsOptInRequired", "KMS.OptInRequired", 403, true},
    {"KmsThrottled", "KMS.ThrottlingException", 400, true},
    {"InvalidParameterValue", "InvalidParameterValue", 400, true},
    {"MissingParameter", "MissingParameter", 400, true},
    {"MissingAction", "MissingAction", 400, true},
    {"InvalidAction", "InvalidAction", 400, true},
    {"MalformedQueryString", "MalformedQueryString", 404, true},
    {"UnknownOperationException", "InvalidAction", 400, true},
    {"SerializationException", "MalformedQueryString", 400, true},
    {"AccessDenied", "AccessDenied", 403, true},
    {"InvalidClientTokenId", "InvalidClientTokenId", 403, true},
    {"SignatureDoesNotMatch", "SignatureDoesNotMatch", 403, true},
    {"MissingAuthenticationToken", "MissingAuthenticationToken", 403, true},
    {"IncompleteSignature", "IncompleteSignature", 400, true},
    {"RequestExpired", "RequestExpired", 400, true},
    {"InvalidSecurity", "InvalidSecurity", 403, true},
    {"InvalidQueryParameter", "InvalidQueryParameter", 400, true},
    {"InvalidParameterCombination", "InvalidParameterCombination", 400, true},
    {"AccessDeniedException", "AccessDeniedException", 400, true},
    {"NotAuthorized", "NotAuthorized", 400, true},
    {"OptInRequired", "OptInRequired", 403, true},
    {"ThrottlingException", "ThrottlingException", 400, true},
    {"ValidationError", "ValidationError", 400, true},
    {"InternalError", "InternalError", 500, false},
    {"InternalFailure", "InternalFailure", 500, false},
    {"ServiceUnavailable", "ServiceUnavailable", 503, false},
};

// Where SQS's two protocols word an error differently: the JSON protocol's type names for two
// common errors (its x-amzn-query-error header still gives the Query code), and the Query
// protocol's text for a missing queue.
std::string_view json_type_name(const SqsError& error) {
  if (error.code == "InvalidParameterValue") return "InvalidParameterValueException";
  if (error.code == "MissingParameter") return "MissingRequiredParameterException";
  return error.code;
}

std::string_view query_message(const SqsError& error) {
  const std::string_view message = error.what();
  if (error.code == "QueueDoesNotExist" && message == "The specified queue does not exist.") {
    return "The specified queue does not exist for this wsdl version.";
  }
  return message;
}

// --- Query input -------------------------------------------------------------------------------

// The deepest name an action has: SendMessageBatchRequestEntry.N.MessageAttribute.N.Value.
// StringValue is 6 parts.
constexpr std::size_t kMaxParameterDepth = 6;
// A Query SendMessageBatch of 10 entries with 10 attributes each has about 500 parameters.
constexpr std::size_t kMaxFormParameters = 5000;

// Parameters as a tree: "MessageAttribute.1.Value.StringValue" is
// root["MessageAttribute"]["1"]["Value"]["StringValue"].
struct Node {
  std::string value;
  bool has_value = false;
  std::map<std::string, Node> children;

  const Node* child(std::string_view name) const {
    auto it = children.find(std::string(name));
    return it == children.end() ? nullptr : &it->second;
  }
  // Children named 1, 2, 3, ... in numeric order (SQS numbers them from 1).
  std::vector<const Node*> numbered() const {
    std::vector<std::pair<long, const Node*>> items;
    for (const auto& [k, v] : children) {
      long n = 0;
      auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), n);
      if (ec != std::errc() || p != k.data() + k.size() || n < 1) {
        throw SqsError::of("InvalidParameterValue",
                           fmt::format("'{}' is not a valid list index", k));
      }
      items.emplace_back(n, &v);
    }
    std::sort(items.begin(), items.end());
    std::vector<const Node*> out;
    for (const auto& [n, node] : items) out.push_back(node);
    return out;
  }
};

enum class Kind {
  kString,
  kInteger,
  kStringList,    // flattened list of strings: Name.1, Name.2, ...
  kStringMap,     // flattened map: Name.N.<key>, Name.N.<value>
  kAttributeMap,  // flattened map of MessageAttributeValue: Name.N.Name, Name.N.Value.*
  kEntries,       // flattened list of structures
};

struct Member {
  std::string_view json;   // the JSON protocol's name
  std::string_view query;  // the Query protocol's (flattened) name
  Kind kind;
  std::string_view key = "Name";
  std::string_view value = "Value";
  const std::vector<Member>* entry = nullptr;  // for kEntries
};

const std::vector<Member> kSendEntry = {
    {"Id", "Id", Kind::kString},
    {"MessageBody", "MessageBody", Kind::kString},
    {"DelaySeconds", "DelaySeconds", Kind::kInteger},
    {"MessageAttributes", "MessageAttribute", Kind::kAttributeMap},
    {"MessageSystemAttributes", "MessageSystemAttribute", Kind::kAttributeMap},
    {"MessageDeduplicationId", "MessageDeduplicationId", Kind::kString},
    {"MessageGroupId", "MessageGroupId", Kind::kString},
};
const std::vector<Member> kDeleteEntry = {
    {"Id", "Id", Kind::kString},
    {"ReceiptHandle", "ReceiptHandle", Kind::kString},
};
const std::vector<Member> kVisibilityEntry = {
    {"Id", "Id", Kind::kString},
    {"ReceiptHandle", "ReceiptHandle", Kind::kString},
    {"VisibilityTimeout", "VisibilityTimeout", Kind::kInteger},
};

const std::map<std::string_view, std::vector<Member>>& actions() {
  static const std::map<std::string_view, std::vector<Member>> table = {
      {"CreateQueue",
       {{"QueueName", "QueueName", Kind::kString},
        {"Attributes", "Attribute", Kind::kStringMap},
        {"tags", "Tag", Kind::kStringMap, "Key", "Value"}}},
      {"GetQueueUrl",
       {{"QueueName", "QueueName", Kind::kString},
        {"QueueOwnerAWSAccountId", "QueueOwnerAWSAccountId", Kind::kString}}},
      {"ListQueues",
       {{"QueueNamePrefix", "QueueNamePrefix", Kind::kString},
        {"NextToken", "NextToken", Kind::kString},
        {"MaxResults", "MaxResults", Kind::kInteger}}},
      {"DeleteQueue", {{"QueueUrl", "QueueUrl", Kind::kString}}},
      {"PurgeQueue", {{"QueueUrl", "QueueUrl", Kind::kString}}},
      {"GetQueueAttributes",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"AttributeNames", "AttributeName", Kind::kStringList}}},
      {"SetQueueAttributes",
       {{"QueueUrl", "QueueUrl", Kind::kString}, {"Attributes", "Attribute", Kind::kStringMap}}},
      {"SendMessage",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"MessageBody", "MessageBody", Kind::kString},
        {"DelaySeconds", "DelaySeconds", Kind::kInteger},
        {"MessageAttributes", "MessageAttribute", Kind::kAttributeMap},
        {"MessageSystemAttributes", "MessageSystemAttribute", Kind::kAttributeMap},
        {"MessageDeduplicationId", "MessageDeduplicationId", Kind::kString},
        {"MessageGroupId", "MessageGroupId", Kind::kString}}},
      {"SendMessageBatch",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"Entries", "SendMessageBatchRequestEntry", Kind::kEntries, {}, {}, &kSendEntry}}},
      {"ReceiveMessage",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"AttributeNames", "AttributeName", Kind::kStringList},
        {"MessageSystemAttributeNames", "MessageSystemAttributeName", Kind::kStringList},
        {"MessageAttributeNames", "MessageAttributeName", Kind::kStringList},
        {"MaxNumberOfMessages", "MaxNumberOfMessages", Kind::kInteger},
        {"VisibilityTimeout", "VisibilityTimeout", Kind::kInteger},
        {"WaitTimeSeconds", "WaitTimeSeconds", Kind::kInteger},
        {"ReceiveRequestAttemptId", "ReceiveRequestAttemptId", Kind::kString}}},
      {"DeleteMessage",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"ReceiptHandle", "ReceiptHandle", Kind::kString}}},
      {"DeleteMessageBatch",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"Entries", "DeleteMessageBatchRequestEntry", Kind::kEntries, {}, {}, &kDeleteEntry}}},
      {"ChangeMessageVisibility",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"ReceiptHandle", "ReceiptHandle", Kind::kString},
        {"VisibilityTimeout", "VisibilityTimeout", Kind::kInteger}}},
      {"ChangeMessageVisibilityBatch",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"Entries",
         "ChangeMessageVisibilityBatchRequestEntry",
         Kind::kEntries,
         {},
         {},
         &kVisibilityEntry}}},
      {"TagQueue",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"Tags", "Tag", Kind::kStringMap, "Key", "Value"}}},
      {"UntagQueue",
       {{"QueueUrl", "QueueUrl", Kind::kString}, {"TagKeys", "TagKey", Kind::kStringList}}},
      {"ListQueueTags", {{"QueueUrl", "QueueUrl", Kind::kString}}},
      {"ListDeadLetterSourceQueues",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"NextToken", "NextToken", Kind::kString},
        {"MaxResults", "MaxResults", Kind::kInteger}}},
      {"StartMessageMoveTask",
       {{"SourceArn", "SourceArn", Kind::kString},
        {"DestinationArn", "DestinationArn", Kind::kString},
        {"MaxNumberOfMessagesPerSecond", "MaxNumberOfMessagesPerSecond", Kind::kInteger}}},
      {"ListMessageMoveTasks",
       {{"SourceArn", "SourceArn", Kind::kString}, {"MaxResults", "MaxResults", Kind::kInteger}}},
      {"CancelMessageMoveTask", {{"TaskHandle", "TaskHandle", Kind::kString}}},
      {"AddPermission",
       {{"QueueUrl", "QueueUrl", Kind::kString},
        {"Label", "Label", Kind::kString},
        {"AWSAccountIds", "AWSAccountId", Kind::kStringList},
        {"Actions", "ActionName", Kind::kStringList}}},
      {"RemovePermission",
       {{"QueueUrl", "QueueUrl", Kind::kString}, {"Label", "Label", Kind::kString}}},
  };
  return table;
}

json integer_of(const std::string& text, std::string_view name) {
  long long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
    throw SqsError::of("InvalidParameterValue",
                       fmt::format("Value {} for parameter {} is invalid. Reason: must be an "
                                   "integer.",
                                   text.substr(0, 40), name));
  }
  return v;
}

void convert(const std::vector<Member>& members, const Node& from, json& to) {
  for (const Member& m : members) {
    const Node* node = from.child(m.query);
    if (node == nullptr) continue;
    switch (m.kind) {
      case Kind::kString:
        to[std::string(m.json)] = node->value;
        break;
      case Kind::kInteger:
        to[std::string(m.json)] = integer_of(node->value, m.json);
        break;
      case Kind::kStringList: {
        json& list = to[std::string(m.json)] = json::array();
        for (const Node* item : node->numbered()) list.push_back(item->value);
        break;
      }
      case Kind::kStringMap: {
        json& map = to[std::string(m.json)] = json::object();
        for (const Node* item : node->numbered()) {
          const Node* k = item->child(m.key);
          const Node* v = item->child(m.value);
          if (k == nullptr) {
            throw SqsError::of(
                "MissingParameter",
                fmt::format("The request must contain the parameter {}.N.{}.", m.query, m.key));
          }
          map[k->value] = v == nullptr ? "" : v->value;
        }
        break;
      }
      case Kind::kAttributeMap: {
        json& map = to[std::string(m.json)] = json::object();
        for (const Node* item : node->numbered()) {
          const Node* k = item->child("Name");
          if (k == nullptr) {
            throw SqsError::of(
                "MissingParameter",
                fmt::format("The request must contain the parameter {}.N.Name.", m.query));
          }
          json value = json::object();
          if (const Node* v = item->child("Value")) {
            for (const char* field : {"DataType", "StringValue", "BinaryValue"}) {
              if (const Node* f = v->child(field)) value[field] = f->value;
            }
          }
          map[k->value] = std::move(value);
        }
        break;
      }
      case Kind::kEntries: {
        json& list = to[std::string(m.json)] = json::array();
        for (const Node* item : node->numbered()) {
          json entry = json::object();
          convert(*m.entry, *item, entry);
          list.push_back(std::move(entry));
        }
        break;
      }
    }
  }
}

// --- Query output ------------------------------------------------------------------------------

void element(std::string& out, std::string_view name, std::string_view text) {
  out += '<';
  out += name;
  out += '>';
  out += xml_escape(text);
  out += "</";
  out += name;
  out += '>';
}

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  // A structure where a scalar was expected holds a client's strings, which may not be UTF-8
  // (dump() would throw: found by fuzz_http); xml_escape replaces what is left.
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

void write_value(std::string& out, std::string_view action, std::string_view name, const json& v);

// A structure's members in the order the JSON gives them (std::map: by name; SDKs read
// elements by name, not position).
void write_members(std::string& out, std::string_view action, const json& object) {
  for (const auto& [k, v] : object.items()) write_value(out, action, k, v);
}

std::string_view successful_entry(std::string_view action) {
  if (action == "SendMessageBatch") return "SendMessageBatchResultEntry";
  if (action == "DeleteMessageBatch") return "DeleteMessageBatchResultEntry";
  return "ChangeMessageVisibilityBatchResultEntry";
}

void write_value(std::string& out, std::string_view action, std::string_view name, const json& v) {
  if (name == "Messages" || name == "QueueUrls" || name == "queueUrls" || name == "Successful" ||
      name == "Failed" || name == "Results") {
    const std::string_view item = name == "Messages"     ? "Message"
                                  : name == "Successful" ? successful_entry(action)
                                  : name == "Failed"     ? "BatchResultErrorEntry"
                                  : name == "Results"    ? "ListMessageMoveTasksResultEntry"
                                                         : "QueueUrl";
    for (const json& e : v) {
      if (e.is_object()) {
        out += fmt::format("<{}>", item);
        write_members(out, action, e);
        out += fmt::format("</{}>", item);
      } else {
        element(out, item, scalar_text(e));
      }
    }
    return;
  }
  if (name == "Attributes" || name == "Tags") {
    const bool tags = name == "Tags";
    for (const auto& [k, value] : v.items()) {
      out += tags ? "<Tag>" : "<Attribute>";
      element(out, tags ? "Key" : "Name", k);
      element(out, "Value", scalar_text(value));
      out += tags ? "</Tag>" : "</Attribute>";
    }
    return;
  }
  if (name == "MessageAttributes") {
    for (const auto& [k, value] : v.items()) {
      out += "<MessageAttribute>";
      element(out, "Name", k);
      out += "<Value>";
      for (const char* field : {"StringValue", "BinaryValue", "DataType"}) {
        if (value.contains(field)) element(out, field, scalar_text(value[field]));
      }
      out += "</Value></MessageAttribute>";
    }
    return;
  }
  if (v.is_object()) {
    out += fmt::format("<{}>", name);
    write_members(out, action, v);
    out += fmt::format("</{}>", name);
    return;
  }
  element(out, name, scalar_text(v));
}

}  // namespace

SqsError::SqsError(std::string code_, std::string query_code_, std::string message,
                   int http_status_, bool sender_fault_)
    : std::runtime_error(std::move(message)),
      code(std::move(code_)),
      query_code(std::move(query_code_)),
      http_status(http_status_),
      sender_fault(sender_fault_) {}

[[noreturn]] void fail(std::string_view code, std::string message) {
  throw SqsError::of(code, std::move(message));
}

SqsError SqsError::of(std::string_view code, std::string message) {
  for (const ErrorSpec& e : kErrors) {
    if (e.code == code || e.query_code == code) {
      return SqsError(std::string(e.code), std::string(e.query_code), std::move(message), e.status,
                      e.sender);
    }
  }
  return SqsError(std::string(code), std::string(code), std::move(message), 400, true);
}

std::vector<std::pair<std::string, std::string>> parse_form(std::string_view text) {
  util::FormFault fault = util::FormFault::kNone;
  std::optional<util::FormPairs> pairs =
      util::form_decode(text, util::BadEscape::kRefuse, kMaxFormParameters, fault);
  if (fault == util::FormFault::kTooManyPairs) {
    throw SqsError::of("MalformedQueryString",
                       fmt::format("The request has more than {} parameters.", kMaxFormParameters));
  }
  if (!pairs) {
    throw SqsError::of("MalformedQueryString",
                       "The query string has a '%' not followed by two hex digits.");
  }
  return std::move(*pairs);
}

std::string query_action(const std::vector<std::pair<std::string, std::string>>& params) {
  for (const auto& [k, v] : params) {
    if (k == "Action") return v;
  }
  throw SqsError::of("MissingAction", "The request must contain the parameter Action.");
}

json query_input(std::string_view action,
                 const std::vector<std::pair<std::string, std::string>>& params) {
  auto it = actions().find(action);
  if (it == actions().end()) {
    throw SqsError::of("InvalidAction", fmt::format("The action {} is not valid for this endpoint.",
                                                    std::string(action).substr(0, 64)));
  }
  // Only the action's own parameters become part of the tree (Action, Version, the signature's
  // X-Amz-* and anything else are not looked at), and no deeper than its shapes go.
  Node root;
  for (const auto& [name, value] : params) {
    const std::string_view first = std::string_view(name).substr(0, name.find('.'));
    const bool defined = std::any_of(it->second.begin(), it->second.end(),
                                     [&](const Member& m) { return m.query == first; });
    if (!defined) continue;
    if (static_cast<std::size_t>(std::count(name.begin(), name.end(), '.')) >= kMaxParameterDepth) {
      throw SqsError::of("InvalidParameterValue",
                         fmt::format("The parameter name '{}...' has more than {} parts.",
                                     name.substr(0, 64), kMaxParameterDepth));
    }
    Node* node = &root;
    std::string_view rest = name;
    while (!rest.empty()) {
      const std::size_t dot = rest.find('.');
      node = &node->children[std::string(rest.substr(0, dot))];
      rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    node->value = value;
    node->has_value = true;
  }
  json input = json::object();
  convert(it->second, root, input);
  return input;
}

std::string query_response_xml(std::string_view action, const json& output,
                               std::string_view request_id) {
  std::string out = "<?xml version=\"1.0\"?>";
  out += fmt::format("<{}Response xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">", action);
  // Actions without output (DeleteQueue, DeleteMessage, ...) have no Result element.
  static const std::vector<std::string_view> kNoResult = {
      "DeleteQueue", "DeleteMessage", "PurgeQueue", "SetQueueAttributes", "ChangeMessageVisibility",
      "TagQueue",    "UntagQueue"};
  if (std::find(kNoResult.begin(), kNoResult.end(), action) == kNoResult.end()) {
    out += fmt::format("<{}Result>", action);
    write_members(out, action, output);
    out += fmt::format("</{}Result>", action);
  }
  out += "<ResponseMetadata>";
  element(out, "RequestId", request_id);
  out += fmt::format("</ResponseMetadata></{}Response>", action);
  return out;
}

std::string query_error_xml(const SqsError& error, std::string_view request_id) {
  std::string out = "<?xml version=\"1.0\"?><ErrorResponse><Error>";
  element(out, "Type", error.sender_fault ? "Sender" : "Receiver");
  element(out, "Code", error.query_code);
  element(out, "Message", query_message(error));
  out += "<Detail/></Error>";
  element(out, "RequestId", request_id);
  out += "</ErrorResponse>";
  return out;
}

JsonErrorReply json_error(const SqsError& error) {
  json body = {{"__type", fmt::format("com.amazonaws.sqs#{}", json_type_name(error))},
               {"message", error.what()}};
  return {body.dump(-1, ' ', false, json::error_handler_t::replace),
          error.query_code + (error.sender_fault ? ";Sender" : ";Receiver")};
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  while (!text.empty()) {
    // Characters XML 1.0 cannot carry (controls, invalid UTF-8, U+FFFE/U+FFFF) become U+FFFD so
    // that the document stays well-formed; bodies never have them (SQS's character rule), error
    // messages quoting a client's bytes may.
    const std::size_t bad = invalid_body_character(text).value_or(text.size());
    for (char c : text.substr(0, bad)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        case '\'':
          out += "&apos;";
          break;
        case '\r':
          out += "&#xD;";
          break;
        default:
          out += c;
      }
    }
    if (bad == text.size()) break;
    out += "\xEF\xBF\xBD";
    // Skip the offending byte and the continuation bytes that belong to it.
    std::size_t skip = 1;
    while (skip < 4 && bad + skip < text.size() &&
           (static_cast<unsigned char>(text[bad + skip]) & 0xc0) == 0x80) {
      ++skip;
    }
    text.remove_prefix(bad + skip);
  }
  return out;
}

}  // namespace txmq::server
