#include "catalog/routines.h"

#include <fmt/format.h>

#include <algorithm>

#include "catalog/routines_sql.h"
#include "txmq/error.h"

namespace txmq::internal {
namespace {

// The procedure routines.sql creates last, whose name changes with the file's text.
constexpr std::string_view kRoutinesMarker = "txmq_i_routines_4";

// The errors that say "this user may not": not installed, nothing else wrong.
constexpr unsigned kNotAllowed[] = {
    1044,  // access denied to the database
    1142,  // a command denied on a table
    1227,  // needs SUPER (or another dynamic privilege)
    1370,  // ALTER ROUTINE denied
    1419,  // (a function under binary logging: none is made since the routines of schema 14)
};

// routines.sql as this server takes it: MySQL 9 has no MD5(); MariaDB has no
// @@transaction_isolation before 11.1, has INSERT ... RETURNING (a batch's ids), and
// its SLEEP is not safe to KILL (waiters.cc): a waiting take waits in MASTER_GTID_WAIT for a
// GTID that never comes, which a KILL ends at once (error 1317, which the take handles).
std::string routines_for(const Connection& c) {
  std::string text(kRoutinesSql);
  const auto replace = [&](std::string_view from, std::string_view to) {
    std::size_t at = text.find(from);
    if (at == std::string::npos) throw Error(Errc::kInternal, fmt::format("routines.sql lacks {}", from));
    for (; at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  };
  if (c.server().mysql) {
    // MySQL 9 has no MD5(): txmq_sqs_send answers its MD5s as NULL there.
    replace("MD5(payload) AS MD5OfMessageBody", "NULL AS MD5OfMessageBody");
    replace("SELECT MD5(GROUP_CONCAT(", "SELECT IF(1, NULL, GROUP_CONCAT(");
    return text;
  }
  replace("@@SESSION.transaction_isolation", "@@SESSION.tx_isolation");
  replace("DECLARE v_returning TINYINT DEFAULT 0;", "DECLARE v_returning TINYINT DEFAULT 1;");
  replace("SELECT SLEEP(v_slice) INTO v_r;",
          "SELECT MASTER_GTID_WAIT('4294967295-1-18446744073709551615', v_slice) INTO v_r;");
  return text;
}

}  // namespace

bool install_routines(Connection& c, std::string* why) {
  constexpr std::string_view kSeparator = "\n$$\n";
  const std::string text = routines_for(c);
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t end = rest.find(kSeparator);
    std::string_view statement = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + kSeparator.size());
    // A statement is its text after the file's leading comments.
    const bool empty = std::all_of(statement.begin(), statement.end(), [](char ch) {
      return ch == ' ' || ch == '\n' || ch == '\t';
    });
    if (empty) continue;
    try {
      c.query(std::string(statement));
    } catch (const Error& e) {
      if (std::find(std::begin(kNotAllowed), std::end(kNotAllowed), e.server_errno()) ==
          std::end(kNotAllowed)) {
        throw;
      }
      if (why != nullptr) *why = e.what();
      return false;
    }
  }
  return true;
}

void forget_takes(Connection& c, const std::string& queue_table) {
  try {
    c.execute("DELETE FROM txmq_takes WHERE queue = ?", {queue_table});
  } catch (const Error& e) {
    if (!is_missing_table(e.server_errno())) throw;  // none: no SQL interface installed
  }
}

void forget_sql_counts(Connection& c, std::string_view topic,
                       std::optional<std::string_view> group) {
  try {
    if (!group) {
      c.execute("DELETE FROM txmq_sql_counts WHERE topic = ?", {topic});
    } else {
      c.execute("DELETE FROM txmq_sql_counts WHERE topic = ? AND grp = ?", {topic, *group});
    }
  } catch (const Error& e) {
    if (!is_missing_table(e.server_errno())) throw;  // none: no SQL interface installed
  }
}

bool routines_installed(Connection& c) {
  return c.execute("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = "
                   "DATABASE() AND ROUTINE_NAME = ?",
                   {std::string(kRoutinesMarker)})
             .rows.at(0)
             .i64(0) > 0;
}

}  // namespace txmq::internal
