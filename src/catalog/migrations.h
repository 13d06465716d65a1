// The schema's migrations, one step per version: each can run again after an interruption.
#pragma once


#include <initializer_list>
#include <string>
#include <string_view>

#include "db/connection.h"

namespace txmq::internal {

// A decision per XA batch (xa_process.cc): written 'commit' by the consumer in the transaction
// that deletes the batch's messages, or 'abort' by recovery, which fences a batch whose consumer
// died before that commit. Deleted once the resource's branch is finished.
inline constexpr const char* kCreateXaTable =
    "CREATE TABLE IF NOT EXISTS txmq_xa ("
    " token BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
    " outcome ENUM('commit','abort') CHARACTER SET ascii NOT NULL,"
    " resource VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " owner_id BIGINT UNSIGNED NOT NULL,"
    " topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " grp VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " first_id BIGINT UNSIGNED NOT NULL,"
    " messages INT UNSIGNED NOT NULL,"
    " created_at DATETIME(6) NOT NULL,"
    " KEY (resource, created_at)) ENGINE=InnoDB";


// ALTER TABLE `table` (quoted) adding those of `columns` (name, definition) it lacks; nothing
// when it has them all. MariaDB: ADD COLUMN IF NOT EXISTS; MySQL has no IF NOT EXISTS, so the
// columns it has are read from information_schema first. Migrations add columns only so, and
// run on both servers.
struct ColumnToAdd {
  std::string_view name;
  std::string_view definition;  // "BIGINT UNSIGNED NOT NULL DEFAULT 0 AFTER x"
};
void add_columns(Connection& c, const std::string& table, std::initializer_list<ColumnToAdd> columns);

// Version N -> N + 1, serialised between clients by the lock on txmq_schema's row (schema.cc).
void migrate_from_2(Connection& c);
void migrate_from_3(Connection& c);
void migrate_from_4(Connection& c);
void migrate_from_5(Connection& c);
void migrate_from_6(Connection& c);
void migrate_from_7(Connection& c);
void migrate_from_8(Connection& c);
void migrate_from_9(Connection& c);
void migrate_from_10(Connection& c);
void migrate_from_11(Connection& c);
void migrate_from_12(Connection& c);
void migrate_from_13(Connection& c);
void migrate_from_14(Connection& c);
void migrate_from_15(Connection& c);

}  // namespace txmq::internal
