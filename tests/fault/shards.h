// The fault suite's shards mode (docs/faults.md, "On several servers"): three private MariaDB
// servers that the harness starts itself, one topic sharded over them, and kill -9 of one server
// at a time, restarted a few seconds later. Header-only: included by main.cc alone.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "db/connection.h"
#include "db/dsn.h"
#include "fault.h"
#include "txmq/error.h"
#include "txmq/local.h"

namespace txmq::fault {

// Servers numbered 1..size(), each in DIR/serverI with its own socket; server 1's database is
// the catalog (the children's TXMQ_DSN).
class ShardServers {
 public:
  ShardServers(const std::string& dir, int count) {
    for (int i = 1; i <= count; ++i) {
      LocalServerOptions o;
      o.home = fmt::format("{}/server{}", dir, i);
      o.start_timeout_seconds = 120;
      servers_.push_back(o);
    }
    up_.assign(servers_.size(), false);
    admins_.resize(servers_.size());
    dsns_.resize(servers_.size());
  }

  int size() const { return static_cast<int>(servers_.size()); }
  static std::string name(int s) { return fmt::format("s{}", s); }

  // Starts every server (a new data folder the first time). Throws when one does not start.
  void start() {
    for (int s = 1; s <= size(); ++s) {
      dsns_[s - 1] = LocalServer::ensure_running(servers_[s - 1]);
      up_[s - 1] = true;
    }
  }
  // Stops the servers started here, by their pid files.
  void stop() noexcept {
    admins_.clear();
    admins_.resize(servers_.size());
    for (LocalServerOptions& o : servers_) {
      try {
        LocalServer::stop(o);
      } catch (...) {
      }
    }
  }

  // root's DSN (over the server's socket).
  const std::string& root_dsn(int s) const { return dsns_.at(s - 1); }
  std::string socket(int s) const { return LocalServer::status(servers_.at(s - 1)).socket; }
  // The DSN recorded in the catalog for server s: user `user`, the password from the variable
  // `password_env` (a catalog holds no password).
  std::string recorded_dsn(int s, std::string_view user, std::string_view password_env) const {
    const std::string root = root_dsn(s);
    // mysql://root@localhost/txmq?socket=...: the same with another user and the variable.
    std::string dsn = root;
    dsn.replace(dsn.find("root@"), 5, fmt::format("{}@", user));
    return fmt::format("{}&password-env={}", dsn, password_env);
  }

  bool up(int s) const { return up_.at(s - 1); }

  // root's session on server s, connected again when broken; nullptr while it is down or
  // cannot be reached.
  internal::Connection* admin(int s) {
    if (!up(s)) return nullptr;
    std::unique_ptr<internal::Connection>& c = admins_.at(s - 1);
    try {
      if (c == nullptr || c->broken() || !c->ping()) {
        c.reset();
        c = std::make_unique<internal::Connection>(internal::parse_dsn(root_dsn(s)));
      }
      return c.get();
    } catch (const Error&) {
      c.reset();
      return nullptr;
    }
  }
  void forget(int s) { admins_.at(s - 1).reset(); }

  // kill -9 of server s by its pid file. False when no server ran there.
  bool kill9(int s) {
    LocalServerStatus status = LocalServer::status(servers_.at(s - 1));
    if (!status.pid) return false;
    ::kill(*status.pid, SIGKILL);
    waitpid(*status.pid, nullptr, 0);  // our child only if we started it in this process
    // Gone when its pid no longer answers to signal 0.
    for (int i = 0; i < 500 && ::kill(*status.pid, 0) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    up_.at(s - 1) = false;
    forget(s);
    return true;
  }
  // SIGSTOP of server s: it keeps its sockets and accepts connections (the kernel completes
  // them) but answers nothing, as a host gone dark without resets. Not used by admin()
  // meanwhile. False when no server ran there.
  bool freeze(int s) {
    LocalServerStatus status = LocalServer::status(servers_.at(s - 1));
    if (!status.pid) return false;
    frozen_pid_ = *status.pid;
    ::kill(frozen_pid_, SIGSTOP);
    up_.at(s - 1) = false;
    forget(s);
    return true;
  }
  // SIGCONT of the server frozen last.
  void thaw(int s) {
    if (frozen_pid_ > 0) ::kill(frozen_pid_, SIGCONT);
    frozen_pid_ = 0;
    up_.at(s - 1) = true;
  }
  // Leaves no server stopped (the run's end, however it ends).
  ~ShardServers() {
    if (frozen_pid_ > 0) ::kill(frozen_pid_, SIGCONT);
  }
  // Starts server s again (InnoDB crash recovery) and waits until it accepts connections.
  void restart(int s) {
    dsns_.at(s - 1) = LocalServer::ensure_running(servers_.at(s - 1));
    up_.at(s - 1) = true;
  }

 private:
  std::vector<LocalServerOptions> servers_;
  std::vector<std::string> dsns_;
  std::vector<bool> up_;
  std::vector<std::unique_ptr<internal::Connection>> admins_;
  pid_t frozen_pid_ = 0;
};

// One server faulty at a time: kill -9, down for 3 to 6 s (the catalog's 6 to 9 s), restarted;
// or SIGSTOP for 6 to 9 s, then SIGCONT. Each server's faults are kills and freezes in turn,
// the first of either kind at random, except the catalog's server, frozen first (its freeze is
// the harder case, and a short run then sees it). The next fault 2 to 4 s after the restart
// (in the soak 5 to 20 s); every server in turn from a random order. Driven by the
// orchestrator's loop.
class ShardFaults {
 public:
  ShardFaults(ShardServers& servers, ShardRecord& record, std::uint64_t seed, bool soak,
              bool kill_catalog)
      : servers_(servers), record_(record), rng_(seed), soak_(soak), kill_catalog_(kill_catalog) {
    next_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    freeze_next_.assign(static_cast<std::size_t>(servers_.size()) + 1, false);
    for (int s = 2; s <= servers_.size(); ++s) freeze_next_[s] = (rng_() & 1) != 0;
    freeze_next_[1] = true;
  }

  bool down() const { return down_ != 0; }
  int down_server() const { return down_; }

  // One step; a new kill starts only while `may_start` (each outage must end in the run).
  void step(bool may_start) {
    const auto now = std::chrono::steady_clock::now();
    if (down_ != 0) {
      if (now >= until_) restore();
      return;
    }
    if (!may_start || now < next_at_) return;
    // Every server in turn from a random start, so that a short run hits several of them;
    // server 1 (the catalog's) only when asked.
    std::vector<int> eligible;
    for (int s = kill_catalog_ ? 1 : 2; s <= servers_.size(); ++s) eligible.push_back(s);
    if (order_.empty()) {
      order_ = eligible;
      std::shuffle(order_.begin(), order_.end(), rng_);
    }
    const int s = order_.back();
    order_.pop_back();
    ShardFault f;
    f.server = s;
    f.catalog = s == 1;
    const bool freeze = freeze_next_[s];
    f.kind = freeze ? "freeze" : "kill";
    f.at_us = now_us();
    if (!(freeze ? servers_.freeze(s) : servers_.kill9(s))) return;
    record_.faults.push_back(f);
    down_ = s;
    // The catalog's server stays down 6 to 9 s: longer than a client keeps a shard map (5 s),
    // so that the clients must do without the catalog for a while. A freeze lasts as long, far
    // past the second after which a call goes on without a server (src/shards/visits.h).
    until_ = now + std::chrono::milliseconds((s == 1 || freeze ? 6000 : 3000) + rng_() % 3001);
    if (freeze) {
      fmt::print("  server {} frozen (SIGSTOP){}\n", s, s == 1 ? ", the catalog's" : "");
    } else {
      fmt::print("  server {} killed (kill -9){}; gone after {:.1f} s\n", s,
                 s == 1 ? ", the catalog's" : "", static_cast<double>(now_us() - f.at_us) / 1e6);
    }
    freeze_next_[s] = !freeze;
  }

  // Ends an outage in progress.
  void finish() {
    if (down_ != 0) restore();
  }

 private:
  void restore() {
    ShardFault& f = record_.faults.back();
    f.restart_us = now_us();
    // The orchestrator's loop may come late (a fault that waits for its moment, a slow query).
    const double late = std::chrono::duration<double>(std::chrono::steady_clock::now() - until_).count();
    if (late > 1) fmt::print("  (the restart of server {} began {:.1f} s late)\n", down_, late);
    if (f.kind == "freeze") {
      servers_.thaw(down_);
      f.back_us = now_us();
      fmt::print("  server {} thawed (SIGCONT) after {:.1f} s\n", down_,
                 static_cast<double>(f.back_us - f.at_us) / 1e6);
      down_ = 0;
      next_at_ = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(soak_ ? 5000 + static_cast<int>(rng_() % 15001)
                                                 : 2000 + static_cast<int>(rng_() % 2001));
      return;
    }
    try {
      servers_.restart(down_);
      f.back_us = now_us();
      fmt::print("  server {} restarted after {:.1f} s down ({:.1f} s to start)\n", down_,
                 static_cast<double>(f.back_us - f.at_us) / 1e6,
                 static_cast<double>(f.back_us - f.restart_us) / 1e6);
    } catch (const std::exception& e) {
      record_.problems.push_back(
          fmt::format("server {} did not start again after its kill: {}", down_, e.what()));
    }
    down_ = 0;
    const int gap_ms = soak_ ? 5000 + static_cast<int>(rng_() % 15001)
                             : 2000 + static_cast<int>(rng_() % 2001);
    next_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(gap_ms);
  }

  ShardServers& servers_;
  ShardRecord& record_;
  std::mt19937_64 rng_;
  bool soak_, kill_catalog_;
  int down_ = 0;
  std::vector<bool> freeze_next_;  // by server number
  std::vector<int> order_;
  std::chrono::steady_clock::time_point next_at_, until_;
};

}  // namespace txmq::fault
