#pragma once

// One request to the SQS service in flight, as the service and its actions see it (private to
// server/sqs/).
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/sqs/service.h"

namespace txmq::server {

std::string new_request_id();

// A standard queue's first MessageGroupId makes its topic fair (docs/sqs.md, "Fair queues"): a
// schema change of its tables, once, which only a worker may wait for.
bool becomes_fair(const QueueInfo& q, const nlohmann::json& entry);

struct SqsService::Call : SqsRequest {
  HttpRequest request;
  std::string request_id = new_request_id();
  Responder respond;
  std::atomic<bool> answered{false};
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  // When it gets 503 if not answered by then (ServiceOptions::request_timeout), as
  // steady_clock ticks; a long poll moves it past its wait.
  std::atomic<std::chrono::steady_clock::rep> deadline{0};
  // Read (read_request) on the HTTP thread already: its worker goes straight to dispatch.
  bool read = false;
  // Dispatched on the HTTP thread, which must not block: a group commit it starts runs on a
  // worker (SqsService::enqueue).
  bool on_http_thread = false;
  // The queue it names, once looked up: on the HTTP thread from the catalog's cache, or by
  // dispatch for an action that needs it in two places.
  std::shared_ptr<const QueueInfo> queue;
};

// See SqsService::gather.
struct SqsService::BatchGather {
  std::mutex mutex;
  std::size_t left = 0;  // entries whose outcome has not come yet
  std::size_t errors = 0;
  std::exception_ptr first_error;
  nlohmann::json successful = nlohmann::json::array();
  nlohmann::json failed = nlohmann::json::array();  // refused entries first
};

}  // namespace txmq::server
