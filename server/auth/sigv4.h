// The authentication of txmq serve (server/auth/): SigV4 and the credentials file here;
// SHA-256, HMAC and the constant-time comparison of secrets in crypto.h; the web pages' guard
// in web_guard.h.
//
// AWS Signature Version 4 for `txmq serve`: verifies the signature of every request (the
// Authorization header form and the presigned query-string form) and signs requests for our own
// clients (the bench's load generator, tests).
//
// Canonical request as AWS specifies it and as botocore and the JS SDK v3 compute it for services
// other than S3: the path is normalized (dot segments and repeated slashes removed) and
// URI-encoded once more as received, so "/a%20b" is signed as "/a%2520b"; query parameters are
// percent-decoded ('+' is a space, as the Query protocol reads it: a signer that meant a plus
// sent %2B), re-encoded (RFC 3986 unreserved characters kept) and sorted by name then value; header values are trimmed, inner whitespace runs collapsed to one
// space, and repeated headers joined with ','.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/auth/regions.h"

namespace txmq::server {

// A request as the HTTP layer received it. Views: the caller keeps the request alive.
struct SignedRequest {
  std::string_view method;  // "POST"
  // The raw request target: path plus optional query, exactly as received
  // ("/000000000000/orders?Action=SendMessage"), never decoded.
  std::string_view target;
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // any case, may repeat
  std::string_view body;
};

// Why a request is refused: an SQS error code, a message safe to show (never a secret) and the
// HTTP status SQS answers with.
struct AuthFailure {
  std::string code;  // "SignatureDoesNotMatch", "InvalidClientTokenId", "RequestExpired", ...
  std::string message;
  int http_status;
};

// The access keys of `--credentials FILE`. Immutable once built, so one instance may be shared
// by many threads. Secrets are wiped from memory when the instance goes.
class Credentials {
 public:
  // Reads FILE: one `ACCESS_KEY_ID SECRET_ACCESS_KEY` pair per line, separated by spaces or tabs;
  // blank lines and lines starting with '#' are ignored. Throws std::runtime_error naming the file
  // and line for a malformed line, a duplicate key, an unreadable file or a file without keys;
  // the message never contains a secret (nor the text of a malformed line, which may be one).
  static Credentials load(const std::string& path);
  // As load(), from the file's text; `source` names it in errors.
  static Credentials parse(std::string_view text, std::string_view source);

  Credentials(const Credentials&) = default;
  Credentials& operator=(const Credentials&) = default;
  Credentials(Credentials&&) noexcept = default;
  Credentials& operator=(Credentials&&) noexcept = default;
  ~Credentials();

  // The secret of `access_key`; nullopt for an unknown key. Valid while this instance lives.
  std::optional<std::string_view> secret_of(std::string_view access_key) const;
  std::size_t size() const { return secrets_.size(); }

 private:
  Credentials() = default;
  std::map<std::string, std::string, std::less<>> secrets_;  // access key -> secret
};

// Checks the SigV4 signature of `request` for service "sqs" in `region`.
// Returns nullopt when the request is authentic, else why not:
//   MissingAuthenticationToken (403)  neither an Authorization header nor a query signature;
//   IncompleteSignature (400)         a malformed Authorization header or query signature, no
//                                     X-Amz-Date, both forms at once;
//   InvalidClientTokenId (403)        an access key that `credentials` does not hold;
//   RequestExpired (400)              X-Amz-Date more than 15 minutes from `now` (either way), or
//                                     a presigned request past its X-Amz-Expires;
//   SignatureDoesNotMatch (403)       a wrong signature, or a scope of another date, region or
//                                     service than the request's.
// `credentials` nullptr: any access key and any well-formed signature are accepted (the signature
// is not computed), but the request must still be well-formed, scoped to `region` and "sqs", and
// within the clock skew. An X-Amz-Target header, which chooses the action, must be among the
// signed headers (IncompleteSignature otherwise). The body is covered by the signature (an x-amz-content-sha256 header,
// when sent, must be the body's SHA-256; UNSIGNED-PAYLOAD is accepted only for a presigned request
// without a body). X-Amz-Security-Token is signed when the client signed it, not checked otherwise.
// Thread-safe.
std::optional<AuthFailure> verify(const SignedRequest& request, const Credentials* credentials,
                                  std::string_view region,
                                  std::chrono::system_clock::time_point now);
// As verify() for one region, for a server that answers `regions`: a request scoped to any of
// them is checked in its own region, which is written to `region` (when it is authentic).
std::optional<AuthFailure> verify(const SignedRequest& request, const Credentials* credentials,
                                  const Regions& regions,
                                  std::chrono::system_clock::time_point now, std::string& region);

// What verify() can check before the body has arrived, on a request whose body is empty: the
// form of the signature, its scope, date and expiry, that X-Amz-Target is signed, and (with
// `credentials`) that the access key is known. The signature itself is not computed. nullopt
// when verify() may still accept the request once its body is read.
std::optional<AuthFailure> precheck(const SignedRequest& request, const Credentials* credentials,
                                    const Regions& regions,
                                    std::chrono::system_clock::time_point now);

// Whether the request target carries the query-string (presigned) form of a signature, read
// with the same decoding as verify() reads it (so "X%2DAmz%2DSignature" is one too).
bool has_query_signature(std::string_view target);

// Who signs, for sign() and presign().
struct SigningKey {
  std::string_view access_key;
  std::string_view secret;
  std::string_view region = "us-east-1";
  std::string_view service = "sqs";
  std::string_view session_token = {};  // empty: none; else sent as X-Amz-Security-Token, signed
};

// Signs `request` in the header form at `now`. Every header of request.headers is signed, and
// they must include Host; the result is the headers to add: X-Amz-Date, X-Amz-Security-Token
// (with a session token) and Authorization. The body's hash is signed without sending
// x-amz-content-sha256, as botocore does for SQS. REQUIRES: request.headers holds none of them.
std::vector<std::pair<std::string, std::string>> sign(const SignedRequest& request,
                                                      const SigningKey& key,
                                                      std::chrono::system_clock::time_point now);

// Presigns `request` in the query-string form at `now`, valid for `expires` (1 s to 7 days), as
// botocore's generate_presigned_url does: returns request.target with the X-Amz-* parameters
// appended (X-Amz-Signature last). Every header of request.headers is signed (Host at least); the
// body's hash is signed too (empty body: the hash of nothing).
std::string presign(const SignedRequest& request, const SigningKey& key,
                    std::chrono::system_clock::time_point now, std::chrono::seconds expires);

namespace internal {

// verify() for any service, so that AWS's published test vectors (service "service") run too.
// `signature_too` false: precheck().
// `region`, when given, receives the region of the request's credential scope.
std::optional<AuthFailure> verify(const SignedRequest& request, const Credentials* credentials,
                                  const Regions& regions, std::string_view service,
                                  std::chrono::system_clock::time_point now,
                                  bool signature_too = true, std::string* region = nullptr);

// The canonical request of `request`, for the headers named in `signed_headers` (as written in
// SignedHeaders=, "host;x-amz-date") and the given payload hash. `presigned`: X-Amz-Signature is
// left out of the canonical query.
std::string canonical_request(const SignedRequest& request, std::string_view signed_headers,
                              std::string_view payload_hash, bool presigned);

}  // namespace internal
}  // namespace txmq::server
