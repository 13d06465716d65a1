#include "serve_load.h"

#include <atomic>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "server/sigv4.h"
#include "workloads.h"

namespace txmq::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;

struct SqsHttpClient::Impl {
  explicit Impl(std::uint16_t port) : stream(io), host(fmt::format("127.0.0.1:{}", port)) {
    stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    stream.socket().set_option(asio::ip::tcp::no_delay(true));
  }
  asio::io_context io;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::string host;
};

SqsHttpClient::SqsHttpClient(std::uint16_t port) : impl_(std::make_unique<Impl>(port)) {}
SqsHttpClient::~SqsHttpClient() = default;

json SqsHttpClient::call(const std::string& action, const json& input) {
  const std::string target =
      action.find('.') == std::string::npos ? "AmazonSQS." + action : action;
  const std::string body = input.dump();
  http::request<http::string_body> request(http::verb::post, "/", 11);
  request.set(http::field::host, impl_->host);
  request.set(http::field::content_type, "application/x-amz-json-1.0");
  request.set("X-Amz-Target", target);
  // Signed as an SDK would sign it: the signature's cost is part of every call.
  const server::SignedRequest to_sign{
      "POST", "/",
      {{"host", impl_->host}, {"content-type", "application/x-amz-json-1.0"},
       {"x-amz-target", target}},
      body};
  for (const auto& [name, value] :
       server::sign(to_sign, {.access_key = "bench", .secret = "bench-secret"},
                    std::chrono::system_clock::now())) {
    request.set(name, value);
  }
  request.body() = body;
  request.prepare_payload();
  http::write(impl_->stream, request);
  http::response<http::string_body> response;
  http::read(impl_->stream, impl_->buffer, response);
  if (response.result_int() != 200) {
    throw std::runtime_error(fmt::format("{}: HTTP {}: {}", action, response.result_int(),
                                         response.body()));
  }
  return json::parse(response.body());
}

namespace {

json batch_entries(int batch, std::size_t payload, std::uint64_t seed) {
  json entries = json::array();
  for (int i = 0; i < batch; ++i) {
    entries.push_back({{"Id", std::to_string(i)},
                       {"MessageBody", std::string(payload, static_cast<char>('a' + (seed + static_cast<std::uint64_t>(i)) % 26))}});
  }
  return entries;
}

}  // namespace

Measured http_send_batch_rate(std::uint16_t port, const std::string& queue_url, int clients,
                              int batch, double seconds, std::size_t payload) {
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(clients, [&](int t, Latencies& lat) {
    SqsHttpClient c(port);
    const json input = {{"QueueUrl", queue_url},
                        {"Entries", batch_entries(batch, payload, static_cast<std::uint64_t>(t))}};
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      const json out = c.call("SendMessageBatch", input);
      lat.add_since(start);
      if (out.contains("Failed") && !out["Failed"].empty()) {
        throw std::runtime_error("SendMessageBatch failed entries: " + out["Failed"].dump());
      }
      n += static_cast<std::uint64_t>(batch);
    }
    return n;
  });
}

Measured library_send_batch_rate(Client& client, const std::string& topic, int threads, int batch,
                                 double seconds, std::size_t payload) {
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(threads, [&](int t, Latencies& lat) {
    std::vector<OutgoingMessage> messages(static_cast<std::size_t>(batch));
    for (int i = 0; i < batch; ++i) {
      messages[static_cast<std::size_t>(i)].payload =
          std::string(payload, static_cast<char>('a' + (t + i) % 26));
    }
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      n += client.send_batch(topic, messages).size();
      lat.add_since(start);
    }
    return n;
  });
}

Measured http_drain(std::uint16_t port, const std::string& queue_url, int clients,
                    std::uint64_t limit, double cap_seconds) {
  std::atomic<std::uint64_t> consumed{0};
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(cap_seconds);
  return run_threads(clients, [&](int, Latencies& lat) {
    SqsHttpClient c(port);
    std::uint64_t n = 0;
    while (consumed.load() < limit && SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      const json got = c.call("ReceiveMessage", {{"QueueUrl", queue_url},
                                                 {"MaxNumberOfMessages", 10},
                                                 {"WaitTimeSeconds", 0}});
      if (!got.contains("Messages") || got["Messages"].empty()) break;
      json entries = json::array();
      for (const auto& m : got["Messages"]) {
        entries.push_back({{"Id", std::to_string(entries.size())},
                           {"ReceiptHandle", m["ReceiptHandle"]}});
      }
      const json out = c.call("DeleteMessageBatch", {{"QueueUrl", queue_url}, {"Entries", entries}});
      lat.add_since(start);
      if (out.contains("Failed") && !out["Failed"].empty()) {
        throw std::runtime_error("DeleteMessageBatch failed entries: " + out["Failed"].dump());
      }
      n += entries.size();
      consumed += entries.size();
    }
    return n;
  });
}

Measured http_send_rate(std::uint16_t port, const std::string& queue_url, int clients,
                        double seconds, std::size_t payload) {
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(clients, [&](int t, Latencies& lat) {
    SqsHttpClient c(port);
    const json input = {{"QueueUrl", queue_url},
                        {"MessageBody", std::string(payload, static_cast<char>('a' + t % 26))}};
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      c.call("SendMessage", input);
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured http_delete_rate(std::uint16_t port, Client& client, const std::string& topic,
                          const std::string& queue_url, int clients, int count) {
  fill(client, topic, count, 100);
  std::vector<std::vector<std::string>> receipts(static_cast<std::size_t>(clients));
  ReceiveOptions options;
  options.max_messages = 1000;
  options.lease = std::chrono::hours(1);
  std::size_t next = 0;
  for (int got = 0; got < count;) {
    const std::vector<Message> ms = client.receive(topic, options);
    if (ms.empty()) break;
    for (const Message& m : ms) receipts[next++ % receipts.size()].push_back(m.receipt);
    got += static_cast<int>(ms.size());
  }
  return run_threads(clients, [&](int t, Latencies& lat) {
    SqsHttpClient c(port);
    std::uint64_t n = 0;
    for (const std::string& r : receipts[static_cast<std::size_t>(t)]) {
      const auto start = SteadyClock::now();
      c.call("DeleteMessage", {{"QueueUrl", queue_url}, {"ReceiptHandle", r}});
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

}  // namespace txmq::bench
