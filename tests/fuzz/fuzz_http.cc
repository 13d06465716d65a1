// libFuzzer target: txmq serve's request path before any database, on raw bytes as a client
// sends them. Beast parses the request (with the server's header and body caps), then the SQS
// layer reads it as the server does: the cross-site rules, the checks made before the body
// (precheck), the signature (with keys and without), the protocol, the Query form and the JSON
// body (both bounded), and writes a Query response and error documents from what it read.
// Properties: nothing but SqsError escapes, refusals carry a 4xx/5xx status, and what was
// accepted is an object with an action.
#include <boost/beast/core/buffers_prefix.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <string>
#include <string_view>

#include "fuzz.h"
#include "server/sqs/service.h"
#include "server/sqs/wire.h"

namespace {

namespace http = boost::beast::http;
using txmq::server::SqsError;

// The seeds in tests/fuzz/corpus/fuzz_http are signed at this time (X-Amz-Date
// 20261123T120000Z), so that inputs near them pass the clock check.
const auto kNow = std::chrono::sys_days(std::chrono::year(2026) / 11 / 23) + std::chrono::hours(12);

const txmq::server::Credentials& keys() {
  static const txmq::server::Credentials credentials =
      txmq::server::Credentials::parse("AKIDTXMQTEST txmq/secret+KEY0123456789abcdefEXAMPLE\n",
                                       "fuzz");
  return credentials;
}

void read(const txmq::server::HttpRequest& request, const txmq::server::Credentials* credentials) {
  txmq::server::SqsRequest out;
  try {
    txmq::server::read_request(request, credentials, txmq::server::Regions("us-east-1"), kNow, out);
    txmq::fuzz::require(out.input.is_object(), "accepted input is not an object");
    txmq::fuzz::require(!out.action.empty(), "accepted without an action");
    txmq::server::query_response_xml(out.action, out.input, "request-id");
  } catch (const SqsError& e) {
    txmq::fuzz::require(e.http_status >= 400 && e.http_status < 600, "refusal without 4xx/5xx");
    txmq::server::query_error_xml(e, "request-id");
    txmq::server::json_error(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(txmq::server::kDefaultBodyLimit);
  parser.eager(true);
  boost::beast::error_code ec;
  const std::size_t used = parser.put(boost::asio::buffer(data, size), ec);
  (void)used;
  if (!ec && !parser.is_done()) parser.put_eof(ec);
  if (ec || !parser.is_done()) return 0;
  const txmq::server::HttpRequest request = parser.release();
  // What the server decides before the body.
  (void)txmq::server::cross_site_refusal(request, false);
  read(request, nullptr);
  read(request, &keys());
  return 0;
}
