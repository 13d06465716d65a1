#pragma once
// The bench's section "serve": txmq serve (in this process, on 127.0.0.1) driven over HTTP by
// SigV4-signed AWS JSON 1.0 requests from keep-alive connections, one per client thread, against
// the library doing the same batches in the same run.

#include <functional>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "txmq/client.h"

namespace txmq::bench {

// One client connection to txmq serve.
class SqsHttpClient {
 public:
  explicit SqsHttpClient(std::uint16_t port);
  ~SqsHttpClient();
  SqsHttpClient(const SqsHttpClient&) = delete;
  SqsHttpClient& operator=(const SqsHttpClient&) = delete;
  // Calls AmazonSQS.<action> (or `target` in full when it has a dot); throws std::runtime_error
  // with the error's body for anything but 200.
  nlohmann::json call(const std::string& action, const nlohmann::json& input);
  // As call, with the input as JSON text; returns the answer's body unparsed.
  std::string post(const std::string& action, const std::string& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// SendMessageBatch of `batch` messages from `clients` connections for `seconds`.
Measured http_send_batch_rate(std::uint16_t port, const std::string& queue_url, int clients,
                              int batch, double seconds, std::size_t payload);
// send_batch() of `batch` messages from `threads` threads for `seconds`.
Measured library_send_batch_rate(Client& client, const std::string& topic, int threads, int batch,
                                 double seconds, std::size_t payload);
// ReceiveMessage (up to 10) + DeleteMessageBatch from `clients` connections until `limit`
// messages were consumed, a receive finds nothing, or `cap_seconds` pass.
Measured http_drain(std::uint16_t port, const std::string& queue_url, int clients,
                    std::uint64_t limit, double cap_seconds);
// Single-message SendMessage calls from `clients` connections for `seconds`.
Measured http_send_rate(std::uint16_t port, const std::string& queue_url, int clients,
                        double seconds, std::size_t payload);
// Single-message DeleteMessage calls from `clients` connections, of `count` messages leased
// beforehand through the library (not timed); `handle_of` makes a receipt the server's
// ReceiptHandle.
Measured http_delete_rate(std::uint16_t port, Client& client, const std::string& topic,
                          const std::string& queue_url, int clients, int count,
                          const std::function<std::string(const std::string&)>& handle_of);

}  // namespace txmq::bench

namespace txmq::bench {

// `count` ReceiveMessage calls with WaitTimeSeconds=20 held open at once on an idle queue, from
// one thread over non-blocking sockets; what the server spends on them while they wait, and how
// soon one send reaches a waiting receive.
struct LongPollFigures {
  int held = 0;
  long threads_before = 0, threads_during = 0;  // of this process, which runs the server
  long rss_kib_before = 0, rss_kib_during = 0;
  double statements_per_second = 0;  // the database server's Questions while they wait
  double wake_ms = 0;                // from SendMessage's answer to a waiting receive's answer
};
LongPollFigures hold_long_polls(std::uint16_t port, const std::string& queue_url,
                                const std::string& dsn, int count);

}  // namespace txmq::bench
