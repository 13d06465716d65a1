// The per-topic sends of the SQL interface: `txmq_send_to_<topic>(payload, options)`, a procedure
// generated for each topic with the topic's queue tables named in static SQL (docs/sql.md, "The
// fast send"; docs/design/sql-speed.md says why).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "catalog/topic_catalog.h"
#include "db/connection.h"

namespace txmq::internal {

// The procedure's name: txmq_send_to_<topic> (topic names are [a-z0-9_], at most 48 characters:
// 61 at most). "_to_" keeps it apart from the interface's own names (txmq_send_batch).
std::string send_procedure_name(std::string_view topic);

// The batch's: txmq_batch_to_<topic>(messages) (62 characters at most).
std::string batch_procedure_name(std::string_view topic);

// Makes the topic's procedures (its send and its batch) say what `layout` says, unless it says it already (its comment
// carries a hash of its text). Best effort: without the SQL interface's current routines, or
// without CREATE ROUTINE, there is none, and txmq_send serves every topic. The procedure is
// correct when stale: its INSERT names the send fence, which a change of groups or shard map
// drops first, and then it hands the call to txmq_send. REQUIRES: the caller holds the topic's
// layout lock (or made the topic), `layout` read after it last renewed it. DDL: commits what
// `c` had open. On MySQL, which has no CREATE OR REPLACE PROCEDURE, a change drops and creates
// it (a CALL in between gets 1305) and grants EXECUTE again to those who had it.
// Returns false when an older text is left (it could not be remade): a caller about to lower
// the payload limit must not go on, since the fence does not cover the limit.
bool refresh_send_procedure(Connection& c, const std::optional<TopicLayout>& layout);

// Drops the topic's procedures (a dropped topic). Best effort.
void drop_send_procedure(Connection& c, std::string_view topic);

}  // namespace txmq::internal
