// Child processes for the transactional tests (transactional_test.cc), started and killed by
// them:
//   txmq_test_helper exactly-once TOPIC ACCOUNTS PROCESSED THREADS BATCH
//     consumes TOPIC with Client::process on THREADS threads until it is empty; each handler
//     adds each message's amount (its payload) to the row of ACCOUNTS and inserts a row of
//     PROCESSED naming the message, in the message's transaction. Exit 0 when the topic is empty.
//   txmq_test_helper dedup-send TOPIC KEYS SEED START_MS
//     at START_MS (milliseconds since the epoch, so that racing processes start together) sends
//     one message for each dedup key k0..k{KEYS-1}, in an order and in batches of 1 to 20 drawn
//     from SEED, with payload "seed SEED"; prints "KEY ID" per key.
// The server is TXMQ_DSN's.
#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "txmq/client.h"

namespace {

int exactly_once(const std::string& topic, const std::string& accounts,
                 const std::string& processed, int threads, int batch) {
  txmq::ClientOptions options;
  options.pool_size = threads + 1;
  txmq::Client client(options);
  const std::string add = fmt::format("UPDATE {} SET total = total + ? WHERE id = 1", accounts);
  const std::string record = fmt::format("INSERT INTO {} (msg_id) VALUES (?)", processed);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      txmq::ProcessOptions po;
      po.max_messages = batch;
      po.wait = std::chrono::milliseconds(300);
      try {
        while (client.process(topic, po,
                              [&](txmq::Transaction& tx, std::span<const txmq::Message> messages) {
                                for (const txmq::Message& m : messages) {
                                  std::int64_t amount = 0;
                                  std::from_chars(m.payload.data(),
                                                  m.payload.data() + m.payload.size(), amount);
                                  tx.execute(add, {amount});
                                  tx.execute(record, {m.id});
                                }
                              }) > 0) {
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "exactly-once worker: %s\n", e.what());
        ++failures;
      }
    });
  }
  for (auto& w : workers) w.join();
  return failures == 0 ? 0 : 1;
}

int dedup_send(const std::string& topic, int keys, unsigned seed, std::int64_t start_ms) {
  txmq::Client client(txmq::ClientOptions{});
  std::this_thread::sleep_until(
      std::chrono::system_clock::time_point(std::chrono::milliseconds(start_ms)));
  std::vector<int> order(keys);
  for (int i = 0; i < keys; ++i) order[i] = i;
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> batch_size(1, 20);
  std::size_t at = 0;
  while (at < order.size()) {
    std::size_t n = std::min<std::size_t>(order.size() - at, batch_size(rng));
    std::vector<txmq::OutgoingMessage> batch;
    for (std::size_t i = at; i < at + n; ++i) {
      std::string key = fmt::format("k{}", order[i]);
      batch.push_back({fmt::format("seed {}", seed), std::nullopt, {}, key});
    }
    std::vector<std::uint64_t> ids =
        n == 1 ? std::vector<std::uint64_t>{client.send(
                     topic, batch[0].payload, txmq::SendOptions{{}, {}, batch[0].dedup_key})}
               : client.send_batch(topic, batch);
    for (std::size_t i = 0; i < n; ++i) {
      std::printf("%s %llu\n", batch[i].dedup_key->c_str(),
                  static_cast<unsigned long long>(ids[i]));
    }
    at += n;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 6 && args[0] == "exactly-once") {
      return exactly_once(args[1], args[2], args[3], std::stoi(args[4]), std::stoi(args[5]));
    }
    if (args.size() == 5 && args[0] == "dedup-send") {
      return dedup_send(args[1], std::stoi(args[2]), static_cast<unsigned>(std::stoul(args[3])),
                        std::stoll(args[4]));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "txmq_test_helper: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: see tests/integration/helper_main.cc\n");
  return 2;
}
