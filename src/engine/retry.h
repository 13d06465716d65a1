// Retry delays after a failed delivery, in C++ and as SQL.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.h"
#include "txmq/types.h"

namespace txmq::internal {

// Retry delays (retry.cc). retry_delay_sql is an SQL expression for the delay in microseconds
// after a failed delivery that had `failures_before` failed deliveries before it, with four
// placeholders that bind_retry_delay binds (jitter drawn once per statement).
std::string retry_delay_sql(std::string_view failures_before);
void bind_retry_delay(std::vector<Param>& params, const RetryPolicy& policy);
Micros retry_delay(const RetryPolicy& policy, std::int64_t failures_before);

}  // namespace txmq::internal
