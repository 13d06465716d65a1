#pragma once

// Transactional messaging: sends that commit with the application's own writes (a Transaction,
// or an Outbox on the application's own connection), and exactly-once processing (a handler
// whose statements commit together with the acknowledgement; Client::process).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "txmq/error.h"
#include "txmq/types.h"

typedef struct st_mysql MYSQL;  // MariaDB Connector/C's connection handle

namespace txmq {

// A value bound to a `?` of an application's statement: NULL (nullptr), any integer, a floating
// point number, or a string (bound as bytes; the value is only viewed, not copied, so it must
// outlive the call).
class SqlValue {
 public:
  using Variant =
      std::variant<std::nullptr_t, std::int64_t, std::uint64_t, double, std::string_view>;

  SqlValue(std::nullptr_t) : value_(nullptr) {}
  template <std::signed_integral T>
  SqlValue(T v) : value_(static_cast<std::int64_t>(v)) {}
  template <std::unsigned_integral T>
  SqlValue(T v) : value_(static_cast<std::uint64_t>(v)) {}
  template <std::floating_point T>
  SqlValue(T v) : value_(static_cast<double>(v)) {}
  SqlValue(std::string_view v) : value_(v) {}
  SqlValue(const std::string& v) : value_(std::string_view(v)) {}
  SqlValue(const char* v) : value_(std::string_view(v)) {}

  const Variant& get() const noexcept { return value_; }

 private:
  Variant value_;
};

// One row of a statement's result. Integer columns arrive as integers, every other column as
// the server's text or bytes (DECIMAL "12.50", DATETIME "2026-11-21 10:00:00.000000", BLOB bytes).
class SqlRow {
 public:
  struct Cell {
    bool null = true;
    bool is_integer = false;
    std::int64_t integer = 0;
    std::string bytes;
  };
  explicit SqlRow(std::vector<Cell> cells) : cells_(std::move(cells)) {}

  std::size_t size() const { return cells_.size(); }
  bool is_null(std::size_t column) const { return cell(column).null; }
  // The column as an integer; a text column must hold one. Throws kInvalidArgument otherwise
  // (NULL included).
  std::int64_t as_int(std::size_t column) const;
  // The column's text or bytes; an integer column formatted in decimal; "" for NULL.
  std::string as_string(std::size_t column) const;

 private:
  const Cell& cell(std::size_t column) const;
  std::vector<Cell> cells_;
};

struct SqlResult {
  std::uint64_t affected_rows = 0;
  std::uint64_t insert_id = 0;  // LAST_INSERT_ID() of an INSERT into an AUTO_INCREMENT table
  std::vector<SqlRow> rows;
};

class Client;

// A database transaction on one of the client's connections (Client::begin, Client::transact,
// or the one Client::process hands its handler). The application runs its own parameterised
// statements on it and sends messages through it: all of it commits together, or none of it.
//
// The session runs READ COMMITTED with time_zone '+00:00'. Statements are prepared (`?`
// placeholders, any number of them) and cached per connection.
//
// Errors: a statement that fails throws txmq::Error and the transaction must be rolled back (a
// deadlock or lock-wait timeout already rolled the server's side back: kAborted, retryable). A
// commit that breaks off throws kCommitUnknown: it may or may not have committed.
// Not thread-safe: one thread at a time. Destroying an open transaction rolls it back.
class Transaction {
 public:
  Transaction(Transaction&&) noexcept;
  Transaction& operator=(Transaction&&) noexcept;
  ~Transaction();

  SqlResult execute(std::string_view sql, std::span<const SqlValue> params);
  SqlResult execute(std::string_view sql, std::initializer_list<SqlValue> params = {}) {
    return execute(sql, std::span<const SqlValue>(params.begin(), params.size()));
  }

  // As Client::send and Client::send_batch, inside this transaction: the messages become
  // visible to consumers when it commits, and never if it rolls back. Dedup keys apply: a key
  // sent by a transaction that has not committed yet makes this send wait for it.
  std::uint64_t send(std::string_view topic, std::string_view payload,
                     const SendOptions& options = {});
  std::vector<std::uint64_t> send_batch(std::string_view topic,
                                        std::span<const OutgoingMessage> messages);

  // Not allowed in the transaction Client::process or Client::transact lends a function (they
  // commit it when the function returns).
  void commit();
  void rollback();
  bool open() const noexcept;

  // Made by Client (begin, transact, process); Impl is private to the library.
  struct Impl;
  explicit Transaction(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Sends through a connection the application owns (a MariaDB Connector/C MYSQL*), inside the
// transaction the application has open on it: the messages commit or roll back with the
// application's own COMMIT or ROLLBACK. txmq neither commits nor changes the session's settings.
// A send when no transaction is open (autocommit on, no START TRANSACTION) is refused with
// kFailedPrecondition, as it would commit on its own.
//
// The application's errors policy holds: a failed send (deadlock included) leaves the
// application's transaction for the application to roll back and retry. The Outbox keeps
// prepared statements on the connection; destroy it before closing the connection.
// Not thread-safe, like the MYSQL* it wraps.
class Outbox {
 public:
  Outbox(Outbox&&) noexcept;
  Outbox& operator=(Outbox&&) noexcept;
  ~Outbox();

  std::uint64_t send(std::string_view topic, std::string_view payload,
                     const SendOptions& options = {});
  std::vector<std::uint64_t> send_batch(std::string_view topic,
                                        std::span<const OutgoingMessage> messages);

  struct Impl;

 private:
  friend class Client;
  explicit Outbox(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ProcessOptions {
  // Claim up to this many messages into one transaction (1..10000).
  int max_messages = 1;
  // When nothing is claimable, keep trying this long before returning 0.
  Micros wait{0};
  // The consumer group to process for; empty: "default".
  std::string group;
  // Only from these partitions; empty: all, in turn (as ReceiveOptions::partitions).
  std::vector<int> partitions;
};

// Receives the claimed messages (at least one) and the transaction that claimed them. Their
// receipt is empty and lease_expires_at is the end of time: the transaction's row locks hold them,
// not a lease. Throwing rolls everything back.
using TransactionalHandler = std::function<void(Transaction&, std::span<const Message>)>;

}  // namespace txmq
