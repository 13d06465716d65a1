#pragma once

#include <string>
#include <string_view>

namespace txmq::internal {

// Topic names become parts of table names: [a-z][a-z0-9_]{0,47}. Anything else is refused with
// Error(kInvalidArgument) before it can reach a statement.
constexpr std::size_t kMaxTopicName = 48;
bool is_valid_topic_name(std::string_view name) noexcept;
void check_topic_name(std::string_view name);

// Quoted table names of a (validated) topic.
struct TopicTables {
  std::string queue;  // `txmq_q_NAME`: messages waiting or in flight
  std::string dead;   // `txmq_dlq_NAME`: dead letters
  std::string dedup;   // `txmq_dd_NAME`: deduplication keys of recent sends
  std::string keys;    // `txmq_k_NAME`: message keys with messages not yet finished
  std::string parked;  // `txmq_kp_NAME`: keyed messages waiting behind an earlier one
};
TopicTables topic_tables(std::string_view name);

// Quotes an identifier for MariaDB; REQUIRES: it contains no backtick (validated names never do).
std::string quote_identifier(std::string_view identifier);

}  // namespace txmq::internal
