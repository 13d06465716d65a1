#include "serve_load.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "db/connection.h"
#include "db/dsn.h"
#include "server/auth/sigv4.h"
#include "workloads.h"

namespace txmq::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;

namespace {

// An AWS JSON 1.0 request's bytes, signed with SigV4 at `now` as an SDK signs it.
std::string signed_request(const std::string& host, const std::string& target,
                           const std::string& body, std::chrono::system_clock::time_point now) {
  const server::SignedRequest to_sign{
      "POST", "/",
      {{"host", host}, {"content-type", "application/x-amz-json-1.0"}, {"x-amz-target", target}},
      body};
  std::string bytes = fmt::format(
      "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-amz-json-1.0\r\n"
      "X-Amz-Target: {}\r\nContent-Length: {}\r\n",
      host, target, body.size());
  for (const auto& [name, value] :
       server::sign(to_sign, {.access_key = "bench", .secret = "bench-secret"}, now)) {
    bytes += fmt::format("{}: {}\r\n", name, value);
  }
  bytes += "\r\n";
  bytes += body;
  return bytes;
}

}  // namespace

struct SqsHttpClient::Impl {
  explicit Impl(std::uint16_t port) : stream(io), host(fmt::format("127.0.0.1:{}", port)) {
    stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    stream.socket().set_option(asio::ip::tcp::no_delay(true));
  }
  // The request's bytes, signed as an SDK signs them. A request the same as the last one within
  // the same second (the signature's date is to the second) is sent again as it was: a load of
  // identical calls then measures the server, not the client's hashing on the same cores.
  const std::string& request(const std::string& target, const std::string& body) {
    const auto now = std::chrono::system_clock::now();
    const auto second = std::chrono::floor<std::chrono::seconds>(now);
    if (second == signed_at && target == last_target && body == last_body) return bytes;
    bytes = signed_request(host, target, body, now);
    signed_at = second;
    last_target = target;
    last_body = body;
    return bytes;
  }
  asio::io_context io;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::string host;
  std::chrono::system_clock::time_point signed_at{};
  std::string last_target, last_body, bytes;
};

SqsHttpClient::SqsHttpClient(std::uint16_t port) : impl_(std::make_unique<Impl>(port)) {}
SqsHttpClient::~SqsHttpClient() = default;

std::string SqsHttpClient::post(const std::string& action, const std::string& body) {
  const std::string target =
      action.find('.') == std::string::npos ? "AmazonSQS." + action : action;
  asio::write(impl_->stream.socket(), asio::buffer(impl_->request(target, body)));
  http::response<http::string_body> response;
  http::read(impl_->stream, impl_->buffer, response);
  if (response.result_int() != 200) {
    throw std::runtime_error(fmt::format("{}: HTTP {}: {}", action, response.result_int(),
                                         response.body()));
  }
  return std::move(response.body());
}

json SqsHttpClient::call(const std::string& action, const json& input) {
  return json::parse(post(action, input.dump()));
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
    const std::string input =
        json{{"QueueUrl", queue_url},
             {"Entries", batch_entries(batch, payload, static_cast<std::uint64_t>(t))}}
            .dump();
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      const json out = json::parse(c.post("SendMessageBatch", input));
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
    const std::string input =
        json{{"QueueUrl", queue_url},
             {"MessageBody", std::string(payload, static_cast<char>('a' + t % 26))}}
            .dump();
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      c.post("SendMessage", input);
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured http_delete_rate(std::uint16_t port, Client& client, const std::string& topic,
                          const std::string& queue_url, int clients, int count,
                          const std::function<std::string(const std::string&)>& handle_of) {
  fill(client, topic, count, 100);
  std::vector<std::vector<std::string>> receipts(static_cast<std::size_t>(clients));
  ReceiveOptions options;
  options.max_messages = 1000;
  options.lease = std::chrono::hours(1);
  std::size_t next = 0;
  for (int got = 0; got < count;) {
    const std::vector<Message> ms = client.receive(topic, options);
    if (ms.empty()) break;
    for (const Message& m : ms) {
      receipts[next++ % receipts.size()].push_back(handle_of(m.receipt));
    }
    got += static_cast<int>(ms.size());
  }
  return run_threads(clients, [&](int t, Latencies& lat) {
    SqsHttpClient c(port);
    std::uint64_t n = 0;
    for (const std::string& r : receipts[static_cast<std::size_t>(t)]) {
      const auto start = SteadyClock::now();
      c.post("DeleteMessage", json{{"QueueUrl", queue_url}, {"ReceiptHandle", r}}.dump());
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

}  // namespace txmq::bench

namespace txmq::bench {
namespace {

long status_of_self(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  long value = 0;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') value = std::atol(line + n + 1);
  }
  std::fclose(f);
  return value;
}

std::uint64_t questions(internal::Connection& c) {
  internal::Result r = c.execute("SHOW GLOBAL STATUS LIKE 'Questions'", {});
  return std::stoull(r.rows.at(0).bytes(1));
}

}  // namespace

LongPollFigures hold_long_polls(std::uint16_t port, const std::string& queue_url,
                                const std::string& dsn, int count) {
  LongPollFigures f;
  f.threads_before = status_of_self("Threads");
  f.rss_kib_before = status_of_self("VmRSS");
  asio::io_context io;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
  const std::string host = fmt::format("127.0.0.1:{}", port);
  const std::string body =
      json{{"QueueUrl", queue_url}, {"WaitTimeSeconds", 20}, {"MaxNumberOfMessages", 1}}.dump();
  for (int i = 0; i < count; ++i) {
    auto s = std::make_unique<asio::ip::tcp::socket>(io);
    s->connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    const std::string request =
        signed_request(host, "AmazonSQS.ReceiveMessage", body, std::chrono::system_clock::now());
    asio::write(*s, asio::buffer(request));
    s->non_blocking(true);
    sockets.push_back(std::move(s));
  }
  f.held = count;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // all of them reach their wait
  f.threads_during = status_of_self("Threads");
  f.rss_kib_during = status_of_self("VmRSS");
  internal::Connection c(internal::parse_dsn(dsn));
  const std::uint64_t q0 = questions(c);
  const auto t0 = SteadyClock::now();
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const std::uint64_t q1 = questions(c);
  // Minus this connection's own two statements.
  f.statements_per_second =
      static_cast<double>(q1 - q0 - 2) / seconds_between(t0, SteadyClock::now());
  SqsHttpClient sender(port);
  sender.call("SendMessage", {{"QueueUrl", queue_url}, {"MessageBody", "wake"}});
  const auto sent = SteadyClock::now();
  bool woken = false;
  char buffer[4096];
  while (!woken && SteadyClock::now() - sent < std::chrono::seconds(10)) {
    for (auto& s : sockets) {
      boost::system::error_code ec;
      const std::size_t n = s->read_some(asio::buffer(buffer), ec);
      if (!ec && n > 0 && std::string_view(buffer, n).find("wake") != std::string_view::npos) {
        woken = true;
        break;
      }
    }
    if (!woken) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  f.wake_ms = woken ? seconds_between(sent, SteadyClock::now()) * 1000.0 : -1;
  for (auto& s : sockets) {
    boost::system::error_code ignored;
    s->close(ignored);
  }
  return f;
}

}  // namespace txmq::bench
