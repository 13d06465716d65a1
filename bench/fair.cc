// Fair topics under a noisy neighbour (bench --only fair).
#include "fair.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace txmq::bench {
namespace {

constexpr int kTenants = 10;       // tenant 0 is the noisy one
constexpr int kProducers = 4;      // sending threads, each a quarter of the rate
constexpr double kGraceSeconds = 5;  // after the sends, for the consumers to catch up

// The n-th send's tenant: nine in ten are the noisy tenant's, the tenth goes to the quiet ones
// in turn; without the noisy tenant only the tenth sends are made.
int tenant_of(std::uint64_t n) { return n % 10 != 0 ? 0 : 1 + static_cast<int>(n / 10 % 9); }

}  // namespace

TenantDwell noisy_neighbour(Client& client, const std::string& topic, bool noisy, bool tenants,
                            double rate, double seconds, int consumers, double cost_ms) {
  TenantDwell out;
  std::mutex mutex;
  std::atomic<std::uint64_t> quiet_sent{0};
  std::atomic<std::uint64_t> quiet_received{0};
  std::atomic<bool> sending{true};
  std::atomic<bool> stop{false};
  const auto start = SteadyClock::now();
  const auto interval = std::chrono::duration<double>(kProducers / rate);

  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 0;; ++i) {
        // The send schedule of this producer; late sends go at once (no catching up by skipping).
        const auto due = start + std::chrono::duration_cast<SteadyClock::duration>(interval * i);
        if (due - start >= std::chrono::duration<double>(seconds)) break;
        std::this_thread::sleep_until(due);
        const std::uint64_t n = i * kProducers + static_cast<std::uint64_t>(p);
        const int tenant = tenant_of(n);
        if (tenant == 0 && !noisy) continue;
        SendOptions o;
        if (tenants) o.tenant = fmt::format("tenant-{}", tenant);
        client.send(topic, fmt::format("{} {}", tenant, monotonic_ns()), o);
        if (tenant != 0) ++quiet_sent;
      }
    });
  }
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&] {
      ReceiveOptions ro;
      ro.max_messages = 1;
      ro.wait = std::chrono::milliseconds(200);
      while (!stop) {
        std::vector<Message> got = client.receive(topic, ro);
        const std::int64_t now = monotonic_ns();
        for (Message& m : got) {
          int tenant = 0;
          long long sent = 0;
          if (std::sscanf(m.payload.c_str(), "%d %lld", &tenant, &sent) != 2) continue;
          const double ms = static_cast<double>(now - sent) / 1e6;
          {
            std::lock_guard lock(mutex);
            (tenant == 0 ? out.noisy : out.quiet).add(ms);
          }
          if (tenant != 0) ++quiet_received;
          // The work: a fixed time per message, so that the consumers' capacity is known.
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(cost_ms));
          client.ack(topic, m.receipt);
        }
      }
    });
  }
  for (int p = 0; p < kProducers; ++p) threads[static_cast<std::size_t>(p)].join();
  sending = false;
  // The quiet tenants' last messages may still be behind a backlog: a few seconds more.
  const auto grace_end = SteadyClock::now() + std::chrono::duration<double>(kGraceSeconds);
  while (quiet_received < quiet_sent && SteadyClock::now() < grace_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.seconds = seconds_between(start, SteadyClock::now());
  stop = true;
  for (std::size_t i = kProducers; i < threads.size(); ++i) threads[i].join();
  // Quiet messages never received: counted with the grace time as their dwell (a lower bound).
  out.quiet_unreceived = quiet_sent - std::min<std::uint64_t>(quiet_sent, quiet_received);
  const double until_end_ms = kGraceSeconds * 1000;
  for (std::uint64_t i = 0; i < out.quiet_unreceived; ++i) out.quiet.add(until_end_ms);
  return out;
}

}  // namespace txmq::bench
