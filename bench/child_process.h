#pragma once
// A child `txmq` process of the bench (a hidden subcommand) with its stdout on a pipe; and the
// private servers of scripts/server (docs/servers.md) that `txmq bench --server NAME` runs on.

#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>

namespace txmq::bench {

// Starts this same binary with `args` (such as {"bench-consumer", TOPIC}); the DSN goes by the
// environment (TXMQ_DSN), not the command line, which ps shows to everyone. SIGKILLed and reaped
// when destroyed. Lines of its stdout are read from one thread at a time.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, const std::string& dsn);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of its output, without the newline ("" at the end of its output).
  std::string line();
  // Sends a signal (once it has been reaped: does nothing).
  void signal(int sig);
  // Waits up to `seconds` for it to exit; true when it has (and it is reaped).
  bool wait_exit(double seconds);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  FILE* out_ = nullptr;
};

// scripts/server of txmq's source tree: $TXMQ_SERVER_SCRIPT when set, else the one of the
// source tree that this binary's build folder names (CMAKE_HOME_DIRECTORY in its
// CMakeCache.txt), else the first scripts/server found going up from this binary's folder.
// Throws, saying how to name it, when there is none (an installed txmq-bench).
std::string server_script();

// A private server of scripts/server NAME in `home` (its --home), started with --binlog if asked.
// start() starts it unless it runs already and returns its DSN (root on the socket); the
// destructor stops it if start() started it. The script's errors go to stderr.
class ScriptServer {
 public:
  ScriptServer(std::string script, std::string name, std::string home, bool binlog);
  ~ScriptServer();
  ScriptServer(const ScriptServer&) = delete;
  ScriptServer& operator=(const ScriptServer&) = delete;

  std::string start();
  // Stops it now if start() started it (the destructor then does nothing).
  void stop();
  bool was_running() const { return was_running_; }
  const std::string& name() const { return name_; }
  const std::string& home() const { return home_; }

 private:
  std::string script_;
  std::string name_;
  std::string home_;
  bool binlog_ = false;
  bool was_running_ = false;
  bool started_ = false;
};

}  // namespace txmq::bench
