#pragma once

// txmq serve assembled: the composition root that builds the HTTP server (server/http/), the
// authentication (server/auth/), the SQS service (server/sqs/) and the web endpoints
// (server/web/) on one Client, and runs them: the Amazon SQS API over HTTP on a txmq database
// (docs/sqs.md).
#include <cstdint>
#include <memory>
#include <string>

#include "server/base/log.h"

namespace txmq::server {

struct ServeOptions {
  std::string dsn;  // resolved by the caller (the command's usual DSN resolution)
  std::string listen = "127.0.0.1:9324";
  std::string credentials_file;  // empty: any well-formed signature, loopback only
  std::string region = "us-east-1";  // --region as given: names, comma-separated, or *
  std::string account = "000000000000";
  int workers = 16;  // threads running actions; long polls hold none
  // Client connections held at once (--max-connections); at the cap the longest-idle one is
  // closed for a new one. Lowered at start to what RLIMIT_NOFILE leaves after the database
  // pool and files (server/app/sqs_server.cc); each connection is one descriptor.
  std::size_t max_connections = 4096;
  // MiB of request bodies being read at once over all connections (--max-body-memory); past it
  // a request is answered 503 with Retry-After, so unauthenticated uploads cannot exhaust memory.
  std::size_t max_body_memory_mib = 256;
  // Connections held at once from one client address (--max-connections-per-client; 0: no
  // bound beyond max_connections).
  std::size_t max_connections_per_client = 1024;
  // MiB of answers that clients have not read yet (--max-answer-memory); past it the next such
  // answer is dropped and its connection closed.
  std::size_t max_answer_memory_mib = 256;
  // The log's format on stderr (and of the "listening on" line on stdout): server/base/log.h.
  LogFormat log_format = LogFormat::kText;
  // CreateQueue makes a queue's tables at its first use (--tables-at-first-use; docs/sqs.md,
  // "Many queues"); false: with the queue, so that the SQL interface can send to it at once.
  bool tables_at_first_use = false;
  // CreateQueue puts queues in shared storage (--queue-storage shared; docs/sqs.md, "Many
  // queues"): no tables of their own, no DDL.
  bool shared_storage = false;
  // Topics whose series /metrics exports (--metrics-topics): an ECMAScript regular expression
  // matched against whole topic names (SQS queues' topics are sqs_NAME_HASH); empty: all.
  // Topics never used have no series either way.
  std::string metrics_topics;
  // And series for this many of the other used topics, the busiest since the previous scrape
  // (--metrics-busiest); the rest count only in topic="_all" (docs/metrics.md).
  std::size_t metrics_busiest = 100;
  // Where the DSN came from ("--dsn", "TXMQ_DSN", "the config file", "the local server"), for
  // the "listening on" line; empty: not said.
  std::string dsn_source;
};

class SqsService;

// A running server: connected, listening and answering once constructed; stop() (or the
// destructor) stops accepting, answers the requests it holds (long polls return what they
// have) and returns when every connection is closed. Also run in-process by txmq bench.
class Server {
 public:
  // Throws std::invalid_argument for bad options (refused before anything starts) and
  // txmq::Error when the database is unreachable.
  explicit Server(const ServeOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "127.0.0.1:9324" as bound (the port is known also when 0 was asked for).
  std::string address() const;
  std::uint16_t port() const;
  // The connection cap in force: --max-connections, or less under a low RLIMIT_NOFILE.
  std::size_t max_connections() const;
  SqsService& service();
  void reload_credentials();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves until SIGTERM or SIGINT (SIGHUP re-reads the credentials), then stops as
// Server::stop does and returns 0. Prints one line on stdout when it listens; the log goes to
// stderr, one line per event, in options.log_format.
int serve(const ServeOptions& options);

}  // namespace txmq::server
