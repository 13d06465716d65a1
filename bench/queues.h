#pragma once
// The bench's section "queues": what many queues cost txmq serve. Creates N queues over HTTP and
// reports CreateQueue latency, the disk they take, a /metrics scrape, the dashboard's sampling
// and single calls on one queue beside them against the same calls with one queue; then uses
// some of them and scrapes /metrics at its defaults (the busiest 100) and with every queue.

#include <string>

#include "report.h"

namespace txmq::bench {

struct QueuesOptions {
  std::string dsn;
  int queues = 10000;  // created for the measurement, deleted at the end
  int calls = 500;     // SendMessage and ReceiveMessage + DeleteMessage on one queue, each
  int used = 1000;     // of the queues, sent a message each (their tables made), then scraped
};

void queues_section(Report& report, const QueuesOptions& options);

}  // namespace txmq::bench
