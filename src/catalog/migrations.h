// The schema's migrations, one step per version: each can run again after an interruption.
#pragma once


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

}  // namespace txmq::internal
