#pragma once

// The web dashboard of txmq serve (docs/dashboard.md): a page at `/` and its assets and JSON API
// under `/ui/`, a WebEndpoint. Topics and groups with their counts, ages and
// rates, charts of the last hour from samples kept in memory, in-flight messages, dead letters
// (requeue, delete) and each topic's settings.
//
// Protection (server/auth/web_guard.h): with --credentials every request needs HTTP Basic auth
// (user: an access key id of the file, password: its secret); without, the server listens on
// loopback only and the Host header must name a loopback host (against DNS rebinding). Changes
// (POST) also need the header X-Txmq-Dashboard: 1, which a cross-site form cannot send, and a
// same-host Origin when one is sent.
//
// Library calls block, so they run on the dashboard's own two threads, never on the HTTP ones.
// A sampler thread records every group's counts every 10 s (360 points: one hour), only while
// someone has looked at the dashboard in the last 5 minutes: stats read tables, and an idle
// server should not pay for that.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/base/log.h"
#include "server/http/http.h"
#include "server/web/endpoint.h"
#include "txmq/client.h"

namespace txmq::server {

// A file of server/dashboard/, embedded at build time (server/dashboard/embed.cmake).
struct DashboardAsset {
  std::string_view path;  // "/", "/ui/app.js", ...
  std::string_view content_type;
  std::string_view body;
};
extern const DashboardAsset kDashboardAssets[];
extern const std::size_t kDashboardAssetCount;

struct DashboardOptions {
  Log log;  // one line per failure or change of dead letters (never a secret)
  std::chrono::milliseconds sample_every{10'000};
  std::size_t points = 360;  // samples kept per group: an hour at 10 s
  // Sampling stops when no page or API request came for this long.
  std::chrono::milliseconds idle_after{5 * 60'000};
};

class Dashboard final : public WebEndpoint {
 public:
  Dashboard(Client& client, DashboardOptions options);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Takes `GET /` without a query string and everything under /ui/; returns false for anything
  // else (an SQS call). Never blocks.
  bool handle(HttpRequest& request, Responder& respond,
              const std::shared_ptr<const Credentials>& credentials) override;
  // Stops the sampler and waits for the requests it runs. Later requests get 503.
  void stop() override;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

namespace dashboard_internal {
// Exposed for tests: at most `max_bytes` of `payload` for display: text when it is valid UTF-8
// (cut at a character boundary), else the first bytes in hex. `kind` is "text" or "hex".
struct Preview {
  std::string kind;
  std::string text;
  bool truncated = false;
};
// `cut`: payload is the first bytes of a longer one (it may end inside a character).
Preview preview(std::string_view payload, std::size_t max_bytes, bool cut = false);
}  // namespace dashboard_internal

}  // namespace txmq::server
