#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "queue/context.h"

// The queue's algorithms, one file each: send.cc, claim.cc, settle.cc, inspect.cc.
namespace txmq::internal {

// Reads the topic's settings and checks every message against them (nothing is written).
TopicInfo check_send(QueueContext& q, std::string_view topic,
                     std::span<const OutgoingMessage> messages);
// Writes checked messages (with their dedup keys) inside the transaction open on c, whoever
// opened it; returns their ids in input order.
std::vector<std::uint64_t> insert_messages(QueueContext& q, Connection& c, const TopicInfo& topic,
                                           std::span<const OutgoingMessage> messages);

std::uint64_t send_one(QueueContext& q, std::string_view topic, std::string_view payload,
                       const SendOptions& options);
std::vector<std::uint64_t> send_batch(QueueContext& q, std::string_view topic,
                                      std::span<const OutgoingMessage> messages);

// Moves the given rows from the queue table to the dead-letter table; inside the caller's
// transaction, which holds their row locks. REQUIRES: ids is not empty.
void move_to_dead_letters(Connection& c, const TopicTables& t, std::vector<Param> ids);

// Locks up to max_messages claimable rows (FOR UPDATE SKIP LOCKED, in the transaction open on
// c) from the client's scan hint, sweeping from the lowest id when nothing is past it. Columns:
// id, attempts, enqueued_at and NOW(6) as microseconds, msg_key, payload.
Result select_claimable(QueueContext& q, Connection& c, std::string_view topic,
                        const TopicTables& t, int max_messages);
// The fields of a message from a select_claimable row (not the receipt or lease expiry).
Message message_from_row(Row& row);

// Refuses a max_messages or wait that receive and process do not take.
void check_claim_options(int max_messages, Micros wait);

// What one try at claiming came to.
enum class ClaimTry {
  kGot,       // done: something was claimed
  kAgainNow,  // nothing for the caller, but try again at once (only dead letters were in front)
  kEmpty,     // nothing claimable
};
// Calls try_once() until it says kGot or `wait` has passed, pausing between empty tries (10 ms,
// doubling up to 500 ms). Returns whether it got something.
template <typename Try>
bool claim_within(Micros wait, Try&& try_once) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  Micros pause = std::chrono::milliseconds(10);
  for (;;) {
    const ClaimTry outcome = try_once();
    if (outcome == ClaimTry::kGot) return true;
    if (outcome == ClaimTry::kAgainNow) continue;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min<Micros>(pause * 2, std::chrono::milliseconds(500));
  }
}

std::vector<Message> receive(QueueContext& q, std::string_view topic,
                             const ReceiveOptions& options);

// Exactly-once processing (exactly_once.cc); see Client::process.
std::size_t process(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                    const TransactionalHandler& handler);

std::vector<Settle> ack(QueueContext& q, std::string_view topic,
                        std::span<const std::string> receipts);
Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt, Micros delay);
Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease);

TopicStats stats(QueueContext& q, std::string_view topic);
std::vector<InFlightMessage> in_flight(QueueContext& q, std::string_view topic, std::size_t limit);
std::vector<DeadLetter> dead_letters(QueueContext& q, std::string_view topic, std::size_t limit);
std::size_t requeue_dead(QueueContext& q, std::string_view topic,
                         std::span<const std::uint64_t> ids);

}  // namespace txmq::internal
