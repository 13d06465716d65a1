#pragma once

#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shards/shard_map.h"
#include "txmq/transaction.h"
#include "txmq/types.h"
#include "wait/subscriber.h"

// Client calls on a topic sharded over several servers (shard_map.h): each goes to the servers
// that hold the partitions it touches, through that server's own queue code.
namespace txmq::internal {

// Routes a call on a sharded topic to the servers that hold the partitions it touches.
class ShardRouter {
 public:
  explicit ShardRouter(ShardRegistry& shards) : registry_(shards) {}

  bool create_topic(std::string_view name, const TopicOptions& options);
  void drop_topic(const ShardMap& p);
  void update_topic(const ShardMap& p, const TopicOptions& options);
  TopicInfo topic(const ShardMap& p);

  std::uint64_t send(std::string_view topic, std::string_view payload, const SendOptions& options);
  std::vector<std::uint64_t> send_batch(std::string_view topic,
                                        std::span<const OutgoingMessage> messages);
  std::vector<Message> receive(std::string_view topic, const ReceiveOptions& options);
  std::size_t process(std::string_view topic, const ProcessOptions& options,
                      const TransactionalHandler& handler);
  std::vector<Settle> ack(std::string_view topic, std::span<const std::string> receipts);
  Settle nack(std::string_view topic, std::string_view receipt, std::optional<Micros> delay);
  Settle extend(std::string_view topic, std::string_view receipt, Micros lease);

  std::uint64_t purge(const ShardMap& p, std::string_view group);
  void forget_dedup_keys(const ShardMap& p);
  std::shared_ptr<Subscriber> subscribe(const ShardMap& p, std::string_view group,
                                                        std::function<void()> wake);
  TopicStats stats(const ShardMap& p, std::string_view group, std::uint64_t exact_up_to);
  std::vector<InFlightMessage> in_flight(const ShardMap& p, std::string_view group,
                                         std::size_t limit);
  std::vector<DeadLetter> dead_letters(const ShardMap& p, std::string_view group,
                                       std::size_t limit, std::size_t payload_bytes);
  std::size_t requeue_dead(const ShardMap& p, std::string_view group,
                           std::span<const std::uint64_t> ids);
  std::size_t delete_dead(const ShardMap& p, std::string_view group,
                          std::span<const std::uint64_t> ids);
  bool create_group(const ShardMap& p, std::string_view group, GroupStart start);
  void drop_group(const ShardMap& p, std::string_view group);
  std::vector<GroupInfo> list_groups(const ShardMap& p);
  std::vector<ArchivedMessage> archived(const ShardMap& p, std::uint64_t from_id,
                                        std::size_t limit);
  std::uint64_t purge_archive(const ShardMap& p);

  void move_partition(std::string_view topic, int partition, std::string_view server);

 private:
  // The shard map of a topic that must be sharded (kNotFound otherwise); read again when
  // `fresh`, unless the catalog's server does not answer in time (ShardRegistry::shard_map).
  ShardMap must(std::string_view topic, bool fresh = false);
  // The same read from the catalog now, however long that takes (a partition move).
  ShardMap exact(std::string_view topic);
  // Runs fn(shard map) again with a fresh shard map, for up to 30 s, while a server says that a
  // partition is not placed on it (a move, or this client's shard map is out of date).
  template <typename F>
  auto routed(std::string_view topic, F&& fn) -> decltype(fn(std::declval<const ShardMap&>()));
  // Every server that has the topic: its list and the holders of its partitions.
  std::vector<std::string> members(const ShardMap& p);
  // The server that holds the partition of an id; empty when the id names no partition.
  static std::string server_of_id(const ShardMap& p, std::uint64_t id);
  std::vector<Message> claim_round(const ShardMap& p, std::string_view topic,
                                   const ReceiveOptions& options);
  std::size_t process_round(const ShardMap& p, std::string_view topic,
                            const ProcessOptions& options, const TransactionalHandler& handler);
  // A subscription on each holder of the topic that is not down, made at once (visits.h).
  std::vector<std::shared_ptr<Subscriber>> subscribe_each(const ShardMap& p, std::string_view group,
                                                          const std::function<void()>& wake);
  // One exactly-once visit to `server` (a process round's), its handler run on this thread.
  std::size_t process_on(const std::string& server, std::string_view topic,
                         const ProcessOptions& one, const TransactionalHandler& handler);
  // fn(context) on each of `servers` at once, in their order; kUnavailable naming a server
  // that did not answer in time (visits.h), whose visit is left behind. fn is copied into each
  // visit: it must own what it uses (an abandoned visit outlives the call).
  template <typename T>
  std::vector<T> on_each(const std::vector<std::string>& servers, std::string_view what,
                         const std::function<T(QueueContext&)>& fn);
  // fn(context) on `server` (visits.h); nullopt when the server did not answer within
  // `budget` (the visit is left behind), kUnavailable at once when it left an earlier visit
  // unanswered.
  template <typename T>
  std::optional<T> on_one(const std::string& server, std::chrono::nanoseconds budget,
                          std::function<T(QueueContext&)> fn);
  // Runs fn(server) for one holder of the topic, in turn, going on to the next on kUnavailable
  // (an unkeyed send: any server will do).
  template <typename F>
  auto on_a_holder(const ShardMap& p, F&& fn) -> decltype(fn(std::declval<const std::string&>()));
  // A send of `items` messages, `bytes` in all, to `server` on a visit thread (visits.h): one
  // that the server does not answer in time ends in kCommitUnknown (it commits if the server
  // answers again), and a server that left a call unanswered gets kUnavailable at once.
  template <typename T>
  T send_visit(const std::string& server, std::size_t items, std::size_t bytes,
               std::function<T(QueueContext&)> fn);
  // nack and extend: fn(context of the receipt's server), again where the partition lives now
  // when it moved.
  template <typename F>
  Settle settle_one(std::string_view topic, std::string_view receipt, F&& fn);
  // requeue_dead and delete_dead: fn(context, ids there) per server; every holder for no ids.
  template <typename F>
  std::size_t on_dead_letters(const ShardMap& p, std::span<const std::uint64_t> ids, F&& fn);
  // Waits until a send is announced on any holder of the group, or `until`.
  template <typename Claim>
  auto claim_waiting(std::string_view topic, std::string_view group, Micros wait, Claim&& claim)
      -> decltype(claim(std::declval<const ShardMap&>()));

  ShardRegistry& registry_;
  std::atomic<std::uint64_t> turn_{std::random_device{}()};
};

}  // namespace txmq::internal
