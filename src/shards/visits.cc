#include "shards/visits.h"

namespace txmq::internal {

VisitPool::~VisitPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void VisitPool::run(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
    // A thread per visit waiting to start, up to the bound: visits of one call run at once.
    if (idle_ < tasks_.size() && threads_.size() < kMaxThreads) {
      try {
        threads_.emplace_back([this] { loop(); });
        return;
      } catch (...) {
        // No thread now: a running one takes the task when it is free; with none, the caller
        // hears of it.
        if (threads_.empty()) {
          tasks_.pop_back();
          throw;
        }
      }
    }
  }
  wake_.notify_one();
}

void VisitPool::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    ++idle_;
    wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping, and nothing is left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();  // a visit catches its own exceptions
    lock.lock();
  }
}

}  // namespace txmq::internal
