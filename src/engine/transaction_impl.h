#pragma once

#include <map>
#include <optional>
#include <string>

#include "engine/announce.h"
#include "engine/queue_context.h"
#include "txmq/transaction.h"

namespace txmq {

// A Transaction's state. Owned: Client::begin's own pooled connection. Managed: a transaction
// Client::process or Client::transact opened on the pool's connection and lends to the caller's
// function (they commit it when the function returns; see lend_transaction).
struct Transaction::Impl {
  Impl(internal::QueueContext& queue, internal::Pool::Handle handle)
      : q(queue), owned(std::move(handle)), c(&**owned) {}
  Impl(internal::QueueContext& queue, internal::Connection& connection)
      : q(queue), c(&connection), managed(true) {}

  // Runs fn() on the open transaction. An error that ended the server's side of the transaction
  // (deadlock, lock-wait timeout, lost connection) is remembered: the transaction can then only
  // be rolled back, so that the statements after it cannot commit without the ones before.
  template <typename F>
  auto guarded(F&& fn) -> decltype(fn());
  void check_usable() const;

  internal::QueueContext& q;
  std::optional<internal::Pool::Handle> owned;
  internal::Connection* c;
  // Client::process_xa: the resource's connection, with an XA branch open, where execute runs
  // (c stays the queue's: sends go there).
  internal::Connection* work = nullptr;
  bool managed = false;
  bool open = true;
  std::optional<Error> failed;  // what ended the transaction on the server's side
  // Messages sent, by topic: counted, and the claimable ones announced to waiting consumers,
  // after the commit.
  std::map<std::string, internal::SentCount, std::less<>> sent;
};

namespace internal {
// Counts what a committed transaction sent, and announces it (waiters.cc).
inline void announce_sent(QueueContext& q,
                          const std::map<std::string, SentCount, std::less<>>& sent) {
  for (const auto& [topic, count] : sent) {
    q.metrics.count(topic, {}, Counter::kSent, count.total);
    if (count.claimable > 0) announce(q, topic, count.claimable);
  }
}
}  // namespace internal

// An Outbox's state: the application's connection, borrowed.
struct Outbox::Impl {
  Impl(internal::QueueContext& queue, MYSQL* mysql)
      : q(queue), c(mysql, internal::Connection::Borrowed{}) {}
  internal::QueueContext& q;
  internal::Connection c;
};

template <typename F>
auto Transaction::Impl::guarded(F&& fn) -> decltype(fn()) {
  check_usable();
  try {
    return fn();
  } catch (const Error& e) {
    if (e.retryable() || e.code() == Errc::kCommitUnknown || c->broken() ||
        (work != nullptr && work->broken())) {
      failed = e;
    }
    throw;
  }
}

namespace internal {

// Runs body(tx) with a Transaction lent over the transaction open on c, which the caller then
// commits. Afterwards, checks that it still may: a statement error the body caught may have ended
// the transaction on the server (a deadlock is then thrown as kAborted, which Pool::run retries).
// Returns the messages the body sent, by topic, to count and announce after the commit.
// `work`: where the transaction's execute runs, when not on c (process_xa's resource).
template <typename Body>
std::map<std::string, SentCount, std::less<>> lend_transaction(QueueContext& q, Connection& c,
                                                               Body&& body,
                                                               Connection* work = nullptr) {
  auto impl = std::make_unique<Transaction::Impl>(q, c);
  impl->work = work;
  Transaction::Impl* state = impl.get();
  Transaction tx(std::move(impl));
  body(tx);
  if (!tx.open()) {
    throw Error(Errc::kFailedPrecondition,
                "the function moved its transaction away: txmq commits it when the function "
                "returns");
  }
  state->check_usable();
  return std::move(state->sent);
}

}  // namespace internal
}  // namespace txmq
