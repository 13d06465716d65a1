// Exactly-once processing: claim, hand to the handler, acknowledge, all in one transaction.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/queue_context.h"
#include "txmq/transaction.h"

namespace txmq::internal {

// Exactly-once processing (exactly_once.cc); see Client::process.
std::size_t process(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                    const TransactionalHandler& handler);


// --- Exactly-once (exactly_once.cc; across databases: xa_process.cc) -------------------------

// What one exactly-once transaction did.
struct ProcessOutcome {
  std::size_t processed = 0;
  bool dead_lettered = false;  // only dead letters were at the front: look again at once
  std::vector<std::uint64_t> promoted;  // keyed messages moved in behind finished ones
  std::size_t dead_letters = 0;
  std::vector<double> end_to_end;  // seconds from each processed message's send to the commit
};
// A batch claimed for exactly-once processing, inside the caller's transaction. `done` when
// there is nothing to hand a handler (the transaction is then committed): dead letters were
// moved (they commit on their own), or nothing was claimable.
struct ClaimedBatch {
  std::optional<ProcessOutcome> done;
  std::vector<Message> messages;   // receipt empty, lease_expires_at the end of time
  std::vector<double> end_to_end;  // seconds from each message's send to the claim
  std::chrono::steady_clock::time_point claimed_at;
  std::int64_t now_us = 0;  // the server's NOW(6) at the claim, in microseconds
  // The outcome once the batch committed: end_to_end runs to now.
  ProcessOutcome processed(std::vector<std::uint64_t> promoted) &&;
};
// Claims up to max_messages (FOR UPDATE SKIP LOCKED) and appends their ids to `handed`.
ClaimedBatch claim_batch(QueueContext& q, Connection& c, const TopicInfo& topic,
                         const TopicTables& t, int max_messages, std::vector<Param>& handed);
// Archives (when the topic keeps an archive) and deletes the batch's rows, which c's transaction
// holds, and moves their keys on; returns the keyed messages moved in.
std::vector<std::uint64_t> acknowledge_batch(Connection& c, const TopicInfo& topic,
                                             const TopicTables& t,
                                             const std::vector<Message>& messages);
// Counts a failed handler's delivery as an attempt, in its own statement (the transaction that
// claimed the messages is gone): past max_attempts they are dead-lettered. Best effort.
void count_failed_attempt(QueueContext& q, const TopicInfo& topic, const TopicTables& t,
                          std::vector<Param> ids);
// One exactly-once transaction over one queue table; sets handler_failed when an error thrown
// is the handler's own.
using ProcessOnce =
    std::function<ProcessOutcome(const TopicLayout&, const QueueRef&, bool& handler_failed)>;
// The claim loop of process and process_xa: waits up to options.wait for claimable messages in
// the group's partitions, runs `once` on them in turn, counts metrics.
std::size_t process_units(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                          const ProcessOnce& once);

}  // namespace txmq::internal
