// What txmq serve refuses without --credentials because only a browser on another site would
// send it (server/sqs/service.h, cross_site_refusal).
#include <gtest/gtest.h>

#include "server/sqs/service.h"

namespace txmq::server {
namespace {

RequestHeader request(std::string target,
                          std::vector<std::pair<std::string, std::string>> headers) {
  RequestHeader r;
  r.method(boost::beast::http::verb::post);
  r.target(target);
  for (const auto& [name, value] : headers) r.set(name, value);
  return r;
}

std::string refusal(const RequestHeader& r, bool with_credentials = false) {
  const auto refused = cross_site_refusal(r, with_credentials);
  return refused ? refused->code + " " + std::to_string(refused->http_status) : "accepted";
}

TEST(CrossSite, WhatTheSdksSendIsAccepted) {
  for (const char* host : {"127.0.0.1:9324", "localhost:9324", "[::1]:9324", "127.0.0.1"}) {
    EXPECT_EQ(refusal(request("/", {{"Host", host}, {"Authorization", "AWS4-HMAC-SHA256 x"}})),
              "accepted")
        << host;
  }
  EXPECT_EQ(refusal(request("/", {{"Host", "localhost"}, {"Sec-Fetch-Site", "same-origin"}})),
            "accepted");
  EXPECT_EQ(refusal(request("/", {{"Host", "localhost"}, {"Sec-Fetch-Site", "none"}})),
            "accepted");
}

TEST(CrossSite, WhatOnlyABrowserOnAnotherSiteSendsIsRefused) {
  EXPECT_EQ(refusal(request("/", {{"Host", "rebind.evil.example:9324"}})), "AccessDenied 403");
  EXPECT_EQ(refusal(request("/", {})), "AccessDenied 403");
  EXPECT_EQ(refusal(request("/", {{"Host", "127.0.0.1:9324"}, {"Origin", "http://evil.example"}})),
            "AccessDenied 403");
  EXPECT_EQ(refusal(request("/", {{"Host", "127.0.0.1:9324"}, {"Origin", "null"}})),
            "AccessDenied 403");
  for (const char* site : {"cross-site", "same-site"}) {
    EXPECT_EQ(refusal(request("/", {{"Host", "127.0.0.1:9324"}, {"Sec-Fetch-Site", site}})),
              "AccessDenied 403")
        << site;
  }
  // A fake presigned query: an <img> can carry it.
  EXPECT_EQ(refusal(request("/?Action=PurgeQueue&QueueUrl=q&X-Amz-Signature=00",
                            {{"Host", "127.0.0.1:9324"}})),
            "AccessDenied 403");
  EXPECT_EQ(refusal(request("/?X-Amz-Credential=a", {{"Host", "127.0.0.1:9324"}})),
            "AccessDenied 403");
  // Read as verify() reads the query: percent-encoded names are signatures too.
  EXPECT_EQ(refusal(request("/?Action=SendMessage&X%2DAmz%2DSignature=00&X%2DAmz%2DAlgorithm=x",
                            {{"Host", "127.0.0.1:9324"}})),
            "AccessDenied 403");
  // A parameter that only ends with the name is not a signature.
  EXPECT_EQ(refusal(request("/?MyX-Amz-Signature=1", {{"Host", "127.0.0.1:9324"}})), "accepted");
}

TEST(CrossSite, WithCredentialsTheSignatureDecides) {
  EXPECT_EQ(refusal(request("/?X-Amz-Signature=00", {{"Host", "sqs.example.com"},
                                                     {"Origin", "https://app.example.com"}}),
                    true),
            "accepted");
}

}  // namespace
}  // namespace txmq::server
