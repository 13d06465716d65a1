#include "wait/subscriber.h"

#include "wait/waiters.h"

namespace txmq::internal {

bool Subscriber::fire() {
  std::function<void()> call;
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kArmed) return false;
    state_ = State::kCalling;
    caller_ = std::this_thread::get_id();
    call.swap(wake_);
  }
  try {
    call();
  } catch (...) {
    // wake must not throw (client.h); one that does must not stop the calls of the others.
  }
  call = nullptr;  // its captures go before cancel() may return
  {
    std::lock_guard lock(mutex_);
    state_ = State::kCalled;
  }
  called_.notify_all();
  return true;
}

void Subscriber::cancel() {
  std::function<void()> never_called;  // its captures go after the lock is released
  std::unique_lock lock(mutex_);
  // A call on this thread is the wake function destroying its own subscription: no waiting.
  if (state_ == State::kCalling && caller_ != std::this_thread::get_id()) {
    called_.wait(lock, [this] { return state_ != State::kCalling; });
  }
  if (state_ == State::kArmed) {
    state_ = State::kCancelled;
    never_called.swap(wake_);
  }
}

bool Subscriber::cancelled() {
  std::lock_guard lock(mutex_);
  return state_ == State::kCancelled;
}

void Subscriber::end() {
  cancel();
  if (waiter) waiter->forget(*this);
  for (const std::shared_ptr<Subscriber>& part : parts) {
    part->cancel();
    part->waiter->forget(*part);
  }
}

}  // namespace txmq::internal
