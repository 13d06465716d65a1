// The SQS actions that send: SendMessage (through the group commit, group_commit.cc) and
// SendMessageBatch (also Txmq.SendMessageBatch: up to 10,000 entries, all or nothing).
#include <fmt/format.h>

#include "server/auth/crypto.h"
#include "server/sqs/digests.h"
#include "server/sqs/messages.h"
#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;

namespace {

constexpr std::size_t kMaxBatchBytes = 1 << 20;

// A consumer group cannot be sent to alone: a send reaches every group of the topic.
void check_sendable(const QueueInfo& q) {
  if (!q.source_queue) return;
  fail("UnsupportedOperation",
       fmt::format("Queue {} is a consumer-group queue of {}: send to {}, and every one of its "
                   "consumer-group queues receives the message.",
                   q.name, *q.source_queue, *q.source_queue));
}

bool names_group(const json& entry) {
  const auto group = entry.find("MessageGroupId");
  return group != entry.end() && group->is_string() &&
         !group->get_ref<const std::string&>().empty();
}

// One message of SendMessage or a batch entry, checked against SQS's rules and the queue's
// settings; returns the message to send.
OutgoingMessage outgoing(const json& entry, const QueueInfo& q, bool batch_entry) {
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
    // SQS's wording differs between SendMessage and a batch's entry.
    fail("InvalidParameterValue",
         fmt::format("One or more parameters {}. Reason: Message must be shorter than {} bytes.",
                     batch_entry ? "cannot be validated" : "are invalid", q.maximum_message_size));
  }
  const auto delay = int_member(entry, "DelaySeconds");
  // A FIFO queue takes DelaySeconds 0 (which leaves the queue's delay in force), as SQS does.
  if (delay && !(q.fifo && *delay == 0)) {
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
  m.delay = std::chrono::seconds(q.fifo ? q.delay_seconds : delay.value_or(q.delay_seconds));
  auto id_member = [&](const char* name) -> std::string {
    std::string v = string_member(entry, name, false);
    if ((!v.empty() || entry.contains(name)) && !punctuation_id(v)) {
      fail("InvalidParameterValue",
           fmt::format("Value {} for parameter {} is invalid. Reason: {} can only include "
                       "alphanumeric and punctuation characters. 1 to 128 in length.",
                       v.substr(0, 200), name, name));
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
  } else if (!group.empty() && q.fair) {
    m.tenant = group;  // a fair queue's tenant (docs/sqs.md, "Fair queues")
  }
  return m;
}

// SQS refuses a FIFO batch as a whole (not entry by entry) when an entry lacks its group, or its
// deduplication id where the queue does not deduplicate by content.
void check_fifo_batch(const json& entries, const QueueInfo& q) {
  for (const json& e : entries) {
    auto given = [&](const char* name) {
      auto it = e.find(name);
      return it != e.end() && !it->is_null();
    };
    if (!given("MessageGroupId")) {
      fail("MissingParameter", "The request must contain the parameter MessageGroupId.");
    }
    if (!q.content_based_deduplication && !given("MessageDeduplicationId")) {
      fail("InvalidParameterValue",
           "The queue should either have ContentBasedDeduplication enabled or "
           "MessageDeduplicationId provided explicitly");
    }
  }
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

bool becomes_fair(const QueueInfo& q, const json& entry) {
  return !q.fifo && !q.fair && names_group(entry);
}

void SqsService::send_message(const std::shared_ptr<Call>& call) {
  auto q = queue_of(*call);
  check_sendable(*q);
  if (becomes_fair(*q, call->input)) q = catalog_.make_fair(q->name);
  OutgoingMessage m = outgoing(call->input, *q, false);
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

json SqsService::send_message_batch(Call& c, std::size_t max_entries) {
  auto q = queue_of(c);
  check_sendable(*q);
  const json& entries = batch_entries(c.input, max_entries, "SendMessageBatchRequestEntry");
  if (q->fifo) check_fifo_batch(entries, *q);
  for (const auto& e : entries) {
    if (becomes_fair(*q, e)) q = catalog_.make_fair(q->name);
  }
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
      messages.push_back(outgoing(e, *q, true));
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

void SqsService::send_message_batch_grouped(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  auto q = queue_of(c);
  check_sendable(*q);
  const json& entries = batch_entries(c.input, 10, "SendMessageBatchRequestEntry");
  for (const auto& e : entries) {
    if (becomes_fair(*q, e)) q = catalog_.make_fair(q->name);  // never on an HTTP thread
  }
  std::size_t total = 0;
  for (const auto& e : entries) total += entry_bytes(e);
  if (total > kMaxBatchBytes) {
    fail("BatchRequestTooLong",
         fmt::format("Batch requests cannot be longer than {} bytes. You have sent {} bytes.",
                     kMaxBatchBytes, total));
  }
  auto batch = std::make_shared<BatchGather>();
  std::vector<std::string> ids;
  std::vector<OutgoingMessage> messages;
  std::vector<json> answers;
  for (const auto& e : entries) {
    std::string id = e["Id"].get<std::string>();
    try {
      OutgoingMessage m = outgoing(e, *q, true);
      json answer = sent_digests(m);
      answer["Id"] = id;
      ids.push_back(std::move(id));
      messages.push_back(std::move(m));
      answers.push_back(std::move(answer));
    } catch (const SqsError& error) {
      batch->failed.push_back(failed_entry(id, error));
    }
  }
  queue_entries(call, batch, ids, [&](std::size_t i) {
    enqueue_send(q->topic, {call, std::move(messages[i]),
                            [this, call, q, batch, answer = std::move(answers[i])](
                                std::uint64_t id, std::exception_ptr error) mutable {
                              if (!error) sent_ids(answer, *q, id);
                              gather(call, *batch, std::move(answer), error);
                            }});
  });
}

}  // namespace txmq::server
