// Sending: checking messages against their topic and writing them, singly or in batches.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/partitions.h"
#include "engine/queue_context.h"

namespace txmq::internal {

// Reads the topic's settings and checks every message against them (nothing is written).
// `through`: the caller's connection, inside its transaction, for a settings read that the
// cache cannot answer (else the pool's).
TopicInfo check_send(QueueContext& q, std::string_view topic,
                     std::span<const OutgoingMessage> messages, Connection* through = nullptr);
// Writes checked messages (with their dedup keys) inside the transaction open on c, whoever
// opened it; returns their ids in input order.
std::vector<std::uint64_t> insert_messages(QueueContext& q, Connection& c, const TopicInfo& topic,
                                           std::span<const OutgoingMessage> messages);
// How many of the messages are claimable once committed (no delay): what a sender announces.
std::size_t claimable_now(std::span<const OutgoingMessage> messages);

std::uint64_t send_one(QueueContext& q, std::string_view topic, std::string_view payload,
                       const SendOptions& options);
std::vector<std::uint64_t> send_batch(QueueContext& q, std::string_view topic,
                                      std::span<const OutgoingMessage> messages);

}  // namespace txmq::internal
