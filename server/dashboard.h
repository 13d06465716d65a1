#pragma once

// The web dashboard of txmq serve (docs/dashboard.md): a page at `/` and its assets and JSON API
// under `/ui/`, installed as ServiceOptions::web. Topics and groups with their counts, ages and
// rates, charts of the last hour from samples kept in memory, in-flight messages, dead letters
// (requeue, delete) and each topic's settings.
//
// Protection: with --credentials every request needs HTTP Basic auth (user: an access key id of
// the file, password: its secret); without, the server listens on loopback only and the Host
// header must name a loopback host (against DNS rebinding). Changes (POST) also need the header
// X-Txmq-Dashboard: 1, which a cross-site form cannot send, and a same-host Origin when one is
// sent.
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

#include "server/http.h"
#include "server/log.h"
#include "server/sigv4.h"
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

class Dashboard {
 public:
  Dashboard(Client& client, DashboardOptions options);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // ServiceOptions::web: takes `GET /` without a query string and everything under /ui/;
  // returns false for anything else (an SQS call). Never blocks.
  bool handle(HttpRequest& request, Responder& respond,
              const std::shared_ptr<const Credentials>& credentials);
  // Stops the sampler and waits for the requests it runs. Later requests get 503.
  void stop();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

namespace dashboard_internal {
// Exposed for tests and reuse: whether `header` (an Authorization header's value) is Basic auth
// of a key of `credentials` with its secret; the secret is compared in constant time.
bool basic_auth_ok(std::string_view header, const Credentials& credentials);
// Whether a Host header names a loopback host (localhost, 127.x.y.z, [::1]), port ignored.
bool loopback_host(std::string_view host);
// The refusal of a request for `what` ("the txmq dashboard", "/metrics") that may not see it:
// 401 asking for Basic auth when there are credentials and the request does not carry a key of
// them; 403 without credentials when its Host is not a loopback name (DNS rebinding). None when
// it may.
std::optional<HttpResponse> refusal(const HttpRequest& request, const Credentials* credentials,
                                    std::string_view what);
// At most `max_bytes` of `payload` for display: text when it is valid UTF-8 (cut at a
// character boundary), else the first bytes in hex. `kind` is "text" or "hex".
struct Preview {
  std::string kind;
  std::string text;
  bool truncated = false;
};
Preview preview(std::string_view payload, std::size_t max_bytes);
}  // namespace dashboard_internal

}  // namespace txmq::server
