// db: the only code that sees MYSQL*: connections, the pool, DSNs, Galera clusters, SQL helpers.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "db/dsn.h"

typedef struct st_mysql MYSQL;
typedef struct st_mysql_stmt MYSQL_STMT;

namespace txmq::internal {

// A bound parameter: NULL, an integer, a double, or bytes (any bytes; bound as a BLOB).
using Param = std::variant<std::nullptr_t, std::int64_t, std::uint64_t, double, std::string_view>;

// One fetched row. Integer columns arrive as integers, everything else as bytes.
class Row {
 public:
  struct Cell {
    bool null = true;
    bool is_integer = false;
    std::int64_t integer = 0;
    std::string bytes;
  };
  explicit Row(std::vector<Cell> cells) : cells_(std::move(cells)) {}

  bool null(std::size_t i) const { return cells_.at(i).null; }
  // An integer column. A column the server sends otherwise (DECIMAL, text) is parsed, so that
  // an expression whose type widened is not read as 0; NULL reads 0.
  std::int64_t i64(std::size_t i) const {
    const Cell& c = cells_.at(i);
    return c.is_integer || c.null ? c.integer : parse_integer(c.bytes);
  }
  std::uint64_t u64(std::size_t i) const { return static_cast<std::uint64_t>(i64(i)); }
  const std::string& bytes(std::size_t i) const { return cells_.at(i).bytes; }
  // A floating-point column (sent as text by the server).
  double f64(std::size_t i) const;
  std::string take_bytes(std::size_t i) { return std::move(cells_.at(i).bytes); }
  std::size_t size() const { return cells_.size(); }
  // Throws kInternal when `text` is not an integer.
  static std::int64_t parse_integer(const std::string& text);
  const Cell& cell(std::size_t i) const { return cells_.at(i); }
  std::optional<std::string> opt_bytes(std::size_t i) const {
    return null(i) ? std::nullopt : std::optional<std::string>(bytes(i));
  }

 private:
  std::vector<Cell> cells_;
};

struct Result {
  std::uint64_t affected_rows = 0;
  std::uint64_t insert_id = 0;
  std::vector<Row> rows;
};

class Connection;

// Which server a connection talks to, read once at connect from the version string of its
// handshake. Where MariaDB and MySQL differ, the statement differs (docs/servers.md, "What
// differs"); the algorithm does not.
struct ServerKind {
  bool mysql = false;  // MySQL (or Percona Server); otherwise MariaDB
  unsigned major = 0;
  unsigned minor = 0;
  unsigned patch = 0;
  // INSERT/DELETE ... RETURNING: MariaDB only (10.5+).
  bool returning() const noexcept { return !mysql; }
  // ALTER TABLE ... WAIT n, ADD/DROP COLUMN IF [NOT] EXISTS: MariaDB only.
  bool alter_extensions() const noexcept { return !mysql; }
  // "MariaDB 10.11.6", "MySQL 9.7.4".
  std::string describe() const;
};
// Parses VERSION() / the handshake's version: "10.11.6-MariaDB-0+deb12u1", "9.7.4-2",
// "5.5.5-10.11.6-MariaDB" (the prefix old clients were given).
ServerKind server_kind_of(std::string_view version);

// A server-side prepared statement. Owned and cached by its Connection.
class Statement {
 public:
  Statement(Connection& connection, std::string sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Result execute(std::span<const Param> params);

 private:
  Connection& connection_;
  std::string sql_;
  MYSQL_STMT* stmt_ = nullptr;
};

// The session's lock_wait_timeout (metadata locks: DDL, and what waits for it), set at connect.
inline constexpr int kLockWaitTimeoutSeconds = 60;

// One MariaDB session, set up for the queue (READ COMMITTED, UTC, strict mode, found rows).
// Serves one thread at a time. Errors are thrown as txmq::Error with the server's classification;
// after a connection-level error, broken() is true and the connection must be discarded.
class Connection {
 public:
  explicit Connection(const Dsn& dsn);
  // Wraps an application's connection (an enlisted MYSQL*): never closed here, its session
  // settings and autocommit mode are left as the application set them. The statements prepared
  // on it are closed with this object, which must go before the handle does.
  struct Borrowed {};
  Connection(MYSQL* borrowed, Borrowed);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs a statement through a prepared statement cached by its text.
  Result execute(std::string_view sql, std::span<const Param> params = {});
  Result execute(std::string_view sql, std::initializer_list<Param> params) {
    return execute(sql, std::span<const Param>(params.begin(), params.size()));
  }
  // Runs a statement through the text protocol: for DDL and statements without input.
  void query(std::string_view sql);
  // The same, returning its rows (every cell as bytes; i64() parses them): for statements the
  // server will not prepare (MySQL's XA RECOVER), and CALLs (the first result set is returned,
  // the others are read and dropped).
  Result query_rows(std::string_view sql);

  // Opens a transaction by turning autocommit off, and leaves it off after commit or rollback:
  // the next transaction on this connection then costs no round trip to open (the pool hands
  // transactions to such connections). A statement outside a transaction turns autocommit back
  // on first, so nothing ever runs in a transaction nobody commits.
  void begin();
  bool autocommit() const noexcept { return autocommit_; }
  // True while the session has a transaction open or autocommit off, so that the next statement
  // joins a transaction rather than committing on its own (from the server's status flags).
  bool session_in_transaction() const noexcept;
  // Throws kCommitUnknown when the connection breaks during COMMIT.
  void commit();
  void rollback() noexcept;

  bool ping() noexcept;
  // Aborts the connection from another thread: a statement it is running returns at once with
  // a connection error (the session is then broken).
  void cancel() noexcept;
  bool broken() const noexcept { return broken_; }
  bool borrowed() const noexcept { return !owned_; }
  bool in_transaction() const noexcept { return in_transaction_; }
  std::chrono::steady_clock::time_point last_used() const noexcept { return last_used_; }
  void touch() noexcept { last_used_ = std::chrono::steady_clock::now(); }

  MYSQL* handle() noexcept { return mysql_; }
  const ServerKind& server() const noexcept { return server_; }
  // @@auto_increment_increment of the session, read once: the ids of a multi-row INSERT are
  // first, first + step, ... (MySQL has no RETURNING to say them).
  std::uint64_t auto_increment_step();
  // Makes the server close this connection after `seconds` without a statement in a transaction
  // (MariaDB's idle_transaction_timeout; on MySQL, which has none, wait_timeout: also when idle
  // outside one), unless a longer bound was set before: the rows a held transaction locks come
  // back when its process freezes or its host drops off the network (the server rolls back).
  void bound_idle(int seconds);
  // The server's value again, if bound_idle changed it: before a transaction in which the
  // caller's code may take its time (process, Client::begin and transact).
  void unbound_idle();
  // A connection to the primary of a MySQL Group Replication group (Cluster::prepare): the
  // group's refusals (is_group_refusal) then mark it broken and are kUnavailable, so that the
  // pool sends the statement to the next primary, and ER_RUN_HOOK_ERROR (3100) at COMMIT, a
  // member that left the group while committing, is kCommitUnknown.
  void set_group_member(bool member) noexcept { group_member_ = member; }
  bool group_member() const noexcept { return group_member_; }
  // Which writer of a cluster this connection was made to (Cluster::Writer::generation).
  std::uint64_t generation() const noexcept { return generation_; }
  void set_generation(std::uint64_t generation) noexcept { generation_ = generation; }
  // Something that may cancel() this connection from another thread while it lives (a
  // cluster's heartbeat: Cluster::track); let go before the handle closes.
  void set_tracking(std::shared_ptr<void> tracking) noexcept { tracking_ = std::move(tracking); }
  // Turns the last error on this connection into a thrown Error; marks broken when the
  // connection is gone. `stmt` gives the statement's error instead of the connection's.
  [[noreturn]] void raise(MYSQL_STMT* stmt, std::string_view doing);

 private:
  static constexpr std::size_t kStatementCacheSize = 256;

  void autocommit_outside_transactions();

  MYSQL* mysql_ = nullptr;
  ServerKind server_;
  std::uint64_t auto_increment_step_ = 0;  // 0: not read yet
  int idle_bound_seconds_ = 0;              // 0: the server's wait_timeout
  bool owned_ = true;
  bool broken_ = false;
  bool in_transaction_ = false;
  bool autocommit_ = true;
  bool group_member_ = false;
  std::uint64_t generation_ = 0;
  std::shared_ptr<void> tracking_;
  std::chrono::steady_clock::time_point last_used_;
  // LRU of prepared statements: the server caps their number (max_prepared_stmt_count).
  std::list<std::string> lru_;
  std::unordered_map<std::string,
                     std::pair<std::unique_ptr<Statement>, std::list<std::string>::iterator>>
      statements_;
};

// Classification of MariaDB / Connector/C error numbers.
bool is_connection_error(unsigned server_errno) noexcept;
bool is_transient_conflict(unsigned server_errno) noexcept;  // deadlock, lock wait timeout
// A Galera node that cannot take statements now (not synced, not in the primary component): the
// statement did nothing, and another node may serve it.
bool is_node_unavailable(unsigned server_errno) noexcept;
// A member of a MySQL Group Replication group that refuses a statement without running it:
// super_read_only or read_only (1290, 1836: a secondary, or a member that left the group),
// offline_mode (3032), a new primary that gave up holding the statement while it applied the
// old one's backlog (3781-3783), or a member whose state allows no consistent transaction now
// (3796, 3797, 3799). Another member may serve it. (MySQL's numbers; only asked of connections
// to a group, Connection::set_group_member.)
bool is_group_refusal(unsigned server_errno) noexcept;
// "Table doesn't exist" (1146): a topic's tables not made yet, or dropped.
bool is_missing_table(unsigned server_errno) noexcept;

// Why a server of this VERSION() cannot hold txmq's queues, or empty when it can: txmq needs
// FOR UPDATE SKIP LOCKED, which MariaDB has since 10.6 and MySQL since 8.0.1.
std::string unsupported_server(std::string_view version);

}  // namespace txmq::internal
