// ReceiveMessage and its long poll: a state machine of claiming, waiting on a subscription and a
// timer, and finishing once; FIFO ReceiveRequestAttemptId answers kept for retries.
#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "server/sqs/digests.h"
#include "server/sqs/messages.h"
#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

namespace asio = boost::asio;
using json = nlohmann::json;

namespace {

constexpr auto kAttemptIdsKeptFor = std::chrono::minutes(5);
// FIFO receive attempts remembered at once, and the bytes of their answers.
constexpr std::size_t kMaxAttemptIds = 10000;
constexpr std::size_t kMaxAttemptBytes = 64u << 20;

std::int64_t epoch_ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

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
      attributes["DeadLetterQueueSourceArn"] = queue_arn(poll.call->region, options_.account, *source);
    }
  }
  if (wanted("MessageGroupId") && (m.key || m.tenant)) {
    attributes["MessageGroupId"] = m.key ? *m.key : *m.tenant;  // a fair queue's tenant
  }
  if (q.fifo) {
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
  const std::int64_t wait = int_member(in, "WaitTimeSeconds").value_or(q->wait_seconds);
  if (wait < 0 || wait > 20) {
    fail("InvalidParameterValue",
         fmt::format("Value {} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 "
                     "and <= 20, if provided.",
                     wait));
  }
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

}  // namespace txmq::server
