#include "catalog/row_lock.h"

namespace txmq::internal {

std::mt19937_64& lock_random() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return random;
}

std::string lock_token() {
  return fmt::format("{:016x}{:016x}", lock_random()(), lock_random()());
}

bool try_lock_row(Connection& c, const LockedRow& row, const Param& key, std::string_view token) {
  try {
    Result r = c.execute(
        fmt::format("UPDATE {0} SET {2} = ?, {3} = NOW(6) + INTERVAL {4} SECOND WHERE {1} = ? AND "
                    "({2} IS NULL OR {2} = ? OR {3} < NOW(6))",
                    row.table, row.key, row.by, row.until, kLockSeconds),
        {token, key, token});
    return r.affected_rows == 1;
  } catch (const Error& e) {
    if (e.code() == Errc::kAborted) return false;
    throw;
  }
}

void release_row_lock(Connection& c, const LockedRow& row, const Param& key,
                      std::string_view token) noexcept {
  if (c.in_transaction()) c.rollback();
  for (int tries = 0; tries < 3 && !c.broken(); ++tries) {
    try {
      c.execute(fmt::format("UPDATE {0} SET {2} = NULL, {3} = NULL WHERE {1} = ? AND {2} = ?",
                            row.table, row.key, row.by, row.until),
                {key, token});
      return;
    } catch (const Error& e) {
      if (e.code() != Errc::kAborted) return;
    }
  }
}

}  // namespace txmq::internal
