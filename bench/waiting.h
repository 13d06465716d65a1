#pragma once
// Long polling, with consumers in separate processes (`txmq bench-consumer` children).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "harness.h"
#include "txmq/client.h"

namespace txmq::bench {

// One consumer process waits (receive with a 20 s wait); `samples` single sends, spaced by idle
// gaps of 20-60 ms. Latency: from just before send() to the consumer's receipt (a shared
// monotonic clock), so it includes the send's own commit.
Measured wake_latency(const std::string& dsn, Client& producer, const std::string& topic,
                      int samples);

// One consumer process waits (receive with a 20 s wait); `samples` times, after an idle gap of
// 20-60 ms, `send` sends one message in a transaction and commits it, returning the message's id
// and monotonic_ns() taken when its COMMIT returned. Latency: from that moment to the consumer's
// receipt (the wake-up of a waiter by a commit, the transaction's own time left out).
Measured wake_after_commit_latency(const std::string& dsn, int samples, const std::string& topic,
                                   const std::function<std::pair<std::uint64_t, std::int64_t>()>& send);

// The same with a SQL consumer: a thread of this process that loops on CALL txmq_take_wait
// (topic, NULL, 10, 20) in READ COMMITTED transactions, acknowledging what it takes. Latency:
// from the COMMIT's return to the CALL's. Sets `interrupted` to the CALLs a wake-up ended (1317,
// taken again) and `idle_statements_per_second` to the statements its session ran while waiting
// on the empty topic for 5 s before the first send (a wait of 6 s against one of 1 s).
Measured sql_take_wait_latency(const std::string& dsn, int samples, const std::string& topic,
                               const std::function<std::pair<std::uint64_t, std::int64_t>()>& send,
                               int& interrupted, double& idle_statements_per_second);

// Statements per second the server executes (SHOW GLOBAL STATUS 'Questions') while
// processes x threads consumers wait on an empty topic with the given wait, over `window`
// seconds.
double idle_statements_per_second(const std::string& dsn, const std::string& topic,
                                  int processes, int threads, double wait, double window);

}  // namespace txmq::bench
