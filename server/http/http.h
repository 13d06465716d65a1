#pragma once

// The HTTP side of txmq serve: Boost.Beast's parser and writer over Asio, HTTP/1.1 with
// keep-alive. Each request is handed to a handler that answers it once, from any thread, now or
// later (a long poll answers when messages arrive or its wait ends).
//
// What a client can make the server hold is bounded before anyone is authenticated:
// a request's header is read first and an admission check decides how much body to read; the
// bodies being read share one memory budget; connections are capped, the longest-idle one
// closed to make room; a client must send its header and body at a minimum pace.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/field.hpp>
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

// The body read for a request that no admission check sized: SQS's largest message is 1 MiB,
// which a Query-protocol body percent-encodes to up to 3 MiB.
inline constexpr std::size_t kDefaultBodyLimit = 4u << 20;

// What to do with a request whose header has arrived, before its body is read.
struct Admission {
  std::size_t body_limit = kDefaultBodyLimit;  // largest body to read for this request
  std::optional<HttpResponse> refuse;          // answer this at once and close; body unread
};
using RequestHeader = boost::beast::http::request_header<>;
// The value of a request's header field; empty when it has none.
std::string_view header_of(const RequestHeader& r, boost::beast::http::field f);
using AdmissionCheck = std::function<Admission(const RequestHeader&)>;

// Answers a request exactly once. Safe to call from any thread.
using Responder = std::function<void(HttpResponse)>;
using RequestHandler = std::function<void(HttpRequest&&, Responder)>;

struct HttpServerOptions {
  // Connections held at once. At the cap a new connection closes the longest-idle one (waiting
  // for a request) to make room, or is answered 503 when none is idle. Each costs a file
  // descriptor and a few KiB; the caller keeps it under RLIMIT_NOFILE (server/app/sqs_server.cc).
  std::size_t max_connections = 4096;
  // Request bodies being read or handled at once, over all connections, in bytes: a request
  // whose declared length (or chunked growth) would pass it is answered 503 (Retry-After) and
  // its connection closed. 256 MiB holds 64 requests of SQS's largest size (4 MiB encoded) or
  // 4 of Txmq.SendMessageBatch's 64 MiB.
  std::size_t body_memory_budget = std::size_t{256} << 20;
  // Sizes (or refuses) each request's body from its header; empty: kDefaultBodyLimit for all.
  // Called on an I/O thread, before anything is authenticated: it must be quick and not block.
  // A body_limit over body_memory_budget could never be read: such a request gets 503.
  AdmissionCheck admission;
  // A new connection must send its whole first request header within this; a later request's
  // header must arrive within it once its first byte has. Slow-header (slowloris) clients hold
  // a connection no longer.
  std::chrono::milliseconds header_timeout = std::chrono::seconds(15);
  // A keep-alive connection waiting for its next request is closed after this (AWS SDKs keep
  // pooled connections about a minute).
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(75);
  // A body must arrive at least this fast (bytes per second) after a grace of header_timeout:
  // 4 MiB then has 79 s, a 64 MiB batch about 17 minutes; a trickle is cut off.
  std::size_t min_body_rate = 64u << 10;
  // Warnings worth an operator's look (cap reached, accept failing); each kind at most once a
  // minute or once per episode. Empty: not said.
  std::function<void(std::string_view)> warn;
};

class Session;

class HttpServer {
 public:
  // The acceptor runs on `io`; connections on `io` too, or in turn on `connection_contexts`
  // when given (one io_context per I/O thread: a request is read, and its answer written, by
  // the thread that polls its socket, with no hand-over between threads).
  HttpServer(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& endpoint,
             RequestHandler handler, HttpServerOptions options = {},
             std::vector<boost::asio::io_context*> connection_contexts = {});
  ~HttpServer();

  // The address it listens on (the port is known once bound, also when 0 was asked for).
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  void start();
  // Stops accepting and closes idle connections; connections with a request in progress close
  // once it is answered. done() is called when the last connection has closed.
  void shutdown(std::function<void()> done);
  std::size_t open_connections();
  const HttpServerOptions& options() const { return options_; }

 private:
  friend class Session;
  void accept();
  void on_accept_error(const boost::system::error_code& ec);
  // Starts a session for `socket`. At the cap, or when `make_room` (out of descriptors), the
  // longest-idle connection is closed for it; with none idle it is answered 503 and closed.
  void take_connection(boost::asio::ip::tcp::socket socket, bool make_room = false);
  // The longest-idle connection, already marked so that it will not start a request; the
  // caller closes it. Null when no connection is idle. Called with mutex_ held.
  std::shared_ptr<Session> evict_longest_idle_locked();
  void closed(Session* session);
  // Reserves `bytes` of the body memory budget; false when that would pass it.
  bool reserve_body_memory(std::size_t bytes);
  void release_body_memory(std::size_t bytes);
  // Says `text` unless `last` (the time this kind was last said) is under a minute ago; true
  // when said.
  bool warn_at_most_once_a_minute(std::chrono::steady_clock::time_point& last, std::string text);

  // The next connection's io_context (accept() runs on the acceptor's strand).
  boost::asio::io_context& next_context();

  boost::asio::io_context& io_;
  const std::vector<boost::asio::io_context*> connection_contexts_;
  std::size_t next_context_ = 0;
  boost::asio::ip::tcp::acceptor acceptor_;
  RequestHandler handler_;
  const HttpServerOptions options_;
  std::mutex mutex_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  bool stopping_ = false;
  std::function<void()> on_all_closed_;
  // Shared with the holds of bodies handed to the handler (they may outlive this server).
  const std::shared_ptr<std::atomic<std::size_t>> body_bytes_reserved_ =
      std::make_shared<std::atomic<std::size_t>>(0);

  // Accept errors (EMFILE above all) are retried after a pause that doubles from 10 ms to 1 s,
  // so that a full descriptor table does not spin a core; reset by a successful accept.
  boost::asio::steady_timer accept_retry_;
  std::chrono::milliseconds accept_backoff_{0};
  // Accept failing, said once until an accept succeeds with the reserve descriptor held.
  bool accept_failing_ = false;
  bool accept_failure_said_ = false;
  std::chrono::steady_clock::time_point last_accept_warning_{};
  // A descriptor on /dev/null, given up when accept fails with EMFILE to take one waiting
  // connection (a probe, say) and make room for it by closing an idle one; then reopened.
  int reserve_fd_ = -1;
  void keep_reserve();  // reopens reserve_fd_ when it is not open (and the table has room)
  std::chrono::steady_clock::time_point last_cap_warning_{};
  std::chrono::steady_clock::time_point last_budget_warning_{};
};

}  // namespace txmq::server
