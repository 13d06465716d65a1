#include "shards/shard_router.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/announce.h"
#include "engine/archive.h"
#include "engine/claim.h"
#include "engine/exactly_once.h"
#include "engine/inspect.h"
#include "engine/partitions.h"
#include "engine/purge.h"
#include "engine/queue_context.h"
#include "engine/send.h"
#include "engine/settle.h"
#include "shards/visits.h"
#include "wait/waiters.h"

namespace txmq::internal {

namespace {

constexpr auto kRouteFor = std::chrono::seconds(30);

// A topic's settings as each server keeps them: without the server list.
TopicOptions local_options(TopicOptions options) {
  options.servers.clear();
  return options;
}

// How long a call waits on one server for an answer about `items` messages before it goes on
// without that server: kSlowVisit, and more for big claims and settles (2 ms a message: a
// claim of 100 messages of 1 MiB is 100 MB to read).
std::chrono::nanoseconds visit_budget(std::size_t items) {
  return kSlowVisit + std::chrono::milliseconds(2) * items;
}

// The registry hears of the servers that a call went on without (skipped until their visit
// ends); `late` gets what such a visit returns when it ends.
template <typename T>
typename Visits<T>::Hooks hooks_of(ShardRegistry& registry,
                                   std::function<void(const std::string&, T&&)> late = {}) {
  return {[&registry](const std::string& s) { registry.stalled(s); },
          [&registry](const std::string& s) { registry.unstalled(s); }, std::move(late)};
}

Error not_answering(const std::string& server, std::string_view what) {
  return Error(Errc::kUnavailable,
               fmt::format("server '{}' did not answer {} in time (it accepts connections but "
                           "does not answer: stopped, or a host gone dark); it is skipped until "
                           "it answers again",
                           server, what));
}

}  // namespace

template <typename T>
std::vector<T> ShardRouter::on_each(const std::vector<std::string>& servers, std::string_view what,
                                    const std::function<T(QueueContext&)>& fn) {
  // A server that left a visit unanswered is not visited again meanwhile (a monitor's counts
  // every second would otherwise leave a thread a second waiting on it).
  for (const std::string& s : servers) {
    if (registry_.is_stalled(s)) throw not_answering(s, "an earlier call");
  }
  Visits<T> visits(registry_.visits(), hooks_of<T>(registry_));
  for (const std::string& s : servers) {
    visits.start(s, [&registry = registry_, s, fn] { return fn(registry.server(s)); });
  }
  if (!visits.wait(visit_budget(0))) {
    const std::vector<std::string> slow = visits.abandon();
    throw not_answering(slow.front(), what);
  }
  std::vector<T> out;
  for (std::size_t i = 0; i < visits.size(); ++i) out.push_back(visits.take(i));
  return out;
}

template <typename T>
std::optional<T> ShardRouter::on_one(const std::string& server, std::chrono::nanoseconds budget,
                                     std::function<T(QueueContext&)> fn) {
  // A server that left a visit unanswered is not visited again meanwhile (kUnavailable:
  // nothing ran there).
  if (registry_.is_stalled(server)) throw not_answering(server, "an earlier call");
  Visits<T> visits(registry_.visits(), hooks_of<T>(registry_));
  visits.start(server, [&registry = registry_, server, fn = std::move(fn)] {
    return fn(registry.server(server));
  });
  if (!visits.wait(budget)) {
    visits.abandon();
    return std::nullopt;
  }
  return visits.take(0);
}

ShardMap ShardRouter::must(std::string_view topic, bool fresh) {
  std::optional<ShardMap> p = registry_.shard_map(topic, fresh);
  if (!p) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic));
  return *p;
}

ShardMap ShardRouter::exact(std::string_view topic) {
  std::optional<ShardMap> p = registry_.reload(topic);
  if (!p) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic));
  return *p;
}

template <typename F>
auto ShardRouter::routed(std::string_view topic, F&& fn)
    -> decltype(fn(std::declval<const ShardMap&>())) {
  const auto deadline = std::chrono::steady_clock::now() + kRouteFor;
  for (int attempt = 1;; ++attempt) {
    const ShardMap p = must(topic, attempt > 1);
    try {
      return fn(p);
    } catch (const Error& e) {
      if (!is_not_placed_here(e)) throw;
      if (std::chrono::steady_clock::now() >= deadline) {
        throw Error(Errc::kUnavailable,
                    fmt::format("{}; the placement of topic '{}' did not settle within {} s{}",
                                e.what(), topic, kRouteFor.count(),
                                p.moving.empty() ? ""
                                                 : fmt::format(" (a move of partition {} is "
                                                               "unfinished: run txmq partition "
                                                               "move again)",
                                                               p.moving)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 20 * attempt)));
    }
  }
}

std::vector<std::string> ShardRouter::members(const ShardMap& p) {
  std::set<std::string> all(p.servers.begin(), p.servers.end());
  all.insert(p.partitions.begin(), p.partitions.end());
  return {all.begin(), all.end()};
}

std::string ShardRouter::server_of_id(const ShardMap& p, std::uint64_t id) {
  const unsigned partition = partition_of(id);
  return partition < p.partitions.size() ? p.partitions[partition] : std::string();
}

// --- Topics ----------------------------------------------------------------------------------

bool ShardRouter::create_topic(std::string_view name, const TopicOptions& options) {
  check_topic_name(name);
  const std::vector<std::string>& servers = options.servers;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    check_topic_name(servers[i]);
    if (std::find(servers.begin(), servers.begin() + static_cast<std::ptrdiff_t>(i),
                  servers[i]) != servers.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("server '{}' appears twice in the topic's servers", servers[i]));
    }
  }
  if (options.partitions < static_cast<int>(servers.size())) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{} servers for {} partitions: every server must hold one; give "
                            "--partitions {} or more",
                            servers.size(), options.partitions, servers.size()));
  }
  if (options.partitions < 1 || options.partitions > kMaxPartitions) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("partitions must be from 1 to {}", kMaxPartitions));
  }
  ShardMap wanted;
  wanted.topic = std::string(name);
  wanted.servers = servers;
  for (int p = 0; p < options.partitions; ++p) {
    wanted.partitions.push_back(servers[static_cast<std::size_t>(p) % servers.size()]);
  }
  if (std::optional<ShardMap> had = registry_.reload(name)) {
    const TopicInfo existing = topic(*had);
    if (existing.options != options) {
      throw Error(Errc::kAlreadyExists,
                  fmt::format("topic '{}' exists with other settings or servers ({}); change "
                              "them with update_topic (txmq topic set)",
                              name, join_names(had->servers)));
    }
    return false;
  }
  for (const std::string& s : servers) registry_.server(s);  // all recorded and reachable first
  // Each server gets the topic with all partitions' tables (a moved partition needs them) and
  // the partitions it holds; the shard map row then makes the topic exist.
  for (const std::string& s : servers) {
    QueueContext& q = registry_.server(s);
    if (!q.catalog.create(name, local_options(options), wanted.mask_of(s))) {
      q.catalog.set_placed(name, wanted.mask_of(s));  // a create cut short before
    }
  }
  if (!registry_.record(wanted)) return create_topic(name, options);  // another client won
  return true;
}

void ShardRouter::drop_topic(const ShardMap& p) {
  for (const std::string& s : members(p)) {
    try {
      registry_.server(s).catalog.drop(p.topic);
    } catch (const Error& e) {
      if (e.code() != Errc::kNotFound) throw;
    }
  }
  registry_.erase(p.topic);
}

TopicInfo ShardRouter::topic(const ShardMap& p) {
  std::optional<Error> last;
  for (const std::string& s : p.holders()) {
    try {
      TopicInfo info = registry_.server(s).catalog.get(p.topic);
      info.options.servers = p.servers;
      info.placement = p.partitions;
      info.placement_epoch = p.epoch;
      return info;
    } catch (const Error& e) {
      if (e.code() != Errc::kUnavailable) throw;
      last = e;
    }
  }
  throw *last;
}

void ShardRouter::update_topic(const ShardMap& had, const TopicOptions& options) {
  if (!options.servers.empty() && options.servers != had.servers) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("topic '{}' is sharded over {}: its servers cannot be changed by an "
                            "update (move partitions with txmq partition move)",
                            had.topic, join_names(had.servers)));
  }
  ShardMap next = had;
  if (options.partitions < static_cast<int>(had.partitions.size())) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("topic '{}' has {} partitions: partitions can be raised, not lowered",
                            had.topic, had.partitions.size()));
  }
  for (std::size_t p = had.partitions.size(); p < static_cast<std::size_t>(options.partitions);
       ++p) {
    next.partitions.push_back(had.servers[p % had.servers.size()]);
  }
  for (const std::string& s : members(next)) {
    registry_.server(s).catalog.update(had.topic, local_options(options), next.mask_of(s));
  }
  if (next.partitions != had.partitions && !registry_.replace(next, had.epoch)) {
    throw Error(Errc::kAborted,
                fmt::format("the placement of topic '{}' changed while it was updated; try again",
                            had.topic));
  }
}

// --- Sends -----------------------------------------------------------------------------------

template <typename T>
T ShardRouter::send_visit(const std::string& server, std::size_t items, std::size_t bytes,
                          std::function<T(QueueContext&)> fn) {
  // A second, and more for big batches (a few MB a second is slow for any server).
  std::optional<T> sent = on_one<T>(
      server, visit_budget(items) + std::chrono::microseconds(bytes / 4), std::move(fn));
  if (!sent) {
    throw Error(Errc::kCommitUnknown,
                fmt::format("{}: the send may or may not have been made (it commits if the server "
                            "answers again)",
                            not_answering(server, "a send").what()));
  }
  return std::move(*sent);
}

template <typename F>
auto ShardRouter::on_a_holder(const ShardMap& p, F&& fn)
    -> decltype(fn(std::declval<const std::string&>())) {
  // The servers in turn; one that cannot be reached now is skipped (nothing was written:
  // kUnavailable means the statement never ran) and avoided for a few seconds. Servers known
  // to be down are tried last, and only when every other one failed or none is left.
  const std::vector<std::string> holders = p.holders();
  const std::size_t first = turn_.fetch_add(1) % holders.size();
  std::optional<Error> last;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < holders.size(); ++i) {
      const std::string& s = holders[(first + i) % holders.size()];
      if (pass == 0 && registry_.is_down(s)) continue;
      try {
        return fn(s);
      } catch (const Error& e) {
        if (e.code() != Errc::kUnavailable) throw;
        registry_.mark_down(s);
        last = e;
      }
    }
    if (last) break;  // every server was tried
  }
  throw *last;
}

std::uint64_t ShardRouter::send(std::string_view topic, std::string_view payload,
                                const SendOptions& options) {
  return routed(topic, [&](const ShardMap& p) -> std::uint64_t {
    const auto start = std::chrono::steady_clock::now();
    // The send runs on a visit thread that may outlive this call: it owns copies.
    auto send_to = [&](const std::string& server) {
      return send_visit<std::uint64_t>(
          server, 1, payload.size(),
          [topic = std::string(topic), payload = std::string(payload), options,
           start](QueueContext& q) {
            const std::uint64_t id = send_one(q, topic, payload, options);
            q.metrics.sent(topic, start, 1);
            return id;
          });
    };
    // A key (or a dedup key, whose table is the server's) names one partition, so one server.
    const std::optional<std::string>& route = options.key ? options.key : options.dedup_key;
    if (route) {
      return send_to(
          p.partitions[partition_of_key(*route, static_cast<unsigned>(p.partitions.size()))]);
    }
    return on_a_holder(p, send_to);
  });
}

std::vector<std::uint64_t> ShardRouter::send_batch(std::string_view topic,
                                                   std::span<const OutgoingMessage> messages) {
  if (messages.empty()) return {};
  auto batch = std::make_shared<const std::vector<OutgoingMessage>>(messages.begin(),
                                                                    messages.end());
  std::size_t bytes = 0;
  for (const OutgoingMessage& m : messages) bytes += m.payload.size();
  return routed(topic, [&](const ShardMap& p) -> std::vector<std::uint64_t> {
    const auto start = std::chrono::steady_clock::now();
    auto send_to = [&](const std::string& server) {
      return send_visit<std::vector<std::uint64_t>>(
          server, messages.size(), bytes,
          [topic = std::string(topic), batch, start](QueueContext& q) {
            std::vector<std::uint64_t> ids = internal::send_batch(q, topic, *batch);
            q.metrics.sent(topic, start, ids.size());
            return ids;
          });
    };
    // A batch commits on one server: the one its keys name, else one in turn.
    std::string server;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const OutgoingMessage& m = messages[i];
      const std::optional<std::string>& route = m.key ? m.key : m.dedup_key;
      if (!route) continue;
      const unsigned partition =
          partition_of_key(*route, static_cast<unsigned>(p.partitions.size()));
      const std::string& s = p.partitions[partition];
      if (server.empty()) {
        server = s;
      } else if (s != server) {
        throw Error(Errc::kInvalidArgument,
                    fmt::format("message {} of the batch has a {} whose partition ({}) lives on "
                                "server '{}', an earlier one's on '{}': a batch to topic '{}' "
                                "commits on one server, so its keys and dedup keys must map to "
                                "partitions of one server (send it as several batches, one per "
                                "server)",
                                i, m.key ? "key" : "dedup key", partition, s, server, topic));
      }
    }
    if (!server.empty()) return send_to(server);
    return on_a_holder(p, send_to);
  });
}

// --- Claims ----------------------------------------------------------------------------------

namespace {

// The partitions of `server` a claim may take: those placed there, of the ones asked for.
std::vector<int> claimable_on(const ShardMap& p, const std::string& server,
                              const std::vector<int>& asked) {
  std::vector<int> here = p.partitions_on(server);
  if (asked.empty()) return here;
  std::vector<int> out;
  for (int partition : asked) {
    if (partition < 0 || partition >= static_cast<int>(p.partitions.size())) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' has partitions 0 to {}; there is no partition {}",
                              p.topic, p.partitions.size() - 1, partition));
    }
    if (std::find(here.begin(), here.end(), partition) != here.end()) out.push_back(partition);
  }
  return out;
}

// Wakes one waiting receive when any of its subscriptions fires.
struct Wake {
  std::mutex mutex;
  std::condition_variable cv;
  bool woken = false;
  void fire() {
    {
      std::lock_guard lock(mutex);
      woken = true;
    }
    cv.notify_all();
  }
  // Whether it was woken (not timed out).
  bool wait_until(std::chrono::steady_clock::time_point until) {
    std::unique_lock lock(mutex);
    return cv.wait_until(lock, until, [&] { return woken; });
  }
};

}  // namespace

template <typename Claim>
auto ShardRouter::claim_waiting(std::string_view topic, std::string_view group, Micros wait,
                           Claim&& claim) -> decltype(claim(std::declval<const ShardMap&>())) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto got = routed(topic, claim);
  bool woken = false;
  while (!got && std::chrono::steady_clock::now() < deadline) {
    // Subscribe on every holder (one waiter per server and group in this process, whatever
    // the number of receivers), then claim again: a send committed after that claim looked
    // fires a subscription. Look again at least every second (a server back from an outage).
    const ShardMap p = must(topic);
    auto wake = std::make_shared<Wake>();
    std::vector<std::shared_ptr<Subscriber>> subscriptions =
        subscribe_each(p, group, [wake] { wake->fire(); });
    got = routed(topic, claim);
    woken = !got && wake->wait_until(std::min(deadline, std::chrono::steady_clock::now() +
                                                               std::chrono::seconds(1)));
    for (auto& sub : subscriptions) {
      sub->cancel();
      sub->waiter->forget(*sub);
    }
  }
  if (!got && woken) got = routed(topic, claim);  // woken at the deadline: one last look
  return got;
}

std::vector<std::shared_ptr<Subscriber>> ShardRouter::subscribe_each(
    const ShardMap& p, std::string_view group, const std::function<void()>& wake) {
  // On each server at once (a subscription reads the topic's layout, which may wait on the
  // server); one that does not answer in time is ended when it does.
  using Subscription = std::shared_ptr<Subscriber>;
  auto end = [](Subscription& sub) {
    sub->cancel();
    sub->waiter->forget(*sub);
  };
  Visits<Subscription> visits(
      registry_.visits(),
      hooks_of<Subscription>(registry_, [end](const std::string&, Subscription&& late) mutable {
        end(late);
      }));
  for (const std::string& s : p.holders()) {
    if (registry_.is_down(s)) continue;
    visits.start(s, [&registry = registry_, s, topic = p.topic, group = std::string(group), wake] {
      return internal::subscribe(registry.server(s), topic, group, wake);
    });
  }
  visits.wait(visit_budget(0));
  visits.abandon();
  std::vector<Subscription> out;
  std::exception_ptr failed;
  for (std::size_t i = 0; i < visits.size(); ++i) {
    if (!visits.done(i)) continue;
    try {
      out.push_back(visits.take(i));
    } catch (const Error& e) {
      if (e.code() != Errc::kUnavailable) {
        failed = std::current_exception();
        continue;
      }
      registry_.mark_down(visits.server(i));
    }
  }
  if (failed) {
    for (Subscription& sub : out) end(sub);
    std::rethrow_exception(failed);
  }
  return out;
}

std::vector<Message> ShardRouter::claim_round(const ShardMap& p, std::string_view topic,
                                              const ReceiveOptions& options) {
  // The servers that may have messages, in turn; those known to be down count as failed.
  struct Holder {
    std::string server;
    std::vector<int> partitions;
  };
  const std::vector<std::string> holders = p.holders();
  const std::size_t first = turn_.fetch_add(1) % holders.size();
  std::vector<Holder> open;
  std::optional<Error> last;
  std::size_t tried = 0, failed = 0;
  for (std::size_t i = 0; i < holders.size(); ++i) {
    const std::string& s = holders[(first + i) % holders.size()];
    std::vector<int> partitions = claimable_on(p, s, options.partitions);
    if (partitions.empty()) continue;
    ++tried;
    if (registry_.is_down(s)) {
      ++failed;
      continue;
    }
    open.push_back({s, std::move(partitions)});
  }
  // The first pass asks the first server in turn for everything (a busy topic's receive is
  // one claim, one transaction, as on one server: sharing out every receive between the
  // servers measured 0.4x the messages a second with three). Each later pass asks the open
  // servers at once, sharing out what is still wanted (the first ones in turn get one more),
  // so that no more is claimed than asked for. A server that gave its whole share may have
  // more and stays open for the next pass, as do those not asked yet. A server that does not
  // answer in time is left behind: what its claim leased is given back when it ends (a lease
  // made the abandoned claim safe either way).
  std::vector<Message> got;
  const auto wanted = static_cast<std::size_t>(options.max_messages);
  const std::string topic_name(topic);
  for (bool first_pass = true; !open.empty() && got.size() < wanted; first_pass = false) {
    const std::size_t want = wanted - got.size();
    const std::size_t asked = first_pass ? 1 : std::min(open.size(), want);
    Visits<std::vector<Message>> visits(
        registry_.visits(),
        hooks_of<std::vector<Message>>(
            registry_, [&registry = registry_, topic_name](const std::string& s,
                                                           std::vector<Message>&& late) {
              std::vector<std::string> receipts;
              for (const Message& m : late) receipts.push_back(m.receipt);
              internal::release(registry.server(s), topic_name, receipts);
            }));
    std::vector<std::size_t> shares;
    for (std::size_t k = 0; k < asked; ++k) {
      shares.push_back(want / asked + (k < want % asked ? 1 : 0));
      ReceiveOptions one = options;
      one.wait = Micros{0};
      one.max_messages = static_cast<int>(shares.back());
      one.partitions = open[k].partitions;
      visits.start(open[k].server, [&registry = registry_, s = open[k].server, topic_name, one] {
        return internal::receive(registry.server(s), topic_name, one);
      });
    }
    visits.wait(visit_budget(want));
    visits.abandon();
    std::vector<Holder> next;
    for (std::size_t k = 0; k < asked; ++k) {
      if (!visits.done(k)) {
        last = not_answering(open[k].server, "a claim");
        ++failed;
        continue;
      }
      try {
        std::vector<Message> some = visits.take(k);
        const bool whole_share = some.size() >= shares[k];
        for (Message& m : some) got.push_back(std::move(m));
        if (whole_share) next.push_back(std::move(open[k]));
      } catch (const Error& e) {
        if (e.code() != Errc::kUnavailable) throw;
        registry_.mark_down(open[k].server);
        last = e;
        ++failed;
      }
    }
    for (std::size_t k = asked; k < open.size(); ++k) next.push_back(std::move(open[k]));
    open = std::move(next);
  }
  // Every server that could have had messages failed (none answered "empty"): say so.
  if (got.empty() && last && failed == tried) throw *last;
  return got;
}

std::vector<Message> ShardRouter::receive(std::string_view topic, const ReceiveOptions& options) {
  check_claim_options(options.max_messages, options.wait);
  auto claim = [&](const ShardMap& p) -> std::optional<std::vector<Message>> {
    std::vector<Message> got = claim_round(p, topic, options);
    if (got.empty()) return std::nullopt;
    return got;
  };
  std::optional<std::vector<Message>> got = claim_waiting(topic, options.group, options.wait, claim);
  return got ? std::move(*got) : std::vector<Message>{};
}

namespace {

// One exactly-once visit whose handler runs on the caller's thread: the visit's thread claims
// in its transaction and hands the messages over, the caller runs the handler on that
// transaction and hands back, the visit's thread commits. Until the hand-over the caller may
// give up on the visit; the visit then rolls back before any handler runs (nothing was
// claimed, no attempt counted).
struct HandOver {
  enum class State { kClaiming, kHandlerWanted, kHandlerDone, kEnded };
  std::mutex mutex;
  std::condition_variable changed;
  State state = State::kClaiming;
  bool abandoned = false;
  Transaction* transaction = nullptr;
  std::span<const Message> messages;
  std::exception_ptr handler_error;
  std::size_t processed = 0;
  std::exception_ptr error;
  ServerWait since{0};  // Pool::note_acquisitions: the claim's wait on the server
  std::chrono::steady_clock::time_point made = std::chrono::steady_clock::now();
};

}  // namespace

std::size_t ShardRouter::process_on(const std::string& server, std::string_view topic,
                                    const ProcessOptions& one,
                                    const TransactionalHandler& handler) {
  auto h = std::make_shared<HandOver>();
  registry_.visits().run([h, &registry = registry_, server, topic = std::string(topic), one] {
    std::size_t processed = 0;
    std::exception_ptr error;
    Pool::note_acquisitions(&h->since);
    try {
      processed = internal::process(
          registry.server(server), topic, one, [h](Transaction& tx, std::span<const Message> m) {
            std::unique_lock lock(h->mutex);
            if (h->abandoned) {
              // Retryable, so not counted as the handler's failed attempt (exactly_once.cc).
              throw Error(Errc::kUnavailable, "the caller went on without this server");
            }
            h->transaction = &tx;
            h->messages = m;
            h->handler_error = nullptr;
            h->state = HandOver::State::kHandlerWanted;
            h->changed.notify_all();
            h->changed.wait(lock, [&] { return h->state == HandOver::State::kHandlerDone; });
            h->state = HandOver::State::kClaiming;
            if (h->handler_error) std::rethrow_exception(h->handler_error);
          });
    } catch (...) {
      error = std::current_exception();
    }
    Pool::note_acquisitions(nullptr);
    bool abandoned;
    {
      std::lock_guard lock(h->mutex);
      h->processed = processed;
      h->error = error;
      h->state = HandOver::State::kEnded;
      abandoned = h->abandoned;
    }
    h->changed.notify_all();
    if (abandoned) registry.unstalled(server);
  });
  std::unique_lock lock(h->mutex);
  const auto budget = visit_budget(static_cast<std::size_t>(one.max_messages));
  bool handed_over = false;  // once the handler ran, its work is in the transaction: wait
  for (;;) {
    auto moved = [&] { return h->state != HandOver::State::kClaiming; };
    if (handed_over) {
      h->changed.wait(lock, moved);
    } else {
      for (;;) {
        auto look_again = std::chrono::steady_clock::time_point::max();
        if (moved()) break;
        if (waited_past(h->since, h->made, budget, look_again)) {
          h->abandoned = true;
          registry_.stalled(server);  // under the lock: before the visit's end says unstalled
          throw not_answering(server, "a claim for process");
        }
        h->changed.wait_until(lock, look_again, moved);
      }
    }
    if (h->state == HandOver::State::kEnded) {
      if (h->error) std::rethrow_exception(h->error);
      return h->processed;
    }
    // kHandlerWanted: run it here, on the caller's thread.
    handed_over = true;
    Transaction& tx = *h->transaction;
    const std::span<const Message> messages = h->messages;
    lock.unlock();
    std::exception_ptr failed;
    try {
      handler(tx, messages);
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    h->handler_error = failed;
    h->state = HandOver::State::kHandlerDone;
    h->changed.notify_all();
    h->changed.wait(lock, [&] { return h->state != HandOver::State::kHandlerDone; });
  }
}

std::size_t ShardRouter::process_round(const ShardMap& p, std::string_view topic,
                                       const ProcessOptions& options,
                                       const TransactionalHandler& handler) {
  const std::vector<std::string> holders = p.holders();
  const std::size_t first = turn_.fetch_add(1) % holders.size();
  std::optional<Error> last;
  std::size_t tried = 0, failed = 0;
  for (std::size_t i = 0; i < holders.size(); ++i) {
    const std::string& s = holders[(first + i) % holders.size()];
    ProcessOptions one = options;
    one.wait = Micros{0};
    one.partitions = claimable_on(p, s, options.partitions);
    if (one.partitions.empty()) continue;
    ++tried;
    if (registry_.is_down(s)) {
      ++failed;
      continue;
    }
    try {
      if (std::size_t n = process_on(s, topic, one, handler); n > 0) return n;
    } catch (const Error& e) {
      if (e.code() != Errc::kUnavailable) throw;
      registry_.mark_down(s);
      last = e;
      ++failed;
    }
  }
  if (last && failed == tried) throw *last;
  return 0;
}

std::size_t ShardRouter::process(std::string_view topic, const ProcessOptions& options,
                            const TransactionalHandler& handler) {
  check_claim_options(options.max_messages, options.wait);
  if (!handler) throw Error(Errc::kInvalidArgument, "process needs a handler");
  auto claim = [&](const ShardMap& p) -> std::optional<std::size_t> {
    const std::size_t n = process_round(p, topic, options, handler);
    if (n == 0) return std::nullopt;
    return n;
  };
  return claim_waiting(topic, options.group, options.wait, claim).value_or(0);
}

// --- Settling --------------------------------------------------------------------------------

std::vector<Settle> ShardRouter::ack(std::string_view topic, std::span<const std::string> receipts) {
  std::vector<Settle> out(receipts.size(), Settle::kNotFound);
  ShardMap p = must(topic);
  // Receipts to settle in this round: all, then those whose partition moved meanwhile.
  std::vector<std::size_t> pending(receipts.size());
  std::iota(pending.begin(), pending.end(), std::size_t{0});
  for (int round = 0; round < 2 && !pending.empty(); ++round) {
    std::map<std::string, std::vector<std::size_t>> by_server;
    for (std::size_t i : pending) {
      const std::string s = server_of_id(p, Receipt::parse(receipts[i]).id);
      if (!s.empty()) by_server[s].push_back(i);
    }
    // Each server's receipts at once; a server that does not answer in time is left behind
    // (its acknowledgements may still land when it answers again) and the call says so once
    // the others are settled.
    const std::string topic_name(topic);
    Visits<std::vector<Settle>> visits(registry_.visits(), hooks_of<std::vector<Settle>>(registry_));
    std::vector<const std::vector<std::size_t>*> order;
    std::vector<std::string> slow;
    for (const auto& [s, indices] : by_server) {
      if (registry_.is_stalled(s)) {  // left a visit unanswered: not asked again meanwhile
        slow.push_back(s);
        continue;
      }
      std::vector<std::string> some;
      for (std::size_t i : indices) some.push_back(receipts[i]);
      visits.start(s, [&registry = registry_, s = s, topic_name, some = std::move(some)] {
        return internal::ack(registry.server(s), topic_name, some);
      });
      order.push_back(&indices);
    }
    visits.wait(visit_budget(pending.size()));
    for (std::string& s : visits.abandon()) slow.push_back(std::move(s));
    for (std::size_t v = 0; v < order.size(); ++v) {
      if (!visits.done(v)) continue;
      const std::vector<Settle> got = visits.take(v);
      for (std::size_t k = 0; k < order[v]->size(); ++k) out[(*order[v])[k]] = got[k];
    }
    if (!slow.empty()) {
      throw Error(Errc::kUnavailable,
                  fmt::format("{} (the receipts of the other servers were settled; those of "
                              "'{}' may or may not be: a message not acknowledged is delivered "
                              "again when its lease ends)",
                              not_answering(slow.front(), "an acknowledgement").what(),
                              slow.front()));
    }
    // A receipt of a partition that moved settles where it lives now.
    std::vector<std::size_t> missing;
    for (std::size_t i : pending) {
      if (out[i] == Settle::kNotFound) missing.push_back(i);
    }
    if (missing.empty()) break;
    const ShardMap fresh = must(topic, true);
    if (fresh.epoch == p.epoch) break;
    pending.clear();
    for (std::size_t i : missing) {
      const std::uint64_t id = Receipt::parse(receipts[i]).id;
      if (server_of_id(fresh, id) != server_of_id(p, id)) pending.push_back(i);
    }
    p = fresh;
  }
  return out;
}

template <typename F>
Settle ShardRouter::settle_one(std::string_view topic, std::string_view receipt, F&& fn) {
  const std::uint64_t id = Receipt::parse(receipt).id;
  ShardMap p = must(topic);
  for (int round = 0;; ++round) {
    const std::string s = server_of_id(p, id);
    if (s.empty()) return Settle::kNotFound;
    const std::optional<Settle> settled = on_one<Settle>(s, visit_budget(1), fn);
    if (!settled) throw not_answering(s, "a settle");
    const Settle got = *settled;
    if (got != Settle::kNotFound || round > 0) return got;
    // A receipt of a partition that moved settles where it lives now.
    const ShardMap fresh = must(topic, true);
    if (fresh.epoch == p.epoch || server_of_id(fresh, id) == s) return got;
    p = fresh;
  }
}

Settle ShardRouter::nack(std::string_view topic, std::string_view receipt,
                    std::optional<Micros> delay) {
  return settle_one(topic, receipt, [topic = std::string(topic), receipt = std::string(receipt),
                                      delay](QueueContext& q) {
    return internal::nack(q, topic, receipt, delay);
  });
}

Settle ShardRouter::extend(std::string_view topic, std::string_view receipt, Micros lease) {
  return settle_one(topic, receipt, [topic = std::string(topic), receipt = std::string(receipt),
                                      lease](QueueContext& q) {
    return internal::extend(q, topic, receipt, lease);
  });
}

// --- Views and administration ----------------------------------------------------------------

std::uint64_t ShardRouter::purge(const ShardMap& p, std::string_view group) {
  std::uint64_t n = 0;
  for (const std::string& s : members(p)) n += internal::purge(registry_.server(s), p.topic, group);
  return n;
}

void ShardRouter::forget_dedup_keys(const ShardMap& p) {
  for (const std::string& s : members(p)) internal::forget_dedup_keys(registry_.server(s), p.topic);
}

std::shared_ptr<Subscriber> ShardRouter::subscribe(const ShardMap& p,
                                                              std::string_view group,
                                                              std::function<void()> wake) {
  if (!wake) throw Error(Errc::kInvalidArgument, "subscribe needs a wake function");
  // One subscription that fires once, when any server's does.
  auto all = std::make_shared<Subscriber>(std::move(wake), nullptr);
  std::weak_ptr<Subscriber> weak = all;
  all->parts = subscribe_each(p, group, [weak] {
    if (auto whole = weak.lock()) whole->fire();
  });
  return all;
}

TopicStats ShardRouter::stats(const ShardMap& p, std::string_view group, std::uint64_t exact_up_to) {
  TopicStats total;
  const std::vector<TopicStats> each = on_each<TopicStats>(
      p.holders(), "the counts of a topic",
      [topic = p.topic, group = std::string(group), exact_up_to](QueueContext& q) {
        return internal::stats(q, topic, group, exact_up_to);
      });
  for (const TopicStats& one : each) {
    total.topic = one.topic;
    total.group = one.group;
    total.ready += one.ready;
    total.in_flight += one.in_flight;
    total.delayed += one.delayed;
    total.waiting_on_key += one.waiting_on_key;
    total.dead += one.dead;
    total.oldest_ready_age_seconds =
        std::max(total.oldest_ready_age_seconds, one.oldest_ready_age_seconds);
    total.lag_seconds = std::max(total.lag_seconds, one.lag_seconds);
    total.ids_taken += one.ids_taken;
    total.estimated = total.estimated || one.estimated;
  }
  return total;
}

std::vector<InFlightMessage> ShardRouter::in_flight(const ShardMap& p, std::string_view group,
                                               std::size_t limit) {
  std::vector<InFlightMessage> all;
  for (std::vector<InFlightMessage>& some : on_each<std::vector<InFlightMessage>>(
           p.holders(), "a listing of messages in flight",
           [topic = p.topic, group = std::string(group), limit](QueueContext& q) {
             return internal::in_flight(q, topic, group, limit);
           })) {
    for (InFlightMessage& m : some) all.push_back(std::move(m));
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (all.size() > limit) all.resize(limit);
  return all;
}

std::vector<DeadLetter> ShardRouter::dead_letters(const ShardMap& p, std::string_view group,
                                                  std::size_t limit, std::size_t payload_bytes) {
  std::vector<DeadLetter> all;
  for (std::vector<DeadLetter>& some : on_each<std::vector<DeadLetter>>(
           p.holders(), "a listing of dead letters",
           [topic = p.topic, group = std::string(group), limit, payload_bytes](QueueContext& q) {
             return internal::dead_letters(q, topic, group, limit, payload_bytes);
           })) {
    for (DeadLetter& m : some) all.push_back(std::move(m));
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (all.size() > limit) all.resize(limit);
  return all;
}

namespace {

// Ids by the server of their partition (ids of no partition are skipped: nothing to do).
std::map<std::string, std::vector<std::uint64_t>> ids_by_server(
    const ShardMap& p, std::span<const std::uint64_t> ids) {
  std::map<std::string, std::vector<std::uint64_t>> out;
  for (std::uint64_t id : ids) {
    const unsigned partition = partition_of(id);
    if (partition < p.partitions.size()) out[p.partitions[partition]].push_back(id);
  }
  return out;
}

}  // namespace

template <typename F>
std::size_t ShardRouter::on_dead_letters(const ShardMap& p, std::span<const std::uint64_t> ids,
                                    F&& fn) {
  std::size_t n = 0;
  if (ids.empty()) {  // all of them: every holder
    for (const std::string& s : p.holders()) n += fn(registry_.server(s), {});
    return n;
  }
  for (const auto& [s, some] : ids_by_server(p, ids)) n += fn(registry_.server(s), some);
  return n;
}

std::size_t ShardRouter::requeue_dead(const ShardMap& p, std::string_view group,
                                 std::span<const std::uint64_t> ids) {
  return on_dead_letters(p, ids, [&](QueueContext& q, std::span<const std::uint64_t> some) {
    return internal::requeue_dead(q, p.topic, group, some);
  });
}

std::size_t ShardRouter::delete_dead(const ShardMap& p, std::string_view group,
                                std::span<const std::uint64_t> ids) {
  return on_dead_letters(p, ids, [&](QueueContext& q, std::span<const std::uint64_t> some) {
    return internal::delete_dead(q, p.topic, group, some);
  });
}

bool ShardRouter::create_group(const ShardMap& p, std::string_view group, GroupStart start) {
  // In the same order on every client, so that group numbers (in receipts) agree.
  bool created = false;
  for (const std::string& s : members(p)) {
    created = registry_.server(s).catalog.create_group(p.topic, group, start) || created;
  }
  return created;
}

void ShardRouter::drop_group(const ShardMap& p, std::string_view group) {
  for (const std::string& s : members(p)) {
    try {
      registry_.server(s).catalog.drop_group(p.topic, group);
    } catch (const Error& e) {
      if (e.code() != Errc::kNotFound) throw;
    }
  }
}

std::vector<GroupInfo> ShardRouter::list_groups(const ShardMap& p) {
  QueueContext& q = registry_.server(p.holders().front());
  q.catalog.forget(p.topic);
  std::vector<GroupInfo> out;
  for (const GroupEntry& g : q.catalog.layout(p.topic).groups) out.push_back({g.name, g.created_at});
  return out;
}

std::vector<ArchivedMessage> ShardRouter::archived(const ShardMap& p, std::uint64_t from_id,
                                              std::size_t limit) {
  std::vector<ArchivedMessage> all;
  for (const std::string& s : members(p)) {
    for (ArchivedMessage& m : internal::archived(registry_.server(s), p.topic, from_id, limit)) {
      all.push_back(std::move(m));
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (all.size() > limit) all.resize(limit);
  return all;
}

std::uint64_t ShardRouter::purge_archive(const ShardMap& p) {
  std::uint64_t n = 0;
  for (const std::string& s : members(p)) n += internal::purge_archive(registry_.server(s), p.topic);
  return n;
}

// --- Moving a partition ----------------------------------------------------------------------
//
// 1. The catalog records the move ("PARTITION:SERVER", epoch raised), so that one cut short is
//    finished by running it again.
// 2. The target gets the topic (same settings and groups, the partition not yet placed).
// 3. The source stops holding the partition (its row, which sends check under a shared lock,
//    fences them): sends to it wait, in routed(), from here to step 6.
// 4. In one transaction on the source, every row of the partition is locked (claims skip them,
//    acks wait); the target deletes what an earlier try left and inserts the copies, with their
//    ids, leases and attempts (the lease holders renumbered as the target numbers consumers),
//    by column name, and commits; then the source deletes the rows and commits. Dedup keys and
//    archived messages of the partition's ids go with them.
// 5. The catalog places the partition on the target (epoch raised), 6. the target holds it.
// A crash between the target's commit and the source's leaves both with the rows: the source
// still has them, so the next run copies again over the target's. After the source's commit
// the source's partition is empty and can gain no rows (step 3): the next run skips the copy.
namespace {

std::vector<Param> params_of(const Row& row) {
  std::vector<Param> params;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const Row::Cell& cell = row.cell(i);
    if (cell.null) {
      params.emplace_back(nullptr);
    } else if (cell.is_integer) {
      params.emplace_back(static_cast<std::uint64_t>(cell.integer));  // ids, tokens: unsigned
    } else {
      params.emplace_back(std::string_view(cell.bytes));
    }
  }
  return params;
}

// "a, b, c": the columns' names, quoted, for a column list.
std::string column_list(const std::vector<std::string>& columns) {
  std::string out;
  for (const std::string& name : columns) {
    out += fmt::format("{}{}", out.empty() ? "" : ", ", quote_identifier(name));
  }
  return out;
}

// Rows of one table as the source has them, with their columns' names (in SELECT * order; the
// send fence, a guard of this server's own, is not copied).
struct CopiedRows {
  std::string table;  // quoted
  std::vector<std::string> columns;
  std::vector<Row> rows;
};

CopiedRows read_for_copy(Connection& src, const std::string& table, std::string_view where,
                         std::initializer_list<Param> params) {
  CopiedRows out{table, {}, {}};
  Result names = src.execute(
      "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = ? AND COLUMN_NAME <> ? ORDER BY ORDINAL_POSITION",
      {std::string_view(table).substr(1, table.size() - 2), kSendFence});
  for (const Row& row : names.rows) out.columns.push_back(row.bytes(0));
  out.rows = src.execute(fmt::format("SELECT {} FROM {} {} FOR UPDATE", column_list(out.columns),
                                     table, where),
                         params)
                 .rows;
  return out;
}

// The consumer ids of the source's leases, by consumer name, as the target numbers them
// (txmq_consumers is each server's own): in-flight listings and dead letters then name the
// right consumer. 0 (no lease) stays 0; an id whose name is gone becomes 0.
std::map<std::uint64_t, std::uint64_t> owners_on_target(Connection& src, Connection& dst,
                                                        const std::vector<CopiedRows>& tables) {
  std::map<std::uint64_t, std::uint64_t> ids;
  for (const CopiedRows& t : tables) {
    const auto column = std::find(t.columns.begin(), t.columns.end(), "owner_id");
    if (column == t.columns.end()) continue;
    const auto at = static_cast<std::size_t>(column - t.columns.begin());
    for (const Row& row : t.rows) {
      if (!row.null(at) && row.u64(at) != 0) ids.emplace(row.u64(at), 0);
    }
  }
  for (auto& [source_id, target_id] : ids) {
    Result name = src.execute("SELECT name FROM txmq_consumers WHERE id = ?", {source_id});
    if (name.rows.empty()) continue;
    target_id = dst.execute(
                       "INSERT INTO txmq_consumers (name, seen_at) VALUES (?, NOW(6)) "
                       "ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)",
                       {std::string_view(name.rows[0].bytes(0))})
                    .insert_id;
  }
  return ids;
}

// Inserts the rows by column name (the target's columns may stand in another order).
void insert_copies(Connection& c, const CopiedRows& t, bool ignore,
                   const std::map<std::uint64_t, std::uint64_t>& owners) {
  const std::string columns = column_list(t.columns);
  const auto owner = std::find(t.columns.begin(), t.columns.end(), "owner_id");
  for (const Row& row : t.rows) {
    std::vector<Param> params = params_of(row);
    if (owner != t.columns.end()) {
      const auto at = static_cast<std::size_t>(owner - t.columns.begin());
      if (!row.null(at) && row.u64(at) != 0) {
        auto found = owners.find(row.u64(at));
        params[at] = Param(found == owners.end() ? std::uint64_t{0} : found->second);
      }
    }
    c.execute(fmt::format("INSERT {}INTO {} ({}) VALUES {}", ignore ? "IGNORE " : "", t.table,
                          columns, placeholders(row.size())),
              params);
  }
}

}  // namespace

void ShardRouter::move_partition(std::string_view topic, int partition, std::string_view target) {
  check_topic_name(target);
  ShardMap p = exact(topic);
  if (partition < 0 || partition >= static_cast<int>(p.partitions.size())) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("topic '{}' has partitions 0 to {}; there is no partition {}", topic,
                            p.partitions.size() - 1, partition));
  }
  const auto part = static_cast<unsigned>(partition);
  const std::string source = p.partitions[part];
  const std::string tag = fmt::format("{}:{}", partition, target);
  if (!p.moving.empty() && p.moving != tag) {
    throw Error(Errc::kFailedPrecondition,
                fmt::format("a move of topic '{}' ({}) is unfinished: run it again first "
                            "(txmq partition move {} {} --to {})",
                            topic, p.moving, topic, p.moving.substr(0, p.moving.find(':')),
                            p.moving.substr(p.moving.find(':') + 1)));
  }
  if (source == target) return;  // there already
  QueueContext& from = registry_.server(source);
  QueueContext& to = registry_.server(target);
  if (p.moving.empty()) {
    ShardMap marked = p;
    marked.moving = tag;
    if (!registry_.replace(marked, p.epoch)) {
      throw Error(Errc::kAborted,
                  fmt::format("the placement of topic '{}' changed meanwhile; try again", topic));
    }
    p = exact(topic);
  }

  // 2. The topic on the target, with the source's groups under the same numbers.
  from.catalog.forget(topic);
  const TopicLayout source_layout = from.catalog.layout(topic);
  const std::uint64_t target_mask = p.mask_of(target);
  if (!to.catalog.create(topic, source_layout.info.options, target_mask)) {
    to.catalog.set_placed(topic, target_mask);
  }
  for (const GroupEntry& g : source_layout.groups) to.catalog.create_group(topic, g.name, GroupStart::kNow);
  to.catalog.forget(topic);
  const TopicLayout target_layout = to.catalog.layout(topic);
  for (const GroupEntry& g : source_layout.groups) {
    if (target_layout.group(g.name).number != g.number) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("group '{}' of topic '{}' has number {} on server '{}' and {} on "
                              "'{}' (groups were created concurrently in different orders): "
                              "receipts would name the wrong group, so the move is refused",
                              g.name, topic, g.number, source, target_layout.group(g.name).number,
                              target));
    }
  }

  // 3. The source stops holding the partition.
  from.catalog.set_placed(topic, p.mask_of(source) & ~(std::uint64_t{1} << part));

  // 4. Copy and delete.
  const TopicTables shared = topic_tables(topic);
  const std::uint64_t low = first_id_of(part);
  const std::uint64_t high = first_id_of(part + 1) - 1;
  from.pool.run(OnLostConnection::kRetry, Work::kTransaction, [&](Connection& src, const Attempt&) {
    std::vector<CopiedRows> tables;
    src.begin();
    bool any = false;
    for (const GroupEntry& g : source_layout.groups) {
      const TopicTables t = topic_tables(topic, g.number, part);
      for (const std::string* name : {&t.queue, &t.dead, &t.keys, &t.parked}) {
        tables.push_back(read_for_copy(src, *name, "", {}));
        any = any || !tables.back().rows.empty();
      }
    }
    const CopiedRows dedup =
        read_for_copy(src, shared.dedup, "WHERE message_id BETWEEN ? AND ?", {low, high});
    const CopiedRows archive =
        read_for_copy(src, shared.archive, "WHERE id BETWEEN ? AND ?", {low, high});
    any = any || !dedup.rows.empty() || !archive.rows.empty();
    if (!any) {  // nothing here: empty, or copied before (the target has it)
      src.commit();
      return;
    }
    // The target's counter past every id the source handed out.
    const std::string allocator =
        topic_tables(topic, source_layout.allocator().number, part).queue;
    Result next = src.execute(
        "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = ?",
        {allocator.substr(1, allocator.size() - 2)});
    to.pool.run(OnLostConnection::kRetry, Work::kTransaction, [&](Connection& dst, const Attempt&) {
      if (!next.rows.empty() && !next.rows[0].null(0)) {
        dst.query(fmt::format("ALTER TABLE {} AUTO_INCREMENT = {}", allocator, next.rows[0].u64(0)));
      }
      dst.begin();
      const std::map<std::uint64_t, std::uint64_t> owners = owners_on_target(src, dst, tables);
      for (const CopiedRows& t : tables) {
        dst.query(fmt::format("DELETE FROM {}", t.table));
        insert_copies(dst, t, false, owners);
      }
      insert_copies(dst, dedup, true, owners);
      insert_copies(dst, archive, true, owners);
      dst.commit();
    });
    for (const CopiedRows& t : tables) src.query(fmt::format("DELETE FROM {}", t.table));
    src.execute(fmt::format("DELETE FROM {} WHERE message_id BETWEEN ? AND ?", shared.dedup),
                {low, high});
    src.execute(fmt::format("DELETE FROM {} WHERE id BETWEEN ? AND ?", shared.archive),
                {low, high});
    src.commit();
  });

  // 5. and 6.
  ShardMap moved = p;
  moved.partitions[part] = std::string(target);
  moved.moving.clear();
  if (!registry_.replace(moved, p.epoch)) {
    throw Error(Errc::kAborted,
                fmt::format("the placement of topic '{}' changed during the move; run it again",
                            topic));
  }
  to.catalog.set_placed(topic, moved.mask_of(target));
  from.catalog.forget(topic);
  registry_.forget(topic);
}

}  // namespace txmq::internal
