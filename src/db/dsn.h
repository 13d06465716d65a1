#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace txmq::internal {

// mysql://user:password@host:port/database?socket=PATH&connect_timeout=S&read_timeout=S
// &ssl-mode=MODE&ssl-ca=PATH&server-public-key=PATH&password-file=PATH&password-env=NAME. Also mariadb://. User and password are
// percent-decoded. password-file reads the password from the file's first line instead, so that
// it appears in no DSN; password-env reads it from an environment variable. Unknown parameters are refused so that a typo is an error, not a
// silently ignored setting.
//
// The host may be a list, host1:port1,host2:port2,...: the nodes of a Galera cluster, of which
// txmq writes to one at a time (db/cluster.h).
struct Dsn {
  struct Endpoint {
    std::string host;
    unsigned port = 3306;
    bool operator==(const Endpoint&) const = default;
    // host:port, [v6]:port; unprintable bytes escaped.
    std::string describe() const;
  };

  std::string user;
  std::string password;
  // Whether the password was written in the DSN itself (not read from password-file or
  // password-env): such a DSN is not stored in a catalog (txmq server add).
  bool password_in_text = false;
  // The server this DSN connects to: the first of `nodes`, or the one node() picked.
  std::string host = "localhost";
  unsigned port = 3306;
  // Every host of the DSN, in its order (one entry for a single server).
  std::vector<Endpoint> nodes{Endpoint{"localhost", 3306}};
  std::string database;
  std::string socket;
  int connect_timeout_seconds = 5;
  std::string ssl_mode;  // "", disabled, required, verify-ca, verify-identity
  std::string ssl_ca;
  // MySQL's caching_sha2_password without TLS: the server's RSA public key (PEM), with which the
  // password is sent encrypted. Without it, Connector/C asks the server for its key and trusts
  // whatever answers; with TLS (ssl-mode) neither is needed.
  std::string server_public_key;
  // Seconds a statement may go without an answer before the connection counts as lost (0: the
  // default, 120 s for one server and 30 s for a host list, where a frozen node must not hold
  // clients longer than a failover takes).
  int read_timeout_seconds = 0;

  bool is_host_list() const { return nodes.size() > 1; }
  // The same DSN naming only node i.
  Dsn node(std::size_t i) const;
  int effective_read_timeout() const {
    return read_timeout_seconds > 0 ? read_timeout_seconds : (is_host_list() ? 30 : 120);
  }

  // Where it points, for messages: never the password.
  std::string describe() const;
};

// Throws Error(kInvalidArgument) naming what is wrong, without echoing the password.
Dsn parse_dsn(std::string_view text);

}  // namespace txmq::internal
