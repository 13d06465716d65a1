#include "shards/shard_map.h"

#include <fmt/format.h>

#include <algorithm>

#include "db/sql.h"
#include "util/codec.h"

namespace txmq::internal {

std::vector<std::string> split_names(std::string_view text) {
  std::vector<std::string> names;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view name = text.substr(0, comma);
    check_topic_name(name);
    names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return names;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::vector<std::string> ShardMap::holders() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  for (const std::string& s : servers) {
    if (std::find(partitions.begin(), partitions.end(), s) != partitions.end()) add(s);
  }
  for (const std::string& s : partitions) add(s);
  return out;
}

std::uint64_t ShardMap::mask_of(std::string_view server) const {
  std::uint64_t mask = 0;
  for (std::size_t p = 0; p < partitions.size(); ++p) {
    if (partitions[p] == server) mask |= std::uint64_t{1} << p;
  }
  return mask;
}

std::vector<int> ShardMap::partitions_on(std::string_view server) const {
  std::vector<int> out;
  for (std::size_t p = 0; p < partitions.size(); ++p) {
    if (partitions[p] == server) out.push_back(static_cast<int>(p));
  }
  return out;
}

namespace {

constexpr std::string_view kSelectPlacement =
    "SELECT topic, epoch, servers, partitions, moving FROM txmq_placements";

ShardMap shard_map_from_row(const Row& row) {
  ShardMap p;
  p.topic = row.bytes(0);
  p.epoch = row.u64(1);
  p.servers = split_names(row.bytes(2));
  p.partitions = split_names(row.bytes(3));
  p.moving = row.null(4) ? "" : row.bytes(4);
  return p;
}

}  // namespace

std::optional<ShardMap> ShardRegistry::load(std::string_view topic) {
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("{} WHERE topic = ?", kSelectPlacement), {topic});
  });
  if (r.rows.empty()) return std::nullopt;
  return shard_map_from_row(r.rows[0]);
}

std::optional<ShardMap> ShardRegistry::shard_map(std::string_view topic, bool fresh) {
  const std::string name(topic);
  std::optional<Cached> had;
  {
    std::lock_guard lock(mutex_);
    auto it = maps_.find(name);
    if (it != maps_.end()) {
      if (!fresh && std::chrono::steady_clock::now() - it->second.fetched < kCacheFor) {
        return it->second.placement;
      }
      had = it->second;
      // A read of it waits on a catalog's server that stopped answering: the map known.
      if (reloading_.count(name) != 0) return had->placement;
    }
  }
  if (!had) return reload(topic);  // nothing known: the caller must wait for the catalog
  // Read again on a visit thread, so that a catalog's server that stopped answering holds up
  // only that read: past kSlowVisit the calls go on with the map known, which the read
  // replaces when it ends (the members' fence refuses a partition that moved meanwhile).
  auto mark = [this, name](bool on) {
    std::lock_guard lock(mutex_);
    if (on) {
      reloading_[name] = true;
    } else {
      reloading_.erase(name);
    }
  };
  Visits<std::optional<ShardMap>> read(
      visits_, {[mark](const std::string&) { mark(true); },
                [mark](const std::string&) { mark(false); }, {}});
  read.start("catalog", [this, name] { return reload(name); });
  // At most kSlowVisit in all, also while the read waits for a connection: the catalog's
  // server may hold partitions too, and when it stops answering, the visits to them left
  // behind hold its pool's connections until it answers again (a busy pool is no reason to
  // wait either: the map known serves).
  if (!read.wait(kSlowVisit, kSlowVisit)) {
    read.abandon();
    return had->placement;
  }
  try {
    return read.take(0);
  } catch (const Error& e) {
    // The catalog's server is down: go on with the shard map known, and look again a second
    // later rather than on every call, so that only the catalog's own partitions stop.
    if (e.code() != Errc::kUnavailable) throw;
    std::lock_guard lock(mutex_);
    maps_[name].fetched = std::chrono::steady_clock::now() - kCacheFor + kCatalogRetryAfter;
    return had->placement;
  }
}

std::optional<ShardMap> ShardRegistry::reload(std::string_view topic) {
  check_topic_name(topic);
  std::optional<ShardMap> p = load(topic);
  std::lock_guard lock(mutex_);
  maps_[std::string(topic)] = Cached{p, std::chrono::steady_clock::now()};
  return p;
}

void ShardRegistry::forget(std::string_view topic) {
  std::lock_guard lock(mutex_);
  maps_.erase(std::string(topic));
}

Dsn ShardRegistry::dsn_of(std::string_view name) {
  Result r;
  try {
    r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
      return c.execute("SELECT dsn FROM txmq_servers WHERE name = ?", {name});
    });
  } catch (const Error& e) {
    // The catalog's server is down: a server connected before can be connected again.
    std::lock_guard lock(mutex_);
    auto known = dsns_.find(std::string(name));
    if (e.code() != Errc::kUnavailable || known == dsns_.end()) throw;
    return known->second;
  }
  if (r.rows.empty()) {
    throw Error(Errc::kNotFound, fmt::format("no server '{}' is recorded (txmq server list)",
                                             util::printable(name)));
  }
  Dsn dsn = parse_dsn(r.rows[0].bytes(0));
  std::lock_guard lock(mutex_);
  dsns_.insert_or_assign(std::string(name), dsn);
  return dsn;
}

QueueContext* ShardRegistry::connected_to(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

QueueContext& ShardRegistry::server(std::string_view name) {
  if (QueueContext* known = connected_to(name)) return *known;
  std::shared_ptr<std::mutex> gate;
  {
    std::lock_guard lock(connect_mutex_);
    std::shared_ptr<std::mutex>& slot = connecting_[std::string(name)];
    if (!slot) slot = std::make_shared<std::mutex>();
    gate = slot;
  }
  std::lock_guard connecting(*gate);
  if (QueueContext* known = connected_to(name)) return *known;  // connected meanwhile
  const Dsn dsn = dsn_of(name);
  QueueContext* context = nullptr;
  std::unique_ptr<QueueContext> made;
  // The catalog's own database may hold partitions too: one context for both, so that the
  // topic row there is one row.
  if (dsn.describe() == catalog_.pool.dsn().describe()) {
    context = &catalog_;
  } else {
    try {
      made = connect_(dsn);
    } catch (const Error& e) {
      if (e.code() == Errc::kUnavailable) mark_down(name);
      throw Error(e.code(), fmt::format("server '{}': {}", util::printable(name), e.what()),
                  e.server_errno());
    }
    context = made.get();
  }
  std::lock_guard lock(mutex_);
  if (made) servers_[std::string(name)] = std::move(made);
  by_name_[std::string(name)] = context;
  return *context;
}

std::vector<QueueContext*> ShardRegistry::connected() {
  std::lock_guard lock(mutex_);
  std::vector<QueueContext*> out;
  for (auto& [name, context] : servers_) out.push_back(context.get());
  return out;
}

bool ShardRegistry::is_down(std::string_view name) {
  std::lock_guard lock(mutex_);
  const std::string key(name);
  if (auto stalled = stalled_.find(key); stalled != stalled_.end() && stalled->second > 0) {
    return true;
  }
  auto it = down_until_.find(key);
  return it != down_until_.end() && std::chrono::steady_clock::now() < it->second;
}

void ShardRegistry::mark_down(std::string_view name) {
  std::lock_guard lock(mutex_);
  down_until_[std::string(name)] = std::chrono::steady_clock::now() + kDownFor;
}

void ShardRegistry::stalled(std::string_view name) {
  std::lock_guard lock(mutex_);
  ++stalled_[std::string(name)];
}

bool ShardRegistry::is_stalled(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = stalled_.find(std::string(name));
  return it != stalled_.end() && it->second > 0;
}

void ShardRegistry::unstalled(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = stalled_.find(std::string(name));
  if (it != stalled_.end() && --it->second <= 0) stalled_.erase(it);
}

void ShardRegistry::add_server(std::string_view name, std::string_view dsn_text) {
  check_topic_name(name);
  const Dsn dsn = parse_dsn(dsn_text);
  if (dsn.password_in_text) {
    throw Error(Errc::kInvalidArgument,
                "the DSN holds a password, which the catalog would keep in clear: put it in a "
                "file every client can read (password-file=PATH) or in an environment variable "
                "(password-env=NAME)");
  }
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute("SELECT dsn FROM txmq_servers WHERE name = ?", {name});
  });
  if (!r.rows.empty()) {
    if (r.rows[0].bytes(0) == dsn_text) return;
    throw Error(Errc::kAlreadyExists,
                fmt::format("server '{}' is recorded with another DSN ({}); remove it first",
                            name, parse_dsn(r.rows[0].bytes(0)).describe()));
  }
  // Reachable, with txmq's tables, before it is recorded.
  if (dsn.describe() != catalog_.pool.dsn().describe()) {
    try {
      connect_(dsn);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("server '{}' ({}): {}", name, dsn.describe(), e.what()),
                  e.server_errno());
    }
  }
  catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    c.execute("INSERT IGNORE INTO txmq_servers (name, dsn, added_at) VALUES (?, ?, NOW(6))",
              {name, dsn_text});
  });
}

std::vector<ServerInfo> ShardRegistry::list_servers() {
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(
        fmt::format("SELECT name, dsn, {} FROM txmq_servers ORDER BY name", micros_of("added_at")),
        {});
  });
  std::vector<ServerInfo> out;
  for (const Row& row : r.rows) {
    out.push_back({row.bytes(0), row.bytes(1), time_from_micros(row.i64(2))});
  }
  return out;
}

void ShardRegistry::remove_server(std::string_view name) {
  check_topic_name(name);
  for (const ShardMap& p : all()) {
    if (std::find(p.partitions.begin(), p.partitions.end(), name) != p.partitions.end()) {
      throw Error(Errc::kFailedPrecondition,
                  fmt::format("partitions of topic '{}' live on server '{}': move them "
                              "(txmq partition move) or drop the topic first",
                              p.topic, name));
    }
  }
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute("DELETE FROM txmq_servers WHERE name = ?", {name});
  });
  if (r.affected_rows == 0) {
    throw Error(Errc::kNotFound, fmt::format("no server '{}' is recorded", name));
  }
}

bool ShardRegistry::record(const ShardMap& p) {
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(
        "INSERT IGNORE INTO txmq_placements (topic, epoch, servers, partitions, moving, "
        "created_at) VALUES (?, 1, ?, ?, NULL, NOW(6))",
        {p.topic, join_names(p.servers), join_names(p.partitions)});
  });
  forget(p.topic);
  return r.affected_rows == 1;
}

bool ShardRegistry::replace(const ShardMap& p, std::uint64_t epoch) {
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(
        "UPDATE txmq_placements SET epoch = epoch + 1, servers = ?, partitions = ?, moving = ? "
        "WHERE topic = ? AND epoch = ?",
        {join_names(p.servers), join_names(p.partitions),
         p.moving.empty() ? Param(nullptr) : Param(std::string_view(p.moving)), p.topic, epoch});
  });
  forget(p.topic);
  return r.affected_rows == 1;
}

void ShardRegistry::erase(std::string_view topic) {
  catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    c.execute("DELETE FROM txmq_placements WHERE topic = ?", {topic});
  });
  forget(topic);
}

std::vector<ShardMap> ShardRegistry::all() {
  Result r = catalog_.pool.run(OnLostConnection::kRetry, [&](Connection& c, const Attempt&) {
    return c.execute(fmt::format("{} ORDER BY topic", kSelectPlacement), {});
  });
  std::vector<ShardMap> out;
  for (const Row& row : r.rows) out.push_back(shard_map_from_row(row));
  return out;
}

}  // namespace txmq::internal
