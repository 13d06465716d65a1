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
std::vector<Settle> ack(QueueContext& q, const ResolvedTopic& topic,
                        std::span<const std::string> receipts);

// Receipts of one queue table (group and partition), of keyed or unkeyed messages: up to one
// acknowledging DELETE's worth (512).
struct AckChunk {
  const QueueRef* unit = nullptr;  // of the ResolvedTopic the chunks were made from
  std::string_view group;
  bool keyed = false;
  std::vector<std::size_t> which;  // indices into the parsed receipts
};
// parsed[i] for each i of `indices`, by queue, keyed and unkeyed apart, in chunks. REQUIRES:
// each is in the topic (ResolvedTopic::queue finds it).
std::vector<AckChunk> ack_chunks(const ResolvedTopic& topic, const std::vector<Receipt>& parsed,
                                 const std::vector<std::size_t>& indices);
// Counts acknowledged messages, and their end-to-end latencies, in the metrics.
void count_acked(QueueContext& q, std::string_view topic, std::string_view group,
                 const std::vector<double>& acked);

// Acknowledgements carried by another transaction: ack_and_receive's, which ride in the
// transaction of the claim that follows them (claim.cc), so that a consumer that acknowledges a
// batch and asks for the next pays one commit, not two. Only receipts of messages without a key,
// on a topic without an archive, ride; the constructor acknowledges the others at once (ack).
class RidingAcks {
 public:
  // REQUIRES: `topic` outlives this (the call's own resolution of it).
  RidingAcks(QueueContext& q, const ResolvedTopic& topic, std::span<const std::string> receipts);
  RidingAcks(const RidingAcks&) = delete;
  RidingAcks& operator=(const RidingAcks&) = delete;

  // Whether acknowledgements still wait for a transaction to ride in.
  bool pending() const { return !chunks_.empty(); }
  // Deletes their rows (fenced, as ack) in c's open transaction. Again on a retry: each call
  // starts the outcomes afresh.
  void apply(Connection& c);
  // After the transaction that applied them committed: counts them; pending() is false after.
  void committed();
  // Acknowledges them in a transaction of their own (when no claim took them along).
  void alone();
  // Each receipt's outcome, in the order given (valid once nothing is pending).
  std::vector<Settle>& results() { return results_; }

 private:
  struct Chunk {
    AckChunk receipts;
    std::vector<double> acked;             // end-to-end latencies, for the metrics
    std::vector<std::uint64_t> promoted;  // keys moved on (receipts from before schema 4)
  };
  QueueContext& q_;
  const ResolvedTopic& topic_;
  std::vector<Receipt> parsed_;
  std::vector<Settle> results_;
  std::vector<Chunk> chunks_;
};
Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt,
            std::optional<Micros> delay);
Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease);
// extend for several receipts: one UPDATE per queue table and lease token (a claim's messages
// share one), the outcomes in the receipts' order.
std::vector<Settle> extend(QueueContext& q, std::string_view topic,
                           std::span<const std::string> receipts, Micros lease);
// Gives back messages that were claimed for a caller who went on without them (a sharded
// receive that stopped waiting for a slow server): claimable again at once, and the claim's
// attempt is taken back, so that no message is dead-lettered by a delivery nobody saw.
// Receipts whose lease moved on are left alone. Best effort: what cannot be given back is
// claimable again when its lease ends.
void release(QueueContext& q, std::string_view topic, std::span<const std::string> receipts);

}  // namespace txmq::internal
