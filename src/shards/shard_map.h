// shards: topics whose partitions live on several servers: the shard map, the servers, the router.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/queue_context.h"
#include "shards/visits.h"

// Topics sharded over several servers (docs/shards.md). The client's database is the
// catalog: txmq_servers names the servers and their DSNs (never a password), txmq_placements
// says on which server each partition of a sharded topic lives, with an epoch that every change
// raises. Each server holds the topic as a topic of its own (same settings, groups and
// partition count) whose row says which partitions live there (TopicLayout::placed): that is
// the fence. A client that routes by an old shard map reaches a server whose row no longer
// places the partition; the server refuses (not_placed_here), the client reads the shard map
// again and goes to the new place. Everything else routes by this folder; nothing below
// src/shards/ knows that servers other than its own exist (layers.txt holds that line).
namespace txmq::internal {

// A sharded topic's map: which server holds each partition, as recorded in txmq_placements.
struct ShardMap {
  std::string topic;
  std::uint64_t epoch = 0;
  std::vector<std::string> servers;     // the topic's list: partition p is placed on p % n
  std::vector<std::string> partitions;  // where each partition lives now
  // "PARTITION:SERVER" while a move of that partition runs (or was cut short); else empty.
  std::string moving;

  // The servers that hold partitions, in the order of the topic's list (then others).
  std::vector<std::string> holders() const;
  // The partitions on one server, as TopicLayout::placed.
  std::uint64_t mask_of(std::string_view server) const;
  std::vector<int> partitions_on(std::string_view server) const;
};

// Splits "a,b,c"; every name checked as a topic name.
std::vector<std::string> split_names(std::string_view text);
std::string join_names(const std::vector<std::string>& names);

// The servers that topics are sharded over: their records, their connected contexts, and the
// shard maps of the topics, cached.
class ShardRegistry {
 public:
  // Makes a ready context for a server (connected, catalog bootstrapped, settings checked).
  using Connect = std::function<std::unique_ptr<QueueContext>(const Dsn&)>;
  ShardRegistry(QueueContext& catalog, Connect connect)
      : catalog_(catalog), connect_(std::move(connect)) {}

  // The topic's shard map, cached for a few seconds (read again now when `fresh`); nullopt
  // when the topic is not sharded (it lives in the catalog's database, or does not exist).
  // While the catalog cannot be reached or does not answer within kSlowVisit, the shard map
  // read last (the members' fence still refuses a partition that moved).
  std::optional<ShardMap> shard_map(std::string_view topic, bool fresh = false);
  // Read again now. nullopt as shard map().
  std::optional<ShardMap> reload(std::string_view topic);
  void forget(std::string_view topic);

  // The context of a recorded server, connected on first use. Throws kNotFound for a name not
  // recorded, kUnavailable while it cannot be reached.
  QueueContext& server(std::string_view name);
  // The contexts connected so far (for totals over every server).
  std::vector<QueueContext*> connected();

  // Servers found unreachable are skipped by unkeyed sends and claims for a few seconds, and
  // a server that left a visit unanswered (visits.h) until that visit ends.
  bool is_down(std::string_view name);
  void mark_down(std::string_view name);
  void stalled(std::string_view name);
  void unstalled(std::string_view name);
  // Whether a visit to the server was given up on and has not ended yet.
  bool is_stalled(std::string_view name);
  // Threads for the router's visits to the servers.
  VisitPool& visits() { return visits_; }

  void add_server(std::string_view name, std::string_view dsn);
  std::vector<ServerInfo> list_servers();
  void remove_server(std::string_view name);

  // Records a new shard map (epoch 1). False when the topic has one already.
  bool record(const ShardMap& placement);
  // Replaces the shard map when its epoch is still `epoch`, raising it; false when another
  // client changed it first.
  bool replace(const ShardMap& placement, std::uint64_t epoch);
  void erase(std::string_view topic);
  // Every sharded topic's shard map (for list_topics).
  std::vector<ShardMap> all();

 private:
  static constexpr auto kCacheFor = std::chrono::seconds(5);
  static constexpr auto kDownFor = std::chrono::seconds(2);
  static constexpr auto kCatalogRetryAfter = std::chrono::seconds(1);
  std::optional<ShardMap> load(std::string_view topic);
  // The context of a server connected before; nullptr when none is.
  QueueContext* connected_to(std::string_view name);
  Dsn dsn_of(std::string_view name);

  QueueContext& catalog_;
  Connect connect_;
  std::mutex mutex_;
  struct Cached {
    std::optional<ShardMap> placement;
    std::chrono::steady_clock::time_point fetched;
  };
  std::unordered_map<std::string, Cached> maps_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> down_until_;
  std::unordered_map<std::string, Dsn> dsns_;  // as last read, for while the catalog is down
  // Connected servers: never removed, so that references stay valid for the client's life.
  std::unordered_map<std::string, std::unique_ptr<QueueContext>> servers_;
  std::unordered_map<std::string, QueueContext*> by_name_;
  // One connect at a time per server (slow; not under mutex_), not one for all: a connect to a
  // server that accepts and never answers waits for connect_timeout, and a client's first visit
  // to any other server must not wait with it (the shards fault run: a restarted producer's
  // first send to a healthy server took 3.9 s while another server was frozen).
  std::mutex connect_mutex_;  // guards connecting_
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> connecting_;
  std::unordered_map<std::string, int> stalled_;  // visits given up on, still running
  // Topics whose shard map is being read on a visit thread (the catalog's server was slow).
  std::unordered_map<std::string, bool> reloading_;
  // Last: its destructor waits for the visits still running, which use the members above.
  VisitPool visits_;
};

}  // namespace txmq::internal
