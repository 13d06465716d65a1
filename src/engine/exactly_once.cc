// Exactly-once processing: the claim, the handler's statements and the acknowledgement are one
// transaction. The claimed rows are held by the transaction's row locks (FOR UPDATE SKIP LOCKED:
// peers skip them), not by a lease: if the handler throws, the process dies or the connection
// drops, the server rolls everything back and the rows are claimable again at once.
#include "engine/exactly_once.h"

#include <fmt/format.h>

#include <thread>

#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/announce.h"
#include "engine/claim.h"
#include "catalog/keys.h"
#include "engine/queue_context.h"
#include "engine/retry.h"
#include "engine/settle.h"
#include "engine/transaction_impl.h"

namespace txmq::internal {

// A handler that failed had its messages rolled back; count the delivery as an attempt (in its
// own statement, as the transaction that claimed them is gone), so that a message that always
// fails reaches the dead-letter table. Best effort: the database may be what failed.
// The messages come back after the topic's retry delay, as after a nack.
void count_failed_attempt(QueueContext& q, const TopicInfo& topic, const TopicTables& t,
                          std::vector<Param> ids) {
  if (ids.empty()) return;
  q.hints.lower(t.rows_key, std::get<std::uint64_t>(ids.front()));
  try {
    const std::size_t n = in_list_size(ids.size());
    pad_ids(ids, 0, n);
    std::vector<Param> params;
    bind_retry_delay(params, topic.options.retry);
    params.insert(params.end(), ids.begin(), ids.end());
    q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      // visible_at first: it reads attempts before the increment.
      c.execute(fmt::format("UPDATE {} SET visible_at = NOW(6) + INTERVAL {} MICROSECOND, "
                            "attempts = attempts + 1 WHERE {}id IN {}",
                            t.queue, retry_delay_sql("attempts"), t.q_and, placeholders(n)),
                params);
    });
  } catch (const Error&) {
  }
}

// Claims a batch inside the transaction open on c (see the engine's headers).
ClaimedBatch claim_batch(QueueContext& q, Connection& c, const TopicInfo& topic,
                         const TopicTables& t, int max_messages, std::vector<Param>& handed) {
  ClaimedBatch batch;
  Result r = select_claimable(q, c, t, max_messages, topic.options.fair);
  std::vector<Param> dead_ids;
  for (const Row& row : r.rows) {
    if (past_max_attempts(topic.options, row.i64(1))) dead_ids.push_back(row.u64(0));
  }
  if (!dead_ids.empty()) {
    // Dead letters commit on their own, whatever a handler later does.
    const std::size_t count = dead_ids.size();
    std::vector<std::uint64_t> promoted = move_to_dead_letters(q, c, topic, t, std::move(dead_ids));
    c.commit();
    batch.done = ProcessOutcome{0, true, std::move(promoted), count, {}};
    return batch;
  }
  if (r.rows.empty()) {
    c.commit();
    batch.done = ProcessOutcome{};
    return batch;
  }
  batch.claimed_at = std::chrono::steady_clock::now();
  const std::int64_t now_us = r.rows[0].i64(3);
  batch.now_us = now_us;
  batch.messages.reserve(r.rows.size());
  for (Row& row : r.rows) {
    batch.end_to_end.push_back(static_cast<double>(now_us - row.i64(2)) / 1e6);
    batch.messages.push_back(message_from_row(row));
    batch.messages.back().lease_expires_at = Clock::time_point::max();
    handed.push_back(batch.messages.back().id);
  }
  return batch;
}

std::vector<std::uint64_t> acknowledge_batch(Connection& c, const TopicInfo& topic,
                                             const TopicTables& t,
                                             const std::vector<Message>& messages) {
  std::vector<Param> ids;
  ids.reserve(messages.size());
  std::string id_list = "[";
  for (const Message& m : messages) {
    ids.push_back(m.id);
    if (id_list.size() > 1) id_list += ',';
    id_list += std::to_string(m.id);
  }
  id_list += ']';
  const std::size_t n = in_list_size(ids.size());
  pad_ids(ids, 0, n);
  if (topic.options.archive > Micros{0}) {
    c.execute(archive_sql(t, fmt::format("WHERE {}id IN {}", t.q_and, placeholders(n))), ids);
  }
  // Row by row through the primary key, from the list: `DELETE … WHERE id IN (…)` scans the
  // whole table when the server thinks it small (a queue near the end of a drain), and a scan
  // waits on the rows other consumers' transactions hold: two such deletes deadlock.
  Result deleted = c.execute(
      fmt::format("DELETE q FROM JSON_TABLE(CAST(? AS CHAR CHARACTER SET utf8mb4), '$[*]' COLUMNS "
                  "(id BIGINT UNSIGNED PATH '$')) AS j STRAIGHT_JOIN {} AS q FORCE INDEX (PRIMARY) "
                  "ON {}q.id = j.id",
                  t.queue, t.shared() ? "q." + t.q_and : ""),
      {std::string_view(id_list)});
  if (deleted.affected_rows != messages.size()) {
    throw Error(Errc::kInternal,
                fmt::format("exactly-once acknowledgement deleted {} of {} locked rows",
                            deleted.affected_rows, messages.size()));
  }
  std::vector<std::string> keys;
  for (const Message& m : messages) {
    if (m.key) keys.push_back(*m.key);
  }
  return finish_keyed(c, t, keys);
}

ProcessOutcome ClaimedBatch::processed(std::vector<std::uint64_t> promoted) && {
  const double handled =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - claimed_at).count();
  for (double& seconds : end_to_end) seconds += handled;
  return ProcessOutcome{messages.size(), false, std::move(promoted), 0, std::move(end_to_end)};
}

namespace {

using Outcome = ProcessOutcome;

// `handler_failed` tells the caller whether an error thrown is the handler's own.
Outcome process_once(QueueContext& q, const TopicInfo& topic, const TopicTables& t,
                     int max_messages, const TransactionalHandler& handler,
                     bool& handler_failed) {
  std::vector<Param> handed;  // ids the handler was given last
  handler_failed = false;
  try {
    return q.pool.run(
        OnLostConnection::kRetry, Work::kTransaction, [&](Connection& c, const Attempt&) {
          handed.clear();
          handler_failed = false;
          c.unbound_idle();  // the handler may take its time
          c.begin();
          ClaimedBatch batch = claim_batch(q, c, topic, t, max_messages, handed);
          if (batch.done) return std::move(*batch.done);
          const std::vector<Message>& messages = batch.messages;
          const auto sent = lend_transaction(q, c, [&](Transaction& tx) {
            try {
              handler(tx, std::span<const Message>(messages));
            } catch (...) {
              handler_failed = true;
              throw;
            }
          });
          std::vector<std::uint64_t> promoted = acknowledge_batch(c, topic, t, messages);
          c.commit();
          announce_sent(q, sent);
          return std::move(batch).processed(std::move(promoted));
        });
  } catch (const Error& e) {
    // Deadlocks and lost connections were retried by the pool until it gave up: not the
    // handler's doing. A commit with an unknown outcome either deleted the messages with the
    // handler's work or left both undone: nothing to count.
    if (handler_failed && !e.retryable() && e.code() != Errc::kCommitUnknown) {
      count_failed_attempt(q, topic, t, std::move(handed));
    }
    throw;
  } catch (...) {
    if (handler_failed) count_failed_attempt(q, topic, t, std::move(handed));
    throw;
  }
}

}  // namespace

std::size_t process_units(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                          const ProcessOnce& once) {
  check_claim_options(options.max_messages, options.wait);
  const Topic resolved = q.catalog.resolve(topic);
  const TopicLayout& layout = resolved->layout;
  const GroupEntry& entry = layout.group(options.group);
  const std::string& group = entry.name;
  const std::vector<const QueueRef*> units = resolved->claim_order(entry, options.partitions);
  if (units.empty()) return 0;  // none of them on this server
  std::size_t processed = 0;
  claim_within(q, units.front()->channel, queue_tables_of(units), options.wait, [&] {
    // One transaction holds one partition's messages: the first partition, in turn, that has
    // some.
    const std::size_t first = q.turn.fetch_add(1) % units.size();
    bool dead_lettered = false;
    for (std::size_t i = 0; i < units.size(); ++i) {
      const QueueRef& unit = *units[(first + i) % units.size()];
      // A missing table is the topic's (dropped meanwhile) unless the handler's own statement
      // met it: then the handler's error goes to the caller as it was.
      bool handler_failed = false;
      Outcome outcome;
      try {
        outcome = once(layout, unit, handler_failed);
      } catch (const Error& e) {
        if (handler_failed) throw;
        if (!q.catalog.made_missing_tables(e, topic)) rethrow_for_topic(q.catalog, e, topic);
        continue;  // the topic's tables made at its first use: nothing was there to process
      }
      made_claimable(q, unit, outcome.promoted);
      q.metrics.count(topic, group, Counter::kDeadLettered, outcome.dead_letters);
      q.metrics.count(topic, group, Counter::kReceived, outcome.processed);
      q.metrics.count(topic, group, Counter::kAcked, outcome.processed);
      for (double seconds : outcome.end_to_end) {
        q.metrics.observe(topic, group, Histogram::kEndToEnd, seconds);
      }
      dead_lettered = dead_lettered || outcome.dead_lettered;
      processed = outcome.processed;
      if (processed == static_cast<std::size_t>(options.max_messages)) return ClaimTry::kGotAll;
      if (processed > 0) return ClaimTry::kGot;
    }
    return dead_lettered ? ClaimTry::kAgainNow : ClaimTry::kEmpty;
  });
  return processed;
}

std::size_t process(QueueContext& q, std::string_view topic, const ProcessOptions& options,
                    const TransactionalHandler& handler) {
  if (!handler) throw Error(Errc::kInvalidArgument, "process needs a handler");
  return process_units(q, topic, options,
                       [&](const TopicLayout& layout, const QueueRef& unit,
                           bool& handler_failed) {
                         return process_once(q, layout.info, unit.tables, options.max_messages,
                                             handler, handler_failed);
                       });
}

}  // namespace txmq::internal
