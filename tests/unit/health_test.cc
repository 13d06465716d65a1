// /healthz and /readyz (server/web/health.h) with a fake database check: answers, at most one check
// per fresh_for, the probe's timeout, stopping. No server, no database.
#include "server/web/health.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>

namespace txmq::server {
namespace {

namespace http = boost::beast::http;
using namespace std::chrono_literals;

struct HealthProbes : ::testing::Test {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work =
      boost::asio::make_work_guard(io);
  std::thread io_thread{[this] { io.run(); }};

  ~HealthProbes() override {
    work.reset();
    io.stop();
    io_thread.join();
  }

  // The answer to METHOD TARGET, waited for up to 10 s; nullopt when not taken.
  static std::optional<HttpResponse> probe(Health& health, std::string_view target,
                                           http::verb method = http::verb::get) {
    HttpRequest request{method, std::string(target), 11};
    auto answer = std::make_shared<std::promise<HttpResponse>>();
    std::future<HttpResponse> got = answer->get_future();
    Responder respond = [answer](HttpResponse r) { answer->set_value(std::move(r)); };
    if (!health.handle(request, respond, nullptr)) return std::nullopt;
    if (got.wait_for(10s) != std::future_status::ready) return HttpResponse{.status = 0};
    return got.get();
  }
};

TEST_F(HealthProbes, LivenessAndReadinessWhileTheDatabaseAnswers) {
  std::atomic<int> checks{0};
  Health health(io, HealthOptions{.check = [&] { ++checks; }});
  auto live = probe(health, "/healthz");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200u);
  EXPECT_EQ(live->body, "ok\n");
  EXPECT_EQ(checks, 0);  // liveness does not ask the database
  auto ready = probe(health, "/readyz?verbose");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200u);
  EXPECT_EQ(ready->body, "ok\n");
  auto head = probe(health, "/readyz", http::verb::head);
  EXPECT_EQ(head->status, 200u);
  EXPECT_EQ(head->body, "");
  EXPECT_FALSE(probe(health, "/readyz", http::verb::post));
  EXPECT_FALSE(probe(health, "/"));
  EXPECT_FALSE(probe(health, "/healthzz"));
}

TEST_F(HealthProbes, AtMostOneCheckPerFreshFor) {
  std::atomic<int> checks{0};
  Health health(io, HealthOptions{.check = [&] { ++checks; }, .fresh_for = 300ms});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(probe(health, "/readyz")->status, 200u);
  EXPECT_EQ(checks, 1);
  std::this_thread::sleep_for(350ms);
  EXPECT_EQ(probe(health, "/readyz")->status, 200u);
  EXPECT_EQ(checks, 2);
}

TEST_F(HealthProbes, UnreachableGives503AndTheReasonOnlyToTheLog) {
  std::atomic<bool> down{true};
  std::vector<std::string> lines;
  std::mutex lines_mutex;
  Health health(io, HealthOptions{.check =
                                      [&] {
                                        if (down) throw std::runtime_error("cannot connect\nto x");
                                      },
                                  .fresh_for = 1ms,
                                  .log =
                                      [&](LogLevel, std::string_view msg, const nlohmann::json&) {
                                        std::lock_guard lock(lines_mutex);
                                        lines.emplace_back(msg);
                                      }});
  auto r = probe(health, "/readyz");
  EXPECT_EQ(r->status, 503u);
  // The probe learns nothing of the database (user, host, schema): the log has the reason.
  EXPECT_EQ(r->body, "database unreachable (the server's log says why)\n");
  EXPECT_EQ(probe(health, "/healthz")->status, 200u);
  down = false;
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(probe(health, "/readyz")->status, 200u);
  std::lock_guard lock(lines_mutex);
  ASSERT_EQ(lines.size(), 2u);
  // As the check threw it: the log writer makes it one line (server/base/log.h).
  EXPECT_EQ(lines[0], "not ready: database unreachable: cannot connect\nto x");
  EXPECT_EQ(lines[1], "ready: the database answers again");
}

TEST_F(HealthProbes, ASlowCheckTimesTheProbeOut) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Health health(io, HealthOptions{.check = [released] { released.wait(); }, .timeout = 100ms});
  const auto start = std::chrono::steady_clock::now();
  auto r = probe(health, "/readyz");
  EXPECT_EQ(r->status, 503u);
  EXPECT_EQ(r->body, "database did not answer within 0.1 s\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  release.set_value();
}

TEST_F(HealthProbes, StoppingAnswers503AlsoToWaitingProbes) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Health health(io, HealthOptions{.check = [released] { released.wait(); }, .timeout = 10s});
  HttpRequest request{http::verb::get, "/readyz", 11};
  std::promise<HttpResponse> answer;
  Responder respond = [&answer](HttpResponse r) { answer.set_value(std::move(r)); };
  ASSERT_TRUE(health.handle(request, respond, nullptr));
  std::this_thread::sleep_for(50ms);
  health.stopping();
  auto waiting = answer.get_future();
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  const HttpResponse r = waiting.get();
  EXPECT_EQ(r.status, 503u);
  EXPECT_EQ(r.body, "stopping\n");
  EXPECT_EQ(probe(health, "/healthz")->status, 503u);
  EXPECT_EQ(probe(health, "/healthz")->body, "stopping\n");
  EXPECT_EQ(probe(health, "/readyz")->body, "stopping\n");
  release.set_value();
  health.stop();
}

}  // namespace
}  // namespace txmq::server
