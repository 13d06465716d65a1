// Group commit (server/sqs/group_commit.h): the drains that settle a topic's waiting single
// sends and deletes in one transaction each.
#include "server/sqs/group_commit.h"

#include <span>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;

// Queues a call for its topic's next group commit. The call that finds no drain running starts
// one: on a worker it drains the topic itself; on an HTTP thread, which must not block, it posts
// the drain to a worker (one hop per group, not per call), under the lock that shutdown() stops
// the workers under, so that a drain is never posted to workers that have ended.
template <typename Pending>
void SqsService::enqueue(CommitGroups<Pending>& groups,
                         void (SqsService::*drain)(const std::string&), const std::string& topic,
                         Pending pending) {
  if (!pending.call || !pending.call->on_http_thread) {
    if (groups.add(topic, std::move(pending))) (this->*drain)(topic);
    return;
  }
  std::lock_guard lock(posting_mutex_);
  if (stopping_) fail("ServiceUnavailable", "txmq serve is stopping; retry the call.");
  if (groups.add(topic, std::move(pending))) {
    boost::asio::post(workers_, [this, drain, topic] { (this->*drain)(topic); });
  }
}

// Why batches join the group commit: SendMessageBatch and DeleteMessageBatch of concurrent
// callers then share one transaction, as single calls do, instead of paying one each; and a batch
// read on an HTTP thread needs no worker of its own (txmq bench --only serve).
void SqsService::gather(const std::shared_ptr<Call>& call, BatchGather& batch, json success,
                        std::exception_ptr error) {
  std::unique_lock lock(batch.mutex);
  if (error) {
    if (!batch.first_error) batch.first_error = error;
    ++batch.errors;
    batch.failed.push_back(failed_entry(success.at("Id").get<std::string>(), sqs_error_of(error)));
  } else if (success.contains("Code")) {  // an entry refused by its outcome (a stale handle)
    batch.failed.push_back(std::move(success));
  } else {
    batch.successful.push_back(std::move(success));
  }
  if (--batch.left != 0) return;
  lock.unlock();
  // Every entry failed in the database (none refused for its input): the call failed, as a
  // single call would, and the caller's SDK retries it.
  if (batch.errors != 0 && batch.errors == batch.failed.size() && batch.successful.empty()) {
    return reply_error(*call, batch.first_error);
  }
  reply(*call, {{"Successful", std::move(batch.successful)}, {"Failed", std::move(batch.failed)}});
}

void SqsService::queue_entries(const std::shared_ptr<Call>& call,
                               const std::shared_ptr<BatchGather>& batch,
                               const std::vector<std::string>& ids,
                               const std::function<void(std::size_t)>& enqueue) {
  if (ids.empty()) {
    return reply(*call, {{"Successful", json::array()}, {"Failed", std::move(batch->failed)}});
  }
  batch->left = ids.size();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    try {
      enqueue(i);
    } catch (...) {
      for (std::size_t j = i; j < ids.size(); ++j) {
        gather(call, *batch, {{"Id", ids[j]}}, std::current_exception());
      }
      return;
    }
  }
}

// Answers a committed group's calls. When calls wait for the next group, on another worker, so
// that the drain goes on to their transaction at once: writing a group's answers (a socket write
// each, then the next request's read) takes a fair part of a commit's time, and then overlaps
// the next commit's wait for the database instead of delaying it. With none waiting there is
// nothing to overlap, and the hand-over would only add a thread switch: answered here (txmq
// bench --only serve: SendMessageBatch at 4 clients, whose calls all wait in the same group).
// Workers run everything posted before join() returns, also what a drain posts while
// shutdown() waits.
template <typename Pending, typename Outcome>
void SqsService::answer_group(CommitGroups<Pending>& groups, const std::string& topic,
                              std::vector<Pending> group, std::vector<Outcome> outcomes) {
  auto answer = [group = std::move(group), outcomes = std::move(outcomes)] {
    for (std::size_t i = 0; i < group.size(); ++i) group[i].done(outcomes[i], nullptr);
  };
  if (groups.waiting(topic)) return boost::asio::post(workers_, std::move(answer));
  answer();
}

void SqsService::enqueue_send(const std::string& topic, PendingSend pending) {
  enqueue(sends_, &SqsService::drain_sends, topic, std::move(pending));
}

// Group commit: a drain of a topic sends, in one transaction, every single send that arrived
// for it meanwhile, and again until none is left; a failed batch is retried one message at a
// time, so that one message's error stays its own.
// One drain at a time per topic (CommitGroups). More let the database commit their groups
// together, but cost a statement per smaller group: on 2 cores (txmq bench --only serve,
// SendMessage at 16 clients) 8 drains beat one in short runs on a machine loaded by other work
// (about 7,000 calls/s against 4,000) and lost in full runs (6,700-8,100 against 11,400-15,000).
void SqsService::drain_sends(const std::string& topic) {
  for (;;) {
    std::vector<PendingSend> group = sends_.next(topic);
    if (group.empty()) return;
    // Calls answered meanwhile (their deadline passed while the database did not answer) are
    // not sent: their callers were told to retry.
    std::erase_if(group, [](const PendingSend& p) { return p.call && p.call->answered; });
    if (group.empty()) continue;
    counters_.send_groups.fetch_add(1, std::memory_order_relaxed);
    counters_.sends_grouped.fetch_add(group.size(), std::memory_order_relaxed);
    std::vector<OutgoingMessage> messages;
    messages.reserve(group.size());
    for (auto& p : group) messages.push_back(std::move(p.message));
    try {
      std::vector<std::uint64_t> ids = client_.send_batch(topic, messages);
      answer_group(sends_, topic, std::move(group), std::move(ids));
    } catch (const Error& e) {
      if (group.size() == 1 || e.code() == Errc::kNotFound || e.code() == Errc::kCommitUnknown) {
        for (auto& p : group) p.done(0, std::current_exception());
        continue;
      }
      for (std::size_t i = 0; i < group.size(); ++i) {
        try {
          group[i].done(client_.send_batch(topic, std::span(&messages[i], 1)).at(0), nullptr);
        } catch (...) {
          group[i].done(0, std::current_exception());
        }
      }
    } catch (...) {
      for (auto& p : group) p.done(0, std::current_exception());
    }
  }
}

void SqsService::enqueue_delete(const std::string& topic, PendingDelete pending) {
  enqueue(deletes_, &SqsService::drain_deletes, topic, std::move(pending));
}

// Group commit of deletes, as drain_sends: Client::ack settles a batch of receipts together.
void SqsService::drain_deletes(const std::string& topic) {
  for (;;) {
    std::vector<PendingDelete> group = deletes_.next(topic);
    if (group.empty()) return;
    std::erase_if(group, [](const PendingDelete& p) { return p.call && p.call->answered; });
    if (group.empty()) continue;
    counters_.delete_groups.fetch_add(1, std::memory_order_relaxed);
    counters_.deletes_grouped.fetch_add(group.size(), std::memory_order_relaxed);
    std::vector<std::string> receipts;
    receipts.reserve(group.size());
    for (auto& p : group) receipts.push_back(p.receipt);
    try {
      std::vector<Settle> outcomes = client_.ack(topic, receipts);
      answer_group(deletes_, topic, std::move(group), std::move(outcomes));
    } catch (...) {
      for (auto& p : group) p.done(Settle::kNotFound, std::current_exception());
    }
  }
}

}  // namespace txmq::server
