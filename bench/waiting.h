#pragma once
// Long polling, with consumers in separate processes (`txmq bench-consumer` children).

#include <string>

#include "harness.h"
#include "txmq/client.h"

namespace txmq::bench {

// One consumer process waits (receive with a 20 s wait); `samples` single sends, spaced by idle
// gaps of 20-60 ms. Latency: from just before send() to the consumer's receipt (a shared
// monotonic clock), so it includes the send's own commit.
Measured wake_latency(const std::string& dsn, Client& producer, const std::string& topic,
                      int samples);

// Statements per second the server executes (SHOW GLOBAL STATUS 'Questions') while
// processes x threads consumers wait on an empty topic with the given wait, over `window`
// seconds.
double idle_statements_per_second(const std::string& dsn, const std::string& topic,
                                  int processes, int threads, double wait, double window);

}  // namespace txmq::bench
