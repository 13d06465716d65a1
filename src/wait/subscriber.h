// A subscription to a channel's waiter: Client::subscribe's wake function, called at most once.
#pragma once

#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace txmq::internal {

class TopicWaiter;

// A subscription's state, shared by the Subscription, its waiter's list and the dispatcher.
struct Subscriber {
  Subscriber(std::function<void()> wake_function, std::shared_ptr<TopicWaiter> on)
      : waiter(std::move(on)), wake_(std::move(wake_function)) {}

  // Calls wake unless it was called or cancelled before; false when it did not call it.
  bool fire();
  // After it returns, wake is not called (it waits for a call running on another thread).
  void cancel();
  bool cancelled();
  // Cancels it and takes it (and its parts) off their waiters' lists: the subscription ended.
  void end();

  // The waiter it is listed on; none for a subscription to a topic sharded over servers, which
  // holds one part per server (shard_router.cc) and fires when the first of them does.
  const std::shared_ptr<TopicWaiter> waiter;
  std::vector<std::shared_ptr<Subscriber>> parts;
  // Guarded by the waiter's mutex: whether it is on the waiter's list, and where.
  bool listed = false;
  std::list<std::shared_ptr<Subscriber>>::iterator place;

 private:
  enum class State { kArmed, kCalling, kCalled, kCancelled };
  std::function<void()> wake_;  // released once called
  std::mutex mutex_;
  std::condition_variable called_;
  State state_ = State::kArmed;
  std::thread::id caller_;
};

}  // namespace txmq::internal
