#include "db/sql.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace txmq::internal {

std::string micros_of(std::string_view column) {
  return fmt::format("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {})", column);
}

Clock::time_point time_from_micros(std::int64_t micros) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(Micros(micros)));
}

std::size_t in_list_size(std::size_t n) { return n <= 1 ? 1 : std::bit_ceil(n); }

std::string placeholders(std::size_t n) {
  std::string out = "(";
  for (std::size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ",?";
  return out + ")";
}

void pad_ids(std::vector<Param>& params, std::size_t from, std::size_t n) {
  Param last = params.back();
  while (params.size() - from < n) params.push_back(last);
}

Result in_lists(Connection& c, std::string_view sql, std::vector<Param> values) {
  constexpr std::size_t kChunk = 1000;
  Result all;
  for (std::size_t from = 0; from < values.size(); from += kChunk) {
    const std::size_t to = std::min(values.size(), from + kChunk);
    const std::size_t n = in_list_size(to - from);
    std::vector<Param> params(values.begin() + from, values.begin() + to);
    pad_ids(params, 0, n);
    Result r = c.execute(fmt::vformat(sql, fmt::make_format_args(placeholders(n))), params);
    all.affected_rows += r.affected_rows;
    for (Row& row : r.rows) all.rows.push_back(std::move(row));
  }
  return all;
}

}  // namespace txmq::internal
