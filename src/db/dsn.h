#pragma once

#include <string>
#include <string_view>

namespace txmq::internal {

// mysql://user:password@host:port/database?socket=PATH&connect_timeout=S&ssl-mode=MODE&ssl-ca=PATH
// &password-file=PATH. Also mariadb://. User and password are percent-decoded. password-file
// reads the password from the file's first line instead, so that it appears in no DSN. Unknown
// parameters are refused so that a typo is an error, not a silently ignored setting.
struct Dsn {
  std::string user;
  std::string password;
  std::string host = "localhost";
  unsigned port = 3306;
  std::string database;
  std::string socket;
  int connect_timeout_seconds = 5;
  std::string ssl_mode;  // "", disabled, required, verify-ca, verify-identity
  std::string ssl_ca;

  // Where it points, for messages: never the password.
  std::string describe() const;
};

// Throws Error(kInvalidArgument) naming what is wrong, without echoing the password.
Dsn parse_dsn(std::string_view text);

}  // namespace txmq::internal
