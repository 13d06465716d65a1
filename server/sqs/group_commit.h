#pragma once

// Group commit of the SQS service: single SendMessage and DeleteMessage calls of one topic that
// arrive together are settled in one transaction (SqsService::drain_sends and drain_deletes,
// group_commit.cc). This is the queue of calls waiting for their topic's next transaction.
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace txmq::server {

// Calls waiting for a topic's next group commit, with up to `drains` drains at a time per
// topic: while one waits for its commit, the next takes the calls that arrived meanwhile, and
// the database commits both together. Thread-safe.
template <typename Pending>
struct CommitGroups {
  explicit CommitGroups(int most_drains) : drains(most_drains) {}
  // Queues a call; true when the caller must drain the topic (fewer drains run for it than
  // allowed).
  bool add(const std::string& topic, Pending pending) {
    std::lock_guard lock(mutex);
    auto it = waiting_.find(topic);
    if (it == waiting_.end()) it = waiting_.emplace(topic, Topic{}).first;
    it->second.calls.push_back(std::move(pending));
    if (it->second.running >= drains) return false;
    ++it->second.running;
    return true;
  }
  // Whether calls of `topic` wait for its next group commit.
  bool waiting(const std::string& topic) {
    std::lock_guard lock(mutex);
    auto it = waiting_.find(topic);
    return it != waiting_.end() && !it->second.calls.empty();
  }
  // The calls to settle together next (up to 500); empty when none is left, which ends the
  // caller's drain.
  std::vector<Pending> next(const std::string& topic) {
    std::lock_guard lock(mutex);
    std::vector<Pending> group;
    auto it = waiting_.find(topic);
    if (it == waiting_.end()) return group;
    std::deque<Pending>& calls = it->second.calls;
    if (calls.empty()) {
      if (--it->second.running == 0) waiting_.erase(it);
      return group;
    }
    const std::size_t n = std::min<std::size_t>(calls.size(), 500);
    group.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      group.push_back(std::move(calls.front()));
      calls.pop_front();
    }
    return group;
  }

 private:
  struct Topic {
    std::deque<Pending> calls;
    int running = 0;  // drains
  };
  const int drains;
  std::mutex mutex;
  std::map<std::string, Topic, std::less<>> waiting_;
};

}  // namespace txmq::server
