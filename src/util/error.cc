// txmq::Error, the one exception type of the library (include/txmq/error.h).
#include "txmq/error.h"

namespace txmq {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kUnavailable: return "unavailable";
    case Errc::kAborted: return "aborted";
    case Errc::kCommitUnknown: return "commit_unknown";
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kNotFound: return "not_found";
    case Errc::kAlreadyExists: return "already_exists";
    case Errc::kFailedPrecondition: return "failed_precondition";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

Error::Error(Errc code, const std::string& what, unsigned server_errno, std::string sqlstate,
             std::string server_message)
    : std::runtime_error(what),
      code_(code),
      server_errno_(server_errno),
      sqlstate_(std::move(sqlstate)),
      server_message_(std::move(server_message)) {}

bool Error::retryable() const noexcept {
  return code_ == Errc::kUnavailable || code_ == Errc::kAborted;
}

}  // namespace txmq
