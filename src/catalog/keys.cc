// Keyed FIFO: messages that share a key are delivered one at a time, in the order their sends
// committed.
//
// Only a key's current message (its *head*) is in the queue table; the ones behind it wait in
// the parked table and are moved in, one at a time, when the head is finished (acknowledged or
// dead-lettered). Claims therefore never see a blocked message: they stay the same
// primary-key walk as without keys, whatever the number of keys or of messages behind a busy
// key. Keyed messages pay instead, at send and at finish, with a few statements on the key's
// row, whose lock orders racing producers and consumers of one key.
//
// The key row counts `heads` (messages of the key in the queue table: one, or several sent
// before schema version 4) and `parked`; it exists while either is above zero.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>

#include "catalog/keys.h"

#include "db/sql.h"

namespace txmq::internal {
namespace {

Result for_keys(Connection& c, std::string_view sql, const std::vector<std::string_view>& keys) {
  return in_lists(c, sql, std::vector<Param>(keys.begin(), keys.end()));
}

}  // namespace

void order_keyed(Connection& c, const TopicTables& t,
                 const std::vector<std::pair<std::string_view, std::uint64_t>>& keyed) {
  if (keyed.empty()) return;
  std::map<std::string_view, std::vector<std::uint64_t>> by_key;  // ids in send order
  for (const auto& [key, id] : keyed) by_key[key].push_back(id);
  std::vector<std::string_view> keys;
  keys.reserve(by_key.size());
  for (const auto& entry : by_key) keys.push_back(entry.first);

  // A new key row takes the first message as its head; an existing one parks them all. Key
  // order is the lock order of every transaction that touches several keys.
  in_chunks(c, keys.size(),
            fmt::format("INSERT INTO {} ({}msg_key, heads, parked) VALUES ", t.keys, t.q_col),
            fmt::format("({}?, 1, ?)", t.q_val), " ON DUPLICATE KEY UPDATE parked = parked + VALUES(heads) + VALUES(parked)",
            [&](std::size_t i, std::vector<Param>& params) {
              params.push_back(keys[i]);
              params.push_back(static_cast<std::int64_t>(by_key.at(keys[i]).size() - 1));
            });
  // Read back under the lock the upsert took: a row that was new has exactly n - 1 parked
  // (an existing one has at least n, since it had a message before).
  Result r = for_keys(c,
                      fmt::format("SELECT msg_key, parked FROM {} FORCE INDEX (PRIMARY) WHERE "
                                  "{}msg_key IN {{}} FOR UPDATE",
                                  t.keys, t.q_and),
                      keys);
  std::vector<Param> to_park;
  for (const Row& row : r.rows) {
    const std::vector<std::uint64_t>& ids = by_key.at(row.bytes(0));
    const bool was_new = row.u64(1) == ids.size() - 1;
    for (std::size_t i = was_new ? 1 : 0; i < ids.size(); ++i) to_park.push_back(ids[i]);
  }
  if (to_park.empty()) return;
  // Parked in id order, which is send order within this transaction; park_id then keeps the
  // order across transactions.
  in_lists(c,
           fmt::format("INSERT INTO {} ({}msg_key, id, visible_at, enqueued_at, payload, "
                       "attributes) SELECT {}msg_key, id, visible_at, enqueued_at, payload, "
                       "attributes FROM {} WHERE {}id IN {{}} ORDER BY id",
                       t.parked, t.q_col, t.q_val, t.queue, t.q_and),
           to_park);
  delete_in_lists(c, t.queue, "id", std::move(to_park), t.q_and);
}

std::vector<std::uint64_t> finish_keyed(Connection& c, const TopicTables& t,
                                        const std::vector<std::string>& finished_keys) {
  if (finished_keys.empty()) return {};
  std::map<std::string_view, std::uint64_t> counts;
  for (const std::string& key : finished_keys) counts[key]++;
  std::vector<std::string_view> keys;
  for (const auto& [key, n] : counts) keys.push_back(key);

  // Lock the key rows (in key order, the lock order) and read them; what each needs is decided
  // here, so a key row costs one statement more at most (the first version decremented every
  // row, read them back and ran a DELETE for emptied rows whether or not any were).
  // FORCE INDEX: on a small table MariaDB scans all of it (EXPLAIN: type ALL for 10 keys of
  // 20), and a locking scan waits on every key another transaction holds: two held batches'
  // commits deadlocked on it.
  Result state = for_keys(c,
                          fmt::format("SELECT msg_key, heads, parked FROM {} FORCE INDEX (PRIMARY) "
                                      "WHERE {}msg_key IN {{}} FOR UPDATE",
                                      t.keys, t.q_and),
                          keys);
  std::vector<std::string_view> promote;   // its last head finished, messages wait behind it
  std::vector<std::string_view> emptied;   // its last head finished, nothing waits: the row goes
  for (const Row& row : state.rows) {
    const auto it = counts.find(row.bytes(0));
    if (it == counts.end()) continue;
    const std::uint64_t heads = row.u64(1);
    const std::uint64_t left = heads - std::min(heads, it->second);
    if (left > 0) {  // several heads of one key were sent before schema version 4
      c.execute(fmt::format("UPDATE {} SET heads = ? WHERE {}msg_key = ?", t.keys, t.q_and),
                {static_cast<std::int64_t>(left), it->first});
    } else if (row.u64(2) > 0) {
      promote.push_back(it->first);
    } else {
      emptied.push_back(it->first);
    }
  }
  std::vector<std::uint64_t> promoted;
  if (!promote.empty()) {
    Result next = for_keys(c,
                           fmt::format("SELECT msg_key, MIN(park_id) FROM {} WHERE {}msg_key "
                                       "IN {{}} GROUP BY msg_key",
                                       t.parked, t.q_and),
                           promote);
    std::vector<Param> park_ids;
    std::vector<std::string_view> with_next;  // keys that have a message to move in
    for (const Row& row : next.rows) {
      park_ids.push_back(row.u64(1));
      with_next.push_back(counts.find(row.bytes(0))->first);
    }
    if (!park_ids.empty()) {
      // The message keeps its id; its visible_at is its send's (a delay still counts).
      in_lists(c,
               fmt::format("INSERT INTO {} ({}id, visible_at, attempts, enqueued_at, msg_key, "
                           "payload, attributes) SELECT {}id, visible_at, 0, enqueued_at, "
                           "msg_key, payload, attributes FROM {} WHERE {}park_id IN {{}}",
                           t.queue, t.q_col, t.q_val, t.parked, t.q_and),
               park_ids);
      Result ids =
          for_in_lists(park_ids, [&](const std::string& list, std::vector<Param>& params,
                                     std::size_t count) {
            params.emplace_back(static_cast<std::int64_t>(count));
            return delete_returning(
                c, t.parked, "WHERE " + t.q_and + "park_id IN " + list + walk_keys("park_id"),
                params, "id", "park_id", t.q_and);
          });
      for (const Row& row : ids.rows) promoted.push_back(row.u64(0));
      for_keys(c,
               fmt::format("UPDATE {} SET heads = 1, parked = parked - 1 WHERE {}msg_key IN {{}}",
                           t.keys, t.q_and),
               with_next);
    }
    if (with_next.size() < promote.size()) {
      // Counted as parked, none found (not expected): the row stays, with no head, as before.
      std::vector<std::string_view> none;
      std::sort(with_next.begin(), with_next.end());
      std::set_difference(promote.begin(), promote.end(), with_next.begin(), with_next.end(),
                          std::back_inserter(none));
      for_keys(c, fmt::format("UPDATE {} SET heads = 0 WHERE {}msg_key IN {{}}", t.keys, t.q_and),
               none);
    }
  }
  if (!emptied.empty()) {
    delete_in_lists(c, t.keys, "msg_key", std::vector<Param>(emptied.begin(), emptied.end()),
                    t.q_and);
  }
  return promoted;
}

}  // namespace txmq::internal
