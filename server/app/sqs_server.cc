#include "server/app/sqs_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
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

#include "server/http/http.h"
#include "server/sqs/service.h"
#include "server/web/dashboard.h"
#include "server/web/endpoint.h"
#include "server/web/health.h"
#include "server/web/metrics.h"

namespace txmq::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

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
  Regions::parse(options.region);  // throws, naming what is wrong
  if (options.max_connections < 1) {
    throw std::invalid_argument("--max-connections must be at least 1");
  }
  if (options.max_body_memory_mib < 4 || options.max_body_memory_mib > (std::size_t{1} << 20)) {
    throw std::invalid_argument("--max-body-memory must be from 4 to 1048576 (MiB)");
  }
  if (options.max_answer_memory_mib < 4 || options.max_answer_memory_mib > (std::size_t{1} << 20)) {
    throw std::invalid_argument("--max-answer-memory must be from 4 to 1048576 (MiB)");
  }
  if (options.account.size() != 12 ||
      options.account.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("--account-id must be 12 digits");
  }
  return endpoint;
}

ClientOptions client_options(const ServeOptions& options, const Log& log) {
  ClientOptions o;
  o.dsn = options.dsn;
  o.pool_size = options.workers + 8;
  o.on_warning = [log](std::string_view w) { log(LogLevel::kWarning, w, nullptr); };
  return o;
}

// Descriptors kept for all but client connections: the database pool (workers + 8) and 64 for
// the rest (listening socket, event loop, log, config and credentials files, the reserve
// descriptor, the health check's and dashboard's work), generous so that EMFILE stays rare.
std::size_t descriptors_kept(const ServeOptions& options) {
  return static_cast<std::size_t>(options.workers) + 8 + 64;
}

// options.max_connections, or fewer when RLIMIT_NOFILE cannot hold them besides the descriptors
// kept. The soft limit is raised towards the hard one first (as nginx and Go do): systemd's
// default soft limit is 1,024 while its hard one is 512Ki.
std::size_t connection_cap(const ServeOptions& options, const Log& log) {
  const std::size_t kept = descriptors_kept(options);
  const rlim_t wanted = static_cast<rlim_t>(options.max_connections + kept);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return options.max_connections;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    if (raised.rlim_cur > limit.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) return options.max_connections;
  // Fewer than 8 client connections would not be a server (a probe and a few clients).
  if (limit.rlim_cur < kept + 8) {
    throw std::invalid_argument(fmt::format(
        "RLIMIT_NOFILE is {}: too few file descriptors for {} database connections, files and "
        "clients (at least {}); raise it (LimitNOFILE= in the unit, ulimit -n)",
        limit.rlim_cur, options.workers + 8, kept + 8));
  }
  const std::size_t cap = static_cast<std::size_t>(limit.rlim_cur) - kept;
  log(LogLevel::kWarning,
      fmt::format("--max-connections {} lowered to {}: RLIMIT_NOFILE is {} and {} descriptors "
                  "are kept for the database pool and files; raise it (LimitNOFILE= in the "
                  "unit, ulimit -n)",
                  options.max_connections, cap, limit.rlim_cur, kept),
      {{"max_connections", cap}, {"rlimit_nofile", limit.rlim_cur}});
  return cap;
}

HttpServerOptions http_options(const ServeOptions& options, const Log& log,
                               std::size_t max_connections) {
  HttpServerOptions o;
  o.max_connections = max_connections;
  o.body_memory_budget = options.max_body_memory_mib << 20;
  o.answer_memory_budget = options.max_answer_memory_mib << 20;
  o.max_connections_per_client = options.max_connections_per_client;
  o.warn = [log](std::string_view w) { log(LogLevel::kWarning, w, nullptr); };
  return o;
}

// SQS requests are refused or sized from their headers, before their bodies are read.
HttpServerOptions with_admission(HttpServerOptions o, const SqsService& service) {
  o.admission = [&service](const RequestHeader& header) { return service.admit(header); };
  return o;
}

ServiceOptions service_options(const ServeOptions& options, const Log& log) {
  ServiceOptions o;
  o.regions = Regions::parse(options.region);
  o.account = options.account;
  o.credentials_file = options.credentials_file;
  o.workers = options.workers;
  o.tables_at_first_use = options.tables_at_first_use;
  o.shared_storage = options.shared_storage;
  o.log = log;
  return o;
}

// The web endpoints, asked in order for the requests that are not SQS calls; the first that
// takes a request answers it.
WebHandler web_chain(std::vector<WebEndpoint*> endpoints) {
  return [endpoints = std::move(endpoints)](HttpRequest& request, Responder& respond,
                                            const std::shared_ptr<const Credentials>& credentials) {
    for (WebEndpoint* endpoint : endpoints) {
      if (endpoint->handle(request, respond, credentials)) return true;
    }
    return false;
  };
}

// Ahead of the SQS dispatch: /healthz and /readyz first (no credentials: probes cannot sign),
// then /metrics (docs/metrics.md), then the dashboard at / and /ui/ (docs/dashboard.md).
ServiceOptions with_web(ServiceOptions o, Health& health, MetricsEndpoint& metrics,
                        Dashboard& dashboard, RequestMetrics& requests) {
  o.web = web_chain({&health, &metrics, &dashboard});
  o.record_request = [&requests](std::string_view action, bool txmq_action,
                                 std::string_view outcome, double seconds) {
    requests.record(action, txmq_action, outcome, seconds);
  };
  return o;
}

}  // namespace

struct Server::Impl {
  explicit Impl(const ServeOptions& options)
      : endpoint(checked_endpoint(options)),
        writer(options.log_format),
        log([writer = writer](LogLevel level, std::string_view msg, const nlohmann::json& fields) {
          writer(level, msg, fields);
        }),
        max_connections(connection_cap(options, log)),
        client(client_options(options, log)),
        health(
            io,
            HealthOptions{
                .check = [this] { client.transact([](Transaction& t) { t.execute("SELECT 1"); }); },
                .busy = [this] { return http.refusing_work(); },
                .log = log}),
        metrics(client, server_metrics(), kDefaultExactUpTo, options.metrics_topics,
                options.metrics_busiest),
        dashboard(client, DashboardOptions{.log = log}),
        service(client, io,
                with_web(service_options(options, log), health, metrics, dashboard, requests)),
        http(
            io, endpoint,
            [this](HttpRequest&& r, Responder respond) {
              service.handle(std::move(r), std::move(respond));
            },
            with_admission(http_options(options, log, max_connections), service),
            {&io, &second_io}) {
    http.start();
    service.start_move_tasks();
    threads.emplace_back([this] { io.run(); });
    threads.emplace_back([this] { second_io.run(); });
  }

  // What /metrics adds for this server; read at scrape time, when everything is constructed.
  ServerMetrics server_metrics() {
    return {&requests, [this] { return service.counters().polls_held.load(); },
            [this] { return static_cast<std::uint64_t>(http.open_connections()); }};
  }

  void stop() {
    if (stopped.exchange(true)) return;
    // Probes answer 503 from now on. Then no new connections or requests (idle connections
    // close); then the service answers the requests it holds (long polls with what they have)
    // and its workers finish; each connection closes once its answer is written.
    health.stopping();
    std::promise<void> closed;
    http.shutdown([&closed] { closed.set_value(); });
    service.shutdown();
    closed.get_future().wait();
    health.stop();     // its check thread
    dashboard.stop();  // its sampler; no request reaches it once the service has stopped
    metrics.stop();
    keep_running.reset();
    keep_second_running.reset();
    io.stop();
    second_io.stop();
    for (auto& t : threads) t.join();
  }

  const tcp::endpoint endpoint;
  const LogWriter writer;
  const Log log;
  const std::size_t max_connections;  // after RLIMIT_NOFILE; refused before anything starts
  // Two I/O threads, each polling its own io_context, over which HttpServer spreads the
  // connections: a request is read and answered on the thread that polls its socket, without
  // waking the other thread for it, as one io_context run by two threads does (txmq bench
  // --only serve). The first also runs the acceptor, the timers and the service's posts. Each is
  // run by one thread (concurrency hint 1); other threads still post to them safely.
  // second_io is declared first so that it is destroyed last: the handlers still queued on io
  // when it goes (the service's timers, say) may hold connections of second_io, whose strands
  // must outlive them. Nothing queued on second_io holds a connection of io.
  asio::io_context second_io{1};
  asio::io_context io{1};
  // Keeps the io threads running until stop() has seen every connection close: once the
  // acceptor is closed, a moment with no operation pending (a long poll's timer cancelled,
  // its answer not yet posted) would otherwise end io.run() and strand the answer.
  asio::executor_work_guard<asio::io_context::executor_type> keep_running =
      asio::make_work_guard(io);
  asio::executor_work_guard<asio::io_context::executor_type> keep_second_running =
      asio::make_work_guard(second_io);
  Client client;
  Health health;
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

std::size_t Server::max_connections() const { return impl_->max_connections; }

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

  const LogWriter log(options.log_format);
  Server server(options);
  const std::string address = fmt::format("http://{}", server.address());
  const std::string checked =
      options.credentials_file.empty()
          ? "no --credentials: any well-formed signature is accepted, loopback only"
          : fmt::format("signatures checked against {}", options.credentials_file);
  nlohmann::json fields{{"address", address},
                        {"region", options.region},
                        {"account", options.account},
                        {"workers", options.workers},
                        {"max_connections", server.max_connections()},
                        {"credentials", options.credentials_file}};
  if (!options.dsn_source.empty()) fields["dsn_source"] = options.dsn_source;
  // On stdout, as scripts wait for it there; the rest of the log is on stderr.
  log(LogLevel::kInfo,
      fmt::format("listening on {} (region {}, account {}; {}{})", address,
                  Regions::parse(options.region).describe(),
                  options.account, checked,
                  options.dsn_source.empty() ? "" : "; DSN from " + options.dsn_source),
      fields, stdout);
  for (;;) {
    int signal = 0;
    if (sigwait(&signals, &signal) != 0) continue;
    if (signal == SIGHUP) {
      server.reload_credentials();
      continue;
    }
    const char* name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
    log(LogLevel::kInfo, fmt::format("{}: stopping (answering the requests it holds)", name),
        {{"signal", name}});
    break;
  }
  server.stop();
  return 0;
}

}  // namespace txmq::server
