#pragma once

// SQS queues over txmq topics. The server keeps its own catalog table, txmq_sqs_queues: one row
// per SQS queue name (case-sensitive, [A-Za-z0-9_-]{1,80}, ".fifo" for FIFO queues) with the
// topic that holds its messages, the SQS attributes as they were set, and its tags. A queue's
// topic name is derived from its SQS name alone ("sqs_" + a lower-cased form + "_" + 12 hex
// digits of its SHA-256), so that servers creating the same queue at once agree on it.
//
// A consumer-group queue (CreateQueue with TxmqSourceQueue) reads a consumer group of another
// queue's topic: every message sent to the source queue reaches the source queue and each of its
// group queues, each receiving and deleting on its own (the fan-out SNS gives SQS queues). Such a
// queue shares its source's topic; its row names the group.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/auth/regions.h"
#include "txmq/client.h"

namespace txmq::server {

// txmq's own queue attributes, beyond SQS's (docs/sqs.md, "Consumer groups as queues").
inline constexpr std::string_view kSourceQueueAttribute = "TxmqSourceQueue";
inline constexpr std::string_view kConsumerGroupAttribute = "TxmqConsumerGroup";
inline constexpr std::string_view kGroupStartAttribute = "TxmqGroupStart";
// A queue whose topic is sharded over servers recorded with `txmq server add` (docs/shards.md):
// their names, comma-separated, and the topic's partition count (default: one per server).
// Given at creation; they cannot change.
inline constexpr std::string_view kServersAttribute = "TxmqServers";
inline constexpr std::string_view kPartitionsAttribute = "TxmqPartitions";
// Refuses a tag key that is empty or over SQS's 128 characters (TagQueue, UntagQueue,
// CreateQueue's tags): InvalidParameterValue with SQS's text.
void check_tag_key(std::string_view key);

struct QueueInfo {
  std::string name;   // the SQS name
  std::string topic;  // the txmq topic
  // The consumer group this queue receives for: empty ("default") for a queue of its own, the
  // group's name for a consumer-group queue, whose source_queue names the queue it reads.
  std::string group;
  std::optional<std::string> source_queue;
  bool fifo = false;
  bool fair = false;  // its topic is fair: MessageGroupId names a tenant (standard queues)
  // The settable attributes as set (SQS's names, string values), without defaults.
  std::map<std::string, std::string> attributes;
  std::map<std::string, std::string> tags;
  std::int64_t created_at = 0;   // epoch seconds
  std::int64_t modified_at = 0;  // epoch seconds

  // Settings read from the attributes, with SQS's defaults.
  std::int64_t delay_seconds = 0;
  std::int64_t maximum_message_size = 1 << 20;
  std::int64_t retention_seconds = 345600;
  std::int64_t wait_seconds = 0;
  std::int64_t visibility_timeout = 30;
  bool content_based_deduplication = false;
  bool deduplication_per_group = false;  // DeduplicationScope=messageGroup
  std::optional<std::string> dead_letter_queue;  // the target's SQS name
  int max_receive_count = 0;
};

// Every attribute of GetQueueAttributes "All" that is not a counter: the settable ones with
// their defaults, then the read-only ones the catalog knows. A consumer-group queue shows its
// source's topic settings (give `source`) beside its own.
std::map<std::string, std::string> effective_attributes(const QueueInfo& queue,
                                                        std::string_view region,
                                                        std::string_view account,
                                                        const QueueInfo* source = nullptr);
std::string queue_arn(std::string_view region, std::string_view account, std::string_view name);
struct QueueArn {
  std::string region, account, name;
};
// "arn:aws:sqs:REGION:ACCOUNT:NAME" read; nullopt for any other text.
std::optional<QueueArn> parse_queue_arn(std::string_view arn);
// The queue name of an ARN of one of these regions and this account; nullopt for another one.
std::optional<std::string> name_of_arn(std::string_view arn, const Regions& regions,
                                       std::string_view account);

// The topic settings a queue's attributes give.
TopicOptions topic_options(const QueueInfo& queue, const std::string& dead_letter_topic);

class QueueCatalog {
 public:
  // Creates txmq_sqs_queues when missing (a user without CREATE must find it made).
  // `tables`: how CreateQueue stores a queue's topic (ServiceOptions::tables_at_first_use,
  // shared_storage).
  QueueCatalog(Client& client, Regions regions, std::string account,
               TableCreation tables = TableCreation::kNow);

  // A ReceiptHandle: the library's receipt with a MAC that binds it to the queue's name, so
  // that a forged handle, or one of another queue, is told apart from a stale one.
  std::string seal(std::string_view queue, std::string_view receipt) const;
  // The library's receipt of a handle seal() made for `queue`; nullopt for any other text.
  std::optional<std::string> unseal(std::string_view queue, std::string_view handle) const;

  // SQS's policy quota (bytes of the Policy attribute), and KMS's bound on a key id.
  static constexpr std::size_t kMaxPolicyBytes = 8192;
  static constexpr std::size_t kMaxKmsKeyIdLength = 2048;

  // Validates an SQS queue name (throws SqsError InvalidParameterValue).
  static void check_name(std::string_view name);
  static bool valid_name(std::string_view name);
  static std::string topic_of(std::string_view name);

  // The queue, from a cache of about a second (bounded); null when it does not exist or the
  // name is not a valid queue name.
  std::shared_ptr<const QueueInfo> find(std::string_view name);
  // As find, from the cache only (never the database): null when not cached or stale.
  std::shared_ptr<const QueueInfo> cached(std::string_view name);
  // As find, but throws QueueDoesNotExist.
  std::shared_ptr<const QueueInfo> get(std::string_view name);

  // CreateQueue: returns the queue; an existing one must have equal values for the attributes
  // given (else QueueAlreadyExists). Safe when servers create the same queue at once.
  std::shared_ptr<const QueueInfo> create(std::string_view name,
                                          const std::map<std::string, std::string>& attributes,
                                          const std::map<std::string, std::string>& tags);
  // SetQueueAttributes. Like every change below, it is made to the stored attributes under
  // the queue row's lock, so changes made at once through several servers are all kept.
  void set_attributes(std::string_view name, const std::map<std::string, std::string>& attributes);
  // Sets one attribute to what `edit` makes of its stored value ("" when unset; an empty
  // Policy removes it). `edit` may throw to refuse: nothing changes then.
  void edit_attribute(std::string_view name, std::string_view key,
                      const std::function<std::string(const std::string& stored)>& edit);
  // Makes a standard queue's topic fair (TopicOptions::fair), as its first MessageGroupId does
  // (docs/sqs.md, "Fair queues"); returns the queue as it is then.
  std::shared_ptr<const QueueInfo> make_fair(std::string_view name);
  void set_tags(std::string_view name, const std::map<std::string, std::string>& add,
                const std::vector<std::string>& remove);
  // Deletes a queue; a consumer-group queue's group goes with it. Refused for a queue that is a
  // dead-letter target or the source of consumer-group queues: delete those first.
  void remove(std::string_view name);
  // Names in order, from after `after`, with the prefix; at most `limit`.
  std::vector<std::string> list(std::string_view prefix, std::string_view after, std::size_t limit);
  // The SQS name of a topic's queue (for DeadLetterQueueSourceArn); nullopt when none.
  std::optional<std::string> name_of_topic(std::string_view topic);
  // Queues whose RedrivePolicy names `target`.
  std::vector<std::string> dead_letter_sources(std::string_view target);
  // The consumer-group queues that read `topic`.
  std::vector<std::string> group_queues(std::string_view topic);

 private:
  std::shared_ptr<const QueueInfo> load(std::string_view name);
  // Checks and normalises attributes for a queue (fifo or not; creating: FifoQueue allowed).
  std::map<std::string, std::string> checked(const std::map<std::string, std::string>& attributes,
                                             bool fifo, bool creating, std::string_view name,
                                             bool group_queue);
  // CreateQueue of a consumer-group queue (attributes hold TxmqSourceQueue).
  std::shared_ptr<const QueueInfo> create_group_queue(
      std::string_view name, std::map<std::string, std::string> attributes,
      const std::map<std::string, std::string>& tags);
  // QueueAlreadyExists unless `existing` has the values `wanted` gives.
  // TxmqServers and TxmqPartitions: consistent, and every server recorded.
  void check_spread(const std::map<std::string, std::string>& wanted);
  void check_same(const QueueInfo& existing, const std::map<std::string, std::string>& wanted);
  void make_topic(const QueueInfo& queue);
  // Stores what `change` makes of the queue's stored attributes, read under the row's lock.
  void change_attributes(const QueueInfo& queue,
                         const std::function<void(std::map<std::string, std::string>&)>& change);
  void forget(std::string_view name);
  // `table` (a constant name) made with `create` unless it exists.
  void make_table_if_missing(std::string_view table, std::string_view create);
  std::string shared_receipt_key();
  std::string receipt_mac(std::string_view queue, std::string_view receipt) const;
  static constexpr char kSealSeparator = ':';

  Client& client_;
  const Regions regions_;
  const std::string account_;
  const TableCreation tables_;
  std::string receipt_key_;  // set by the constructor, then read-only
  std::mutex mutex_;
  struct Cached {
    std::shared_ptr<const QueueInfo> queue;  // null: known not to exist
    std::chrono::steady_clock::time_point loaded;
  };
  std::map<std::string, Cached, std::less<>> cache_;
  std::map<std::string, std::string, std::less<>> names_of_topics_;
};

// Parses stored attributes into a QueueInfo's settings.
void read_settings(QueueInfo& queue);

}  // namespace txmq::server
