#pragma once

#include <chrono>
#include <cstdint>

namespace txmq::internal {

// Exponential backoff with full jitter: attempt k (from 1) waits a uniform random time in
// [base * 2^(k-1) / 2, base * 2^(k-1)], capped at `cap`. Half the window is kept so that a retry
// never comes back at once, the other half spreads competing clients apart.
struct Backoff {
  std::chrono::microseconds base{5000};
  std::chrono::microseconds cap{std::chrono::seconds(1)};

  std::chrono::microseconds delay(int attempt) const;
  // The same, with the random draw given (0 <= unit < 1): pure, for tests.
  std::chrono::microseconds delay(int attempt, double unit) const;
};

}  // namespace txmq::internal
