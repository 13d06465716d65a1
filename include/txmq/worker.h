#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "txmq/client.h"

namespace txmq {

// Handles one message. Returning acknowledges it; throwing gives it back with the topic's retry
// delay (TopicOptions::retry), or dead-letters it at max_attempts.
using MessageHandler = std::function<void(const Message&)>;

struct WorkerOptions {
  // Handlers running at once, each on its own thread (1..256).
  int threads = 1;
  // Messages each thread leases per claim (1..100; 1..10000 for the exactly-once-across-databases
  // constructor, where it is the batch of one process_xa); they are handled one after another.
  // Their leases run from the claim, and the worker extends them while they wait their turn.
  int batch = 1;
  // Acknowledgements held and sent together (1..1000), for leased batches (see hold_up_to:
  // a held batch settles all of its messages with one commit). With 1 (the default) each message is
  // acknowledged when its handler returns: one statement (and commit) per message, except the
  // last of a batch, whose acknowledgement rides in the transaction of the next claim
  // (Client::ack_and_receive), committed before that claim returns or waits. With N > 1 a
  // thread holds the acknowledgements of its handled messages and sends them in one statement
  // once N are held (riding in the next claim when that comes next), once the oldest has waited
  // ack_max_delay, before a receive that may wait (the last one came back short) and when the
  // worker stops. With batch = ack_every = 100 a handler that takes one message at a time
  // costs one commit per 100 messages (docs/benchmarks.md). The trade-off:
  //  - a crash (or a connection lost at the acknowledgement) delivers up to `batch` leased and
  //    `ack_every` handled messages again: at-least-once as always, with more duplicates;
  //  - held messages stay leased until acknowledged (the worker extends their leases, one
  //    statement per message: keep batch + ack_every small against the lease on a slow server,
  //    or a lease may run out while extensions queue), and counts().acked counts them only then;
  //  - keyed FIFO: a key's next message moves in when its current one is acknowledged, so it
  //    waits up to ack_max_delay longer (order is kept).
  // Failed handlers are given back at once, not held. Not used by the XA worker.
  int ack_every = 1;
  // How long a handled message's acknowledgement may be held (0 to 1 hour; with ack_every > 1).
  Micros ack_max_delay = std::chrono::milliseconds(100);
  // Lease length; default: the topic's. Leases are extended while handlers run, so this is how
  // long a crashed worker's messages wait before peers take them.
  std::optional<Micros> lease;
  // How long a thread may hold a claimed batch with an open transaction instead of leases
  // (Client::hold; docs/library.md, "Held batches"), at most a third of the lease. A batch of
  // short handlers is then claimed, handled and settled with one commit, and no lease is
  // written. A batch still running after this long (checked every 50 ms, also while a handler
  // runs) has its unsettled messages leased in one transaction, and goes on as a leased batch
  // (extended, fenced). While held, a thread keeps one of the client's connections (keep
  // threads below ClientOptions::pool_size), the server's purge waits for the transaction, and
  // DDL on the topic waits up to this long. If the process dies or its connection drops while a
  // batch is held, its messages are claimable again at once, and the delivery is not counted
  // as an attempt. 0: every claim writes its leases (ack_every and ack_max_delay then apply).
  // A frozen process's held batch comes back after the lease (at least 10 s): the server closes
  // its connection. Not used for topics sharded over several servers.
  Micros hold_up_to = std::chrono::seconds(1);
  // Stop after this many messages were handled (acknowledged or given back); 0: no limit.
  std::uint64_t limit = 0;
  // Stop once a claim finds nothing claimable (for draining a topic), instead of waiting. With
  // an XA resource, only once no other thread is in the middle of a batch (a batch that rolls
  // back gives its messages back).
  bool stop_when_empty = false;
  // The consumer group to consume for (empty: "default") and, optionally, the partitions to
  // claim from (empty: all).
  std::string group;
  std::vector<int> partitions;
  // Told about what went wrong and what the worker did about it (a handler threw, a lease was
  // lost, the database is unreachable and the worker retries). Default: a line on stderr.
  std::function<void(std::string_view)> on_event;
};

struct WorkerCounts {
  std::uint64_t acked = 0;
  std::uint64_t retried = 0;      // the handler threw: given back (or dead-lettered)
  std::uint64_t leases_lost = 0;  // the outcome was refused: another consumer has the message
};

// Runs a handler over a topic on N threads until stopped:
//  - long polls when the topic is empty (no claims while idle: the client's one waiter per topic
//    looks once a second; woken at once by sends);
//  - extends each running handler's lease every third of its length, so that handlers may run
//    longer than the lease; a lease that cannot be kept is reported;
//  - on a database outage, reports it and retries with backoff (100 ms to 5 s) rather than exit;
//  - stop() lets running handlers finish and settles their messages; messages leased but not
//    yet started are given back at once. Nothing is lost on stop.
// The Client must outlive the Worker. The destructor stops and joins.
// Thread safety: stop() and counts() may be called from any thread; the rest from one thread.
// Throws: the constructors throw txmq::Error (kInvalidArgument) for options out of range; join()
// rethrows the error that stopped the worker. A handler's exceptions never leave the worker.
class Worker {
 public:
  Worker(Client& client, std::string topic, MessageHandler handler, WorkerOptions options = {});
  // Exactly-once across databases: each thread loops Client::process_xa over batches of up to
  // options.batch messages with the handler's work in `resource` (no leases: the batch's
  // transaction holds it). counts(): acked = messages processed, retried = messages of batches
  // whose handler threw. stop() lets running batches finish. options.lease is not used.
  Worker(Client& client, std::string topic, XaResource resource, TransactionalHandler handler,
         WorkerOptions options = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Asks the worker to stop; returns at once. Safe from any thread, and from a signal-watching
  // thread (not from a signal handler).
  void stop();
  // Waits until every thread has finished. Rethrows an error that stopped the worker (a topic
  // that does not exist, bad options), if any.
  void join();
  bool stopping() const;
  WorkerCounts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace txmq
