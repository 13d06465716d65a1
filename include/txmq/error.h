#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace txmq {

// What went wrong, classified so that callers can decide "retry or give up" without parsing text.
enum class Errc {
  kUnavailable,         // the database cannot be reached or the connection broke; retryable
  kAborted,             // deadlock or lock-wait timeout that outlived the internal retries; retryable
  kCommitUnknown,       // the connection broke during COMMIT: the work may or may not have committed
  kInvalidArgument,     // bad topic name, oversize payload, malformed receipt or DSN, bad option
  kNotFound,            // the topic, group, server or dead letter does not exist
  kAlreadyExists,       // a topic or server exists with different settings
  kFailedPrecondition,  // the database is in a state txmq cannot work with (e.g. newer schema)
  kInternal,            // any other server error
};

std::string_view errc_name(Errc code) noexcept;

// Thrown by every public function. what() never contains a password; server_message() may echo
// user data and is kept apart for that reason.
class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& what, unsigned server_errno = 0, std::string sqlstate = {},
        std::string server_message = {});

  Errc code() const noexcept { return code_; }
  // True for kUnavailable and kAborted: the same call may succeed later.
  bool retryable() const noexcept;
  // The server's (or Connector/C's) error number; 0 when txmq raised the error itself.
  unsigned server_errno() const noexcept { return server_errno_; }
  std::string_view sqlstate() const noexcept { return sqlstate_; }
  std::string_view server_message() const noexcept { return server_message_; }

 private:
  Errc code_;
  unsigned server_errno_;
  std::string sqlstate_;
  std::string server_message_;
};

}  // namespace txmq
