// A consumer that applies payments to account balances exactly once: the balance update and the
// acknowledgement of the payment message commit in one transaction (Client::process). Killed at
// any moment, restarted any number of times, it never applies a payment twice or loses one.
//
//   apply_payments --send N       send N payments of 1..100 cents to accounts 1..10
//   apply_payments                apply payments until none has arrived for 2 seconds
//
// The server: TXMQ_DSN.
#include <txmq/client.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

// A payment message is "ACCOUNT CENTS".
struct Payment {
  std::int64_t account = 0;
  std::int64_t cents = 0;
};

Payment parse(const std::string& payload) {
  Payment p;
  const char* end = payload.data() + payload.size();
  auto [mid, e1] = std::from_chars(payload.data(), end, p.account);
  if (e1 != std::errc() || mid == end) throw std::invalid_argument("malformed payment: " + payload);
  auto [last, e2] = std::from_chars(mid + 1, end, p.cents);
  if (e2 != std::errc() || last != end)
    throw std::invalid_argument("malformed payment: " + payload);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    txmq::Client client(txmq::ClientOptions{});
    client.create_topic("payments");
    client.transact([](txmq::Transaction& tx) {
      tx.execute(
          "CREATE TABLE IF NOT EXISTS accounts (id BIGINT PRIMARY KEY, balance_cents BIGINT NOT "
          "NULL DEFAULT 0) ENGINE=InnoDB");
    });

    if (argc == 3 && std::strcmp(argv[1], "--send") == 0) {
      std::mt19937 rng(std::random_device{}());
      std::vector<txmq::OutgoingMessage> batch;
      for (int i = 0, n = std::atoi(argv[2]); i < n; ++i) {
        txmq::OutgoingMessage m;
        m.payload = std::to_string(1 + rng() % 10) + " " + std::to_string(1 + rng() % 100);
        batch.push_back(std::move(m));
      }
      client.send_batch("payments", batch);  // all or nothing
      std::printf("sent %zu payments\n", batch.size());
      return 0;
    }

    std::size_t applied = 0;
    txmq::ProcessOptions options;
    options.max_messages = 100;
    options.wait = std::chrono::seconds(2);
    // Each call: claim up to 100 payments, apply them, acknowledge them, commit. A handler that
    // throws (a malformed payment) rolls back its batch; after the topic's max attempts the
    // payment goes to the dead-letter table, where `txmq dead list payments` shows it.
    for (;;) {
      std::size_t n = 0;
      try {
        n = client.process("payments", options,
                           [](txmq::Transaction& tx, std::span<const txmq::Message> payments) {
                             for (const txmq::Message& m : payments) {
                               Payment p = parse(m.payload);
                               tx.execute(
                                   "INSERT INTO accounts (id, balance_cents) VALUES (?, ?) "
                                   "ON DUPLICATE KEY UPDATE balance_cents = balance_cents + ?",
                                   {p.account, p.cents, p.cents});
                             }
                           });
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "apply_payments: %s (will be retried, then dead-lettered)\n",
                     e.what());
        continue;
      }
      if (n == 0) break;
      applied += n;
    }
    std::printf("applied %zu payments\n", applied);
  } catch (const txmq::Error& e) {
    std::fprintf(stderr, "apply_payments: %s (%s)\n", e.what(),
                 std::string(txmq::errc_name(e.code())).c_str());
    return 1;
  }
  return 0;
}
