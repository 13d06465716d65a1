#include "server/serve.h"

#include <csignal>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <fmt/format.h>

#include "server/dashboard.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/service.h"

namespace txmq::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

void log_line(std::string_view line) {
  // One write per line, so that lines from several threads do not interleave.
  const std::string text = fmt::format("txmq serve: {}\n", line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

tcp::endpoint parse_listen(const std::string& listen) {
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    throw std::invalid_argument(fmt::format("--listen must be HOST:PORT, not '{}'", listen));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  unsigned port = 0;
  for (char c : listen.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) {
      throw std::invalid_argument(fmt::format("--listen: bad port in '{}'", listen));
    }
    port = port * 10 + static_cast<unsigned>(c - '0');
  }
  if (port > 65535) throw std::invalid_argument(fmt::format("--listen: bad port in '{}'", listen));
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    throw std::invalid_argument(
        fmt::format("--listen: '{}' is not an IP address (use 127.0.0.1, ::1 or 0.0.0.0)", host));
  }
  return {address, static_cast<unsigned short>(port)};
}

// The address to listen on, once the options are known to be acceptable.
tcp::endpoint checked_endpoint(const ServeOptions& options) {
  const tcp::endpoint endpoint = parse_listen(options.listen);
  if (options.credentials_file.empty() && !endpoint.address().is_loopback()) {
    throw std::invalid_argument(
        "without --credentials txmq serve accepts any signature, so it listens on loopback only "
        "(127.0.0.1 or ::1); give --credentials FILE to listen on " +
        endpoint.address().to_string());
  }
  if (options.region.empty() ||
      options.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") !=
          std::string::npos) {
    throw std::invalid_argument("--region must be a region name such as us-east-1");
  }
  if (options.account.size() != 12 ||
      options.account.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("--account-id must be 12 digits");
  }
  return endpoint;
}

ClientOptions client_options(const ServeOptions& options) {
  ClientOptions o;
  o.dsn = options.dsn;
  o.pool_size = options.workers + 8;
  o.on_warning = [](std::string_view w) { log_line(w); };
  return o;
}

ServiceOptions service_options(const ServeOptions& options) {
  ServiceOptions o;
  o.region = options.region;
  o.account = options.account;
  o.credentials_file = options.credentials_file;
  o.workers = options.workers;
  o.log = log_line;
  return o;
}

// /metrics (docs/metrics.md) and the dashboard at / and /ui/ (docs/dashboard.md), ahead of the
// SQS dispatch.
ServiceOptions with_web(ServiceOptions o, MetricsEndpoint& metrics, Dashboard& dashboard,
                        RequestMetrics& requests) {
  o.web = [&metrics, &dashboard](HttpRequest& request, Responder& respond,
                                 const std::shared_ptr<const Credentials>& credentials) {
    return metrics.handle(request, respond, credentials) ||
           dashboard.handle(request, respond, credentials);
  };
  o.request_metrics = &requests;
  return o;
}

}  // namespace

struct Server::Impl {
  explicit Impl(const ServeOptions& options)
      : endpoint(checked_endpoint(options)),
        client(client_options(options)),
        metrics(client, server_metrics(), kDefaultExactUpTo),
        dashboard(client, DashboardOptions{.log = log_line}),
        service(client, io, with_web(service_options(options), metrics, dashboard, requests)),
        http(io, endpoint, [this](HttpRequest&& r, Responder respond) {
          service.handle(std::move(r), std::move(respond));
        }) {
    http.start();
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
  }

  // What /metrics adds for this server; read at scrape time, when everything is constructed.
  ServerMetrics server_metrics() {
    return {&requests, [this] { return service.counters().polls_held.load(); },
            [this] { return static_cast<std::uint64_t>(http.open_connections()); }};
  }

  void stop() {
    if (stopped.exchange(true)) return;
    // First no new connections or requests (idle connections close); then the service answers
    // the requests it holds (long polls with what they have) and its workers finish; each
    // connection closes once its answer is written.
    std::promise<void> closed;
    http.shutdown([&closed] { closed.set_value(); });
    service.shutdown();
    closed.get_future().wait();
    dashboard.stop();  // its sampler; no request reaches it once the service has stopped
    metrics.stop();
    keep_running.reset();
    io.stop();
    for (auto& t : threads) t.join();
  }

  const tcp::endpoint endpoint;
  asio::io_context io;
  // Keeps the io threads running until stop() has seen every connection close: once the
  // acceptor is closed, a moment with no operation pending (a long poll's timer cancelled,
  // its answer not yet posted) would otherwise end io.run() and strand the answer.
  asio::executor_work_guard<asio::io_context::executor_type> keep_running =
      asio::make_work_guard(io);
  Client client;
  RequestMetrics requests;
  MetricsEndpoint metrics;
  Dashboard dashboard;
  SqsService service;
  HttpServer http;
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};
};

Server::Server(const ServeOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Server::~Server() { stop(); }

std::string Server::address() const {
  const tcp::endpoint bound = impl_->http.local_endpoint();
  const std::string host = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                   : bound.address().to_string();
  return fmt::format("{}:{}", host, bound.port());
}

std::uint16_t Server::port() const { return impl_->http.local_endpoint().port(); }

SqsService& Server::service() { return impl_->service; }

void Server::reload_credentials() { impl_->service.reload_credentials(); }

void Server::stop() { impl_->stop(); }

int serve(const ServeOptions& options) {
  // Block the signals before any thread starts, so that only the waiting loop below takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Server server(options);
  std::printf("txmq serve: listening on http://%s (region %s, account %s; %s)\n",
              server.address().c_str(), options.region.c_str(), options.account.c_str(),
              options.credentials_file.empty()
                  ? "no --credentials: any well-formed signature is accepted, loopback only"
                  : fmt::format("signatures checked against {}", options.credentials_file).c_str());
  std::fflush(stdout);
  for (;;) {
    int signal = 0;
    if (sigwait(&signals, &signal) != 0) continue;
    if (signal == SIGHUP) {
      server.reload_credentials();
      continue;
    }
    log_line(fmt::format("{}: stopping (answering the requests it holds)",
                         signal == SIGTERM ? "SIGTERM" : "SIGINT"));
    break;
  }
  server.stop();
  return 0;
}

}  // namespace txmq::server
