// Settling leased messages (ack, nack, extend), dead letters and the archive's copy.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/queue_context.h"

namespace txmq::internal {

// Copies the queue table's rows matching `where` (which the caller's transaction has locked)
// into the archive, once per message: a later group's acknowledgement renews acked_at.
std::string archive_sql(const TopicTables& t, std::string_view where);


// Moves the given rows out of the queue table: into the dead-letter table, or, when the topic
// has a dead_letter_topic, into that topic as new messages (payload, key and attributes kept,
// with their origin). Inside the caller's transaction, which holds their row locks; moves their
// keys' next messages in (returns their ids, for made_claimable after the commit).
// REQUIRES: ids is not empty.
std::vector<std::uint64_t> move_to_dead_letters(QueueContext& q, Connection& c,
                                                const TopicInfo& topic, const TopicTables& t,
                                                std::vector<Param> ids);

// Deletes the given rows from the queue table and moves their keys on (finish_keyed), inside the
// caller's transaction, which holds their locks; returns the keyed messages moved in.
std::vector<std::uint64_t> delete_finished(Connection& c, const TopicTables& t,
                                           std::vector<Param> ids);


std::vector<Settle> ack(QueueContext& q, std::string_view topic,
                        std::span<const std::string> receipts);
Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt,
            std::optional<Micros> delay);
Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease);
// Gives back messages that were claimed for a caller who went on without them (a sharded
// receive that stopped waiting for a slow server): claimable again at once, and the claim's
// attempt is taken back, so that no message is dead-lettered by a delivery nobody saw.
// Receipts whose lease moved on are left alone. Best effort: what cannot be given back is
// claimable again when its lease ends.
void release(QueueContext& q, std::string_view topic, std::span<const std::string> receipts);

}  // namespace txmq::internal
