#pragma once

// The HTTP side of txmq serve: Boost.Beast's parser and writer over Asio, HTTP/1.1 with
// keep-alive. Each request is handed to a handler that answers it once, from any thread, now or
// later (a long poll answers when messages arrive or its wait ends).
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace txmq::server {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "text/plain";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// A text/plain (UTF-8) answer; `text` gets a final newline when it has none.
HttpResponse plain_text(unsigned status, std::string text);

// Answers a request exactly once. Safe to call from any thread.
using Responder = std::function<void(HttpResponse)>;
using RequestHandler = std::function<void(HttpRequest&&, Responder)>;

class Session;

class HttpServer {
 public:
  // Largest request body accepted: Txmq.SendMessageBatch takes up to 10,000 messages.
  static constexpr std::size_t kMaxBodyBytes = 64u << 20;

  HttpServer(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& endpoint,
             RequestHandler handler);
  ~HttpServer();

  // The address it listens on (the port is known once bound, also when 0 was asked for).
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  void start();
  // Stops accepting and closes idle connections; connections with a request in progress close
  // once it is answered. done() is called when the last connection has closed.
  void shutdown(std::function<void()> done);
  std::size_t open_connections();

 private:
  friend class Session;
  void accept();
  void closed(Session* session);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  RequestHandler handler_;
  std::mutex mutex_;
  std::set<std::shared_ptr<Session>> sessions_;
  bool stopping_ = false;
  std::function<void()> on_all_closed_;
};

}  // namespace txmq::server
