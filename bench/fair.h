#pragma once
// Fair topics under a noisy neighbour: the quiet tenants' dwell time (send to receive) while one
// tenant floods a topic that its consumers cannot keep up with.

#include <string>

#include "harness.h"
#include "txmq/client.h"

namespace txmq::bench {

// What one run of the noisy-neighbour load measured.
struct TenantDwell {
  Latencies quiet;  // dwell of the quiet tenants' messages, ms
  Latencies noisy;  // of the noisy tenant's
  std::uint64_t quiet_unreceived = 0;  // still waiting when the run ended (counted at its end)
  double seconds = 0;
};

// Ten tenants send `rate` messages per second in all for `seconds` (one of them 90 % when
// `noisy`, else only the nine quiet ones' 10 %), each with its tenant when `tenants`;
// `consumers` threads receive one message at a time and spend `cost_ms` on each before acking
// it. Dwell is counted at the receive.
TenantDwell noisy_neighbour(Client& client, const std::string& topic, bool noisy, bool tenants,
                            double rate, double seconds, int consumers, double cost_ms);

}  // namespace txmq::bench
