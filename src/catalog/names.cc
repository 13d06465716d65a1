#include "catalog/names.h"

#include <fmt/format.h>

#include "util/codec.h"
#include "txmq/error.h"

namespace txmq::internal {

bool is_valid_topic_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxTopicName) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

namespace {
void check_name(std::string_view what, std::string_view name) {
  if (is_valid_topic_name(name)) return;
  if (name.empty()) throw Error(Errc::kInvalidArgument, fmt::format("invalid {} name: it is empty", what));
  throw Error(Errc::kInvalidArgument,
              fmt::format("invalid {} name '{}': use 1 to {} characters from a-z, 0-9 and _, "
                          "starting with a letter",
                          what, util::printable(name), kMaxTopicName));
}
}  // namespace

void check_topic_name(std::string_view name) { check_name("topic", name); }
void check_group_name(std::string_view name) { check_name("group", name); }

std::string quote_identifier(std::string_view identifier) {
  return fmt::format("`{}`", identifier);
}

TopicTables topic_tables(std::string_view name, unsigned group, unsigned partition) {
  check_topic_name(name);
  if (group > kMaxGroupNumber || partition >= static_cast<unsigned>(kMaxPartitions)) {
    throw Error(Errc::kInternal, fmt::format("group {} or partition {} out of range", group,
                                             partition));
  }
  const std::string suffix =
      group == 0 && partition == 0 ? "" : fmt::format("${}_{}", group, partition);
  TopicTables t;
  t.queue = quote_identifier(fmt::format("txmq_q_{}{}", name, suffix));
  t.dead = quote_identifier(fmt::format("txmq_dlq_{}{}", name, suffix));
  t.dedup = quote_identifier(fmt::format("txmq_dd_{}", name));
  t.keys = quote_identifier(fmt::format("txmq_k_{}{}", name, suffix));
  t.parked = quote_identifier(fmt::format("txmq_kp_{}{}", name, suffix));
  t.archive = quote_identifier(fmt::format("txmq_a_{}", name));
  t.rows_key = t.queue;
  t.id_order = "id";
  return t;
}

TopicTables shared_tables(std::uint64_t sid, unsigned group, unsigned partition) {
  if (sid == 0 || sid >> (64 - kSharedTopicShift) != 0 || group > kMaxGroupNumber ||
      partition >= static_cast<unsigned>(kMaxPartitions)) {
    throw Error(Errc::kInternal, fmt::format("shared storage: sid {}, group {} or partition {} "
                                             "out of range", sid, group, partition));
  }
  TopicTables t;
  t.queue = quote_identifier(kSharedQueue);
  t.dead = quote_identifier(kSharedDead);
  t.dedup = quote_identifier(kSharedDedup);
  t.keys = quote_identifier(kSharedKeys);
  t.parked = quote_identifier(kSharedParked);
  t.archive = quote_identifier(kSharedArchive);
  t.qid = shared_qid(sid, group, partition);
  t.sid = sid;
  t.q_and = fmt::format("qid = {} AND ", t.qid);
  t.s_and = fmt::format("sid = {} AND ", t.sid);
  t.q_col = "qid, ";
  t.q_val = fmt::format("{}, ", t.qid);
  t.s_col = "sid, ";
  t.s_val = fmt::format("{}, ", t.sid);
  t.rows_key = fmt::format("{}#{}", t.queue, t.qid);
  // By id alone the server may walk KEY ids, over every queue's rows.
  t.id_order = "qid, id";
  return t;
}

std::string send_view(std::string_view topic, unsigned partition) {
  check_topic_name(topic);
  if (partition >= static_cast<unsigned>(kMaxPartitions)) {
    throw Error(Errc::kInternal, fmt::format("partition {} out of range", partition));
  }
  return quote_identifier(partition == 0 ? fmt::format("txmq_sv_{}", topic)
                                         : fmt::format("txmq_sv_{}${}", topic, partition));
}

std::string wait_channel(std::string_view topic, unsigned group) {
  return group == 0 ? std::string(topic) : fmt::format("{}${}", topic, group);
}

}  // namespace txmq::internal
