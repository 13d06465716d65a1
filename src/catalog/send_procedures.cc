#include "catalog/send_procedures.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "catalog/names.h"
#include "catalog/routines.h"
#include "util/scope_exit.h"
#include "txmq/error.h"

namespace txmq::internal {
namespace {

// 64-bit FNV-1a: names a text in the procedure's comment, so that an unchanged layout changes
// nothing (on MySQL a change drops the procedure for a moment).
std::uint64_t text_hash(std::string_view text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

// A user or host name from mysql.procs_priv as an SQL string literal, quotes doubled (right
// under any sql_mode; a name with a backslash, read differently by NO_BACKSLASH_ESCAPES, is not
// given here: the caller skips it).
std::string string_literal(std::string_view s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') out += '\'';
    out += ch;
  }
  return out + "'";
}

constexpr std::string_view kCommentPrefix = "txmq: the fast send of topic ";

// The topic's partitions on this server (all of them, unless it is sharded).
std::vector<unsigned> partitions_here(const TopicLayout& layout) {
  std::vector<unsigned> here;
  for (unsigned p = 0; p < layout.partitions(); ++p) {
    if (layout.is_placed(p)) here.push_back(p);
  }
  return here;
}

// The statement `insert(p)` into one of `here` (not empty), picked at random as
// txmq_i_unkeyed_partition picks: indented for a procedure's body.
template <typename Insert>
std::string into_one_of(const std::vector<unsigned>& here, const Insert& insert) {
  if (here.size() == 1) return "    " + insert(here[0]) + "\n";
  std::string out = fmt::format("    CASE FLOOR(RAND() * {})\n", here.size());
  for (std::size_t i = 0; i < here.size(); ++i) {
    out += fmt::format("      WHEN {} THEN {}\n", i, insert(here[i]));
  }
  return out + "    END CASE;\n";
}

// The statement's body, after CREATE [OR REPLACE] and before the comment: the same on both
// servers, so that its hash says whether the layout changed.
std::string procedure_body(const TopicLayout& layout) {
  const std::string& topic = layout.info.name;
  const unsigned group = layout.allocator().number;
  const std::vector<unsigned> here = partitions_here(layout);
  const auto insert = [&](unsigned p) {
    return fmt::format(
        "INSERT INTO {} (visible_at, enqueued_at, msg_key, payload, {}) "
        "VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);",
        topic_tables(topic, group, p).queue, kSendFence);
  };
  const std::string inserts = here.empty() ? "" : into_one_of(here, insert);
  const std::string channel = wait_channel(topic, group);
  // No partition here (a sharded topic's other servers hold them): txmq_send says so.
  const std::string fast_path_off = here.empty() ? " OR TRUE" : "";
  return fmt::format(
      R"(PROCEDURE {name}(IN p_payload LONGBLOB, IN p_options LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  -- Options, a NULL payload, one over the limit: txmq_send's checks and paths.
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > {limit}{off} THEN
    CALL txmq_send('{topic}', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    -- No send fence (1054: a change of groups or shard map dropped it) or no table (1146): the
    -- layout moved on since this text; txmq_send reads it.
    DECLARE EXIT HANDLER FOR 1054, 1146 SET v_id = NULL;
{inserts}    SET v_id = LAST_INSERT_ID();
  END;
  IF v_id IS NULL THEN
    CALL txmq_send('{topic}', p_payload, NULL);
    LEAVE proc;
  END IF;
  -- Counted in the session, and into txmq_sql_counts at its first, every 32nd, and in a later
  -- second of the clock than the last (whole seconds: MySQL compares these as integers). A write
  -- per send cost 10-15 % of a send's speed (docs/metrics.md says what this leaves uncounted).
  -- Written as txmq_send writes its count (txmq_sql_counts, InnoDB: in the caller's transaction,
  -- else a commit of its own, once per 32 sends or second). A write that fails must not fail the
  -- send: the count waits for a later one.
  SET @txmq_sent_{topic} = IFNULL(@txmq_sent_{topic}, 0) + 1;
  IF @txmq_sent_{topic} >= 32 OR IFNULL(@txmq_sent_at_{topic}, 0) <= UNIX_TIMESTAMP() - 1 THEN
    BEGIN
      DECLARE EXIT HANDLER FOR SQLEXCEPTION SET @txmq_sent_at_{topic} = UNIX_TIMESTAMP();
      INSERT INTO txmq_sql_counts (topic, grp, metric, conn, value)
        VALUES ('{topic}', '', 'sent', CONNECTION_ID(), @txmq_sent_{topic})
        ON DUPLICATE KEY UPDATE value = value + VALUES(value);
      SET @txmq_sent_{topic} = 0, @txmq_sent_at_{topic} = UNIX_TIMESTAMP();
    END;
  END IF;
  IF EXISTS (SELECT 1 FROM txmq_waiters WHERE topic = '{channel}') THEN
    CALL txmq_i_wake('{channel}', 1);
  END IF;
  SELECT v_id AS id;
END)",
      fmt::arg("name", send_procedure_name(topic)), fmt::arg("topic", topic),
      fmt::arg("limit", layout.info.options.max_payload_bytes), fmt::arg("off", fast_path_off),
      fmt::arg("inserts", inserts), fmt::arg("channel", channel));
}

// The batch's body: txmq_batch_to_<topic>(messages), a JSON array of strings in one INSERT ...
// SELECT from JSON_TABLE, its ids by RETURNING, on MariaDB; on MySQL (no RETURNING, and lock
// mode 2 interleaves an INSERT ... SELECT's ids with others') it hands every call to
// txmq_send_batch, so that the name works on both.
std::string batch_body(const TopicLayout& layout, bool mysql) {
  const std::string& topic = layout.info.name;
  const std::string name = batch_procedure_name(topic);
  const std::string head = fmt::format(
      "PROCEDURE {}(IN p_messages LONGTEXT CHARACTER SET utf8mb4)\n"
      "  MODIFIES SQL DATA SQL SECURITY DEFINER\n",
      name);
  const std::vector<unsigned> here = partitions_here(layout);
  if (mysql || here.empty()) {
    return head + fmt::format("BEGIN\n  CALL txmq_send_batch('{}', p_messages);\nEND", topic);
  }
  const unsigned group = layout.allocator().number;
  // A payload is never longer than its JSON string (quotes and escapes): the size check above
  // let every one through the limit.
  const auto insert = [&](unsigned p, std::string_view returning) {
    return fmt::format(
        "INSERT INTO {} (visible_at, enqueued_at, msg_key, payload, {}) "
        "SELECT UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, CAST(j.s AS BINARY), NULL "
        "FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY, "
        "s LONGTEXT CHARACTER SET utf8mb4 PATH '$')) AS j ORDER BY j.n{};",
        topic_tables(topic, group, p).queue, kSendFence, returning);
  };
  const std::string returning =
      into_one_of(here, [&](unsigned p) { return insert(p, " RETURNING id"); });
  const std::string inserts = into_one_of(here, [&](unsigned p) { return insert(p, ""); });
  const std::string channel = wait_channel(topic, group);
  return head + fmt::format(
      R"(proc: BEGIN
  DECLARE v_count INT DEFAULT 0;
  DECLARE v_others INT DEFAULT 1;
  DECLARE v_longest BIGINT DEFAULT 0;
  DECLARE v_stale TINYINT DEFAULT 0;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_first BIGINT UNSIGNED;
  -- One pass: every message a string, none longer than the limit (as JSON text, which is never
  -- shorter than the payload), an array (a valid document that starts with '['). Anything
  -- else, malformed JSON included, goes to txmq_send_batch, which checks and says why.
  BEGIN
    DECLARE EXIT HANDLER FOR SQLEXCEPTION SET v_count = 0;
    SELECT COUNT(*), SUM(JSON_TYPE(j.v) <> 'STRING'), MAX(LENGTH(j.v)) - 2
      INTO v_count, v_others, v_longest
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (v JSON PATH '$')) AS j;
  END;
  IF v_count NOT BETWEEN 1 AND 10000 OR v_others > 0 OR v_longest > {limit}
     OR NOT (p_messages REGEXP '^[[:space:]]*[[]') OR NOT JSON_VALID(p_messages) THEN
    CALL txmq_send_batch('{topic}', p_messages);
    LEAVE proc;
  END IF;
  -- In the caller's transaction the ids are answered as the rows are written (RETURNING): the
  -- caller's COMMIT decides. Outside one, in a transaction of this call's, answered after its
  -- COMMIT, computed from the first id (one block under AUTO-INC lock modes 0 and 1); mode 2
  -- (Galera's) interleaves them: txmq_send_batch.
  CALL txmq_i_in_transaction(v_in);
  IF v_in = 0 AND @@innodb_autoinc_lock_mode > 1 THEN
    CALL txmq_send_batch('{topic}', p_messages);
    LEAVE proc;
  END IF;
  IF v_in = 0 THEN
    START TRANSACTION;
  END IF;
  BEGIN
    -- No send fence (a change of groups or shard map) or no table: txmq_send_batch reads the
    -- layout. (Raised when the statement opens, before any row or id.)
    DECLARE EXIT HANDLER FOR 1054, 1146 SET v_stale = 1;
    IF v_in = 1 THEN
{returning}    ELSE
{inserts}      SET v_first = LAST_INSERT_ID();
    END IF;
  END;
  IF v_stale = 1 THEN
    IF v_in = 0 THEN
      ROLLBACK;
    END IF;
    CALL txmq_send_batch('{topic}', p_messages);
    LEAVE proc;
  END IF;
  -- The count, as txmq_send_batch's, in the same transaction (a failure leaves it in the
  -- session for the next fast send).
  BEGIN
    DECLARE EXIT HANDLER FOR SQLEXCEPTION SET @txmq_sent_{topic} = IFNULL(@txmq_sent_{topic}, 0) + v_count;
    INSERT INTO txmq_sql_counts (topic, grp, metric, conn, value)
      VALUES ('{topic}', '', 'sent', CONNECTION_ID(), v_count)
      ON DUPLICATE KEY UPDATE value = value + VALUES(value);
  END;
  IF EXISTS (SELECT 1 FROM txmq_waiters WHERE topic = '{channel}') THEN
    CALL txmq_i_wake('{channel}', v_count);
  END IF;
  IF v_in = 0 THEN
    COMMIT;
    SELECT v_first + (j.n - 1) * @@SESSION.auto_increment_increment AS id
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY)) AS j ORDER BY j.n;
  END IF;
END)",
      fmt::arg("topic", topic), fmt::arg("limit", layout.info.options.max_payload_bytes),
      fmt::arg("inserts", inserts), fmt::arg("returning", returning),
      fmt::arg("channel", channel));
}

std::string comment_for(std::string_view topic, std::string_view body) {
  return fmt::format("{}{} (text {:016x})", kCommentPrefix, topic, text_hash(body));
}

// The comment of procedure `name`, or nothing when there is none.
std::optional<std::string> procedure_comment(Connection& c, const std::string& name) {
  const Result now = c.execute(
      "SELECT ROUTINE_COMMENT FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = "
      "DATABASE() AND ROUTINE_NAME = ? AND ROUTINE_TYPE = 'PROCEDURE'",
      {name});
  if (now.rows.empty()) return std::nullopt;
  return now.rows[0].bytes(0);
}

// Routine DDL waits for the transactions that called the routine (their metadata lock), and
// every new CALL queues behind it: at most this long, as the send fences' ALTERs.
constexpr int kRoutineLockWaitSeconds = 2;

// Makes procedure `name` of `topic` have `body`, unless it has (its comment says so). Throws
// when it could not (no privilege, a lock wait timeout, the connection).
void install_procedure(Connection& c, std::string_view topic, const std::string& name,
                       const std::string& body) {
  const std::optional<std::string> comment = procedure_comment(c, name);
  const bool exists = comment.has_value();
  if (exists && *comment == comment_for(topic, body)) return;
  const std::int64_t lock_wait =
      c.execute("SELECT @@SESSION.lock_wait_timeout", {}).rows.at(0).i64(0);
  c.query(fmt::format("SET SESSION lock_wait_timeout = {}", kRoutineLockWaitSeconds));
  const ScopeExit restore([&] {
    try {
      c.query(fmt::format("SET SESSION lock_wait_timeout = {}", lock_wait));
    } catch (const Error&) {
    }
  });
  {
    // The comment goes with the characteristics, before BEGIN.
    const std::string marker = "  MODIFIES SQL DATA SQL SECURITY DEFINER\n";
    std::string text = body;
    text.insert(body.find(marker) + marker.size(),
                fmt::format("  COMMENT '{}'\n", comment_for(topic, body)));
    text = (c.server().mysql ? "CREATE " : "CREATE OR REPLACE ") + text;
    if (!c.server().mysql || !exists) {
      c.query(text);
      return;
    }
    // MySQL: DROP and CREATE, which drops the grants on it: given again.
    std::vector<std::pair<std::string, std::string>> grantees;
    try {
      const Result r = c.execute(
          "SELECT User, Host FROM mysql.procs_priv WHERE Db = DATABASE() AND Routine_name = ? "
          "AND Routine_type = 'PROCEDURE' AND FIND_IN_SET('Execute', Proc_priv) > 0",
          {name});
      for (const Row& row : r.rows) grantees.emplace_back(row.bytes(0), row.bytes(1));
    } catch (const Error&) {
      // Not readable by this user: the grants are not given again (docs/sql.md says so).
    }
    c.query(fmt::format("DROP PROCEDURE IF EXISTS {}", name));
    c.query(text);
    for (const auto& [user, host] : grantees) {
      if (user.find('\\') != std::string::npos || host.find('\\') != std::string::npos) continue;
      try {
        c.query(fmt::format("GRANT EXECUTE ON PROCEDURE {} TO {}@{}", name,
                            string_literal(user), string_literal(host)));
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace

std::string send_procedure_name(std::string_view topic) {
  check_topic_name(topic);
  return fmt::format("txmq_send_to_{}", topic);
}

std::string batch_procedure_name(std::string_view topic) {
  check_topic_name(topic);
  return fmt::format("txmq_batch_to_{}", topic);
}

bool refresh_send_procedure(Connection& c, const std::optional<TopicLayout>& layout) {
  // A topic in shared storage has none: DDL is what shared storage avoids (txmq_send serves it).
  if (!layout || layout->groups.empty() || layout->shared) return true;
  const std::string& topic = layout->info.name;
  const std::string send = send_procedure_name(topic);
  const std::string batch = batch_procedure_name(topic);
  const std::string send_text = procedure_body(*layout);
  const std::string batch_text = batch_body(*layout, c.server().mysql);
  try {
    if (!routines_installed(c)) return true;
    install_procedure(c, topic, send, send_text);
    install_procedure(c, topic, batch, batch_text);
    return true;
  } catch (const Error&) {
    // No CREATE ROUTINE, a call's transaction held it past the wait, or the server went away:
    // txmq_send serves the topic, unless an older text is left.
  }
  try {
    const std::optional<std::string> a = procedure_comment(c, send);
    const std::optional<std::string> b = procedure_comment(c, batch);
    return (!a || *a == comment_for(topic, send_text)) && (!b || *b == comment_for(topic, batch_text));
  } catch (const Error&) {
    return false;
  }
}

void drop_send_procedure(Connection& c, std::string_view topic) {
  for (const std::string& name : {send_procedure_name(topic), batch_procedure_name(topic)}) {
    try {
      c.query(fmt::format("DROP PROCEDURE IF EXISTS {}", name));
    } catch (const Error&) {
    }
  }
}

}  // namespace txmq::internal
