#include "util/backoff.h"

#include <algorithm>
#include <random>

namespace txmq::internal {

std::chrono::microseconds Backoff::delay(int attempt) const {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return delay(attempt, std::uniform_real_distribution<double>(0.0, 1.0)(rng));
}

std::chrono::microseconds Backoff::delay(int attempt, double unit) const {
  int shift = std::clamp(attempt - 1, 0, 40);
  double window = static_cast<double>(base.count()) * static_cast<double>(1ULL << std::min(shift, 40));
  window = std::min(window, static_cast<double>(cap.count()));
  double wait = window / 2 + (window / 2) * std::clamp(unit, 0.0, 1.0);
  return std::chrono::microseconds(static_cast<std::int64_t>(wait));
}

}  // namespace txmq::internal
