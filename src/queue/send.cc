#include <fmt/format.h>

#include "queue/operations.h"

namespace txmq::internal {
namespace {

constexpr Micros kMaxDelay = std::chrono::hours(24 * 366);
// Rows per multi-row INSERT: large enough that a batch costs few round trips, small enough that
// the statement stays well inside max_allowed_packet and the 65,535 placeholder limit.
constexpr std::size_t kMaxRowsPerInsert = 1000;
constexpr std::size_t kRowOverheadBytes = 64;

void check_message(const TopicInfo& topic, std::string_view payload,
                   const std::optional<std::string>& key, Micros delay, std::size_t index,
                   bool batch) {
  std::string where = batch ? fmt::format("message {} of the batch: ", index + 1) : "";
  if (payload.size() > topic.options.max_payload_bytes) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{}payload of {} bytes is over topic '{}''s limit of {} bytes", where,
                            payload.size(), topic.name, topic.options.max_payload_bytes));
  }
  if (key && key->size() > kMaxKeyBytes) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("{}key of {} bytes is over the limit of {} bytes", where, key->size(),
                            kMaxKeyBytes));
  }
  if (delay < Micros{0} || delay > kMaxDelay) {
    throw Error(Errc::kInvalidArgument, fmt::format("{}delay must be from 0 to 366 days", where));
  }
}

Param key_param(const std::optional<std::string>& key) {
  if (!key) return nullptr;
  return std::string_view(*key);
}

std::string insert_sql(const std::string& table, std::size_t rows, bool returning) {
  std::string sql = fmt::format("INSERT INTO {} (visible_at, enqueued_at, msg_key, payload) VALUES ",
                                table);
  for (std::size_t i = 0; i < rows; ++i) {
    sql += i == 0 ? "" : ",";
    sql += "(NOW(6) + INTERVAL ? MICROSECOND, NOW(6), ?, ?)";
  }
  if (returning) sql += " RETURNING id";
  return sql;
}

}  // namespace

std::uint64_t send_one(QueueContext& q, std::string_view topic, std::string_view payload,
                       const SendOptions& options) {
  TopicInfo info = q.catalog.get(topic);
  check_message(info, payload, options.key, options.delay, 0, false);
  const std::string sql = insert_sql(topic_tables(topic).queue, 1, false);
  return on_topic(q, topic, [&] {
    // Autocommit: one round trip. A reply lost on the way back is reported as kCommitUnknown.
    return q.pool.run(OnLostConnection::kCommitUnknown, [&](Connection& c, const Attempt&) {
      Param params[] = {static_cast<std::int64_t>(options.delay.count()), key_param(options.key),
                        payload};
      return c.execute(sql, params).insert_id;
    });
  });
}

std::vector<std::uint64_t> send_batch(QueueContext& q, std::string_view topic,
                                      std::span<const OutgoingMessage> messages) {
  TopicInfo info = q.catalog.get(topic);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    check_message(info, messages[i].payload, messages[i].key, messages[i].delay, i, true);
  }
  if (messages.empty()) return {};
  const std::string table = topic_tables(topic).queue;

  // Cut the batch into statements by rows and bytes.
  std::vector<std::pair<std::size_t, std::size_t>> chunks;  // [begin, end)
  std::size_t begin = 0;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    std::size_t row = messages[i].payload.size() + (messages[i].key ? messages[i].key->size() : 0) +
                      kRowOverheadBytes;
    if (i > begin && (i - begin == kMaxRowsPerInsert || bytes + row > q.max_statement_bytes)) {
      chunks.emplace_back(begin, i);
      begin = i;
      bytes = 0;
    }
    bytes += row;
  }
  chunks.emplace_back(begin, messages.size());

  return on_topic(q, topic, [&] {
    return q.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      std::vector<std::uint64_t> ids;
      ids.reserve(messages.size());
      std::vector<Param> params;
      c.begin();
      for (auto [from, to] : chunks) {
        params.clear();
        for (std::size_t i = from; i < to; ++i) {
          params.push_back(static_cast<std::int64_t>(messages[i].delay.count()));
          params.push_back(key_param(messages[i].key));
          params.push_back(std::string_view(messages[i].payload));
        }
        Result r = c.execute(insert_sql(table, to - from, true), params);
        if (r.rows.size() != to - from) {
          throw Error(Errc::kInternal, "INSERT ... RETURNING returned a wrong number of ids");
        }
        for (const Row& row : r.rows) ids.push_back(row.u64(0));
      }
      c.commit();
      return ids;
    });
  });
}

}  // namespace txmq::internal
