#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "queue/context.h"

// The queue's algorithms, one file each: send.cc, claim.cc, settle.cc, inspect.cc.
namespace txmq::internal {

std::uint64_t send_one(QueueContext& q, std::string_view topic, std::string_view payload,
                       const SendOptions& options);
std::vector<std::uint64_t> send_batch(QueueContext& q, std::string_view topic,
                                      std::span<const OutgoingMessage> messages);

// Moves the given rows from the queue table to the dead-letter table; inside the caller's
// transaction, which holds their row locks. REQUIRES: ids is not empty.
void move_to_dead_letters(Connection& c, const TopicTables& t, std::vector<Param> ids);

std::vector<Message> receive(QueueContext& q, std::string_view topic,
                             const ReceiveOptions& options);

std::vector<Settle> ack(QueueContext& q, std::string_view topic,
                        std::span<const std::string> receipts);
Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt, Micros delay);
Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease);

TopicStats stats(QueueContext& q, std::string_view topic);
std::vector<InFlightMessage> in_flight(QueueContext& q, std::string_view topic,
                                       std::size_t limit);
std::vector<DeadLetter> dead_letters(QueueContext& q, std::string_view topic, std::size_t limit);
std::size_t requeue_dead(QueueContext& q, std::string_view topic,
                         std::span<const std::uint64_t> ids);

}  // namespace txmq::internal
