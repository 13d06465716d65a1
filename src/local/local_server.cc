// local: the embedded default, txmq::LocalServer: a private mariadbd per data folder, on a Unix socket only.
#include "txmq/local.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "db/connection.h"
#include "util/codec.h"
#include "txmq/error.h"

namespace txmq {
namespace fs = std::filesystem;
namespace {

struct Layout {
  fs::path home;
  fs::path data;
  fs::path socket;
  fs::path pid_file;
  fs::path log;
  fs::path lock;
};

Layout layout_of(const std::string& home) {
  fs::path h(home);
  return {h, h / "data", h / "mysqld.sock", h / "mysqld.pid", h / "server.log", h / "lock"};
}

std::string dsn_for(const Layout& l) {
  return fmt::format("mysql://root@localhost/txmq?socket={}", util::percent_encode(l.socket.string(), util::Slash::kKept));
}

std::string find_program(std::initializer_list<const char*> names, const char* env_override) {
  if (const char* e = std::getenv(env_override); e != nullptr && *e != '\0') return e;
  std::vector<std::string> dirs = {"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"};
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');) dirs.push_back(d);
  }
  for (const char* name : names) {
    for (const std::string& d : dirs) {
      fs::path p = fs::path(d) / name;
      if (access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  throw Error(Errc::kFailedPrecondition,
              fmt::format("{} not found: install the mariadb-server package (apt-get install "
                          "mariadb-server), or set {} or --dsn / TXMQ_DSN",
                          *names.begin(), env_override));
}

std::optional<int> read_pid(const Layout& l) {
  std::ifstream in(l.pid_file);
  int pid = 0;
  if (in >> pid && pid > 0) return pid;
  return std::nullopt;
}

// Alive and really our server (the pid may have been reused): its command line names our data.
bool is_our_server(int pid, const Layout& l) {
  waitpid(pid, nullptr, WNOHANG);  // reap it if it was our child and has exited
  if (kill(pid, 0) != 0) return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find("--datadir=" + l.data.string()) != std::string::npos;
}

bool socket_accepts(const Layout& l) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", l.socket.c_str());
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string log_tail(const fs::path& log, std::size_t lines = 5) {
  std::ifstream in(log);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "\n  " + all[i];
  }
  return out;
}

// Runs argv with stdout and stderr appended to `log`; returns the child's pid.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& log, bool new_session) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw Error(Errc::kInternal, "fork failed");
  if (pid == 0) {
    if (new_session) setsid();  // outlives the command that started it; no terminal signals
    int in = open("/dev/null", O_RDONLY);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void initialize_data(const Layout& l) {
  if (fs::exists(l.data / "mysql")) return;
  fs::path staging = l.home / "data.init";
  fs::remove_all(staging);
  // A temporary folder of its own: bootstraps running at once (tests start several servers)
  // made temporary tables of the same name in /tmp and broke each other.
  const fs::path tmp = l.home / "install.tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<std::string> argv = {find_program({"mariadb-install-db", "mysql_install_db"},
                                                "TXMQ_MARIADB_INSTALL_DB"),
                                   "--no-defaults", "--datadir=" + staging.string(),
                                   "--tmpdir=" + tmp.string(),
                                   "--auth-root-authentication-method=normal", "--skip-test-db",
                                   "--skip-name-resolve"};
  if (geteuid() == 0) argv.push_back("--user=root");
  pid_t pid = spawn(argv, l.home / "install.log", false);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error(Errc::kUnavailable,
                fmt::format("initialising the local MariaDB data folder {} failed; see {}:{}",
                            staging.string(), (l.home / "install.log").string(),
                            log_tail(l.home / "install.log")));
  }
  fs::rename(staging, l.data);  // only a complete data folder ever appears under its name
  fs::remove_all(tmp);
}

class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0 || flock(fd_, LOCK_EX) != 0) {
      throw Error(Errc::kFailedPrecondition, fmt::format("cannot lock {}", path.string()));
    }
  }
  ~FileLock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  int fd_ = -1;
};

}  // namespace

std::string LocalServer::resolve_home(const LocalServerOptions& options) {
  if (!options.home.empty()) return fs::absolute(options.home).lexically_normal().string();
  if (const char* e = std::getenv("TXMQ_HOME"); e != nullptr && *e != '\0') {
    return fs::absolute(e).lexically_normal().string();
  }
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x != '\0') {
    return (fs::path(x) / "txmq").string();
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    throw Error(Errc::kFailedPrecondition, "neither TXMQ_HOME nor HOME is set");
  }
  return (fs::path(home) / ".local" / "share" / "txmq").string();
}

LocalServerStatus LocalServer::status(const LocalServerOptions& options) {
  Layout l = layout_of(resolve_home(options));
  LocalServerStatus s;
  s.home = l.home.string();
  s.socket = l.socket.string();
  s.dsn = dsn_for(l);
  if (auto pid = read_pid(l); pid && is_our_server(*pid, l)) {
    s.running = true;
    s.pid = pid;
  }
  return s;
}

std::string LocalServer::ensure_running(const LocalServerOptions& options, bool* started) {
  if (started != nullptr) *started = false;
  Layout l = layout_of(resolve_home(options));
  if (l.socket.string().size() >= sizeof(sockaddr_un::sun_path)) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("the socket path {} is too long for a Unix socket; set a shorter "
                            "TXMQ_HOME",
                            l.socket.string()));
  }
  std::error_code ec;
  fs::create_directories(l.home, ec);
  if (ec) {
    throw Error(Errc::kFailedPrecondition,
                fmt::format("cannot create {}: {}", l.home.string(), ec.message()));
  }
  chmod(l.home.c_str(), 0700);  // the socket admits root without a password: keep others out
  FileLock lock(l.lock);

  if (auto pid = read_pid(l); pid && is_our_server(*pid, l)) {
    // Running: wait for it to accept (another process may have just started it).
    for (int i = 0; i < options.start_timeout_seconds * 20 && !socket_accepts(l); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return dsn_for(l);
  }
  fs::remove(l.pid_file, ec);
  initialize_data(l);

  std::vector<std::string> argv = {
      find_program({"mariadbd", "mysqld"}, "TXMQ_MARIADBD"),
      "--no-defaults",
      "--datadir=" + l.data.string(),
      "--socket=" + l.socket.string(),
      "--pid-file=" + l.pid_file.string(),
      "--log-error=" + l.log.string(),
      "--skip-networking",
      "--skip-name-resolve",
      "--character-set-server=utf8mb4",
      "--collation-server=utf8mb4_unicode_ci",
      "--innodb-flush-log-at-trx-commit=1",  // full durability, as the contract requires
      "--innodb-buffer-pool-size=256M",
      "--innodb-log-file-size=256M",
      "--max-allowed-packet=64M",
      "--max-connections=1000",
  };
  if (options.binary_log) {
    argv.insert(argv.end(), {"--log-bin=" + (l.data / "binlog").string(), "--binlog-format=ROW",
                             "--sync-binlog=1", "--server-id=1"});
  }
  if (geteuid() == 0) argv.push_back("--user=root");
  pid_t pid = spawn(argv, l.log, true);

  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options.start_timeout_seconds);
  while (!socket_accepts(l)) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      throw Error(Errc::kUnavailable,
                  fmt::format("the local MariaDB server exited while starting; see {}:{}",
                              l.log.string(), log_tail(l.log)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGTERM);
      throw Error(Errc::kUnavailable,
                  fmt::format("the local MariaDB server did not accept connections within {} s; "
                              "see {}:{}",
                              options.start_timeout_seconds, l.log.string(), log_tail(l.log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  internal::Dsn admin;
  admin.user = "root";
  admin.database = "mysql";
  admin.socket = l.socket.string();
  internal::Connection c(admin);
  c.query("CREATE DATABASE IF NOT EXISTS txmq");
  if (started != nullptr) *started = true;
  return dsn_for(l);
}

bool LocalServer::stop(const LocalServerOptions& options) {
  Layout l = layout_of(resolve_home(options));
  auto pid = read_pid(l);
  if (!pid || !is_our_server(*pid, l)) return false;
  kill(*pid, SIGTERM);
  // InnoDB shuts down cleanly on SIGTERM; a large buffer pool can take a while to flush.
  for (int i = 0; i < 120 * 20; ++i) {
    if (!is_our_server(*pid, l)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(*pid, SIGKILL);  // crash-safe: InnoDB recovers on the next start
  for (int i = 0; i < 100 && is_our_server(*pid, l); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace txmq
