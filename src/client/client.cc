#include "txmq/client.h"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "util/codec.h"
#include "db/dsn.h"
#include "catalog/routines.h"
#include "catalog/topic_catalog.h"
#include "client/subscription.h"
#include "engine/announce.h"
#include "engine/archive.h"
#include "engine/claim.h"
#include "engine/exactly_once.h"
#include "engine/held.h"
#include "engine/inspect.h"
#include "engine/purge.h"
#include "engine/queue_context.h"
#include "engine/send.h"
#include "engine/settle.h"
#include "xa/xa_process.h"
#include "shards/shard_map.h"
#include "shards/shard_router.h"
#include "engine/transaction_impl.h"

namespace txmq {

using internal::QueueContext;

// --- Client ------------------------------------------------------------------------------------

namespace {

std::string default_consumer_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  return fmt::format("{}:{}", host, getpid());
}

// Each distinct warning once per process, whatever the number of clients.
void warn_once(const std::function<void(std::string_view)>& sink, const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> given;
  {
    std::lock_guard lock(mutex);
    if (!given.insert(text).second) return;
  }
  if (sink) {
    sink(text);
  } else {
    std::fprintf(stderr, "txmq: warning: %s\n", text.c_str());
  }
}

}  // namespace

struct Client::Impl {
  explicit Impl(ClientOptions o)
      : options(std::move(o)),
        queue(resolve_dsn(options.dsn), options.pool_size,
              options.consumer_name.empty() ? default_consumer_name() : options.consumer_name,
              options.record_metrics),
        registry(queue, [this](const internal::Dsn& dsn) { return connect_server(dsn); }),
        router(registry) {}

  // Reports and checks of a context, as for the client's own database.
  void prepare(QueueContext& context) {
    context.waiters.warn = [this](std::string_view text) {
      warn_once(options.on_warning, std::string(text));
    };
    context.pool.set_outage_reporter([this, where = context.pool.dsn().describe()](
                                         std::string_view text) {
      const std::string line = fmt::format("{}: {}", where, text);
      if (options.on_warning) {
        options.on_warning(line);
      } else {
        std::fprintf(stderr, "txmq: %s\n", line.c_str());
      }
    });
    check_server(context);
    context.catalog.bootstrap();
  }

  // Another server that topics are sharded over (shard_map.h).
  std::unique_ptr<QueueContext> connect_server(const internal::Dsn& dsn) {
    auto context = std::make_unique<QueueContext>(dsn, options.pool_size, queue.owner,
                                                  options.record_metrics);
    prepare(*context);
    return context;
  }

  // Runs `local` for a topic of the client's own database, `sharded` for one sharded over
  // servers. A topic that another client sharded moments ago (this client's shard map cache
  // says "not sharded" for up to 5 s) is looked up again when the local call finds no topic.
  template <typename Local, typename Sharded>
  auto route(std::string_view topic, Local&& local, Sharded&& sharded) -> decltype(local()) {
    if (std::optional<internal::ShardMap> p = registry.shard_map(topic)) return sharded(*p);
    try {
      return local();
    } catch (const Error& e) {
      if (e.code() != Errc::kNotFound) throw;
      std::optional<internal::ShardMap> fresh;
      try {
        fresh = registry.reload(topic);
      } catch (const Error&) {
        throw e;
      }
      if (!fresh) throw;
      return sharded(*fresh);
    }
  }

  static internal::Dsn resolve_dsn(const std::string& dsn) {
    if (!dsn.empty()) return internal::parse_dsn(dsn);
    const char* env = std::getenv("TXMQ_DSN");
    if (env != nullptr && *env != '\0') return internal::parse_dsn(env);
    throw Error(Errc::kInvalidArgument, "no DSN given and TXMQ_DSN is not set");
  }

  void check_server(QueueContext& context) {
    internal::Result r =
        context.pool.run(internal::OnLostConnection::kRetry, [](internal::Connection& c,
                                                              const internal::Attempt&) {
          return c.execute(
              "SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin, "
              "@@max_allowed_packet, VERSION()",
              {});
        });
    const internal::Row& row = r.rows.at(0);
    const std::string where = context.pool.dsn().describe();
    if (std::string why = internal::unsupported_server(row.bytes(4)); !why.empty()) {
      throw Error(Errc::kFailedPrecondition, fmt::format("{}: {}", where, why));
    }
    internal::Cluster* cluster = context.pool.cluster();
    // A cluster's or group's settings are checked per node below.
    const bool replicated = cluster != nullptr && cluster->replicated();
    if (row.i64(0) != 1 && !replicated) {
      warn_once(options.on_warning,
                fmt::format("{} runs with innodb_flush_log_at_trx_commit={}: a crash of the "
                            "server can lose messages whose send already succeeded (set it to 1)",
                            where, row.i64(0)));
    }
    if (row.i64(2) != 0 && row.i64(1) != 1 && !(cluster != nullptr && cluster->group())) {
      warn_once(options.on_warning,
                fmt::format("{} writes a binary log with sync_binlog={}: a crash can lose "
                            "acknowledged sends from the binlog and its replicas (set it to 1)",
                            where, row.i64(1)));
    }
    // A statement must fit in one packet; keep a margin for the protocol's own bytes.
    context.max_statement_bytes = std::max<std::size_t>(row.u64(3) / 2, 64 * 1024);
    check_galera(context);
  }

  // What a Galera cluster promises depends on every node's settings (docs/galera.md,
  // "What is promised"): checked on each node the DSN lists, once per client.
  void check_galera(QueueContext& context) {
    internal::Pool& pool = context.pool;
    if (internal::Cluster* cluster = pool.cluster(); cluster != nullptr && cluster->galera()) {
      const std::vector<internal::NodeState> nodes = cluster->last_probe();
      std::uint64_t cluster_size = 0;
      for (const internal::NodeState& node : nodes) {
        if (!node.answered || !node.wsrep_on) continue;
        cluster_size = std::max(cluster_size, node.cluster_size);
        const std::string where =
            fmt::format("Galera node {}", pool.dsn().nodes.at(node.index).describe());
        if (node.flush_log_at_trx_commit != "1") {
          warn_once(options.on_warning,
                    fmt::format("{} runs with innodb_flush_log_at_trx_commit={}: if every node "
                                "crashes at once (a power cut), sends that succeeded can be lost; "
                                "Jepsen's analysis of MariaDB Galera lost acknowledged commits "
                                "this way (set it to 1 on every node)",
                                where, node.flush_log_at_trx_commit));
        }
        if (node.binlog_format != "ROW") {
          warn_once(options.on_warning,
                    fmt::format("{} runs with binlog_format={}: Galera needs ROW", where,
                                node.binlog_format));
        }
        if (node.autoinc_lock_mode != "2") {
          warn_once(options.on_warning,
                    fmt::format("{} runs with innodb_autoinc_lock_mode={}: Galera needs 2 "
                                "(interleaved) for batches of sends",
                                where, node.autoinc_lock_mode));
        }
        for (const char* risky : {"pc.ignore_sb", "pc.ignore_quorum"}) {
          if (internal::provider_option(node.provider_options, risky) == "true") {
            warn_once(options.on_warning,
                      fmt::format("{} runs with {}=true: a network split can leave two "
                                  "components taking writes (split brain), and messages "
                                  "delivered twice or lost when they merge",
                                  where, risky));
          }
        }
      }
      if (cluster_size > pool.dsn().nodes.size()) {
        warn_once(options.on_warning,
                  fmt::format("the DSN lists {} of the cluster's {} nodes: txmq fails over only "
                              "to nodes the DSN lists",
                              pool.dsn().nodes.size(), cluster_size));
      }
      // An even number of nodes, all up (one node down of three also shows a size of 2).
      const std::size_t listed = pool.dsn().nodes.size();
      if ((listed == 2 || listed == 4) && cluster_size == listed) {
        warn_once(options.on_warning,
                  fmt::format("the Galera cluster has {} nodes: losing half of them loses the "
                              "quorum and stops every write; use an odd number of nodes (or "
                              "pc.weight, or garbd as a tie-breaker)",
                              cluster_size));
      }
      return;
    }
    if (internal::Cluster* cluster = pool.cluster(); cluster != nullptr && cluster->group()) {
      check_group(pool, cluster->last_probe());
      return;
    }
    if (pool.dsn().is_host_list()) return;  // a list of plain servers
    // One host that is a member of a Group Replication group: nowhere to fail over to.
    internal::Result g = pool.run(internal::OnLostConnection::kRetry,
                                  [](internal::Connection& c, const internal::Attempt&) {
                                    return c.execute(
                                        "SHOW GLOBAL VARIABLES LIKE 'group_replication_group_name'",
                                        {});
                                  });
    if (!g.rows.empty() && !g.rows[0].bytes(1).empty()) {
      warn_once(options.on_warning,
                fmt::format("{} is a member of a Group Replication group: list every member in "
                            "the DSN (mysql://user@host1:port1,host2:port2,.../db) so that txmq "
                            "follows the primary when the group elects another",
                            pool.dsn().describe()));
      return;
    }
    // One host that is a Galera node: other clients may write through other nodes, and there
    // is nowhere to fail over to.
    internal::Result r = pool.run(internal::OnLostConnection::kRetry,
                                  [](internal::Connection& c, const internal::Attempt&) {
                                    return c.execute(
                                        "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'", {});
                                  });
    if (!r.rows.empty() && internal::Row::parse_integer(r.rows[0].bytes(1)) > 1) {
      warn_once(options.on_warning,
                fmt::format("{} is one node of a Galera cluster of {}: list every node in the "
                            "DSN (mysql://user@host1:port1,host2:port2,.../db) so that all "
                            "clients write through one node and fail over together",
                            pool.dsn().describe(), r.rows[0].bytes(1)));
    }
  }

  // What a Group Replication group promises depends on each member's settings
  // (docs/group-replication.md, "Settings"): checked on each member the DSN lists, once per client.
  void check_group(internal::Pool& pool, const std::vector<internal::NodeState>& nodes) {
    std::uint64_t members = 0;
    for (const internal::NodeState& node : nodes) {
      if (!node.answered || !node.group) continue;
      members = std::max(members, node.members);
      const std::string where =
          fmt::format("group member {}", pool.dsn().nodes.at(node.index).describe());
      if (node.flush_log_at_trx_commit != "1" || node.sync_binlog != "1") {
        warn_once(options.on_warning,
                  fmt::format("{} runs with innodb_flush_log_at_trx_commit={} and sync_binlog={}: "
                              "if every member crashes at once (a power cut), sends that "
                              "succeeded can be lost (set both to 1 on every member)",
                              where, node.flush_log_at_trx_commit, node.sync_binlog));
      }
      if (!node.binlog_format.empty() && node.binlog_format != "ROW") {
        warn_once(options.on_warning,
                  fmt::format("{} runs with binlog_format={}: Group Replication needs ROW", where,
                              node.binlog_format));
      }
      if (node.consistency == "EVENTUAL") {
        warn_once(options.on_warning,
                  fmt::format("{} runs with group_replication_consistency=EVENTUAL: txmq raises "
                              "its own sessions to BEFORE_ON_PRIMARY_FAILOVER, but other "
                              "clients of the queue's tables may read a new primary before it "
                              "has applied what the old one committed",
                              where));
      }
    }
    if (members > pool.dsn().nodes.size()) {
      warn_once(options.on_warning,
                fmt::format("the DSN lists {} of the group's {} members: txmq follows the "
                            "primary only to members the DSN lists",
                            pool.dsn().nodes.size(), members));
    }
    // An even number of members, all up (one member down of three also shows a view of 2).
    const std::size_t listed = pool.dsn().nodes.size();
    if ((listed == 2 || listed == 4) && members == listed) {
      warn_once(options.on_warning,
                fmt::format("the group has {} members: losing half of them loses the majority "
                            "and stops every write; use an odd number of members",
                            members));
    }
  }

  ClientOptions options;
  QueueContext queue;
  internal::XaSites xa;  // process_xa's resources (xa_process.cc)
  internal::ShardRegistry registry;
  internal::ShardRouter router;
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->queue.waiters.warn = [impl = impl_.get()](std::string_view text) {
    warn_once(impl->options.on_warning, std::string(text));
  };
  impl_->queue.pool.set_outage_reporter([impl = impl_.get()](std::string_view text) {
    if (impl->options.on_warning) {
      impl->options.on_warning(text);
    } else {
      std::fprintf(stderr, "txmq: %.*s\n", static_cast<int>(text.size()), text.data());
    }
  });
  impl_->check_server(impl_->queue);
  impl_->queue.catalog.bootstrap();
}

Client::~Client() = default;

bool Client::create_topic(std::string_view name, const TopicOptions& options,
                          std::optional<TableCreation> tables) {
  Impl& i = *impl_;
  if (!options.servers.empty()) {
    if (tables == TableCreation::kShared) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}': a topic sharded over servers has tables of its own on "
                              "each (shared storage is for topics in the client's database)",
                              name));
    }
    return i.router.create_topic(name, options);
  }
  if (i.registry.reload(name)) {
    throw Error(Errc::kAlreadyExists,
                fmt::format("topic '{}' exists, sharded over servers (txmq topic show {})", name,
                            name));
  }
  TableCreation how = tables.value_or(i.options.topic_tables);
  // A client whose topics go to shared storage by default gives tables of their own to those
  // that shared storage cannot hold yet; asked for by name, it refuses them.
  if (!tables && how == TableCreation::kShared && (options.partitions != 1 || options.fair)) {
    how = TableCreation::kNow;
  }
  return i.queue.catalog.create(name, options, internal::kAllPartitions, how);
}
void Client::drop_topic(std::string_view name) {
  Impl& i = *impl_;
  i.route(name, [&] { i.queue.catalog.drop(name); },
          [&](const internal::ShardMap& p) { i.router.drop_topic(p); });
}
void Client::update_topic(std::string_view name, const TopicOptions& options) {
  Impl& i = *impl_;
  i.route(name, [&] {
    if (!options.servers.empty()) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("topic '{}' lives in the client's database: it cannot be sharded "
                              "over servers by an update (create a sharded topic)",
                              name));
    }
    i.queue.catalog.update(name, options);
  }, [&](const internal::ShardMap& p) { i.router.update_topic(p, options); });
}
namespace {

// The catalog's topics (TopicInfo or TopicName) but those sharded: the catalog's database may
// hold partitions of a sharded topic, which its callers list once from its shard map.
template <typename Listed>
std::vector<Listed> unsharded(std::vector<Listed> listed,
                              const std::vector<internal::ShardMap>& sharded) {
  if (sharded.empty()) return listed;
  std::erase_if(listed, [&](const Listed& t) {
    return std::any_of(sharded.begin(), sharded.end(),
                       [&](const internal::ShardMap& p) { return p.topic == t.name; });
  });
  return listed;
}

}  // namespace

std::vector<TopicInfo> Client::list_topics() {
  Impl& i = *impl_;
  std::vector<internal::ShardMap> sharded = i.registry.all();
  std::vector<TopicInfo> out = unsharded(i.queue.catalog.list(), sharded);
  for (const internal::ShardMap& p : sharded) {
    try {
      out.push_back(i.router.topic(p));
    } catch (const Error& e) {
      if (e.code() != Errc::kUnavailable && e.code() != Errc::kNotFound) throw;
      TopicInfo t;  // no server of it answers: its shard map only
      t.name = p.topic;
      t.options.servers = p.servers;
      t.options.partitions = static_cast<int>(p.partitions.size());
      t.placement = p.partitions;
      t.placement_epoch = p.epoch;
      out.push_back(std::move(t));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}
std::vector<TopicName> Client::list_topic_names() {
  Impl& i = *impl_;
  std::vector<internal::ShardMap> sharded = i.registry.all();
  std::vector<TopicName> out = unsharded(i.queue.catalog.list_names(), sharded);
  for (const internal::ShardMap& p : sharded) out.push_back(TopicName{p.topic, true});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}
TopicInfo Client::topic(std::string_view name) {
  Impl& i = *impl_;
  return i.route(name, [&] { return i.queue.catalog.get(name); },
                 [&](const internal::ShardMap& p) { return i.router.topic(p); });
}

void Client::add_server(std::string_view name, std::string_view dsn) {
  impl_->registry.add_server(name, dsn);
}
std::vector<ServerInfo> Client::list_servers() { return impl_->registry.list_servers(); }
void Client::remove_server(std::string_view name) { impl_->registry.remove_server(name); }
void Client::move_partition(std::string_view topic, int partition, std::string_view server) {
  impl_->router.move_partition(topic, partition, server);
}

std::uint64_t Client::send(std::string_view topic, std::string_view payload,
                           const SendOptions& options) {
  Impl& i = *impl_;
  return i.route(topic, [&] {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t id = internal::send_one(i.queue, topic, payload, options);
    i.queue.metrics.sent(topic, start, 1);
    return id;
  }, [&](const internal::ShardMap&) { return i.router.send(topic, payload, options); });
}

std::vector<std::uint64_t> Client::send_batch(std::string_view topic,
                                              std::span<const OutgoingMessage> messages) {
  Impl& i = *impl_;
  return i.route(topic, [&] {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::uint64_t> ids = internal::send_batch(i.queue, topic, messages);
    i.queue.metrics.sent(topic, start, ids.size());
    return ids;
  }, [&](const internal::ShardMap&) { return i.router.send_batch(topic, messages); });
}

Transaction Client::begin() {
  internal::Pool::Handle handle = impl_->queue.pool.acquire(internal::Work::kTransaction);
  handle->unbound_idle();
  handle->begin();
  return Transaction(std::make_unique<Transaction::Impl>(impl_->queue, std::move(handle)));
}

void Client::transact(const std::function<void(Transaction&)>& fn) {
  internal::QueueContext& q = impl_->queue;
  // Pool::run retries the whole function after a deadlock, a lock-wait timeout or a lost
  // connection, as it does txmq's own transactions, and never after kCommitUnknown.
  q.pool.run(internal::OnLostConnection::kRetry, internal::Work::kTransaction,
             [&](internal::Connection& c, const internal::Attempt&) {
               c.unbound_idle();
               c.begin();
               const auto sent = internal::lend_transaction(q, c, fn);
               c.commit();
               internal::announce_sent(q, sent);
             });
}

Outbox Client::enlist(MYSQL* connection) {
  return Outbox(std::make_unique<Outbox::Impl>(impl_->queue, connection));
}

std::size_t Client::process(std::string_view topic, const ProcessOptions& options,
                            const TransactionalHandler& handler) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::process(i.queue, topic, options, handler); },
                 [&](const internal::ShardMap&) { return i.router.process(topic, options, handler); });
}

std::size_t Client::process_xa(std::string_view topic, const XaResource& resource,
                               const ProcessOptions& options, const TransactionalHandler& handler) {
  Impl& i = *impl_;
  return i.route(
      topic, [&] { return internal::process_xa(i.queue, i.xa, topic, resource, options, handler); },
      [&](const internal::ShardMap&) -> std::size_t {
        throw Error(Errc::kFailedPrecondition,
                    fmt::format("topic {} is sharded over several servers: process_xa works on "
                                "topics of the client's own database",
                                topic));
      });
}

XaRecovery Client::recover_xa(const XaResource& resource) {
  return internal::recover_xa(impl_->queue, impl_->xa, resource);
}

std::vector<XaBranchStatus> Client::xa_status(const XaResource& resource) {
  return internal::xa_status(impl_->queue, impl_->xa, resource);
}

std::vector<Message> Client::receive(std::string_view topic, const ReceiveOptions& options) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::receive(i.queue, topic, options); },
                 [&](const internal::ShardMap&) { return i.router.receive(topic, options); });
}

HeldBatch Client::hold(std::string_view topic, const ReceiveOptions& options) {
  Impl& i = *impl_;
  return i.route(
      topic,
      [&] {
        std::unique_ptr<internal::HeldClaim> claim = internal::hold(i.queue, topic, options);
        Micros lease{0};
        if (claim) lease = options.lease.value_or(claim->topic_options().lease);
        return HeldBatch(std::move(claim), lease);
      },
      [&](const internal::ShardMap&) -> HeldBatch {
        throw Error(Errc::kInvalidArgument,
                    fmt::format("topic {} is sharded over several servers: hold is not "
                                "available for it (use receive)",
                                topic));
      });
}

Settle Client::ack(std::string_view topic, std::string_view receipt) {
  std::string one(receipt);
  return ack(topic, std::span<const std::string>(&one, 1)).at(0);
}

std::vector<Settle> Client::ack(std::string_view topic, std::span<const std::string> receipts) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::ack(i.queue, topic, receipts); },
                 [&](const internal::ShardMap&) { return i.router.ack(topic, receipts); });
}

std::vector<Message> Client::ack_and_receive(std::string_view topic,
                                             std::span<const std::string> receipts,
                                             std::vector<Settle>& settled,
                                             const ReceiveOptions& options) {
  Impl& i = *impl_;
  return i.route(
      topic,
      [&] { return internal::ack_and_receive(i.queue, topic, receipts, options, settled); },
      [&](const internal::ShardMap&) {
        // Partitions on several servers: no one transaction holds both. Options first, then
        // the acknowledgements; once they are applied, a claim that fails for a while (a
        // server away) answers with their outcomes and no messages.
        internal::check_claim_options(options.max_messages, options.wait);
        settled = i.router.ack(topic, receipts);
        try {
          return i.router.receive(topic, options);
        } catch (const Error& e) {
          if (!e.retryable()) throw;
          return std::vector<Message>{};
        }
      });
}

Settle Client::nack(std::string_view topic, std::string_view receipt,
                    std::optional<Micros> delay) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::nack(i.queue, topic, receipt, delay); },
                 [&](const internal::ShardMap&) { return i.router.nack(topic, receipt, delay); });
}

Settle Client::extend(std::string_view topic, std::string_view receipt, Micros lease) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::extend(i.queue, topic, receipt, lease); },
                 [&](const internal::ShardMap&) { return i.router.extend(topic, receipt, lease); });
}

std::vector<Settle> Client::extend(std::string_view topic, std::span<const std::string> receipts,
                                   Micros lease) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::extend(i.queue, topic, receipts, lease); },
                 [&](const internal::ShardMap&) {
                   std::vector<Settle> results;
                   results.reserve(receipts.size());
                   for (const std::string& r : receipts) {
                     results.push_back(i.router.extend(topic, r, lease));
                   }
                   return results;
                 });
}

std::uint64_t Client::purge(std::string_view topic, std::string_view group) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::purge(i.queue, topic, group); },
                 [&](const internal::ShardMap& p) { return i.router.purge(p, group); });
}

void Client::forget_dedup_keys(std::string_view topic) {
  Impl& i = *impl_;
  i.route(topic, [&] { internal::forget_dedup_keys(i.queue, topic); },
          [&](const internal::ShardMap& p) { i.router.forget_dedup_keys(p); });
}

Client::Subscription Client::subscribe(std::string_view topic, std::string_view group,
                                       std::function<void()> wake) {
  Impl& i = *impl_;
  return Subscription(std::make_shared<Subscription::Impl>(i.route(
      topic, [&] { return internal::subscribe(i.queue, topic, group, std::move(wake)); },
      [&](const internal::ShardMap& p) { return i.router.subscribe(p, group, std::move(wake)); })));
}

void Client::install_sql_interface() {
  std::string why;
  const bool installed = impl_->queue.pool.run(
      internal::OnLostConnection::kRetry,
      [&](internal::Connection& c, const internal::Attempt&) { return internal::install_routines(c, &why); });
  if (!installed) {
    throw Error(Errc::kFailedPrecondition,
                fmt::format("this database user may not create the SQL interface's routines "
                            "(it needs CREATE ROUTINE, ALTER ROUTINE and CREATE TEMPORARY TABLES "
                            "on the database): {}",
                            why));
  }
  impl_->queue.catalog.refresh_send_procedures();
}

TopicStats Client::stats(std::string_view topic, std::string_view group) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::stats(i.queue, topic, group, 0); },
                 [&](const internal::ShardMap& p) { return i.router.stats(p, group, 0); });
}

TopicStats Client::stats(std::string_view topic, std::string_view group,
                         std::uint64_t exact_up_to) {
  if (exact_up_to == 0) throw Error(Errc::kInvalidArgument, "exact_up_to must be at least 1");
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::stats(i.queue, topic, group, exact_up_to); },
                 [&](const internal::ShardMap& p) {
                   return i.router.stats(p, group, exact_up_to);
                 });
}

namespace {

// Adds b's totals into a (the same topic, group and name).
void add_metric(RecordedMetric& a, const RecordedMetric& b) {
  a.value += b.value;
  a.sum += b.sum;
  if (a.buckets.size() < b.buckets.size()) a.buckets.resize(b.buckets.size());
  for (std::size_t k = 0; k < b.buckets.size(); ++k) a.buckets[k] += b.buckets[k];
}

// Totals of one name added together, ordered by topic, group and name.
std::vector<RecordedMetric> merged_metrics(std::vector<std::vector<RecordedMetric>> parts) {
  std::map<std::tuple<std::string, std::string, std::string>, RecordedMetric> all;
  for (std::vector<RecordedMetric>& part : parts) {
    for (RecordedMetric& m : part) {
      auto [it, added] = all.try_emplace({m.topic, m.group, m.name}, m);
      if (!added) add_metric(it->second, m);
    }
  }
  std::vector<RecordedMetric> out;
  out.reserve(all.size());
  for (auto& [key, m] : all) out.push_back(std::move(m));
  return out;
}

}  // namespace

std::vector<RecordedMetric> Client::recorded_metrics() {
  // The client's database, and every server of a sharded topic that this client reached:
  // totals of one name added together.
  std::vector<RecordedMetric> all = internal::read_metrics(impl_->queue.pool);
  const std::vector<internal::QueueContext*> shards = impl_->registry.connected();
  if (shards.empty()) return all;
  std::vector<std::vector<RecordedMetric>> parts;
  parts.push_back(std::move(all));
  for (internal::QueueContext* q : shards) parts.push_back(internal::read_metrics(q->pool));
  return merged_metrics(std::move(parts));
}

std::vector<RecordedMetric> Client::recorded_metrics(const std::vector<std::string>& topics) {
  std::vector<RecordedMetric> all = internal::read_metrics(impl_->queue.pool, topics);
  const std::vector<internal::QueueContext*> shards = impl_->registry.connected();
  if (shards.empty()) return all;
  std::vector<std::vector<RecordedMetric>> parts;
  parts.push_back(std::move(all));
  for (internal::QueueContext* q : shards) parts.push_back(internal::read_metrics(q->pool, topics));
  return merged_metrics(std::move(parts));
}

MetricSummary Client::metric_summary() {
  MetricSummary summary = internal::read_metric_summary(impl_->queue.pool);
  const std::vector<internal::QueueContext*> shards = impl_->registry.connected();
  if (shards.empty()) return summary;
  std::map<std::string, double> by_topic(summary.counters_by_topic.begin(),
                                         summary.counters_by_topic.end());
  std::vector<std::vector<RecordedMetric>> sums;
  sums.push_back(std::move(summary.sums));
  for (internal::QueueContext* q : shards) {
    MetricSummary more = internal::read_metric_summary(q->pool);
    for (const auto& [topic, total] : more.counters_by_topic) by_topic[topic] += total;
    sums.push_back(std::move(more.sums));
  }
  summary.counters_by_topic.assign(by_topic.begin(), by_topic.end());
  summary.sums = merged_metrics(std::move(sums));
  return summary;
}

std::vector<InFlightMessage> Client::in_flight(std::string_view topic, std::size_t limit,
                                               std::string_view group) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::in_flight(i.queue, topic, group, limit); },
                 [&](const internal::ShardMap& p) { return i.router.in_flight(p, group, limit); });
}

std::vector<DeadLetter> Client::dead_letters(std::string_view topic, std::size_t limit,
                                             std::string_view group, std::size_t payload_bytes) {
  Impl& i = *impl_;
  return i.route(
      topic, [&] { return internal::dead_letters(i.queue, topic, group, limit, payload_bytes); },
      [&](const internal::ShardMap& p) {
        return i.router.dead_letters(p, group, limit, payload_bytes);
      });
}

std::size_t Client::requeue_dead(std::string_view topic, std::span<const std::uint64_t> ids,
                                 std::string_view group) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::requeue_dead(i.queue, topic, group, ids); },
                 [&](const internal::ShardMap& p) { return i.router.requeue_dead(p, group, ids); });
}

std::size_t Client::delete_dead(std::string_view topic, std::span<const std::uint64_t> ids,
                                std::string_view group) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::delete_dead(i.queue, topic, group, ids); },
                 [&](const internal::ShardMap& p) { return i.router.delete_dead(p, group, ids); });
}

bool Client::create_group(std::string_view topic, std::string_view group, GroupStart start) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return i.queue.catalog.create_group(topic, group, start); },
                 [&](const internal::ShardMap& p) { return i.router.create_group(p, group, start); });
}

void Client::drop_group(std::string_view topic, std::string_view group) {
  Impl& i = *impl_;
  i.route(topic, [&] { i.queue.catalog.drop_group(topic, group); },
          [&](const internal::ShardMap& p) { i.router.drop_group(p, group); });
}

std::vector<GroupInfo> Client::list_groups(std::string_view topic) {
  Impl& i = *impl_;
  return i.route(topic, [&] {
    i.queue.catalog.forget(topic);  // a listing is read fresh
    std::vector<GroupInfo> out;
    for (const internal::GroupEntry& g : i.queue.catalog.layout(topic).groups) {
      out.push_back({g.name, g.created_at});
    }
    return out;
  }, [&](const internal::ShardMap& p) { return i.router.list_groups(p); });
}

std::vector<ArchivedMessage> Client::archived(std::string_view topic, std::uint64_t from_id,
                                              std::size_t limit) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::archived(i.queue, topic, from_id, limit); },
                 [&](const internal::ShardMap& p) { return i.router.archived(p, from_id, limit); });
}

std::uint64_t Client::purge_archive(std::string_view topic) {
  Impl& i = *impl_;
  return i.route(topic, [&] { return internal::purge_archive(i.queue, topic); },
                 [&](const internal::ShardMap& p) { return i.router.purge_archive(p); });
}

const std::string& Client::consumer_name() const { return impl_->queue.owner; }

}  // namespace txmq
