// The SQL interface (docs/sql.md): stored procedures in the queue's database that applications
// call inside their own transactions. Their text is src/catalog/routines.sql.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "db/connection.h"

namespace txmq::internal {

// Drops and creates every routine (and the txmq_takes table), each statement on its own:
// routines are DDL. They run as their definer, the user that installs them. Returns false, with
// the server's reason in `why`, when that user may not create routines (no CREATE ROUTINE or
// ALTER ROUTINE): then applications have no SQL interface (or keep an earlier one) until someone
// who may runs `txmq sql install`. Procedures only: on MySQL with binary logging, a function
// would need SUPER or log_bin_trust_function_creators, which managed servers do not grant.
bool install_routines(Connection& c, std::string* why = nullptr);
// Forgets the counted takes (txmq_takes) of a queue table that is dropped: a table created
// again under its name starts its ids anew.
void forget_takes(Connection& c, const std::string& queue_table);
// Forgets the SQL interface's counts (txmq_sql_counts) of a topic, or of one of its groups, that
// is dropped: a topic created again under its name starts its totals anew.
void forget_sql_counts(Connection& c, std::string_view topic,
                       std::optional<std::string_view> group = std::nullopt);
// Whether this txmq's routines are in the connection's database (as the installing user sees
// them): the last one that install_routines creates, whose name says which text they are, is
// there. False for a database without them, or with an earlier text.
bool routines_installed(Connection& c);

}  // namespace txmq::internal
