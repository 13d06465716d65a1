#include "server/auth/web_guard.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "server/auth/crypto.h"
#include "util/codec.h"

namespace txmq::server::web_guard {

namespace http = boost::beast::http;

bool basic_auth_ok(std::string_view header, const Credentials& credentials) {
  constexpr std::string_view kBasic = "basic ";
  if (header.size() < kBasic.size()) return false;
  for (std::size_t i = 0; i < kBasic.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBasic[i]) return false;
  }
  header.remove_prefix(kBasic.size());
  while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
  while (!header.empty() && header.back() == ' ') header.remove_suffix(1);
  std::optional<std::string> decoded = util::base64_decode(header, util::Base64Padding::kOptional);
  if (!decoded) return false;
  const std::size_t colon = decoded->find(':');
  bool ok = false;
  if (colon != std::string::npos) {
    const std::string_view user(decoded->data(), colon);
    const std::string_view password = std::string_view(*decoded).substr(colon + 1);
    // An unknown user still costs a comparison, against a dummy secret.
    const std::optional<std::string_view> secret = credentials.secret_of(user);
    const bool equal = constant_time_equal(password, secret ? *secret : std::string_view("-"));
    ok = secret.has_value() && equal;
  }
  std::fill(decoded->begin(), decoded->end(), '\0');  // the password
  return ok;
}

bool loopback_host(std::string_view host) {
  if (host.starts_with('[')) {
    const std::size_t end = host.find(']');
    return end != std::string_view::npos && host.substr(1, end - 1) == "::1";
  }
  host = host.substr(0, host.find(':'));
  if (host == "localhost") return true;
  if (!host.starts_with("127.")) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

std::optional<HttpResponse> refusal(const RequestHeader& request, const Credentials* credentials,
                                    std::string_view what) {
  if (credentials != nullptr) {
    if (basic_auth_ok(header_of(request, http::field::authorization), *credentials)) {
      return std::nullopt;
    }
    HttpResponse r = plain_text(401, fmt::format("{} needs a key of --credentials as HTTP Basic auth: "
                                            "user the access key id, password its secret",
                                            what));
    r.headers.emplace_back("WWW-Authenticate", "Basic realm=\"txmq\", charset=\"UTF-8\"");
    return r;
  }
  // Without credentials the server is on loopback; a request that reached it under another
  // name (DNS rebinding) is refused.
  if (loopback_host(header_of(request, http::field::host))) return std::nullopt;
  return plain_text(403, fmt::format("without --credentials {} answers only to localhost names", what));
}

}  // namespace txmq::server::web_guard
