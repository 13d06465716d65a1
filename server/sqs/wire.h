#pragma once

// SQS's two wire protocols. Actions work on the AWS JSON 1.0 shapes of their input and output
// (nlohmann::json); this file turns Query-protocol requests into those inputs and outputs into
// Query XML, and writes errors in each protocol's shape. The shapes follow botocore's SQS model
// (2012-11-05: the Query protocol's flattened lists and maps, and the JSON protocol's names).
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace txmq::server {

// An error for the client, by its JSON-protocol name ("QueueDoesNotExist"); `query_code` is the
// Query protocol's ("AWS.SimpleQueueService.NonExistentQueue").
struct SqsError : std::runtime_error {
  SqsError(std::string code_, std::string query_code_, std::string message, int http_status_,
           bool sender_fault_);
  // The error SQS gives under that name, with its status, fault side and Query code. Accepts
  // the Query code too ("QueueAlreadyExists"). An unknown name is a sender error with 400.
  static SqsError of(std::string_view code, std::string message);

  std::string code;
  std::string query_code;
  int http_status;
  bool sender_fault;
};

// Refuses a request with one of SQS's errors, by the name SQS's JSON protocol gives it
// ("QueueDoesNotExist", "InvalidParameterValue", ...): throws SqsError::of(code, message).
[[noreturn]] void fail(std::string_view code, std::string message);

// application/x-www-form-urlencoded: '&'-separated name=value pairs, '+' is a space, %XX a byte.
// Throws SqsError (MalformedQueryString) for a bad escape.
std::vector<std::pair<std::string, std::string>> parse_form(std::string_view text);

// The Query request's Action (MissingAction when absent).
std::string query_action(const std::vector<std::pair<std::string, std::string>>& params);
// The action's JSON 1.0 input from Query parameters: flattened lists and maps become arrays
// and objects, integers become numbers (InvalidParameterValue when they are not integers).
nlohmann::json query_input(std::string_view action,
                           const std::vector<std::pair<std::string, std::string>>& params);

// The Query protocol's response document for an action's JSON 1.0 output.
std::string query_response_xml(std::string_view action, const nlohmann::json& output,
                               std::string_view request_id);
std::string query_error_xml(const SqsError& error, std::string_view request_id);

struct JsonErrorReply {
  std::string body;                // {"__type": "com.amazonaws.sqs#Code", "message": ...}
  std::string query_error_header;  // x-amzn-query-error: "QueryCode;Sender"
};
JsonErrorReply json_error(const SqsError& error);

// XML character data and attribute values: & < > " ' escaped, and \r as &#xD; so that it
// survives an XML parser's line-end normalisation. A character outside SQS's (and XML's) set,
// or a byte that is not UTF-8, becomes U+FFFD.
std::string xml_escape(std::string_view text);

}  // namespace txmq::server
