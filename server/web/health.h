#pragma once

// txmq serve's probes, for systemd, Kubernetes and load balancers (docs/operations.md):
//   GET /healthz  liveness: 200 "ok" while the server runs its event loop; 503 "stopping" once
//                 it stops.
//   GET /readyz   readiness: 200 "ok" when the database answered a trivial query within the last
//                 second; else 503 with a one-line reason ("database unreachable (the
//                 server's log says why)", "database did not answer within 2 s", "stopping",
//                 "busy: ..." when the server refused requests for want of room within the last
//                 2 s): never the database's error, which names its user, host and schema.
// HEAD works as GET (without the body). Neither needs credentials: they reveal nothing, and a
// probe cannot sign. A WebEndpoint.
//
// The query runs on a thread of its own, never on the HTTP threads, and at most once per
// `fresh_for`, however many probes come: a probe within `fresh_for` of the last check gets its
// result; a later one starts a new check and waits for it, at most `timeout`.
#include <chrono>
#include <functional>
#include <memory>

#include <boost/asio/io_context.hpp>

#include "server/base/log.h"
#include "server/http/http.h"
#include "server/web/endpoint.h"

namespace txmq::server {

struct HealthOptions {
  // The trivial query: returns when the database answered, throws (what(): the reason, never a
  // secret) when it did not. Runs on the health thread only, one call at a time.
  std::function<void()> check;
  // How long a check's result answers probes. 1 s: a probe every second per load balancer costs
  // the database one `SELECT 1` a second in all.
  std::chrono::milliseconds fresh_for{1000};
  // How long a probe waits for a check before it gets 503: a probe's own timeout is typically
  // 1 to 5 s, and a database that takes over 2 s for SELECT 1 is not ready for traffic.
  std::chrono::milliseconds timeout{2000};
  // Why the server refuses work for want of room now (HttpServer::refusing_work); empty when
  // it does not. Called on an HTTP thread: quick. Empty function: never busy.
  std::function<std::string()> busy;
  // Changes of readiness (unreachable, reachable again), one line each.
  Log log;
};

// Thread-safe; handle() never blocks.
class Health final : public WebEndpoint {
 public:
  // `io` runs the probes' timeouts; it must outlive the Health.
  Health(boost::asio::io_context& io, HealthOptions options);
  ~Health();
  Health(const Health&) = delete;
  Health& operator=(const Health&) = delete;

  // Takes GET and HEAD of /healthz and /readyz (a query string is ignored) and answers them, now
  // or when the check ends; false for any other request. Credentials are not asked for.
  bool handle(HttpRequest& request, Responder& respond,
              const std::shared_ptr<const Credentials>& credentials) override;
  // From now on both probes answer 503 "stopping", also those waiting for a check.
  void stopping();
  // stopping(), then waits for a check in progress to end.
  void stop() override;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace txmq::server
