#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <memory>
#include <thread>
#include <vector>

#include "queue/context.h"

// The queue's algorithms, one file each: send.cc, claim.cc, settle.cc, inspect.cc.
namespace txmq::internal {

// Rows per multi-row statement: large enough that a batch costs few round trips, small enough
// that the statement stays well inside max_allowed_packet and the 65,535 placeholder limit.
constexpr std::size_t kMaxRowsPerStatement = 1000;

// Runs `sql_head` followed by `rows` copies of `row` (and `sql_tail`) in statements of at most
// kMaxRowsPerStatement rows; bind(i, params) binds row i.
template <typename Bind>
void in_chunks(Connection& c, std::size_t rows, std::string_view sql_head, std::string_view row,
               std::string_view sql_tail, Bind&& bind) {
  std::vector<Param> params;
  for (std::size_t from = 0; from < rows; from += kMaxRowsPerStatement) {
    const std::size_t to = std::min(rows, from + kMaxRowsPerStatement);
    std::string sql(sql_head);
    for (std::size_t i = from; i < to; ++i) {
      if (i > from) sql += ',';
      sql += row;
    }
    sql += sql_tail;
    params.clear();
    for (std::size_t i = from; i < to; ++i) bind(i, params);
    c.execute(sql, params);
  }
}

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

// Keyed FIFO (keys.cc), inside the caller's transaction. order_keyed takes the (key, id) pairs
// of messages just inserted into the queue table, in send order, and parks those whose key
// already has a message. finish_keyed takes the keys of messages just deleted from the queue
// table (acknowledged or dead-lettered), one entry per message, and moves each key's next
// parked message in; returns the ids moved in.
void order_keyed(Connection& c, const TopicTables& t,
                 const std::vector<std::pair<std::string_view, std::uint64_t>>& keyed);
std::vector<std::uint64_t> finish_keyed(Connection& c, const TopicTables& t,
                                        const std::vector<std::string>& finished_keys);

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

// After a commit that made messages claimable: wakes up to `count` waiting consumers
// (waiting.cc), this client's at once and others' from a background thread. Never throws: the
// commit succeeded, whatever happens here.
void announce(QueueContext& q, std::string_view topic, std::size_t count);
// The same, with the topic's layout already at hand (its groups are announced to).
void announce(QueueContext& q, const TopicLayout& layout, std::size_t count);
// After a commit that moved keyed messages into the queue table (or made others claimable
// below this client's scan hint): lowers the hint and announces them.
void made_claimable(QueueContext& q, const Unit& unit, const std::vector<std::uint64_t>& ids);

// Retry delays (retry.cc). retry_delay_sql is an SQL expression for the delay in microseconds
// after a failed delivery that had `failures_before` failed deliveries before it, with four
// placeholders that bind_retry_delay binds (jitter drawn once per statement).
std::string retry_delay_sql(std::string_view failures_before);
void bind_retry_delay(std::vector<Param>& params, const RetryPolicy& policy);
Micros retry_delay(const RetryPolicy& policy, std::int64_t failures_before);

// Locks up to max_messages claimable rows (FOR UPDATE SKIP LOCKED, in the transaction open on
// c) from the client's scan hint, sweeping from the lowest id when nothing is past it. Columns:
// id, attempts, enqueued_at and NOW(6) as microseconds, msg_key, payload.
Result select_claimable(QueueContext& q, Connection& c, const TopicTables& t, int max_messages);
// The queues a claim of `group` walks: all partitions, or the ones given (checked).
std::vector<Unit> claim_units(const TopicLayout& layout, const GroupEntry& group,
                              const std::vector<int>& only);
std::vector<std::string> queue_tables_of(const std::vector<Unit>& units);
// The fields of a message from a select_claimable row (not the receipt or lease expiry).
Message message_from_row(Row& row);

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
// waiter between tries (waiting.cc): woken at once by announced sends, at the latest within a
// second for anything else. Returns whether it got something.
template <typename Try>
bool claim_within(QueueContext& q, std::string_view channel, const std::vector<std::string>& tables,
                  Micros wait, Try&& try_once) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::shared_ptr<TopicWaiter> waiter;
  if (wait > Micros{0}) waiter = q.waiters.enter(channel, tables);
  struct Leave {
    std::shared_ptr<TopicWaiter>& waiter;
    ~Leave() {
      if (waiter) waiter->leave();
    }
  } leave{waiter};
  bool claim = !waiter || waiter->worth_claiming();
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

std::vector<Message> receive(QueueContext& q, std::string_view topic,
                             const ReceiveOptions& options);

// Exactly-once processing (exactly_once.cc); see Client::process.
std::size_t process(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                    const TransactionalHandler& handler);

std::vector<Settle> ack(QueueContext& q, std::string_view topic,
                        std::span<const std::string> receipts);
Settle nack(QueueContext& q, std::string_view topic, std::string_view receipt,
            std::optional<Micros> delay);
Settle extend(QueueContext& q, std::string_view topic, std::string_view receipt, Micros lease);

// Client::purge and Client::forget_dedup_keys.
std::uint64_t purge(QueueContext& q, std::string_view topic, std::string_view group);
void forget_dedup_keys(QueueContext& q, std::string_view topic);

// Client::subscribe (waiting.cc): a subscription to the group's waiter; Client::Subscription's
// members (also in waiting.cc) cancel it when destroyed.
std::shared_ptr<Client::Subscription::Impl> subscribe(QueueContext& q, std::string_view topic,
                                                      std::string_view group,
                                                      std::function<void()> wake);

// exact_up_to 0: counts every row; else reads about 2 * exact_up_to rows per table and
// estimates beyond (Client::stats).
TopicStats stats(QueueContext& q, std::string_view topic, std::string_view group,
                 std::uint64_t exact_up_to);
std::vector<InFlightMessage> in_flight(QueueContext& q, std::string_view topic,
                                       std::string_view group, std::size_t limit);
std::vector<DeadLetter> dead_letters(QueueContext& q, std::string_view topic,
                                     std::string_view group, std::size_t limit);
std::size_t requeue_dead(QueueContext& q, std::string_view topic, std::string_view group,
                         std::span<const std::uint64_t> ids);
std::size_t delete_dead(QueueContext& q, std::string_view topic, std::string_view group,
                        std::span<const std::uint64_t> ids);

// The archive (settle.cc): rows from from_id on, in id order; purge deletes rows past the
// topic's retention in bounded batches and returns how many went.
std::vector<ArchivedMessage> archived(QueueContext& q, std::string_view topic,
                                      std::uint64_t from_id, std::size_t limit);
std::uint64_t purge_archive(QueueContext& q, std::string_view topic);
// One bounded purge statement: deletes up to kArchivePurgeRows archived rows acknowledged over
// `keep` ago, walking the acked_at index in autocommit; returns how many went.
constexpr std::uint64_t kArchivePurgeRows = 1000;
std::uint64_t purge_archive_rows(Connection& c, const TopicTables& t, Micros keep);

// --- Exactly-once (exactly_once.cc; across databases: xa_process.cc) -------------------------

// What one exactly-once transaction did.
struct ProcessOutcome {
  std::size_t processed = 0;
  bool dead_lettered = false;  // only dead letters were at the front: look again at once
  std::vector<std::uint64_t> promoted;  // keyed messages moved in behind finished ones
  std::size_t dead_letters = 0;
  std::vector<double> end_to_end;  // seconds from each processed message's send to the commit
};
// A batch claimed for exactly-once processing, inside the caller's transaction. `done` when
// there is nothing to hand a handler (the transaction is then committed): dead letters were
// moved (they commit on their own), or nothing was claimable.
struct ClaimedBatch {
  std::optional<ProcessOutcome> done;
  std::vector<Message> messages;   // receipt empty, lease_expires_at the end of time
  std::vector<double> end_to_end;  // seconds from each message's send to the claim
  std::chrono::steady_clock::time_point claimed_at;
  // The outcome once the batch committed: end_to_end runs to now.
  ProcessOutcome processed(std::vector<std::uint64_t> promoted) &&;
};
// Claims up to max_messages (FOR UPDATE SKIP LOCKED) and appends their ids to `handed`.
ClaimedBatch claim_batch(QueueContext& q, Connection& c, const TopicInfo& topic,
                         const TopicTables& t, int max_messages, std::vector<Param>& handed);
// Archives (when the topic keeps an archive) and deletes the batch's rows, which c's transaction
// holds, and moves their keys on; returns the keyed messages moved in.
std::vector<std::uint64_t> acknowledge_batch(Connection& c, const TopicInfo& topic,
                                             const TopicTables& t,
                                             const std::vector<Message>& messages);
// Counts a failed handler's delivery as an attempt, in its own statement (the transaction that
// claimed the messages is gone): past max_attempts they are dead-lettered. Best effort.
void count_failed_attempt(QueueContext& q, const TopicInfo& topic, const TopicTables& t,
                          std::vector<Param> ids);
// One exactly-once transaction over one queue table; sets handler_failed when an error thrown
// is the handler's own.
using ProcessOnce =
    std::function<ProcessOutcome(const TopicLayout&, const Unit&, bool& handler_failed)>;
// The claim loop of process and process_xa: waits up to options.wait for claimable messages in
// the group's partitions, runs `once` on them in turn, counts metrics.
std::size_t process_units(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                          const ProcessOnce& once);
std::size_t process_xa(QueueContext& q, std::string_view topic, const XaResource& resource,
                       const ProcessOptions& options, const TransactionalHandler& handler);
XaRecovery recover_xa(QueueContext& q, const XaResource& resource);
std::vector<XaBranchStatus> xa_status(QueueContext& q, const XaResource& resource);

}  // namespace txmq::internal
