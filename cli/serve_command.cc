// txmq serve: the Amazon SQS-compatible server (server/app/sqs_server.h, docs/sqs.md).
#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "cli.h"
#include "server/app/config.h"
#include "server/app/sqs_server.h"
#include "server/web/metrics.h"

namespace txmq::cli {

namespace {

struct ServeArgs {
  server::ServeOptions options;
  std::string config;
  std::string log_format = "text";
};

}  // namespace

void add_serve_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<ServeArgs>();
  server::ServeOptions& o = a->options;
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "serve the Amazon SQS API (Query and JSON protocols, SigV4) over HTTP, so that the "
      "AWS CLI and every AWS SDK can use txmq; GET /healthz and /readyz for probes "
      "(docs/sqs.md)");
  CLI::Option* config = cmd->add_option(
      "--config", a->config,
      "TOML file of these options by their long names (listen = \"0.0.0.0:9324\", workers = 32, "
      "log-format = \"json\", ...; relative paths relative to it); options given here win over "
      "it. A DSN: --dsn, else TXMQ_DSN, else the file's dsn, else the local server");
  CLI::Option* listen =
      cmd->add_option("--listen", o.listen, "HOST:PORT to listen on (default 127.0.0.1:9324)");
  CLI::Option* credentials = cmd->add_option(
      "--credentials", o.credentials_file,
      "file of 'ACCESS_KEY_ID SECRET_ACCESS_KEY' lines that signatures are checked against "
      "(re-read on SIGHUP); without it any well-formed signature is accepted and only loopback "
      "addresses may be listened on");
  CLI::Option* region =
      cmd->add_option("--region", o.region, "the regions answered (signatures and queue ARNs): a name, a comma-separated list, or * for any (us-east-1)");
  CLI::Option* account =
      cmd->add_option("--account-id", o.account, "the 12-digit account in queue URLs and ARNs");
  CLI::Option* workers = cmd->add_option("--workers", o.workers,
                                         "threads that run requests (16); long polls hold none")
                             ->check(CLI::Range(1, 256));
  CLI::Option* max_connections =
      cmd->add_option("--max-connections", o.max_connections,
                      "client connections held at once (4096); at the cap the longest-idle one "
                      "is closed for a new one, else it is answered 503. Lowered to fit "
                      "RLIMIT_NOFILE")
          ->check(CLI::Range(1, 1'000'000));
  CLI::Option* max_body_memory =
      cmd->add_option("--max-body-memory", o.max_body_memory_mib,
                      "MiB of request bodies read at once over all connections (256); past it "
                      "requests are answered 503 with Retry-After")
          ->check(CLI::Range(4, 1 << 20));
  CLI::Option* max_answer_memory =
      cmd->add_option("--max-answer-memory", o.max_answer_memory_mib,
                      "MiB of answers waiting for their clients to read them (256); past it the "
                      "next such answer is dropped and its connection closed")
          ->check(CLI::Range(4, 1 << 20));
  CLI::Option* max_per_client =
      cmd->add_option("--max-connections-per-client", o.max_connections_per_client,
                      "connections held at once from one client address (1024; 0: no bound); "
                      "at it the client's longest-idle one is closed for a new one, else it is "
                      "answered 503")
          ->check(CLI::Range(0, 1'000'000));
  CLI::Option* log_format =
      cmd->add_option("--log-format", a->log_format,
                      "text (default: 'txmq serve: ...' lines) or json (one object per line: "
                      "time, level, msg and the event's fields) on stderr; the listening line "
                      "stays on stdout")
          ->check(CLI::IsMember({"text", "json"}));
  CLI::Option* tables_at_first_use = cmd->add_flag("--tables-at-first-use", o.tables_at_first_use,
                "make a queue's tables at its first use, not at CreateQueue: an empty queue is "
                "then only its catalog rows (for many queues), but the SQL interface cannot send "
                "to it before its first SendMessage or ReceiveMessage");
  auto queue_storage = std::make_shared<std::string>("dedicated");
  CLI::Option* queue_storage_option =
      cmd->add_option("--queue-storage", *queue_storage,
                      "where CreateQueue puts a queue: dedicated (tables of its own, the "
                      "default) or shared (none of its own, no DDL: about 1 ms and a few KiB a "
                      "queue, for many queues; not yet with MessageGroupId on standard queues or "
                      "the SQL interface; docs/sqs.md, \"Many queues\")")
          ->check(CLI::IsMember({"dedicated", "shared"}));
  CLI::Option* metrics_topics =
      cmd->add_option("--metrics-topics", o.metrics_topics,
                      "regular expression of the topics whose series /metrics always exports, "
                      "matched against whole names (SQS queues' topics are sqs_NAME_HASH; topics "
                      "never used have none either way)");
  CLI::Option* metrics_busiest =
      cmd->add_option("--metrics-busiest", o.metrics_busiest,
                      "and series for this many of the other used topics, the busiest since the "
                      "previous scrape; the rest count only in topic=\"_all\" (100)")
          ->check(CLI::Range(std::size_t{0}, std::size_t{1'000'000}));
  cmd->callback([&g, a, config, listen, credentials, region, account, workers, max_connections,
                 max_body_memory, max_answer_memory, max_per_client, log_format, metrics_topics,
                 metrics_busiest, tables_at_first_use, queue_storage, queue_storage_option] {
    server::ServeOptions options = a->options;
    options.shared_storage = *queue_storage == "shared";
    try {
      options.log_format = *server::parse_log_format(a->log_format);
      std::optional<server::ServeConfig> file;
      if (config->count() > 0) {
        file = server::load_serve_config(a->config);
        // The command line wins over the file, the file over the defaults.
        if (file->listen && listen->count() == 0) options.listen = *file->listen;
        if (file->credentials_file && credentials->count() == 0) {
          options.credentials_file = *file->credentials_file;
        }
        if (file->region && region->count() == 0) options.region = *file->region;
        if (file->account && account->count() == 0) options.account = *file->account;
        if (file->workers && workers->count() == 0) options.workers = *file->workers;
        if (file->log_format && log_format->count() == 0) options.log_format = *file->log_format;
        if (file->max_connections && max_connections->count() == 0) {
          options.max_connections = *file->max_connections;
        }
        if (file->max_body_memory_mib && max_body_memory->count() == 0) {
          options.max_body_memory_mib = *file->max_body_memory_mib;
        }
        if (file->max_answer_memory_mib && max_answer_memory->count() == 0) {
          options.max_answer_memory_mib = *file->max_answer_memory_mib;
        }
        if (file->max_connections_per_client && max_per_client->count() == 0) {
          options.max_connections_per_client = *file->max_connections_per_client;
        }
        if (file->metrics_topics && metrics_topics->count() == 0) {
          options.metrics_topics = *file->metrics_topics;
        }
        if (file->metrics_busiest && metrics_busiest->count() == 0) {
          options.metrics_busiest = *file->metrics_busiest;
        }
        if (file->tables_at_first_use && tables_at_first_use->count() == 0) {
          options.tables_at_first_use = *file->tables_at_first_use;
        }
        if (file->shared_storage && queue_storage_option->count() == 0) {
          options.shared_storage = *file->shared_storage;
        }
      }
      // --dsn, then TXMQ_DSN, then the file's dsn, then the local server: the environment over
      // the file, as the AWS CLI and most servers do, so that a unit's EnvironmentFile (or a
      // shell's TXMQ_DSN, which every other txmq command in it follows) overrides a dsn left in
      // a shared file without editing it.
      const char* env = std::getenv("TXMQ_DSN");
      if (!g.dsn.empty()) {
        options.dsn_source = "--dsn";
      } else if (env != nullptr && *env != '\0') {
        options.dsn_source = "TXMQ_DSN";
      } else if (file && file->dsn) {
        options.dsn_source = "the config file";
        options.dsn = *file->dsn;
        struct stat st {};
        if (password_span(options.dsn).second > 0 && ::stat(a->config.c_str(), &st) == 0 &&
            (st.st_mode & S_IROTH) != 0) {
          server::LogWriter(options.log_format)(
              server::LogLevel::kWarning,
              fmt::format("{} holds a DSN with a password and every user may read it: chmod "
                          "o-r it, or move the DSN to TXMQ_DSN (an EnvironmentFile of mode 0600)",
                          a->config),
              {{"file", a->config}});
        }
      } else {
        options.dsn_source = "the local server";
      }
      if (!options.metrics_topics.empty()) server::metrics_topics(options.metrics_topics);
      if (options.dsn.empty()) options.dsn = resolve_dsn(g);
      g.exit_code = server::serve(options);
    } catch (const std::invalid_argument& e) {
      print_error(e.what());
      g.exit_code = kExitUsage;
    }
  });
}

}  // namespace txmq::cli
