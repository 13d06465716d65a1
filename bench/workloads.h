#pragma once
// txmq's side of the bench: the same workloads through the public API only.

#include <string>

#include "harness.h"
#include "txmq/client.h"

namespace txmq::bench {

// Drops the topic when it exists.
void drop_if_exists(Client& client, const std::string& topic);

// Drops and creates the topic with these settings (default: the defaults).
void fresh_topic(Client& client, const std::string& topic, const TopicOptions& options = {});

// Puts `count` messages in the topic with send_batch of `chunk` messages each (not timed). Each
// batch goes whole to one partition: a smaller chunk spreads the messages over more partitions
// (and servers).
void fill(Client& client, const std::string& topic, int count, std::size_t payload,
          int chunk = 10000);

// send() from `producers` threads sharing one client, for `seconds`.
Measured send_rate(Client& client, const std::string& topic, int producers, double seconds,
                   std::size_t payload);

// send_batch() of `batch` messages from one thread until `rows` were sent.
Measured send_batch_rate(Client& client, const std::string& topic, int batch, int rows,
                         std::size_t payload);

// receive (up to `batch`) + ack of what came, from `consumers` threads sharing one client, until
// `limit` messages were consumed, a receive finds nothing, or `cap_seconds` pass.
// Latency is one receive+ack cycle. With `riding`, each batch's acknowledgements go with the
// next receive (Client::ack_and_receive): one transaction for both.
Measured drain(Client& client, const std::string& topic, int consumers, int batch,
               std::uint64_t limit, double cap_seconds, bool riding = false);

// The same drain by a Worker of `threads` threads whose handler takes one message at a time:
// each thread leases `batch` messages per claim and acknowledges `ack_every` at a time
// (WorkerOptions). Latency is the time from one handler call to the next on a thread.
Measured drain_worker(Client& client, const std::string& topic, int threads, int batch,
                      int ack_every, std::uint64_t limit, double cap_seconds,
                      Micros hold_up_to = std::chrono::seconds(1),
                      Micros work = Micros{0});

// The same drain with Client::process (exactly-once): claim, handler and delete in one
// transaction. With `work_table` set, the handler inserts one row per message into it (one
// multi-row INSERT per batch), as a consumer recording what it did would.
Measured drain_exactly_once(Client& client, const std::string& topic, int consumers, int batch,
                            std::uint64_t limit, double cap_seconds,
                            const std::string& work_table = {});

// The same drain with Client::process_xa (exactly-once across two databases): the handler's
// multi-row INSERT into `work_table` runs in an XA branch on `resource`, a second server, which
// is prepared before the queue's commit and committed after it.
Measured drain_exactly_once_xa(Client& client, const std::string& topic,
                               const XaResource& resource, int consumers, int batch,
                               std::uint64_t limit, double cap_seconds,
                               const std::string& work_table);

// `producers` send at a steady `rate_per_s` in all for `seconds` while `consumers` receive (with
// waiting) and ack. Latency is from the start of a send to the message's receipt.
Measured end_to_end(Client& producer_client, Client& consumer_client, const std::string& topic,
                    int producers, int consumers, double rate_per_s, double seconds);

// Latency of receive() of one message followed by its (untimed) ack, `samples` times, from one
// thread. With `hold_in_flight` > 0, first leases that many messages for an hour and keeps them.
Measured claim_latency(Client& client, const std::string& topic, int samples, int hold_in_flight);

// Latency of receive() of up to `batch` messages (followed by their untimed ack), `samples` times,
// from one thread; the topic must hold enough.
Measured receive_latency(Client& client, const std::string& topic, int samples, int batch);

// Latency of a receive() with no wait of a topic that is empty, `samples` times, from one thread.
Measured empty_receive_latency(Client& client, const std::string& topic, int samples);

}  // namespace txmq::bench
