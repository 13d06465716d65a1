// libFuzzer target: topic and group name validation, against the rule written out again
// ([a-z][a-z0-9_]{0,47}); refusals are kInvalidArgument with a printable message.
#include <string>
#include <string_view>

#include "fuzz.h"
#include "catalog/names.h"
#include "txmq/error.h"

namespace {

bool by_the_rule(std::string_view name) {
  if (name.empty() || name.size() > 48 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  const bool valid = by_the_rule(name);
  txmq::fuzz::require(txmq::internal::is_valid_topic_name(name) == valid, "validity differs");
  for (auto check : {txmq::internal::check_topic_name, txmq::internal::check_group_name}) {
    try {
      check(name);
      txmq::fuzz::require(valid, "an invalid name was accepted");
    } catch (const txmq::Error& e) {
      txmq::fuzz::require(!valid, "a valid name was refused");
      txmq::fuzz::require(e.code() == txmq::Errc::kInvalidArgument, "not kInvalidArgument");
      txmq::fuzz::require(txmq::fuzz::printable(e.what()), "unprintable error message");
    }
  }
  if (valid) {
    // Every table name of the largest group and partition fits MariaDB's 64 characters and
    // quoting cannot be escaped from.
    const txmq::internal::TopicTables t = txmq::internal::topic_tables(name, 999, 63);
    for (const std::string& table : {t.queue, t.dead, t.dedup, t.keys, t.parked, t.archive}) {
      txmq::fuzz::require(table.size() <= 66, "a table name is longer than 64 characters");
      txmq::fuzz::require(table.find('`', 1) == table.size() - 1, "a quote inside a table name");
    }
  }
  return 0;
}
