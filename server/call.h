#pragma once

// One request to the SQS service, as the service and its actions see it (private to server/).
#include <atomic>
#include <chrono>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/service.h"

namespace txmq::server {

std::string new_request_id();

struct SqsService::Call {
  enum class Protocol { kQuery, kJson };
  Protocol protocol = Protocol::kJson;
  HttpRequest request;
  std::string action;
  bool txmq_action = false;  // X-Amz-Target: Txmq.<Action>
  nlohmann::json input;
  std::string host;  // the Host header: queue URLs are built from it
  std::string path;  // the request's path, without its query
  std::string request_id = new_request_id();
  Responder respond;
  std::atomic<bool> answered{false};
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

}  // namespace txmq::server
