// The SQS actions on queues: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue,
// ListDeadLetterSourceQueues.
#include <fmt/format.h>

#include "server/sqs/digests.h"
#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;

std::string SqsService::queue_url(const Call& c, std::string_view name) const {
  return fmt::format("http://{}/{}/{}", c.host, options_.account, name);
}

std::shared_ptr<const QueueInfo> SqsService::queue_of(Call& c) {
  if (c.queue) return c.queue;  // looked up already (service_call.h)
  const std::string url = string_member(c.input, "QueueUrl", true);
  return catalog_.get(queue_name_of_url(url));
}

json SqsService::create_queue(Call& c) {
  const std::string name = string_member(c.input, "QueueName", true);
  auto q = catalog_.create(name, string_map(c.input, "Attributes"), string_map(c.input, "tags"));
  return {{"QueueUrl", queue_url(c, q->name)}};
}

json SqsService::get_queue_url(Call& c) {
  const std::string name = string_member(c.input, "QueueName", true);
  QueueCatalog::check_name(name);
  auto q = catalog_.get(name);
  return {{"QueueUrl", queue_url(c, q->name)}};
}

json SqsService::list_queues(Call& c) {
  const std::string prefix = string_member(c.input, "QueueNamePrefix", false);
  const Page page = page_of(c.input);
  // One more than asked: whether there is a next page.
  std::vector<std::string> names = catalog_.list(prefix, page.after, page.limit + 1);
  json out = json::object();
  const bool more = names.size() > page.limit;
  if (more) names.resize(page.limit);
  json urls = json::array();
  for (const auto& n : names) urls.push_back(queue_url(c, n));
  if (!urls.empty()) out["QueueUrls"] = std::move(urls);
  if (more && page.paged) out["NextToken"] = base64_encode(names.back());
  return out;
}

json SqsService::delete_queue(Call& c) {
  auto q = queue_of(c);
  catalog_.remove(q->name);
  return json::object();
}

json SqsService::purge_queue(Call& c) {
  auto q = queue_of(c);
  client_.purge(q->topic, q->group);
  // Deduplication is the topic's, on sending: a group queue's purge leaves the source's.
  if (q->fifo && !q->source_queue) client_.forget_dedup_keys(q->topic);
  {
    std::lock_guard lock(attempts_mutex_);
    for (auto it = receive_attempts_.begin(); it != receive_attempts_.end();) {
      if (!it->first.starts_with(q->name + "\n")) {
        ++it;
        continue;
      }
      attempts_bytes_ -= it->second.bytes;
      it = receive_attempts_.erase(it);
    }
  }
  return json::object();
}

json SqsService::list_dead_letter_source_queues(Call& c) {
  auto q = queue_of(c);
  const Page page = page_of(c.input);
  json urls = json::array();
  std::string last;
  bool more = false;
  for (const auto& n : catalog_.dead_letter_sources(q->name)) {
    if (n <= page.after) continue;
    if (urls.size() == page.limit) {
      more = true;
      break;
    }
    urls.push_back(queue_url(c, n));
    last = n;
  }
  json out = {{"queueUrls", urls}};
  if (more && page.paged) out["NextToken"] = base64_encode(last);
  return out;
}

}  // namespace txmq::server
