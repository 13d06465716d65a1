#include "txmq/client.h"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "db/printable.h"
#include "db/dsn.h"
#include "queue/operations.h"
#include "queue/transaction_impl.h"

namespace txmq {

using internal::QueueContext;

// --- Error -------------------------------------------------------------------------------------

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kUnavailable: return "unavailable";
    case Errc::kAborted: return "aborted";
    case Errc::kCommitUnknown: return "commit_unknown";
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kNotFound: return "not_found";
    case Errc::kAlreadyExists: return "already_exists";
    case Errc::kFailedPrecondition: return "failed_precondition";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

Error::Error(Errc code, const std::string& what, unsigned server_errno, std::string sqlstate,
             std::string server_message)
    : std::runtime_error(what),
      code_(code),
      server_errno_(server_errno),
      sqlstate_(std::move(sqlstate)),
      server_message_(std::move(server_message)) {}

bool Error::retryable() const noexcept {
  return code_ == Errc::kUnavailable || code_ == Errc::kAborted;
}

// --- Receipt -----------------------------------------------------------------------------------

// Text form: "<id>.<token as 16 hex digits>".
Receipt Receipt::parse(std::string_view text) {
  auto refuse = [&] {
    return Error(Errc::kInvalidArgument,
                 fmt::format("malformed receipt '{}': expected ID.TOKEN or ID.TOKEN.GROUP as "
                             "printed by receive",
                             internal::printable(text)));
  };
  Receipt r;
  std::size_t dot = text.find('.');
  // One spelling per receipt: no leading zeros (found by tests/fuzz/fuzz_receipt.cc).
  if (dot == std::string_view::npos || dot == 0 || text[0] == '0') throw refuse();
  std::size_t group_dot = text.find('.', dot + 1);
  std::string_view token_text = text.substr(dot + 1, group_dot == std::string_view::npos
                                                         ? std::string_view::npos
                                                         : group_dot - dot - 1);
  if (token_text.size() != 16) throw refuse();
  const char* end = text.data() + dot;
  auto [p1, e1] = std::from_chars(text.data(), end, r.id);
  if (e1 != std::errc() || p1 != end || r.id == 0) throw refuse();
  const char* tok_end = token_text.data() + token_text.size();
  auto [p2, e2] = std::from_chars(token_text.data(), tok_end, r.token, 16);
  if (e2 != std::errc() || p2 != tok_end || r.token == 0) throw refuse();
  for (char c : token_text) {
    if (c >= 'A' && c <= 'F') throw refuse();  // one spelling per receipt
  }
  if (group_dot != std::string_view::npos) {
    std::string_view g = text.substr(group_dot + 1);
    auto [p3, e3] = std::from_chars(g.data(), g.data() + g.size(), r.group);
    if (g.empty() || e3 != std::errc() || p3 != g.data() + g.size() || r.group == 0 ||
        g[0] == '0' || g[0] == '+' || r.group > 999) {
      throw refuse();
    }
  }
  return r;
}

std::string Receipt::str() const {
  return group == 0 ? fmt::format("{}.{:016x}", id, token)
                    : fmt::format("{}.{:016x}.{}", id, token, group);
}

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
              options.record_metrics) {}

  static internal::Dsn resolve_dsn(const std::string& dsn) {
    if (!dsn.empty()) return internal::parse_dsn(dsn);
    const char* env = std::getenv("TXMQ_DSN");
    if (env != nullptr && *env != '\0') return internal::parse_dsn(env);
    throw Error(Errc::kInvalidArgument, "no DSN given and TXMQ_DSN is not set");
  }

  void check_server() {
    internal::Result r =
        queue.pool.run(internal::OnLostConnection::kRetry, [](internal::Connection& c,
                                                              const internal::Attempt&) {
          return c.execute(
              "SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin, "
              "@@max_allowed_packet",
              {});
        });
    const internal::Row& row = r.rows.at(0);
    const std::string where = queue.pool.dsn().describe();
    internal::Cluster* cluster = queue.pool.cluster();
    const bool galera = cluster != nullptr && cluster->galera();  // checked per node below
    if (row.i64(0) != 1 && !galera) {
      warn_once(options.on_warning,
                fmt::format("{} runs with innodb_flush_log_at_trx_commit={}: a crash of the "
                            "server can lose messages whose send already succeeded (set it to 1)",
                            where, row.i64(0)));
    }
    if (row.i64(2) != 0 && row.i64(1) != 1) {
      warn_once(options.on_warning,
                fmt::format("{} writes a binary log with sync_binlog={}: a crash can lose "
                            "acknowledged sends from the binlog and its replicas (set it to 1)",
                            where, row.i64(1)));
    }
    // A statement must fit in one packet; keep a margin for the protocol's own bytes.
    queue.max_statement_bytes = std::max<std::size_t>(row.u64(3) / 2, 64 * 1024);
    check_galera();
  }

  // What a Galera cluster promises depends on every node's settings (docs/galera.md,
  // "What is promised"): checked on each node the DSN lists, once per client.
  void check_galera() {
    internal::Pool& pool = queue.pool;
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
    if (pool.dsn().is_host_list()) return;  // a list of plain servers
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

  ClientOptions options;
  QueueContext queue;
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
  impl_->check_server();
  impl_->queue.catalog.bootstrap();
}

Client::~Client() = default;

bool Client::create_topic(std::string_view name, const TopicOptions& options) {
  return impl_->queue.catalog.create(name, options);
}
void Client::drop_topic(std::string_view name) {
  impl_->queue.catalog.drop(name);
}
void Client::update_topic(std::string_view name, const TopicOptions& options) {
  impl_->queue.catalog.update(name, options);
}
std::vector<TopicInfo> Client::list_topics() { return impl_->queue.catalog.list(); }
TopicInfo Client::topic(std::string_view name) { return impl_->queue.catalog.get(name); }

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

std::uint64_t Client::send(std::string_view topic, std::string_view payload,
                           const SendOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t id = internal::send_one(impl_->queue, topic, payload, options);
  internal::MetricsRecorder& m = impl_->queue.metrics;
  m.observe(topic, {}, internal::Histogram::kSend, seconds_since(start));
  m.count(topic, {}, internal::Counter::kSent, 1);
  return id;
}

std::vector<std::uint64_t> Client::send_batch(std::string_view topic,
                                              std::span<const OutgoingMessage> messages) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> ids = internal::send_batch(impl_->queue, topic, messages);
  internal::MetricsRecorder& m = impl_->queue.metrics;
  m.observe(topic, {}, internal::Histogram::kSend, seconds_since(start));
  m.count(topic, {}, internal::Counter::kSent, ids.size());
  return ids;
}

Transaction Client::begin() {
  internal::Pool::Handle handle = impl_->queue.pool.acquire(internal::Work::kTransaction);
  handle->begin();
  return Transaction(std::make_unique<Transaction::Impl>(impl_->queue, std::move(handle)));
}

void Client::transact(const std::function<void(Transaction&)>& fn) {
  internal::QueueContext& q = impl_->queue;
  // Pool::run retries the whole function after a deadlock, a lock-wait timeout or a lost
  // connection, as it does txmq's own transactions, and never after kCommitUnknown.
  q.pool.run(internal::OnLostConnection::kRetry, internal::Work::kTransaction,
             [&](internal::Connection& c, const internal::Attempt&) {
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
  return internal::process(impl_->queue, topic, options, handler);
}

std::vector<Message> Client::receive(std::string_view topic, const ReceiveOptions& options) {
  return internal::receive(impl_->queue, topic, options);
}

Settle Client::ack(std::string_view topic, std::string_view receipt) {
  std::string one(receipt);
  return internal::ack(impl_->queue, topic, std::span<const std::string>(&one, 1)).at(0);
}

std::vector<Settle> Client::ack(std::string_view topic, std::span<const std::string> receipts) {
  return internal::ack(impl_->queue, topic, receipts);
}

Settle Client::nack(std::string_view topic, std::string_view receipt,
                    std::optional<Micros> delay) {
  return internal::nack(impl_->queue, topic, receipt, delay);
}

Settle Client::extend(std::string_view topic, std::string_view receipt, Micros lease) {
  return internal::extend(impl_->queue, topic, receipt, lease);
}

std::uint64_t Client::purge(std::string_view topic, std::string_view group) {
  return internal::purge(impl_->queue, topic, group);
}

void Client::forget_dedup_keys(std::string_view topic) {
  internal::forget_dedup_keys(impl_->queue, topic);
}

Client::Subscription Client::subscribe(std::string_view topic, std::string_view group,
                                       std::function<void()> wake) {
  return Subscription(internal::subscribe(impl_->queue, topic, group, std::move(wake)));
}

TopicStats Client::stats(std::string_view topic, std::string_view group) {
  return internal::stats(impl_->queue, topic, group, 0);
}

TopicStats Client::stats(std::string_view topic, std::string_view group,
                         std::uint64_t exact_up_to) {
  if (exact_up_to == 0) throw Error(Errc::kInvalidArgument, "exact_up_to must be at least 1");
  return internal::stats(impl_->queue, topic, group, exact_up_to);
}

std::vector<RecordedMetric> Client::recorded_metrics() {
  return internal::read_metrics(impl_->queue.pool);
}

std::vector<InFlightMessage> Client::in_flight(std::string_view topic, std::size_t limit,
                                               std::string_view group) {
  return internal::in_flight(impl_->queue, topic, group, limit);
}

std::vector<DeadLetter> Client::dead_letters(std::string_view topic, std::size_t limit,
                                             std::string_view group) {
  return internal::dead_letters(impl_->queue, topic, group, limit);
}

std::size_t Client::requeue_dead(std::string_view topic, std::span<const std::uint64_t> ids,
                                 std::string_view group) {
  return internal::requeue_dead(impl_->queue, topic, group, ids);
}

std::size_t Client::delete_dead(std::string_view topic, std::span<const std::uint64_t> ids,
                                std::string_view group) {
  return internal::delete_dead(impl_->queue, topic, group, ids);
}

bool Client::create_group(std::string_view topic, std::string_view group, GroupStart start) {
  return impl_->queue.catalog.create_group(topic, group, start);
}

void Client::drop_group(std::string_view topic, std::string_view group) {
  impl_->queue.catalog.drop_group(topic, group);
}

std::vector<GroupInfo> Client::list_groups(std::string_view topic) {
  impl_->queue.catalog.forget(topic);  // a listing is read fresh
  std::vector<GroupInfo> out;
  for (const internal::GroupEntry& g : impl_->queue.catalog.layout(topic).groups) {
    out.push_back({g.name, g.created_at});
  }
  return out;
}

std::vector<ArchivedMessage> Client::archived(std::string_view topic, std::uint64_t from_id,
                                              std::size_t limit) {
  return internal::archived(impl_->queue, topic, from_id, limit);
}

std::uint64_t Client::purge_archive(std::string_view topic) {
  return internal::purge_archive(impl_->queue, topic);
}

const std::string& Client::consumer_name() const { return impl_->queue.owner; }

}  // namespace txmq
