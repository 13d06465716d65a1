// Sends: one INSERT in autocommit, or multi-row INSERTs inside a transaction (txmq's own, the
// application's Transaction, or an enlisted connection), with deduplication keys.
//
// Times are written as UTC_TIMESTAMP(6), not NOW(6): an enlisted connection keeps the
// application's session time zone, and the tables hold UTC.
#include "engine/send.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <map>
#include <optional>
#include <unordered_map>

#include "engine/attributes.h"
#include "catalog/topic_catalog.h"
#include "db/sql.h"
#include "engine/announce.h"
#include "catalog/keys.h"
#include "engine/partitions.h"
#include "engine/queue_context.h"

namespace txmq::internal {
namespace {

constexpr Micros kMaxDelay = std::chrono::hours(24 * 366);
constexpr std::size_t kRowOverheadBytes = 64;
// Keys whose window ended this long ago are purged by sends that use keys (see purge_dedup).
constexpr auto kPurgeAfterExpiry = std::chrono::minutes(1);
constexpr int kPurgeRows = 500;

// A message's fields; the payload apart, so that a single send need not copy it.
void check_message(const TopicInfo& topic, std::string_view payload, const OutgoingMessage& m,
                   std::size_t index, bool batch) {
  // Made only for an error or for attributes, not once per message of a batch.
  const auto where = [&] {
    return batch ? fmt::format("message {} of the batch: ", index + 1) : std::string();
  };
  if (!m.attributes.empty()) check_attributes(m.attributes, where());
  // Attributes count toward the limit as SQS counts them: their names, types and values.
  const std::size_t size = payload.size() + attributes_size(m.attributes);
  if (size > topic.options.max_payload_bytes) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{}{} of {} bytes is over topic '{}''s limit of {} bytes", where(),
                            m.attributes.empty() ? "payload" : "payload with its attributes",
                            size, topic.name, topic.options.max_payload_bytes));
  }
  if (m.key && m.key->size() > kMaxKeyBytes) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{}key of {} bytes is over the limit of {} bytes", where(), m.key->size(),
                            kMaxKeyBytes));
  }
  if (m.tenant) {
    if (!topic.options.fair) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("{}topic '{}' is not fair: only a fair topic's messages have a "
                              "tenant (TopicOptions::fair, set at creation)",
                              where(), topic.name));
    }
    if (m.tenant->empty() || m.tenant->size() > kMaxKeyBytes) {
      throw Error(Errc::kInvalidArgument, fmt::format("{}tenant must be 1 to {} bytes (got {})",
                                                      where(), kMaxKeyBytes, m.tenant->size()));
    }
    if (m.key) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("{}a message has a key or a tenant, not both", where()));
    }
  }
  if (m.dedup_key && (m.dedup_key->empty() || m.dedup_key->size() > kMaxKeyBytes)) {
    throw Error(Errc::kInvalidArgument, fmt::format("{}dedup key must be 1 to {} bytes (got {})",
                                                    where(), kMaxKeyBytes, m.dedup_key->size()));
  }
  if (m.delay < Micros{0} || m.delay > kMaxDelay) {
    throw Error(Errc::kInvalidArgument, fmt::format("{}delay must be from 0 to 366 days", where()));
  }
}

Param optional_param(const std::optional<std::string>& value) {
  if (!value) return nullptr;
  return std::string_view(*value);
}

// Which columns of a send take parameters: a batch without delays or keys binds only payloads
// (a third of the parameters; send_batch of 10,000 went from 0.71-0.87x to 0.92-0.95x of raw
// multi-row INSERTs in txmq bench).
struct RowShape {
  bool delay = false;
  bool key = false;
  bool attributes = false;
  bool tenant = false;  // and its place in the fair order
};

RowShape shape_of(const std::vector<const OutgoingMessage*>& messages) {
  RowShape shape;
  for (const OutgoingMessage* m : messages) {
    shape.delay = shape.delay || m->delay != Micros{0};
    shape.key = shape.key || m->key.has_value();
    shape.attributes = shape.attributes || !m->attributes.empty();
    shape.tenant = shape.tenant || m->tenant.has_value();
  }
  return shape;
}

// `first_payload`: the first row's payload expression (a check that binds its own parameters
// before the payload's). `fenced`: the statement names the send fence (the catalog, "Send
// fences"), and fails with 1054 once the topic's layout no longer allows it.
std::string insert_sql(const TopicTables& t, std::size_t rows, RowShape shape,
                       std::string_view first_payload = "?", bool fenced = false) {
  std::string sql =
      fmt::format("INSERT INTO {} ({}visible_at, enqueued_at, msg_key, payload{}{}{}) VALUES ",
                  t.queue, t.q_col, shape.attributes ? ", attributes" : "",
                  shape.tenant ? ", tenant, fair_seq" : "",
                  fenced ? fmt::format(", {}", kSendFence) : std::string());
  auto row = [&](std::string_view payload) {
    return fmt::format(
        "({}{}, UTC_TIMESTAMP(6), {}, {}{}{}{})", t.q_val,
        shape.delay ? "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND" : "UTC_TIMESTAMP(6)",
        shape.key ? "?" : "NULL", payload, shape.attributes ? ", ?" : "",
        shape.tenant ? ", ?, ?" : "", fenced ? ", NULL" : "");
  };
  const std::string first = row(first_payload);
  const std::string next = row("?");
  sql.reserve(sql.size() + first.size() + rows * (next.size() + 1) + 16);
  for (std::size_t i = 0; i < rows; ++i) {
    if (i > 0) sql += ',';
    sql += i == 0 ? first : next;
  }
  return sql;
}

// Binds one row's parameters; the payload apart, as in check_message. `attributes` is the
// message's encoded attributes (empty: NULL), bound when the shape has them; `fair_seq` its
// place in a fair topic's order, when the shape has tenants.
void bind_row(std::vector<Param>& params, RowShape shape, const OutgoingMessage& m,
              std::string_view payload, std::string_view attributes,
              std::uint64_t fair_seq = 0) {
  if (shape.delay) params.push_back(static_cast<std::int64_t>(m.delay.count()));
  if (shape.key) params.push_back(optional_param(m.key));
  params.push_back(payload);
  if (shape.attributes) {
    params.push_back(attributes.empty() ? Param(nullptr) : Param(attributes));
  }
  if (shape.tenant) {
    params.push_back(optional_param(m.tenant));
    params.push_back(fair_seq);
  }
}

// Fair order (TopicOptions::fair): claims take a fair topic's messages by fair_seq, then id.
// Messages without a tenant get 0 (as SQS, each is a tenant of its own: none waits behind a
// backlog). A tenant's messages get consecutive places from the later of its last message
// still in the table and the lowest place taken there (the head of the line): a tenant sending
// faster than it is served runs ahead into later places, and one that comes back, or sends
// slowly, starts at the head. So while consumers fall behind, each tenant with messages waiting
// is served in turn (start-time fair queueing, with the table's head as its virtual time); when
// they keep up, the order is the order of sends. Two senders of one tenant racing may give
// equal places (ties go by id): fair order is a priority, never a lock.
std::vector<std::uint64_t> fair_places(Connection& c, const std::string& table,
                                       const std::vector<const OutgoingMessage*>& messages) {
  std::map<std::string_view, std::uint64_t> next;  // tenant -> its next place
  for (const OutgoingMessage* m : messages) {
    if (m->tenant) next.emplace(*m->tenant, 0);
  }
  std::vector<std::uint64_t> places(messages.size(), 0);
  if (next.empty()) return places;
  std::vector<std::string_view> tenants;
  for (const auto& [tenant, place] : next) tenants.push_back(tenant);
  std::uint64_t head = 1;
  // A plain read (no locks): chunks of the IN list, the head read with the first.
  for (std::size_t from = 0; from < tenants.size(); from += kMaxRowsPerStatement) {
    const std::size_t to = std::min(tenants.size(), from + kMaxRowsPerStatement);
    const std::size_t n = in_list_size(to - from);
    std::vector<Param> params(tenants.begin() + from, tenants.begin() + to);
    pad_ids(params, 0, n);
    Result r = c.execute(
        fmt::format("SELECT NULL, MIN(fair_seq) FROM {0} WHERE fair_seq > 0 UNION ALL "
                    "SELECT tenant, MAX(fair_seq) + 1 FROM {0} WHERE tenant IN {1} GROUP BY tenant",
                    table, placeholders(n)),
        params);
    for (const Row& row : r.rows) {
      if (row.null(1)) continue;
      if (row.null(0)) {
        head = std::max(head, row.u64(1));
      } else if (auto it = next.find(row.bytes(0)); it != next.end()) {
        it->second = row.u64(1);
      }
    }
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i]->tenant) continue;
    std::uint64_t& place = next.at(*messages[i]->tenant);
    place = std::max(place, head);
    places[i] = place++;
  }
  return places;
}

// Inserts the messages with multi-row INSERTs, cut by rows and bytes; returns their ids in order
// (insert_returning_ids: RETURNING on MariaDB, where reading ids from the first one measured no
// faster in bench/, send_batch of 10,000).
std::vector<std::uint64_t> insert_rows(Connection& c, const TopicTables& t,
                                       const std::vector<const OutgoingMessage*>& messages,
                                       std::size_t max_statement_bytes) {
  std::vector<std::uint64_t> ids;
  ids.reserve(messages.size());
  const RowShape shape = shape_of(messages);
  const std::vector<std::uint64_t> places =
      shape.tenant ? fair_places(c, t.queue, messages) : std::vector<std::uint64_t>();
  std::vector<Param> params;
  std::vector<std::string> encoded;  // the statement's attributes, alive while it is bound
  std::size_t begin = 0;
  while (begin < messages.size()) {
    std::size_t end = begin;
    std::size_t bytes = 0;
    while (end < messages.size() && end - begin < kMaxRowsPerStatement) {
      const OutgoingMessage& m = *messages[end];
      std::size_t row = m.payload.size() + (m.key ? m.key->size() : 0) +
                        (m.tenant ? m.tenant->size() : 0) +
                        attributes_size(m.attributes) + 4 * m.attributes.size() +
                        kRowOverheadBytes;
      if (end > begin && bytes + row > max_statement_bytes) break;
      bytes += row;
      ++end;
    }
    params.clear();
    encoded.clear();
    if (shape.attributes) {
      encoded.reserve(end - begin);
      for (std::size_t i = begin; i < end; ++i) {
        encoded.push_back(encode_attributes(messages[i]->attributes));
      }
    }
    for (std::size_t i = begin; i < end; ++i) {
      bind_row(params, shape, *messages[i], messages[i]->payload,
               shape.attributes ? std::string_view(encoded[i - begin]) : std::string_view(),
               shape.tenant ? places[i] : 0);
    }
    for (std::uint64_t id :
         insert_returning_ids(c, insert_sql(t, end - begin, shape), params, end - begin)) {
      ids.push_back(id);
    }
    begin = end;
  }
  return ids;
}

// The topic's layout as of this transaction: the cached copy when its version is current, else
// read again through c. The version is read with a shared lock on the topic's row, held until
// the transaction ends, so that no group can be created or dropped before it commits (a group
// change locks the row for update: the catalog, with_topic_fenced); a locking read also sees the
// latest committed version under an enlisted connection's REPEATABLE READ.
Topic current_layout(QueueContext& q, Connection& c, std::string_view topic) {
  Topic known = q.catalog.resolve(topic, c);
  Result r = c.execute("SELECT layout FROM txmq_topics WHERE name = ? LOCK IN SHARE MODE", {topic});
  if (r.rows.empty()) throw Error(Errc::kNotFound, fmt::format("topic '{}' does not exist", topic));
  if (r.rows[0].u64(0) == known->layout.version) return known;
  return q.catalog.reload(c, topic);
}

// Copies messages just inserted into the allocating group's queue table into another group's
// (a fair topic's with their tenants and places).
void copy_to_group(Connection& c, const TopicTables& from, const TopicTables& to,
                   const std::vector<std::uint64_t>& ids, bool fair) {
  const std::string_view columns = fair ? ", tenant, fair_seq" : "";
  in_lists(c,
           fmt::format("INSERT INTO {0} ({3}id, visible_at, enqueued_at, msg_key, payload, "
                       "attributes{2}) SELECT {4}id, visible_at, enqueued_at, msg_key, payload, "
                       "attributes{2} FROM {1} WHERE {5}id IN {{}}",
                       to.queue, from.queue, columns, to.q_col, to.q_val, from.q_and),
           std::vector<Param>(ids.begin(), ids.end()));
}

// Keyed FIFO for messages just inserted (keys.cc).
void order_fresh(Connection& c, const TopicTables& t, const std::vector<const OutgoingMessage*>& rows,
                 const std::vector<std::uint64_t>& ids) {
  std::vector<std::pair<std::string_view, std::uint64_t>> keyed;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i]->key) keyed.emplace_back(*rows[i]->key, ids[i]);
  }
  order_keyed(c, t, keyed);
}

// Inserts new messages into partition p of every group: the allocating group's table gives the
// ids, the other groups get copies; then each group orders its keyed ones.
std::vector<std::uint64_t> insert_fresh(QueueContext& q, Connection& c, const TopicLayout& layout,
                                        unsigned p,
                                        const std::vector<const OutgoingMessage*>& rows) {
  const TopicTables from = layout.tables(layout.allocator().number, p);
  std::vector<std::uint64_t> ids = insert_rows(c, from, rows, q.max_statement_bytes);
  for (const GroupEntry& g : layout.groups) {
    if (g.number != layout.allocator().number) {
      copy_to_group(c, from, layout.tables(g.number, p), ids, layout.info.options.fair);
    }
  }
  for (const GroupEntry& g : layout.groups) order_fresh(c, layout.tables(g.number, p), rows, ids);
  return ids;
}

// Deletes a bounded number of keys whose window ended over a minute ago, inside the sending
// transaction (keys that recent are left alone, so that the purge and a producer reusing a key
// rarely want the same row). An expired key still present is treated as absent, so the purge
// only reclaims space; it runs when the client's last one for the topic was over 10 s ago, or
// found more than it could take. Not on an enlisted connection: under the application's
// REPEATABLE READ, the range delete could gap-lock the end of the expiry index and hold up
// every producer's new keys until the application commits.
void purge_dedup(QueueContext& q, Connection& c, const TopicLayout& layout) {
  const TopicInfo& topic = layout.info;
  if (c.borrowed() || !q.dedup_purges.due(topic.name)) return;
  const TopicTables t = layout.tables();
  Result r = c.execute(
      fmt::format("DELETE FROM {} WHERE {}expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND "
                  "ORDER BY expires_at LIMIT {}",
                  t.dedup, t.s_and, kPurgeRows),
      {static_cast<std::int64_t>(Micros(kPurgeAfterExpiry).count())});
  q.dedup_purges.done(topic.name, r.affected_rows == static_cast<std::uint64_t>(kPurgeRows));
}

// Sends with deduplication keys, inside the caller's transaction:
//  1. upsert every distinct key in key order (a fixed lock order between racing producers):
//     a new key gets message_id 0, a key past its window is renewed with message_id 0, a key in
//     its window is left as it is. The upsert locks the key's row, so a racing producer with the
//     same key waits here until this transaction ends, then sees the key taken;
//  2. read the keys back (a locking read: the latest committed row, also under REPEATABLE READ);
//  3. insert the messages whose key has message_id 0 (and those without a key), the first of
//     each key in a batch only: later ones with the same key get its id;
//  4. write the new messages' ids into their keys.
std::vector<std::uint64_t> insert_deduplicated(QueueContext& q, Connection& c,
                                               const TopicLayout& layout, unsigned partition,
                                               const std::vector<const OutgoingMessage*>& messages) {
  const TopicInfo& topic = layout.info;
  const TopicTables t = layout.tables();
  std::map<std::string_view, std::uint64_t> keys;  // dedup key -> message id (0: new)
  for (const OutgoingMessage* m : messages) {
    if (m->dedup_key) keys.emplace(*m->dedup_key, 0);
  }
  purge_dedup(q, c, layout);
  const std::int64_t window = topic.options.dedup_window.count();
  std::vector<std::string_view> sorted;
  sorted.reserve(keys.size());
  for (const auto& [key, id] : keys) sorted.push_back(key);

  in_chunks(c, sorted.size(),
            fmt::format("INSERT INTO {} ({}dedup_key, message_id, expires_at) VALUES ", t.dedup,
                        t.s_col),
            fmt::format("({}?, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)", t.s_val),
            " ON DUPLICATE KEY UPDATE"
            " message_id = IF(expires_at <= UTC_TIMESTAMP(6), 0, message_id),"
            " expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)",
            [&](std::size_t i, std::vector<Param>& params) {
              params.push_back(sorted[i]);
              params.push_back(window);
            });

  for (std::size_t from = 0; from < sorted.size(); from += kMaxRowsPerStatement) {
    const std::size_t to = std::min(sorted.size(), from + kMaxRowsPerStatement);
    const std::size_t n = in_list_size(to - from);
    std::vector<Param> params(sorted.begin() + from, sorted.begin() + to);
    pad_ids(params, 0, n);
    // FORCE INDEX: a locking scan of a small table would wait on every key another sender holds.
    Result r = c.execute(fmt::format("SELECT dedup_key, message_id FROM {} FORCE INDEX (PRIMARY) "
                                     "WHERE {}dedup_key IN {} FOR UPDATE",
                                     t.dedup, t.s_and, placeholders(n)),
                         params);
    for (const Row& row : r.rows) keys.at(row.bytes(0)) = row.u64(1);
  }

  // Which messages are new: no dedup key, or the first of a key that has no message yet. A later
  // message with such a key gets the id of the key's first one.
  std::vector<std::size_t> fresh;                            // indexes into messages
  std::map<std::string_view, std::size_t> first_of_key;      // new key -> its first message
  std::vector<std::pair<std::size_t, std::size_t>> repeats;  // (message, first with its key)
  std::vector<std::uint64_t> ids(messages.size(), 0);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const OutgoingMessage& m = *messages[i];
    if (m.dedup_key) {
      if (const std::uint64_t existing = keys.at(*m.dedup_key); existing != 0) {
        ids[i] = existing;
        continue;
      }
      auto [it, inserted] = first_of_key.emplace(*m.dedup_key, i);
      if (!inserted) {
        repeats.emplace_back(i, it->second);
        continue;
      }
    }
    fresh.push_back(i);
  }
  std::vector<const OutgoingMessage*> rows;
  rows.reserve(fresh.size());
  for (std::size_t i : fresh) rows.push_back(messages[i]);
  const std::vector<std::uint64_t> fresh_ids = insert_fresh(q, c, layout, partition, rows);
  for (std::size_t f = 0; f < fresh.size(); ++f) ids[fresh[f]] = fresh_ids[f];
  for (auto [i, first] : repeats) ids[i] = ids[first];

  std::vector<std::pair<std::string_view, std::uint64_t>> taken;
  for (const auto& [key, first] : first_of_key) taken.emplace_back(key, ids[first]);
  in_chunks(c, taken.size(),
            fmt::format("INSERT INTO {} ({}dedup_key, message_id, expires_at) VALUES ", t.dedup,
                        t.s_col),
            fmt::format("({}?, ?, UTC_TIMESTAMP(6))", t.s_val), " ON DUPLICATE KEY UPDATE message_id = VALUES(message_id)",
            [&](std::size_t i, std::vector<Param>& params) {
              params.push_back(taken[i].first);
              params.push_back(taken[i].second);
            });
  return ids;
}

bool all_dedup_keys(std::span<const OutgoingMessage> messages) {
  return std::all_of(messages.begin(), messages.end(),
                     [](const OutgoingMessage& m) { return m.dedup_key.has_value(); });
}

}  // namespace

void PurgeSchedule::done(std::string_view topic, bool more_left) {
  std::lock_guard lock(mutex_);
  next_[std::string(topic)] = more_left ? std::chrono::steady_clock::time_point{}
                                        : std::chrono::steady_clock::now() + kEvery;
}

bool PurgeSchedule::due(std::string_view topic) {
  std::lock_guard lock(mutex_);
  auto it = next_.find(std::string(topic));
  return it == next_.end() || std::chrono::steady_clock::now() >= it->second;
}

TopicInfo check_send(QueueContext& q, std::string_view topic,
                     std::span<const OutgoingMessage> messages, Connection* through) {
  TopicInfo info = through ? q.catalog.resolve(topic, *through)->info() : q.catalog.get(topic);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    check_message(info, messages[i].payload, messages[i], i, messages.size() > 1);
  }
  return info;
}

Error not_placed_here(const TopicLayout& layout, unsigned partition) {
  return Error(Errc::kFailedPrecondition,
               fmt::format("partition {} of topic '{}' is not on this server (its placement "
                           "changed)",
                           partition, layout.info.name),
               kNotPlacedHere);
}

unsigned unkeyed_partition(QueueContext& q, const TopicLayout& layout) {
  const unsigned partitions = layout.partitions();
  if (layout.placed == kAllPartitions) {
    return static_cast<unsigned>(q.turn.fetch_add(1) % partitions);
  }
  // One of the partitions placed here, in turn.
  std::vector<unsigned> here;
  for (unsigned p = 0; p < partitions; ++p) {
    if (layout.is_placed(p)) here.push_back(p);
  }
  if (here.empty()) throw not_placed_here(layout, 0);
  return here[q.turn.fetch_add(1) % here.size()];
}

unsigned keyed_partition(const TopicLayout& layout, std::string_view key) {
  const unsigned p = partition_of_key(key, layout.partitions());
  if (!layout.is_placed(p)) throw not_placed_here(layout, p);
  return p;
}

unsigned partition_of_key(std::string_view key, unsigned partitions) {
  // FNV-1a (64 bits) of the key's bytes...
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char byte : key) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  // ...then Lamping and Veach's jump consistent hash: raising the partition count from n to m
  // moves only (m - n) / m of the keys.
  std::int64_t b = -1;
  std::int64_t j = 0;
  while (j < static_cast<std::int64_t>(partitions)) {
    b = j;
    hash = hash * 2862933555777941757ULL + 1;
    j = static_cast<std::int64_t>(static_cast<double>(b + 1) *
                                  (static_cast<double>(1LL << 31) /
                                   static_cast<double>((hash >> 33) + 1)));
  }
  return static_cast<unsigned>(b);
}

std::vector<std::uint64_t> insert_messages(QueueContext& q, Connection& c, const TopicInfo& topic,
                                           std::span<const OutgoingMessage> messages) {
  if (messages.empty()) return {};
  const Topic resolved = current_layout(q, c, topic.name);
  const TopicLayout& layout = resolved->layout;
  const unsigned partitions = layout.partitions();
  // Keyed messages go to their key's partition; the others of the call to one partition, a
  // different one each call.
  const bool any_unkeyed = std::any_of(messages.begin(), messages.end(),
                                       [](const OutgoingMessage& m) { return !m.key; });
  const unsigned spread = any_unkeyed ? unkeyed_partition(q, layout) : 0;
  std::vector<std::vector<std::size_t>> by_partition(partitions);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const unsigned p = messages[i].key ? keyed_partition(layout, *messages[i].key) : spread;
    by_partition[p].push_back(i);
  }
  std::vector<std::uint64_t> ids(messages.size(), 0);
  for (unsigned p = 0; p < partitions; ++p) {
    if (by_partition[p].empty()) continue;
    std::vector<const OutgoingMessage*> rows;
    rows.reserve(by_partition[p].size());
    for (std::size_t i : by_partition[p]) rows.push_back(&messages[i]);
    const bool dedup = std::any_of(rows.begin(), rows.end(),
                                   [](const OutgoingMessage* m) { return m->dedup_key.has_value(); });
    const std::vector<std::uint64_t> got = dedup ? insert_deduplicated(q, c, layout, p, rows)
                                                 : insert_fresh(q, c, layout, p, rows);
    for (std::size_t k = 0; k < got.size(); ++k) ids[by_partition[p][k]] = got[k];
  }
  return ids;
}

std::size_t claimable_now(std::span<const OutgoingMessage> messages) {
  return static_cast<std::size_t>(std::count_if(
      messages.begin(), messages.end(), [](const OutgoingMessage& m) { return m.delay == Micros{0}; }));
}

namespace {

// How a single send or a one-statement batch to a topic with one group guards against a change
// of the topic's groups or shard map since it read the layout (the catalog, "Send fences"):
//  1. an INSERT that names the partition's send fence, a column which exists only while the
//     layout allows this send: nothing to check, and a change drops the column (waiting for the
//     INSERTs naming it) before it commits. No column (1054; 1146 for a table gone): step 2;
//  2. an INSERT into the queue table whose first payload is NULL unless the layout version is
//     still the one read (kLayoutCheck), which the NOT NULL column refuses (1048) before
//     anything is written: for topics without fences (no ALTER privilege, no instant ALTER)
//     and during a change. The check is a locking read (the topic row's shared lock, held until the
//     statement commits), which fences it against the change's transaction (with_topic_fenced);
//     a subquery in VALUES, not INSERT ... SELECT, which takes InnoDB's table-level AUTO-INC
//     lock for the statement (innodb_autoinc_lock_mode 1) and cut send() at 16 threads to 0.40x
//     of a raw INSERT. Measured in the server alone (no round trips, no fsync): about 2.7x the
//     CPU of a bare INSERT; an INSERT naming the fence the same as a bare one (docs/benchmarks.md,
//     "Sends");
//  3. refused again (1048): the layout changed, and the transaction path reads it again.
constexpr std::string_view kLayoutCheck =
    "IF((SELECT layout FROM txmq_topics WHERE name = ? LOCK IN SHARE MODE) = ?, ?, NULL)";
constexpr unsigned kBadNull = 1048;
constexpr unsigned kNoSuchColumn = 1054;
constexpr unsigned kNoSuchTable = 1146;
constexpr unsigned kNeedReprepare = 1615;  // the table changed three times while re-preparing

// Runs `run(c)` (one INSERT) in autocommit; nullopt when the server refused it with one of
// `refused` (its guard said no).
template <typename F>
auto run_guarded(QueueContext& q, std::string_view topic, std::initializer_list<unsigned> refused,
                 F&& run) -> std::optional<decltype(run(std::declval<Connection&>()))> {
  using T = decltype(run(std::declval<Connection&>()));
  return on_topic(q, topic, [&] {
    // A reply lost on the way back is reported as kCommitUnknown.
    return q.pool.run(
        OnLostConnection::kCommitUnknown, [&](Connection& c, const Attempt&) -> std::optional<T> {
          try {
            return run(c);
          } catch (const Error& e) {
            if (std::find(refused.begin(), refused.end(), e.server_errno()) != refused.end()) {
              return std::nullopt;
            }
            throw;
          }
        });
  });
}

// Steps 1 and 2 above for one statement: `sql(into, first_payload, fenced)` makes it, `params`
// are its parameters without the check's, `check_at` where the check's two go (before the first
// payload's), `run(c, sql, params)` executes it; `fenced_sql`: step 1's statement, when the
// caller has it made already. nullopt: step 3.
template <typename Make, typename Run>
auto insert_guarded(QueueContext& q, const TopicLayout& layout, unsigned partition, const Make& sql,
                    const std::vector<Param>& params, std::size_t check_at, const Run& run,
                    const std::string* fenced_sql = nullptr)
    -> std::optional<decltype(run(std::declval<Connection&>(), std::string(), params))> {
  const std::string& topic = layout.info.name;
  const auto table = [&] { return layout.tables(layout.allocator().number, partition); };
  if (layout.send_fences) {
    const std::string fenced = fenced_sql ? std::string() : sql(table(), "?", true);
    const std::string& statement = fenced_sql ? *fenced_sql : fenced;
    auto done = run_guarded(q, topic, {kNoSuchColumn, kNoSuchTable, kNeedReprepare},
                            [&](Connection& c) { return run(c, statement, params); });
    if (done) return done;
    q.catalog.no_send_fences(topic);
  }
  const std::string checked = sql(table(), kLayoutCheck, false);
  std::vector<Param> with_check = params;
  with_check.insert(with_check.begin() + static_cast<std::ptrdiff_t>(check_at),
                    {Param(std::string_view(topic)), Param(layout.version)});
  auto done =
      run_guarded(q, topic, {kBadNull}, [&](Connection& c) { return run(c, checked, with_check); });
  if (!done) q.catalog.forget(topic);  // the layout changed since it was read
  return done;
}

// A single send's fenced statement for a partition of group `group`, made once per thread:
// formatting the table's name and the statement at every send was the largest piece of a send's
// client CPU after the socket (perf; docs/benchmarks.md, "Sends").
const std::string& single_send_sql(std::string_view topic, unsigned group, unsigned partition,
                                   const RowShape& shape) {
  constexpr std::size_t kMostKept = 1024;  // statements per thread
  thread_local std::unordered_map<std::string, std::string> made;
  thread_local std::string key;
  key.assign(topic);
  key.append(reinterpret_cast<const char*>(&group), sizeof group);
  key.append(reinterpret_cast<const char*>(&partition), sizeof partition);
  key += shape.delay ? 'd' : '-';
  if (auto it = made.find(key); it != made.end()) return it->second;
  if (made.size() >= kMostKept) made.clear();
  return made
      .emplace(key, insert_sql(topic_tables(topic, group, partition), 1, shape, "?", true))
      .first->second;
}

}  // namespace

std::uint64_t send_one(QueueContext& q, std::string_view topic, std::string_view payload,
                       const SendOptions& options) {
  if (options.dedup_key || options.key || !options.attributes.empty() || options.tenant) {
    // Key bookkeeping needs a transaction; attributes take the batch path's statement; a
    // tenant's place is read first.
    OutgoingMessage m{std::string(payload), options.key, options.delay, options.dedup_key,
                      options.attributes, options.tenant};
    return send_batch(q, topic, std::span<const OutgoingMessage>(&m, 1)).at(0);
  }
  const Topic resolved = q.catalog.resolve(topic);
  const TopicLayout& layout = resolved->layout;
  if (layout.groups.size() > 1) {  // copies for the other groups need a transaction
    OutgoingMessage m{std::string(payload), std::nullopt, options.delay, std::nullopt, {}, std::nullopt};
    return send_batch(q, topic, std::span<const OutgoingMessage>(&m, 1)).at(0);
  }
  // Otherwise one INSERT in autocommit, guarded as above: one round trip, and the payload is
  // not copied.
  const OutgoingMessage fields{{}, std::nullopt, options.delay, std::nullopt, {}, std::nullopt};
  check_message(layout.info, payload, fields, 0, false);
  const RowShape shape{options.delay != Micros{0}, false};
  const unsigned p = unkeyed_partition(q, layout);
  std::vector<Param> params;
  if (shape.delay) params.push_back(static_cast<std::int64_t>(options.delay.count()));
  params.push_back(payload);
  const std::optional<std::uint64_t> id = insert_guarded(
      q, layout, p,
      [&](const TopicTables& into, std::string_view first_payload, bool fenced) {
        return insert_sql(into, 1, shape, first_payload, fenced);
      },
      params, shape.delay ? 1 : 0,
      [](Connection& c, const std::string& sql, const std::vector<Param>& bound) {
        return c.execute(sql, bound).insert_id;
      },
      layout.send_fences ? &single_send_sql(topic, layout.allocator().number, p, shape) : nullptr);
  if (!id) {  // the layout changed: the transaction path reads it again
    OutgoingMessage m{std::string(payload), std::nullopt, options.delay, std::nullopt, {}, std::nullopt};
    return send_batch(q, topic, std::span<const OutgoingMessage>(&m, 1)).at(0);
  }
  if (options.delay == Micros{0}) announce(q, *resolved, 1);
  return *id;
}

namespace {

// A batch without keys or dedup keys, for a topic with one group, that fits one statement: one
// multi-row INSERT ... RETURNING in autocommit (one round trip and one commit, instead of BEGIN,
// the layout's SELECT, the INSERT and COMMIT; a statement is atomic, so the batch still commits
// whole or not at all), guarded as a single send (insert_guarded). nullopt: the batch takes the
// transaction path (it does not qualify, or the layout changed).
std::optional<std::vector<std::uint64_t>> send_in_one_statement(
    QueueContext& q, std::string_view topic, std::span<const OutgoingMessage> messages) {
  if (messages.size() > kMaxRowsPerStatement) return std::nullopt;
  std::size_t bytes = 0;
  for (const OutgoingMessage& m : messages) {
    if (m.key || m.dedup_key || m.tenant) return std::nullopt;
    bytes += m.payload.size() + attributes_size(m.attributes) + 4 * m.attributes.size() +
             kRowOverheadBytes;
  }
  if (bytes > q.max_statement_bytes) return std::nullopt;
  const Topic resolved = q.catalog.resolve(topic);
  const TopicLayout& layout = resolved->layout;
  if (layout.groups.size() > 1) return std::nullopt;  // copies need a transaction
  std::vector<const OutgoingMessage*> rows;
  rows.reserve(messages.size());
  for (const OutgoingMessage& m : messages) rows.push_back(&m);
  const RowShape shape = shape_of(rows);
  const unsigned p = unkeyed_partition(q, layout);
  std::vector<std::string> encoded;
  if (shape.attributes) {
    encoded.reserve(rows.size());
    for (const OutgoingMessage* m : rows) encoded.push_back(encode_attributes(m->attributes));
  }
  std::vector<Param> params;
  params.reserve(rows.size() * 3 + 2);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    bind_row(params, shape, *rows[i], rows[i]->payload,
             shape.attributes ? std::string_view(encoded[i]) : std::string_view());
  }
  using Ids = std::vector<std::uint64_t>;
  std::optional<Ids> ids = insert_guarded(
      q, layout, p,
      [&](const TopicTables& into, std::string_view first_payload, bool fenced) {
        return insert_sql(into, rows.size(), shape, first_payload, fenced);
      },
      params, shape.delay ? 1 : 0,  // the check's parameters come before the first payload
      [&](Connection& c, const std::string& sql, const std::vector<Param>& bound) {
        return insert_returning_ids(c, sql, bound, rows.size());
      });
  if (!ids) return std::nullopt;
  announce(q, *resolved, claimable_now(messages));
  return ids;
}

// Galera replicates a transaction when it commits, as one write set: a batch of 100,000
// messages of 1 kB (112 MB) held the other nodes' commits back for 2.4 s here, and a write set
// cannot exceed wsrep_max_ws_size. Streaming replication sends such a transaction in fragments
// while it runs (the batch still commits or rolls back as a whole), for batches over
// kStreamAboveBytes on a cluster.
constexpr std::size_t kStreamAboveBytes = 8 << 20;
constexpr std::size_t kFragmentBytes = 8 << 20;

bool streams(QueueContext& q, std::span<const OutgoingMessage> messages) {
  const Cluster* cluster = q.pool.cluster();
  if (cluster == nullptr || !cluster->galera()) return false;
  std::size_t bytes = 0;
  for (const OutgoingMessage& m : messages) bytes += m.payload.size();
  return bytes > kStreamAboveBytes;
}

// Turns streaming replication on for the session's next transaction, off again after it.
class StreamingReplication {
 public:
  explicit StreamingReplication(Connection& c) : c_(c) {
    c_.query(fmt::format("SET SESSION wsrep_trx_fragment_unit = 'bytes', "
                         "wsrep_trx_fragment_size = {}",
                         kFragmentBytes));
  }
  ~StreamingReplication() {
    if (c_.in_transaction()) c_.rollback();  // an exception is on its way: the pool retries
    try {
      if (!c_.broken()) c_.query("SET SESSION wsrep_trx_fragment_size = 0");
    } catch (const Error&) {
    }
  }
  StreamingReplication(const StreamingReplication&) = delete;
  StreamingReplication& operator=(const StreamingReplication&) = delete;

 private:
  Connection& c_;
};

}  // namespace

std::vector<std::uint64_t> send_batch(QueueContext& q, std::string_view topic,
                                      std::span<const OutgoingMessage> messages) {
  const TopicInfo info = check_send(q, topic, messages);
  if (messages.empty()) return {};
  if (auto ids = send_in_one_statement(q, topic, messages)) return std::move(*ids);
  const bool stream = streams(q, messages);
  auto attempt = [&] {
    return on_topic(q, topic, [&] {
      return q.pool.run(OnLostConnection::kRetry, Work::kTransaction,
                        [&](Connection& c, const Attempt&) {
                          std::optional<StreamingReplication> streaming;
                          if (stream) streaming.emplace(c);
                          c.begin();
                          std::vector<std::uint64_t> ids = insert_messages(q, c, info, messages);
                          c.commit();
                          announce(q, topic, claimable_now(messages));
                          return ids;
                        });
    });
  };
  // When every message has a dedup key, a commit whose outcome is unknown is resolved by sending
  // again: the keys make the second send return the first one's ids if it did commit.
  const int tries = all_dedup_keys(messages) ? 3 : 1;
  for (int i = 1;; ++i) {
    try {
      return attempt();
    } catch (const Error& e) {
      if (e.code() != Errc::kCommitUnknown || i >= tries) throw;
    }
  }
}

}  // namespace txmq::internal
