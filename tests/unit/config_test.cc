// txmq serve --config (server/app/config.h): a good file, and every kind of error with its message
// and line. No server, no database.
#include "server/app/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace txmq::server {
namespace {

// The message of the std::invalid_argument that parsing `text` throws ("" when none).
std::string error_of(const std::string& text, const std::string& path = "/etc/txmq/serve.conf") {
  try {
    parse_serve_config(text, path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ServeConfig, AGoodFileSetsEveryKey) {
  const ServeConfig c = parse_serve_config(R"(# txmq serve
listen = "0.0.0.0:9324"
credentials = "keys/credentials"   # relative to the file's directory
region = "eu-west-1"
account-id = "123456789012"
workers = 32
log-format = "json"
max-connections = 10000
max-body-memory = 512
max-answer-memory = 64
max-connections-per-client = 0
dsn = "mysql://txmq@db.example/txmq"
metrics-topics = "sqs_orders.*"
metrics-busiest = 20
tables-at-first-use = true
queue-storage = "shared"
)",
                                           "/etc/txmq/serve.conf");
  EXPECT_EQ(c.path, "/etc/txmq/serve.conf");
  EXPECT_EQ(c.listen, "0.0.0.0:9324");
  EXPECT_EQ(c.credentials_file, "/etc/txmq/keys/credentials");
  EXPECT_EQ(c.region, "eu-west-1");
  EXPECT_EQ(c.account, "123456789012");
  EXPECT_EQ(c.workers, 32);
  EXPECT_EQ(c.log_format, LogFormat::kJson);
  EXPECT_EQ(c.max_connections, 10000u);
  EXPECT_EQ(c.max_body_memory_mib, 512u);
  EXPECT_EQ(c.max_answer_memory_mib, 64u);
  EXPECT_EQ(c.max_connections_per_client, 0u);
  EXPECT_EQ(c.dsn, "mysql://txmq@db.example/txmq");
  EXPECT_EQ(c.metrics_topics, "sqs_orders.*");
  EXPECT_EQ(c.metrics_busiest, 20u);
  EXPECT_EQ(c.tables_at_first_use, true);
  EXPECT_EQ(c.shared_storage, true);
  EXPECT_EQ(error_of("queue-storage = \"elsewhere\"\n"),
            "/etc/txmq/serve.conf:1: queue-storage must be \"dedicated\" or \"shared\", not "
            "\"elsewhere\"");
  EXPECT_EQ(error_of("metrics-busiest = -1\n"),
            "/etc/txmq/serve.conf:1: metrics-busiest must be an integer from 0 to 1000000, not -1");
  EXPECT_EQ(error_of("tables-at-first-use = \"yes\"\n"),
            "/etc/txmq/serve.conf:1: tables-at-first-use must be true or false, not a string");
}

TEST(ServeConfig, KeysLeftOutAreUnset) {
  const ServeConfig c = parse_serve_config("workers = 1\n", "serve.conf");
  EXPECT_EQ(c.workers, 1);
  EXPECT_FALSE(c.listen || c.credentials_file || c.region || c.account || c.log_format || c.dsn ||
               c.max_connections || c.max_body_memory_mib || c.max_answer_memory_mib ||
               c.max_connections_per_client);
  EXPECT_FALSE(parse_serve_config("", "serve.conf").workers);
}

TEST(ServeConfig, CredentialsPathsAreRelativeToTheFilesDirectory) {
  EXPECT_EQ(
      parse_serve_config("credentials = \"/srv/keys\"", "/etc/txmq/serve.conf").credentials_file,
      "/srv/keys");
  EXPECT_EQ(
      parse_serve_config("credentials = \"../keys\"", "/etc/txmq/serve.conf").credentials_file,
      "/etc/keys");
  // A file named relative to the working directory: so is the result.
  EXPECT_EQ(parse_serve_config("credentials = \"keys\"", "serve.conf").credentials_file, "keys");
  EXPECT_EQ(parse_serve_config("credentials = \"keys\"", "conf/serve.conf").credentials_file,
            "conf/keys");
}

TEST(ServeConfig, SyntaxErrorsGiveTheFileLineAndColumn) {
  EXPECT_EQ(error_of("region = \"eu-west-1\"\nworkers = = 3\n")
                .rfind("/etc/txmq/serve.conf:2:11: not valid TOML: ", 0),
            0u)
      << error_of("region = \"eu-west-1\"\nworkers = = 3\n");
  EXPECT_EQ(error_of("listen = \"127.0.0.1:9324\n").rfind("/etc/txmq/serve.conf:1:", 0), 0u);
  // A key given twice is TOML's own error.
  EXPECT_EQ(error_of("workers = 2\nworkers = 3\n").rfind("/etc/txmq/serve.conf:2:", 0), 0u)
      << error_of("workers = 2\nworkers = 3\n");
}

TEST(ServeConfig, UnknownKeysSuggestTheNearestKnownOne) {
  EXPECT_EQ(error_of("\n\nworker = 3\n"),
            "/etc/txmq/serve.conf:3: unknown key 'worker' (did you mean 'workers'?)");
  EXPECT_EQ(error_of("log_format = \"json\"\n"),
            "/etc/txmq/serve.conf:1: unknown key 'log_format' (did you mean 'log-format'?)");
  EXPECT_EQ(error_of("account_id = \"123456789012\"\n"),
            "/etc/txmq/serve.conf:1: unknown key 'account_id' (did you mean 'account-id'?)");
  EXPECT_EQ(error_of("Region = \"eu-west-1\"\n"),
            "/etc/txmq/serve.conf:1: unknown key 'Region' (did you mean 'region'?)");
  EXPECT_EQ(error_of("port = 9324\n"),
            "/etc/txmq/serve.conf:1: unknown key 'port' (known keys: listen, credentials, "
            "region, account-id, workers, log-format, max-connections, "
            "max-connections-per-client, max-body-memory, max-answer-memory, dsn, "
            "metrics-topics, metrics-busiest, tables-at-first-use, queue-storage)");
  EXPECT_EQ(error_of("workers = 2\n[serve]\nlisten = \"127.0.0.1:1\"\n"),
            "/etc/txmq/serve.conf:2: unknown key 'serve' (known keys: listen, credentials, "
            "region, account-id, workers, log-format, max-connections, "
            "max-connections-per-client, max-body-memory, max-answer-memory, dsn, "
            "metrics-topics, metrics-busiest, tables-at-first-use, queue-storage; the file has no "
            "[tables]: keys go "
            "at its top)");
}

TEST(ServeConfig, WrongTypesNameTheKeyAndWhatItGot) {
  EXPECT_EQ(error_of("\nworkers = \"8\"\n"),
            "/etc/txmq/serve.conf:2: workers must be an integer from 1 to 256, not a string");
  EXPECT_EQ(error_of("workers = 8.5\n"),
            "/etc/txmq/serve.conf:1: workers must be an integer from 1 to 256, not a float");
  EXPECT_EQ(error_of("listen = 9324\n"),
            "/etc/txmq/serve.conf:1: listen must be a string, not an integer");
  EXPECT_EQ(error_of("region = [\"eu-west-1\"]\n"),
            "/etc/txmq/serve.conf:1: region must be a string, not an array");
  EXPECT_EQ(error_of("dsn = true\n"),
            "/etc/txmq/serve.conf:1: dsn must be a string, not a boolean");
  EXPECT_EQ(error_of("account-id = 123456789012\n"),
            "/etc/txmq/serve.conf:1: account-id must be a string, not an integer");
}

TEST(ServeConfig, ValuesOutOfRangeAreRefused) {
  EXPECT_EQ(error_of("workers = 0\n"),
            "/etc/txmq/serve.conf:1: workers must be an integer from 1 to 256, not 0");
  EXPECT_EQ(error_of("workers = 257\n"),
            "/etc/txmq/serve.conf:1: workers must be an integer from 1 to 256, not 257");
  EXPECT_EQ(parse_serve_config("workers = 256\n", "f").workers, 256);
  EXPECT_EQ(error_of("log-format = \"xml\"\n"),
            "/etc/txmq/serve.conf:1: log-format must be \"text\" or \"json\", not \"xml\"");
  EXPECT_EQ(parse_serve_config("log-format = \"text\"\n", "f").log_format, LogFormat::kText);
  EXPECT_EQ(error_of("region = \"\"\n"), "/etc/txmq/serve.conf:1: region must not be empty");
  EXPECT_EQ(error_of("max-connections = 0\n"),
            "/etc/txmq/serve.conf:1: max-connections must be an integer from 1 to 1000000, not 0");
  EXPECT_EQ(error_of("max-body-memory = \"1G\"\n"),
            "/etc/txmq/serve.conf:1: max-body-memory must be an integer from 4 to 1048576 (MiB), "
            "not a string");
  EXPECT_EQ(error_of("max_connection = 5\n"),
            "/etc/txmq/serve.conf:1: unknown key 'max_connection' (did you mean "
            "'max-connections'?)");
}

TEST(ServeConfig, UnreadableFilesAreNamed) {
  try {
    load_serve_config("/nonexistent/serve.conf");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "cannot read the config file /nonexistent/serve.conf: No such file or directory");
  }
  const std::string dir = ::testing::TempDir();
  try {
    load_serve_config(dir);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read the config file " + dir + ": Is a directory");
  }
}

TEST(ServeConfig, LoadReadsTheFile) {
  const std::filesystem::path file =
      std::filesystem::path(::testing::TempDir()) / "txmq_config_test.conf";
  std::ofstream(file) << "workers = 3\ncredentials = \"creds\"\n";
  const ServeConfig c = load_serve_config(file.string());
  EXPECT_EQ(c.workers, 3);
  EXPECT_EQ(c.credentials_file, (file.parent_path() / "creds").lexically_normal().string());
  std::filesystem::remove(file);
}

TEST(ServeConfig, NearestKey) {
  EXPECT_EQ(nearest_serve_config_key("listn"), "listen");
  EXPECT_EQ(nearest_serve_config_key("credential"), "credentials");
  EXPECT_EQ(nearest_serve_config_key("DSN"), "dsn");
  EXPECT_EQ(nearest_serve_config_key("something"), "");
}

}  // namespace
}  // namespace txmq::server
