#include "server/auth/sigv4.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace txmq::server {
namespace {

using Clock = std::chrono::system_clock;
using std::chrono::minutes;
using std::chrono::seconds;

Clock::time_point utc(int year, unsigned month, unsigned day, int hour, int minute, int second) {
  return std::chrono::sys_days(std::chrono::year_month_day{
             std::chrono::year(year), std::chrono::month(month), std::chrono::day(day)}) +
         std::chrono::hours(hour) + minutes(minute) + seconds(second);
}

// A request that owns its text; view() is what the HTTP layer would hand to verify().
struct Request {
  std::string method = "POST";
  std::string target = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  SignedRequest view() const {
    SignedRequest request{method, target, {}, body};
    for (const auto& [name, value] : headers) request.headers.emplace_back(name, value);
    return request;
  }
  void add(const std::vector<std::pair<std::string, std::string>>& more) {
    headers.insert(headers.end(), more.begin(), more.end());
  }
  std::string* header(std::string_view name) {
    for (auto& [key, value] : headers) {
      if (key == name) return &value;
    }
    return nullptr;
  }
};

std::string query_param(std::string_view target, std::string_view name) {
  const std::string key = fmt::format("{}=", name);
  auto at = target.find(key);
  if (at == std::string_view::npos) return {};
  at += key.size();
  return std::string(target.substr(at, target.find('&', at) - at));
}

// --- AWS's published SigV4 test suite ------------------------------------------------------------
//
// The cases of AWS's "aws-sig-v4-test-suite" (kept in awslabs/aws-c-auth under
// tests/aws-signing-test-suite/v4), restated here: every case is signed by access key
// AKIDEXAMPLE with secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY for region us-east-1 and
// service "service" at 2015-08-30 12:36:00 UTC; the header form adds X-Amz-Date, the query form
// is presigned for 3600 seconds. Paths are given unencoded, as the suite writes them; signing
// encodes them once, as it does a path received on the wire.

constexpr std::string_view kSuiteKey = "AKIDEXAMPLE";
constexpr std::string_view kSuiteSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr std::string_view kSuiteDate = "20150830T123600Z";
const Clock::time_point kSuiteTime = utc(2015, 8, 30, 12, 36, 0);
constexpr std::string_view kSuiteToken =
    "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
constexpr std::string_view kStsToken =
    "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfI"
    "eoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0"
    "wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDr"
    "ypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
constexpr std::string_view kHost = "example.amazonaws.com";

struct SuiteCase {
  std::string name;
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;  // as sent, before signing
  std::string body;
  std::string_view session_token;  // signed as X-Amz-Security-Token when not empty
  std::string signed_headers;      // header form's SignedHeaders=
  std::string header_signature;    // empty: no header-form vector
  std::string query_signature;     // empty: no presigned vector
};

std::vector<SuiteCase> suite_cases() {
  const std::pair<std::string, std::string> host{"Host", std::string(kHost)};
  const std::string plain = "host;x-amz-date";
  // The vanilla GET's signatures recur wherever normalization brings a path back to "/".
  const std::string vanilla = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
  const std::string vanilla_query =
      "e93c787ed7f371d5c6b165c1b38ede9550f4dce4144713e844b25b7192d3865d";
  return {
      {"get-vanilla", "GET", "/", {host}, "", {}, plain, vanilla, vanilla_query},
      {"get-vanilla-query-order-key-case",
       "GET",
       "/?Param2=value2&Param1=value1",
       {host},
       "",
       {},
       plain,
       "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
       "86012e2c9ad4d77369f5d81c11f75158aae4f895a085212cc6d3f923d300bed5"},
      {"get-vanilla-query-order-encoded",
       "GET",
       "/?Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
       {host},
       "",
       {},
       plain,
       "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac",
       "c5f1848ceec943ac2ca68ee720460c23aaae30a2300586597ada94c4a65e4787"},
      {"get-vanilla-utf8-query",
       "GET",
       "/?\xE1\x88\xB4=bar",
       {host},
       "",
       {},
       plain,
       "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
       ""},
      {"get-vanilla-query-unreserved",
       "GET",
       "/?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
       "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
       {host},
       "",
       {},
       plain,
       "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197",
       ""},
      {"get-vanilla-empty-query-key",
       "GET",
       "/?Param1=value1",
       {host},
       "",
       {},
       plain,
       "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb",
       ""},
      {"get-unreserved",
       "GET",
       "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
       {host},
       "",
       {},
       plain,
       "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f",
       ""},
      {"get-utf8",
       "GET",
       "/\xE1\x88\xB4",
       {host},
       "",
       {},
       plain,
       "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
       "10eae3f14a260bd3911cc6d008d3c576d143b05b62f09782a7a4b37f52178e44"},
      {"get-space-normalized",
       "GET",
       "/example space/",
       {host},
       "",
       {},
       plain,
       "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
       "7a1f416954786484c9824d93c1f26ef64acb9b1b6c9154d08c9f07d0e394abf6"},
      {"get-slashes-normalized",
       "GET",
       "//example//",
       {host},
       "",
       {},
       plain,
       "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84",
       ""},
      {"get-slash-normalized", "GET", "//", {host}, "", {}, plain, vanilla, vanilla_query},
      {"get-slash-dot-slash-normalized",
       "GET",
       "/./",
       {host},
       "",
       {},
       plain,
       vanilla,
       vanilla_query},
      {"get-slash-pointless-dot-normalized",
       "GET",
       "/./example",
       {host},
       "",
       {},
       plain,
       "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5",
       "35034b1a0bdd969f346975386daf8aedfd4976573b8348cf4f67eaa41c5857de"},
      {"get-relative-normalized",
       "GET",
       "/example/..",
       {host},
       "",
       {},
       plain,
       vanilla,
       vanilla_query},
      {"get-relative-relative-normalized",
       "GET",
       "/example1/example2/../..",
       {host},
       "",
       {},
       plain,
       vanilla,
       vanilla_query},
      {"get-header-value-trim",
       "GET",
       "/",
       {host, {"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}},
       "",
       {},
       "host;my-header1;my-header2;x-amz-date",
       "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
       "e7bb0fd515e125e1aec2ecc4c0c17484fb06f6846b927c35e46005dd3df3acd4"},
      {"get-header-key-duplicate",
       "GET",
       "/",
       {host, {"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}},
       "",
       {},
       "host;my-header1;x-amz-date",
       "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
       ""},
      {"get-header-value-order",
       "GET",
       "/",
       {host,
        {"My-Header1", "value4"},
        {"My-Header1", "value1"},
        {"My-Header1", "value3"},
        {"My-Header1", "value2"}},
       "",
       {},
       "host;my-header1;x-amz-date",
       "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
       ""},
      {"get-header-value-multiline",
       "GET",
       "/",
       {host, {"My-Header1", "value1\r\n  value2\r\n     value3"}},
       "",
       {},
       "host;my-header1;x-amz-date",
       "cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd",
       ""},
      {"post-vanilla",
       "POST",
       "/",
       {host},
       "",
       {},
       plain,
       "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
       "2ce6e6d2e0cf2f9d1b55fafec88cd20574c31dc2e7631979f71ba2310083e95b"},
      {"post-vanilla-query",
       "POST",
       "/?Param1=value1",
       {host},
       "",
       {},
       plain,
       "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
       "a9ef26247f293bffe40eeff86a0480ba8c14d31503b2e0c3399e3a16bf1a3682"},
      {"post-header-key-sort",
       "POST",
       "/",
       {host, {"My-Header1", "value1"}},
       "",
       {},
       "host;my-header1;x-amz-date",
       "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
       "c09d07e0d55871f10f2a6d350d994acf6825a3cae70673d7def55616e6119dd7"},
      {"post-header-value-case",
       "POST",
       "/",
       {host, {"My-Header1", "VALUE1"}},
       "",
       {},
       "host;my-header1;x-amz-date",
       "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d",
       "0698bc9e4f7f9139065ba2909c0e99da257e8e2a42492a097bcd46d792391fed"},
      // The header form signs the body through x-amz-content-sha256, sent with the request.
      {"post-x-www-form-urlencoded",
       "POST",
       "/",
       {{"Content-Type", "application/x-www-form-urlencoded"},
        host,
        {"Content-Length", "13"},
        {"x-amz-content-sha256",
         "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}},
       "Param1=value1",
       {},
       "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
       "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b",
       ""},
      // Presigned, the same request signs the body's hash without that header.
      {"post-x-www-form-urlencoded (presigned)",
       "POST",
       "/",
       {{"Content-Type", "application/x-www-form-urlencoded"}, host, {"Content-Length", "13"}},
       "Param1=value1",
       {},
       "",
       "",
       "89a40deed0f26f9461242825a082d2222717248abc7ab41f552ad84a94ad46e9"},
      {"post-x-www-form-urlencoded-parameters",
       "POST",
       "/",
       {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
        host,
        {"Content-Length", "13"},
        {"x-amz-content-sha256",
         "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}},
       "Param1=value1",
       {},
       "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
       "328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422",
       ""},
      {"get-vanilla-with-session-token",
       "GET",
       "/",
       {host},
       "",
       kSuiteToken,
       "host;x-amz-date;x-amz-security-token",
       "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
       "7ff2b50b376cb4d151970630573d6291dc128cc5c2a12ffb237f73cc53f67b6c"},
      {"post-sts-header-before",
       "POST",
       "/",
       {host},
       "",
       kStsToken,
       "host;x-amz-date;x-amz-security-token",
       "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
       ""},
  };
}

Credentials suite_credentials() {
  return Credentials::parse(fmt::format("{} {}\n", kSuiteKey, kSuiteSecret), "suite");
}

SigningKey suite_key(std::string_view session_token) {
  return SigningKey{.access_key = kSuiteKey,
                    .secret = kSuiteSecret,
                    .region = "us-east-1",
                    .service = "service",
                    .session_token = session_token};
}

// Flips one hex digit of a signature.
std::string altered(std::string signature) {
  signature[10] = signature[10] == '0' ? '1' : '0';
  return signature;
}

TEST(SigV4Suite, SignProducesThePublishedHeaderSignatures) {
  for (const SuiteCase& c : suite_cases()) {
    if (c.header_signature.empty()) continue;
    SCOPED_TRACE(c.name);
    const Request request{c.method, c.target, c.headers, c.body};
    const auto added = sign(request.view(), suite_key(c.session_token), kSuiteTime);
    ASSERT_FALSE(added.empty());
    EXPECT_EQ(added.front(), (std::pair<std::string, std::string>{"X-Amz-Date", kSuiteDate}));
    EXPECT_EQ(added.back().first, "Authorization");
    EXPECT_EQ(added.back().second,
              fmt::format("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                          "aws4_request, SignedHeaders={}, Signature={}",
                          c.signed_headers, c.header_signature));
  }
}

TEST(SigV4Suite, VerifyAcceptsThePublishedHeaderSignaturesAndNothingElse) {
  const Credentials credentials = suite_credentials();
  for (const SuiteCase& c : suite_cases()) {
    if (c.header_signature.empty()) continue;
    SCOPED_TRACE(c.name);
    Request request{c.method, c.target, c.headers, c.body};
    request.headers.emplace_back("X-Amz-Date", kSuiteDate);
    if (!c.session_token.empty()) {
      request.headers.emplace_back("X-Amz-Security-Token", c.session_token);
    }
    request.headers.emplace_back("Authorization", "");
    for (const std::string& signature : {c.header_signature, altered(c.header_signature)}) {
      request.headers.back().second = fmt::format(
          "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
          "SignedHeaders={}, Signature={}",
          c.signed_headers, signature);
      const auto failure =
          internal::verify(request.view(), &credentials, Regions("us-east-1"), "service", kSuiteTime);
      if (signature == c.header_signature) {
        EXPECT_FALSE(failure) << failure->code << ": " << failure->message;
      } else {
        ASSERT_TRUE(failure);
        EXPECT_EQ(failure->code, "SignatureDoesNotMatch");
        EXPECT_EQ(failure->http_status, 403);
      }
    }
  }
}

TEST(SigV4Suite, PresignProducesThePublishedQuerySignaturesAndVerifies) {
  const Credentials credentials = suite_credentials();
  for (const SuiteCase& c : suite_cases()) {
    if (c.query_signature.empty()) continue;
    SCOPED_TRACE(c.name);
    Request request{c.method, c.target, c.headers, c.body};
    request.target = presign(request.view(), suite_key(c.session_token), kSuiteTime, seconds(3600));
    EXPECT_EQ(query_param(request.target, "X-Amz-Signature"), c.query_signature);
    EXPECT_EQ(query_param(request.target, "X-Amz-Expires"), "3600");
    const auto failure =
        internal::verify(request.view(), &credentials, Regions("us-east-1"), "service", kSuiteTime);
    EXPECT_FALSE(failure) << failure->code << ": " << failure->message;
  }
}

TEST(SigV4Suite, ThePublishedPresignedRequestVerifiesAsWritten) {
  const Credentials credentials = suite_credentials();
  Request request{"GET",
                  "/?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2F"
                  "us-east-1%2Fservice%2Faws4_request&X-Amz-Date=20150830T123600Z&"
                  "X-Amz-SignedHeaders=host&X-Amz-Expires=3600&X-Amz-Signature="
                  "e93c787ed7f371d5c6b165c1b38ede9550f4dce4144713e844b25b7192d3865d",
                  {{"Host", std::string(kHost)}},
                  ""};
  EXPECT_FALSE(internal::verify(request.view(), &credentials, Regions("us-east-1"), "service", kSuiteTime));
  request.target.back() = '0';  // ...865d -> ...8650
  const auto failure =
      internal::verify(request.view(), &credentials, Regions("us-east-1"), "service", kSuiteTime);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, "SignatureDoesNotMatch");
}

TEST(SigV4Suite, CanonicalRequestsMatchTheSuite) {
  const Request encoded{"GET",
                        "/?Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
                        {{"Host", std::string(kHost)}, {"X-Amz-Date", std::string(kSuiteDate)}},
                        ""};
  EXPECT_EQ(internal::canonical_request(
                encoded.view(), "host;x-amz-date",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", false),
            "GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\n"
            "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const Request trimmed{"GET",
                        "/example space/",
                        {{"Host", std::string(kHost)},
                         {"My-Header1", " value1"},
                         {"My-Header2", " \"a   b   c\""},
                         {"X-Amz-Date", std::string(kSuiteDate)}},
                        ""};
  EXPECT_EQ(internal::canonical_request(trimmed.view(), "host;my-header1;my-header2;x-amz-date",
                                        "UNSIGNED-PAYLOAD", false),
            "GET\n/example%20space/\n\nhost:example.amazonaws.com\nmy-header1:value1\n"
            "my-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\n"
            "host;my-header1;my-header2;x-amz-date\nUNSIGNED-PAYLOAD");
}

TEST(SigV4Suite, AHeaderAddedAfterSigningIsNotPartOfTheSignature) {
  // post-sts-header-after: the session token header is sent but was not signed.
  const Credentials credentials = suite_credentials();
  const Request request{
      "POST",
      "/",
      {{"Host", std::string(kHost)},
       {"X-Amz-Date", std::string(kSuiteDate)},
       {"X-Amz-Security-Token", std::string(kStsToken)},
       {"Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"}},
      ""};
  EXPECT_FALSE(internal::verify(request.view(), &credentials, Regions("us-east-1"), "service", kSuiteTime));
}

// --- What the SQS clients send
// ---------------------------------------------------------------------
//
// Requests signed by botocore (1.29.27, Debian's python3-botocore, and 1.43.11 gave the same
// signatures) for service sqs, region us-east-1, at 2026-11-23 12:00:00 UTC, with
// SigV4Auth / SigV4QueryAuth, the signers awscli and boto3 use for SQS.

constexpr std::string_view kKey = "AKIDTXMQTEST";
constexpr std::string_view kSecret = "txmq/secret+KEY0123456789abcdefEXAMPLE";
const Clock::time_point kNow = utc(2026, 11, 23, 12, 0, 0);

Credentials test_credentials() {
  return Credentials::parse(
      fmt::format("# test keys\n{} {}\nAKIDOTHER other-secret\n", kKey, kSecret), "test");
}

SigningKey test_key() { return SigningKey{.access_key = kKey, .secret = kSecret}; }

struct BotocoreCase {
  std::string name;
  Request request;  // as sent, without X-Amz-Date and Authorization
  std::string_view session_token;
  std::string authorization;
};

std::vector<BotocoreCase> botocore_cases() {
  const std::pair<std::string, std::string> host{"Host", "127.0.0.1:9324"};
  const std::pair<std::string, std::string> form{
      "Content-Type", "application/x-www-form-urlencoded; charset=utf-8"};
  const std::pair<std::string, std::string> json{"Content-Type", "application/x-amz-json-1.0"};
  const std::string scope =
      "AWS4-HMAC-SHA256 Credential=AKIDTXMQTEST/20261123/us-east-1/sqs/aws4_request, ";
  return {
      {"query protocol POST",
       {"POST",
        "/",
        {form, host},
        "Action=SendMessage&MessageBody=hello%20world%20%26%20%2B&QueueUrl=http%3A%2F%2F127.0.0.1%"
        "3A9324%2F000000000000%2Forders&Version=2012-11-05"},
       {},
       scope + "SignedHeaders=content-type;host;x-amz-date, "
               "Signature=e4917960a68e7bccede2adefc5115005385349c17a0c49f2c8006faa86ad8f90"},
      // The path as sent is encoded again: "/a%20b" is signed as "/a%2520b".
      {"percent-encoded path",
       {"POST",
        "/000000000000/a%20b%2Fc~d/",
        {form, host},
        "Action=GetQueueAttributes&Version=2012-11-05"},
       {},
       scope + "SignedHeaders=content-type;host;x-amz-date, "
               "Signature=9e994dd9b1bdb459e48bdbee53ac93740635a2554e6143745ce553a4c44c22bf"},
      {"query protocol GET",
       {"GET", "/?Action=ListQueues&QueueNamePrefix=a%20b~c&Version=2012-11-05", {host}, ""},
       {},
       scope + "SignedHeaders=host;x-amz-date, "
               "Signature=0541716702564a97d88ef5214a641cb303e4636b046de9c7f6ba8976a29a4580"},
      {"JSON protocol with UTF-8 and escapes in the body",
       {"POST",
        "/",
        {json, {"X-Amz-Target", "AmazonSQS.SendMessage"}, host},
        "{\"QueueUrl\":\"http://127.0.0.1:9324/000000000000/orders\",\"MessageBody\":\"caf\xC3\xA9 "
        "\\\"quoted\\\"\\r\\n\"}"},
       {},
       scope + "SignedHeaders=content-type;host;x-amz-date;x-amz-target, "
               "Signature=c254fa4694e6e87d77c2cba633d2fae4c5f918cdef70e9ce5d44c0545453b361"},
      {"session token",
       {"POST", "/", {json, {"X-Amz-Target", "AmazonSQS.ListQueues"}, host}, "{}"},
       "FQoGZXIvYXdzEXAMPLE//token+with/slashes==",
       scope + "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, "
               "Signature=c631ed5f0ef3e1134c4a0ff5966a5c414050e9ac6f0cb868375394463cb7d98a"},
  };
}

TEST(SigV4Botocore, VerifyAcceptsWhatBotocoreSigns) {
  const Credentials credentials = test_credentials();
  for (BotocoreCase& c : botocore_cases()) {
    SCOPED_TRACE(c.name);
    Request request = c.request;
    request.headers.emplace_back("X-Amz-Date", "20261123T120000Z");
    if (!c.session_token.empty()) {
      request.headers.emplace_back("X-Amz-Security-Token", c.session_token);
    }
    request.headers.emplace_back("Authorization", c.authorization);
    const auto failure = verify(request.view(), &credentials, "us-east-1", kNow);
    EXPECT_FALSE(failure) << failure->code << ": " << failure->message;
  }
}

TEST(SigV4Botocore, SignAgreesWithBotocore) {
  for (BotocoreCase& c : botocore_cases()) {
    SCOPED_TRACE(c.name);
    SigningKey key = test_key();
    key.session_token = c.session_token;
    const auto added = sign(c.request.view(), key, kNow);
    EXPECT_EQ(added.back().second, c.authorization);
  }
}

TEST(SigV4Botocore, PresignedUrlFromBotocoreVerifiesAndExpires) {
  const Credentials credentials = test_credentials();
  const Request request{
      "GET",
      "/000000000000/orders?Action=ReceiveMessage&MaxNumberOfMessages=10&X-Amz-Algorithm=AWS4-"
      "HMAC-SHA256&X-Amz-Credential=AKIDTXMQTEST%2F20261123%2Fus-east-1%2Fsqs%2Faws4_request&X-"
      "Amz-Date=20261123T120000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature="
      "b1eacb1f4427b12198063f25ef2c579f0c3615970d5197dea28f0919c1bbe911",
      {{"Host", "127.0.0.1:9324"}},
      ""};
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow));
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow + seconds(300)));
  const auto expired = verify(request.view(), &credentials, "us-east-1", kNow + seconds(301));
  ASSERT_TRUE(expired);
  EXPECT_EQ(expired->code, "RequestExpired");
  EXPECT_EQ(expired->http_status, 400);

  Request same_by_presign{"GET",
                          "/000000000000/orders?Action=ReceiveMessage&MaxNumberOfMessages=10",
                          {{"Host", "127.0.0.1:9324"}},
                          ""};
  EXPECT_EQ(presign(same_by_presign.view(), test_key(), kNow, seconds(300)), request.target);
}

// --- Our own signer against our verifier
// -----------------------------------------------------------

Request signed_json_request(Clock::time_point when, const SigningKey& key = test_key()) {
  Request request{"POST",
                  "/000000000000/orders?Extra=a%20b",
                  {{"Host", "127.0.0.1:9324"},
                   {"Content-Type", "application/x-amz-json-1.0"},
                   {"X-Amz-Target", "AmazonSQS.SendMessage"}},
                  R"({"QueueUrl":"http://127.0.0.1:9324/000000000000/orders","MessageBody":"hi"})"};
  request.add(sign(request.view(), key, when));
  return request;
}

void expect_failure(const Request& request, const Credentials* credentials, std::string_view code,
                    int status, Clock::time_point now = kNow) {
  const auto failure = verify(request.view(), credentials, "us-east-1", now);
  ASSERT_TRUE(failure) << "accepted, expected " << code;
  EXPECT_EQ(failure->code, code) << failure->message;
  EXPECT_EQ(failure->http_status, status);
}

// A SendMessage as @aws-sdk/client-sqs 3.1169 (JSON protocol, @smithy/signature-v4) sent it,
// captured at 2026-11-23 00:48:28 UTC: it signs its SDK headers and x-amz-content-sha256 too.
TEST(SigV4JsSdk, VerifyAcceptsWhatClientSqsSends) {
  const Credentials credentials = test_credentials();
  Request request{
      "POST",
      "/",
      {{"content-type", "application/x-amz-json-1.0"},
       {"x-amz-target", "AmazonSQS.SendMessage"},
       {"x-amzn-query-mode", "true"},
       {"content-length", "165"},
       {"x-amz-user-agent", "aws-sdk-js/3.1168.0"},
       {"user-agent",
        "aws-sdk-js/3.1168.0 ua/2.1 os/linux#6.18.44-fc-v657 lang/js md/nodejs#20.20.2 "
        "api/sqs#3.1168.0 m/N,E,e"},
       {"host", "127.0.0.1:9324"},
       {"amz-sdk-invocation-id", "6c17cced-c8f7-4678-9756-c625b0d4bb73"},
       {"amz-sdk-request", "attempt=1; max=1"},
       {"x-amz-date", "20261123T004828Z"},
       {"x-amz-content-sha256", "e90142bbc9388c2d2a8049b4ff4590db94908bcf4d84009b89c6ac1a9b79e9de"},
       {"authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDTXMQTEST/20261123/us-east-1/sqs/aws4_request, "
        "SignedHeaders=amz-sdk-invocation-id;amz-sdk-request;content-length;content-type;host;"
        "x-amz-content-sha256;x-amz-date;x-amz-target;x-amz-user-agent;x-amzn-query-mode, "
        "Signature=a3b829e262ee17a10e43645c04e56a4ac30d8a613be898f56c73ef24cae4ebbc"}},
      "{\"QueueUrl\":\"http://127.0.0.1:9324/000000000000/orders\",\"MessageBody\":\"caf\xC3\xA9 "
      "\\\"quoted\\\"\\r\\n & + ~\",\"MessageAttributes\":{\"k\":{\"DataType\":\"String\","
      "\"StringValue\":\"v\"}}}"};
  ASSERT_EQ(request.body.size(), 165u);
  const Clock::time_point sent = utc(2026, 11, 23, 0, 48, 28);
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", sent));
  // The SDK's retry header is signed: a proxy changing it breaks the signature.
  *request.header("amz-sdk-request") = "attempt=2; max=1";
  expect_failure(request, &credentials, "SignatureDoesNotMatch", 403, sent);
}

TEST(SigV4, SignedRequestVerifies) {
  const Credentials credentials = test_credentials();
  const Request request = signed_json_request(kNow);
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow));
}

TEST(SigV4, EverySingleByteChangeFails) {
  const Credentials credentials = test_credentials();
  const Request original = signed_json_request(kNow);
  std::size_t tried = 0;
  auto each_byte = [&](auto&& get) {
    Request request = original;
    std::string& text = get(request);
    for (std::size_t i = 0; i < text.size(); ++i) {
      const char kept = text[i];
      text[i] = static_cast<char>(kept ^ 0x01);
      SCOPED_TRACE(fmt::format("byte {} of {:?}", i, text));
      expect_failure(request, &credentials, "SignatureDoesNotMatch", 403);
      text[i] = kept;
      ++tried;
    }
  };
  each_byte([](Request& r) -> std::string& { return r.body; });
  each_byte([](Request& r) -> std::string& { return *r.header("Host"); });
  each_byte([](Request& r) -> std::string& { return *r.header("Content-Type"); });
  each_byte([](Request& r) -> std::string& { return *r.header("X-Amz-Target"); });
  // The path and the query of the target.
  each_byte([](Request& r) -> std::string& { return r.target; });
  each_byte([](Request& r) -> std::string& { return r.method; });
  EXPECT_GT(tried, 150u);
}

TEST(SigV4, AddedQueryParameterFails) {
  const Credentials credentials = test_credentials();
  Request request = signed_json_request(kNow);
  request.target += "&Action=DeleteQueue";
  expect_failure(request, &credentials, "SignatureDoesNotMatch", 403);
}

// The action comes only from what the signature covers: a presigned request (SignedHeaders=host)
// sent again with an X-Amz-Target header of another action is refused, with and without keys.
TEST(SigV4, AnUnsignedXAmzTargetIsRefused) {
  const Credentials credentials = test_credentials();
  Request request{"POST", "/", {{"Host", "127.0.0.1:9324"}}, ""};
  request.target = presign(request.view(), test_key(), kNow, std::chrono::seconds(300));
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow));
  request.headers.emplace_back("X-Amz-Target", "AmazonSQS.DeleteQueue");
  expect_failure(request, &credentials, "IncompleteSignature", 400);
  expect_failure(request, nullptr, "IncompleteSignature", 400);
  // Signed, as the SDKs do, it is accepted.
  EXPECT_FALSE(verify(signed_json_request(kNow).view(), &credentials, "us-east-1", kNow));
}

// One decoding: a raw '+' in a signed query string is a space for the signature as for the
// Query protocol's reading of the same string, so a signer that meant a plus (and signed %2B)
// does not verify, and one that meant a space does.
TEST(SigV4, APlusInTheQueryIsASpace) {
  const Credentials credentials = test_credentials();
  const auto presigned = [](std::string_view target) {
    Request request{"GET", std::string(target), {{"Host", "127.0.0.1:9324"}}, ""};
    request.target = presign(request.view(), test_key(), kNow, std::chrono::seconds(300));
    return request;
  };
  Request meant_space = presigned("/?Action=SendMessage&MessageBody=1%201%3D2");
  meant_space.target.replace(meant_space.target.find("1%201"), 5, "1+1");
  EXPECT_FALSE(verify(meant_space.view(), &credentials, "us-east-1", kNow));
  Request meant_plus = presigned("/?Action=SendMessage&MessageBody=1%2B1%3D2");
  meant_plus.target.replace(meant_plus.target.find("1%2B1"), 5, "1+1");
  expect_failure(meant_plus, &credentials, "SignatureDoesNotMatch", 403);
}

// Before the body: the form, scope, date and key, but not the signature.
TEST(SigV4, PrecheckRefusesWhatTheHeadersAloneShowAndLeavesTheRest) {
  const Credentials credentials = test_credentials();
  Request request = signed_json_request(kNow);
  request.body = "{}";  // not what was signed: only verify() can tell
  EXPECT_FALSE(precheck(request.view(), &credentials, Regions("us-east-1"), kNow));
  expect_failure(request, &credentials, "SignatureDoesNotMatch", 403);
  const auto unknown = precheck(
      signed_json_request(kNow, SigningKey{.access_key = "AKIDUNKNOWN", .secret = kSecret}).view(),
      &credentials, Regions("us-east-1"), kNow);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->code, "InvalidClientTokenId");
  const auto late = precheck(request.view(), &credentials, Regions("us-east-1"), kNow + std::chrono::hours(1));
  ASSERT_TRUE(late);
  EXPECT_EQ(late->code, "RequestExpired");
  Request unsigned_request{"POST", "/", {{"Host", "127.0.0.1:9324"}}, ""};
  const auto missing = precheck(unsigned_request.view(), nullptr, Regions("us-east-1"), kNow);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->code, "MissingAuthenticationToken");
}

TEST(SigV4, UnknownKeyAndWrongSecret) {
  const Credentials credentials = test_credentials();
  expect_failure(
      signed_json_request(kNow, SigningKey{.access_key = "AKIDUNKNOWN", .secret = kSecret}),
      &credentials, "InvalidClientTokenId", 403);
  expect_failure(
      signed_json_request(kNow, SigningKey{.access_key = kKey, .secret = "other-secret"}),
      &credentials, "SignatureDoesNotMatch", 403);
}

TEST(SigV4, ClockSkewOfFifteenMinutesEitherWay) {
  const Credentials credentials = test_credentials();
  for (const Credentials* keys : {&credentials, static_cast<const Credentials*>(nullptr)}) {
    SCOPED_TRACE(keys ? "with credentials" : "without credentials");
    for (const auto skew : {minutes(-14), minutes(14), minutes(-15), minutes(15)}) {
      const auto failure = verify(signed_json_request(kNow + skew).view(), keys, "us-east-1", kNow);
      EXPECT_FALSE(failure) << skew.count() << " min: " << failure->message;
    }
    for (const auto skew : {minutes(-16), minutes(16)}) {
      SCOPED_TRACE(skew.count());
      expect_failure(signed_json_request(kNow + skew), keys, "RequestExpired", 400);
    }
  }
}

TEST(SigV4, PresignedRequestIsValidUntilItExpires) {
  const Credentials credentials = test_credentials();
  Request request{
      "GET", "/000000000000/orders?Action=ReceiveMessage", {{"Host", "127.0.0.1:9324"}}, ""};
  request.target = presign(request.view(), test_key(), kNow, seconds(3600));
  // Past the 15 minutes of the header form, within X-Amz-Expires.
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow + minutes(59)));
  expect_failure(request, &credentials, "RequestExpired", 400, kNow + minutes(61));
  // Signed more than 15 minutes in the future.
  expect_failure(request, &credentials, "RequestExpired", 400, kNow - minutes(16));
  // Its signature covers the query.
  Request changed = request;
  changed.target.replace(changed.target.find("ReceiveMessage"), 14, "DeleteMessage!");
  expect_failure(changed, &credentials, "SignatureDoesNotMatch", 403);
  // And the headers it names.
  Request other_host = request;
  other_host.headers[0].second = "127.0.0.1:9325";
  expect_failure(other_host, &credentials, "SignatureDoesNotMatch", 403);
}

TEST(SigV4, PresignedRequestWithABodySignsTheBody) {
  const Credentials credentials = test_credentials();
  Request request{"POST", "/", {{"Host", "127.0.0.1:9324"}}, "Action=ListQueues"};
  request.target = presign(request.view(), test_key(), kNow, seconds(60));
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow));
  request.body = "Action=DeleteQueue&QueueUrl=/000000000000/orders";
  expect_failure(request, &credentials, "SignatureDoesNotMatch", 403);
}

TEST(SigV4, PresignedExpiresMustBeWithinAWeek) {
  const Credentials credentials = test_credentials();
  const Request base{"GET", "/", {{"Host", "h"}}, ""};
  // 19 digits overflowed the parse (found by fuzz_http).
  for (const std::string_view expires : {"0", "604801", "-5", "abc", "", "2455555555555555561"}) {
    SCOPED_TRACE(expires);
    Request request = base;
    request.target = presign(base.view(), test_key(), kNow, seconds(60));
    const auto at = request.target.find("X-Amz-Expires=60") + 14;
    request.target.replace(at, 2, expires);
    expect_failure(request, &credentials, "IncompleteSignature", 400);
  }
  EXPECT_THROW(presign(base.view(), test_key(), kNow, seconds(604801)), std::invalid_argument);
}

TEST(SigV4, MissingAuthentication) {
  const Credentials credentials = test_credentials();
  Request request{"POST",
                  "/",
                  {{"Host", "127.0.0.1:9324"}, {"X-Amz-Date", "20261123T120000Z"}},
                  "Action=ListQueues"};
  expect_failure(request, &credentials, "MissingAuthenticationToken", 403);
  expect_failure(request, nullptr, "MissingAuthenticationToken", 403);
}

TEST(SigV4, MalformedAuthorizationIsIncomplete) {
  const Credentials credentials = test_credentials();
  const std::string good_signature(64, 'a');
  const std::string scope = "Credential=AKIDTXMQTEST/20261123/us-east-1/sqs/aws4_request";
  const std::vector<std::string> malformed = {
      "",
      "AWS4-HMAC-SHA256",
      "AWS4-HMAC-SHA256 garbage",
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=host;x-amz-date", scope),
      fmt::format("AWS4-HMAC-SHA256 {}, Signature={}", scope, good_signature),
      fmt::format("AWS4-HMAC-SHA256 SignedHeaders=host;x-amz-date, Signature={}", good_signature),
      fmt::format("AWS4-HMAC-SHA512 {}, SignedHeaders=host;x-amz-date, Signature={}", scope,
                  good_signature),
      fmt::format("AWS AKIDTXMQTEST:{}", good_signature),
      fmt::format("AWS4-HMAC-SHA256 Credential=AKIDTXMQTEST/20261123/us-east-1/sqs, "
                  "SignedHeaders=host;x-amz-date, Signature={}",
                  good_signature),
      fmt::format("AWS4-HMAC-SHA256 Credential=/20261123/us-east-1/sqs/aws4_request, "
                  "SignedHeaders=host;x-amz-date, Signature={}",
                  good_signature),
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=host;x-amz-date, Signature=abc", scope),
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=host;x-amz-date, Signature={}", scope,
                  std::string(64, 'g')),
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=x-amz-date, Signature={}", scope,
                  good_signature),
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=, Signature={}", scope, good_signature),
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=host;;x-amz-date, Signature={}", scope,
                  good_signature),
      fmt::format("AWS4-HMAC-SHA256 {}, {}, SignedHeaders=host, Signature={}", scope, scope,
                  good_signature),
      fmt::format("AWS4-HMAC-SHA256 {}, SignedHeaders=host, Signature={}, Extra=1", scope,
                  good_signature),
  };
  for (const Credentials* keys : {&credentials, static_cast<const Credentials*>(nullptr)}) {
    for (const std::string& authorization : malformed) {
      SCOPED_TRACE(authorization);
      const Request request{
          "POST",
          "/",
          {{"Host", "h"}, {"X-Amz-Date", "20261123T120000Z"}, {"Authorization", authorization}},
          ""};
      expect_failure(request, keys, "IncompleteSignature", 400);
    }
  }
}

TEST(SigV4, DateMustBePresentAndWellFormed) {
  const Credentials credentials = test_credentials();
  const Request good = signed_json_request(kNow);
  for (const std::string_view date :
       {"", "2026-11-23T12:00:00Z", "20261123T120000", "20261323T120000Z", "20261131T120000Z",
        "20261123T250000Z", "2026112XT120000Z",
        // Years whose nanoseconds since 1970 overflow the clock (fuzz_http found 3026).
        "30260922T120000Z", "99991231T235959Z", "00010101T000000Z"}) {
    SCOPED_TRACE(date);
    Request request = good;
    *request.header("X-Amz-Date") = date;
    expect_failure(request, &credentials, "IncompleteSignature", 400);
  }
  Request without_date = good;
  std::erase_if(without_date.headers, [](const auto& h) { return h.first == "X-Amz-Date"; });
  expect_failure(without_date, &credentials, "IncompleteSignature", 400);
  Request two_dates = good;
  two_dates.headers.emplace_back("x-amz-date", "20261123T120000Z");
  expect_failure(two_dates, &credentials, "IncompleteSignature", 400);
}

TEST(SigV4, AServerOfSeveralRegionsChecksEachInItsOwn) {
  const Credentials credentials = test_credentials();
  const Regions two = Regions::parse("us-east-1, eu-west-1");
  const Regions any = Regions::parse("*");
  for (const Credentials* keys : {&credentials, static_cast<const Credentials*>(nullptr)}) {
    for (const char* name : {"us-east-1", "eu-west-1"}) {
      std::string region;
      EXPECT_FALSE(verify(signed_json_request(
                              kNow, SigningKey{.access_key = kKey, .secret = kSecret, .region = name})
                              .view(),
                          keys, two, kNow, region));
      EXPECT_EQ(region, name);
    }
    std::string region = "unchanged";
    const auto other = verify(
        signed_json_request(
            kNow, SigningKey{.access_key = kKey, .secret = kSecret, .region = "ap-south-1"})
            .view(),
        keys, two, kNow, region);
    ASSERT_TRUE(other);
    EXPECT_EQ(other->code, "SignatureDoesNotMatch");
    EXPECT_NE(other->message.find("'us-east-1,eu-west-1'"), std::string::npos) << other->message;
    EXPECT_EQ(region, "unchanged");
    EXPECT_FALSE(verify(signed_json_request(
                            kNow, SigningKey{.access_key = kKey, .secret = kSecret,
                                             .region = "ap-south-1"})
                            .view(),
                        keys, any, kNow, region));
    EXPECT_EQ(region, "ap-south-1");
  }
  // A signature made for one region does not pass as another's: the region is in the key.
  Request forged = signed_json_request(
      kNow, SigningKey{.access_key = kKey, .secret = kSecret, .region = "eu-west-1"});
  std::string* authorization = forged.header("Authorization");
  ASSERT_NE(authorization, nullptr);
  const std::size_t at = authorization->find("/eu-west-1/");
  ASSERT_NE(at, std::string::npos);
  authorization->replace(at, 11, "/us-east-1/");
  std::string region;
  const auto failure = verify(forged.view(), &credentials, two, kNow, region);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, "SignatureDoesNotMatch");
}

TEST(SigV4, RegionListsAreCheckedWhenRead) {
  EXPECT_EQ(Regions::parse("eu-west-1").primary(), "eu-west-1");
  EXPECT_EQ(Regions::parse("eu-west-1,us-east-1").primary(), "eu-west-1");
  EXPECT_EQ(Regions::parse("*").primary(), "us-east-1");
  EXPECT_TRUE(Regions::parse("*").allows("me-central-1"));
  EXPECT_FALSE(Regions::parse("*").allows("Bad Region"));
  for (const char* bad : {"", ",", "us-east-1,", "US-EAST-1", "us east 1", "a,a", "*,us-east-1",
                          "us-east-1;eu-west-1"}) {
    EXPECT_THROW(Regions::parse(bad), std::invalid_argument) << bad;
  }
}

TEST(SigV4, BothFormsAtOnceAreRefused) {
  const Credentials credentials = test_credentials();
  Request request = signed_json_request(kNow);
  request.target += "&X-Amz-Algorithm=AWS4-HMAC-SHA256";
  expect_failure(request, &credentials, "IncompleteSignature", 400);
}

TEST(SigV4, ScopeMustNameThisRegionTheServiceAndTheDate) {
  const Credentials credentials = test_credentials();
  for (const Credentials* keys : {&credentials, static_cast<const Credentials*>(nullptr)}) {
    const auto region =
        verify(signed_json_request(
                   kNow, SigningKey{.access_key = kKey, .secret = kSecret, .region = "eu-west-1"})
                   .view(),
               keys, "us-east-1", kNow);
    ASSERT_TRUE(region);
    EXPECT_EQ(region->code, "SignatureDoesNotMatch");
    EXPECT_NE(region->message.find("'us-east-1'"), std::string::npos) << region->message;

    const auto service =
        verify(signed_json_request(
                   kNow, SigningKey{.access_key = kKey, .secret = kSecret, .service = "sns"})
                   .view(),
               keys, "us-east-1", kNow);
    ASSERT_TRUE(service);
    EXPECT_EQ(service->code, "SignatureDoesNotMatch");
    EXPECT_NE(service->message.find("'sqs'"), std::string::npos) << service->message;
  }
  // A scope dated another day than X-Amz-Date (here the day before, minutes apart).
  Request request = signed_json_request(utc(2026, 11, 23, 0, 5, 0));
  *request.header("X-Amz-Date") = "20261122T235900Z";
  expect_failure(request, &credentials, "SignatureDoesNotMatch", 403, utc(2026, 11, 23, 0, 0, 0));
}

TEST(SigV4, WithoutCredentialsAnyWellFormedSignatureIsAccepted) {
  Request request =
      signed_json_request(kNow, SigningKey{.access_key = "anyone", .secret = "anything"});
  EXPECT_FALSE(verify(request.view(), nullptr, "us-east-1", kNow));
  std::string& authorization = *request.header("Authorization");
  authorization.replace(authorization.size() - 64, 64, std::string(64, 'f'));
  EXPECT_FALSE(verify(request.view(), nullptr, "us-east-1", kNow));
  request.body = "changed";
  EXPECT_FALSE(verify(request.view(), nullptr, "us-east-1", kNow));
}

TEST(SigV4, ContentSha256HeaderMustBeTheBodys) {
  const Credentials credentials = test_credentials();
  const std::string body = "Param1=value1";  // its SHA-256, from the suite's vectors:
  const std::string body_hash = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e";
  Request right{"POST", "/", {{"Host", "h"}, {"x-amz-content-sha256", body_hash}}, body};
  right.add(sign(right.view(), test_key(), kNow));
  EXPECT_FALSE(verify(right.view(), &credentials, "us-east-1", kNow));
  // Signed consistently, but declaring another body's hash (here the empty body's).
  Request other{"POST",
                "/",
                {{"Host", "h"},
                 {"x-amz-content-sha256",
                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}},
                body};
  other.add(sign(other.view(), test_key(), kNow));
  expect_failure(other, &credentials, "SignatureDoesNotMatch", 403);
  // Unsigned payloads are refused when there is a body...
  Request unsigned_body{
      "POST", "/", {{"Host", "h"}, {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}}, body};
  unsigned_body.add(sign(unsigned_body.view(), test_key(), kNow));
  expect_failure(unsigned_body, &credentials, "IncompleteSignature", 400);
  // ...and accepted without one.
  Request unsigned_empty{"GET",
                         "/?Action=ListQueues",
                         {{"Host", "h"}, {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}},
                         ""};
  unsigned_empty.add(sign(unsigned_empty.view(), test_key(), kNow));
  EXPECT_FALSE(verify(unsigned_empty.view(), &credentials, "us-east-1", kNow));
}

TEST(SigV4, AbsoluteFormTargetIsSignedByItsPath) {
  const Credentials credentials = test_credentials();
  Request request = signed_json_request(kNow);
  request.target = "http://127.0.0.1:9324" + request.target;
  EXPECT_FALSE(verify(request.view(), &credentials, "us-east-1", kNow));
}

TEST(SigV4, SecretsNeverAppearInFailures) {
  const Credentials credentials = test_credentials();
  std::vector<Request> requests;
  requests.push_back(signed_json_request(kNow - minutes(30)));
  requests.push_back(signed_json_request(kNow + minutes(30)));
  requests.push_back(
      signed_json_request(kNow, SigningKey{.access_key = "AKIDUNKNOWN", .secret = kSecret}));
  requests.push_back(signed_json_request(
      kNow, SigningKey{.access_key = kKey, .secret = kSecret, .region = "eu-west-1"}));
  requests.push_back(signed_json_request(
      kNow, SigningKey{.access_key = kKey, .secret = kSecret, .service = "sns"}));
  Request tampered = signed_json_request(kNow);
  tampered.body += " ";
  requests.push_back(tampered);
  Request wrong_secret =
      signed_json_request(kNow, SigningKey{.access_key = kKey, .secret = "other-secret"});
  requests.push_back(wrong_secret);
  // A client that mistakenly sends its secret where the signature goes.
  Request leaky = signed_json_request(kNow);
  *leaky.header("Authorization") = fmt::format(
      "AWS4-HMAC-SHA256 Credential={}/20261123/us-east-1/sqs/aws4_request, "
      "SignedHeaders=host;x-amz-date, Signature={}",
      kKey, kSecret);
  requests.push_back(leaky);
  Request presigned{"GET", "/", {{"Host", "h"}}, ""};
  presigned.target = presign(presigned.view(), test_key(), kNow, seconds(1));
  requests.push_back(presigned);
  std::size_t failures = 0;
  for (const Request& request : requests) {
    for (const auto now : {kNow, kNow + minutes(1)}) {
      if (const auto failure = verify(request.view(), &credentials, "us-east-1", now)) {
        ++failures;
        EXPECT_EQ(failure->message.find(kSecret), std::string::npos) << failure->message;
        EXPECT_EQ(failure->message.find("other-secret"), std::string::npos) << failure->message;
      }
    }
  }
  EXPECT_GE(failures, requests.size() * 2 - 2);
}

// --- The credentials file ------------------------------------------------------------------------

TEST(Credentials, ParsesPairsSkippingCommentsAndBlankLines) {
  const Credentials credentials = Credentials::parse(
      "# txmq serve keys\n"
      "\n"
      "AKIDONE secretONE/with+chars\n"
      "   \t\n"
      "  # indented comment\n"
      "AKIDTWO\t \tsecretTWO\r\n"
      "AKIDTHREE secretTHREE",  // no final newline
      "keys.txt");
  EXPECT_EQ(credentials.size(), 3u);
  EXPECT_EQ(credentials.secret_of("AKIDONE"), "secretONE/with+chars");
  EXPECT_EQ(credentials.secret_of("AKIDTWO"), "secretTWO");
  EXPECT_EQ(credentials.secret_of("AKIDTHREE"), "secretTHREE");
  EXPECT_FALSE(credentials.secret_of("akidone"));
  EXPECT_FALSE(credentials.secret_of(""));
}

std::string parse_error(std::string_view text) {
  try {
    Credentials::parse(text, "keys.txt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Credentials, MalformedLineNamesFileAndLineButNotTheSecret) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzzSECRET";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"AKIDONE ok\n\nAKIDTWO " + secret + " trailing\n", "keys.txt:3:"},
      {"# c\n" + secret + "\n", "keys.txt:2:"},
      {"AKIDONE ok\nAKID/TWO " + secret + "\n", "keys.txt:2:"},
      {"AKIDONE " + secret + "\nAKIDONE " + secret + "x\n", "keys.txt:2:"},
      {"AKIDONE " + secret + "\xC3\xA9\n", "keys.txt:1:"},
  };
  for (const auto& [text, where] : cases) {
    const std::string message = parse_error(text);
    SCOPED_TRACE(message);
    EXPECT_EQ(message.rfind(where, 0), 0u);
    EXPECT_EQ(message.find(secret), std::string::npos);
    EXPECT_EQ(message.find("wJalr"), std::string::npos);
  }
  EXPECT_NE(parse_error("# only comments\n\n").find("no access keys"), std::string::npos);
}

TEST(Credentials, LoadsAFileAndNamesAMissingOne) {
  char path[] = "/tmp/txmq-sigv4-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream file(path);
    file << "# keys\nAKIDFILE file-secret\n";
  }
  const Credentials credentials = Credentials::load(path);
  EXPECT_EQ(credentials.size(), 1u);
  EXPECT_EQ(credentials.secret_of("AKIDFILE"), "file-secret");
  {
    std::ofstream file(path);
    file << "AKIDFILE\n";
  }
  try {
    Credentials::load(path);
    ADD_FAILURE() << "a malformed file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(path) + ":1:"), std::string::npos) << e.what();
  }
  std::remove(path);
  try {
    Credentials::load(path);
    ADD_FAILURE() << "a missing file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace txmq::server
