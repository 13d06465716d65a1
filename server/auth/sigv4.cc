#include "server/auth/sigv4.h"

#include "server/auth/crypto.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <stdexcept>

#include "util/codec.h"

namespace txmq::server {
namespace {

using Clock = std::chrono::system_clock;
using Digest = Sha256;

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr std::string_view kTerminator = "aws4_request";
constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
constexpr auto kMaxSkew = std::chrono::minutes(15);
constexpr std::int64_t kMaxExpiresSeconds = 7 * 24 * 3600;  // AWS's limit for presigned requests
constexpr std::size_t kSignatureHexSize = 64;

constexpr std::string_view kMismatchMessage =
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details.";

AuthFailure failure(std::string_view code, std::string message) {
  int status = 403;
  if (code == "IncompleteSignature" || code == "RequestExpired") status = 400;
  return AuthFailure{std::string(code), std::move(message), status};
}

AuthFailure incomplete(std::string message) {
  return failure("IncompleteSignature", std::move(message));
}

// --- digests (server/auth/crypto.h: SHA-256 and HMAC on an algorithm fetched once) -----------

using ::txmq::server::hmac_sha256;  // beside the overload for a key that is a digest

Digest hmac_sha256(const Digest& key, std::string_view data) {
  return hmac_sha256(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()),
                     data);
}

void append_hex(std::string& out, const Digest& digest) { out += hex_of(digest); }

std::string hex(const Digest& digest) { return hex_of(digest); }

// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request").
// It changes once a day per key, so each thread keeps the last one: a request then costs one
// HMAC for its signature instead of five.
Digest signing_key(std::string_view secret, std::string_view date, std::string_view region,
                   std::string_view service) {
  struct Cached {
    std::string secret, date, region, service;
    Digest key{};
    bool valid = false;
  };
  thread_local Cached cached;
  if (cached.valid && cached.secret == secret && cached.date == date && cached.region == region &&
      cached.service == service) {
    return cached.key;
  }
  std::string first_key = "AWS4";
  first_key += secret;
  const Digest date_key = hmac_sha256(first_key, date);
  OPENSSL_cleanse(first_key.data(), first_key.size());
  const Digest key = hmac_sha256(hmac_sha256(hmac_sha256(date_key, region), service), kTerminator);
  if (!cached.secret.empty()) OPENSSL_cleanse(cached.secret.data(), cached.secret.size());
  cached.secret.assign(secret);
  cached.date.assign(date);
  cached.region.assign(region);
  cached.service.assign(service);
  cached.key = key;
  cached.valid = true;
  return key;
}

std::string credential_scope(std::string_view date, std::string_view region,
                             std::string_view service) {
  return fmt::format("{}/{}/{}/{}", date, region, service, kTerminator);
}

// The hex signature of a canonical request.
std::string signature_of(std::string_view canonical_request, std::string_view amz_date,
                         std::string_view secret, std::string_view region,
                         std::string_view service) {
  const std::string_view date = amz_date.substr(0, 8);
  std::string string_to_sign;
  string_to_sign.reserve(kAlgorithm.size() + amz_date.size() + 64 + 64 + 3);
  string_to_sign += kAlgorithm;
  string_to_sign += '\n';
  string_to_sign += amz_date;
  string_to_sign += '\n';
  string_to_sign += credential_scope(date, region, service);
  string_to_sign += '\n';
  append_hex(string_to_sign, sha256({canonical_request}));
  return hex(hmac_sha256(signing_key(secret, date, region, service), string_to_sign));
}

// --- text helpers ----------------------------------------------------------------------------

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool is_hex_string(std::string_view s, std::size_t size) {
  return s.size() == size &&
         std::all_of(s.begin(), s.end(), [](char c) { return util::hex_digit_value(c) >= 0; });
}

// A query's name or value as SigV4 signs it: RFC 3986, '/' encoded too.
std::string uri_encoded(std::string_view bytes) {
  return util::percent_encode(bytes, util::Slash::kEncoded);
}

// The path and query of a request target; an absolute-form target ("http://host/p?q") is cut
// down to its path and query, which is what the client signed.
std::pair<std::string_view, std::string_view> split_target(std::string_view target) {
  if (!target.empty() && target.front() != '/') {
    if (const auto scheme = target.find("://"); scheme != std::string_view::npos) {
      const auto path = target.find_first_of("/?", scheme + 3);
      target = path == std::string_view::npos ? std::string_view() : target.substr(path);
    }
  }
  if (const auto hash = target.find('#'); hash != std::string_view::npos) {
    target = target.substr(0, hash);
  }
  const auto question = target.find('?');
  if (question == std::string_view::npos) return {target, {}};
  return {target.substr(0, question), target.substr(question + 1)};
}

// botocore's normalize_url_path: "." segments and empty segments dropped, ".." removes the
// segment before it; a leading and (unless nothing is left) trailing '/' kept; "" is "/".
std::string normalized_path(std::string_view path) {
  if (path.empty()) return "/";
  std::string out;  // "/seg1/seg2" while building
  out.reserve(path.size() + 1);
  std::size_t segments = 0;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view segment = path.substr(start, end - start);
    if (segment == "..") {
      if (segments > 0) {
        out.resize(out.rfind('/'));
        --segments;
      }
    } else if (!segment.empty() && segment != ".") {
      out += '/';
      out += segment;
      ++segments;
    }
    start = end + 1;
  }
  if (segments == 0) return path.front() == '/' ? "/" : "";
  if (path.front() != '/') out.erase(0, 1);
  if (path.back() == '/') out += '/';
  return out;
}

using QueryParams = util::FormPairs;

// The query's parameters: %XX decoded and '+' a space, as the Query protocol reads the same
// query string (one decoding for what is signed and what is acted on: a '+' the signer meant as
// a plus does not verify); anything else, a stray '%' included, kept as it is. "a" without '='
// has the value "". Empty pieces ("a=1&&b=2") are no parameters.
QueryParams parse_query(std::string_view query) {
  return *util::form_decode(query, util::BadEscape::kKeep);
}

void append_canonical_query(std::string& out, const QueryParams& params, bool presigned) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(params.size());
  for (const auto& [name, value] : params) {
    if (presigned && name == "X-Amz-Signature") continue;
    encoded.emplace_back(uri_encoded(name), uri_encoded(value));
  }
  std::sort(encoded.begin(), encoded.end());
  bool first = true;
  for (const auto& [name, value] : encoded) {
    if (!first) out += '&';
    first = false;
    out += name;
    out += '=';
    out += value;
  }
}

// A header value as signed: trimmed, each run of whitespace inside it one space.
void append_header_value(std::string& out, std::string_view value) {
  value = trim(value);
  bool in_space = false;
  for (const char c : value) {
    if (is_space(c)) {
      in_space = true;
      continue;
    }
    if (in_space) out += ' ';
    in_space = false;
    out += c;
  }
}

std::string build_canonical_request(const SignedRequest& request, std::string_view raw_path,
                                    const QueryParams& query, std::string_view signed_headers,
                                    std::string_view payload_hash, bool presigned) {
  std::string out;
  out.reserve(256 + request.target.size() + 64 * request.headers.size());
  out += request.method;
  out += '\n';
  util::append_percent_encoded(out, normalized_path(raw_path), util::Slash::kKept);
  out += '\n';
  append_canonical_query(out, query, presigned);
  out += '\n';
  std::string_view names = signed_headers;
  while (!names.empty()) {
    const auto semicolon = names.find(';');
    const std::string_view name = names.substr(0, semicolon);
    names = semicolon == std::string_view::npos ? std::string_view() : names.substr(semicolon + 1);
    out += name;
    out += ':';
    bool first = true;
    for (const auto& [header, value] : request.headers) {
      if (!iequals(header, name)) continue;
      if (!first) out += ',';
      first = false;
      append_header_value(out, value);
    }
    out += '\n';
  }
  out += '\n';
  out += signed_headers;
  out += '\n';
  out += payload_hash;
  return out;
}

// --- dates -----------------------------------------------------------------------------------

// "20150830T123600Z" (ISO 8601 basic, UTC), the only form X-Amz-Date takes.
std::optional<Clock::time_point> parse_amz_date(std::string_view text) {
  if (text.size() != 16 || text[8] != 'T' || text[15] != 'Z') return std::nullopt;
  bool ok = true;
  auto number = [&](std::size_t position, std::size_t digits) {
    int value = 0;
    for (std::size_t i = position; i < position + digits; ++i) {
      if (text[i] < '0' || text[i] > '9') ok = false;
      value = value * 10 + (text[i] - '0');
    }
    return value;
  };
  const int year = number(0, 4), month = number(4, 2), day = number(6, 2);
  const int hour = number(9, 2), minute = number(11, 2), second = number(13, 2);
  // Past 2262 the clock's nanoseconds overflow (found by fuzz_http): no client signs then.
  if (!ok || year < 1970 || year > 2200 || hour > 23 || minute > 59 || second > 59) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(year),
                                         std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok()) return std::nullopt;
  return std::chrono::sys_days(date) + std::chrono::hours(hour) + std::chrono::minutes(minute) +
         std::chrono::seconds(second);
}

std::string format_amz_date(Clock::time_point time) {
  const auto seconds = std::chrono::floor<std::chrono::seconds>(time);
  const auto days = std::chrono::floor<std::chrono::days>(seconds);
  const std::chrono::year_month_day date{days};
  const auto in_day = (seconds - days).count();
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}Z", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                     in_day / 3600, in_day / 60 % 60, in_day % 60);
}

// --- verification ----------------------------------------------------------------------------

// What a request says about its signature, in either form. Views into the request or into the
// decoded query parameters.
struct Claim {
  bool presigned = false;
  std::string_view credential;  // "AKID/20150830/us-east-1/sqs/aws4_request"
  std::string_view signed_headers;
  std::string_view signature;
  std::string_view amz_date;
  std::int64_t expires_seconds = 0;  // presigned only
};

const std::string* find_param(const QueryParams& params, std::string_view name) {
  for (const auto& [key, value] : params) {
    if (key == name) return &value;
  }
  return nullptr;
}

// The one header called `name`: nullopt when absent; `repeated` set when it occurs again.
std::optional<std::string_view> find_header(const SignedRequest& request, std::string_view name,
                                            bool& repeated) {
  std::optional<std::string_view> found;
  repeated = false;
  for (const auto& [header, value] : request.headers) {
    if (!iequals(header, name)) continue;
    if (found) repeated = true;
    found = value;
  }
  return found;
}

// Parses "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...".
std::optional<AuthFailure> parse_authorization(std::string_view header, Claim& claim) {
  header = trim(header);
  const auto space = header.find(' ');
  const std::string_view algorithm = header.substr(0, space);
  if (algorithm != kAlgorithm) {
    return incomplete(fmt::format(
        "Unsupported Authorization algorithm: only {} (Signature Version 4) is accepted",
        kAlgorithm));
  }
  std::string_view rest =
      space == std::string_view::npos ? std::string_view() : header.substr(space + 1);
  bool has_credential = false, has_signed_headers = false, has_signature = false;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view component = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (component.empty()) continue;
    const auto eq = component.find('=');
    if (eq == std::string_view::npos) {
      return incomplete(
          "Authorization header components must be Key=Value pairs separated by commas");
    }
    const std::string_view key = component.substr(0, eq);
    const std::string_view value = component.substr(eq + 1);
    bool* seen = nullptr;
    if (key == "Credential") {
      seen = &has_credential;
      claim.credential = value;
    } else if (key == "SignedHeaders") {
      seen = &has_signed_headers;
      claim.signed_headers = value;
    } else if (key == "Signature") {
      seen = &has_signature;
      claim.signature = value;
    } else {
      return incomplete(
          fmt::format("Authorization header has an unknown component '{}'", key.substr(0, 40)));
    }
    if (*seen) {
      return incomplete(fmt::format("Authorization header has '{}' more than once", key));
    }
    *seen = true;
  }
  for (const auto& [present, name] :
       {std::pair{has_credential, "Credential"}, std::pair{has_signed_headers, "SignedHeaders"},
        std::pair{has_signature, "Signature"}}) {
    if (!present) {
      return incomplete(fmt::format("Authorization header requires '{}' parameter", name));
    }
  }
  return std::nullopt;
}

std::optional<AuthFailure> parse_query_claim(const QueryParams& params, Claim& claim) {
  claim.presigned = true;
  static constexpr std::string_view kRequired[] = {"X-Amz-Algorithm",     "X-Amz-Credential",
                                                   "X-Amz-Date",          "X-Amz-Expires",
                                                   "X-Amz-SignedHeaders", "X-Amz-Signature"};
  std::string_view values[std::size(kRequired)];
  for (std::size_t i = 0; i < std::size(kRequired); ++i) {
    const std::string* value = nullptr;
    for (const auto& [key, v] : params) {
      if (key != kRequired[i]) continue;
      if (value != nullptr) {
        return incomplete(
            fmt::format("The query-string parameter '{}' is given more than once", kRequired[i]));
      }
      value = &v;
    }
    if (value == nullptr) {
      return incomplete(
          fmt::format("AWS query-string parameters must include '{}'. Re-examine the query-string "
                      "parameters.",
                      kRequired[i]));
    }
    values[i] = *value;
  }
  if (values[0] != kAlgorithm) {
    return incomplete(fmt::format("X-Amz-Algorithm must be {}", kAlgorithm));
  }
  claim.credential = values[1];
  claim.amz_date = values[2];
  claim.signed_headers = values[4];
  claim.signature = values[5];
  const std::string_view expires = values[3];
  std::int64_t seconds = 0;
  // At most 7 digits are read: a longer value overflowed (found by fuzz_http).
  const bool numeric = !expires.empty() && expires.size() <= 7 &&
                       std::all_of(expires.begin(), expires.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
  for (const char c : numeric ? expires : std::string_view()) seconds = seconds * 10 + (c - '0');
  if (!numeric || seconds < 1 || seconds > kMaxExpiresSeconds) {
    return incomplete(fmt::format("X-Amz-Expires must be a number of seconds from 1 to {} (7 days)",
                                  kMaxExpiresSeconds));
  }
  claim.expires_seconds = seconds;
  return std::nullopt;
}

// The payload hash the client signed: its x-amz-content-sha256 header when sent (which must
// then be the body's), else the body's SHA-256. `alternative` is set to UNSIGNED-PAYLOAD for a
// presigned request without a body, as S3-style presigners sign that.
std::optional<AuthFailure> payload_hash(const SignedRequest& request, bool presigned,
                                        std::string& hash, std::string_view& alternative) {
  bool repeated = false;
  const auto declared = find_header(request, "x-amz-content-sha256", repeated);
  if (repeated) return incomplete("x-amz-content-sha256 is given more than once");
  if (!declared) {
    hash = hex(sha256({request.body}));
    if (presigned && request.body.empty()) alternative = kUnsignedPayload;
    return std::nullopt;
  }
  const std::string_view value = trim(*declared);
  if (value == kUnsignedPayload) {
    if (!request.body.empty()) {
      return incomplete(
          "UNSIGNED-PAYLOAD is accepted only for requests without a body; sign "
          "the body's SHA-256");
    }
    hash = value;
    return std::nullopt;
  }
  if (!is_hex_string(value, 64)) {
    return incomplete("x-amz-content-sha256 must be the hex SHA-256 of the body");
  }
  const std::string actual = hex(sha256({request.body}));
  if (!iequals(value, actual)) {
    return failure("SignatureDoesNotMatch",
                   "The x-amz-content-sha256 header does not match the SHA-256 of the body");
  }
  hash = value;
  return std::nullopt;
}

}  // namespace

// --- Credentials -------------------------------------------------------------------------------

Credentials::~Credentials() {
  for (auto& [access_key, secret] : secrets_) OPENSSL_cleanse(secret.data(), secret.size());
}

Credentials Credentials::parse(std::string_view text, std::string_view source) {
  Credentials credentials;
  std::size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const auto newline = text.find('\n');
    const std::string_view line = trim(text.substr(0, newline));
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    if (line.empty() || line.front() == '#') continue;
    // Exactly two fields; the line itself is never shown, as it may hold a secret.
    std::string_view fields[2];
    std::size_t count = 0;
    std::string_view rest = line;
    while (!rest.empty()) {
      const auto end = std::find_if(rest.begin(), rest.end(), is_space) - rest.begin();
      if (count < 2) fields[count] = rest.substr(0, end);
      ++count;
      rest = trim(rest.substr(end));
    }
    if (count != 2) {
      throw std::runtime_error(fmt::format(
          "{}:{}: expected 'ACCESS_KEY_ID SECRET_ACCESS_KEY' (two fields), found {} field{}",
          source, line_number, count, count == 1 ? "" : "s"));
    }
    const std::string_view access_key = fields[0];
    const std::string_view secret = fields[1];
    // The access key travels in "Credential=KEY/date/region/service/aws4_request".
    const bool key_ok = std::all_of(access_key.begin(), access_key.end(), [](char c) {
      return c > ' ' && c < 0x7f && c != '/' && c != ',' && c != '=' && c != ';';
    });
    if (!key_ok) {
      throw std::runtime_error(fmt::format(
          "{}:{}: the access key ID may hold printable ASCII characters other than / , = ;", source,
          line_number));
    }
    const bool secret_ok =
        std::all_of(secret.begin(), secret.end(), [](char c) { return c > ' ' && c < 0x7f; });
    if (!secret_ok) {
      throw std::runtime_error(
          fmt::format("{}:{}: the secret access key may hold printable ASCII characters only",
                      source, line_number));
    }
    if (!credentials.secrets_.emplace(std::string(access_key), std::string(secret)).second) {
      throw std::runtime_error(fmt::format("{}:{}: access key ID {} is listed more than once",
                                           source, line_number, access_key));
    }
  }
  if (credentials.secrets_.empty()) {
    throw std::runtime_error(fmt::format(
        "{}: no access keys (expected lines 'ACCESS_KEY_ID SECRET_ACCESS_KEY')", source));
  }
  return credentials;
}

Credentials Credentials::load(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw std::runtime_error(
        fmt::format("cannot read credentials file {}: {}", path, std::strerror(errno)));
  }
  std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (file.bad()) {
    OPENSSL_cleanse(text.data(), text.size());
    throw std::runtime_error(fmt::format("cannot read credentials file {}", path));
  }
  try {
    Credentials credentials = parse(text, path);
    OPENSSL_cleanse(text.data(), text.size());
    return credentials;
  } catch (...) {
    OPENSSL_cleanse(text.data(), text.size());
    throw;
  }
}

std::optional<std::string_view> Credentials::secret_of(std::string_view access_key) const {
  const auto it = secrets_.find(access_key);
  if (it == secrets_.end()) return std::nullopt;
  return std::string_view(it->second);
}

// --- verify --------------------------------------------------------------------------------------

namespace internal {

std::string canonical_request(const SignedRequest& request, std::string_view signed_headers,
                              std::string_view payload_hash, bool presigned) {
  const auto [raw_path, raw_query] = split_target(request.target);
  return build_canonical_request(request, raw_path, parse_query(raw_query), signed_headers,
                                 payload_hash, presigned);
}

std::optional<AuthFailure> verify(const SignedRequest& request, const Credentials* credentials,
                                  const Regions& regions, std::string_view service,
                                  Clock::time_point now, bool signature_too,
                                  std::string* region_used) {
  const auto [raw_path, raw_query] = split_target(request.target);
  const QueryParams query = parse_query(raw_query);

  bool repeated_authorization = false;
  const auto authorization = find_header(request, "authorization", repeated_authorization);
  const bool query_form = find_param(query, "X-Amz-Algorithm") != nullptr ||
                          find_param(query, "X-Amz-Credential") != nullptr ||
                          find_param(query, "X-Amz-Signature") != nullptr;
  if (!authorization && !query_form) {
    if (find_param(query, "AWSAccessKeyId") != nullptr) {
      return incomplete(
          "Signature Version 2 is not supported: sign requests with Signature "
          "Version 4 (AWS4-HMAC-SHA256)");
    }
    return failure("MissingAuthenticationToken", "Request is missing Authentication Token");
  }
  if (authorization && query_form) {
    return incomplete(
        "Only one auth mechanism allowed: the Authorization header or the "
        "X-Amz-* query-string parameters, not both");
  }
  if (repeated_authorization) return incomplete("The Authorization header is given more than once");

  Claim claim;
  if (authorization) {
    if (auto bad = parse_authorization(*authorization, claim)) return bad;
    bool repeated_date = false;
    const auto amz_date = find_header(request, "x-amz-date", repeated_date);
    if (!amz_date) {
      return incomplete("Authorization header requires existence of an 'X-Amz-Date' header");
    }
    if (repeated_date) return incomplete("The X-Amz-Date header is given more than once");
    claim.amz_date = trim(*amz_date);
  } else if (auto bad = parse_query_claim(query, claim)) {
    return bad;
  }

  // Credential=ACCESS_KEY/DATE/REGION/SERVICE/aws4_request
  std::string_view scope_parts[5];
  {
    std::string_view rest = claim.credential;
    std::size_t count = 0;
    while (count < 5) {
      const auto slash = rest.find('/');
      scope_parts[count++] = rest.substr(0, slash);
      if (slash == std::string_view::npos) {
        rest = {};
        break;
      }
      rest = rest.substr(slash + 1);
    }
    if (count != 5 || !rest.empty() || scope_parts[0].empty()) {
      return incomplete(
          "Credential must have the form ACCESS_KEY_ID/YYYYMMDD/REGION/SERVICE/aws4_request");
    }
  }
  const std::string_view access_key = scope_parts[0];

  if (!is_hex_string(claim.signature, kSignatureHexSize)) {
    return incomplete("Signature must be 64 hexadecimal digits");
  }
  {
    bool has_host = false;
    bool has_target = false;
    std::string_view names = claim.signed_headers;
    if (names.empty()) return incomplete("SignedHeaders must name the signed headers");
    while (true) {
      const auto semicolon = names.find(';');
      const std::string_view name = names.substr(0, semicolon);
      if (name.empty()) return incomplete("SignedHeaders has an empty header name");
      if (iequals(name, "host")) has_host = true;
      if (iequals(name, "x-amz-target")) has_target = true;
      if (semicolon == std::string_view::npos) break;
      names = names.substr(semicolon + 1);
    }
    if (!has_host) return incomplete("'Host' must be a 'SignedHeader' in the AWS Authorization");
    // X-Amz-Target names the action: unsigned, it would let a request signed for one action
    // (a presigned GetQueueAttributes) run another.
    bool repeated_target = false;
    if (find_header(request, "x-amz-target", repeated_target) && !has_target) {
      return incomplete("'X-Amz-Target' must be a 'SignedHeader' when the request has it");
    }
  }
  const auto signed_at = parse_amz_date(claim.amz_date);
  if (!signed_at) {
    return incomplete("X-Amz-Date must be a UTC time in the form YYYYMMDD'T'HHMMSS'Z'");
  }

  std::optional<std::string_view> secret;
  if (credentials != nullptr) {
    secret = credentials->secret_of(access_key);
    if (!secret) {
      return failure("InvalidClientTokenId",
                     "The security token included in the request is invalid");
    }
  }

  if (*signed_at - now > kMaxSkew) {
    return failure(
        "RequestExpired",
        fmt::format("Signature not yet current: {} is still later than {} ({} + 15 min.)",
                    claim.amz_date, format_amz_date(now + kMaxSkew), format_amz_date(now)));
  }
  if (claim.presigned) {
    if (now > *signed_at + std::chrono::seconds(claim.expires_seconds)) {
      return failure("RequestExpired",
                     fmt::format("Request has expired: signed at {} for {} seconds, now {}",
                                 claim.amz_date, claim.expires_seconds, format_amz_date(now)));
    }
  } else if (now - *signed_at > kMaxSkew) {
    return failure(
        "RequestExpired",
        fmt::format("Signature expired: {} is now earlier than {} ({} - 15 min.)", claim.amz_date,
                    format_amz_date(now - kMaxSkew), format_amz_date(now)));
  }

  const std::string_view date = claim.amz_date.substr(0, 8);
  if (scope_parts[1] != date) {
    return failure("SignatureDoesNotMatch",
                   fmt::format("Date in Credential scope does not match YYYYMMDD from ISO-8601 "
                               "version of date from HTTP: '{}' != '{}', from '{}'",
                               scope_parts[1].substr(0, 16), date, claim.amz_date));
  }
  const std::string_view region = scope_parts[2];
  if (!regions.allows(region)) {
    return failure("SignatureDoesNotMatch",
                   fmt::format("Credential should be scoped to a valid region: this server "
                               "answers {} '{}', not '{}' (txmq serve --region)",
                               regions.any() ? "any region" : "the regions",
                               regions.describe(), region.substr(0, 40)));
  }
  if (scope_parts[3] != service) {
    return failure("SignatureDoesNotMatch",
                   fmt::format("Credential should be scoped to correct service: '{}'", service));
  }
  if (scope_parts[4] != kTerminator) {
    return failure(
        "SignatureDoesNotMatch",
        fmt::format("Credential should be scoped with a valid terminator: '{}'", kTerminator));
  }
  if (credentials == nullptr || !signature_too) {  // any well-formed signature
    if (region_used != nullptr) region_used->assign(region);
    return std::nullopt;
  }

  std::string hash;
  std::string_view alternative;
  if (auto bad = payload_hash(request, claim.presigned, hash, alternative)) return bad;
  std::string canonical = build_canonical_request(request, raw_path, query, claim.signed_headers,
                                                  hash, claim.presigned);
  bool authentic = constant_time_equal(
      signature_of(canonical, claim.amz_date, *secret, region, service), claim.signature);
  if (!authentic && !alternative.empty()) {
    canonical.resize(canonical.size() - hash.size());
    canonical += alternative;
    authentic = constant_time_equal(
        signature_of(canonical, claim.amz_date, *secret, region, service), claim.signature);
  }
  if (authentic) {
    if (region_used != nullptr) region_used->assign(region);
    return std::nullopt;
  }
  return failure("SignatureDoesNotMatch", std::string(kMismatchMessage));
}

}  // namespace internal

std::optional<AuthFailure> verify(const SignedRequest& request, const Credentials* credentials,
                                  std::string_view region, Clock::time_point now) {
  return internal::verify(request, credentials, Regions(region), "sqs", now);
}

std::optional<AuthFailure> verify(const SignedRequest& request, const Credentials* credentials,
                                  const Regions& regions, Clock::time_point now,
                                  std::string& region) {
  return internal::verify(request, credentials, regions, "sqs", now, true, &region);
}

bool has_query_signature(std::string_view target) {
  const QueryParams query = parse_query(split_target(target).second);
  return find_param(query, "X-Amz-Algorithm") != nullptr ||
         find_param(query, "X-Amz-Credential") != nullptr ||
         find_param(query, "X-Amz-Signature") != nullptr;
}

std::optional<AuthFailure> precheck(const SignedRequest& request, const Credentials* credentials,
                                    const Regions& regions, Clock::time_point now) {
  return internal::verify(request, credentials, regions, "sqs", now, false);
}

// --- signing -------------------------------------------------------------------------------------

namespace {

// Lower-case, sorted, distinct names of the headers, joined with ';'.
std::string signed_header_names(const SignedRequest& request) {
  std::vector<std::string> names;
  names.reserve(request.headers.size());
  for (const auto& [name, value] : request.headers) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(), ascii_lower);
    names.push_back(std::move(lower));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string joined;
  for (const auto& name : names) {
    if (!joined.empty()) joined += ';';
    joined += name;
  }
  return joined;
}

std::string body_hash_for_signing(const SignedRequest& request) {
  bool repeated = false;
  if (const auto declared = find_header(request, "x-amz-content-sha256", repeated)) {
    return std::string(trim(*declared));
  }
  return hex(sha256({request.body}));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> sign(const SignedRequest& request,
                                                      const SigningKey& key,
                                                      Clock::time_point now) {
  const std::string amz_date = format_amz_date(now);
  SignedRequest with_date = request;
  with_date.headers.emplace_back("X-Amz-Date", amz_date);
  if (!key.session_token.empty()) {
    with_date.headers.emplace_back("X-Amz-Security-Token", key.session_token);
  }
  const std::string signed_headers = signed_header_names(with_date);
  const std::string canonical =
      internal::canonical_request(with_date, signed_headers, body_hash_for_signing(request), false);
  const std::string signature =
      signature_of(canonical, amz_date, key.secret, key.region, key.service);

  std::vector<std::pair<std::string, std::string>> added;
  added.emplace_back("X-Amz-Date", amz_date);
  if (!key.session_token.empty()) {
    added.emplace_back("X-Amz-Security-Token", std::string(key.session_token));
  }
  added.emplace_back(
      "Authorization",
      fmt::format(
          "{} Credential={}/{}, SignedHeaders={}, Signature={}", kAlgorithm, key.access_key,
          credential_scope(std::string_view(amz_date).substr(0, 8), key.region, key.service),
          signed_headers, signature));
  return added;
}

std::string presign(const SignedRequest& request, const SigningKey& key, Clock::time_point now,
                    std::chrono::seconds expires) {
  if (expires.count() < 1 || expires.count() > kMaxExpiresSeconds) {
    throw std::invalid_argument("presign: expires must be 1 second to 7 days");
  }
  const std::string amz_date = format_amz_date(now);
  const std::string signed_headers = signed_header_names(request);
  std::string target(request.target);
  if (target.find('?') == std::string::npos) {
    target += '?';
  } else if (target.back() != '?' && target.back() != '&') {
    target += '&';
  }
  target += "X-Amz-Algorithm=";
  target += kAlgorithm;
  target += "&X-Amz-Credential=";
  target += uri_encoded(fmt::format(
      "{}/{}", key.access_key,
      credential_scope(std::string_view(amz_date).substr(0, 8), key.region, key.service)));
  target += "&X-Amz-Date=";
  target += amz_date;
  target += fmt::format("&X-Amz-Expires={}", expires.count());
  target += "&X-Amz-SignedHeaders=";
  target += uri_encoded(signed_headers);
  if (!key.session_token.empty()) {
    target += "&X-Amz-Security-Token=";
    target += uri_encoded(key.session_token);
  }
  SignedRequest presigned = request;
  presigned.target = target;
  const std::string canonical =
      internal::canonical_request(presigned, signed_headers, body_hash_for_signing(request), true);
  target += "&X-Amz-Signature=";
  target += signature_of(canonical, amz_date, key.secret, key.region, key.service);
  return target;
}

}  // namespace txmq::server
