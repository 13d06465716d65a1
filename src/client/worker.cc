// Worker: N threads that claim, run a handler, and settle, on the public Client API.
#include "txmq/worker.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "util/backoff.h"

namespace txmq {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Receives wait in slices so that stop() is noticed within one; an idle slice costs no
// statement (the topic's waiter knows the topic is empty; waiters.cc).
constexpr auto kWaitSlice = std::chrono::milliseconds(250);
constexpr auto kExtenderTick = std::chrono::milliseconds(50);
constexpr int kSettleTries = 6;

// Both constructors' checks; `max_batch` differs (a leased batch is handled one by one).
void check_worker_options(const WorkerOptions& o, int max_batch, std::string_view batch_what) {
  if (o.threads < 1 || o.threads > 256) {
    throw Error(Errc::kInvalidArgument, "worker threads must be from 1 to 256");
  }
  if (o.batch < 1 || o.batch > max_batch) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{} must be from 1 to {}", batch_what, max_batch));
  }
  if (o.ack_every < 1 || o.ack_every > 1000) {
    throw Error(Errc::kInvalidArgument, "worker ack_every must be from 1 to 1000");
  }
  if (o.ack_max_delay < Micros{0} || o.ack_max_delay > std::chrono::hours(1)) {
    throw Error(Errc::kInvalidArgument, "worker ack_max_delay must be from 0 to 1 hour");
  }
}

}  // namespace

struct Worker::Impl {
  Impl(Client& c, std::string t, MessageHandler h, WorkerOptions o)
      : client(c), topic(std::move(t)), handler(std::move(h)), options(std::move(o)) {}

  // A message a thread holds the lease of: claimed and waiting its turn, running, or handled
  // with its acknowledgement held (ack_every > 1). The extender keeps all of them leased.
  struct Leased {
    std::string receipt;
    std::uint64_t id = 0;
    SteadyClock::time_point extended;  // when the lease last started: the claim or an extend
    bool lost = false;
    // Its acknowledgement or give-back is on its way: an extend that misses (the row already
    // gone) is that settle's to report, not a lost lease.
    bool settling = false;
  };

  // A batch a thread holds (Client::hold), which the extender leases once it has been held for
  // hold_limit, perhaps while a handler runs: the two take turns under `lock` (never taken
  // while holding `mutex`).
  struct HeldTurn {
    std::mutex lock;
    HeldBatch* batch = nullptr;
    bool leased = false;  // lease_rest ran (receipts empty if it failed: the batch rolled back)
    std::map<std::uint64_t, std::string> receipts;  // by message id, once leased
  };

  void event(const std::string& text) {
    if (options.on_event) {
      options.on_event(text);
    } else {
      std::fprintf(stderr, "txmq worker: %s\n", text.c_str());
    }
  }

  // Sleeps up to d, returning early on stop.
  void pause(std::chrono::microseconds d) {
    std::unique_lock lock(mutex);
    wake.wait_for(lock, d, [this] { return stop_requested; });
  }

  bool stopping() {
    std::lock_guard lock(mutex);
    return stop_requested;
  }

  void request_stop() {
    std::lock_guard lock(mutex);
    stop_requested = true;
    wake.notify_all();
  }

  void fail(std::exception_ptr e) {
    std::lock_guard lock(mutex);
    if (!failure) failure = std::move(e);
    stop_requested = true;
    wake.notify_all();
  }

  // stop_when_empty with several XA threads: a thread whose claim found nothing may have skipped
  // rows that another thread's transaction holds locked, and that transaction may still roll
  // back and give them back (a retryable failure). So "empty" counts only when no other thread is
  // in the middle of a batch: until then the thread waits and looks again. (Under TSan a Worker
  // of 3 XA threads stopped with 1 message of 300 left ready.)
  struct InFlight {
    Impl& worker;
    explicit InFlight(Impl& w) : worker(w) {
      std::lock_guard lock(worker.mutex);
      ++worker.in_flight;
    }
    ~InFlight() {
      std::lock_guard lock(worker.mutex);
      --worker.in_flight;
      worker.wake.notify_all();
    }
  };
  bool nothing_in_flight() {
    std::unique_lock lock(mutex);
    if (in_flight == 0) return true;
    wake.wait(lock, [&] { return in_flight == 0 || stop_requested; });
    return false;
  }

  // Reserves up to `want` messages against options.limit; 0 when the limit is reached.
  int reserve(int want) {
    if (options.limit == 0) return want;
    std::lock_guard lock(mutex);
    const std::uint64_t left = options.limit - std::min(options.limit, reserved);
    const int got = static_cast<int>(std::min<std::uint64_t>(left, static_cast<std::uint64_t>(want)));
    reserved += static_cast<std::uint64_t>(got);
    return got;
  }
  // A thread found the limit reserved by others: it ends, and the last one to end stops the
  // worker. (Stopping at once gave back what the others had leased but not yet handled, so a
  // worker with a limit handled fewer messages than it could.)
  void reached_limit() {
    std::lock_guard lock(mutex);
    if (++ended_at_limit < options.threads) return;
    stop_requested = true;
    wake.notify_all();
  }
  void unreserve(int n) {
    if (options.limit == 0 || n <= 0) return;
    std::lock_guard lock(mutex);
    reserved -= static_cast<std::uint64_t>(n);
  }

  // After a retryable failure of `call` (receive, process_xa): says so, and waits the backoff.
  void ride_out(int& outages, const internal::Backoff& backoff, std::string_view call,
                const Error& e) {
    ++outages;
    const auto delay = backoff.delay(std::min(outages, 10));
    event(fmt::format("topic {}: {} failed ({}); retrying in {} ms", topic, call, e.what(),
                      delay.count() / 1000));
    pause(delay);
  }

  // Runs settle() until it gives an answer, retrying while the database is unreachable; when
  // it cannot, reports gave_up(error) and returns nullopt (the messages' leases will end).
  template <typename F, typename GaveUp>
  auto with_settle_retries(F&& settle, GaveUp&& gave_up) -> std::optional<decltype(settle())> {
    const internal::Backoff backoff{std::chrono::milliseconds(100), std::chrono::seconds(5)};
    for (int attempt = 1;; ++attempt) {
      try {
        return settle();
      } catch (const Error& e) {
        if (!e.retryable() || attempt >= kSettleTries) {
          event(gave_up(e));
          return std::nullopt;
        }
        std::this_thread::sleep_for(backoff.delay(attempt));
      }
    }
  }

  // with_settle_retries for one message's ack or nack.
  template <typename F>
  std::optional<Settle> settle_with_retries(const Message& m, const char* what, F&& settle) {
    return with_settle_retries(std::forward<F>(settle), [&](const Error& e) {
      return fmt::format("message {}: could not {} it ({}); it will be delivered again when its "
                         "lease ends",
                         m.id, what, e.what());
    });
  }

  void hold_leases(std::size_t slot, const std::vector<Message>& messages,
                   SteadyClock::time_point claimed) {
    std::lock_guard lock(mutex);
    std::vector<Leased>& held = leased[slot];
    for (const Message& m : messages) held.push_back(Leased{m.receipt, m.id, claimed});
  }

  void settling(std::size_t slot, std::span<const std::string> receipts) {
    std::lock_guard lock(mutex);
    for (Leased& l : leased[slot]) {
      if (std::find(receipts.begin(), receipts.end(), l.receipt) != receipts.end()) {
        l.settling = true;
      }
    }
  }

  void release_leases(std::size_t slot, std::span<const std::string> receipts) {
    std::lock_guard lock(mutex);
    std::vector<Leased>& held = leased[slot];
    for (const std::string& r : receipts) {
      auto it = std::find_if(held.begin(), held.end(),
                             [&](const Leased& l) { return l.receipt == r; });
      if (it != held.end()) held.erase(it);
    }
  }

  // The acknowledgements a thread holds (ack_every > 1): handled messages, in handling order.
  struct HeldAcks {
    std::vector<std::string> receipts;
    std::vector<std::uint64_t> ids;
    SteadyClock::time_point oldest;
  };

  // Acknowledges the held messages in one call (one statement per queue and kind), retrying
  // while the database is unreachable.
  void flush_acks(std::size_t slot, HeldAcks& held) {
    if (held.receipts.empty()) return;
    settling(slot, held.receipts);
    const std::vector<Settle> results =
        with_settle_retries([&] { return client.ack(topic, held.receipts); },
                            [&](const Error& e) {
                              return fmt::format(
                                  "could not acknowledge {} messages (ids {} to {}): {}; they "
                                  "will be delivered again when their leases end",
                                  held.receipts.size(), held.ids.front(), held.ids.back(),
                                  e.what());
                            })
            .value_or(std::vector<Settle>{});
    record_acks(slot, held, results);
  }

  // Counts the outcomes of the held acknowledgements (none when they could not be sent), and
  // lets their leases go.
  void record_acks(std::size_t slot, HeldAcks& held, const std::vector<Settle>& results) {
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (results[i] == Settle::kOk) {
        ++acked;
      } else {
        ++leases_lost;
        event(fmt::format("message {}: its lease was lost before it was acknowledged; the "
                          "outcome was not applied (another consumer has it)",
                          held.ids[i]));
      }
    }
    release_leases(slot, held.receipts);
    held.receipts.clear();
    held.ids.clear();
  }

  // Runs the handler and settles: at once, or by adding the message to `held` (ack_every > 1,
  // or `ride`: the acknowledgement goes with the next receive).
  // Runs the handler; false (and says why) when it threw.
  bool run_handler(const Message& m) {
    std::string failure_text;
    try {
      handler(m);
      return true;
    } catch (const std::exception& e) {
      failure_text = e.what();
    } catch (...) {
      failure_text = "unknown exception";
    }
    event(fmt::format("message {} (attempt {}) failed: {}; retried after the topic's retry delay",
                      m.id, m.attempt, failure_text));
    return false;
  }

  void handle(const Message& m, std::size_t slot, HeldAcks& held, bool ride) {
    handle_outcome(m, slot, held, run_handler(m), ride);
  }

  // Settles a leased message whose handler ran: acknowledges it (at once, or held), or gives it
  // back.
  void handle_outcome(const Message& m, std::size_t slot, HeldAcks& held, bool ok, bool ride) {
    if (ok && (options.ack_every > 1 || ride)) {
      if (held.receipts.empty()) held.oldest = SteadyClock::now();
      held.receipts.push_back(m.receipt);
      held.ids.push_back(m.id);
      return;
    }
    settling(slot, std::span<const std::string>(&m.receipt, 1));
    std::optional<Settle> s;
    if (ok) {
      s = settle_with_retries(m, "acknowledge", [&] { return client.ack(topic, m.receipt); });
      if (s == Settle::kOk) ++acked;
    } else {
      s = settle_with_retries(m, "give back", [&] { return client.nack(topic, m.receipt); });
      if (s == Settle::kOk) ++retried;
    }
    if (s && *s != Settle::kOk) {
      ++leases_lost;
      event(fmt::format("message {}: its lease was lost before the handler finished; the outcome "
                        "was not applied (another consumer has it)",
                        m.id));
    }
    release_leases(slot, std::span<const std::string>(&m.receipt, 1));
  }

  // Gives a leased message that a stop left unstarted back at once, and lets its lease go.
  void give_back(std::size_t slot, const Message& m, const std::string& receipt) {
    settling(slot, std::span<const std::string>(&receipt, 1));
    settle_with_retries(m, "give back", [&] { return client.nack(topic, receipt, Micros{0}); });
    release_leases(slot, std::span<const std::string>(&receipt, 1));
  }

  bool acks_due(const HeldAcks& held) const {
    return !held.receipts.empty() &&
           (held.receipts.size() >= static_cast<std::size_t>(options.ack_every) ||
            SteadyClock::now() - held.oldest >= options.ack_max_delay);
  }

  void run_thread(std::size_t slot) {
    HeldAcks held;
    try {
      if (hold_limit > Micros{0}) {
        consume_held(slot, held);
      } else {
        consume(slot, held);
      }
    } catch (...) {
      flush_acks(slot, held);
      throw;
    }
    flush_acks(slot, held);
  }

  void consume(std::size_t slot, HeldAcks& held) {
    const internal::Backoff backoff{std::chrono::milliseconds(100), std::chrono::seconds(5)};
    int outages = 0;
    while (!stopping()) {
      const int want = reserve(options.batch);
      if (want == 0) {
        reached_limit();
        break;
      }
      std::vector<Message> messages;
      try {
        ReceiveOptions r;
        r.max_messages = want;
        r.lease = lease;
        // Acknowledgements that are due ride in the claim's transaction: one commit for both.
        // With some held the receive does not wait (a riding one answers at once, so that the
        // acknowledged messages leave the extender's list before it could extend them; one
        // not riding sends them before it waits, below).
        const bool ride = acks_due(held);
        r.wait = options.stop_when_empty || !held.receipts.empty() ? Micros{0}
                                                                   : Micros(kWaitSlice);
        r.group = options.group;
        r.partitions = options.partitions;
        if (ride) {
          settling(slot, held.receipts);
          std::vector<Settle> settled;
          messages = client.ack_and_receive(topic, held.receipts, settled, r);
          record_acks(slot, held, settled);
        } else {
          messages = client.receive(topic, r);
        }
        hold_leases(slot, messages, SteadyClock::now());
        if (outages > 0) event(fmt::format("topic {}: receiving again", topic));
        outages = 0;
      } catch (const Error& e) {
        unreserve(want);
        if (e.code() == Errc::kCommitUnknown && !held.receipts.empty()) {
          // The claim that carried them: they may or may not be acknowledged.
          event(fmt::format("topic {}: {}; {} messages (ids {} to {}) may be delivered again",
                            topic, e.what(), held.receipts.size(), held.ids.front(),
                            held.ids.back()));
          record_acks(slot, held, {});
        } else {
          flush_acks(slot, held);  // on their own (they did not ride), with retries
        }
        if (!e.retryable() && e.code() != Errc::kCommitUnknown) {
          fail(std::current_exception());
          break;
        }
        ride_out(outages, backoff, "receive", e);
        continue;
      }
      unreserve(want - static_cast<int>(messages.size()));
      if (messages.empty() && !held.receipts.empty()) {
        flush_acks(slot, held);
        continue;
      }
      if (messages.empty()) {
        if (options.stop_when_empty) {
          request_stop();
          break;
        }
        continue;
      }
      std::size_t next = 0;
      for (; next < messages.size(); ++next) {
        if (next > 0 && stopping()) break;
        // The last one's acknowledgement (and any held) rides with the next receive.
        const bool last = next + 1 == messages.size();
        handle(messages[next], slot, held, last);
        if (!last && acks_due(held)) flush_acks(slot, held);
      }
      // Leased but not started when a stop came: give them back at once.
      for (; next < messages.size(); ++next) {
        give_back(slot, messages[next], messages[next].receipt);
      }
    }
  }

  // Runs the handler on a held batch's message i and records the outcome: as a mark on the batch
  // while it is held, or, once the extender leased the batch, by the message's receipt.
  void handle_held(std::size_t slot, HeldTurn& turn, HeldBatch& batch, std::size_t i,
                   HeldAcks& held) {
    const Message& m = batch.messages()[i];
    const bool ok = run_handler(m);
    std::unique_lock lock(turn.lock);
    if (!turn.leased) {
      if (ok) {
        batch.ack(i);
      } else {
        batch.nack(i);
      }
      return;
    }
    const auto receipt = turn.receipts.find(m.id);
    if (receipt == turn.receipts.end()) {
      // The lease could not be written: the batch rolled back and the message is claimable.
      ++leases_lost;
      event(fmt::format("message {}: its held batch was lost before the handler finished; the "
                        "outcome was not applied (it will be delivered again)",
                        m.id));
      return;
    }
    Message as_leased = m;
    as_leased.receipt = receipt->second;
    lock.unlock();
    // On as a leased message (ack_every and riding acknowledgements as for those).
    handle_outcome(as_leased, slot, held, ok, false);
  }

  // The extender's part in held batches: leases each batch held for hold_limit.
  void lease_long_held_batches() {
    const auto now = SteadyClock::now();
    for (std::size_t slot = 0; slot < turns.size(); ++slot) {
      HeldTurn& turn = *turns[slot];
      std::lock_guard lock(turn.lock);
      if (turn.batch == nullptr || turn.leased || now - turn.batch->claimed_at() < hold_limit) {
        continue;
      }
      turn.leased = true;
      HeldResult result;
      std::vector<Message> leased_messages;
      try {
        leased_messages = turn.batch->lease_rest(lease, &result);
      } catch (const Error& e) {
        event(fmt::format("topic {}: a held batch of {} messages could not be leased ({}); they "
                          "are claimable again, and those handled are delivered again",
                          topic, turn.batch->size(), e.what()));
        continue;
      }
      acked += result.acked;
      retried += result.nacked;
      for (const Message& m : leased_messages) turn.receipts.emplace(m.id, m.receipt);
      hold_leases(slot, leased_messages, now);
    }
  }

  // The consume loop with held batches (hold_limit > 0): claims with Client::hold, handles, and
  // settles the batch with one commit; the extender leases a batch that runs long.
  void consume_held(std::size_t slot, HeldAcks& held) {
    const internal::Backoff backoff{std::chrono::milliseconds(100), std::chrono::seconds(5)};
    HeldTurn& turn = *turns[slot];
    int outages = 0;
    while (!stopping()) {
      const int want = reserve(options.batch);
      if (want == 0) {
        reached_limit();
        break;
      }
      // Acknowledgements of an earlier batch that was leased go first, on their own.
      flush_acks(slot, held);
      HeldBatch batch;
      std::optional<InFlight> busy(std::in_place, *this);
      try {
        ReceiveOptions r;
        r.max_messages = want;
        r.lease = lease;
        r.wait = options.stop_when_empty ? Micros{0} : Micros(kWaitSlice);
        r.group = options.group;
        r.partitions = options.partitions;
        batch = client.hold(topic, r);
        if (outages > 0) event(fmt::format("topic {}: receiving again", topic));
        outages = 0;
      } catch (const Error& e) {
        busy.reset();
        unreserve(want);
        if (e.code() == Errc::kInvalidArgument) {
          // A sharded topic (or options receive refuses: it says so).
          consume(slot, held);
          return;
        }
        if (!e.retryable() && e.code() != Errc::kCommitUnknown) {
          fail(std::current_exception());
          break;
        }
        ride_out(outages, backoff, "receive", e);
        continue;
      }
      unreserve(want - static_cast<int>(batch.size()));
      if (batch.empty()) {
        busy.reset();
        if (options.stop_when_empty) {
          // Rows other threads hold may come back if their batch rolls back.
          if (!nothing_in_flight()) continue;
          request_stop();
          break;
        }
        continue;
      }
      {
        std::lock_guard lock(turn.lock);
        turn.batch = &batch;
        turn.leased = false;
        turn.receipts.clear();
      }
      // The extender must never see this batch after it is gone, whatever ends the loop.
      struct Unregister {
        HeldTurn& turn;
        ~Unregister() {
          std::lock_guard lock(turn.lock);
          turn.batch = nullptr;
        }
      };
      bool was_leased = false;
      std::size_t next = 0;
      {
        const Unregister unregister{turn};
        for (; next < batch.size(); ++next) {
          if (next > 0 && stopping()) break;
          handle_held(slot, turn, batch, next, held);
        }
        std::lock_guard lock(turn.lock);
        was_leased = turn.leased;
      }
      if (!was_leased) {
        // One commit settles the batch; what a stop left unstarted is released at once.
        try {
          const HeldResult result = batch.commit();
          acked += result.acked;
          retried += result.nacked;
        } catch (const Error& e) {
          // Not settled: toward a limit they count again when they come back.
          if (e.code() != Errc::kCommitUnknown) unreserve(static_cast<int>(batch.size()));
          if (e.retryable()) {
            // The database went away (a lost connection, a cluster node leaving): one outage
            // report, as for a receive.
            ride_out(outages, backoff,
                     fmt::format("the commit of a held batch of {} messages (they are claimable "
                                 "again and will be delivered again)",
                                 batch.size()),
                     e);
          } else {
            event(fmt::format("topic {}: a held batch of {} messages could not be committed "
                              "({}); {}",
                              topic, batch.size(), e.what(),
                              e.code() == Errc::kCommitUnknown
                                  ? "its handled messages may be delivered again"
                                  : "they are claimable again and will be delivered again"));
          }
        }
        continue;
      }
      // Leased but not started when a stop came: give them back at once.
      for (; next < batch.size(); ++next) {
        const auto receipt = turn.receipts.find(batch.messages()[next].id);
        if (receipt != turn.receipts.end()) {
          give_back(slot, batch.messages()[next], receipt->second);
        }
      }
    }
  }

  // An XA batch whose handler threw: process_xa counted the attempt; the messages come back.
  void batch_failed(std::size_t handed, const std::exception& e) {
    retried += handed;
    event(fmt::format("topic {}: a batch of {} failed ({}); retried after the topic's retry "
                      "delay",
                      topic, handed, e.what()));
  }

  // Exactly-once across databases: batches through process_xa, no leases to extend.
  void run_xa_thread() {
    const internal::Backoff backoff{std::chrono::milliseconds(100), std::chrono::seconds(5)};
    int outages = 0;
    while (!stopping()) {
      const int want = reserve(options.batch);
      if (want == 0) {
        request_stop();
        break;
      }
      ProcessOptions p;
      p.max_messages = want;
      p.wait = options.stop_when_empty ? Micros{0} : Micros(kWaitSlice);
      p.group = options.group;
      p.partitions = options.partitions;
      std::size_t handed = 0;
      std::size_t processed = 0;
      std::optional<InFlight> batch(std::in_place, *this);
      try {
        processed = client.process_xa(
            topic, *xa, p, [&](Transaction& tx, std::span<const Message> messages) {
              handed = messages.size();
              xa_handler(tx, messages);
            });
        if (outages > 0) event(fmt::format("topic {}: processing again", topic));
        outages = 0;
      } catch (const Error& e) {
        batch.reset();
        unreserve(want);
        if (!e.retryable() && handed == 0) {
          fail(std::current_exception());
          break;
        }
        if (handed > 0 && !e.retryable()) {
          batch_failed(handed, e);
          continue;
        }
        ride_out(outages, backoff, "process_xa", e);
        continue;
      } catch (const std::exception& e) {
        batch.reset();
        unreserve(want);
        batch_failed(handed, e);
        continue;
      }
      batch.reset();
      acked += processed;
      unreserve(want - static_cast<int>(processed));
      if (processed == 0 && options.stop_when_empty) {
        if (!nothing_in_flight()) continue;
        request_stop();
        break;
      }
    }
  }

  // Extends the lease of every message a thread holds (waiting its turn, running, or with its
  // acknowledgement held) each third of the lease.
  void run_extender() {
    std::unique_lock lock(mutex);
    while (!threads_done) {
      wake.wait_for(lock, kExtenderTick);
      if (hold_limit > Micros{0}) {
        lock.unlock();
        lease_long_held_batches();
        lock.lock();
      }
      const auto now = SteadyClock::now();
      std::vector<std::pair<std::size_t, Leased>> due;
      for (auto& [slot, held] : leased) {
        for (const Leased& r : held) {
          if (!r.lost && now - r.extended >= lease / 3) due.emplace_back(slot, r);
        }
      }
      lock.unlock();
      // All due at once, one statement per claim: extending them one by one took a round trip
      // each, and on a loaded machine the last of a batch of 100 could run out meanwhile.
      std::vector<Settle> outcomes;
      if (!due.empty()) {
        std::vector<std::string> receipts;
        receipts.reserve(due.size());
        for (const auto& entry : due) receipts.push_back(entry.second.receipt);
        try {
          outcomes = client.extend(topic, receipts, lease);
        } catch (const Error& e) {
          event(fmt::format("extending the leases of {} messages failed ({}); trying again",
                            due.size(), e.what()));
          due.clear();
        }
      }
      for (std::size_t k = 0; k < due.size(); ++k) {
        const auto& [slot, r] = due[k];
        const bool lost = outcomes[k] != Settle::kOk;
        bool still_held = false;
        {
          std::lock_guard relock(mutex);
          for (Leased& l : leased[slot]) {
            if (l.receipt != r.receipt) continue;
            l.extended = now;
            // A message whose settle is on its way (its row may be gone before the extend
            // reads it) was not lost: the settle says how it went.
            if (!l.settling) {
              l.lost = lost;
              still_held = true;
            }
          }
        }
        // A message settled while its extend ran (an acknowledged group: the row is gone) was
        // not lost.
        if (lost && still_held) {
          event(fmt::format("message {}: lease lost while its handler runs; another consumer "
                            "may run it too",
                            r.id));
        }
      }
      lock.lock();
    }
  }

  Client& client;
  const std::string topic;
  const MessageHandler handler;
  std::optional<XaResource> xa;  // the XA mode's resource and handler
  TransactionalHandler xa_handler;
  const WorkerOptions options;
  Micros lease{0};

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stop_requested = false;
  int in_flight = 0;  // XA threads, and held-batch threads, in the middle of a batch (InFlight)
  int ended_at_limit = 0;  // leased-message threads that found the limit reached
  bool threads_done = false;
  std::exception_ptr failure;
  std::uint64_t reserved = 0;
  std::map<std::size_t, std::vector<Leased>> leased;  // by thread slot
  std::vector<std::unique_ptr<HeldTurn>> turns;  // by thread slot
  Micros hold_limit{0};  // 0: no held batches
  std::atomic<std::uint64_t> acked{0}, retried{0}, leases_lost{0};
  std::vector<std::thread> threads;
  std::thread extender;
  bool joined = false;
};

Worker::Worker(Client& client, std::string topic, MessageHandler handler, WorkerOptions options)
    : impl_(std::make_unique<Impl>(client, std::move(topic), std::move(handler),
                                   std::move(options))) {
  const WorkerOptions& o = impl_->options;
  if (!impl_->handler) throw Error(Errc::kInvalidArgument, "a worker needs a handler");
  check_worker_options(o, 100, "worker batch");
  impl_->lease = o.lease.value_or(client.topic(impl_->topic).options.lease);
  if (o.hold_up_to < Micros{0} || o.hold_up_to > std::chrono::hours(1)) {
    throw Error(Errc::kInvalidArgument, "worker hold_up_to must be from 0 to 1 hour");
  }
  impl_->hold_limit = std::min(o.hold_up_to, impl_->lease / 3);
  for (int i = 0; i < o.threads; ++i) {
    impl_->turns.push_back(std::make_unique<Impl::HeldTurn>());
  }
  for (int i = 0; i < o.threads; ++i) {
    impl_->threads.emplace_back([this, i] {
      try {
        impl_->run_thread(static_cast<std::size_t>(i));
      } catch (...) {
        impl_->fail(std::current_exception());
      }
    });
  }
  impl_->extender = std::thread([this] { impl_->run_extender(); });
}

Worker::Worker(Client& client, std::string topic, XaResource resource,
               TransactionalHandler handler, WorkerOptions options)
    : impl_(std::make_unique<Impl>(client, std::move(topic), MessageHandler{},
                                   std::move(options))) {
  const WorkerOptions& o = impl_->options;
  if (!handler) throw Error(Errc::kInvalidArgument, "a worker needs a handler");
  check_worker_options(o, 10000, "an XA worker's batch");
  impl_->xa = std::move(resource);
  impl_->xa_handler = std::move(handler);
  client.topic(impl_->topic);  // a missing topic is the caller's error, now
  for (int i = 0; i < o.threads; ++i) {
    impl_->threads.emplace_back([this] {
      try {
        impl_->run_xa_thread();
      } catch (...) {
        impl_->fail(std::current_exception());
      }
    });
  }
  impl_->extender = std::thread([this] { impl_->run_extender(); });
}

Worker::~Worker() {
  stop();
  try {
    join();
  } catch (...) {
  }
}

void Worker::stop() { impl_->request_stop(); }

bool Worker::stopping() const { return impl_->stopping(); }

void Worker::join() {
  if (!impl_->joined) {
    for (std::thread& t : impl_->threads) t.join();
    {
      std::lock_guard lock(impl_->mutex);
      impl_->threads_done = true;
      impl_->wake.notify_all();
    }
    impl_->extender.join();
    impl_->joined = true;
  }
  std::lock_guard lock(impl_->mutex);
  if (impl_->failure) std::rethrow_exception(impl_->failure);
}

WorkerCounts Worker::counts() const {
  return {impl_->acked.load(), impl_->retried.load(), impl_->leases_lost.load()};
}

}  // namespace txmq
