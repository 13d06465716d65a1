#pragma once

#include <optional>
#include <string>

namespace txmq {

// The embedded default: a private MariaDB server in a data folder of txmq's own, listening on a
// Unix socket only. Used when no DSN is given, and by the tests on scratch folders.
struct LocalServerOptions {
  // Folder for data, socket, pid file and log. Empty: $TXMQ_HOME, else
  // $XDG_DATA_HOME/txmq, else ~/.local/share/txmq.
  std::string home;
  // Seconds to wait for a starting server to accept connections.
  int start_timeout_seconds = 60;
  // Start the server with the binary log on and synced at every commit (log-bin in the data
  // folder, binlog_format ROW, sync_binlog 1), as replicated production servers run: every
  // commit then costs a second fsync. Applies when this call starts the server; a server
  // already running keeps how it was started.
  bool binary_log = false;
};

struct LocalServerStatus {
  std::string home;
  bool running = false;
  std::optional<int> pid;
  std::string socket;
  std::string dsn;  // what clients connect with
};

// Thread safety: the members may be called from any thread, and from several processes at once
// (start() serialises them with a lock file). Throws txmq::Error: kFailedPrecondition when
// mariadbd is not installed or the home folder cannot be made or locked, kUnavailable when the
// server does not start or accept connections in time, kInvalidArgument for a home whose socket
// path is too long.
class LocalServer {
 public:
  // The folder that options.home resolves to.
  static std::string resolve_home(const LocalServerOptions& options);
  // Starts the server unless it is already running; returns its DSN. Safe to call from several
  // processes at once (a lock file serialises them). *started tells whether this call started it.
  static std::string ensure_running(const LocalServerOptions& options, bool* started = nullptr);
  static LocalServerStatus status(const LocalServerOptions& options);
  // Stops the server started in this home (by its pid file) and waits for it to exit.
  // Returns false when none was running.
  static bool stop(const LocalServerOptions& options);
};

}  // namespace txmq
