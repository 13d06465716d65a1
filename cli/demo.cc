// txmq demo: the guided tour on the embedded default.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "cli.h"
#include "txmq/local.h"

namespace txmq::cli {
namespace {

struct DemoArgs {
  std::string topic = "demo";
  int messages = 10000;
  int consumers = 4;
  int batch = 100;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void draw_progress(std::int64_t done, std::int64_t total) {
  constexpr int kWidth = 40;
  int filled = total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
  std::fprintf(stderr, "\r  draining [%s%s] %lld/%lld", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done),
               static_cast<long long>(total));
  std::fflush(stderr);
}

int run_demo(const Globals& g, const DemoArgs& a) {
  if (a.messages < 1 || a.consumers < 1 || a.batch < 1 || a.batch > 10000) {
    throw Error(Errc::kInvalidArgument, "--messages, --consumers and --batch must be positive");
  }
  std::string dsn = resolve_dsn(g);
  if (g.dsn.empty() && std::getenv("TXMQ_DSN") == nullptr) {
    std::printf("Using the embedded MariaDB server in %s\n", LocalServer::resolve_home({}).c_str());
  }
  ClientOptions options;
  options.dsn = dsn;
  options.consumer_name = "demo-producer";
  Client producer(options);

  try {
    producer.drop_topic(a.topic);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;
  }
  producer.create_topic(a.topic);
  std::printf("1. Created topic '%s' (lease 30 s, 5 attempts, 1 MiB payloads)\n", a.topic.c_str());

  std::vector<OutgoingMessage> batch;
  batch.reserve(a.messages);
  for (int i = 0; i < a.messages; ++i) {
    batch.emplace_back().payload =
        fmt::format("{{\"order\":{},\"amount_cents\":{}}}", i + 1, (i * 37) % 10000);
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> ids = producer.send_batch(a.topic, batch);
  double send_seconds = seconds_since(start);
  std::printf("2. Sent %zu messages in ONE transaction in %.0f ms (%.0f msgs/s), ids %llu..%llu\n",
              ids.size(), send_seconds * 1000, ids.size() / send_seconds,
              static_cast<unsigned long long>(ids.front()),
              static_cast<unsigned long long>(ids.back()));

  std::printf("3. Draining with %d concurrent consumers (receive up to %d, ack in batches)\n",
              a.consumers, a.batch);
  std::mutex seen_mutex;
  std::unordered_map<std::uint64_t, int> seen;
  std::atomic<std::int64_t> consumed{0};
  std::atomic<int> finished{0};
  std::vector<std::int64_t> per_consumer(a.consumers, 0);
  std::exception_ptr failure;
  start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < a.consumers; ++c) {
    threads.emplace_back([&, c] {
      try {
        ClientOptions co;
        co.dsn = dsn;
        co.pool_size = 2;
        co.consumer_name = fmt::format("demo-consumer-{}", c + 1);
        Client consumer(co);
        for (;;) {
          ReceiveOptions ro;
          ro.max_messages = a.batch;
          auto messages = consumer.receive(a.topic, ro);
          if (messages.empty()) break;
          std::vector<std::string> receipts;
          {
            std::lock_guard lock(seen_mutex);
            for (const Message& m : messages) {
              seen[m.id]++;
              receipts.push_back(m.receipt);
            }
          }
          for (Settle s : consumer.ack(a.topic, receipts)) {
            if (s != Settle::kOk) throw Error(Errc::kInternal, "an ack was refused");
          }
          per_consumer[c] += static_cast<std::int64_t>(messages.size());
          consumed += static_cast<std::int64_t>(messages.size());
        }
      } catch (...) {
        std::lock_guard lock(seen_mutex);
        if (!failure) failure = std::current_exception();
      }
      finished++;
    });
  }
  const bool tty = stderr_is_terminal();
  while (finished.load() < a.consumers) {
    if (tty) draw_progress(consumed.load(), a.messages);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& t : threads) t.join();
  if (tty) {
    draw_progress(consumed.load(), a.messages);
    std::fprintf(stderr, "\n");
  }
  if (failure) std::rethrow_exception(failure);
  double drain_seconds = seconds_since(start);

  std::size_t duplicates = 0;
  for (auto& [id, n] : seen) duplicates += static_cast<std::size_t>(n - 1);
  std::printf("   %-18s %10s\n", "consumer", "messages");
  for (int c = 0; c < a.consumers; ++c) {
    std::printf("   demo-consumer-%-3d %10lld\n", c + 1, static_cast<long long>(per_consumer[c]));
  }
  std::printf("   Consumed %lld messages (%zu distinct, %zu duplicates) in %.2f s: %.0f msgs/s\n",
              static_cast<long long>(consumed.load()), seen.size(), duplicates, drain_seconds,
              consumed.load() / drain_seconds);
  TopicStats s = producer.stats(a.topic);
  std::printf("4. Topic now: ready %llu, in flight %llu, delayed %llu, dead %llu\n",
              static_cast<unsigned long long>(s.ready),
              static_cast<unsigned long long>(s.in_flight),
              static_cast<unsigned long long>(s.delayed), static_cast<unsigned long long>(s.dead));
  bool ok = seen.size() == ids.size() && duplicates == 0 && s.ready == 0 && s.in_flight == 0;
  std::printf("%s: %zu sent, %zu consumed\n", ok ? "OK" : "FAILED", ids.size(), seen.size());
  return ok ? kExitOk : kExitDatabase;
}

}  // namespace

void add_demo_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* demo = app.add_subcommand(
      "demo", "create a topic, send 10,000 messages in one transaction, drain with 4 consumers");
  demo->add_option("--topic", a->topic, "topic to (re)create (demo)");
  demo->add_option("--messages", a->messages, "batch size (10000)");
  demo->add_option("--consumers", a->consumers, "concurrent consumers (4)");
  demo->add_option("--batch", a->batch, "messages per receive (100)");
  demo->callback([&g, a] { g.exit_code = run_demo(g, *a); });
}

}  // namespace txmq::cli
