#include "workloads.h"

#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "txmq/error.h"
#include "txmq/worker.h"

namespace txmq::bench {

void drop_if_exists(Client& client, const std::string& topic) {
  try {
    client.drop_topic(topic);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;
  }
}

void fresh_topic(Client& client, const std::string& topic, const TopicOptions& options) {
  drop_if_exists(client, topic);
  client.create_topic(topic, options);
}

void fill(Client& client, const std::string& topic, int count, std::size_t payload, int chunk) {
  std::vector<OutgoingMessage> batch;
  for (int done = 0; done < count; done += chunk) {
    const int n = std::min(chunk, count - done);
    batch.clear();
    for (int i = 0; i < n; ++i) batch.emplace_back().payload = make_payload(payload, done + i);
    client.send_batch(topic, batch);
  }
}

Measured send_rate(Client& client, const std::string& topic, int producers, double seconds,
                   std::size_t payload) {
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(seconds);
  return run_threads(producers, [&](int t, Latencies& lat) {
    const std::vector<std::string> payloads = make_payloads(payload, static_cast<std::uint64_t>(t));
    std::uint64_t n = 0;
    while (SteadyClock::now() < deadline) {
      const std::string& p = payloads[n % payloads.size()];
      const auto start = SteadyClock::now();
      client.send(topic, p);
      lat.add_since(start);
      ++n;
    }
    return n;
  });
}

Measured send_batch_rate(Client& client, const std::string& topic, int batch, int rows,
                         std::size_t payload) {
  std::vector<OutgoingMessage> messages;
  for (int i = 0; i < batch; ++i) messages.emplace_back().payload = make_payload(payload, i);
  return run_threads(1, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    while (n < static_cast<std::uint64_t>(rows)) {
      const auto start = SteadyClock::now();
      n += client.send_batch(topic, messages).size();
      lat.add_since(start);
    }
    return n;
  });
}

Measured drain(Client& client, const std::string& topic, int consumers, int batch,
               std::uint64_t limit, double cap_seconds, bool riding) {
  std::atomic<std::uint64_t> consumed{0};
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(cap_seconds);
  auto check = [](const std::vector<Settle>& settled) {
    for (Settle s : settled) {
      if (s != Settle::kOk) throw Error(Errc::kInternal, "bench: an ack was refused");
    }
  };
  return run_threads(consumers, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    ReceiveOptions options;
    options.max_messages = batch;
    std::vector<std::string> receipts;
    std::vector<Settle> settled;
    while (consumed.load() < limit && SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      std::vector<Message> messages;
      if (riding) {
        messages = client.ack_and_receive(topic, receipts, settled, options);
        check(settled);
      } else {
        messages = client.receive(topic, options);
      }
      receipts.clear();
      if (messages.empty()) break;
      for (Message& m : messages) receipts.push_back(std::move(m.receipt));
      if (!riding) {
        check(client.ack(topic, receipts));
        receipts.clear();
      }
      lat.add_since(start);
      n += messages.size();
      consumed += messages.size();
    }
    if (!receipts.empty()) check(client.ack(topic, receipts));  // the last batch (riding)
    return n;
  });
}

Measured drain_worker(Client& client, const std::string& topic, int threads, int batch,
                      int ack_every, std::uint64_t limit, double cap_seconds, Micros hold_up_to,
                      Micros work) {
  WorkerOptions options;
  options.hold_up_to = hold_up_to;
  options.threads = threads;
  options.batch = batch;
  options.ack_every = ack_every;
  options.limit = limit;
  options.stop_when_empty = true;
  std::mutex mutex;
  Latencies all;
  const CpuSeconds cpu_before = cpu_now();
  const auto start = SteadyClock::now();
  Worker worker(
      client, topic,
      [&](const Message&) {
        if (work > Micros{0}) std::this_thread::sleep_for(work);
        thread_local SteadyClock::time_point last{};
        const auto now = SteadyClock::now();
        if (last != SteadyClock::time_point{} && now - last < std::chrono::seconds(1)) {
          std::lock_guard lock(mutex);
          all.add(seconds_between(last, now) * 1000.0);
        }
        last = now;
      },
      options);
  const auto deadline = start + std::chrono::duration<double>(cap_seconds);
  while (!worker.stopping() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  worker.stop();
  worker.join();
  Measured m;
  m.seconds = seconds_between(start, SteadyClock::now());
  if (!cpu_before.empty()) m.cpu = CpuWatch::difference(cpu_before, cpu_now());
  m.messages = worker.counts().acked;
  m.latencies = std::move(all);
  return m;
}

namespace {

// drain_exactly_once and drain_exactly_once_xa: `process` is one call of Client::process or
// process_xa with the handler.
template <typename Process>
Measured drain_transactional(int consumers, int batch, std::uint64_t limit, double cap_seconds,
                             const std::string& work_table, Process process) {
  std::atomic<std::uint64_t> consumed{0};
  const auto deadline = SteadyClock::now() + std::chrono::duration<double>(cap_seconds);
  ProcessOptions options;
  options.max_messages = batch;
  return run_threads(consumers, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    std::string sql;
    std::vector<SqlValue> params;
    const TransactionalHandler handler = [&](Transaction& tx, std::span<const Message> messages) {
      if (work_table.empty()) return;
      sql = fmt::format("INSERT INTO {} (msg_id) VALUES ", work_table);
      params.clear();
      for (std::size_t i = 0; i < messages.size(); ++i) {
        sql += i == 0 ? "(?)" : ",(?)";
        params.push_back(messages[i].id);
      }
      tx.execute(sql, params);
    };
    while (consumed.load() < limit && SteadyClock::now() < deadline) {
      const auto start = SteadyClock::now();
      std::size_t got = process(options, handler);
      if (got == 0) break;
      lat.add_since(start);
      n += got;
      consumed += got;
    }
    return n;
  });
}

}  // namespace

Measured drain_exactly_once(Client& client, const std::string& topic, int consumers, int batch,
                            std::uint64_t limit, double cap_seconds,
                            const std::string& work_table) {
  return drain_transactional(
      consumers, batch, limit, cap_seconds, work_table,
      [&](const ProcessOptions& options, const TransactionalHandler& handler) {
        return client.process(topic, options, handler);
      });
}

Measured drain_exactly_once_xa(Client& client, const std::string& topic,
                               const XaResource& resource, int consumers, int batch,
                               std::uint64_t limit, double cap_seconds,
                               const std::string& work_table) {
  return drain_transactional(
      consumers, batch, limit, cap_seconds, work_table,
      [&](const ProcessOptions& options, const TransactionalHandler& handler) {
        return client.process_xa(topic, resource, options, handler);
      });
}

Measured end_to_end(Client& producer_client, Client& consumer_client, const std::string& topic,
                    int producers, int consumers, double rate_per_s, double seconds) {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> received{0};
  std::atomic<int> producers_done{0};
  const auto epoch = SteadyClock::now();
  const double interval = producers / rate_per_s;  // seconds between one producer's sends
  const auto per_producer = static_cast<std::uint64_t>(seconds * rate_per_s / producers);
  return run_threads(producers + consumers, [&](int t, Latencies& lat) -> std::uint64_t {
    if (t < producers) {
      // Open loop: each send has its slot on a schedule; a late send does not delay the next.
      const auto start = SteadyClock::now();
      for (std::uint64_t j = 0; j < per_producer; ++j) {
        const auto slot = start + std::chrono::duration_cast<SteadyClock::duration>(
                                      std::chrono::duration<double>(
                                          interval * (static_cast<double>(j) + 1.0 * t / producers)));
        std::this_thread::sleep_until(slot);
        std::string payload = make_payload(100, j);
        const std::int64_t sent_ns = (SteadyClock::now() - epoch).count();
        std::memcpy(payload.data(), &sent_ns, sizeof(sent_ns));
        producer_client.send(topic, payload);
        sent++;
      }
      producers_done++;
      return 0;
    }
    ReceiveOptions options;
    options.max_messages = 10;
    options.wait = std::chrono::milliseconds(200);
    std::uint64_t n = 0;
    for (;;) {
      if (producers_done.load() == producers && received.load() >= sent.load()) break;
      std::vector<Message> messages = consumer_client.receive(topic, options);
      const std::int64_t now_ns = (SteadyClock::now() - epoch).count();
      std::vector<std::string> receipts;
      for (Message& m : messages) {
        std::int64_t sent_ns = 0;
        std::memcpy(&sent_ns, m.payload.data(), sizeof(sent_ns));
        lat.add(static_cast<double>(now_ns - sent_ns) / 1e6);
        receipts.push_back(std::move(m.receipt));
      }
      if (!receipts.empty()) consumer_client.ack(topic, receipts);
      n += messages.size();
      received += messages.size();
    }
    return n;
  });
}

Measured claim_latency(Client& client, const std::string& topic, int samples, int hold_in_flight) {
  if (hold_in_flight > 0) {
    ReceiveOptions hold;
    hold.max_messages = hold_in_flight;
    hold.lease = std::chrono::hours(1);
    if (client.receive(topic, hold).size() != static_cast<std::size_t>(hold_in_flight)) {
      throw Error(Errc::kInternal, "bench: could not lease the in-flight messages");
    }
  }
  return run_threads(1, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    for (int i = 0; i < samples; ++i) {
      const auto start = SteadyClock::now();
      std::vector<Message> m = client.receive(topic, ReceiveOptions{});
      lat.add_since(start);
      if (m.empty()) throw Error(Errc::kInternal, "bench: the claim backlog ran out");
      client.ack(topic, m[0].receipt);
      ++n;
    }
    return n;
  });
}

Measured receive_latency(Client& client, const std::string& topic, int samples, int batch) {
  ReceiveOptions options;
  options.max_messages = batch;
  return run_threads(1, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    std::vector<std::string> receipts;
    for (int i = 0; i < samples; ++i) {
      const auto start = SteadyClock::now();
      std::vector<Message> got = client.receive(topic, options);
      lat.add_since(start);
      if (got.empty()) throw Error(Errc::kInternal, "bench: the receive backlog ran out");
      receipts.clear();
      for (Message& m : got) receipts.push_back(std::move(m.receipt));
      client.ack(topic, receipts);
      n += got.size();
    }
    return n;
  });
}

Measured empty_receive_latency(Client& client, const std::string& topic, int samples) {
  ReceiveOptions options;
  options.wait = Micros{0};
  return run_threads(1, [&](int, Latencies& lat) {
    std::uint64_t n = 0;
    for (int i = 0; i < samples; ++i) {
      const auto start = SteadyClock::now();
      if (!client.receive(topic, options).empty()) {
        throw Error(Errc::kInternal, "bench: the empty topic was not empty");
      }
      lat.add_since(start);
      ++n;  // receives, not messages: the rate column is receives per second
    }
    return n;
  });
}

}  // namespace txmq::bench
