// Retry delays: min(max, initial * multiplier^(n-1)) for the n-th failed delivery, shortened at
// random by up to `jitter` of itself (TopicOptions::retry).
#include "engine/retry.h"

#include <fmt/format.h>

#include <cmath>
#include <random>


namespace txmq::internal {
namespace {

// The exponent is capped so that POW stays finite (10^64 still is); the cap then applies.
constexpr std::int64_t kMaxExponent = 64;

double jitter_factor(const RetryPolicy& policy) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return 1.0 - policy.jitter * std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

std::string retry_delay_sql(std::string_view failures_before) {
  return fmt::format("CAST(LEAST(?, ? * POW(?, LEAST({}, {}))) * ? AS SIGNED)", failures_before,
                     kMaxExponent);
}

void bind_retry_delay(std::vector<Param>& params, const RetryPolicy& policy) {
  params.push_back(static_cast<double>(policy.max.count()));
  params.push_back(static_cast<double>(policy.initial.count()));
  params.push_back(policy.multiplier);
  params.push_back(jitter_factor(policy));
}

Micros retry_delay(const RetryPolicy& policy, std::int64_t failures_before) {
  const double exponent = static_cast<double>(std::clamp<std::int64_t>(failures_before, 0,
                                                                       kMaxExponent));
  const double base = std::min(static_cast<double>(policy.max.count()),
                               static_cast<double>(policy.initial.count()) *
                                   std::pow(policy.multiplier, exponent));
  return Micros(static_cast<std::int64_t>(base * jitter_factor(policy)));
}

}  // namespace txmq::internal
