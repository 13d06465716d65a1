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

namespace txmq {

using Clock = std::chrono::system_clock;
using Micros = std::chrono::microseconds;

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
};

// A topic's settings. Stored in the catalog; a second create must match them.
struct TopicOptions {
  // How long a received message stays leased to its consumer before peers may take it.
  Micros lease = std::chrono::seconds(30);
  // Deliveries before a message is moved to the dead-letter table instead of delivered again.
  int max_attempts = 5;
  // Largest payload accepted, in bytes. Sends over it are refused with kInvalidArgument.
  std::size_t max_payload_bytes = 1 << 20;

  bool operator==(const TopicOptions&) const = default;
};

struct TopicInfo {
  std::string name;
  TopicOptions options;
  Clock::time_point created_at;
};

struct SendOptions {
  // Optional message key, up to 255 bytes; stored and handed back on receipt.
  std::optional<std::string> key;
  // The message becomes claimable this long after the send commits (server time).
  Micros delay{0};
};

struct OutgoingMessage {
  std::string payload;
  std::optional<std::string> key;
  Micros delay{0};
};

struct ReceiveOptions {
  // Lease up to this many messages in one claim (1..10000).
  int max_messages = 1;
  // Lease length; default: the topic's.
  std::optional<Micros> lease;
  // When nothing is claimable, keep trying this long before returning empty.
  Micros wait{0};
};

// A leased message. The receipt (id and lease token) is what ack, nack and extend take.
struct Message {
  std::uint64_t id = 0;
  std::string receipt;
  int attempt = 0;  // 1 on first delivery
  std::optional<std::string> key;
  std::string payload;
  Clock::time_point enqueued_at;
  Clock::time_point lease_expires_at;
};

// The outcome of ack, nack and extend. Expected outcomes are values, not exceptions.
enum class Settle {
  kOk,
  kLeaseLost,  // the message was leased again to another consumer: this receipt is stale
  kNotFound,   // no such message any more (acknowledged, dead-lettered, or never existed)
};

struct TopicStats {
  std::string topic;
  std::uint64_t ready = 0;      // claimable now (new, retried, or with an expired lease)
  std::uint64_t in_flight = 0;  // leased to a consumer whose lease has not expired
  std::uint64_t delayed = 0;    // not yet claimable: a delayed send or a nack with delay
  std::uint64_t dead = 0;       // in the dead-letter table
  double oldest_ready_age_seconds = 0;  // age of the oldest ready message; 0 when none
};

struct InFlightMessage {
  std::uint64_t id = 0;
  std::string owner;  // the consumer_name of the client holding the lease
  int attempt = 0;
  Clock::time_point lease_expires_at;
};

struct DeadLetter {
  std::uint64_t id = 0;
  std::optional<std::string> key;
  std::string payload;
  int attempts = 0;
  std::string last_owner;
  Clock::time_point enqueued_at;
  Clock::time_point died_at;
};

// A connection to one txmq database: topics, sends, claims and their settlement.
// Thread safety: a Client may be used from many threads at once; it keeps a pool of connections.
// Every function throws txmq::Error; retryable() tells whether trying again may help.
class Client {
 public:
  // Connects (fails fast with kUnavailable or kInvalidArgument), creates the catalog tables when
  // missing, and warns once when the server would lose acknowledged sends in a crash.
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Creates the topic. Returns true when it was created, false when it existed with the same
  // settings. Throws kAlreadyExists when it exists with other settings, kInvalidArgument for a bad
  // name ([a-z][a-z0-9_]{0,47}) or settings.
  bool create_topic(std::string_view name, const TopicOptions& options = {});
  // Drops the topic with its messages and dead letters. Throws kNotFound when there is none.
  void drop_topic(std::string_view name);
  std::vector<TopicInfo> list_topics();
  TopicInfo topic(std::string_view name);

  // Sends one message (any bytes) and returns its id once it is committed.
  std::uint64_t send(std::string_view topic, std::string_view payload,
                     const SendOptions& options = {});
  // Sends all messages in one transaction: all commit or none do. Returns the ids in input order.
  // Every message is checked before anything is written; one refused message refuses the batch.
  std::vector<std::uint64_t> send_batch(std::string_view topic,
                                        std::span<const OutgoingMessage> messages);

  // Leases up to max_messages claimable messages in id order, from past the ids this client
  // claimed before (lower ones that became claimable again are swept up within a second, or at
  // once when nothing else is claimable; doc/schema.md). Empty when none arrived
  // within options.wait. Messages past the topic's max_attempts go to the dead-letter table.
  std::vector<Message> receive(std::string_view topic, const ReceiveOptions& options = {});

  // Deletes the message. kLeaseLost when another consumer holds it now.
  Settle ack(std::string_view topic, std::string_view receipt);
  std::vector<Settle> ack(std::string_view topic, std::span<const std::string> receipts);
  // Gives the message back, claimable after delay. At max_attempts it is dead-lettered instead.
  Settle nack(std::string_view topic, std::string_view receipt, Micros delay = Micros{0});
  // Moves the lease's expiry to now + lease.
  Settle extend(std::string_view topic, std::string_view receipt, Micros lease);

  TopicStats stats(std::string_view topic);
  std::vector<InFlightMessage> in_flight(std::string_view topic, std::size_t limit = 1000);
  std::vector<DeadLetter> dead_letters(std::string_view topic, std::size_t limit = 1000);
  // Moves dead letters back to the topic, claimable now and at attempt 1 again. Empty ids: all.
  // Returns how many were requeued.
  std::size_t requeue_dead(std::string_view topic, std::span<const std::uint64_t> ids = {});

  const std::string& consumer_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits a receipt into its message id and lease token. Throws kInvalidArgument when malformed.
struct Receipt {
  std::uint64_t id = 0;
  std::uint64_t token = 0;
  static Receipt parse(std::string_view text);
  std::string str() const;
};

}  // namespace txmq
