#include "server/sqs/queues.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "server/auth/crypto.h"
#include "server/sqs/wire.h"

namespace txmq::server {
namespace {

using json = nlohmann::json;

constexpr auto kCacheFor = std::chrono::seconds(1);
constexpr std::size_t kMaxCached = 10000;
// Beyond SQS's caps, where txmq can do more (docs/sqs.md, "What differs from SQS").
constexpr std::int64_t kMaxDelaySeconds = 366LL * 24 * 3600;
constexpr std::int64_t kMaxRetentionSeconds = 3660LL * 24 * 3600;
// Room in a topic's max_payload_bytes for the system attributes the server stores with a
// message (its dedup id, trace header); SQS's own size rule is checked by the server.
constexpr std::size_t kSystemAttributeRoom = 2048;

std::optional<std::int64_t> integer(std::string_view text) {
  std::int64_t v = 0;
  if (text.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

std::int64_t int_attribute(const std::map<std::string, std::string>& a, const std::string& name,
                           std::int64_t fallback) {
  auto it = a.find(name);
  if (it == a.end()) return fallback;
  return integer(it->second).value_or(fallback);
}

[[noreturn]] void bad_value(std::string_view name, std::string_view reason) {
  fail("InvalidAttributeValue",
       fmt::format("Invalid value for the parameter {}. Reason: {}", name, reason));
}

constexpr int kMaxSpreadPartitions = 64;  // txmq's partitions per topic

// A txmq name (groups, servers): [a-z][a-z0-9_]{0,47}, as the library checks it.
bool is_txmq_name(std::string_view n) {
  return !n.empty() && n.size() <= 48 && n[0] >= 'a' && n[0] <= 'z' &&
         std::all_of(n.begin(), n.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
         });
}

std::vector<std::string> split_servers(std::string_view list) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= list.size()) {
    const std::size_t comma = std::min(list.find(',', from), list.size());
    out.emplace_back(list.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

// TxmqServers: 1 to 64 distinct server names as `txmq server add` takes them.
void check_server_names(std::string_view list) {
  const std::vector<std::string> names = split_servers(list);
  if (names.size() > static_cast<std::size_t>(kMaxSpreadPartitions)) {
    bad_value(kServersAttribute, "at most 64 servers");
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (!is_txmq_name(n)) {
      bad_value(kServersAttribute,
                "comma-separated server names (txmq server list): 1 to 48 of a-z, 0-9 and _, "
                "starting with a letter");
    }
    if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), n) !=
        names.begin() + static_cast<std::ptrdiff_t>(i)) {
      bad_value(kServersAttribute, "a server is named twice");
    }
  }
}

void check_range(std::string_view name, std::string_view value, std::int64_t lo, std::int64_t hi) {
  auto v = integer(value);
  if (!v || *v < lo || *v > hi) {
    bad_value(name, fmt::format("must be an integer from {} to {}", lo, hi));
  }
}

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string to_json(const std::map<std::string, std::string>& m) { return json(m).dump(); }

void check_tags(const std::map<std::string, std::string>& tags) {
  for (const auto& [k, v] : tags) {
    check_tag_key(k);
    if (v.size() > 256) {
      fail("InvalidParameterValue", "Tag values must be between 0 and 256 characters in length.");
    }
  }
}

std::map<std::string, std::string> from_json(const std::string& text) {
  return json::parse(text).get<std::map<std::string, std::string>>();
}

}  // namespace

std::string queue_arn(std::string_view region, std::string_view account, std::string_view name) {
  return fmt::format("arn:aws:sqs:{}:{}:{}", region, account, name);
}

std::optional<QueueArn> parse_queue_arn(std::string_view arn) {
  constexpr std::string_view kPrefix = "arn:aws:sqs:";
  if (!arn.starts_with(kPrefix)) return std::nullopt;
  arn.remove_prefix(kPrefix.size());
  const std::size_t region_end = arn.find(':');
  if (region_end == std::string_view::npos) return std::nullopt;
  const std::size_t account_end = arn.find(':', region_end + 1);
  if (account_end == std::string_view::npos) return std::nullopt;
  return QueueArn{std::string(arn.substr(0, region_end)),
                  std::string(arn.substr(region_end + 1, account_end - region_end - 1)),
                  std::string(arn.substr(account_end + 1))};
}

std::optional<std::string> name_of_arn(std::string_view arn, const Regions& regions,
                                       std::string_view account) {
  auto parts = parse_queue_arn(arn);
  if (!parts || parts->account != account || !regions.allows(parts->region)) return std::nullopt;
  return std::move(parts->name);
}

void read_settings(QueueInfo& q) {
  const auto& a = q.attributes;
  q.delay_seconds = int_attribute(a, "DelaySeconds", 0);
  q.maximum_message_size = int_attribute(a, "MaximumMessageSize", 1 << 20);
  q.retention_seconds = int_attribute(a, "MessageRetentionPeriod", 345600);
  q.wait_seconds = int_attribute(a, "ReceiveMessageWaitTimeSeconds", 0);
  q.visibility_timeout = int_attribute(a, "VisibilityTimeout", 30);
  auto cbd = a.find("ContentBasedDeduplication");
  q.content_based_deduplication = cbd != a.end() && cbd->second == "true";
  auto scope = a.find("DeduplicationScope");
  q.deduplication_per_group = scope != a.end() && scope->second == "messageGroup";
  q.dead_letter_queue.reset();
  q.max_receive_count = 0;
  q.source_queue.reset();
  if (auto it = a.find(std::string(kSourceQueueAttribute)); it != a.end()) q.source_queue = it->second;
  if (auto rp = a.find("RedrivePolicy"); rp != a.end() && !rp->second.empty()) {
    const json p = json::parse(rp->second);
    const std::string arn = p.at("deadLetterTargetArn").get<std::string>();
    q.dead_letter_queue = arn.substr(arn.rfind(':') + 1);
    const json& count = p.at("maxReceiveCount");
    q.max_receive_count = count.is_string() ? static_cast<int>(*integer(count.get<std::string>()))
                                            : count.get<int>();
  }
}

namespace {

// A server of several regions keeps one set of queues and answers each request in its own
// region: the queue ARNs inside RedrivePolicy and RedriveAllowPolicy are shown in `region`
// whatever region they were set in. Text without such an ARN is left as it was stored.
void answer_arns_in(std::string_view region, std::string_view account,
                    std::map<std::string, std::string>& attributes) {
  const auto moved = [&](json& arn) {
    if (!arn.is_string()) return false;
    auto parts = parse_queue_arn(arn.get<std::string>());
    if (!parts || parts->account != account || parts->region == region) return false;
    arn = queue_arn(region, account, parts->name);
    return true;
  };
  if (auto it = attributes.find("RedrivePolicy"); it != attributes.end() && !it->second.empty()) {
    json p = json::parse(it->second, nullptr, false);
    if (p.is_object() && p.contains("deadLetterTargetArn") && moved(p["deadLetterTargetArn"])) {
      it->second = p.dump();
    }
  }
  if (auto it = attributes.find("RedriveAllowPolicy"); it != attributes.end()) {
    json p = json::parse(it->second, nullptr, false);
    if (p.is_object() && p.contains("sourceQueueArns") && p["sourceQueueArns"].is_array()) {
      bool any = false;
      for (json& arn : p["sourceQueueArns"]) any = moved(arn) || any;
      if (any) it->second = p.dump();
    }
  }
}

// The attributes a consumer-group queue has of its own; the others are its source's topic's.
bool own_attribute_of_group_queue(std::string_view name) {
  return name == "VisibilityTimeout" || name == "ReceiveMessageWaitTimeSeconds" ||
         name == "Policy" || name == "KmsMasterKeyId" || name == "KmsDataKeyReusePeriodSeconds" ||
         name == "SqsManagedSseEnabled" || name == kSourceQueueAttribute ||
         name == kConsumerGroupAttribute || name == kGroupStartAttribute;
}

}  // namespace

std::map<std::string, std::string> effective_attributes(const QueueInfo& q,
                                                        std::string_view region,
                                                        std::string_view account,
                                                        const QueueInfo* source) {
  if (q.source_queue && source) {
    // The source's topic settings (its RedrivePolicy included: dead letters of every group go
    // to the same target), then what the group queue has of its own.
    std::map<std::string, std::string> out = effective_attributes(*source, region, account);
    out.erase("RedriveAllowPolicy");  // a group queue is never a dead-letter target
    std::erase_if(out, [](const auto& kv) { return own_attribute_of_group_queue(kv.first); });
    QueueInfo own = q;
    std::erase_if(own.attributes,
                  [](const auto& kv) { return !own_attribute_of_group_queue(kv.first); });
    for (auto& [k, v] : effective_attributes(own, region, account)) {
      if (own_attribute_of_group_queue(k) || k == "QueueArn" || k == "CreatedTimestamp" ||
          k == "LastModifiedTimestamp") {
        out[k] = std::move(v);
      }
    }
    return out;
  }
  std::map<std::string, std::string> out = {
      {"DelaySeconds", "0"},
      {"MaximumMessageSize", std::to_string(1 << 20)},
      {"MessageRetentionPeriod", "345600"},
      {"ReceiveMessageWaitTimeSeconds", "0"},
      {"VisibilityTimeout", "30"},
      {"SqsManagedSseEnabled", "true"},
  };
  if (q.fifo) {
    out["FifoQueue"] = "true";
    out["ContentBasedDeduplication"] = "false";
    out["DeduplicationScope"] = "queue";
    out["FifoThroughputLimit"] = "perQueue";
  }
  for (const auto& [k, v] : q.attributes) out[k] = v;
  answer_arns_in(region, account, out);
  out["QueueArn"] = queue_arn(region, account, q.name);
  out["CreatedTimestamp"] = std::to_string(q.created_at);
  out["LastModifiedTimestamp"] = std::to_string(q.modified_at);
  return out;
}

TopicOptions topic_options(const QueueInfo& q, const std::string& dead_letter_topic) {
  TopicOptions o;
  if (auto it = q.attributes.find(std::string(kServersAttribute)); it != q.attributes.end()) {
    o.servers = split_servers(it->second);
    o.partitions = static_cast<int>(int_attribute(
        q.attributes, std::string(kPartitionsAttribute), static_cast<int>(o.servers.size())));
  }
  // SQS lets a visibility timeout be 0 (visible again at once); a txmq lease is at least 1 ms.
  o.lease = std::max<Micros>(std::chrono::milliseconds(1),
                             std::chrono::seconds(q.visibility_timeout));
  o.max_attempts = q.dead_letter_queue ? q.max_receive_count : 0;
  o.max_payload_bytes = static_cast<std::size_t>(q.maximum_message_size) + kSystemAttributeRoom;
  o.dedup_window = std::chrono::minutes(5);
  // SQS has no backoff: a message is visible again when its visibility timeout ends.
  o.retry.initial = Micros{0};
  o.retry.multiplier = 1.0;
  o.retry.max = Micros{0};
  o.retry.jitter = 0;
  o.dead_letter_topic = dead_letter_topic;
  o.retention = std::chrono::seconds(q.retention_seconds);
  return o;
}

QueueCatalog::QueueCatalog(Client& client, Regions regions, std::string account,
                           TableCreation tables)
    : client_(client),
      regions_(std::move(regions)),
      account_(std::move(account)),
      tables_(tables) {
  make_table_if_missing("txmq_sqs_queues",
                        "CREATE TABLE IF NOT EXISTS txmq_sqs_queues ("
                        " name VARBINARY(80) NOT NULL PRIMARY KEY,"
                        " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
                        " consumer_group VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT "
                        "NULL DEFAULT '',"
                        " fifo TINYINT UNSIGNED NOT NULL,"
                        " attributes MEDIUMTEXT NOT NULL,"
                        " tags MEDIUMTEXT NOT NULL,"
                        " created_at BIGINT NOT NULL,"
                        " modified_at BIGINT NOT NULL,"
                        " UNIQUE KEY topic (topic, consumer_group)"
                        ") ENGINE=InnoDB");
  // A catalog made before consumer-group queues gains their column (servers starting together:
  // the one that loses the race finds the column there).
  for (int round = 0;; ++round) {
    try {
      client_.transact([](Transaction& t) {
        t.execute("SELECT consumer_group FROM txmq_sqs_queues LIMIT 0");
      });
      break;
    } catch (const Error& e) {
      if (e.server_errno() != 1054 || round > 0) throw;  // ER_BAD_FIELD_ERROR: add it
    }
    try {
      client_.transact([](Transaction& t) {
        t.execute(
            "ALTER TABLE txmq_sqs_queues ADD COLUMN consumer_group VARCHAR(48) CHARACTER SET "
            "ascii COLLATE ascii_bin NOT NULL DEFAULT '' AFTER topic, DROP INDEX topic, ADD "
            "UNIQUE KEY topic (topic, consumer_group)");
      });
    } catch (const Error& e) {
      if (e.server_errno() != 1060) throw;  // ER_DUP_FIELDNAME: another server added it
    }
  }
  receipt_key_ = shared_receipt_key();
}

// Looked for first, so that a user without CREATE finds it made (by a server that had it).
void QueueCatalog::make_table_if_missing(std::string_view table, std::string_view create) {
  try {
    client_.transact([&](Transaction& t) {
      t.execute(fmt::format("SELECT 1 FROM {} LIMIT 0", table));
    });
  } catch (const Error& e) {
    if (e.server_errno() != 1146) throw;  // ER_NO_SUCH_TABLE: make it
    client_.transact([&](Transaction& t) { t.execute(create); });
  }
}

// Receipt handles carry a MAC under a key that every txmq serve of the database shares (a
// client may delete through another server than it received from), made once by the first.
std::string QueueCatalog::shared_receipt_key() {
  std::string key;
  auto read = [&] {
    client_.transact([&](Transaction& t) {
      SqlResult r = t.execute("SELECT secret FROM txmq_sqs_secrets WHERE name = 'receipts'");
      key = r.rows.empty() ? std::string() : r.rows[0].as_string(0);
    });
  };
  make_table_if_missing("txmq_sqs_secrets",
                        "CREATE TABLE IF NOT EXISTS txmq_sqs_secrets ("
                        " name VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY "
                        "KEY,"
                        " secret VARBINARY(64) NOT NULL) ENGINE=InnoDB");
  read();
  if (key.size() < 32) {
    client_.transact([](Transaction& t) {
      t.execute("INSERT IGNORE INTO txmq_sqs_secrets (name, secret) VALUES ('receipts', ?)",
                {random_bytes(32)});
    });
    read();  // another server's, when it made one first
  }
  if (key.size() < 32) throw std::runtime_error("txmq_sqs_secrets holds no receipt key");
  return key;
}

std::string QueueCatalog::seal(std::string_view queue, std::string_view receipt) const {
  return fmt::format("{}{}{}", receipt, kSealSeparator, receipt_mac(queue, receipt));
}

std::optional<std::string> QueueCatalog::unseal(std::string_view queue,
                                                std::string_view handle) const {
  const std::size_t at = handle.rfind(kSealSeparator);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view receipt = handle.substr(0, at);
  if (!constant_time_equal(handle.substr(at + 1), receipt_mac(queue, receipt))) {
    return std::nullopt;
  }
  return std::string(receipt);
}

std::string QueueCatalog::receipt_mac(std::string_view queue, std::string_view receipt) const {
  // 128 bits: enough that a forged handle is never guessed, short enough for a handle.
  return hmac_sha256_hex(receipt_key_, fmt::format("{}\n{}", queue, receipt)).substr(0, 32);
}

bool QueueCatalog::valid_name(std::string_view name) {
  std::string_view base = name;
  if (base.ends_with(".fifo")) base.remove_suffix(5);
  return !name.empty() && name.size() <= 80 && !base.empty() &&
         std::all_of(base.begin(), base.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_';
         });
}

void QueueCatalog::check_name(std::string_view name) {
  if (!valid_name(name)) {
    fail("InvalidParameterValue",
         "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length");
  }
}

std::string QueueCatalog::topic_of(std::string_view name) {
  std::string readable;
  for (char c : name) {
    if (readable.size() == 30) break;
    if (c >= 'A' && c <= 'Z') readable += static_cast<char>(c - 'A' + 'a');
    else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) readable += c;
    else readable += '_';
  }
  return fmt::format("sqs_{}_{}", readable, sha256_hex(name).substr(0, 12));
}

std::shared_ptr<const QueueInfo> QueueCatalog::load(std::string_view name) {
  std::shared_ptr<QueueInfo> q;
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "SELECT topic, fifo, attributes, tags, created_at, modified_at, consumer_group FROM "
        "txmq_sqs_queues WHERE name = ?",
        {name});
    q.reset();
    if (r.rows.empty()) return;
    q = std::make_shared<QueueInfo>();
    q->name = std::string(name);
    q->topic = r.rows[0].as_string(0);
    q->fifo = r.rows[0].as_int(1) != 0;
    q->attributes = from_json(r.rows[0].as_string(2));
    q->tags = from_json(r.rows[0].as_string(3));
    q->created_at = r.rows[0].as_int(4);
    q->modified_at = r.rows[0].as_int(5);
    q->group = r.rows[0].as_string(6);
  });
  if (q) read_settings(*q);
  if (q && !q->fifo) {
    try {
      q->fair = client_.topic(q->topic).options.fair;
    } catch (const Error& e) {
      if (e.code() != Errc::kNotFound) throw;  // a queue being made or removed
    }
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  // Entries live a second: past the bound, the stale ones go, so that a flood of lookups of
  // names that do not exist cannot grow the cache beyond about a second's worth of them.
  if (cache_.size() >= kMaxCached) {
    std::erase_if(cache_, [&](const auto& entry) { return now - entry.second.loaded >= kCacheFor; });
    if (cache_.size() >= kMaxCached) cache_.clear();
  }
  cache_[std::string(name)] = {q, now};
  return q;
}

std::shared_ptr<const QueueInfo> QueueCatalog::cached(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = cache_.find(name);
  if (it != cache_.end() && std::chrono::steady_clock::now() - it->second.loaded < kCacheFor) {
    return it->second.queue;
  }
  return nullptr;
}

std::shared_ptr<const QueueInfo> QueueCatalog::find(std::string_view name) {
  if (!valid_name(name)) return nullptr;  // never stored: nothing to look up or remember
  if (auto q = cached(name)) return q;
  return load(name);
}

std::shared_ptr<const QueueInfo> QueueCatalog::get(std::string_view name) {
  auto q = find(name);
  if (!q) fail("QueueDoesNotExist", "The specified queue does not exist.");
  return q;
}

void QueueCatalog::forget(std::string_view name) {
  std::lock_guard lock(mutex_);
  if (auto it = cache_.find(name); it != cache_.end()) cache_.erase(it);
}

std::map<std::string, std::string> QueueCatalog::checked(
    const std::map<std::string, std::string>& attributes, bool fifo, bool creating,
    std::string_view name, bool group_queue) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : attributes) {
    if (group_queue && key != "FifoQueue" && !own_attribute_of_group_queue(key)) {
      fail("InvalidAttributeName",
           fmt::format("Attribute {} of a consumer-group queue is its source queue's topic "
                       "setting: set it on the source queue.",
                       key));
    }
    if (key == kSourceQueueAttribute || key == kConsumerGroupAttribute ||
        key == kGroupStartAttribute) {
      if (!creating) {
        fail("InvalidAttributeName",
             fmt::format("Attribute {} is given when the queue is created and cannot change.",
                         key));
      }
      if (!group_queue) {
        fail("InvalidAttributeName",
             fmt::format("Attribute {} goes with {}: a consumer-group queue names its source "
                         "queue.",
                         key, kSourceQueueAttribute));
      }
      if (key == kSourceQueueAttribute) {
        // A name, or the ARN of a queue of this account and region.
        std::string source = value;
        if (value.starts_with("arn:")) {
          auto n = name_of_arn(value, regions_, account_);
          if (!n) bad_value(key, "the source queue must be a queue of this account and region");
          source = *n;
        }
        out[key] = source;
        continue;
      }
      if (key == kConsumerGroupAttribute) {
        if (!is_txmq_name(value)) {
          bad_value(key, "a txmq group name: 1 to 48 of a-z, 0-9 and _, starting with a letter");
        }
        if (value == "default") {
          bad_value(key, "group default is the source queue's own: name another group");
        }
      }
      if (key == kGroupStartAttribute && value != "now" && value != "earliest") {
        bad_value(key, "must be now (messages sent from now on) or earliest (also the messages "
                       "the topic retains)");
      }
    } else if (key == kServersAttribute || key == kPartitionsAttribute) {
      if (!creating) {
        fail("InvalidAttributeName",
             fmt::format("Attribute {} is given when the queue is created and cannot change.",
                         key));
      }
      if (key == kPartitionsAttribute) {
        check_range(key, value, 1, kMaxSpreadPartitions);
      } else {
        check_server_names(value);
      }
    } else if (key == "DelaySeconds") {
      check_range(key, value, 0, kMaxDelaySeconds);
    } else if (key == "MaximumMessageSize") {
      check_range(key, value, 1024, 1 << 20);
    } else if (key == "MessageRetentionPeriod") {
      check_range(key, value, 60, kMaxRetentionSeconds);
    } else if (key == "ReceiveMessageWaitTimeSeconds") {
      check_range(key, value, 0, 20);
    } else if (key == "VisibilityTimeout") {
      check_range(key, value, 0, 43200);
    } else if (key == "KmsDataKeyReusePeriodSeconds") {
      check_range(key, value, 60, 86400);
    } else if (key == "SqsManagedSseEnabled") {
      if (value != "true" && value != "false") bad_value(key, "must be true or false");
    } else if (key == "Policy") {
      // SQS's policy quota; the bound comes before the parse.
      if (value.size() > kMaxPolicyBytes) {
        bad_value(key, fmt::format("The policy is {} bytes, maximum allowed is {}.", value.size(),
                                   kMaxPolicyBytes));
      }
      if (!value.empty() && !json::accept(value)) bad_value(key, "must be a JSON policy document");
    } else if (key == "KmsMasterKeyId") {
      if (value.size() > kMaxKmsKeyIdLength) {
        bad_value(key, fmt::format("must be at most {} characters", kMaxKmsKeyIdLength));
      }
    } else if (key == "FifoQueue") {
      // SQS: a standard queue has no FifoQueue attribute (not even "false"); a FIFO queue's
      // may be set to true again, never changed.
      if (!fifo && (!creating || value != "true")) {
        fail("InvalidAttributeName", "Unknown Attribute FifoQueue.");
      }
      if (!fifo) {
        fail("InvalidParameterValue",
             "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
             "underscores, must end with .fifo suffix and be 1 to 80 in length");
      }
      if (value != "true") bad_value(key, "Modifying queue type is not supported.");
      continue;  // kept as the fifo column
    } else if (key == "ContentBasedDeduplication" || key == "DeduplicationScope" ||
               key == "FifoThroughputLimit") {
      if (!fifo && key == "ContentBasedDeduplication") {
        fail("InvalidAttributeName", fmt::format("Unknown Attribute {}.", key));
      }
      if (!fifo) {
        fail("InvalidAttributeName",
             fmt::format("You can specify the {} only when FifoQueue is set to true.", key));
      }
      if (key == "ContentBasedDeduplication" && value != "true" && value != "false") {
        bad_value(key, "must be true or false");
      }
      if (key == "DeduplicationScope" && value != "queue" && value != "messageGroup") {
        bad_value(key, "must be queue or messageGroup");
      }
      if (key == "FifoThroughputLimit" && value != "perQueue" && value != "perMessageGroupId") {
        bad_value(key, "must be perQueue or perMessageGroupId");
      }
    } else if (key == "RedrivePolicy") {
      if (!value.empty()) {
        json p = json::parse(value, nullptr, false);
        if (!p.is_object() || !p.contains("deadLetterTargetArn") ||
            !p["deadLetterTargetArn"].is_string() || !p.contains("maxReceiveCount")) {
          bad_value(key, "must be a JSON object with deadLetterTargetArn and maxReceiveCount");
        }
        const json& count = p["maxReceiveCount"];
        std::optional<std::int64_t> n =
            count.is_number_integer() ? std::optional(count.get<std::int64_t>())
            : count.is_string()       ? integer(count.get<std::string>())
                                      : std::nullopt;
        if (!n || *n < 1 || *n > 1000) bad_value(key, "maxReceiveCount must be from 1 to 1000");
        auto target = name_of_arn(p["deadLetterTargetArn"].get<std::string>(), regions_, account_);
        if (!target) bad_value(key, "Dead-letter target must be a queue of this account and region");
        auto dlq = find(*target);
        if (!dlq) bad_value(key, "Dead letter target does not exist");
        if (dlq->fifo != fifo) {
          bad_value(key, "Dead-letter queue must be the same type of queue as the source queue");
        }
        if (*target == name) bad_value(key, "A queue cannot be its own dead-letter queue");
        if (dlq->source_queue) {
          bad_value(key, "A consumer-group queue cannot be a dead-letter target: name a queue "
                         "of its own");
        }
        if (auto allow = dlq->attributes.find("RedriveAllowPolicy");
            allow != dlq->attributes.end()) {
          const json a = json::parse(allow->second);
          const std::string permission = a.value("redrivePermission", "allowAll");
          bool allowed = permission == "allowAll";
          if (permission == "byQueue" && a.contains("sourceQueueArns")) {
            for (const auto& arn : a["sourceQueueArns"]) {
              allowed = allowed || (arn.is_string() &&
                                    name_of_arn(arn.get<std::string>(), regions_, account_) == name);
            }
          }
          if (!allowed) bad_value(key, "The dead-letter queue's RedriveAllowPolicy refuses it");
        }
        json normal = {{"deadLetterTargetArn", p["deadLetterTargetArn"]},
                       {"maxReceiveCount", *n}};
        out[key] = normal.dump();
        continue;
      }
    } else if (key == "RedriveAllowPolicy") {
      if (!value.empty()) {
        json p = json::parse(value, nullptr, false);
        const std::string permission =
            p.is_object() && p.contains("redrivePermission") && p["redrivePermission"].is_string()
                ? p["redrivePermission"].get<std::string>()
                : "";
        if (permission != "allowAll" && permission != "denyAll" && permission != "byQueue") {
          bad_value(key, "redrivePermission must be allowAll, denyAll or byQueue");
        }
        if ((permission == "byQueue") != p.contains("sourceQueueArns")) {
          bad_value(key, "sourceQueueArns goes with redrivePermission byQueue, and only with it");
        }
      }
    } else {  // the read-only ones (QueueArn, the counters, ...) included, as SQS answers
      fail("InvalidAttributeName", fmt::format("Unknown Attribute {}.", key));
    }
    out[key] = value;
  }
  // SQS: one kind of server-side encryption at a time; a KMS key turns SSE-SQS off.
  if (auto kms = out.find("KmsMasterKeyId"); kms != out.end() && !kms->second.empty()) {
    if (auto sse = out.find("SqsManagedSseEnabled"); sse != out.end() && sse->second == "true") {
      fail("InvalidAttributeName",
           "You can use one type of server-side encryption (SSE) at one time. You can either "
           "enable KMS SSE or SQS SSE.");
    }
    out["SqsManagedSseEnabled"] = "false";
  }
  // The ARNs of RedrivePolicy and RedriveAllowPolicy are stored in the first region's form,
  // whatever region the request came in (answers show the caller's), so that the same policy
  // set in two regions compares equal.
  answer_arns_in(regions_.primary(), account_, out);
  return out;
}

void QueueCatalog::make_topic(const QueueInfo& q) {
  std::string dlq_topic;
  if (q.dead_letter_queue) {
    auto dlq = find(*q.dead_letter_queue);
    if (!dlq) bad_value("RedrivePolicy", "Dead letter target does not exist");
    dlq_topic = dlq->topic;
  }
  TopicOptions options = topic_options(q, dlq_topic);
  // A standard queue's topic becomes fair with its first MessageGroupId (make_fair), and stays so.
  try {
    // With tables at first use, an empty queue is its catalog rows only (thousands of idle
    // queues would otherwise be thousands of files each).
    client_.create_topic(q.topic, options, tables_);
  } catch (const Error& e) {
    if (e.code() != Errc::kAlreadyExists) throw;
    options.fair = client_.topic(q.topic).options.fair;
    client_.update_topic(q.topic, options);  // a set that was cut short: finish it
  }
}

std::shared_ptr<const QueueInfo> QueueCatalog::make_fair(std::string_view name) {
  auto q = get(name);
  if (q->fifo || q->fair) return q;
  const TopicInfo topic = client_.topic(q->topic);
  TopicOptions options = topic.options;
  if (!options.fair && topic.shared_storage) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("queue {} is in shared storage (txmq serve --queue-storage shared), "
                            "which does not yet take MessageGroupId on a standard queue (fair "
                            "queues)",
                            name));
  }
  if (!options.fair) {
    options.fair = true;
    client_.update_topic(q->topic, options);
  }
  forget(name);
  return get(name);
}

std::shared_ptr<const QueueInfo> QueueCatalog::create(
    std::string_view name, const std::map<std::string, std::string>& attributes,
    const std::map<std::string, std::string>& tags) {
  check_name(name);
  const bool fifo = name.ends_with(".fifo");
  if (fifo && (!attributes.contains("FifoQueue") || attributes.at("FifoQueue") != "true")) {
    fail("InvalidParameterValue",
         "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
         "underscores, must end with .fifo suffix and be 1 to 80 in length");
  }
  if (attributes.contains(std::string(kSourceQueueAttribute))) {
    return create_group_queue(name, attributes, tags);
  }
  const std::map<std::string, std::string> wanted = checked(attributes, fifo, true, name, false);
  check_tags(tags);
  check_spread(wanted);
  QueueInfo fresh;
  fresh.name = std::string(name);
  fresh.topic = topic_of(name);
  fresh.fifo = fifo;
  fresh.attributes = wanted;
  fresh.tags = tags;
  fresh.created_at = fresh.modified_at = now_seconds();
  read_settings(fresh);
  client_.transact([&](Transaction& t) {
    t.execute(
        "INSERT IGNORE INTO txmq_sqs_queues (name, topic, fifo, attributes, tags, created_at, "
        "modified_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        {name, fresh.topic, fifo ? 1 : 0, to_json(wanted), to_json(tags), fresh.created_at,
         fresh.modified_at});
  });
  forget(name);
  auto existing = get(name);
  check_same(*existing, wanted);
  make_topic(*existing);
  return existing;
}

void QueueCatalog::check_spread(const std::map<std::string, std::string>& wanted) {
  auto servers = wanted.find(std::string(kServersAttribute));
  auto partitions = wanted.find(std::string(kPartitionsAttribute));
  if (servers == wanted.end()) {
    if (partitions != wanted.end()) {
      bad_value(kPartitionsAttribute, fmt::format("goes with {}", kServersAttribute));
    }
    return;
  }
  const std::vector<std::string> names = split_servers(servers->second);
  if (partitions != wanted.end() &&
      integer(partitions->second).value_or(0) < static_cast<std::int64_t>(names.size())) {
    bad_value(kPartitionsAttribute, "every server must hold a partition: give at least as "
                                    "many partitions as servers");
  }
  // Before the queue's row is written: a queue is never left without its topic.
  std::set<std::string, std::less<>> recorded;
  for (const ServerInfo& s : client_.list_servers()) recorded.insert(s.name);
  for (const std::string& n : names) {
    if (!recorded.contains(n)) {
      bad_value(kServersAttribute,
                fmt::format("no server '{}' is recorded (txmq server add NAME DSN)", n));
    }
  }
}

void QueueCatalog::check_same(const QueueInfo& existing,
                              const std::map<std::string, std::string>& wanted) {
  // Equal values for the attributes given (SQS compares what the request names).
  const auto current = effective_attributes(existing, regions_.primary(), account_);
  for (const auto& [k, v] : wanted) {
    auto it = current.find(k);
    if (it == current.end() || it->second != v) {
      fail("QueueAlreadyExists",
           fmt::format("A queue already exists with the same name and a different value for "
                       "attribute {}",
                       k));
    }
  }
  if (existing.source_queue.has_value() != wanted.contains(std::string(kSourceQueueAttribute))) {
    fail("QueueAlreadyExists",
         fmt::format("A queue already exists with the same name and a different value for "
                     "attribute {}",
                     kSourceQueueAttribute));
  }
}

std::shared_ptr<const QueueInfo> QueueCatalog::create_group_queue(
    std::string_view name, std::map<std::string, std::string> attributes,
    const std::map<std::string, std::string>& tags) {
  const bool fifo = name.ends_with(".fifo");
  std::map<std::string, std::string> wanted = checked(attributes, fifo, true, name, true);
  check_tags(tags);
  const std::string source_name = wanted.at(std::string(kSourceQueueAttribute));
  const std::string key(kSourceQueueAttribute);
  if (source_name == name) bad_value(key, "a queue cannot be its own source");
  auto source = find(source_name);
  if (!source) bad_value(key, fmt::format("the source queue {} does not exist", source_name));
  if (source->source_queue) {
    bad_value(key, fmt::format("{} is itself a consumer-group queue: name the queue it reads ({})",
                               source_name, *source->source_queue));
  }
  if (source->fifo != fifo) {
    bad_value(key, "a consumer-group queue is a FIFO queue (.fifo) when its source is one, and "
                   "only then");
  }
  // By default the group is named after the queue as topics are: servers agree on it.
  wanted.try_emplace(std::string(kConsumerGroupAttribute), topic_of(name));
  const std::string group = wanted.at(std::string(kConsumerGroupAttribute));
  const std::int64_t now = now_seconds();
  client_.transact([&](Transaction& t) {
    // Shares the source's row lock with DeleteQueue of the source, which looks for group
    // queues under an exclusive one: a group queue is never left without its topic.
    SqlResult r = t.execute(
        "SELECT topic FROM txmq_sqs_queues WHERE name = ? AND consumer_group = '' LOCK IN SHARE "
        "MODE",
        {source_name});
    if (r.rows.empty() || r.rows[0].as_string(0) != source->topic) {
      bad_value(key, fmt::format("the source queue {} does not exist", source_name));
    }
    t.execute(
        "INSERT IGNORE INTO txmq_sqs_queues (name, topic, consumer_group, fifo, attributes, "
        "tags, created_at, modified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        {name, source->topic, group, fifo ? 1 : 0, to_json(wanted), to_json(tags), now, now});
  });
  forget(name);
  auto existing = find(name);
  if (!existing) {  // the unique (topic, group) refused it
    std::string other;
    client_.transact([&](Transaction& t) {
      SqlResult r = t.execute(
          "SELECT name FROM txmq_sqs_queues WHERE topic = ? AND consumer_group = ?",
          {source->topic, group});
      other = r.rows.empty() ? "" : r.rows[0].as_string(0);
    });
    bad_value(std::string(kConsumerGroupAttribute),
              fmt::format("group {} of {} is read by queue {} already", group, source_name, other));
  }
  check_same(*existing, wanted);
  if (existing->topic != source->topic) {
    fail("QueueAlreadyExists",
         fmt::format("A queue already exists with the same name and a different value for "
                     "attribute {}",
                     key));
  }
  const bool earliest = existing->attributes.contains(std::string(kGroupStartAttribute)) &&
                        existing->attributes.at(std::string(kGroupStartAttribute)) == "earliest";
  try {
    client_.create_group(existing->topic, existing->group,
                         earliest ? GroupStart::kEarliest : GroupStart::kNow);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;
    fail("QueueDoesNotExist", "The source queue was deleted meanwhile.");
  }
  return existing;
}

namespace {

// Applies checked changes to stored attributes: an empty policy removes it.
void apply_changes(std::map<std::string, std::string>& stored,
                   const std::map<std::string, std::string>& changes) {
  for (const auto& [k, v] : changes) {
    if (v.empty() && (k == "RedrivePolicy" || k == "RedriveAllowPolicy" || k == "Policy")) {
      stored.erase(k);
    } else {
      stored[k] = v;
    }
  }
}

}  // namespace

void QueueCatalog::set_attributes(std::string_view name,
                                  const std::map<std::string, std::string>& attributes) {
  auto q = get(name);
  // Checked before the lock: the checks may read other queues (a RedrivePolicy's target).
  const auto changes = checked(attributes, q->fifo, false, name, q->source_queue.has_value());
  change_attributes(*q, [&](std::map<std::string, std::string>& stored) {
    apply_changes(stored, changes);
  });
}

void QueueCatalog::edit_attribute(std::string_view name, std::string_view key,
                                  const std::function<std::string(const std::string&)>& edit) {
  auto q = get(name);
  change_attributes(*q, [&](std::map<std::string, std::string>& stored) {
    const auto it = stored.find(std::string(key));
    std::string value = edit(it == stored.end() ? std::string() : it->second);
    // Only what checked() lets through; for a Policy that is a JSON check (no other queue read).
    apply_changes(stored, checked({{std::string(key), std::move(value)}}, q->fifo, false, name,
                                  q->source_queue.has_value()));
  });
}

void QueueCatalog::change_attributes(
    const QueueInfo& q, const std::function<void(std::map<std::string, std::string>&)>& change) {
  const std::string& name = q.name;
  QueueInfo updated;
  client_.transact([&](Transaction& t) {
    SqlResult r =
        t.execute("SELECT attributes FROM txmq_sqs_queues WHERE name = ? FOR UPDATE", {name});
    if (r.rows.empty()) fail("QueueDoesNotExist", "The specified queue does not exist.");
    updated = q;  // again at each attempt: a deadlock retries the whole transaction
    updated.attributes = from_json(r.rows[0].as_string(0));
    change(updated.attributes);
    updated.modified_at = now_seconds();
    read_settings(updated);
    t.execute("UPDATE txmq_sqs_queues SET attributes = ?, modified_at = ? WHERE name = ?",
              {to_json(updated.attributes), updated.modified_at, name});
  });
  forget(name);
  // A consumer-group queue's own attributes are the server's (receive defaults): no topic change.
  if (!updated.source_queue) make_topic(updated);
}

void QueueCatalog::set_tags(std::string_view name, const std::map<std::string, std::string>& add,
                            const std::vector<std::string>& remove) {
  get(name);
  check_tags(add);
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute("SELECT tags FROM txmq_sqs_queues WHERE name = ? FOR UPDATE", {name});
    if (r.rows.empty()) fail("QueueDoesNotExist", "The specified queue does not exist.");
    auto tags = from_json(r.rows[0].as_string(0));
    for (const auto& [k, v] : add) tags[k] = v;
    for (const auto& k : remove) tags.erase(k);
    if (tags.size() > 50) {
      fail("InvalidParameterValue", fmt::format("Too many tags added for queue {}.", name));
    }
    t.execute("UPDATE txmq_sqs_queues SET tags = ? WHERE name = ?", {to_json(tags), name});
  });
  forget(name);
}

void QueueCatalog::remove(std::string_view name) {
  auto q = get(name);
  const auto sources = dead_letter_sources(name);
  if (!sources.empty()) {
    fail("InvalidParameterValue",
         fmt::format("Queue {} is the dead-letter queue of {}: remove their RedrivePolicy first",
                     name, sources.front()));
  }
  // The row first: a queue whose row is gone does not exist, whatever is left of its topic.
  client_.transact([&](Transaction& t) {
    if (!q->source_queue) {
      // Locks the topic's rows (and the gap after them) against a group queue being created.
      SqlResult r = t.execute(
          "SELECT name FROM txmq_sqs_queues WHERE topic = ? AND consumer_group <> '' ORDER BY "
          "name FOR UPDATE",
          {q->topic});
      if (!r.rows.empty()) {
        fail("InvalidParameterValue",
             fmt::format("Queue {} is the source of consumer-group queue {}: delete that first",
                         name, r.rows[0].as_string(0)));
      }
    }
    t.execute("DELETE FROM txmq_sqs_queues WHERE name = ?", {name});
  });
  forget(name);
  try {
    if (q->source_queue) client_.drop_group(q->topic, q->group);
    else client_.drop_topic(q->topic);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;
  }
}

std::vector<std::string> QueueCatalog::group_queues(std::string_view topic) {
  std::vector<std::string> names;
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "SELECT name FROM txmq_sqs_queues WHERE topic = ? AND consumer_group <> '' ORDER BY name",
        {topic});
    names.clear();
    for (const auto& row : r.rows) names.push_back(row.as_string(0));
  });
  return names;
}

std::vector<std::string> QueueCatalog::list(std::string_view prefix, std::string_view after,
                                            std::size_t limit) {
  std::vector<std::string> names;
  // LIKE would need escaping of % and _ (valid in names): compare the prefix bytes instead.
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "SELECT name FROM txmq_sqs_queues WHERE name > ? AND name >= ? AND LEFT(name, ?) = ? "
        "ORDER BY name LIMIT ?",
        {after, prefix, static_cast<std::int64_t>(prefix.size()), prefix,
         static_cast<std::int64_t>(limit)});
    names.clear();
    for (const auto& row : r.rows) names.push_back(row.as_string(0));
  });
  return names;
}

std::optional<std::string> QueueCatalog::name_of_topic(std::string_view topic) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = names_of_topics_.find(topic); it != names_of_topics_.end()) return it->second;
  }
  std::optional<std::string> name;
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "SELECT name FROM txmq_sqs_queues WHERE topic = ? AND consumer_group = ''", {topic});
    name.reset();
    if (!r.rows.empty()) name = r.rows[0].as_string(0);
  });
  if (name) {  // a topic's name never changes while it exists
    std::lock_guard lock(mutex_);
    names_of_topics_[std::string(topic)] = *name;
  }
  return name;
}

std::vector<std::string> QueueCatalog::dead_letter_sources(std::string_view target) {
  std::vector<std::string> names;
  const auto dlq = find(target);
  if (!dlq) return names;
  client_.transact([&](Transaction& t) {
    // A RedrivePolicy makes the target's topic its source's dead-letter topic (make_topic), and
    // that column has an index: with 100,000 queues, reading every queue's attributes was most
    // of a DeleteQueue. The attributes are then read exactly.
    SqlResult r = t.execute(
        "SELECT q.name, q.attributes FROM txmq_topics AS tp JOIN txmq_sqs_queues AS q ON "
        "q.topic = tp.name AND q.consumer_group = '' WHERE tp.dead_letter_topic = ? ORDER BY "
        "q.name",
        {dlq->topic});
    names.clear();
    for (const auto& row : r.rows) {
      auto attributes = from_json(row.as_string(1));
      auto it = attributes.find("RedrivePolicy");
      if (it == attributes.end() || it->second.empty()) continue;
      const auto arn = parse_queue_arn(json::parse(it->second).value("deadLetterTargetArn", ""));
      if (arn && arn->account == account_ && arn->name == target) {
        names.push_back(row.as_string(0));
      }
    }
  });
  return names;
}

void check_tag_key(std::string_view key) {
  if (key.empty() || key.size() > 128) {
    fail("InvalidParameterValue", "Tag keys must be between 1 and 128 characters in length.");
  }
}

}  // namespace txmq::server
