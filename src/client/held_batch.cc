// HeldBatch: the public face of a held claim (engine/held.h).
#include "txmq/held_batch.h"

#include "engine/claim.h"
#include "engine/held.h"

namespace txmq {

namespace {

const std::vector<Message> kNoMessages;

}  // namespace

HeldBatch::HeldBatch() = default;
HeldBatch::HeldBatch(std::unique_ptr<internal::HeldClaim> claim, Micros lease)
    : claim_(std::move(claim)), lease_(lease) {}
HeldBatch::HeldBatch(HeldBatch&&) noexcept = default;
HeldBatch& HeldBatch::operator=(HeldBatch&&) noexcept = default;
HeldBatch::~HeldBatch() = default;

const std::vector<Message>& HeldBatch::messages() const {
  return claim_ ? claim_->messages() : kNoMessages;
}

bool HeldBatch::open() const { return claim_ && claim_->open(); }

std::chrono::steady_clock::time_point HeldBatch::claimed_at() const {
  return claim_ ? claim_->claimed_at() : std::chrono::steady_clock::time_point{};
}

namespace {

internal::HeldClaim& open_claim(const std::unique_ptr<internal::HeldClaim>& claim) {
  if (!claim || !claim->open()) {
    throw Error(Errc::kInvalidArgument,
                "this held batch has ended (committed, leased or released)");
  }
  return *claim;
}

void check_index(const internal::HeldClaim& claim, std::size_t i) {
  if (i >= claim.messages().size()) {
    throw Error(Errc::kInvalidArgument, "no such message in this held batch");
  }
}

HeldResult result_of(const internal::HeldOutcome& o) {
  return HeldResult{o.done, o.failed, o.dead_lettered, o.released, o.leased};
}

}  // namespace

void HeldBatch::ack(std::size_t i) {
  internal::HeldClaim& claim = open_claim(claim_);
  check_index(claim, i);
  claim.mark(i, internal::HeldClaim::Mark::kDone);
}

void HeldBatch::nack(std::size_t i) {
  internal::HeldClaim& claim = open_claim(claim_);
  check_index(claim, i);
  claim.mark(i, internal::HeldClaim::Mark::kFailed);
}

HeldResult HeldBatch::commit() {
  if (!claim_) return {};  // an empty batch holds nothing
  return result_of(open_claim(claim_).commit());
}

std::vector<Message> HeldBatch::lease_rest(std::optional<Micros> lease, HeldResult* result) {
  if (!claim_) return {};
  internal::HeldClaim& claim = open_claim(claim_);
  const Micros length = lease.value_or(lease_);
  internal::check_lease(length);
  internal::HeldOutcome outcome;
  Clock::time_point expires_at;
  std::vector<internal::HeldClaim::Leased> leased = claim.lease_rest(length, outcome, expires_at);
  if (result != nullptr) *result = result_of(outcome);
  std::vector<Message> messages;
  messages.reserve(leased.size());
  for (internal::HeldClaim::Leased& l : leased) {
    messages.push_back(claim.messages()[l.index]);
    messages.back().receipt = std::move(l.receipt);
    messages.back().lease_expires_at = expires_at;
  }
  return messages;
}

void HeldBatch::release() noexcept {
  if (claim_) claim_->rollback();
}

}  // namespace txmq
