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
  int queues = 100000;  // created for the measurement, deleted at the end
  int calls = 500;      // SendMessage and ReceiveMessage + DeleteMessage on one queue, each
  int used = 10000;     // of the queues, a message sent and received each (tables made), scraped
  int deletes_timed = 2000;  // DeleteQueue timed one at a time; the rest deleted from 4 clients
  // serve --queue-storage shared (txmq bench --storage shared): no tables per queue; else
  // --tables-at-first-use.
  bool shared_storage = false;
};

void queues_section(Report& report, const QueuesOptions& options);

}  // namespace txmq::bench
