#pragma once
// A child `txmq` process of the bench (a hidden subcommand) with its stdout on a pipe.

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

}  // namespace txmq::bench
