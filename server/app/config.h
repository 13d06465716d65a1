#pragma once

// txmq serve --config FILE (docs/operations.md): a TOML file whose keys are the command's
// long option names, at the top level:
//   listen = "0.0.0.0:9324"
//   credentials = "credentials"        # relative paths: relative to the file's directory
//   region = "eu-west-1"               # or "us-east-1,eu-west-1", or "*"
//   account-id = "123456789012"
//   workers = 32                       # 1 to 256
//   log-format = "json"                # "text" or "json"
//   max-connections = 4096             # 1 to 1,000,000
//   max-body-memory = 256              # MiB, 4 to 1,048,576
//   max-answer-memory = 256            # MiB, 4 to 1,048,576
//   max-connections-per-client = 1024  # 0 (no bound) to 1,000,000
//   dsn = "mysql://txmq@db/txmq"       # allowed; TXMQ_DSN keeps passwords out of the file
//   metrics-topics = "sqs_orders_.*"   # topics /metrics always exports (a regular expression)
//   metrics-busiest = 100              # and this many others, the busiest; 0 to 1,000,000
//   tables-at-first-use = true         # a queue's tables made at its first use
// A key left out keeps the command line's value or default; options given on the command line
// win over the file (cli/serve_command.cc).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/base/log.h"

namespace txmq::server {

struct ServeConfig {
  std::string path;  // the file, as given
  std::optional<std::string> listen;
  std::optional<std::string> credentials_file;  // resolved against the file's directory
  std::optional<std::string> region;
  std::optional<std::string> account;
  std::optional<int> workers;
  std::optional<LogFormat> log_format;
  std::optional<std::size_t> max_connections;
  std::optional<std::size_t> max_body_memory_mib;
  std::optional<std::size_t> max_answer_memory_mib;
  std::optional<std::size_t> max_connections_per_client;
  std::optional<std::string> dsn;
  std::optional<std::string> metrics_topics;
  std::optional<std::size_t> metrics_busiest;
  std::optional<bool> tables_at_first_use;
  std::optional<bool> shared_storage;  // queue-storage = "shared"
};

// The keys, in the order the documentation gives them.
const std::vector<std::string_view>& serve_config_keys();

// Parses a file's text; `path` names it in errors and anchors relative credentials paths.
// Throws std::invalid_argument, one line naming the file and the line:
//   "serve.conf:3:10: not valid TOML: ..." (toml++'s description)
//   "serve.conf:4: unknown key 'worker' (did you mean 'workers'?)"
//   "serve.conf:5: workers must be an integer from 1 to 256, not a string"
ServeConfig parse_serve_config(std::string_view text, const std::string& path);

// Reads and parses the file. Throws std::invalid_argument also when it cannot be read:
//   "cannot read the config file serve.conf: No such file or directory".
ServeConfig load_serve_config(const std::string& path);

// The known key closest to `key` (edit distance at most 2, '_' for '-' counting as none), or
// empty when none is that close.
std::string_view nearest_serve_config_key(std::string_view key);

}  // namespace txmq::server
