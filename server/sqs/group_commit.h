#pragma once

// Group commit of the SQS service: single SendMessage and DeleteMessage calls of one topic that
// arrive together are settled in one transaction (SqsService::drain_sends and drain_deletes,
// group_commit.cc). This is the queue of calls waiting for their topic's next transaction.
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace txmq::server {

// Calls waiting for a topic's next group commit, with one drain at a time per topic.
// Thread-safe.
template <typename Pending>
struct CommitGroups {
  // Queues a call; true when the caller must drain the topic (no drain runs for it).
  bool add(const std::string& topic, Pending pending) {
    std::lock_guard lock(mutex);
    waiting[topic].push_back(std::move(pending));
    return running.insert(topic).second;
  }
  // The calls to settle together next (up to 500); empty when none is left, which ends the
  // caller's drain.
  std::vector<Pending> next(const std::string& topic) {
    std::lock_guard lock(mutex);
    std::vector<Pending> group;
    auto it = waiting.find(topic);
    if (it == waiting.end() || it->second.empty()) {
      if (it != waiting.end()) waiting.erase(it);
      running.erase(topic);
      return group;
    }
    while (!it->second.empty() && group.size() < 500) {
      group.push_back(std::move(it->second.front()));
      it->second.pop_front();
    }
    return group;
  }

 private:
  std::mutex mutex;
  std::map<std::string, std::deque<Pending>, std::less<>> waiting;
  std::set<std::string, std::less<>> running;
};

}  // namespace txmq::server
