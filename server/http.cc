#include "server/http.h"

#include <chrono>
#include <optional>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace txmq::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
// An idle keep-alive connection is closed after this long; a request must arrive whole within it.
constexpr auto kIdleTimeout = std::chrono::seconds(75);
}  // namespace

// One client connection: reads a request, hands it to the handler, writes its answer (posted
// back onto the connection's strand from whatever thread answered), and reads the next one.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer& server)
      : stream_(std::move(socket)), server_(server) {}

  void start() {
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this()] { self->read(); });
  }

  // From HttpServer::shutdown: an idle connection closes now, a busy one after its answer.
  void shutdown() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->stopping_ = true;
      if (!self->busy_) self->close();
    });
  }

 private:
  void read() {
    if (stopping_) return close();
    parser_.emplace();
    parser_->body_limit(HttpServer::kMaxBodyBytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return answer_and_close(413, "request body over the limit of 64 MiB");
    }
    if (ec == http::error::header_limit) {
      return answer_and_close(431, "request headers over the limit of 64 KiB");
    }
    if (ec) return close();  // closed by the client, timed out, or not HTTP
    stream_.expires_never();
    busy_ = true;
    HttpRequest request = parser_->release();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    auto self = shared_from_this();
    server_.handler_(std::move(request), [self](HttpResponse response) {
      asio::post(self->stream_.get_executor(), [self, r = std::move(response)]() mutable {
        self->write(std::move(r));
      });
    });
  }

  void answer_and_close(unsigned status, std::string text) {
    keep_alive_ = false;
    busy_ = true;
    HttpResponse r;
    r.status = status;
    r.body = std::move(text);
    write(std::move(r));
  }

  void write(HttpResponse r) {
    auto response = std::make_shared<http::response<http::string_body>>();
    response->version(version_);
    response->result(r.status);
    response->set(http::field::server, "txmq");
    response->set(http::field::content_type, r.content_type);
    for (auto& [name, value] : r.headers) response->set(name, value);
    response->body() = std::move(r.body);
    response->keep_alive(keep_alive_ && !stopping_);
    response->prepare_payload();
    stream_.expires_after(kIdleTimeout);
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
                        self->busy_ = false;
                        if (ec || !response->keep_alive()) return self->close();
                        self->read();
                      });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
    server_.closed(this);
  }

  beast::tcp_stream stream_;
  HttpServer& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  bool busy_ = false;
  bool stopping_ = false;
  bool closed_ = false;
};

HttpServer::HttpServer(asio::io_context& io, const tcp::endpoint& endpoint, RequestHandler handler)
    : io_(io), acceptor_(asio::make_strand(io)), handler_(std::move(handler)) {
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(asio::socket_base::max_listen_connections);
}

HttpServer::~HttpServer() = default;

tcp::endpoint HttpServer::local_endpoint() const { return acceptor_.local_endpoint(); }

void HttpServer::start() { accept(); }

void HttpServer::accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      auto session = std::make_shared<Session>(std::move(socket), *this);
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        sessions_.insert(session);
      }
      session->start();
    }
    accept();
  });
}

void HttpServer::shutdown(std::function<void()> done) {
  asio::post(acceptor_.get_executor(), [this, done = std::move(done)]() mutable {
    beast::error_code ignored;
    acceptor_.close(ignored);
    std::set<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      on_all_closed_ = std::move(done);
      sessions = sessions_;
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
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->get() == session) {
        keep = *it;
        sessions_.erase(it);
        break;
      }
    }
    if (stopping_ && sessions_.empty() && on_all_closed_) {
      callback = std::move(on_all_closed_);
      on_all_closed_ = nullptr;
    }
  }
  if (callback) asio::post(io_, callback);
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
