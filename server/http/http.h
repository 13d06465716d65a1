#pragma once

// The HTTP side of txmq serve: Boost.Beast's parser and writer over Asio, HTTP/1.1 with
// keep-alive. Each request is handed to a handler that answers it once, from any thread, now or
// later (a long poll answers when messages arrive or its wait ends).
//
// What a client can make the server hold is bounded before anyone is authenticated:
// a request's header is read first (at most kHeaderLimit bytes and kMaxHeaderFields fields, its
// bytes counted in the memory budget as they arrive) and an admission check decides how much
// body to read; the headers and bodies being read share one memory budget, of which a share is
// kept for requests whose header carries the server's credentials; answers that the client does
// not read at once share a second budget; connections are capped, in all and per client
// address, the longest-idle one (else the one longest in its header) closed to make room; a
// client must send its header and body, and read its answer, at a minimum pace.
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

// A request header's largest size, and its most fields: SigV4 signs a few dozen at most.
inline constexpr std::size_t kHeaderLimit = 64u << 10;
inline constexpr std::size_t kMaxHeaderFields = 100;

// What to do with a request whose header has arrived, before its body is read.
struct Admission {
  std::size_t body_limit = kDefaultBodyLimit;  // largest body to read for this request
  std::optional<HttpResponse> refuse;          // answer this at once and close; body unread
  // The header carries a credential of the server's, checked as far as a header can be (a
  // SigV4 signature by a known key, of now), or the server has none: its body may use the
  // share of the memory budget kept for such requests (HttpServerOptions::body_memory_budget).
  bool credentialed = false;
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
  // Connections held at once from one client address (0: max_connections). At this cap a new
  // connection from that address closes its longest-idle one, or is answered 503. Clients
  // behind one proxy share an address: raise it there.
  std::size_t max_connections_per_client = 1024;
  // Request headers and bodies being read or handled at once, over all connections, in bytes:
  // a request whose header or body (as it arrives, kept a step ahead) would pass it is answered
  // 503 (Retry-After) and its connection closed. A quarter is kept for credentialed requests
  // (Admission::credentialed): headers and other bodies stop at three quarters, so that
  // clients without a key cannot fill it. 256 MiB holds 64 requests of SQS's largest size
  // (4 MiB encoded) or 4 of Txmq.SendMessageBatch's 64 MiB.
  std::size_t body_memory_budget = std::size_t{256} << 20;
  // Answers that a client did not take at once (its socket's buffer full), over all
  // connections, in bytes: an answer that would pass it is dropped and its connection closed.
  // A client must read an answer at min_body_rate after a grace of header_timeout.
  std::size_t answer_memory_budget = std::size_t{256} << 20;
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
  // Why requests were refused for want of room (the memory budget's credentialed share, or the
  // connection cap with none to close) within the last 2 s; empty when none was: /readyz says
  // it, so that a load balancer sends work elsewhere.
  std::string refusing_work() const;

 private:
  friend class Session;
  void accept();
  void on_accept_error(const boost::system::error_code& ec);
  // Starts a session for `socket`. At the cap (in all, or for its client address), or when
  // `make_room` (out of descriptors), a connection is closed for it (evict_locked); with none to
  // close it is answered 503 and closed.
  void take_connection(boost::asio::ip::tcp::socket socket, bool make_room = false);
  // The longest-idle connection, else the one longest in its request header (of the client
  // address `client` when not null), already marked so that it will not go on; the caller
  // closes it. Null when every connection has a request in progress. Called with mutex_ held.
  std::shared_ptr<Session> evict_locked(const std::string* client);
  // One connection of `client` fewer in per_client_ (its entry gone at zero). mutex_ held.
  void forget_client_locked(const std::string& client);
  void closed(Session* session);
  // Reserves `bytes` of the memory budget (all of it when `credentialed`, else all but the
  // credentialed share); false when that would pass it.
  bool reserve_body_memory(std::size_t bytes, bool credentialed);
  void release_body_memory(std::size_t bytes);
  // The same for answers not yet written (answer_memory_budget).
  bool reserve_answer_memory(std::size_t bytes);
  void note_refusal(const char* why);
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
  std::unordered_map<std::string, std::size_t> per_client_;  // open connections by address
  bool stopping_ = false;
  std::function<void()> on_all_closed_;
  // Shared with the holds of bodies handed to the handler (they may outlive this server).
  const std::shared_ptr<std::atomic<std::size_t>> body_bytes_reserved_ =
      std::make_shared<std::atomic<std::size_t>>(0);
  std::atomic<std::size_t> answer_bytes_reserved_{0};
  // The last refusal for want of room (steady clock ticks) and its reason (a literal).
  std::atomic<std::chrono::steady_clock::rep> last_refusal_{0};
  std::atomic<const char*> last_refusal_reason_{nullptr};

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
  std::chrono::steady_clock::time_point last_answer_warning_{};
  std::chrono::steady_clock::time_point last_client_cap_warning_{};
};

}  // namespace txmq::server
