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

// Topics spread over several servers (README "Several servers"). The client's database is the
// catalog: txmq_servers names the servers and their DSNs (never a password), txmq_placements
// says on which server each partition of a spread topic lives, with an epoch that every change
// raises. Each server holds the topic as a topic of its own (same settings, groups and
// partition count) whose row says which partitions live there (TopicLayout::placed): that is
// the fence. A client that routes by an old placement reaches a server whose row no longer
// places the partition; the server refuses (not_placed_here), the client reads the placement
// again and goes to the new place. Everything else routes by this module; nothing below
// src/queue/ knows that servers other than its own exist.
namespace txmq::internal {

struct Placement {
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

class Shards {
 public:
  // Makes a ready context for a server (connected, catalog bootstrapped, settings checked).
  using Connect = std::function<std::unique_ptr<QueueContext>(const Dsn&)>;
  Shards(QueueContext& catalog, Connect connect)
      : catalog_(catalog), connect_(std::move(connect)) {}

  // The topic's placement, cached for a few seconds; nullopt when the topic is not spread (it
  // lives in the catalog's database, or does not exist). While the catalog cannot be reached,
  // the placement read last (the members' fence still refuses a partition that moved).
  std::optional<Placement> placement(std::string_view topic);
  // Read again now. nullopt as placement().
  std::optional<Placement> reload(std::string_view topic);
  void forget(std::string_view topic);

  // The context of a recorded server, connected on first use. Throws kNotFound for a name not
  // recorded, kUnavailable while it cannot be reached.
  QueueContext& server(std::string_view name);
  // The contexts connected so far (for totals over every server).
  std::vector<QueueContext*> connected();

  // Servers found unreachable are skipped by unkeyed sends and claims for a few seconds.
  bool is_down(std::string_view name);
  void mark_down(std::string_view name);

  void add_server(std::string_view name, std::string_view dsn);
  std::vector<ServerInfo> list_servers();
  void remove_server(std::string_view name);

  // Records a new placement (epoch 1). False when the topic has one already.
  bool record(const Placement& placement);
  // Replaces the placement when its epoch is still `epoch`, raising it; false when another
  // client changed it first.
  bool replace(const Placement& placement, std::uint64_t epoch);
  void erase(std::string_view topic);
  // Every spread topic's placement (for list_topics).
  std::vector<Placement> all();

 private:
  static constexpr auto kCacheFor = std::chrono::seconds(5);
  static constexpr auto kDownFor = std::chrono::seconds(2);
  static constexpr auto kCatalogRetryAfter = std::chrono::seconds(1);
  std::optional<Placement> load(std::string_view topic);
  // The context of a server connected before; nullptr when none is.
  QueueContext* connected_to(std::string_view name);
  Dsn dsn_of(std::string_view name);

  QueueContext& catalog_;
  Connect connect_;
  std::mutex mutex_;
  struct Cached {
    std::optional<Placement> placement;
    std::chrono::steady_clock::time_point fetched;
  };
  std::unordered_map<std::string, Cached> placements_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> down_until_;
  std::unordered_map<std::string, Dsn> dsns_;  // as last read, for while the catalog is down
  // Connected servers: never removed, so that references stay valid for the client's life.
  std::unordered_map<std::string, std::unique_ptr<QueueContext>> servers_;
  std::unordered_map<std::string, QueueContext*> by_name_;
  std::mutex connect_mutex_;  // one connect at a time (slow; not under mutex_)
};

}  // namespace txmq::internal
