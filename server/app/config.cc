#include "server/app/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
// Header-only (no TOML_SHARED_LIB): only this file parses TOML, and the txmq binary then needs
// no libtomlplusplus3 at run time.
#include <toml++/toml.h>

namespace txmq::server {

namespace {

std::string_view a_type(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same = a[i - 1] == b[j - 1] || (a[i - 1] == '_' && b[j - 1] == '-');
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<std::string_view>& serve_config_keys() {
  static const std::vector<std::string_view> keys{
      "listen",     "credentials",     "region",          "account-id", "workers",
      "log-format", "max-connections", "max-connections-per-client", "max-body-memory",
      "max-answer-memory", "dsn", "metrics-topics", "metrics-busiest", "tables-at-first-use",
      "queue-storage"};
  return keys;
}

std::string_view nearest_serve_config_key(std::string_view key) {
  std::string lower(key);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view best;
  std::size_t best_distance = 3;
  for (std::string_view known : serve_config_keys()) {
    const std::size_t d = edit_distance(lower, known);
    if (d < best_distance) {
      best = known;
      best_distance = d;
    }
  }
  return best;
}

ServeConfig parse_serve_config(std::string_view text, const std::string& path) {
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const toml::source_position at = e.source().begin;
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: not valid TOML: {}", path, at.line, at.column, e.description()));
  }

  ServeConfig config;
  config.path = path;
  for (auto&& entry : table) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in the lambdas.
    const auto& key = entry.first;
    const auto& node = entry.second;
    const std::string_view name = key.str();
    const std::string where = fmt::format("{}:{}", path, key.source().begin.line);
    const auto string_value = [&]() -> std::string {
      const std::optional<std::string> v = node.value_exact<std::string>();
      if (!v) {
        throw std::invalid_argument(
            fmt::format("{}: {} must be a string, not {}", where, name, a_type(node)));
      }
      if (v->empty())
        throw std::invalid_argument(fmt::format("{}: {} must not be empty", where, name));
      return *v;
    };
    const auto integer_value = [&](std::int64_t low, std::int64_t high,
                                   std::string_view unit) -> std::int64_t {
      const std::optional<std::int64_t> v = node.value_exact<std::int64_t>();
      if (!v || *v < low || *v > high) {
        throw std::invalid_argument(
            fmt::format("{}: {} must be an integer from {} to {}{}, not {}", where, name, low, high,
                        unit, v ? std::to_string(*v) : std::string(a_type(node))));
      }
      return *v;
    };
    if (name == "listen") {
      config.listen = string_value();
    } else if (name == "credentials") {
      std::filesystem::path file = string_value();
      if (file.is_relative()) file = std::filesystem::path(path).parent_path() / file;
      config.credentials_file = file.lexically_normal().string();
    } else if (name == "region") {
      config.region = string_value();
    } else if (name == "account-id") {
      config.account = string_value();
    } else if (name == "workers") {
      const std::optional<std::int64_t> v = node.value_exact<std::int64_t>();
      if (!v) {
        throw std::invalid_argument(fmt::format(
            "{}: workers must be an integer from 1 to 256, not {}", where, a_type(node)));
      }
      if (*v < 1 || *v > 256) {
        throw std::invalid_argument(
            fmt::format("{}: workers must be an integer from 1 to 256, not {}", where, *v));
      }
      config.workers = static_cast<int>(*v);
    } else if (name == "log-format") {
      const std::string v = string_value();
      config.log_format = parse_log_format(v);
      if (!config.log_format) {
        throw std::invalid_argument(
            fmt::format("{}: log-format must be \"text\" or \"json\", not \"{}\"", where, v));
      }
    } else if (name == "max-connections") {
      config.max_connections = static_cast<std::size_t>(integer_value(1, 1'000'000, ""));
    } else if (name == "max-body-memory") {
      config.max_body_memory_mib = static_cast<std::size_t>(integer_value(4, 1 << 20, " (MiB)"));
    } else if (name == "max-answer-memory") {
      config.max_answer_memory_mib = static_cast<std::size_t>(integer_value(4, 1 << 20, " (MiB)"));
    } else if (name == "max-connections-per-client") {
      config.max_connections_per_client = static_cast<std::size_t>(integer_value(0, 1'000'000, ""));
    } else if (name == "dsn") {
      config.dsn = string_value();
    } else if (name == "metrics-topics") {
      config.metrics_topics = string_value();
    } else if (name == "metrics-busiest") {
      config.metrics_busiest = static_cast<std::size_t>(integer_value(0, 1'000'000, ""));
    } else if (name == "tables-at-first-use") {
      const std::optional<bool> v = node.value_exact<bool>();
      if (!v) {
        throw std::invalid_argument(
            fmt::format("{}: {} must be true or false, not {}", where, name, a_type(node)));
      }
      config.tables_at_first_use = *v;
    } else if (name == "queue-storage") {
      const std::string v = string_value();
      if (v != "dedicated" && v != "shared") {
        throw std::invalid_argument(
            fmt::format("{}: {} must be \"dedicated\" or \"shared\", not \"{}\"", where, name, v));
      }
      config.shared_storage = v == "shared";
    } else {
      const std::string_view near = nearest_serve_config_key(name);
      std::string hint;
      if (!near.empty()) {
        hint = fmt::format("did you mean '{}'?", near);
      } else {
        hint = fmt::format("known keys: {}", fmt::join(serve_config_keys(), ", "));
      }
      if (node.is_table()) hint += "; the file has no [tables]: keys go at its top";
      throw std::invalid_argument(fmt::format("{}: unknown key '{}' ({})", where, name, hint));
    }
  }
  return config;
}

ServeConfig load_serve_config(const std::string& path) {
  const auto unreadable = [&path](int error) {
    return std::invalid_argument(
        fmt::format("cannot read the config file {}: {}", path, std::strerror(error)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw unreadable(errno);
  std::string text;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw unreadable(error);
    }
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > (1u << 20)) {
      ::close(fd);
      throw std::invalid_argument(
          fmt::format("the config file {} is over 1 MiB: is it the right file?", path));
    }
  }
  ::close(fd);
  return parse_serve_config(text, path);
}

}  // namespace txmq::server
