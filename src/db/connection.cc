#include "db/connection.h"

#include <errmsg.h>
#include <fmt/format.h>
#include <mysql.h>
#include <mysqld_error.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "txmq/error.h"

namespace txmq::internal {
namespace {

void library_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { mysql_library_init(0, nullptr, nullptr); });
}

// Errors whose server text echoes the values of the statement (and so maybe user data).
bool echoes_data(unsigned errno_) {
  return errno_ == ER_DUP_ENTRY || errno_ == ER_DATA_TOO_LONG ||
         errno_ == ER_TRUNCATED_WRONG_VALUE_FOR_FIELD || errno_ == ER_WARN_DATA_OUT_OF_RANGE;
}

// MySQL's error numbers for Group Replication (MariaDB's headers lack them; MariaDB uses some of
// these numbers for other errors, so they are read only on connections to a group, except 3101).
constexpr unsigned kMysqlReadOnlyMode = 1836;                // ER_READ_ONLY_MODE
constexpr unsigned kMysqlServerOfflineMode = 3032;           // ER_SERVER_OFFLINE_MODE
constexpr unsigned kMysqlRunHookError = 3100;                // ER_RUN_HOOK_ERROR
constexpr unsigned kMysqlRollbackDuringCommit = 3101;        // ER_TRANSACTION_ROLLBACK_DURING_COMMIT
constexpr unsigned kMysqlHoldWaitTimeout = 3781;             // ER_GR_HOLD_WAIT_TIMEOUT
constexpr unsigned kMysqlHoldKilled = 3782;                  // ER_GR_HOLD_KILLED
constexpr unsigned kMysqlHoldMemberStatusError = 3783;       // ER_GR_HOLD_MEMBER_STATUS_ERROR
constexpr unsigned kMysqlConsistencyNotAllowed = 3796;       // ER_GRP_TRX_CONSISTENCY_NOT_ALLOWED
constexpr unsigned kMysqlConsistencyBefore = 3797;           // ER_GRP_TRX_CONSISTENCY_BEFORE
constexpr unsigned kMysqlConsistencyBeginNotAllowed = 3799;  // ..._BEGIN_NOT_ALLOWED

Errc classify(unsigned errno_) {
  if (is_connection_error(errno_) || is_node_unavailable(errno_)) return Errc::kUnavailable;
  if (is_transient_conflict(errno_)) return Errc::kAborted;
  switch (errno_) {
    // MySQL: a plugin rolled the transaction back at COMMIT; for Group Replication, a
    // certification conflict, decided alike on every member: nothing committed, retry it whole.
    // (MariaDB does not use 3101.)
    case kMysqlRollbackDuringCommit:
      return Errc::kAborted;
    case ER_NO_SUCH_TABLE:
      return Errc::kNotFound;
    case ER_DUP_ENTRY:
      return Errc::kAlreadyExists;
    case ER_NET_PACKET_TOO_LARGE:
    case CR_NET_PACKET_TOO_LARGE:
      return Errc::kInvalidArgument;
    case ER_ACCESS_DENIED_ERROR:
    case ER_DBACCESS_DENIED_ERROR:
    case ER_BAD_DB_ERROR:
    case ER_TABLEACCESS_DENIED_ERROR:
      return Errc::kFailedPrecondition;
    default:
      return Errc::kInternal;
  }
}

}  // namespace

bool is_connection_error(unsigned e) noexcept {
  switch (e) {
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_UNKNOWN_HOST:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case CR_COMMANDS_OUT_OF_SYNC:
    case CR_SSL_CONNECTION_ERROR:
    case ER_CONNECTION_KILLED:
    case ER_SERVER_SHUTDOWN:
    case ER_CON_COUNT_ERROR:
    case ER_TOO_MANY_USER_CONNECTIONS:
    case ER_NET_READ_ERROR:
    case ER_NET_READ_INTERRUPTED:
    case ER_NET_ERROR_ON_WRITE:
    case ER_NET_WRITE_INTERRUPTED:
      return true;
    default:
      return false;
  }
}

bool is_node_unavailable(unsigned e) noexcept {
  // 1047: "WSREP has not yet prepared node for application use" (joining, or out of the
  // primary component); 1180: a commit that could not replicate ("Not connected to Primary
  // Component"), rolled back.
  return e == ER_UNKNOWN_COM_ERROR || e == ER_ERROR_DURING_COMMIT;
}

bool is_group_refusal(unsigned e) noexcept {
  switch (e) {
    case ER_OPTION_PREVENTS_STATEMENT:  // 1290, super_read_only
    case kMysqlReadOnlyMode:
    case kMysqlServerOfflineMode:
    case kMysqlHoldWaitTimeout:
    case kMysqlHoldKilled:
    case kMysqlHoldMemberStatusError:
    case kMysqlConsistencyNotAllowed:
    case kMysqlConsistencyBefore:
    case kMysqlConsistencyBeginNotAllowed:
      return true;
    default:
      return false;
  }
}

bool is_missing_table(unsigned e) noexcept { return e == ER_NO_SUCH_TABLE; }

bool is_transient_conflict(unsigned e) noexcept {
  return e == ER_LOCK_DEADLOCK || e == ER_LOCK_WAIT_TIMEOUT;
}

// --- Connection -------------------------------------------------------------------------------

Connection::Connection(const Dsn& dsn) {
  library_init_once();
  mysql_ = mysql_init(nullptr);
  if (mysql_ == nullptr) throw Error(Errc::kInternal, "out of memory creating a connection");
  unsigned timeout = static_cast<unsigned>(dsn.connect_timeout_seconds);
  mysql_optionsv(mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
  // A server that stops answering must not hang a client for ever; queue statements are short.
  unsigned io_timeout = static_cast<unsigned>(dsn.effective_read_timeout());
  mysql_optionsv(mysql_, MYSQL_OPT_READ_TIMEOUT, &io_timeout);
  mysql_optionsv(mysql_, MYSQL_OPT_WRITE_TIMEOUT, &io_timeout);
  mysql_optionsv(mysql_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  // READ COMMITTED: no gap locks, so claims and sends do not deadlock on ranges.
  // UTC: every DATETIME txmq writes is NOW(6) in UTC, read back as microseconds since the epoch.
  mysql_optionsv(mysql_, MYSQL_INIT_COMMAND,
                 "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  static const std::string session_settings = fmt::format(
      "SET SESSION autocommit = 1, time_zone = '+00:00', sql_mode = 'STRICT_ALL_TABLES,"
      "NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION',"
      " lock_wait_timeout = {}",
      kLockWaitTimeoutSeconds);
  mysql_optionsv(mysql_, MYSQL_INIT_COMMAND, session_settings.c_str());
  // TLS (docs/security.md). Connector/C checks the certificate's chain whenever a CA is given,
  // and its host name only with VERIFY_SERVER_CERT: so verify-ca is a CA without the host
  // check, verify-identity both, and required encrypts (checking a chain only if a CA is given).
  if (!dsn.ssl_mode.empty() && dsn.ssl_mode != "disabled") {
    my_bool enforce = 1;
    mysql_optionsv(mysql_, MYSQL_OPT_SSL_ENFORCE, &enforce);
    if (!dsn.ssl_ca.empty()) mysql_optionsv(mysql_, MYSQL_OPT_SSL_CA, dsn.ssl_ca.c_str());
    my_bool verify_host = dsn.ssl_mode == "verify-identity";
    mysql_optionsv(mysql_, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify_host);
  }
  if (!dsn.server_public_key.empty()) {
    mysql_optionsv(mysql_, MYSQL_SERVER_PUBLIC_KEY, dsn.server_public_key.c_str());
  }
  const char* socket = dsn.socket.empty() ? nullptr : dsn.socket.c_str();
  const char* host = socket != nullptr ? "localhost" : dsn.host.c_str();
  if (mysql_real_connect(mysql_, host, dsn.user.c_str(), dsn.password.c_str(), dsn.database.c_str(),
                         dsn.port, socket, CLIENT_FOUND_ROWS) == nullptr) {
    unsigned e = mysql_errno(mysql_);
    std::string message = mysql_error(mysql_);
    std::string state = mysql_sqlstate(mysql_);
    mysql_close(mysql_);
    mysql_ = nullptr;
    Errc code = classify(e);
    if (code == Errc::kInternal) code = Errc::kUnavailable;
    throw Error(code, fmt::format("cannot connect to {}: {}", dsn.describe(), message), e, state,
                message);
  }
  server_ = server_kind_of(mysql_get_server_info(mysql_));
  if (server_.mysql) {
    // MySQL caches information_schema.TABLES' figures (AUTO_INCREMENT: stats' ids_taken) for a
    // day by default; txmq reads them as they are.
    try {
      query("SET SESSION information_schema_stats_expiry = 0");
    } catch (...) {
      statements_.clear();
      mysql_close(mysql_);
      mysql_ = nullptr;
      throw;
    }
  }
  touch();
}

Connection::Connection(MYSQL* borrowed, Borrowed) : mysql_(borrowed), owned_(false) {
  if (mysql_ == nullptr) {
    throw Error(Errc::kInvalidArgument, "the enlisted MYSQL* connection is null");
  }
  const char* version = mysql_get_server_info(mysql_);
  server_ = server_kind_of(version != nullptr ? version : "");
  touch();
}

std::uint64_t Connection::auto_increment_step() {
  if (auto_increment_step_ == 0) {
    Result r = execute("SELECT @@SESSION.auto_increment_increment", {});
    auto_increment_step_ = r.rows.empty() ? 1 : std::max<std::uint64_t>(r.rows[0].u64(0), 1);
  }
  return auto_increment_step_;
}

Connection::~Connection() {
  statements_.clear();  // statements close before their connection
  tracking_.reset();    // no cancel() from another thread once the handle may close
  if (mysql_ != nullptr && owned_) mysql_close(mysql_);
}

bool Connection::session_in_transaction() const noexcept {
  unsigned status = 0;
  if (mariadb_get_infov(mysql_, MARIADB_CONNECTION_SERVER_STATUS, &status) != 0) return false;
  return (status & SERVER_STATUS_IN_TRANS) != 0 || (status & SERVER_STATUS_AUTOCOMMIT) == 0;
}

void Connection::raise(MYSQL_STMT* stmt, std::string_view doing) {
  unsigned e = stmt != nullptr ? mysql_stmt_errno(stmt) : mysql_errno(mysql_);
  std::string message = stmt != nullptr ? mysql_stmt_error(stmt) : mysql_error(mysql_);
  std::string state = stmt != nullptr ? mysql_stmt_sqlstate(stmt) : mysql_sqlstate(mysql_);
  // A node that cannot serve (Galera) is left as a lost connection is: the pool goes elsewhere.
  if (is_connection_error(e) || is_node_unavailable(e)) broken_ = true;
  Errc code = classify(e);
  // A group member that cannot serve (a secondary now, out of the group): the pool goes to the
  // primary. 3100 (the member left the group while committing) is a failed node too, which the
  // pool reports as kCommitUnknown for a write in autocommit.
  if (group_member_ && (is_group_refusal(e) || e == kMysqlRunHookError)) {
    broken_ = true;
    code = Errc::kUnavailable;
  }
  const char* server = server_.mysql ? "MySQL" : "MariaDB";
  std::string what = echoes_data(e)
                         ? fmt::format("{} failed: {} error {} ({})", doing, server, e, state)
                         : fmt::format("{} failed: {} ({} error {})", doing, message, server, e);
  throw Error(code, what, e, state, message);
}

Result Connection::execute(std::string_view sql, std::span<const Param> params) {
  std::string key(sql);
  auto it = statements_.find(key);
  if (it == statements_.end()) {
    if (statements_.size() >= kStatementCacheSize) {
      statements_.erase(lru_.back());
      lru_.pop_back();
    }
    auto statement = std::make_unique<Statement>(*this, key);
    lru_.push_front(key);
    it = statements_.emplace(key, std::make_pair(std::move(statement), lru_.begin())).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.second);
  }
  touch();
  autocommit_outside_transactions();
  return it->second.first->execute(params);
}

void Connection::autocommit_outside_transactions() {
  if (autocommit_ || in_transaction_ || !owned_) return;
  if (mysql_autocommit(mysql_, 1) != 0) raise(nullptr, "turning autocommit on");
  autocommit_ = true;
}

namespace {

// MariaDB bounds only a transaction's idle time, so an idle pooled connection is left alone;
// MySQL has no such variable, and wait_timeout closes any idle connection (the pool pings one
// idle for 2 s before using it, and reconnects).
std::string_view idle_variable(const ServerKind& server) {
  return server.mysql ? "wait_timeout" : "idle_transaction_timeout";
}

}  // namespace

void Connection::bound_idle(int seconds) {
  if (idle_bound_seconds_ >= seconds) return;
  query(fmt::format("SET SESSION {} = {}", idle_variable(server_), seconds));
  idle_bound_seconds_ = seconds;
}

void Connection::unbound_idle() {
  if (idle_bound_seconds_ == 0) return;
  const std::string_view variable = idle_variable(server_);
  query(fmt::format("SET SESSION {} = @@GLOBAL.{}", variable, variable));
  idle_bound_seconds_ = 0;
}

void Connection::query(std::string_view sql) {
  touch();
  autocommit_outside_transactions();
  if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) raise(nullptr, "query");
  // Drain any result so the connection stays usable.
  if (MYSQL_RES* res = mysql_store_result(mysql_)) mysql_free_result(res);
}

Result Connection::query_rows(std::string_view sql) {
  touch();
  autocommit_outside_transactions();
  if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) raise(nullptr, "query");
  Result result;
  bool first = true;
  // A CALL answers with its result sets and then its own status: the first set is kept, the
  // others read and dropped (an error among them is raised), so that the connection is ready
  // for its next statement.
  for (;;) {
    MYSQL_RES* res = mysql_store_result(mysql_);
    if (res == nullptr) {
      if (mysql_errno(mysql_) != 0) raise(nullptr, "reading results");
      if (first) result.affected_rows = mysql_affected_rows(mysql_);
    } else {
      std::unique_ptr<MYSQL_RES, decltype(&mysql_free_result)> guard(res, mysql_free_result);
      const unsigned columns = mysql_num_fields(res);
      while (MYSQL_ROW row = mysql_fetch_row(res)) {
        if (!first) continue;
        const unsigned long* lengths = mysql_fetch_lengths(res);
        std::vector<Row::Cell> cells(columns);
        for (unsigned c = 0; c < columns; ++c) {
          cells[c].null = row[c] == nullptr;
          if (!cells[c].null) cells[c].bytes.assign(row[c], lengths[c]);
        }
        result.rows.emplace_back(std::move(cells));
      }
      first = false;
    }
    if (!mysql_more_results(mysql_)) break;
    const int next = mysql_next_result(mysql_);
    if (next > 0) raise(nullptr, "reading results");
    if (next < 0) break;
  }
  return result;
}

void Connection::begin() {
  touch();
  if (autocommit_) {
    if (mysql_autocommit(mysql_, 0) != 0) raise(nullptr, "starting a transaction");
    autocommit_ = false;
  }
  in_transaction_ = true;
}

void Connection::commit() {
  in_transaction_ = false;
  touch();
  if (mysql_commit(mysql_) != 0) {
    unsigned e = mysql_errno(mysql_);
    if (is_connection_error(e)) {
      broken_ = true;
      throw Error(Errc::kCommitUnknown,
                  fmt::format("the connection broke during COMMIT: the transaction may or may not "
                              "have committed ({})",
                              mysql_error(mysql_)),
                  e, mysql_sqlstate(mysql_), mysql_error(mysql_));
    }
    // Galera's "Not connected to Primary Component" at COMMIT: a node cut off from the others
    // while it commits may have delivered the write set to them, and they commit it. Retrying
    // on the next writer stored a batch twice in the cluster fault run; the caller is told.
    // Group Replication's 3100 at COMMIT (a member that left the group, or lost its majority,
    // while the transaction waited for the group): the others may have received it.
    if (e == ER_ERROR_DURING_COMMIT || (group_member_ && e == kMysqlRunHookError)) {
      broken_ = true;
      throw Error(Errc::kCommitUnknown,
                  fmt::format("the node lost the cluster during COMMIT: the transaction may or may "
                              "not have committed ({} ({} error {}))",
                              mysql_error(mysql_), server_.mysql ? "MySQL" : "MariaDB", e),
                  e, mysql_sqlstate(mysql_), mysql_error(mysql_));
    }
    raise(nullptr, "commit");
  }
}

void Connection::rollback() noexcept {
  in_transaction_ = false;
  if (broken_) return;
  if (mysql_rollback(mysql_) != 0 && is_connection_error(mysql_errno(mysql_))) broken_ = true;
}

bool Connection::ping() noexcept {
  if (broken_) return false;
  if (mysql_ping(mysql_) != 0) {
    broken_ = true;
    return false;
  }
  touch();
  return true;
}

// --- Statement --------------------------------------------------------------------------------

Statement::Statement(Connection& connection, std::string sql)
    : connection_(connection), sql_(std::move(sql)) {
  stmt_ = mysql_stmt_init(connection_.handle());
  if (stmt_ == nullptr) connection_.raise(nullptr, "preparing a statement");
  my_bool update_max_length = 1;
  mysql_stmt_attr_set(stmt_, STMT_ATTR_UPDATE_MAX_LENGTH, &update_max_length);
  if (mysql_stmt_prepare(stmt_, sql_.data(), sql_.size()) != 0) {
    // Take the error before closing the handle that holds it.
    try {
      connection_.raise(stmt_, "preparing a statement");
    } catch (...) {
      mysql_stmt_close(stmt_);
      stmt_ = nullptr;
      throw;
    }
  }
}

Statement::~Statement() {
  if (stmt_ != nullptr) mysql_stmt_close(stmt_);
}

namespace {

bool is_integer_type(enum_field_types type) {
  switch (type) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_YEAR:
      return true;
    default:
      return false;
  }
}

}  // namespace

Result Statement::execute(std::span<const Param> params) {
  const std::size_t n = params.size();
  if (mysql_stmt_param_count(stmt_) != n) {
    throw Error(Errc::kInternal, fmt::format("statement expects {} parameters, got {}",
                                             mysql_stmt_param_count(stmt_), n));
  }
  std::vector<MYSQL_BIND> binds(n);  // value-initialised: zeroed
  std::vector<unsigned long> lengths(n);
  std::vector<long long> integers(n);
  std::vector<double> doubles(n);
  for (std::size_t i = 0; i < n; ++i) {
    MYSQL_BIND& b = binds[i];
    if (std::holds_alternative<std::nullptr_t>(params[i])) {
      b.buffer_type = MYSQL_TYPE_NULL;
    } else if (auto* v = std::get_if<std::int64_t>(&params[i])) {
      integers[i] = *v;
      b.buffer_type = MYSQL_TYPE_LONGLONG;
      b.buffer = &integers[i];
    } else if (auto* u = std::get_if<std::uint64_t>(&params[i])) {
      integers[i] = static_cast<long long>(*u);
      b.buffer_type = MYSQL_TYPE_LONGLONG;
      b.buffer = &integers[i];
      b.is_unsigned = 1;
    } else if (auto* d = std::get_if<double>(&params[i])) {
      doubles[i] = *d;
      b.buffer_type = MYSQL_TYPE_DOUBLE;
      b.buffer = &doubles[i];
    } else {
      std::string_view s = std::get<std::string_view>(params[i]);
      lengths[i] = s.size();
      b.buffer_type = MYSQL_TYPE_BLOB;
      // Connector/C does not write through input buffers.
      b.buffer = const_cast<char*>(s.data());
      b.buffer_length = s.size();
      b.length = &lengths[i];
    }
  }
  if (n > 0 && mysql_stmt_bind_param(stmt_, binds.data()) != 0) {
    connection_.raise(stmt_, "binding parameters");
  }
  if (mysql_stmt_execute(stmt_) != 0) connection_.raise(stmt_, "executing a statement");

  Result result;
  result.affected_rows = mysql_stmt_affected_rows(stmt_);
  result.insert_id = mysql_stmt_insert_id(stmt_);
  MYSQL_RES* meta = mysql_stmt_result_metadata(stmt_);
  if (meta == nullptr) return result;
  std::unique_ptr<MYSQL_RES, decltype(&mysql_free_result)> meta_guard(meta, mysql_free_result);
  if (mysql_stmt_store_result(stmt_) != 0) connection_.raise(stmt_, "reading results");

  const unsigned columns = mysql_num_fields(meta);
  MYSQL_FIELD* fields = mysql_fetch_fields(meta);
  std::vector<MYSQL_BIND> out(columns);
  std::vector<long long> ints(columns);
  std::vector<unsigned long> out_lengths(columns);
  std::vector<my_bool> nulls(columns);
  std::vector<std::vector<char>> buffers(columns);
  for (unsigned c = 0; c < columns; ++c) {
    MYSQL_BIND& b = out[c];
    b.is_null = &nulls[c];
    b.length = &out_lengths[c];
    if (is_integer_type(fields[c].type)) {
      b.buffer_type = MYSQL_TYPE_LONGLONG;
      b.buffer = &ints[c];
      b.is_unsigned = (fields[c].flags & UNSIGNED_FLAG) != 0;
    } else {
      buffers[c].resize(fields[c].max_length + 1);
      b.buffer_type = MYSQL_TYPE_STRING;
      b.buffer = buffers[c].data();
      b.buffer_length = buffers[c].size();
    }
  }
  if (mysql_stmt_bind_result(stmt_, out.data()) != 0) connection_.raise(stmt_, "binding results");
  result.rows.reserve(mysql_stmt_num_rows(stmt_));
  for (;;) {
    int rc = mysql_stmt_fetch(stmt_);
    if (rc == MYSQL_NO_DATA) break;
    if (rc == 1) {
      mysql_stmt_free_result(stmt_);
      connection_.raise(stmt_, "fetching a row");
    }
    std::vector<Row::Cell> cells(columns);
    for (unsigned c = 0; c < columns; ++c) {
      Row::Cell& cell = cells[c];
      cell.null = nulls[c] != 0;
      if (cell.null) continue;
      if (out[c].buffer_type == MYSQL_TYPE_LONGLONG) {
        cell.is_integer = true;
        cell.integer = ints[c];
      } else if (out_lengths[c] <= buffers[c].size()) {
        cell.bytes.assign(buffers[c].data(), out_lengths[c]);
      } else {  // truncated: max_length was not known for this column type
        cell.bytes.resize(out_lengths[c]);
        MYSQL_BIND again{};
        again.buffer_type = MYSQL_TYPE_STRING;
        again.buffer = cell.bytes.data();
        again.buffer_length = cell.bytes.size();
        if (mysql_stmt_fetch_column(stmt_, &again, c, 0) != 0) {
          mysql_stmt_free_result(stmt_);
          connection_.raise(stmt_, "fetching a long column");
        }
      }
    }
    result.rows.emplace_back(std::move(cells));
  }
  mysql_stmt_free_result(stmt_);
  return result;
}

void Connection::cancel() noexcept {
  if (mysql_ != nullptr && owned_) mariadb_cancel(mysql_);
}

double Row::f64(std::size_t i) const {
  const Cell& cell = cells_.at(i);
  if (cell.null) return 0;
  if (cell.is_integer) return static_cast<double>(cell.integer);
  return std::strtod(cell.bytes.c_str(), nullptr);
}

}  // namespace txmq::internal

namespace txmq::internal {

std::int64_t Row::parse_integer(const std::string& text) {
  const char* end = text.data() + text.size();
  std::int64_t value = 0;
  auto [p, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc() && p == end) return value;
  std::uint64_t big = 0;  // an unsigned value above INT64_MAX keeps its bits, as integers do
  auto [q, ec2] = std::from_chars(text.data(), end, big);
  if (ec2 == std::errc() && q == end) return static_cast<std::int64_t>(big);
  throw Error(Errc::kInternal, fmt::format("a column read as an integer holds '{}'", text));
}

namespace {

// "A.B.C" at the start of `text`; false when it is not there.
bool parse_version(std::string_view text, ServerKind& kind) {
  const char* p = text.data();
  const char* end = p + text.size();
  unsigned* parts[] = {&kind.major, &kind.minor, &kind.patch};
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, *parts[i]);
    if (ec != std::errc()) return i >= 2;
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') return false;
      ++p;
    }
  }
  return true;
}

}  // namespace

ServerKind server_kind_of(std::string_view version) {
  ServerKind kind;
  kind.mysql = version.find("MariaDB") == std::string_view::npos;
  // MariaDB before 11 told old clients "5.5.5-10.x.y-MariaDB": the real version follows.
  if (!kind.mysql && version.starts_with("5.5.5-")) version.remove_prefix(6);
  if (!parse_version(version, kind)) kind.major = kind.minor = kind.patch = 0;
  return kind;
}

std::string ServerKind::describe() const {
  return fmt::format("{} {}.{}.{}", mysql ? "MySQL" : "MariaDB", major, minor, patch);
}

std::string unsupported_server(std::string_view version) {
  const ServerKind kind = server_kind_of(version);
  if (kind.major == 0) {
    return fmt::format("the server's version '{}' is not one txmq knows: it needs MariaDB 10.6 "
                       "or later, or MySQL 8.0.1 or later (8.4 and 9.7 LTS are tested)",
                       version);
  }
  if (kind.mysql && (kind.major < 8 || (kind.major == 8 && kind.minor == 0 && kind.patch < 1))) {
    return fmt::format("the server runs MySQL {}: txmq needs 8.0.1 or later (its claims use "
                       "FOR UPDATE SKIP LOCKED, new in 8.0.1; 8.4 and 9.7 LTS are tested)",
                       version);
  }
  if (!kind.mysql && (kind.major < 10 || (kind.major == 10 && kind.minor < 6))) {
    return fmt::format("the server runs MariaDB {}: txmq needs 10.6 or later (its claims use "
                       "FOR UPDATE SKIP LOCKED, new in 10.6)",
                       version);
  }
  return {};
}

}  // namespace txmq::internal
