#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "txmq/types.h"

namespace txmq {

namespace internal {
class HeldClaim;
}

// What a held batch's end did to its messages.
struct HeldResult {
  std::size_t acked = 0;          // deleted
  std::size_t nacked = 0;         // given back after the retry delay, or dead-lettered
  std::size_t dead_lettered = 0;  // of the nacked, moved to the dead letters (max_attempts)
  std::size_t released = 0;       // neither acknowledged nor given back: claimable again at once
  std::size_t leased = 0;         // lease_rest: now leased to this consumer
};

// Messages claimed by Client::hold and held by an open transaction on one of the client's
// connections, instead of by leases written to every row: the claim is the exactly-once
// claim (FOR UPDATE SKIP LOCKED; other consumers skip the rows), and the batch ends with one
// commit that deletes the acknowledged messages and gives back the failed ones. No lease is
// written unless the batch runs long: lease_rest() leases what is not yet settled, and the
// caller goes on with Client::ack, nack and extend, as after a receive.
//
// The trade-off (docs/library.md, "Held batches"): if the process dies or its connection drops
// before the batch ends, the server rolls back: the messages are claimable again at once (not
// after a lease), while a handler of this process may still be running, and the delivery is not
// counted as an attempt (a message whose handler kills the process is never dead-lettered).
// The open transaction holds back the server's purge and makes DDL on the topic's tables wait:
// keep batches short, or lease them (the Worker does after WorkerOptions::hold_up_to).
//
// Not thread-safe: one thread at a time (the Worker hands it between its threads under a lock).
// The destructor releases what was not settled (rolls back).
class HeldBatch {
 public:
  HeldBatch();
  explicit HeldBatch(std::unique_ptr<internal::HeldClaim> claim, Micros lease);
  HeldBatch(HeldBatch&&) noexcept;
  HeldBatch& operator=(HeldBatch&&) noexcept;
  ~HeldBatch();

  // The messages, in claim order; their receipts are empty until lease_rest() leases them.
  const std::vector<Message>& messages() const;
  bool empty() const { return messages().empty(); }
  std::size_t size() const { return messages().size(); }
  // Whether the transaction is still open (neither committed, leased nor released).
  bool open() const;
  // When the claim was made.
  std::chrono::steady_clock::time_point claimed_at() const;

  // Marks message i handled: deleted when the batch commits. kInvalidArgument when ended.
  void ack(std::size_t i);
  // Marks message i failed: when the batch commits, it is claimable again after the topic's retry
  // delay for its attempt, or dead-lettered at max_attempts.
  void nack(std::size_t i);
  // Applies the marks and commits; the unmarked messages are released (claimable at once, the
  // attempt not counted). kCommitUnknown: the marks may or may not have been applied.
  HeldResult commit();
  // Leases the unmarked messages to this consumer (for `lease`, default the hold's), applies the
  // marks and commits, in one transaction: no moment in which another consumer could take them.
  // Returns the leased messages with their receipts and lease expiry.
  std::vector<Message> lease_rest(std::optional<Micros> lease = std::nullopt,
                                  HeldResult* result = nullptr);
  // Rolls back: every message claimable again at once, nothing applied.
  void release() noexcept;

 private:
  std::unique_ptr<internal::HeldClaim> claim_;
  Micros lease_{0};
};

}  // namespace txmq
