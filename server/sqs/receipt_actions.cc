// The SQS actions on received messages, by their ReceiptHandle: DeleteMessage (through the group
// commit, group_commit.cc), DeleteMessageBatch, ChangeMessageVisibility and its batch.
#include <fmt/format.h>

#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;

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

// SQS's refusal of a ReceiptHandle that is well formed but no longer leases its message.
SqsError stale_handle(std::string_view handle, std::string_view reason) {
  return SqsError::of("InvalidParameterValue",
                      fmt::format("Value {} for parameter ReceiptHandle is invalid. Reason: {}",
                                  handle, reason));
}

// SQS: a standard queue's stale handle still deletes (txmq's fencing decides whether the
// message goes: only if nobody received it since); a FIFO queue's is refused.
std::optional<SqsError> delete_outcome(const QueueInfo& q, Settle outcome,
                                       std::string_view handle) {
  if (outcome == Settle::kOk || !q.fifo) return std::nullopt;
  return stale_handle(handle, "The receipt handle has expired.");
}

}  // namespace

void SqsService::delete_message(const std::shared_ptr<Call>& call) {
  auto q = queue_of(*call);
  std::string handle = string_member(call->input, "ReceiptHandle", true);
  const std::string receipt = receipt_of(catalog_, *q, handle);
  enqueue_delete(q->topic, {call, receipt, [this, call, q, handle = std::move(handle)](
                                               Settle outcome, std::exception_ptr error) {
                              if (error) return reply_error(*call, error);
                              if (auto e = delete_outcome(*q, outcome, handle)) {
                                return reply_error(*call, std::make_exception_ptr(*e));
                              }
                              reply(*call, json::object());
                            }});
}

// Its entries join the topic's group commit of deletes (gather answers the call).
void SqsService::delete_message_batch(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  auto q = queue_of(c);
  const json& entries = batch_entries(c.input, 10, "DeleteMessageBatchRequestEntry");
  auto batch = std::make_shared<BatchGather>();
  std::vector<std::string> ids;
  std::vector<std::string> handles;
  std::vector<std::string> receipts;
  for (const auto& e : entries) {
    std::string id = e["Id"].get<std::string>();
    try {
      std::string handle = string_member(e, "ReceiptHandle", true);
      receipts.push_back(receipt_of(catalog_, *q, handle));
      ids.push_back(std::move(id));
      handles.push_back(std::move(handle));
    } catch (const SqsError& error) {
      batch->failed.push_back(failed_entry(id, error));
    }
  }
  queue_entries(call, batch, ids, [&](std::size_t i) {
    enqueue_delete(q->topic, {call, std::move(receipts[i]),
                              [this, call, q, batch, id = ids[i], handle = std::move(handles[i])](
                                  Settle outcome, std::exception_ptr error) {
                                if (error) return gather(call, *batch, {{"Id", id}}, error);
                                if (auto e = delete_outcome(*q, outcome, handle)) {
                                  return gather(call, *batch, failed_entry(id, *e), nullptr);
                                }
                                gather(call, *batch, {{"Id", id}}, nullptr);
                              }});
  });
}

namespace {

std::optional<SqsError> visibility_outcome(Settle outcome, std::string_view handle) {
  if (outcome == Settle::kOk) return std::nullopt;
  return stale_handle(handle,
                      "Message does not exist or is not available for visibility timeout change.");
}

}  // namespace

json SqsService::change_message_visibility(Call& c) {
  auto q = queue_of(c);
  const std::string handle = string_member(c.input, "ReceiptHandle", true);
  const std::string receipt = receipt_of(catalog_, *q, handle);
  if (!int_member(c.input, "VisibilityTimeout")) {
    fail("MissingParameter", "The request must contain the parameter VisibilityTimeout.");
  }
  const std::int64_t seconds = int_in(c.input, "VisibilityTimeout", 0, 43200, 0);
  if (auto e = visibility_outcome(client_.extend(q->topic, receipt, std::chrono::seconds(seconds)),
                                  handle)) {
    throw *e;
  }
  return json::object();
}

json SqsService::change_message_visibility_batch(Call& c) {
  auto q = queue_of(c);
  const json& entries = batch_entries(c.input, 10, "ChangeMessageVisibilityBatchRequestEntry");
  json successful = json::array();
  json failed = json::array();
  for (const auto& e : entries) {
    const std::string id = e["Id"].get<std::string>();
    try {
      const std::string handle = string_member(e, "ReceiptHandle", true);
      const std::string receipt = receipt_of(catalog_, *q, handle);
      const std::int64_t seconds = int_in(e, "VisibilityTimeout", 0, 43200, 0);
      if (auto error = visibility_outcome(
              client_.extend(q->topic, receipt, std::chrono::seconds(seconds)), handle)) {
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
