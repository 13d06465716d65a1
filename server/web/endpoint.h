#pragma once

// The web endpoints of txmq serve beside the SQS API, in one shape: the probes (/healthz,
// /readyz, health.h), /metrics (metrics.h) and the dashboard (/ and /ui/, dashboard.h). The
// server asks each in turn before the SQS dispatch (server/app/sqs_server.cc).
#include <cstdint>
#include <memory>

#include "server/auth/sigv4.h"
#include "server/http/http.h"

namespace txmq::server {

class WebEndpoint {
 public:
  virtual ~WebEndpoint() = default;

  // Called on an HTTP thread for every request before the SQS dispatch, with the credentials in
  // force (null without --credentials). True when it took the request, which it then answers
  // through `respond`, now or later (work that blocks runs on threads of its own); false for a
  // request that is not its own. Never blocks.
  virtual bool handle(HttpRequest& request, Responder& respond,
                      const std::shared_ptr<const Credentials>& credentials) = 0;
  // Requests it takes from now on get 503; waits for the work it runs.
  virtual void stop() = 0;
};

// The rows per table that the gauges of /metrics and the dashboard's samples count exactly
// (Client::stats); beyond, they estimate.
constexpr std::uint64_t kDefaultExactUpTo = 1'000;

}  // namespace txmq::server
