#include "db/dsn.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <fstream>

#include "txmq/error.h"
#include "util/codec.h"

namespace txmq::internal {

using util::printable;

namespace {

[[noreturn]] void refuse(std::string_view why) {
  throw Error(Errc::kInvalidArgument, fmt::format("invalid DSN: {}", why));
}

std::string percent_decode(std::string_view text, std::string_view what) {
  std::optional<std::string> decoded =
      util::percent_decode(text, util::PlusSign::kLiteral, util::BadEscape::kRefuse);
  if (!decoded) refuse(fmt::format("bad percent-escape in {}", what));
  return std::move(*decoded);
}

template <typename T>
T parse_number(std::string_view text, T min, T max, std::string_view what) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    // Echo only digits: "user:secret/db" (no '@') would otherwise show the password as a port.
    const bool digits = text.size() <= 20 && text.find_first_not_of("0123456789") == text.npos;
    refuse(digits ? fmt::format("{} must be a number from {} to {}, not {}", what, min, max, text)
                  : fmt::format("{} must be a number from {} to {}", what, min, max));
  }
  return value;
}

void apply_parameter(Dsn& dsn, std::string_view name, std::string_view value) {
  if (name == "socket") {
    dsn.socket = percent_decode(value, "socket");
  } else if (name == "connect_timeout") {
    dsn.connect_timeout_seconds = parse_number<int>(value, 1, 3600, "connect_timeout");
  } else if (name == "read_timeout" || name == "read-timeout") {
    dsn.read_timeout_seconds = parse_number<int>(value, 1, 86400, "read_timeout");
  } else if (name == "ssl-mode" || name == "ssl_mode") {
    if (value != "disabled" && value != "required" && value != "verify-ca" &&
        value != "verify-identity") {
      refuse(
          fmt::format("ssl-mode must be disabled, required, verify-ca or verify-identity, "
                      "not '{}'",
                      printable(value)));
    }
    dsn.ssl_mode = value;
  } else if (name == "ssl-ca" || name == "ssl_ca") {
    dsn.ssl_ca = percent_decode(value, "ssl-ca");
  } else if (name == "server-public-key" || name == "server_public_key") {
    const std::string path = percent_decode(value, "server-public-key");
    if (std::ifstream(path).fail()) {
      refuse(fmt::format("cannot read the server's public key file {}", printable(path, 256)));
    }
    dsn.server_public_key = path;
  } else if (name == "password-file" || name == "password_file") {
    const std::string path = percent_decode(value, "password-file");
    std::ifstream in(path, std::ios::binary);
    std::string password;
    if (!in || !std::getline(in, password)) {
      refuse(fmt::format("cannot read the password file {}", printable(path, 256)));
    }
    if (!password.empty() && password.back() == '\r') password.pop_back();
    dsn.password = std::move(password);
    dsn.password_in_text = false;
  } else if (name == "password-env" || name == "password_env") {
    const std::string variable = percent_decode(value, "password-env");
    const char* password = variable.empty() ? nullptr : std::getenv(variable.c_str());
    if (password == nullptr) {
      refuse(fmt::format("password-env names the environment variable {}, which is not set",
                         printable(variable, 256)));
    }
    dsn.password = password;
    dsn.password_in_text = false;
  } else {
    refuse(
        fmt::format("unknown parameter '{}' (known: socket, connect_timeout, read_timeout, ssl-mode, "
                    "ssl-ca, server-public-key, password-file, password-env)",
                    printable(name)));
  }
}

// host, host:port, [v6] or [v6]:port; `fallback` when the host is empty.
Dsn::Endpoint parse_endpoint(std::string_view text, std::string_view fallback) {
  Dsn::Endpoint node;
  std::string_view host = text;
  if (!host.empty() && host.front() == '[') {  // [::1]:3306
    std::size_t close = host.find(']');
    if (close == std::string_view::npos) refuse("unclosed '[' in host");
    std::string_view after = host.substr(close + 1);
    host = host.substr(1, close - 1);
    if (!after.empty()) {
      if (after.front() != ':') refuse("expected ':' after ']'");
      node.port = parse_number<unsigned>(after.substr(1), 1, 65535, "port");
    }
  } else if (std::size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    node.port = parse_number<unsigned>(host.substr(colon + 1), 1, 65535, "port");
    host = host.substr(0, colon);
  }
  if (host.empty() && fallback.empty()) refuse("empty host in the host list");
  node.host = std::string(host.empty() ? fallback : host);
  return node;
}

}  // namespace

Dsn parse_dsn(std::string_view text) {
  Dsn dsn;
  std::size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) {
    refuse("expected mysql://user:password@host:port/database");
  }
  std::string_view scheme = text.substr(0, scheme_end);
  if (scheme != "mysql" && scheme != "mariadb") {
    refuse(fmt::format("scheme must be mysql:// or mariadb://, not '{}://'", printable(scheme)));
  }
  std::string_view rest = text.substr(scheme_end + 3);

  std::string_view query;
  if (std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) refuse("missing /database after the host");
  std::string_view authority = rest.substr(0, slash);
  dsn.database = percent_decode(rest.substr(slash + 1), "database");
  if (dsn.database.empty()) refuse("missing database name after the host");
  if (dsn.database.find('/') != std::string::npos) refuse("database name contains '/'");

  // The password may contain '@' when escaped; split at the last '@'.
  if (std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    std::size_t colon = userinfo.find(':');
    dsn.user = percent_decode(userinfo.substr(0, colon), "user");
    if (colon != std::string_view::npos) {
      dsn.password = percent_decode(userinfo.substr(colon + 1), "password");
      dsn.password_in_text = !dsn.password.empty();
    }
  }
  if (dsn.user.empty()) refuse("missing user (mysql://USER@host/database)");

  if (authority.find(',') == std::string_view::npos) {
    dsn.nodes = {parse_endpoint(authority, "localhost")};
  } else {
    dsn.nodes.clear();
    while (true) {
      const std::size_t comma = authority.find(',');
      const std::string_view item = authority.substr(0, comma);
      if (item.empty()) refuse("empty host in the host list (host1:port1,host2:port2,...)");
      Dsn::Endpoint node = parse_endpoint(item, "");
      for (const Dsn::Endpoint& seen : dsn.nodes) {
        if (seen == node) {
          refuse(fmt::format("{}:{} appears twice in the host list", printable(node.host),
                             node.port));
        }
      }
      dsn.nodes.push_back(std::move(node));
      if (comma == std::string_view::npos) break;
      authority = authority.substr(comma + 1);
    }
  }
  dsn.host = dsn.nodes.front().host;
  dsn.port = dsn.nodes.front().port;

  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    std::size_t eq = pair.find('=');
    if (eq == std::string_view::npos)
      refuse(fmt::format("parameter '{}' has no value", printable(pair)));
    apply_parameter(dsn, pair.substr(0, eq), pair.substr(eq + 1));
  }
  if (dsn.is_host_list() && !dsn.socket.empty()) {
    refuse("socket= names one server: it cannot go with a host list");
  }
  if ((dsn.ssl_mode == "verify-ca" || dsn.ssl_mode == "verify-identity") && dsn.ssl_ca.empty()) {
    refuse(
        fmt::format("ssl-mode={} needs ssl-ca=PATH (the CA certificate that signed the "
                    "server's)",
                    dsn.ssl_mode));
  }
  return dsn;
}

std::string Dsn::Endpoint::describe() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", printable(host), port)
                                             : fmt::format("{}:{}", printable(host), port);
}

Dsn Dsn::node(std::size_t i) const {
  Dsn one = *this;
  one.nodes = {nodes.at(i)};
  one.host = nodes[i].host;
  one.port = nodes[i].port;
  // A node keeps the timeout its list implies.
  one.read_timeout_seconds = effective_read_timeout();
  return one;
}

std::string Dsn::describe() const {
  if (!socket.empty()) return fmt::format("{}@socket {} (database {})", user, socket, database);
  if (!is_host_list()) return fmt::format("{}@{}:{} (database {})", user, host, port, database);
  std::string where;
  for (const Endpoint& node : nodes) {
    if (!where.empty()) where += ',';
    where += node.describe();
  }
  return fmt::format("{}@{} (database {})", user, where, database);
}

}  // namespace txmq::internal
