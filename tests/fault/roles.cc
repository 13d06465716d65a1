// The children of the fault suite. Each writes its history (fault.h) and runs until SIGTERM;
// none exits on a database error: it logs it, waits a little and goes on.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "fault.h"
#include "txmq/client.h"
#include "txmq/worker.h"

namespace txmq::fault {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};

void on_term(int) { g_stop.store(true); }

void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string_view settle_name(Settle s) {
  switch (s) {
    case Settle::kOk:
      return "ok";
    case Settle::kLeaseLost:
      return "lease_lost";
    case Settle::kNotFound:
      return "not_found";
  }
  return "?";
}

// An error as a history line's tail: its class, the server's error number and its text (on one
// line), so that the checker sees what reached the user.
std::string error_text(const Error& e) {
  std::string text = fmt::format("{} {} {}", errc_name(e.code()), e.server_errno(), e.what());
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// Connects as TXMQ_DSN says, retrying while the server is away (it may be restarting).
std::unique_ptr<Client> connect(History& history, const std::string& name, int pool_size) {
  for (;;) {
    try {
      ClientOptions options;
      options.dsn = std::getenv("TXMQ_DSN");
      options.consumer_name = name;
      options.pool_size = pool_size;
      options.on_warning = [&history](std::string_view text) { history.line("W {}", text); };
      return std::make_unique<Client>(std::move(options));
    } catch (const Error& e) {
      history.line("E connect {}", error_text(e));
      if (!e.retryable()) throw;
      std::this_thread::sleep_for(200ms);
    }
  }
}

// What every child does first: SIGTERM stops it, its history opens, it connects.
struct Role {
  Role(const RoleArgs& args, std::string_view kind, int pool_size) : history(args.history) {
    install_stop_handler();
    history.line("START {} {} {}", kind, args.id, args.generation);
    client = connect(history, fmt::format("{}-{}-{}", kind, args.id, args.generation), pool_size);
  }
  History history;
  std::unique_ptr<Client> client;
};

void sleep_ms(std::mt19937_64& rng, int max_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(rng() % static_cast<unsigned>(max_ms)));
}

}  // namespace

// Sends single messages (half of them keyed), batches of 1 to 20 (sometimes 1,000 to 2,000)
// and transactions that insert a business row with 1 to 3 messages. Every attempt is written
// before it is made ("A kind tag count key") and its outcome after ("O tag ok|fail|unknown").
// Messages' payloads are the tag (single sends) or "tag.index".
//
// Group "shards" (the shards mode): also batches with keys. Group "unkeyed" (the shards
// mode's fourth producer): unkeyed single sends and batches of 1 to 5 only,
// at a quicker pace, so that the gaps between its successes measure how unkeyed sends fail over
// while a server is down. TXMQ_FAULT_OUTBOX_DSNS (the shards mode: one DSN per server, separated
// by spaces, "catalog" for the catalog's server): the transactions go to each server in turn,
// each through a client of that server's database (the catalog's: this producer's client), as
// an application whose business rows live on that server would; a client's transactions send
// to the partitions placed on its own database (docs/shards.md).
int run_producer(const RoleArgs& args) {
  Role role(args, "producer", 2);
  History& history = role.history;
  Client* client = role.client.get();
  std::mt19937_64 rng(args.seed);
  const bool unkeyed_only = args.group == "unkeyed";
  const bool shards = args.group == "shards";
  // Connected on first use (a server may be down when this producer starts).
  std::vector<std::string> outbox_dsns;
  std::vector<std::unique_ptr<Client>> outboxes;
  if (const char* dsns = std::getenv("TXMQ_FAULT_OUTBOX_DSNS"); dsns != nullptr) {
    std::istringstream in(dsns);
    for (std::string dsn; in >> dsn;) outbox_dsns.push_back(dsn);
    outboxes.resize(outbox_dsns.size());
  }
  auto outbox = [&](std::uint64_t seq) -> Client& {
    if (outboxes.empty()) return *client;
    const std::size_t i = seq % outboxes.size();
    if (outbox_dsns[i] == "catalog") return *client;
    if (outboxes[i] == nullptr) {
      ClientOptions options;
      options.dsn = outbox_dsns[i];
      options.consumer_name = fmt::format("producer-{}-{}-outbox{}", args.id, args.generation, i);
      // Two: with one, the transaction holds the pool's only connection and its first send
      // waits forever for another to read the topic's layout (a library bug, in the report).
      options.pool_size = 2;
      options.on_warning = [&history](std::string_view text) { history.line("W {}", text); };
      outboxes[i] = std::make_unique<Client>(std::move(options));
    }
    return *outboxes[i];
  };
  const std::string insert_order = fmt::format("INSERT INTO {} (tag) VALUES (?)", kOrdersTable);
  for (std::uint64_t seq = 0; !g_stop.load(); ++seq) {
    unsigned dice = rng() % 100;
    if (unkeyed_only) dice = dice < 75 ? 0 : 40;  // 3 single sends in 4, no transactions
    std::string tag;
    auto attempt = [&](auto&& send) {
      try {
        std::string detail = send();
        history.line("O {} ok {}", tag, detail);
      } catch (const Error& e) {
        history.line("O {} {} {}", tag, e.code() == Errc::kCommitUnknown ? "unknown" : "fail",
                     error_text(e));
        std::this_thread::sleep_for(100ms);
      }
    };
    if (dice < 40) {
      SendOptions options;
      std::string key = "-";
      if (rng() % 2 == 0 && !unkeyed_only) {
        key = fmt::format("k{}_{}", args.id, rng() % 8);
        options.key = key;
      }
      tag = fmt::format("s{}g{}n{}", args.id, args.generation, seq);
      history.line("A S {} 1 {}", tag, key);
      attempt([&] { return std::to_string(client->send(kTopic, tag, options)); });
    } else if (dice < 80) {
      const std::size_t n = unkeyed_only            ? 1 + rng() % 5
                            : rng() % 200 == 0 ? 1000 + rng() % 1001
                                               : 1 + rng() % 20;
      tag = fmt::format("b{}g{}n{}x{}", args.id, args.generation, seq, n);
      std::vector<OutgoingMessage> batch(n);
      for (std::size_t i = 0; i < n; ++i) batch[i].payload = fmt::format("{}.{}", tag, i);
      // The shards mode: 1 batch in 10 with one key (it commits on that key's server), 1 in 10
      // with several keys (refused when they map to partitions on several servers).
      std::string key = "-";
      const unsigned keyed = shards ? static_cast<unsigned>(rng() % 10) : 9;
      if (keyed == 0) key = fmt::format("k{}_{}", args.id, rng() % 8);
      for (std::size_t i = 0; keyed <= 1 && i < n; ++i) {
        batch[i].key = keyed == 0 ? key : fmt::format("k{}_{}", args.id, rng() % 8);
      }
      if (keyed == 1) key = "*";
      history.line("A B {} {} {}", tag, n, key);
      attempt([&] { return std::to_string(client->send_batch(kTopic, batch).front()); });
    } else {
      const std::size_t n = 1 + rng() % 3;
      tag = fmt::format("t{}g{}n{}x{}", args.id, args.generation, seq, n);
      history.line("A T {} {} -", tag, n);
      attempt([&] {
        outbox(seq).transact([&](Transaction& tx) {
          tx.execute(insert_order, {tag});
          for (std::size_t i = 0; i < n; ++i) {
            tx.send(kExactlyOnceTopic, fmt::format("{}.{}", tag, i));
          }
        });
        return std::string("-");
      });
    }
    // A pace every group's consumers keep up with, so that the run drains.
    sleep_ms(rng, unkeyed_only ? 60 : 150);
  }
  history.line("STOP");
  return 0;
}

// receive + ack, with everything written down: "D id attempt receipt key payload" per delivery,
// "S id receipt" before the ack and "K id receipt outcome" after it.
int run_consumer(const RoleArgs& args) {
  Role role(args, "consumer", 2);
  History& history = role.history;
  Client* client = role.client.get();
  std::mt19937_64 rng(args.seed);
  ReceiveOptions options;
  options.max_messages = 10;
  options.wait = 500ms;
  options.group = args.group;
  while (!g_stop.load()) {
    std::vector<Message> got;
    try {
      got = client->receive(kTopic, options);
    } catch (const Error& e) {
      history.line("E receive {}", error_text(e));
      std::this_thread::sleep_for(200ms);
      continue;
    }
    if (got.empty()) continue;
    for (const Message& m : got) {
      history.line("D {} {} {} {} {}", m.id, m.attempt, m.receipt, m.key.value_or("-"), m.payload);
    }
    sleep_ms(rng, 30);  // the handler's work
    std::vector<std::string> receipts;
    for (const Message& m : got) {
      receipts.push_back(m.receipt);
      history.line("S {} {}", m.id, m.receipt);
    }
    try {
      std::vector<Settle> outcomes = client->ack(kTopic, receipts);
      for (std::size_t i = 0; i < got.size(); ++i) {
        history.line("K {} {} {}", got[i].id, got[i].receipt, settle_name(outcomes.at(i)));
      }
    } catch (const Error& e) {
      for (const Message& m : got) {
        history.line("K {} {} {}", m.id, m.receipt, errc_name(e.code()));
      }
      history.line("E ack {}", error_text(e));
      std::this_thread::sleep_for(200ms);
    }
  }
  history.line("STOP");
  return 0;
}

// The library's Worker, 4 threads: "D ..." per delivery, "V text" per event it reports. Workers
// of even id hold their batches (hold_up_to 1 s), odd ones lease them: both modes face each fault.
int run_worker(const RoleArgs& args) {
  Role role(args, "worker", 4);
  History& history = role.history;
  Client* client = role.client.get();
  WorkerOptions options;
  options.threads = 4;
  options.batch = 10;
  options.hold_up_to = args.id % 2 == 0 ? Micros(1s) : Micros{0};
  options.group = args.group;
  options.on_event = [&history](std::string_view text) { history.line("V {}", text); };
  std::mt19937_64 rng(args.seed);
  std::mutex rng_mutex;
  Worker worker(
      *client, std::string(kTopic),
      [&](const Message& m) {
        // A message of a held batch has no receipt (no lease was written): "held".
        history.line("D {} {} {} {} {}", m.id, m.attempt, m.receipt.empty() ? "held" : m.receipt,
                     m.key.value_or("-"), m.payload);
        unsigned work_ms = 0;
        {
          std::lock_guard lock(rng_mutex);
          work_ms = rng() % 20;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
      },
      options);
  while (!g_stop.load() && !worker.stopping()) std::this_thread::sleep_for(50ms);
  const bool failed = worker.stopping() && !g_stop.load();
  worker.stop();
  try {
    worker.join();
  } catch (const std::exception& e) {
    history.line("FAILED {}", e.what());
    return 1;
  }
  if (failed) {
    history.line("FAILED stopped by itself");
  } else {
    history.line("STOP");
  }
  return failed ? 1 : 0;
}

// Client::process: each message's effect is a row of the effects table, written in the
// transaction that deletes the message. The table, not this history, is the record; the
// history says when a call committed messages ("P count") and its errors.
int run_exactly_once(const RoleArgs& args) {
  Role role(args, "exactly-once", 2);
  History& history = role.history;
  Client* client = role.client.get();
  const std::string name = fmt::format("exactly-once-{}-{}", args.id, args.generation);
  const std::string record =
      fmt::format("INSERT INTO {} (tag, msg_id, consumer) VALUES (?, ?, ?)", kEffectsTable);
  ProcessOptions options;
  options.max_messages = 10;
  options.wait = 500ms;
  while (!g_stop.load()) {
    try {
      const std::size_t n =
          client->process(kExactlyOnceTopic, options,
                          [&](Transaction& tx, std::span<const Message> messages) {
                            for (const Message& m : messages) {
                              tx.execute(record, {m.payload, m.id, name});
                            }
                          });
      if (n > 0) history.line("P {}", n);  // committed: for the shards mode's timings
    } catch (const Error& e) {
      history.line("E process {}", error_text(e));
      std::this_thread::sleep_for(200ms);
    }
  }
  history.line("STOP");
  return 0;
}

}  // namespace txmq::fault
