#pragma once

// Refusing a request with one of SQS's errors, by the name SQS's JSON protocol gives it
// ("QueueDoesNotExist", "InvalidParameterValue", ...): the wire layer knows each one's HTTP
// status, fault side and Query-protocol code.
#include <string>
#include <string_view>

namespace txmq::server {

[[noreturn]] void fail(std::string_view code, std::string message);

}  // namespace txmq::server
