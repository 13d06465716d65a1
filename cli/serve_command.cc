// txmq serve: the Amazon SQS-compatible server (server/serve.h, README "The SQS server").
#include <stdexcept>

#include "cli.h"
#include "server/serve.h"

namespace txmq::cli {

void add_serve_command(CLI::App& app, Globals& g) {
  auto o = std::make_shared<server::ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve the Amazon SQS API (Query and JSON protocols, SigV4) over HTTP, so that the "
               "AWS CLI and every AWS SDK can use txmq (README \"The SQS server\")");
  cmd->add_option("--listen", o->listen, "HOST:PORT to listen on (default 127.0.0.1:9324)");
  cmd->add_option("--credentials", o->credentials_file,
                  "file of 'ACCESS_KEY_ID SECRET_ACCESS_KEY' lines that signatures are checked "
                  "against (re-read on SIGHUP); without it any well-formed signature is accepted "
                  "and only loopback addresses may be listened on");
  cmd->add_option("--region", o->region, "the region in queue ARNs and signatures (us-east-1)");
  cmd->add_option("--account-id", o->account, "the 12-digit account in queue URLs and ARNs");
  cmd->add_option("--workers", o->workers, "threads that run requests (16); long polls hold none")
      ->check(CLI::Range(1, 256));
  cmd->callback([&g, o] {
    server::ServeOptions options = *o;
    try {
      options.dsn = resolve_dsn(g);
      g.exit_code = server::serve(options);
    } catch (const std::invalid_argument& e) {
      print_error(e.what());
      g.exit_code = kExitUsage;
    }
  });
}

}  // namespace txmq::cli
