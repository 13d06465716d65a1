#include "server/http/http.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <optional>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

namespace txmq::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {
// A header is read in steps of this size; its buffer past the first kHeaderFree bytes is
// reserved against the memory budget before each read (the first are the connection's own
// cost, bounded by the connection caps: a usual SigV4 header never touches the budget).
constexpr std::size_t kHeaderStep = 8 * 1024;
constexpr std::size_t kHeaderFree = 8 * 1024;
// A body is reserved against the memory budget a step ahead of what has arrived (Beast reads
// up to 64 KiB at a time), and must keep arriving at the minimum rate: a grace's worth of time
// after its last bytes, it is cut off.
constexpr std::size_t kBodyStep = 64 * 1024;
constexpr std::size_t kBodyGrace = 256 * 1024;
// Refusals for want of room this recent make /readyz say "busy".
constexpr auto kBusyFor = std::chrono::seconds(2);
// After a refusal the server stops sending and reads (and drops) what the client still sends,
// for up to this long or this much, before closing: closing with unread bytes resets the
// connection, and the client could lose the answer. Dropped bytes cost no memory.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr std::size_t kLingerBytes = 4u << 20;
// The first read of a request: enough for most headers; the rest grows as Beast needs.
constexpr std::size_t kFirstRead = 1024;
// Accept errors are retried after this pause, doubled up to kAcceptBackoffMax.
constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};

std::string plain_answer(unsigned status, std::string_view reason, std::string_view text) {
  return fmt::format(
             "HTTP/1.1 {} {}\r\nServer: txmq\r\nContent-Type: text/plain; charset=utf-8\r\n"
             "Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
             status, reason, text.size() + 1, text) +
         "\n";
}

std::string byte_size(std::uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

std::string_view trimmed(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool is_chunked(std::string_view coding) {
  coding = trimmed(coding);
  static constexpr std::string_view kChunked = "chunked";
  return coding.size() == kChunked.size() &&
         std::equal(coding.begin(), coding.end(), kChunked.begin(),
                    [](char a, char b) { return (a | 0x20) == b; });
}

HttpResponse busy_answer(std::string text) {
  HttpResponse r = plain_text(503, std::move(text));
  r.headers.emplace_back("Retry-After", "1");
  return r;
}
}  // namespace

// One client connection: waits for a request, reads its header, asks the admission check how
// much body to read, reads it, hands the request to the handler, writes its answer (posted back
// onto the connection's strand from whatever thread answered), and waits for the next one.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // kIdle: waiting for a request's first byte; kHeader: reading a request's header. In either
  // the acceptor may close it to make room (kEvicted), the idle ones first. kActive: a request
  // is being admitted, read, handled or answered.
  enum Phase : int { kIdle, kHeader, kActive, kEvicted };

  Session(tcp::socket socket, HttpServer& server, std::string client)
      : stream_(std::move(socket)), server_(server), options_(server.options_),
        client_(std::move(client)) {
    // For write() on the answering thread; asynchronous operations are not affected.
    beast::error_code ignored;
    stream_.socket().non_blocking(true, ignored);
  }

  void start() {
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this()] { self->wait_for_request(); });
  }

  // From HttpServer::shutdown: an idle connection closes now, a busy one after its answer.
  void shutdown() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      std::lock_guard lock(self->handoff_);
      self->stopping_ = true;
      if (!self->busy_) self->close();
    });
  }

  // From the acceptor, with the server's lock held: claims an idle connection for closing, so
  // that it starts no request. False when it is not idle (any more).
  bool try_evict(Phase from) {
    int expected = from;
    return phase_.compare_exchange_strong(expected, kEvicted);
  }
  Phase phase() const { return static_cast<Phase>(phase_.load()); }
  Clock::rep phase_since() const { return phase_since_.load(); }
  const std::string& client() const { return client_; }
  void close_evicted() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      std::lock_guard lock(self->handoff_);
      self->close();
    });
  }

  // A connection over the cap with none idle to close: 503 at once (a small answer, written
  // without waiting: the socket's send buffer takes it), then closed. Never started.
  void refuse_at_once() {
    static const std::string answer = plain_answer(
        503, "Service Unavailable", "too many connections: retry, or reuse a connection");
    beast::error_code ignored;
    tcp::socket& socket = stream_.socket();
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(answer), ignored);
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    socket.close(ignored);
  }

 private:
  void wait_for_request() {
    if (stopping_) return close();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(kHeaderLimit));
    // Checked against the admission's limit once the header is in. (Boost 1.74 treats "no
    // limit" as a limit of zero for a Content-Length, hence the largest value.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    declared_length_.reset();
    header_scanned_ = 0;
    credentialed_ = false;
    if (buffer_.size() > 0) {  // the next request came with the last one (pipelining)
      phase_since_.store(Clock::now().time_since_epoch().count());
      phase_.store(kHeader);
      header_deadline_ = Clock::now() + options_.header_timeout;
      // On the strand, not here: an answering thread may be here holding handoff_ (write()),
      // and read_header() may refuse at once, which writes and takes handoff_ again.
      return asio::post(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
    }
    // An idle connection keeps no buffer: a body's read may have grown it to 64 KiB, times
    // thousands of connections.
    buffer_.shrink_to_fit();
    // A new connection has header_timeout from its accept for its whole first header; a
    // keep-alive one may wait idle_timeout for a first byte, then has header_timeout.
    const Clock::time_point deadline = first_request_ ? accepted_at_ + options_.header_timeout
                                                      : Clock::now() + options_.idle_timeout;
    phase_since_.store(Clock::now().time_since_epoch().count());
    phase_.store(kIdle);
    stream_.expires_at(deadline);
    stream_.async_read_some(buffer_.prepare(kFirstRead),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->on_first_bytes(ec, n);
                            });
  }

  void on_first_bytes(beast::error_code ec, std::size_t n) {
    buffer_.commit(n);
    phase_since_.store(Clock::now().time_since_epoch().count());
    int idle = kIdle;
    if (!phase_.compare_exchange_strong(idle, kHeader)) return close();  // evicted
    if (ec) return close();  // closed by the client or idle too long
    header_deadline_ = first_request_ ? accepted_at_ + options_.header_timeout
                                      : Clock::now() + options_.header_timeout;
    read_header();
  }

  // Reads until the header's blank line is in the buffer, in steps reserved against the memory
  // budget, and counts its fields before Beast's parser allocates one by one: 11,000 fields
  // of 6 bytes cost 860 KiB parsed.
  void read_header() {
    if (phase_.load() == kEvicted) return close();
    const std::string_view have(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    const std::size_t from = header_scanned_ > 3 ? header_scanned_ - 3 : 0;
    const std::size_t end = have.find("\r\n\r\n", from);
    header_scanned_ = have.size();
    if (end != std::string_view::npos && end < kHeaderLimit) {
      // One line feed ends the request line and each field but the last.
      if (static_cast<std::size_t>(std::count(have.begin(), have.begin() + end, '\n')) >
          kMaxHeaderFields) {
        return refuse(plain_text(
            431, fmt::format("request header over the limit of {} fields", kMaxHeaderFields)));
      }
      int reading = kHeader;
      if (!phase_.compare_exchange_strong(reading, kActive)) return close();  // evicted
      stream_.expires_at(header_deadline_);
      // All of it is in the buffer: parsed without another read.
      return http::async_read_header(
          stream_, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
    }
    if (have.size() >= kHeaderLimit) {
      return refuse(
          plain_text(431, "request header over the limit of " + byte_size(kHeaderLimit)));
    }
    const auto space = buffer_.prepare(std::min(kHeaderStep, kHeaderLimit - have.size()));
    const std::size_t charged = buffer_.capacity() > kHeaderFree ? buffer_.capacity() - kHeaderFree : 0;
    if (charged > header_bytes_ &&
        !reserve_body_memory(charged - header_bytes_, /*credentialed=*/false)) {
      return refuse_over_budget();
    }
    header_bytes_ = std::max(header_bytes_, charged);
    stream_.expires_at(header_deadline_);
    stream_.async_read_some(space, [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->buffer_.commit(n);
                              if (ec) return self->close();  // gone, too slow, or evicted
                              self->read_header();
                            });
  }

  void on_header(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      return refuse(
          plain_text(431, "request header over the limit of " + byte_size(kHeaderLimit)));
    }
    // A header the parser refuses (a malformed field, a framing it cannot trust such as a
    // Content-Length beside a chunked coding) is answered 400, as RFC 9112 asks; the client
    // gone or too slow, closed.
    if (ec && ec.category() == beast::http::make_error_code(http::error::bad_version).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return refuse(plain_text(400, "malformed request header: " + ec.message()));
    }
    if (ec) return close();
    keep_alive_ = parser_->get().keep_alive();
    version_ = parser_->get().version();
    const RequestHeader& header = parser_->get();
    // RFC 9112 6.1: chunked, alone, is the only coding a request body may have here; a list
    // ("chunked, chunked", "gzip, chunked"), another coding, an empty one or a second field
    // would be framed by a length the sender did not mean.
    if (const auto codings = header.equal_range(http::field::transfer_encoding);
        codings.first != codings.second) {
      if (std::next(codings.first) != codings.second) {
        return refuse(plain_text(400, "Transfer-Encoding must be one field: chunked"));
      }
      const std::string_view te(codings.first->value().data(), codings.first->value().size());
      // Its codings, in order: chunked alone passes; chunked last and once after others is 501
      // (no other is done here); anything else (chunked twice, not last, an empty one) is 400.
      std::size_t count = 0, chunked = 0;
      bool empty = false, last_chunked = false;
      for (std::size_t from = 0; from <= te.size(); ++count) {
        const std::size_t to = std::min(te.find(',', from), te.size());
        const std::string_view coding = te.substr(from, to - from);
        last_chunked = is_chunked(coding);
        chunked += last_chunked ? 1 : 0;
        empty = empty || trimmed(coding).empty();
        from = to + 1;
      }
      if (!(count == 1 && last_chunked)) {
        return refuse(last_chunked && chunked == 1 && !empty
                          ? plain_text(501, "a request body's only transfer coding here is chunked")
                          : plain_text(400, "Transfer-Encoding must end with chunked, once"));
      }
    }
    Admission admission;
    if (options_.admission) {
      try {
        admission = options_.admission(header);
      } catch (const std::exception& e) {
        return refuse(plain_text(500, fmt::format("internal error: {}", e.what())));
      }
    }
    if (admission.refuse) return refuse(std::move(*admission.refuse));
    if (parser_->is_done()) return dispatch();  // no body

    declared_length_ = parser_->content_length();
    if (declared_length_ && *declared_length_ > admission.body_limit) {
      return refuse(
          plain_text(413, fmt::format("request body of {} bytes over this request's limit of {}",
                                      *declared_length_, byte_size(admission.body_limit))));
    }
    body_limit_ = admission.body_limit;
    credentialed_ = admission.credentialed;
    parser_->body_limit(admission.body_limit);
    // Reserved as the body arrives, a step ahead of it, not all at once from the declared
    // length: a client that declares 4 MiB and sends nothing holds one step.
    if (!reserve_body_memory(std::min(kBodyStep, next_body_step()), credentialed_)) {
      return refuse_over_budget();
    }
    body_started_ = Clock::now();
    // Sent only now that the body is wanted: a client that waits for it (curl with a large
    // body) sends nothing that would be refused.
    if (version_ >= 11 && beast::iequals(header[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_at(body_deadline());
      return asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                               [self = shared_from_this()](beast::error_code write_ec, std::size_t) {
                                 if (write_ec) return self->close();
                                 self->read_body();
                               });
    }
    read_body();
  }

  // The most the body can still need, up to one step: what its declared length or its limit
  // leaves beyond what is held.
  std::size_t next_body_step() const {
    const std::size_t bound = declared_length_ ? *declared_length_ : body_limit_;
    const std::size_t held = parser_->get().body().size();
    return bound > held ? std::min(kBodyStep, bound - held) : 0;
  }

  // header_timeout, then the body at min_body_rate, counted on what has arrived (re-armed at
  // each read): a client that stops sending is cut off a step's time later, whatever length it
  // declared.
  Clock::time_point body_deadline() const {
    const std::uint64_t due = parser_->get().body().size() + kBodyGrace;
    const auto allowance = std::chrono::milliseconds(
        due * 1000 / std::max<std::size_t>(options_.min_body_rate, 1));
    return body_started_ + options_.header_timeout + allowance;
  }

  void read_body() {
    stream_.expires_at(body_deadline());
    http::async_read_some(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return refuse(plain_text(413, fmt::format("request body over this request's limit of {}",
                                                byte_size(body_limit_))));
    }
    if (ec) return close();
    if (parser_->is_done()) return dispatch();
    // What arrived is reserved, and a step more before the next read (beside the header's).
    const std::size_t wanted = header_bytes_ + parser_->get().body().size() + next_body_step();
    if (wanted > body_bytes_reserved_ &&
        !reserve_body_memory(wanted - body_bytes_reserved_, credentialed_)) {
      return refuse_over_budget();
    }
    read_body();
  }

  void dispatch() {
    stream_.expires_never();
    busy_ = true;
    HttpRequest request = parser_->release();
    auto self = shared_from_this();
    // The body's share of the budget goes with the request: it is released when the handler
    // lets go of its responder (the request with it), not when the answer is written, so that
    // requests answered early (a deadline) but still queued keep counting.
    auto hold = std::make_shared<BodyHold>(server_.body_bytes_reserved_, body_bytes_reserved_);
    body_bytes_reserved_ = 0;
    header_bytes_ = 0;
    server_.handler_(std::move(request),
                     [self, hold](HttpResponse response) { self->write(std::move(response)); });
  }

  // A dispatched body's reservation, released when the last responder copy goes.
  struct BodyHold {
    BodyHold(std::shared_ptr<std::atomic<std::size_t>> total, std::size_t bytes)
        : total_(std::move(total)), bytes_(bytes) {}
    ~BodyHold() { *total_ -= bytes_; }
    BodyHold(const BodyHold&) = delete;
    BodyHold& operator=(const BodyHold&) = delete;

   private:
    std::shared_ptr<std::atomic<std::size_t>> total_;
    std::size_t bytes_;
  };

  bool reserve_body_memory(std::size_t bytes, bool credentialed) {
    if (!server_.reserve_body_memory(bytes, credentialed)) return false;
    body_bytes_reserved_ += bytes;
    return true;
  }

  void release_body_memory() {
    header_bytes_ = 0;
    if (body_bytes_reserved_ == 0) return;
    server_.release_body_memory(body_bytes_reserved_);
    body_bytes_reserved_ = 0;
  }

  void refuse_over_budget() {
    // Only a refusal that a key's request meets means the server has no room for work: the
    // others meet the share kept from them.
    if (credentialed_) server_.note_refusal("request bodies at the memory budget");
    server_.warn_at_most_once_a_minute(
        server_.last_budget_warning_,
        fmt::format("request headers and bodies being read reached {} of the budget of {} "
                    "(--max-body-memory): requests answered 503 until some finish",
                    credentialed_ ? "all" : "the uncredentialed share",
                    byte_size(options_.body_memory_budget)));
    refuse(busy_answer("too many requests being read at once: retry"));
  }

  // Answers and closes without reading the body (or the rest of it). What was read of the
  // request is freed now, not after the linger: its share of the budget goes back at once.
  void refuse(HttpResponse r) {
    keep_alive_ = false;
    refused_ = true;
    parser_.reset();
    buffer_.consume(buffer_.size());
    buffer_.shrink_to_fit();
    release_body_memory();
    busy_ = true;
    write(std::move(r));
  }

  // An answer being written, and how far.
  struct Answer {
    http::response<http::string_body> response;
    http::serializer<false, http::string_body> serializer{response};
  };

  // Writes an answer; called once per request, from any thread (the handler answers from
  // whichever thread has it). While a request is in progress nothing else uses the socket (no
  // read, no timer, no other write), so the answering thread writes what the socket takes at
  // once, without blocking (the socket is non-blocking): the client has its answer without
  // waiting for an HTTP thread to wake. When that was all of it, the answering thread also
  // starts what comes next (the next request's read, or closing): handing that to the strand
  // would wake the connection's I/O thread once more per request. Only the posts of shutdown()
  // and close_evicted() can reach the strand meanwhile, and they take handoff_ as this does.
  // The rest of a longer answer is the strand's, and so is all that follows it.
  void write(HttpResponse r) {
    auto answer = std::make_shared<Answer>();
    http::response<http::string_body>& response = answer->response;
    response.version(version_);
    response.result(r.status);
    response.set(http::field::server, "txmq");
    response.set(http::field::content_type, r.content_type);
    for (auto& [name, value] : r.headers) response.set(name, value);
    response.body() = std::move(r.body);
    response.keep_alive(keep_alive_ && !stopping_.load());
    response.prepare_payload();
    beast::error_code ec;
    http::write(stream_.socket(), answer->serializer, ec);
    if (!ec) {
      std::lock_guard lock(handoff_);
      release_body_memory();
      return after_write(ec, answer->response.keep_alive());
    }
    asio::post(stream_.get_executor(),
               [self = shared_from_this(), answer, ec] { self->finish_write(answer, ec); });
  }

  void finish_write(const std::shared_ptr<Answer>& answer, beast::error_code ec) {
    release_body_memory();  // the handler has answered: done with the body
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      // What the client did not take at once waits in the answer budget, and must be read at
      // the minimum rate after a grace: a client that reads nothing holds it no longer.
      const std::size_t bytes = answer->response.body().size() + 1024;
      if (!server_.reserve_answer_memory(bytes)) {
        server_.warn_at_most_once_a_minute(
            server_.last_answer_warning_,
            fmt::format("answers waiting for their clients to read them reached the budget of "
                        "{} (--max-answer-memory): the connections of the next are closed",
                        byte_size(options_.answer_memory_budget)));
        return close();
      }
      stream_.expires_after(options_.header_timeout +
                            std::chrono::milliseconds(
                                bytes * 1000 / std::max<std::size_t>(options_.min_body_rate, 1)));
      http::async_write(
          stream_, answer->serializer,
          [self = shared_from_this(), answer, bytes](beast::error_code write_ec, std::size_t) {
            self->server_.answer_bytes_reserved_ -= bytes;
            self->after_write(write_ec, answer->response.keep_alive());
          });
      return;
    }
    after_write(ec, answer->response.keep_alive());
  }

  void after_write(beast::error_code ec, bool keep_alive) {
    busy_ = false;
    if (ec) return close();
    if (refused_) return linger();
    if (!keep_alive) return close();
    first_request_ = false;
    wait_for_request();
  }

  // After a refusal: no more sending; what the client still sends is read and dropped for a
  // moment (so that it reads the answer rather than a reset), then the connection closes.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    buffer_.consume(buffer_.size());
    stream_.expires_after(kLingerTime);
    drop_input();
  }

  void drop_input() {
    stream_.async_read_some(buffer_.prepare(4 * 1024),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->lingered_bytes_ += n;
                              if (ec || self->lingered_bytes_ >= kLingerBytes) return self->close();
                              self->drop_input();
                            });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    release_body_memory();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
    server_.closed(this);
  }

  beast::tcp_stream stream_;
  HttpServer& server_;
  const HttpServerOptions& options_;
  const std::string client_;  // the peer's address, for the per-client cap
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::atomic<int> phase_{kActive};
  std::atomic<Clock::rep> phase_since_{0};  // when it went idle or began its header
  const Clock::time_point accepted_at_ = Clock::now();
  Clock::time_point header_deadline_;
  Clock::time_point body_started_;
  boost::optional<std::uint64_t> declared_length_;
  std::size_t body_limit_ = kDefaultBodyLimit;
  std::size_t body_bytes_reserved_ = 0;  // of the budget, the header's bytes among them
  std::size_t header_bytes_ = 0;         // the header's share of body_bytes_reserved_
  std::size_t header_scanned_ = 0;       // bytes of the buffer searched for the blank line
  bool credentialed_ = false;
  std::size_t lingered_bytes_ = 0;
  bool first_request_ = true;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  bool busy_ = false;
  bool refused_ = false;
  // Held by an answering thread that goes on to the next request (write()), and by the posts
  // that may run on the strand meanwhile.
  std::mutex handoff_;
  std::atomic<bool> stopping_{false};  // also read by write() on the answering thread
  bool closed_ = false;
};

HttpServer::HttpServer(asio::io_context& io, const tcp::endpoint& endpoint, RequestHandler handler,
                       HttpServerOptions options,
                       std::vector<asio::io_context*> connection_contexts)
    : io_(io),
      connection_contexts_(std::move(connection_contexts)),
      acceptor_(asio::make_strand(io)),
      handler_(std::move(handler)),
      options_(std::move(options)),
      accept_retry_(acceptor_.get_executor()) {
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  // The reserve descriptor's accept (on EMFILE) must not block; async_accept is unaffected.
  acceptor_.non_blocking(true);
  keep_reserve();
}

void HttpServer::keep_reserve() {
  if (reserve_fd_ < 0) reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

HttpServer::~HttpServer() {
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

tcp::endpoint HttpServer::local_endpoint() const { return acceptor_.local_endpoint(); }

asio::io_context& HttpServer::next_context() {
  if (connection_contexts_.empty()) return io_;
  asio::io_context& next = *connection_contexts_[next_context_];
  next_context_ = (next_context_ + 1) % connection_contexts_.size();
  return next;
}

void HttpServer::start() {
  asio::dispatch(acceptor_.get_executor(), [this] { accept(); });
}

void HttpServer::accept() {
  // Closed by shutdown(): a connection accepted just before the close must not re-arm it (the
  // accept would fail with "Bad file descriptor" and be logged as a failure).
  if (!acceptor_.is_open()) return;
  acceptor_.async_accept(asio::make_strand(next_context()), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) return on_accept_error(ec);
    accept_backoff_ = std::chrono::milliseconds(0);
    // Without its reserve the table is full: the connection taken closes an idle one, so that
    // the reserve and the next connection find a descriptor.
    keep_reserve();
    if (accept_failing_ && reserve_fd_ >= 0) {  // the episode is over
      accept_failing_ = false;
      if (accept_failure_said_ && options_.warn) options_.warn("accepting connections again");
      accept_failure_said_ = false;
    }
    take_connection(std::move(socket), /*make_room=*/reserve_fd_ < 0);
    accept();
  });
}

void HttpServer::on_accept_error(const boost::system::error_code& ec) {
  const bool out_of_descriptors =
      ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system;
  if (!accept_failing_) {  // once per episode, and at most once a minute
    accept_failure_said_ = warn_at_most_once_a_minute(
        last_accept_warning_,
        fmt::format("accepting a connection failed: {}; retrying after pauses of {} ms doubling "
                    "to {} ms until one succeeds{}",
                    ec.message(), kAcceptBackoffMin.count(), kAcceptBackoffMax.count(),
                    out_of_descriptors ? " (raise LimitNOFILE, or lower --max-connections)" : ""));
  }
  accept_failing_ = true;
  bool took_one = false;
  if (out_of_descriptors) {
    // Fails while the table is still full: a connection closed since frees the descriptor.
    keep_reserve();
    if (reserve_fd_ >= 0) {
      // Give up the reserve to take one waiting connection (a probe, say) and close the
      // longest-idle one for it, below the cap too: that frees a descriptor for the reserve
      // and the next waiting connection. With none idle it is answered 503. Either way the
      // connections waiting in the listen queue are not left hanging.
      ::close(reserve_fd_);
      reserve_fd_ = -1;
      tcp::socket socket(asio::make_strand(next_context()));
      beast::error_code accept_ec;
      acceptor_.accept(socket, accept_ec);
      if (!accept_ec) {
        take_connection(std::move(socket), /*make_room=*/true);
        took_one = true;
      }
      keep_reserve();
    }
  }
  // A connection taken is progress: the next try at once (it cannot spin: each round takes a
  // connection, or finds no reserve and pauses); else the pause doubles.
  if (took_one) {
    accept_backoff_ = std::chrono::milliseconds(0);
    return asio::post(acceptor_.get_executor(), [this] { accept(); });
  }
  accept_backoff_ = accept_backoff_.count() == 0 ? kAcceptBackoffMin
                                                 : std::min(accept_backoff_ * 2, kAcceptBackoffMax);
  accept_retry_.expires_after(accept_backoff_);
  accept_retry_.async_wait([this](beast::error_code wait_ec) {
    if (wait_ec) return;  // cancelled by shutdown
    accept();
  });
}

void HttpServer::take_connection(tcp::socket socket, bool make_room) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // Empty when the peer is already gone: no per-client cap then.
  std::string client;
  if (const tcp::endpoint peer = socket.remote_endpoint(ignored); !ignored) {
    client = peer.address().to_string();
  }
  auto session = std::make_shared<Session>(std::move(socket), *this, client);
  const std::size_t per_client_cap = options_.max_connections_per_client == 0
                                         ? options_.max_connections
                                         : options_.max_connections_per_client;
  std::shared_ptr<Session> evicted;
  bool full = false;
  bool client_full = false;
  std::size_t open = 0;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    const auto known = per_client_.find(client);
    if (!client.empty() && known != per_client_.end() && known->second >= per_client_cap) {
      // Its own connections make room for it, not other clients'.
      client_full = true;
      evicted = evict_locked(&client);
      full = evicted == nullptr;
    } else if (make_room || sessions_.size() >= options_.max_connections) {
      evicted = evict_locked(nullptr);
      full = evicted == nullptr;
    }
    if (!full) {
      sessions_.emplace(session.get(), session);
      ++per_client_[client];
    }
    open = sessions_.size();
  }
  if (client_full) {
    warn_at_most_once_a_minute(
        last_client_cap_warning_,
        fmt::format("{} has the most connections one client may hold "
                    "(--max-connections-per-client {}): {}",
                    client, per_client_cap,
                    full ? "none of them idle, its new connections are answered 503"
                         : "its longest-idle (or slowest) one is closed for each new one"));
  } else if ((evicted || full) && !make_room) {  // out of descriptors: said by on_accept_error
    warn_at_most_once_a_minute(
        last_cap_warning_,
        fmt::format("{} connections open, the cap (--max-connections {}): {}", open,
                    options_.max_connections,
                    full ? "none idle or in its header, new connections are answered 503"
                         : "the longest-idle (or slowest) one is closed for each new one"));
  }
  if (evicted) evicted->close_evicted();
  if (full) {
    if (!client_full) note_refusal("connections at the cap (--max-connections)");
    return session->refuse_at_once();
  }
  session->start();
}

std::shared_ptr<Session> HttpServer::evict_locked(const std::string* client) {
  // A scan of every connection, but only when a cap is reached. The idle first; then those
  // still in their header (a slow-header client would otherwise hold the cap).
  for (const Session::Phase phase : {Session::kIdle, Session::kHeader}) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      Session* longest = nullptr;
      Clock::rep since = std::numeric_limits<Clock::rep>::max();
      for (const auto& [raw, session] : sessions_) {
        if (raw->phase() == phase && raw->phase_since() < since &&
            (client == nullptr || raw->client() == *client)) {
          longest = raw;
          since = raw->phase_since();
        }
      }
      if (longest == nullptr) break;
      if (longest->try_evict(phase)) {  // else it moved on meanwhile: look again
        auto it = sessions_.find(longest);
        std::shared_ptr<Session> evicted = std::move(it->second);
        sessions_.erase(it);
        forget_client_locked(evicted->client());
        return evicted;
      }
    }
  }
  return nullptr;
}

void HttpServer::forget_client_locked(const std::string& client) {
  if (auto c = per_client_.find(client); c != per_client_.end() && --c->second == 0) {
    per_client_.erase(c);
  }
}

namespace {
// Adds `bytes` to `reserved` unless that would pass `budget`; false then.
bool reserve_within(std::atomic<std::size_t>& reserved, std::size_t bytes, std::size_t budget) {
  std::size_t now = reserved.load();
  do {
    if (bytes > budget - std::min(now, budget)) return false;
  } while (!reserved.compare_exchange_weak(now, now + bytes));
  return true;
}
}  // namespace

bool HttpServer::reserve_body_memory(std::size_t bytes, bool credentialed) {
  // A quarter of the budget is kept for credentialed requests.
  return reserve_within(*body_bytes_reserved_, bytes,
                        credentialed ? options_.body_memory_budget
                                     : options_.body_memory_budget - options_.body_memory_budget / 4);
}

void HttpServer::release_body_memory(std::size_t bytes) { *body_bytes_reserved_ -= bytes; }

bool HttpServer::reserve_answer_memory(std::size_t bytes) {
  return reserve_within(answer_bytes_reserved_, bytes, options_.answer_memory_budget);
}

void HttpServer::note_refusal(const char* why) {
  last_refusal_reason_.store(why);
  last_refusal_.store(Clock::now().time_since_epoch().count());
}

std::string HttpServer::refusing_work() const {
  const char* why = last_refusal_reason_.load();
  const Clock::time_point at{Clock::duration(last_refusal_.load())};
  if (why == nullptr || Clock::now() - at > kBusyFor) return {};
  return fmt::format("{}: requests refused within the last {} s", why,
                     std::chrono::duration_cast<std::chrono::seconds>(kBusyFor).count());
}

bool HttpServer::warn_at_most_once_a_minute(Clock::time_point& last, std::string text) {
  if (!options_.warn) return false;
  {
    std::lock_guard lock(mutex_);
    const Clock::time_point now = Clock::now();
    if (last != Clock::time_point{} && now - last < std::chrono::minutes(1)) return false;
    last = now;
  }
  options_.warn(text);
  return true;
}

void HttpServer::shutdown(std::function<void()> done) {
  asio::post(acceptor_.get_executor(), [this, done = std::move(done)]() mutable {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      on_all_closed_ = std::move(done);
      for (const auto& [raw, session] : sessions_) sessions.push_back(session);
      if (sessions_.empty() && on_all_closed_) {
        auto callback = std::move(on_all_closed_);
        on_all_closed_ = nullptr;
        asio::post(io_, callback);
      }
    }
    for (const auto& s : sessions) s->shutdown();
  });
}

std::size_t HttpServer::open_connections() {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

void HttpServer::closed(Session* session) {
  std::function<void()> callback;
  std::shared_ptr<Session> keep;  // destroyed outside the lock
  {
    std::lock_guard lock(mutex_);
    if (auto it = sessions_.find(session); it != sessions_.end()) {
      keep = std::move(it->second);
      sessions_.erase(it);
      forget_client_locked(keep->client());
    }
    if (stopping_ && sessions_.empty() && on_all_closed_) {
      callback = std::move(on_all_closed_);
      on_all_closed_ = nullptr;
    }
  }
  if (callback) asio::post(io_, callback);
}

std::string_view header_of(const RequestHeader& r, boost::beast::http::field f) {
  auto it = r.find(f);
  if (it == r.end()) return {};
  return {it->value().data(), it->value().size()};
}

HttpResponse plain_text(unsigned status, std::string text) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(text);
  if (r.body.empty() || r.body.back() != '\n') r.body.push_back('\n');
  return r;
}

}  // namespace txmq::server
