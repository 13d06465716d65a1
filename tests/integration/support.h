#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "db/connection.h"
#include "txmq/client.h"

namespace txmq::test {

// The server under test: TXMQ_TEST_DSN, else the local server in TXMQ_HOME (the CTest fixture
// starts it; started on demand when the binary is run by hand).
const std::string& dsn();
std::unique_ptr<Client> client(const std::string& consumer_name = {});
// A raw connection for checks and for setting up faults; never used by the code under test.
std::unique_ptr<internal::Connection> admin();
// Drops the topic, which may not exist (any other error is thrown).
void drop_topic_if_exists(Client& c, const std::string& topic);
// A topic name unique to the running test (and `suffix`), dropped first if a previous run left it.
std::string topic_for_test(const std::string& suffix = "");

// Where a topic's rows of one kind are (kind: "q", "dlq", "dd", "k", "kp" or "a", as in the
// tables' names): its own table and "TRUE", or the shared table and the condition that picks
// the topic's rows (group 0, partition 0) in shared storage.
struct TopicRows {
  std::string table;
  std::string where;
};
TopicRows topic_rows(const std::string& topic, std::string_view kind);

struct ProcessResult {
  int exit_code = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
  double seconds = 0;
};

// Runs the txmq command with `args`, `input` on stdin and TXMQ_DSN set (unless env overrides),
// and kills it after `timeout`.
ProcessResult run_txmq(const std::vector<std::string>& args, const std::string& input = "",
                       const std::map<std::string, std::string>& env = {},
                       std::chrono::seconds timeout = std::chrono::seconds(120));

// The same for any program.
ProcessResult run_program(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& input = "",
                          const std::map<std::string, std::string>& env = {},
                          std::chrono::seconds timeout = std::chrono::seconds(120));

// Starts txmq in the background with stdout and stderr to files; for signal tests.
struct Background {
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
  int wait();                 // exit code as in ProcessResult
  std::optional<int> poll();  // the exit code once it has exited
  std::string err() const;
  std::string out() const;
};
Background start_txmq(const std::vector<std::string>& args);
// Starts any program so (the test helper, TXMQ_TEST_HELPER).
Background start_process(const std::string& binary, const std::vector<std::string>& args);

// An application's own Connector/C connection to the server under test (for Outbox tests).
using MysqlHandle = std::unique_ptr<MYSQL, void (*)(MYSQL*)>;
MysqlHandle open_mysql();
// Runs a statement without input on it; throws std::runtime_error with the server's message.
void mysql_run(MYSQL* m, const std::string& sql);

std::string scratch_dir();  // a fresh temporary folder for this test

}  // namespace txmq::test
