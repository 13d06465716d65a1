// Held claims (Client::hold): a batch claimed with FOR UPDATE SKIP LOCKED and held by an open
// transaction instead of written leases, settled with one commit, or leased on demand.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/pool.h"
#include "engine/exactly_once.h"
#include "engine/queue_context.h"

namespace txmq::internal {

// What became of a held batch's messages when it ended.
struct HeldOutcome {
  std::size_t done = 0;           // deleted (acknowledged)
  std::size_t failed = 0;         // given back after the retry delay, or dead-lettered
  std::size_t dead_lettered = 0;  // of the failed, dead-lettered
  std::size_t released = 0;       // neither: claimable again at once
  std::size_t leased = 0;         // lease_rest: leased to the caller
};

class HeldClaim {
 public:
  enum class Mark { kHeld, kDone, kFailed };

  HeldClaim(QueueContext& q, Topic topic, const QueueRef& unit, std::string group,
            Pool::Handle connection, ClaimedBatch batch);
  ~HeldClaim();
  HeldClaim(const HeldClaim&) = delete;
  HeldClaim& operator=(const HeldClaim&) = delete;

  const std::vector<Message>& messages() const { return messages_; }
  const TopicOptions& topic_options() const { return topic_->options(); }
  std::chrono::steady_clock::time_point claimed_at() const { return claimed_at_; }
  bool open() const { return open_; }
  // REQUIRES: open(), i < messages().size().
  void mark(std::size_t i, Mark mark);
  // Applies the marks and commits: done messages deleted (archived), failed ones given back
  // after the topic's retry delay for their attempt (dead-lettered at max_attempts), the rest
  // released at once. The transaction's end either way (an error rolls back: all released).
  HeldOutcome commit();
  // A message lease_rest leased: its index in messages() and its receipt.
  struct Leased {
    std::size_t index = 0;
    std::string receipt;
  };
  // Leases the unmarked messages, applies the marks and commits (messages() stays as it was:
  // another thread may be reading it). `expires_at` gets the leases' expiry.
  std::vector<Leased> lease_rest(Micros lease, HeldOutcome& outcome, Clock::time_point& expires_at);
  // Rolls back: every message claimable again at once.
  void rollback() noexcept;

 private:
  // Applies the marks inside the transaction; `promoted` gets keyed messages moved in.
  void apply_marks(HeldOutcome& outcome, std::vector<std::uint64_t>& promoted);
  // Commits, then counts the outcome and announces what became claimable.
  void finish(const HeldOutcome& outcome, const std::vector<std::uint64_t>& promoted);
  // Rolls back after `e` and throws what the caller should see: when the connection broke (lost,
  // or its cluster node left the cluster) the pool is told, as run() tells it, and the error
  // says that the batch rolled back, in place of the server's text.
  [[noreturn]] void end_with(const Error& e);

  QueueContext& q_;
  Topic topic_;
  const QueueRef& unit_;
  std::string group_;
  std::optional<Pool::Handle> connection_;  // given back to the pool when the batch ends
  std::vector<Message> messages_;
  std::vector<Mark> marks_;
  std::vector<double> end_to_end_;  // seconds from each message's send to the claim
  std::chrono::steady_clock::time_point claimed_at_;
  std::int64_t claimed_now_us_ = 0;
  bool open_ = true;
};

// The least time without a statement after which the server closes a held batch's connection
// (the lease, if longer): a held batch of a frozen process comes back then.
inline constexpr std::chrono::seconds kHeldIdleBound{10};

// Claims up to options.max_messages of the group (waiting up to options.wait) and holds them;
// nullptr when none came. Throws as receive.
std::unique_ptr<HeldClaim> hold(QueueContext& q, std::string_view topic,
                                const ReceiveOptions& options);

}  // namespace txmq::internal
