#include "server/web/health.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

namespace txmq::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using SteadyClock = std::chrono::steady_clock;

namespace {

// A failed check's body; the reason goes to the log.
constexpr std::string_view kUnreachable = "database unreachable (the server's log says why)";

HttpResponse text(unsigned status, std::string body, bool head) {
  HttpResponse r = plain_text(status, std::move(body));
  r.headers.emplace_back("Cache-Control", "no-store");
  if (head) r.body.clear();
  return r;
}

// A probe waiting for a check: answered once, by the check's end or by its timeout.
struct Waiter {
  Responder respond;
  bool head = false;
  std::once_flag answered;

  void answer(unsigned status, const std::string& body) {
    std::call_once(answered, [&] { respond(text(status, body, head)); });
  }
};

}  // namespace

struct Health::State : std::enable_shared_from_this<Health::State> {
  State(asio::io_context& io_, HealthOptions o) : io(io_), options(std::move(o)) {}

  asio::io_context& io;
  const HealthOptions options;

  std::mutex mutex;  // guards what follows
  std::condition_variable wake;
  bool stopping = false;
  bool check_wanted = false;
  bool checking = false;
  std::optional<SteadyClock::time_point> checked_at;  // when the last check ended
  std::string failure;                                // its reason; empty: the database answered
  std::vector<std::shared_ptr<Waiter>> waiters;
  std::thread thread;

  void log(LogLevel level, std::string_view msg, const nlohmann::json& fields) const {
    if (options.log) options.log(level, msg, fields);
  }

  void ready(std::shared_ptr<Waiter> waiter) {
    std::unique_lock lock(mutex);
    if (stopping) {
      lock.unlock();
      return waiter->answer(503, "stopping");
    }
    if (options.busy) {
      if (std::string busy = options.busy(); !busy.empty()) {
        lock.unlock();
        return waiter->answer(503, "busy: " + busy);
      }
    }
    if (checked_at && SteadyClock::now() - *checked_at < options.fresh_for) {
      const bool failing = !failure.empty();
      lock.unlock();
      return failing ? waiter->answer(503, std::string(kUnreachable)) : waiter->answer(200, "ok");
    }
    waiters.push_back(waiter);
    if (!checking) {
      check_wanted = true;
      wake.notify_one();
    }
    lock.unlock();
    auto timer = std::make_shared<asio::steady_timer>(io, options.timeout);
    const auto seconds = std::chrono::duration<double>(options.timeout).count();
    timer->async_wait([timer, waiter, seconds](const boost::system::error_code&) {
      waiter->answer(503, fmt::format("database did not answer within {:g} s", seconds));
    });
  }

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [this] { return stopping || check_wanted; });
      if (stopping) return;
      check_wanted = false;
      checking = true;
      lock.unlock();
      std::string reason;
      try {
        options.check();
      } catch (const std::exception& e) {
        // For the log only: the error names the database's user, host or socket and schema,
        // which an unauthenticated probe must not learn.
        reason = fmt::format("database unreachable: {}", e.what());
      }
      lock.lock();
      checking = false;
      checked_at = SteadyClock::now();
      const bool changed = reason != failure;
      const bool was_failing = !failure.empty();
      failure = reason;
      std::vector<std::shared_ptr<Waiter>> answered = std::move(waiters);
      waiters.clear();
      lock.unlock();
      if (changed && !reason.empty()) {
        log(LogLevel::kWarning, fmt::format("not ready: {}", reason), {{"error", reason}});
      } else if (changed && was_failing) {
        log(LogLevel::kInfo, "ready: the database answers again", nullptr);
      }
      for (const auto& w : answered) {
        reason.empty() ? w->answer(200, "ok") : w->answer(503, std::string(kUnreachable));
      }
      lock.lock();
    }
  }
};

Health::Health(asio::io_context& io, HealthOptions options)
    : state_(std::make_shared<State>(io, std::move(options))) {
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

Health::~Health() { stop(); }

bool Health::handle(HttpRequest& request, Responder& respond,
                    const std::shared_ptr<const Credentials>&) {
  const bool head = request.method() == http::verb::head;
  if (!head && request.method() != http::verb::get) return false;
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/healthz") {
    bool stopping = false;
    {
      std::lock_guard lock(state_->mutex);
      stopping = state_->stopping;
    }
    respond(stopping ? text(503, "stopping", head) : text(200, "ok", head));
    return true;
  }
  if (path == "/readyz") {
    auto waiter = std::make_shared<Waiter>();
    waiter->respond = std::move(respond);
    waiter->head = head;
    state_->ready(std::move(waiter));
    return true;
  }
  return false;
}

void Health::stopping() {
  std::vector<std::shared_ptr<Waiter>> waiting;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    waiting = std::move(state_->waiters);
    state_->waiters.clear();
  }
  state_->wake.notify_all();
  for (const auto& w : waiting) w->answer(503, "stopping");
}

void Health::stop() {
  stopping();
  if (state_->thread.joinable()) state_->thread.join();
}

}  // namespace txmq::server
