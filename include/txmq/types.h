#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace txmq {

using Clock = std::chrono::system_clock;
using Micros = std::chrono::microseconds;

// When Client::create_topic makes a topic's tables.
enum class TableCreation {
  // With the topic: the SQL interface (txmq_send, ...) can use it at once.
  kNow,
  // At the topic's first use through this library (a send, a receive, a group, ...): until
  // then the topic is only its catalog rows, which is what makes thousands of idle topics cheap
  // (each table is a file of its own on disk). The SQL interface's calls fail on the topic
  // until its tables exist; the first call through the library inside an application's
  // Transaction needs a second connection of the pool to make them.
  kAtFirstUse,
  // Never: the topic keeps its messages in tables that such topics share (docs/design/
  // shared-queues.md), under a number of its own. Creating and dropping one writes catalog rows
  // only (no DDL, no file), and an idle one costs a few KiB: for many small queues (one per
  // tenant, per customer). Not yet for partitioned, fair or sharded topics.
  kShared,
};

struct ClientOptions {
  // mysql://user:password@host:port/database[?socket=PATH&connect_timeout=S]. Empty: the
  // environment variable TXMQ_DSN. The embedded default is chosen by the command line, not here.
  std::string dsn;
  // Most connections the client keeps open at once; each serves one thread at a time.
  int pool_size = 16;
  // Written to in-flight rows as their owner. Default: "hostname:pid".
  std::string consumer_name;
  // Receives warnings (such as a server that would lose acknowledged sends in a crash).
  // Default: one line on stderr. Each distinct warning is given once per process.
  std::function<void(std::string_view)> on_warning;
  // Counts sends, receives, acks, nacks, lease expiries and dead-letterings, and times sends,
  // claims and deliveries, in memory; adds them to the database's txmq_metrics table about once
  // a second and when the client is destroyed (Client::recorded_metrics, txmq metrics).
  bool record_metrics = true;
  // What Client::create_topic does when not told (kShared: every topic this client creates
  // goes to shared storage unless its call says otherwise).
  TableCreation topic_tables = TableCreation::kNow;
};

// When a failed delivery is tried again: after a nack without an explicit delay, after a lease
// ran out, or after an exactly-once handler threw. The n-th failed delivery of a message waits
//   min(max, initial * multiplier^(n-1)), shortened at random by up to `jitter` of itself,
// so that messages that failed together do not all come back together.
struct RetryPolicy {
  Micros initial = std::chrono::seconds(1);  // 0: retry at once
  double multiplier = 2.0;                   // 1 to 10
  Micros max = std::chrono::minutes(5);      // the cap, up to 1 day
  double jitter = 0.2;                       // 0 to 1

  bool operator==(const RetryPolicy&) const = default;
};

// A topic's settings. Stored in the catalog; a second create must match them. Client::update_topic
// changes them later; other clients see a change within 5 seconds.
struct TopicOptions {
  // How long a received message stays leased to its consumer before peers may take it.
  Micros lease = std::chrono::seconds(30);
  // Deliveries before a message is moved to the dead-letter table (or dead_letter_topic) instead
  // of delivered again, 1 to 1000; 0: never dead-lettered.
  int max_attempts = 5;
  // Largest message accepted, in bytes: its payload plus its attributes (the bytes of each
  // attribute's name, type and value, as SQS counts them). Larger sends are refused with
  // kInvalidArgument.
  std::size_t max_payload_bytes = 1 << 20;
  // How long a deduplication key is remembered after the send that first used it (1 s to 30
  // days), whether or not that message was acknowledged since: as SQS FIFO queues, 5 minutes.
  Micros dedup_window = std::chrono::minutes(5);
  // Backoff before a failed message is delivered again (a lease that ran out counts as a
  // failure: its message becomes claimable at lease end + the retry delay).
  RetryPolicy retry;
  // Partitions (1 to 64; can be raised later, never lowered). Each partition is a table of its
  // own per group: sends with a key go to the key's partition (jump consistent hash of the key's
  // FNV-1a hash, docs/library.md, "Partitions"), others are spread round-robin; receivers claim
  // across partitions in turn, or from the ones they are assigned. Ids carry their partition.
  int partitions = 1;
  // How long acknowledged messages are kept in the topic's archive (txmq archive list), up to
  // 3660 days; 0: not archived. A message is archived when a group acknowledges it (once per
  // message; a later group's acknowledgement renews acked_at).
  Micros archive{0};
  // Where messages past max_attempts go: empty, the topic's own dead-letter tables (txmq dead
  // list); else the name of another topic, into which they are sent as new messages (to all its
  // groups, keeping payload, key and attributes, with Message::dead_lettered_from naming their
  // origin) in the transaction that takes them out of this one: as an SQS redrive policy. The
  // target must exist; dropping it is refused while a topic names it.
  std::string dead_letter_topic;
  // How long a message is kept unacknowledged after its send, up to 3660 days; 0: until it is
  // acknowledged or dead-lettered. Older messages are deleted instead of delivered (SQS's
  // MessageRetentionPeriod).
  Micros retention{0};
  // Servers (names given to Client::add_server) over which the topic is sharded: partition p
  // lives on servers[p % servers.size()], whole, with its own tables there (docs/shards.md).
  // Empty: the client's own database. Set at creation; partitions added
  // later are placed the same way; Client::move_partition moves one.
  std::vector<std::string> servers;
  // Fair delivery between tenants (SendOptions::tenant): while consumers cannot keep up, a
  // tenant with a backlog does not hold the others up; claims take each tenant's messages in
  // turn (docs/library.md, "Fair topics"). Set at creation; topics without it refuse tenants.
  bool fair = false;

  bool operator==(const TopicOptions&) const = default;
};

struct TopicInfo {
  std::string name;
  TopicOptions options;
  Clock::time_point created_at;
  // A sharded topic's placement: the server of each partition (empty: the client's database),
  // and its epoch, which every change of placement raises.
  std::vector<std::string> placement;
  std::uint64_t placement_epoch = 0;
  // False for a topic created with TableCreation::kAtFirstUse and not used yet: it holds no
  // messages (Client::list_topics; always true elsewhere).
  bool has_tables = true;
  // Whether its rows are in the tables that topics created with TableCreation::kShared share,
  // not in tables of its own.
  bool shared_storage = false;
};

// A topic as Client::list_topic_names lists it.
struct TopicName {
  std::string name;
  bool has_tables = true;  // as TopicInfo::has_tables
};

// A server that topics may be sharded over (Client::add_server).
struct ServerInfo {
  std::string name;
  std::string dsn;  // as given: never a password (it names a password file or variable)
  Clock::time_point added_at;
};

// Consumer groups. Every group of a topic receives every message sent after it was created
// (at-least-once per group) and acknowledges on its own; consumers of one group compete. A topic
// starts with the group "default", which calls that name no group use.
enum class GroupStart {
  kNow,       // only messages sent after the group was created
  kEarliest,  // also every message retained: still unacknowledged by some group, or archived
};

struct GroupInfo {
  std::string name;
  Clock::time_point created_at;
};

// A message attribute (a header): a typed value stored with the message, as SQS's message
// attributes. `type` is 1 to 256 bytes of [A-Za-z0-9_.-] ("String", "Number", "Binary",
// "String.custom", ... : txmq stores it and does not interpret it); `value` is any bytes.
struct AttributeValue {
  std::string type = "String";
  std::string value;

  bool operator==(const AttributeValue&) const = default;
};
// Attribute names are 1 to 256 bytes of [A-Za-z0-9_.-]; a message has at most 64 of them. They
// count toward the topic's max_payload_bytes.
using Attributes = std::map<std::string, AttributeValue, std::less<>>;

// Where a message sent by dead-lettering (TopicOptions::dead_letter_topic) came from.
struct MessageOrigin {
  std::string topic;
  std::uint64_t id = 0;  // its id in that topic

  bool operator==(const MessageOrigin&) const = default;
};

// An acknowledged message kept in the topic's archive.
struct ArchivedMessage {
  std::uint64_t id = 0;
  std::optional<std::string> key;
  std::string payload;
  Attributes attributes;
  Clock::time_point enqueued_at;
  Clock::time_point acked_at;  // the latest acknowledgement by any group
};

struct SendOptions {
  // Optional message key, up to 255 bytes. Messages with the same key are delivered one at a
  // time in the order their sends committed: the next is claimable only once the one before was
  // acknowledged or dead-lettered (as SQS FIFO message groups). Different keys go in parallel.
  std::optional<std::string> key;
  // The message becomes claimable this long after the send commits (server time).
  Micros delay{0};
  // Optional deduplication key, 1 to 255 bytes, unique per topic for the topic's dedup window
  // (default 5 minutes) from the send that first used it, acknowledged or not: a send with a key
  // already in its window inserts nothing and returns the first message's id. Two producers
  // racing with the same key get the same id (the second waits for the first to commit).
  std::optional<std::string> dedup_key;
  // Stored with the message and handed to its receivers (AttributeValue).
  Attributes attributes;
  // On a fair topic (TopicOptions::fair), 1 to 255 bytes naming whose message it is: tenants are
  // served in turn, without the key's one-at-a-time order. Not with a key.
  std::optional<std::string> tenant;
};

struct OutgoingMessage {
  std::string payload;
  std::optional<std::string> key;
  Micros delay{0};
  std::optional<std::string> dedup_key;  // as SendOptions::dedup_key; also within one batch
  Attributes attributes;
  std::optional<std::string> tenant;  // as SendOptions::tenant
};

struct ReceiveOptions {
  // Lease up to this many messages in one claim (1..10000).
  int max_messages = 1;
  // Lease length; default: the topic's.
  std::optional<Micros> lease;
  // When nothing is claimable, wait up to this long (at most 1 hour) for a message. Waiting costs
  // the server about one statement per second per waiting process, whatever the number of
  // waiting threads; a committed send wakes a waiting consumer at once (docs/library.md, "Long polling").
  Micros wait{0};
  // The consumer group to claim for; empty: "default".
  std::string group;
  // Claim only from these partitions (0-based); empty: all, starting from a different one each
  // time so that every partition is served.
  std::vector<int> partitions;
};

// A leased message. The receipt (id and lease token) is what ack, nack and extend take.
struct Message {
  std::uint64_t id = 0;
  std::string receipt;
  int attempt = 0;  // 1 on first delivery
  std::optional<std::string> key;
  std::string payload;
  Attributes attributes;
  Clock::time_point enqueued_at;
  Clock::time_point lease_expires_at;
  // When it was first received (by any consumer of its group): this delivery's time when
  // attempt is 1.
  Clock::time_point first_received_at;
  // Set when dead-lettering from another topic sent it (TopicOptions::dead_letter_topic).
  std::optional<MessageOrigin> dead_lettered_from;
  // Its sender's SendOptions::tenant (a fair topic's; not kept by dead-lettering).
  std::optional<std::string> tenant;
};

// The outcome of ack, nack and extend. Expected outcomes are values, not exceptions.
enum class Settle {
  kOk,
  kLeaseLost,  // the message was leased again to another consumer: this receipt is stale
  kNotFound,   // no such message any more (acknowledged, dead-lettered, or never existed)
};

struct TopicStats {
  std::string topic;
  std::string group;
  std::uint64_t ready = 0;              // claimable now (new, retried, or with an expired lease)
  std::uint64_t in_flight = 0;          // leased to a consumer whose lease has not expired
  std::uint64_t delayed = 0;            // not yet claimable: a delayed send or a nack with delay
  std::uint64_t waiting_on_key = 0;     // behind an earlier message with the same key
  std::uint64_t dead = 0;               // in the dead-letter table
  double oldest_ready_age_seconds = 0;  // age of the oldest ready message; 0 when none
  // The group's lag: age of its oldest unacknowledged message (ready, in flight, delayed or
  // waiting on its key); 0 when none.
  double lag_seconds = 0;
  // Ids the group's partitions have handed out so far (InnoDB's counters): one per message sent
  // to the topic, also for sends that rolled back, and a group created later starts from the
  // topic's counter. Not a count of messages; its growth over time is the rate of sends.
  std::uint64_t ids_taken = 0;
  // Whether the counts and ages are estimates: stats with `exact_up_to` met a table with more
  // rows than that (Client::stats).
  bool estimated = false;
};

// A total that every client of the database adds to (ClientOptions::record_metrics): a counter,
// or a histogram of durations in seconds. Client::recorded_metrics.
struct RecordedMetric {
  std::string topic;
  std::string group;  // empty for a topic's sends
  // Counters: "sent", "received", "acked", "nacked", "lease_expired", "dead_lettered".
  // Histograms: "send_seconds" (Client::send and send_batch calls), "claim_seconds" (receive
  // calls that got messages, without their wait), "end_to_end_seconds" (from a send's commit to
  // its message's acknowledgement).
  std::string name;
  double value = 0;  // a counter's total; a histogram's number of observations
  double sum = 0;    // a histogram's sum of observations
  // A histogram's cumulative counts: observations up to each bound (kMetricBuckets), then all.
  std::vector<std::uint64_t> buckets;
};

// Client::metric_summary: the recorded totals of many topics at once, grouped by the database.
struct MetricSummary {
  // Every topic with totals, by name: its counters (sent, received, ...) added up over its groups.
  std::vector<std::pair<std::string, double>> counters_by_topic;
  // One per metric name, added up over every topic and group (topic and group empty).
  std::vector<RecordedMetric> sums;
};

// The upper bounds, in seconds, of RecordedMetric's histogram buckets.
inline constexpr double kMetricBuckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1,     2.5,  5,     10,
                                            30,     60,    300,    1800,  3600};

// The histogram bucket a duration of `seconds` falls in: the first bound it does not exceed, or
// std::size(kMetricBuckets) above them all.
inline std::size_t metric_bucket(double seconds) {
  std::size_t b = 0;
  while (b < std::size(kMetricBuckets) && seconds > kMetricBuckets[b]) ++b;
  return b;
}

struct InFlightMessage {
  std::uint64_t id = 0;
  std::string owner;  // the consumer_name of the client holding the lease
  int attempt = 0;
  // When peers may take it: the end of its lease plus the topic's retry delay for its attempt.
  Clock::time_point lease_expires_at;
};

struct DeadLetter {
  std::uint64_t id = 0;
  std::optional<std::string> key;
  std::string payload;       // its first payload_bytes only, when Client::dead_letters was asked so
  std::size_t payload_size = 0;  // the whole payload's bytes
  Attributes attributes;
  int attempts = 0;
  std::string last_owner;
  Clock::time_point enqueued_at;
  Clock::time_point died_at;
};

// --- Exactly-once across databases (Client::process_xa; docs/library.md, "Exactly-once across databases")

// The application's other database, which Client::process_xa enlists with XA: a MariaDB
// (10.5 or later) or MySQL (8.0 or later) server that is not a Galera node (Galera refuses XA).
struct XaResource {
  // [a-z][a-z0-9_]{0,47}. Recorded with each batch's decision in the queue's database, so that
  // recovery finds the batches of this resource: keep it stable, one name per database.
  std::string name;
  // mysql://user:password@host:port/database[?socket=PATH&...] as ClientOptions::dsn (a
  // password-file=PATH or password-env=NAME keeps the password out of the DSN).
  std::string dsn;
};

// What one recovery pass did (Client::recover_xa, txmq xa recover).
struct XaRecovery {
  std::size_t committed = 0;    // branches committed: their batch's decision was "commit"
  std::size_t rolled_back = 0;  // branches rolled back: their batch never committed
  std::size_t purged = 0;       // decision records deleted: both sides were done
  std::size_t live = 0;         // branches left to their consumer, which is still at work
};

// One batch in doubt, or one decision record left (Client::xa_status, txmq xa status).
struct XaBranchStatus {
  std::uint64_t token = 0;     // the batch, as its xid and its decision record name it
  bool prepared = false;       // the branch is prepared in the resource (listed by XA RECOVER)
  std::string decision;        // "commit", "abort", or "" when the queue's database has none
  std::uint64_t owner_id = 0;  // the consumer (txmq_consumers.id) that ran the batch
  std::string topic;           // from the decision record (empty without one)
  std::string group;
  std::uint64_t first_id = 0;  // the batch's lowest message id, and its size
  std::uint64_t messages = 0;
  std::optional<Clock::time_point> decided_at;  // when the decision record was written
  // What recovery will do: "commit", "rollback", "fence" (no decision: recovery decides
  // "abort" unless the consumer is still at work), "purge" (both sides done).
  std::string action;
};

// Splits a receipt into its message id and lease token. Throws kInvalidArgument when malformed.
// Receipts of group "default" read ID.TOKEN; others ID.TOKEN.GROUP_NUMBER.
struct Receipt {
  std::uint64_t id = 0;
  std::uint64_t token = 0;
  unsigned group = 0;  // the number of the group that received it
  static Receipt parse(std::string_view text);
  std::string str() const;
};

}  // namespace txmq
