#include "queues.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "db/connection.h"
#include "harness.h"
#include "serve_load.h"
#include "server/app/sqs_server.h"
#include "server/web/metrics.h"

namespace txmq::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

// GET `target` from txmq serve on the loopback; the body (throws for anything but 200).
std::string http_get(std::uint16_t port, const std::string& target) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> request(http::verb::get, target, 11);
  request.set(http::field::host, fmt::format("127.0.0.1:{}", port));
  http::write(stream, request);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  http::read(stream, buffer, parser);
  if (parser.get().result_int() != 200) {
    throw std::runtime_error(fmt::format("GET {}: HTTP {}", target, parser.get().result_int()));
  }
  return parser.release().body();
}

// The files and bytes (allocated on disk) of the database's folder, when it is on this machine.
struct DiskUse {
  bool known = false;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
};

DiskUse disk_use(const std::string& dsn) {
  internal::Connection c(internal::parse_dsn(dsn));
  const internal::Result r = c.execute("SELECT @@datadir, DATABASE()", {});
  const std::filesystem::path folder =
      std::filesystem::path(r.rows.at(0).bytes(0)) / r.rows.at(0).bytes(1);
  DiskUse use;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    if (!entry.is_regular_file()) continue;
    ++use.files;
    use.bytes += entry.file_size();
  }
  use.known = !error;
  return use;
}

std::uint64_t questions(const std::string& dsn) {
  internal::Connection c(internal::parse_dsn(dsn));
  const internal::Result r = c.execute("SHOW GLOBAL STATUS LIKE 'Questions'", {});
  return std::stoull(r.rows.at(0).bytes(1));
}

// `calls` SendMessage, then as many ReceiveMessage + DeleteMessage, one at a time.
std::pair<Measured, Measured> one_queue_calls(SqsHttpClient& sqs, const std::string& url,
                                              int calls) {
  Measured sent;
  Measured received;
  const auto start = SteadyClock::now();
  for (int i = 0; i < calls; ++i) {
    const auto at = SteadyClock::now();
    sqs.call("SendMessage", {{"QueueUrl", url}, {"MessageBody", fmt::format("message {}", i)}});
    sent.latencies.add_since(at);
  }
  sent.messages = static_cast<std::uint64_t>(calls);
  sent.seconds = seconds_between(start, SteadyClock::now());
  const auto drain_start = SteadyClock::now();
  for (int i = 0; i < calls; ++i) {
    const auto at = SteadyClock::now();
    const json got = sqs.call("ReceiveMessage", {{"QueueUrl", url}, {"MaxNumberOfMessages", 1}});
    if (!got.contains("Messages") || got["Messages"].empty()) break;
    sqs.call("DeleteMessage",
             {{"QueueUrl", url}, {"ReceiptHandle", got["Messages"][0]["ReceiptHandle"]}});
    received.latencies.add_since(at);
    ++received.messages;
  }
  received.seconds = seconds_between(drain_start, SteadyClock::now());
  return {std::move(sent), std::move(received)};
}

// Three GETs of /metrics: a row with their p50 and p99 and the size of the last.
Row scrape_row(std::uint16_t port, const std::string& id, const std::string& name,
               const std::string& note) {
  Latencies scrapes;
  std::size_t bytes = 0;
  for (int i = 0; i < 3; ++i) {
    const auto at = SteadyClock::now();
    bytes = http_get(port, "/metrics").size();
    scrapes.add_since(at);
  }
  Row r = row(id, name);
  r.p50_ms = scrapes.percentile(50);
  r.p99_ms = scrapes.percentile(99);
  r.note = fmt::format("{:.2f} MB a scrape{}", static_cast<double>(bytes) / 1e6, note);
  return r;
}

}  // namespace

void queues_section(Report& report, const QueuesOptions& options) {
  report.section(fmt::format("txmq serve with {} queues{}: CreateQueue, disk, /metrics, dashboard, "
                             "calls on one queue against one queue alone",
                             with_commas(options.queues),
                             options.shared_storage ? " in shared storage" : ""));
  server::ServeOptions so;
  so.dsn = options.dsn;
  so.listen = "127.0.0.1:0";
  so.tables_at_first_use = !options.shared_storage;
  so.shared_storage = options.shared_storage;
  server::Server srv(so);
  SqsHttpClient sqs(srv.port());
  const std::string prefix = "txmq-bench-queues-";
  const std::string one_url =
      sqs.call("CreateQueue", {{"QueueName", prefix + "one"}})["QueueUrl"];
  // Not measured: the queue's first use (which makes its tables) and warm caches.
  one_queue_calls(sqs, one_url, std::max(options.calls / 10, 10));
  auto [sent_alone, received_alone] = one_queue_calls(sqs, one_url, options.calls);

  const DiskUse before = disk_use(options.dsn);
  Measured created;
  std::vector<std::string> urls;
  urls.reserve(static_cast<std::size_t>(options.queues));
  const auto start = SteadyClock::now();
  for (int i = 0; i < options.queues; ++i) {
    const auto at = SteadyClock::now();
    urls.push_back(
        sqs.call("CreateQueue", {{"QueueName", fmt::format("{}{:05}", prefix, i)}})["QueueUrl"]);
    created.latencies.add_since(at);
  }
  created.messages = static_cast<std::uint64_t>(options.queues);
  created.seconds = seconds_between(start, SteadyClock::now());
  const DiskUse after = disk_use(options.dsn);
  report.add(row("queues.create", "CreateQueue, one client (queues/s)"), std::move(created));

  Row disk = row("queues.disk", "disk per empty queue");
  if (before.known && after.known) {
    const double n = options.queues;
    disk.note = fmt::format("{:.1f} KiB and {:.2f} files per queue ({} files, {:.1f} MiB for {})",
                            static_cast<double>(after.bytes - before.bytes) / 1024.0 / n,
                            static_cast<double>(after.files - before.files) / n,
                            with_commas(static_cast<double>(after.files - before.files)),
                            static_cast<double>(after.bytes - before.bytes) / 1048576.0,
                            with_commas(n));
  } else {
    disk.note = "not measured: the database's folder is not on this machine";
  }
  report.add_row(std::move(disk));

  // Three scrapes: the first after the queues were made, the median reported.
  report.add_row(scrape_row(srv.port(), "queues.metrics", "GET /metrics (p50 of 3 scrapes)", ""));

  // The dashboard samples every topic while it is viewed: statements/s on the database while a
  // browser polls its overview once a second.
  constexpr int kViewSeconds = 4;
  http_get(srv.port(), "/ui/api/overview");
  const std::uint64_t q0 = questions(options.dsn);
  const auto view_start = SteadyClock::now();
  for (int s = 0; s < kViewSeconds; ++s) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    http_get(srv.port(), "/ui/api/overview");
  }
  const double view_seconds = seconds_between(view_start, SteadyClock::now());
  Row view = row("queues.dashboard", "dashboard viewed (statements/s on the database)");
  view.rate = static_cast<double>(questions(options.dsn) - q0) / view_seconds;
  view.seconds = view_seconds;
  view.note = "the overview polled once a second; SHOW GLOBAL STATUS Questions";
  report.add_row(std::move(view));

  // Used queues: a SendMessage each (the first use makes a queue's tables), then a
  // ReceiveMessage and DeleteMessage; then scrapes at the defaults (series for the 100 busiest,
  // the rest summed) and with a series for every queue.
  const int used = std::min(options.used, options.queues);
  Measured first_sends;
  const auto use_start = SteadyClock::now();
  for (int i = 0; i < used; ++i) {
    const std::string& url = urls[static_cast<std::size_t>(i)];
    const auto at = SteadyClock::now();
    sqs.call("SendMessage", {{"QueueUrl", url}, {"MessageBody", "first"}});
    first_sends.latencies.add_since(at);
    const json got = sqs.call("ReceiveMessage", {{"QueueUrl", url}, {"MaxNumberOfMessages", 1}});
    if (got.contains("Messages") && !got["Messages"].empty()) {
      sqs.call("DeleteMessage",
               {{"QueueUrl", url}, {"ReceiptHandle", got["Messages"][0]["ReceiptHandle"]}});
    }
  }
  first_sends.messages = static_cast<std::uint64_t>(used);
  first_sends.seconds = seconds_between(use_start, SteadyClock::now());
  report.add(row("queues.first_use", options.shared_storage
                                         ? "SendMessage to a queue's first use (shared storage)"
                                         : "SendMessage to a queue's first use (makes its tables)"),
             std::move(first_sends));
  {
    const DiskUse used_after = disk_use(options.dsn);
    Row disk_used = row("queues.disk.used", "disk per used queue (over an empty one)");
    if (after.known && used_after.known && used > 0) {
      const double n = used;
      disk_used.note = fmt::format(
          "{:.1f} KiB and {:.2f} files per queue, a message sent, received and deleted each",
          static_cast<double>(used_after.bytes - after.bytes) / 1024.0 / n,
          static_cast<double>(used_after.files - after.files) / n);
    } else {
      disk_used.note = "not measured: the database's folder is not on this machine";
    }
    report.add_row(std::move(disk_used));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the sends' totals flushed
  report.add_row(scrape_row(srv.port(), "queues.metrics.used",
                            fmt::format("GET /metrics, {} used queues, defaults (p50 of 3)",
                                        with_commas(used)),
                            ": 100 queues' series, all in topic=\"_all\""));
  // Not in shared storage: there every queue counts as used (it has no tables to tell an
  // unused one by), and a series for each of 100,000 is a render of minutes and about 0.8 GB.
  if (!options.shared_storage) {
    ClientOptions co;
    co.dsn = options.dsn;
    co.record_metrics = false;
    Client reader(co);
    const auto at = SteadyClock::now();
    const std::size_t bytes =
        server::render_metrics(reader, server::kDefaultExactUpTo, nullptr,
                               server::MetricsSelection{.busiest = SIZE_MAX})
            .size();
    Row every = row("queues.metrics.used.all",
                    fmt::format("the same exposition with a series for every queue (1 scrape)"));
    every.p50_ms = seconds_between(at, SteadyClock::now()) * 1000;
    every.note = fmt::format("{:.2f} MB (what /metrics gave before --metrics-busiest)",
                             static_cast<double>(bytes) / 1e6);
    report.add_row(std::move(every));
  }

  auto [sent_many, received_many] = one_queue_calls(sqs, one_url, options.calls);
  report.add(row("queues.send.one", "SendMessage, one queue alone"), std::move(sent_alone));
  Row send_many = row("queues.send.many",
                           fmt::format("SendMessage, one queue of {}", with_commas(options.queues)),
                           "queues.send.one");
  send_many.latency_ratio = true;
  report.add(std::move(send_many), std::move(sent_many));
  report.add(row("queues.receive.one", "ReceiveMessage + DeleteMessage, one queue alone"),
             std::move(received_alone));
  Row receive_many = row(
      "queues.receive.many",
      fmt::format("ReceiveMessage + DeleteMessage, one queue of {}", with_commas(options.queues)),
      "queues.receive.one");
  receive_many.latency_ratio = true;
  report.add(std::move(receive_many), std::move(received_many));

  // DeleteQueue timed one at a time on unused queues (the last made) and on used ones (the
  // first), then the rest deleted from 4 clients, untimed.
  Measured deleted;
  Measured deleted_used;
  const std::size_t timed = std::min<std::size_t>(static_cast<std::size_t>(options.deletes_timed),
                                                  urls.size() - static_cast<std::size_t>(used));
  const std::size_t timed_used =
      std::min<std::size_t>(static_cast<std::size_t>(options.deletes_timed / 4),
                            static_cast<std::size_t>(used));
  auto time_deletes = [&](Measured& m, std::size_t from, std::size_t count) {
    const auto begin = SteadyClock::now();
    for (std::size_t i = from; i < from + count; ++i) {
      const auto at = SteadyClock::now();
      sqs.call("DeleteQueue", {{"QueueUrl", urls[i]}});
      m.latencies.add_since(at);
      urls[i].clear();
    }
    m.messages = count;
    m.seconds = seconds_between(begin, SteadyClock::now());
  };
  time_deletes(deleted, urls.size() - timed, timed);
  time_deletes(deleted_used, 0, timed_used);
  sqs.call("DeleteQueue", {{"QueueUrl", one_url}});
  report.add(row("queues.delete", "DeleteQueue of an unused queue, one client (queues/s)"),
             std::move(deleted));
  report.add(row("queues.delete.used", "DeleteQueue of a used queue, one client (queues/s)"),
             std::move(deleted_used));
  {
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> deleters;
    for (int t = 0; t < 4; ++t) {
      deleters.emplace_back([&] {
        SqsHttpClient mine(srv.port());
        for (std::size_t i = next++; i < urls.size(); i = next++) {
          if (!urls[i].empty()) mine.call("DeleteQueue", {{"QueueUrl", urls[i]}});
        }
      });
    }
    for (std::thread& t : deleters) t.join();
  }
  srv.stop();
}

}  // namespace txmq::bench
