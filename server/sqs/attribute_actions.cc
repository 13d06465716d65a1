// The SQS actions on a queue's attributes and tags: GetQueueAttributes, SetQueueAttributes,
// TagQueue, UntagQueue, ListQueueTags.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;

json SqsService::get_queue_attributes(Call& c) {
  auto q = queue_of(c);
  std::vector<std::string> names = string_list(c.input, "AttributeNames");
  const bool all = std::find(names.begin(), names.end(), "All") != names.end();
  std::shared_ptr<const QueueInfo> source;
  if (q->source_queue) source = catalog_.find(*q->source_queue);
  std::map<std::string, std::string> values =
      effective_attributes(*q, c.region, options_.account, source.get());
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
  // SQS answers no keys at all as it answers an empty one.
  if (keys.empty()) check_tag_key("");
  for (const std::string& k : keys) check_tag_key(k);
  catalog_.set_tags(q->name, {}, keys);
  return json::object();
}

json SqsService::list_queue_tags(Call& c) {
  auto q = queue_of(c);
  json out = json::object();
  if (!q->tags.empty()) out["Tags"] = q->tags;
  return out;
}

}  // namespace txmq::server
