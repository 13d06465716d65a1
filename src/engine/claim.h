// Claiming messages under a lease: which rows, from which queues, waiting for them.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/queue_context.h"

namespace txmq::internal {

class RidingAcks;  // settle.h

// Locks up to max_messages claimable rows (FOR UPDATE SKIP LOCKED, in the transaction open on
// c) from the client's scan hint, sweeping from the lowest id when nothing is past it; a fair
// topic's in fair order (its messages without a tenant from the hint). Columns: id, attempts,
// enqueued_at and NOW(6) as microseconds, msg_key, payload, attributes, first_claimed_at,
// whether it was leased before, tenant, whether the scan hint covers the row.
Result select_claimable(QueueContext& q, Connection& c, const TopicTables& t, int max_messages,
                        bool fair);
// Leases the rows `ids` (which c's transaction holds locked) to this client: a fresh token
// (with kKeyedTokenBit for keyed messages), attempts + 1, visible again after `lease` plus the
// retry delay for the attempt, first_claimed_at `now_us` for a first delivery. Returns the token.
std::uint64_t write_leases(QueueContext& q, Connection& c, const TopicInfo& topic,
                           const TopicTables& t, const std::vector<std::uint64_t>& ids,
                           Micros lease, std::int64_t now_us);
// The queue tables of the queues a claim walks (ResolvedTopic::claim_order), for its waiter.
std::vector<WatchedQueue> queue_tables_of(const std::vector<const QueueRef*>& units);
// The fields of a message from a select_claimable row (not the receipt or lease expiry).
Message message_from_row(Row& row);

// Refuses a lease shorter than 1 ms or longer than 12 hours.
void check_lease(Micros lease);
// Refuses a max_messages or wait that receive and process do not take.
void check_claim_options(int max_messages, Micros wait);

// What one try at claiming came to.
enum class ClaimTry {
  kGot,       // done: something was claimed
  kGotAll,    // done: as many as asked for were claimed, so more may be there
  kAgainNow,  // nothing for the caller, but try again at once (only dead letters were in front)
  kEmpty,     // nothing claimable
};
// Calls try_once() until it claims something or `wait` has passed, waiting on the topic's
// waiter between tries (waiters.cc): woken at once by announced sends, at the latest within a
// second for anything else. Returns whether it got something. With `try_first`, the first try
// is made even when the waiter knows the topic is empty (it carries acknowledgements).
template <typename Try>
bool claim_within(QueueContext& q, std::string_view channel, const std::vector<WatchedQueue>& tables,
                  Micros wait, Try&& try_once, bool try_first = false) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::shared_ptr<TopicWaiter> waiter;
  if (wait > Micros{0}) waiter = q.waiters.enter(channel, tables);
  struct Leave {
    std::shared_ptr<TopicWaiter>& waiter;
    ~Leave() {
      if (waiter) waiter->leave();
    }
  } leave{waiter};
  bool claim = try_first || !waiter || waiter->worth_claiming();
  for (;;) {
    if (claim) {
      const ClaimTry outcome = try_once();
      if (outcome == ClaimTry::kGotAll && waiter) waiter->notify(1);  // pass it on
      if (outcome == ClaimTry::kGot || outcome == ClaimTry::kGotAll) return true;
      if (outcome == ClaimTry::kAgainNow) continue;
    }
    if (!waiter || std::chrono::steady_clock::now() >= deadline) return false;
    claim = waiter->await(deadline);
    if (!claim) return false;
  }
}

// `riding`: acknowledgements to apply in the first claim's transaction (or on their own when
// no claim is made). REQUIRES: check_claim_options(options) passed (the callers check before
// they resolve the topic, so that bad options are refused first).
std::vector<Message> receive(QueueContext& q, const ResolvedTopic& topic,
                             const ReceiveOptions& options, RidingAcks* riding = nullptr);
std::vector<Message> receive(QueueContext& q, std::string_view topic,
                             const ReceiveOptions& options);
// Client::ack_and_receive: `settled` gets the receipts' outcomes, in order.
std::vector<Message> ack_and_receive(QueueContext& q, std::string_view topic,
                                     std::span<const std::string> receipts,
                                     const ReceiveOptions& options, std::vector<Settle>& settled);

}  // namespace txmq::internal
