// util: what every layer may use and that knows nothing of queues (scope guards; Error is
// defined in error.cc).
#pragma once

#include <utility>

namespace txmq::internal {

// Runs a function when the scope ends, however it ends. It must not throw.
template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F fn_;
};

}  // namespace txmq::internal
