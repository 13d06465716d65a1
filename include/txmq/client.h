#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "txmq/error.h"
#include "txmq/held_batch.h"
#include "txmq/transaction.h"
#include "txmq/types.h"

namespace txmq {

// A connection to one txmq database: topics, sends, claims and their settlement.
// Thread safety: a Client may be used from many threads at once; it keeps a pool of connections.
// Every function throws txmq::Error; retryable() tells whether trying again may help.
class Client {
 public:
  // Connects (fails fast with kUnavailable, kInvalidArgument for a bad DSN, or
  // kFailedPrecondition for MySQL, MariaDB before 10.6 or a schema this txmq cannot read),
  // creates the catalog tables when missing, and warns once when the server would lose
  // acknowledged sends in a crash.
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Creates the topic. Returns true when it was created, false when it existed with the same
  // settings. Throws kAlreadyExists when it exists with other settings, kInvalidArgument for a bad
  // name ([a-z][a-z0-9_]{0,47}) or settings.
  // `tables`: when the topic's tables are made, or kShared for none of its own (default:
  // ClientOptions::topic_tables; a sharded topic's: now).
  bool create_topic(std::string_view name, const TopicOptions& options = {},
                    std::optional<TableCreation> tables = std::nullopt);
  // Drops the topic with its messages and dead letters. Throws kNotFound when there is none.
  void drop_topic(std::string_view name);
  // Changes a topic's settings (all of them: read them with topic(), change some, pass them back).
  // New values apply to later claims, nacks and sends; other clients see them within 5 seconds.
  void update_topic(std::string_view name, const TopicOptions& options);
  std::vector<TopicInfo> list_topics();
  // Every topic's name, by name, and whether it has its tables (TopicInfo::has_tables): what
  // list_topics() says of them without reading their settings, for listings of many topics
  // (about a third of its time with 100,000).
  std::vector<TopicName> list_topic_names();
  TopicInfo topic(std::string_view name);

  // --- Shards: a topic's partitions on several servers (docs/shards.md) -------------------------
  //
  // The client's database is the catalog: it records servers by name and where each partition
  // of a sharded topic (TopicOptions::servers) lives. Ids carry their partition, so receipts go
  // straight to their server; a send_batch commits on one server (a batch whose keys or dedup
  // keys map to partitions on several servers is refused); process() is exactly-once per server.
  // A server that stops answering (paused, or a host gone dark) holds up only its partitions:
  // after about a second a call goes on without it. receive() returns the others' messages;
  // ack() settles the others' receipts, then throws kUnavailable; a send left waiting on it
  // throws kCommitUnknown (it commits if the server answers again); the server is then skipped
  // until it answers (docs/shards.md, "A server that stops answering").

  // Records a server. The DSN may not hold a password: name a file (password-file=PATH) or an
  // environment variable (password-env=NAME) that every client has. Connects to it first and
  // creates txmq's catalog tables there. Throws kAlreadyExists when the name is taken by another
  // DSN; names follow topic names' rule.
  void add_server(std::string_view name, std::string_view dsn);
  std::vector<ServerInfo> list_servers();
  // Forgets a server. kFailedPrecondition while a partition lives on it.
  void remove_server(std::string_view name);
  // Moves one partition of a sharded topic to another server, with its messages (waiting, in
  // flight with their leases, delayed, parked behind keys, dead letters), dedup keys and archive,
  // while sends to the topic's other partitions go on. Sends to the partition wait (up to 30 s)
  // while it moves. Run again after a failure: it finishes or undoes a cut-short move.
  void move_partition(std::string_view topic, int partition, std::string_view server);

  // Sends one message (any bytes) and returns its id once it is committed.
  std::uint64_t send(std::string_view topic, std::string_view payload,
                     const SendOptions& options = {});
  // Sends all messages in one transaction: all commit or none do. Returns the ids in input order.
  // Every message is checked before anything is written; one refused message refuses the batch.
  std::vector<std::uint64_t> send_batch(std::string_view topic,
                                        std::span<const OutgoingMessage> messages);

  // --- Transactional messaging (txmq/transaction.h) -------------------------------------------

  // Opens a transaction on one of the client's connections, held until it commits or rolls back.
  Transaction begin();
  // Runs fn in a new transaction and commits it when fn returns (fn may not commit or roll back
  // itself; throwing rolls back). After a deadlock, a lock-wait timeout or a lost connection
  // before COMMIT, runs fn again in a fresh transaction, with the bounds and backoff of the
  // client's own operations (8 retries after conflicts, 3 reconnections), so fn must not have
  // effects outside the transaction that cannot be repeated. Throws kCommitUnknown when the
  // COMMIT's outcome is unknown; never runs fn again after that.
  void transact(const std::function<void(Transaction&)>& fn);
  // Enlists the application's own connection, which has a transaction open: see Outbox.
  Outbox enlist(MYSQL* connection);

  // Exactly-once processing. In one transaction: claims up to max_messages claimable messages
  // (FOR UPDATE SKIP LOCKED, in id order as receive), runs handler(transaction, messages),
  // deletes the messages and commits, so that the handler's statements and the acknowledgement
  // commit together or not at all. Returns how many messages were processed; 0 when none
  // arrived within options.wait.
  //  - The handler throws: everything rolls back, the messages' attempt count goes up by one
  //    and they are claimable again after the topic's retry delay (TopicOptions::retry; past
  //    max_attempts they are dead-lettered), and the exception is rethrown.
  //  - The process dies or the connection drops: the server rolls everything back; the messages
  //    are claimable again at once (no lease to wait out). No attempt is counted.
  //  - A deadlock or lost connection during the handler's statements rolls back and claims
  //    again: the handler may be called again, with other messages.
  //  - kCommitUnknown: the COMMIT broke off. Either the work and the acknowledgement committed,
  //    or neither did and the messages will be processed again: exactly once either way.
  std::size_t process(std::string_view topic, const ProcessOptions& options,
                      const TransactionalHandler& handler);

  // Exactly-once across two databases: the queue's (this client's) and the application's
  // `resource`, a second MariaDB/MySQL server. Claims up to max_messages messages as process()
  // does and runs handler(transaction, messages) with an XA branch open on the resource:
  // transaction.execute runs there, transaction.send goes to the queue's database. Then, in
  // order: the branch is prepared (XA END, XA PREPARE); the queue's transaction deletes (or
  // archives) the messages, records the decision and commits — this commit decides the batch;
  // the branch is committed (XA COMMIT). Returns how many messages were processed.
  //  - The handler throws: both sides roll back, the attempt is counted as in process(), the
  //    exception is rethrown. A lock-wait timeout or deadlock on the resource first runs a
  //    recovery pass (a crashed consumer's branch may hold the rows), then claims again.
  //  - Any crash (this process, either server) leaves at most a prepared branch whose outcome
  //    the decision record, or its absence, fixes. Every process_xa runs recovery for its
  //    resource at its first call and every 10 s (recover_xa): each message's work commits once.
  //  - kUnavailable: a server cannot be reached; a batch the queue's commit may have decided is
  //    resolved first if the queue's server comes back within 30 s, else left to recovery.
  // The resource's connections run READ COMMITTED with innodb_lock_wait_timeout 10 s.
  // kFailedPrecondition when the resource refuses XA (a Galera node).
  std::size_t process_xa(std::string_view topic, const XaResource& resource,
                         const ProcessOptions& options, const TransactionalHandler& handler);
  // One recovery pass over the resource's branches of this queue database: commits those whose
  // batch committed, rolls back those whose batch cannot commit any more (their consumer died
  // before the queue's commit), leaves those of consumers still at work, deletes decision
  // records no longer needed. Safe to run from any number of processes at once.
  XaRecovery recover_xa(const XaResource& resource);
  // The resource's branches of this queue database that are in doubt, and the decision records
  // left, with what recovery would do to each.
  std::vector<XaBranchStatus> xa_status(const XaResource& resource);

  // Leases up to max_messages claimable messages of options.group in id order (per partition), from past the ids this client
  // claimed before (lower ones that became claimable again are swept up within a second, or at
  // once when nothing else is claimable; docs/schema.md). Empty when none arrived
  // within options.wait. Messages past the topic's max_attempts go to the dead-letter table.
  std::vector<Message> receive(std::string_view topic, const ReceiveOptions& options = {});

  // Claims up to max_messages claimable messages as receive does, but holds them with an open
  // transaction on one of the pool's connections instead of writing leases (HeldBatch: settle
  // them there and commit once, or lease what is left). Empty when none arrived within
  // options.wait. options.lease is lease_rest's default. Throws as receive, and
  // kInvalidArgument for a topic sharded over several servers (receive those).
  HeldBatch hold(std::string_view topic, const ReceiveOptions& options = {});

  // Deletes the message. kLeaseLost when another consumer holds it now.
  // The receipt names the group that received the message, so acknowledging needs no group.
  Settle ack(std::string_view topic, std::string_view receipt);
  std::vector<Settle> ack(std::string_view topic, std::span<const std::string> receipts);
  // ack(receipts), then receive(options), in one transaction where it can: for a consumer that
  // acknowledges one batch and asks for the next, one commit instead of two (docs/library.md,
  // "Acknowledging with the next receive"). `settled` gets ack's outcomes, in order. The
  // acknowledgements are committed before any wait. Receipts of keyed messages, of a topic with
  // an archive or of a sharded topic are acknowledged first, on their own.
  // Throws as receive. On kCommitUnknown the acknowledgements may or may not have been applied;
  // on any other error none that rode with the claim were (acknowledging them again is safe: one
  // already applied gives kNotFound). Once they are applied, a claim that fails after them
  // answers with their outcomes and no messages.
  std::vector<Message> ack_and_receive(std::string_view topic,
                                       std::span<const std::string> receipts,
                                       std::vector<Settle>& settled,
                                       const ReceiveOptions& options = {});
  // Gives the message back, claimable after `delay`, or by default after the topic's retry delay
  // for its attempt (TopicOptions::retry). At max_attempts it is dead-lettered instead.
  Settle nack(std::string_view topic, std::string_view receipt,
              std::optional<Micros> delay = std::nullopt);
  // Moves the lease's expiry to now + lease. A lease of 0 makes the message claimable at once
  // (as SQS's ChangeMessageVisibility to 0), without counting a failure or a retry delay; the
  // receipt stays valid until someone claims the message again.
  Settle extend(std::string_view topic, std::string_view receipt, Micros lease);
  // extend for several receipts, outcomes in their order: one statement for the messages of
  // one claim (SQS's ChangeMessageVisibilityBatch; the Worker's extender).
  std::vector<Settle> extend(std::string_view topic, std::span<const std::string> receipts,
                             Micros lease);

  // Deletes every message of the group (ready, in flight, delayed and waiting behind their
  // key; not its dead letters), as SQS's PurgeQueue. Receipts of purged messages then settle
  // nothing (kNotFound). Returns how many went.
  std::uint64_t purge(std::string_view topic, std::string_view group = {});
  // Forgets the topic's deduplication keys: later sends with them are new messages.
  void forget_dedup_keys(std::string_view topic);

  // (Re)installs the SQL interface (docs/sql.md): the stored procedures through which
  // applications in any language send and consume inside their own transactions, created with
  // this client's database user as their definer. The schema's migration installs them when the
  // migrating user may create routines; this is for a database where it could not. Throws
  // kFailedPrecondition, with the server's reason, when this user may not either.
  void install_sql_interface();

  // Long polling without a thread per receiver, for servers that hold many receives at once.
  // Calls `wake` at most once, from a thread of the client's, when messages may have become
  // claimable in the group: a send to it was announced by any client, or the group's waiter
  // (one per topic and group, as receive's) found claimable messages. Subscribe first, then
  // claim with receive (wait 0): a send committed after that claim looked wakes the
  // subscription (subscribing only after an empty claim could miss a send in between, until
  // the waiter's next look about a second later). `wake` must return
  // quickly and not call back into the client. Destroying the Subscription before `wake` ran
  // cancels it; after it returns, `wake` is not called.
  class Subscription {
   public:
    Subscription() = default;
    Subscription(Subscription&&) noexcept;
    Subscription& operator=(Subscription&&) noexcept;
    ~Subscription();
    struct Impl;
    explicit Subscription(std::shared_ptr<Impl> impl);

   private:
    std::shared_ptr<Impl> impl_;
  };
  Subscription subscribe(std::string_view topic, std::string_view group,
                         std::function<void()> wake);

  // Views of one consumer group (empty: "default"), over all partitions.
  TopicStats stats(std::string_view topic, std::string_view group = {});
  // As stats, but cheap on deep queues, for monitoring: reads at most about 2 * exact_up_to rows
  // of each table (the lowest and the highest ids). A table with more is estimated from the id
  // range and the density and mix of those rows, and the result says `estimated`.
  TopicStats stats(std::string_view topic, std::string_view group, std::uint64_t exact_up_to);
  // The totals every client of the database recorded (ClientOptions::record_metrics), for topics
  // and groups that exist. This client's last second may not be in them yet.
  std::vector<RecordedMetric> recorded_metrics();
  // The same for these topics only.
  std::vector<RecordedMetric> recorded_metrics(const std::vector<std::string>& topics);
  // Every topic's counters added up, and every metric summed over all topics, grouped by the
  // database: for a view of thousands of topics (txmq serve's /metrics ranks and sums with it).
  MetricSummary metric_summary();
  std::vector<InFlightMessage> in_flight(std::string_view topic, std::size_t limit = 1000,
                                         std::string_view group = {});
  // The group's dead letters, lowest ids first. `payload_bytes`: read at most this much of each
  // payload (a preview; DeadLetter::payload_size has the whole size).
  std::vector<DeadLetter> dead_letters(std::string_view topic, std::size_t limit = 1000,
                                       std::string_view group = {},
                                       std::size_t payload_bytes = SIZE_MAX);
  // Moves the group's dead letters back, claimable now and at attempt 1 again. Empty ids: all.
  // Returns how many were requeued.
  std::size_t requeue_dead(std::string_view topic, std::span<const std::uint64_t> ids = {},
                           std::string_view group = {});
  // Deletes the group's dead letters with these ids for good (ids that are not dead letters of
  // the group are skipped). Empty ids: all of them. Returns how many were deleted.
  std::size_t delete_dead(std::string_view topic, std::span<const std::uint64_t> ids = {},
                          std::string_view group = {});

  // --- Consumer groups (types.h, GroupStart) ---------------------------------------------------

  // Creates a group; false when it existed. kEarliest copies the retained messages into it
  // while sends to the topic wait (a pause that grows with the backlog); kNow does not.
  bool create_group(std::string_view topic, std::string_view group,
                    GroupStart start = GroupStart::kNow);
  // Drops a group with its messages and dead letters; its receipts then settle nothing
  // (kNotFound). Throws kFailedPrecondition for a topic's last group.
  void drop_group(std::string_view topic, std::string_view group);
  std::vector<GroupInfo> list_groups(std::string_view topic);

  // --- Archive (TopicOptions::archive) ----------------------------------------------------------

  // Archived messages with ids from from_id on, in id order.
  std::vector<ArchivedMessage> archived(std::string_view topic, std::uint64_t from_id = 0,
                                        std::size_t limit = 1000);
  // Deletes archived messages acknowledged longer ago than the topic's archive period
  // (TopicOptions::archive; all of them when the archive is off), in batches of 1,000 rows. Clients that acknowledge also purge a
  // batch now and then. Returns how many went.
  std::uint64_t purge_archive(std::string_view topic);

  const std::string& consumer_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace txmq
