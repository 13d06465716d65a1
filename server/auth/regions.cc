#include "server/auth/regions.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace txmq::server {

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

Regions::Regions(std::string_view name) : names_{std::string(name)} {}

bool Regions::valid_name(std::string_view name) {
  return !name.empty() && name.size() <= 32 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string_view::npos;
}

Regions Regions::parse(std::string_view text) {
  Regions r;
  if (trimmed(text) == "*") {
    r.any_ = true;
    r.names_.emplace_back("us-east-1");
    return r;
  }
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view name = trimmed(text.substr(0, comma));
    if (!valid_name(name)) {
      throw std::invalid_argument(fmt::format(
          "--region takes region names such as us-east-1, separated by commas, or * for any "
          "region; '{}' is not one",
          name.substr(0, 40)));
    }
    if (std::find(r.names_.begin(), r.names_.end(), name) != r.names_.end()) {
      throw std::invalid_argument(fmt::format("--region names {} twice", name));
    }
    r.names_.emplace_back(name);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return r;
}

bool Regions::allows(std::string_view region) const {
  if (any_) return valid_name(region);
  return std::find(names_.begin(), names_.end(), region) != names_.end();
}

std::string Regions::describe() const {
  return any_ ? std::string("*") : fmt::format("{}", fmt::join(names_, ","));
}

}  // namespace txmq::server
