#pragma once
// The references txmq is measured against, each written here with its own SQL (not txmq's):
// the raw INSERT limit of the server, and the claim of the seed article
// (../shared/seeds/003: UPDATE ... SET owner ... LIMIT 10, SELECT ... WHERE owner, DELETE ...).
// They talk to the server through txmq's thin connection layer (prepared statements), the same
// client code txmq itself uses, so that neither side gets a cheaper client.

#include <cstddef>

#include "db/dsn.h"
#include "harness.h"

namespace txmq::bench {

// Creates (or empties) the reference tables.
void prepare_reference_tables(const internal::Dsn& dsn);
void drop_reference_tables(const internal::Dsn& dsn);

// Autocommit single-row INSERTs from `threads` connections for `seconds`.
Measured raw_insert(const internal::Dsn& dsn, int threads, double seconds, std::size_t payload);

// Multi-row INSERTs of `rows_per_txn` rows, one transaction each, from one connection.
Measured raw_multirow(const internal::Dsn& dsn, int rows, int rows_per_txn, std::size_t payload);

// Fills the seed's table with `backlog` rows (multi-row inserts; not timed).
void seed_fill(const internal::Dsn& dsn, int backlog, std::size_t payload);

// Drains the seed's table with `consumers` connections until it is empty or `cap_seconds` pass.
Measured seed_drain(const internal::Dsn& dsn, int consumers, double cap_seconds);

}  // namespace txmq::bench
