// The SQL interface (docs/sql.md): stored procedures in the queue's database that applications
// call inside their own transactions. Their text is src/catalog/routines.sql.
#pragma once

#include <string>

#include "db/connection.h"

namespace txmq::internal {

// Drops and creates every routine (and the txmq_takes table), each statement on its own:
// routines are DDL. They run as their definer, the user that installs them. Returns false, with
// the server's reason in `why`, when that user may not create routines (no CREATE ROUTINE, or
// MySQL with binary logging and neither SUPER nor log_bin_trust_function_creators): then
// applications have no SQL interface until someone who may runs `txmq sql install`.
bool install_routines(Connection& c, std::string* why = nullptr);
// Forgets the counted takes (txmq_takes) of a queue table that is dropped: a table created
// again under its name starts its ids anew.
void forget_takes(Connection& c, const std::string& queue_table);
// Whether txmq_send exists in the connection's database (as the installing user sees it).
bool routines_installed(Connection& c);

}  // namespace txmq::internal
