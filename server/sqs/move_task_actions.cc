// The SQS actions of dead-letter redrive: StartMessageMoveTask, ListMessageMoveTasks,
// CancelMessageMoveTask (the tasks themselves: move_tasks.h).
#include <fmt/format.h>

#include "server/sqs/inputs.h"
#include "server/sqs/move_tasks.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"
#include "util/codec.h"

namespace txmq::server {

using json = nlohmann::json;

namespace {

constexpr std::size_t kMaxHandle = 1024;

// A TaskHandle, as SQS makes them: the base64 of {"taskId": ..., "sourceArn": ...}.
std::string task_handle(const std::string& id, const std::string& source_arn) {
  return util::base64_encode(json{{"taskId", id}, {"sourceArn", source_arn}}.dump());
}

struct HandleParts {
  std::string id;
  std::string source_arn;
};

std::optional<HandleParts> read_handle(std::string_view handle) {
  if (handle.size() > kMaxHandle) return std::nullopt;
  const std::optional<std::string> text = util::base64_decode(handle);
  if (!text) return std::nullopt;
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("taskId") || !j["taskId"].is_string() ||
      !j.contains("sourceArn") || !j["sourceArn"].is_string()) {
    return std::nullopt;
  }
  return HandleParts{j["taskId"].get<std::string>(), j["sourceArn"].get<std::string>()};
}

}  // namespace

std::shared_ptr<const QueueInfo> SqsService::queue_of_arn(const std::string& arn,
                                                          const char* parameter) {
  std::shared_ptr<const QueueInfo> q;
  if (auto name = name_of_arn(arn, options_.regions, options_.account)) q = catalog_.find(*name);
  if (!q) {
    fail("ResourceNotFoundException",
         fmt::format("The resource that you specified for the {} parameter doesn't exist.",
                     parameter));
  }
  return q;
}

json SqsService::start_message_move_task(Call& c) {
  const std::string source_arn = string_member(c.input, "SourceArn", true);
  const std::string destination_arn = string_member(c.input, "DestinationArn", false);
  std::optional<int> rate;
  if (int_member(c.input, "MaxNumberOfMessagesPerSecond")) {
    rate = static_cast<int>(int_in(c.input, "MaxNumberOfMessagesPerSecond", 1, 500, 500));
  }
  auto source = queue_of_arn(source_arn, "SourceArn");
  if (catalog_.dead_letter_sources(source->name).empty()) {
    fail("InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue.");
  }
  std::shared_ptr<const QueueInfo> destination;
  std::optional<std::string> given_destination;
  if (!destination_arn.empty()) {
    destination = queue_of_arn(destination_arn, "DestinationArn");
    if (destination->name == source->name) {
      fail("InvalidParameterValue", "Source and destination queues must be different.");
    }
    if (destination->fifo != source->fifo) {
      fail("InvalidParameterValue",
           "The destination queue must be of the same type (standard or FIFO) as the source "
           "queue.");
    }
    if (destination->source_queue) {
      fail("InvalidParameterValue",
           "The destination cannot be a consumer-group queue: name the queue it reads.");
    }
    given_destination = destination_arn;
  }
  const std::string id =
      move_tasks_->start_task(*source, destination.get(), rate, source_arn, given_destination);
  return {{"TaskHandle", task_handle(id, source_arn)}};
}

json SqsService::cancel_message_move_task(Call& c) {
  const std::string handle = string_member(c.input, "TaskHandle", true);
  const std::optional<HandleParts> parts = read_handle(handle);
  std::optional<std::string> source;
  if (parts) source = name_of_arn(parts->source_arn, options_.regions, options_.account);
  if (!source) fail("ResourceNotFoundException", "Task does not exist.");
  const std::uint64_t moved = move_tasks_->cancel(parts->id, *source);
  return {{"ApproximateNumberOfMessagesMoved", moved}};
}

json SqsService::list_message_move_tasks(Call& c) {
  const std::string source_arn = string_member(c.input, "SourceArn", true);
  const std::size_t limit = static_cast<std::size_t>(int_in(c.input, "MaxResults", 1, 10, 1));
  auto source = queue_of_arn(source_arn, "SourceArn");
  json results = json::array();
  for (const MoveTaskInfo& task : move_tasks_->list(source->name, limit)) {
    json r = {{"Status", task.status},
              {"SourceArn", task.source_arn},
              {"ApproximateNumberOfMessagesMoved", task.moved},
              {"ApproximateNumberOfMessagesToMove", task.to_move},
              {"StartedTimestamp", task.started_ms}};
    if (task.status == "RUNNING") r["TaskHandle"] = task_handle(task.id, task.source_arn);
    if (task.destination_arn) r["DestinationArn"] = *task.destination_arn;
    if (task.rate) r["MaxNumberOfMessagesPerSecond"] = *task.rate;
    if (task.status == "FAILED") r["FailureReason"] = task.failure_reason;
    results.push_back(std::move(r));
  }
  return {{"Results", std::move(results)}};
}

}  // namespace txmq::server
