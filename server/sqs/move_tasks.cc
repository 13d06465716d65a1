#include "server/sqs/move_tasks.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/sqs/wire.h"
#include "util/random.h"

namespace txmq::server {
namespace {

constexpr std::string_view kTable = "txmq_sqs_move_tasks";
constexpr auto kAdoptEvery = std::chrono::seconds(1);

// Thrown out of a step's transaction (which rolls it back) when the task is no longer this
// server's to run: cancelled, or taken over after our lease ran out.
struct NotOurs {};
// Thrown out of a step's transaction when the task cannot go on: it fails with this reason.
struct TaskFailure {
  std::string reason;
};

std::string new_task_id() {
  const std::string b = util::random_bytes(16);
  std::string hex;
  for (unsigned char c : b) hex += fmt::format("{:02x}", c);
  return fmt::format("{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4),
                     hex.substr(16, 4), hex.substr(20));
}

SqlValue optional_text(const std::optional<std::string>& v) {
  return v ? SqlValue(*v) : SqlValue(nullptr);
}

// Messages per step: a fifth of a second's worth at a set rate (so that a slow task moves
// steadily rather than in bursts), else as many as a step takes.
int step_size(std::optional<int> rate, int max_step) {
  if (!rate) return max_step;
  return std::clamp(*rate / 5, 1, max_step);
}

}  // namespace

MoveTasks::MoveTasks(Client& client, QueueCatalog& catalog, MoveTaskOptions options)
    : client_(client),
      catalog_(catalog),
      options_(std::move(options)),
      owner_(fmt::format("{}:{}", client.consumer_name().substr(0, 100), new_task_id().substr(0, 8))) {
  // Looked for first, so that a user without CREATE finds it made (by a server that had it).
  try {
    client_.transact(
        [](Transaction& t) { t.execute("SELECT 1 FROM txmq_sqs_move_tasks LIMIT 0"); });
  } catch (const Error& e) {
    if (e.server_errno() != 1146) throw;  // ER_NO_SUCH_TABLE: make it
    // active_source is the source's name while the task is RUNNING, else NULL: its unique key
    // keeps one active task per source, across servers.
    client_.transact([](Transaction& t) {
      t.execute(
          "CREATE TABLE IF NOT EXISTS txmq_sqs_move_tasks ("
          " seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
          " task_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
          " source VARBINARY(80) NOT NULL,"
          " active_source VARBINARY(80) NULL,"
          " destination VARBINARY(80) NULL,"
          " source_arn VARBINARY(256) NOT NULL,"
          " destination_arn VARBINARY(256) NULL,"
          " rate INT NULL,"
          " status VARCHAR(12) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
          " moved BIGINT UNSIGNED NOT NULL DEFAULT 0,"
          " to_move BIGINT UNSIGNED NOT NULL,"
          " started_ms BIGINT NOT NULL,"
          " failure_reason VARBINARY(1024) NULL,"
          " owner VARCHAR(160) CHARACTER SET ascii COLLATE ascii_bin NULL,"
          " lease_until DATETIME(6) NULL,"
          " UNIQUE KEY task_id (task_id),"
          " UNIQUE KEY active_source (active_source),"
          " KEY source (source, seq)"
          ") ENGINE=InnoDB");
    });
  }
}

MoveTasks::~MoveTasks() { stop(); }

void MoveTasks::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { run(); });
}

void MoveTasks::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string MoveTasks::start_task(const QueueInfo& source, const QueueInfo* destination,
                                  std::optional<int> rate, const std::string& source_arn,
                                  const std::optional<std::string>& destination_arn) {
  // What the task moves: the messages the queue holds now (it stops after that many, oldest
  // first; later dead letters wait for a later task).
  const TopicStats s = client_.stats(source.topic);
  const std::uint64_t to_move = s.ready + s.in_flight + s.delayed + s.waiting_on_key;
  const std::string id = new_task_id();
  std::optional<std::string> destination_name;
  if (destination) destination_name = destination->name;
  const std::int64_t lease_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.lease).count();
  try {
    client_.transact([&](Transaction& t) {
      t.execute(fmt::format("INSERT INTO txmq_sqs_move_tasks (task_id, source, active_source, "
                            "destination, source_arn, destination_arn, rate, status, to_move, "
                            "started_ms, owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, "
                            "'RUNNING', ?, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), ?, "
                            "NOW(6) + INTERVAL {} MICROSECOND)",
                            lease_us),
                {id, source.name, source.name, optional_text(destination_name), source_arn,
                 optional_text(destination_arn), rate ? SqlValue(*rate) : SqlValue(nullptr),
                 to_move, owner_});
    });
  } catch (const Error& e) {
    if (e.server_errno() != 1062) throw;  // ER_DUP_ENTRY on active_source
    fail("UnsupportedOperation",
         "There is already a task running. Only one active task is allowed for a source queue "
         "arn at a given time.");
  }
  // The history kept: the latest tasks of the source.
  try {
    client_.transact([&](Transaction& t) {
      SqlResult r = t.execute(
          "SELECT seq FROM txmq_sqs_move_tasks WHERE source = ? ORDER BY seq DESC LIMIT 1 "
          "OFFSET ?",
          {source.name, kKeptPerSource - 1});
      if (r.rows.empty()) return;
      t.execute(
          "DELETE FROM txmq_sqs_move_tasks WHERE source = ? AND seq < ? AND active_source IS "
          "NULL",
          {source.name, r.rows[0].as_int(0)});
    });
  } catch (const Error& e) {
    warn(fmt::format("old tasks not trimmed: {}", e.what()), id);
  }
  {
    std::lock_guard lock(mutex_);
    adopt_now_ = true;
  }
  wake_.notify_all();
  return id;
}

std::uint64_t MoveTasks::cancel(std::string_view id, std::string_view source) {
  std::uint64_t moved = 0;
  // The step in progress holds the row's lock until it commits: once this update has the lock,
  // the mover's next step finds the task CANCELLED and moves nothing.
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "SELECT status, moved FROM txmq_sqs_move_tasks WHERE task_id = ? AND source = ? FOR "
        "UPDATE",
        {id, source});
    if (r.rows.empty()) fail("ResourceNotFoundException", "Task does not exist.");
    if (r.rows[0].as_string(0) != "RUNNING") {
      fail("UnsupportedOperation",
           fmt::format("The task is {}: only a RUNNING task can be cancelled.",
                       r.rows[0].as_string(0)));
    }
    moved = static_cast<std::uint64_t>(r.rows[0].as_int(1));
    t.execute(
        "UPDATE txmq_sqs_move_tasks SET status = 'CANCELLED', active_source = NULL, owner = "
        "NULL, lease_until = NULL WHERE task_id = ?",
        {id});
  });
  return moved;
}

std::vector<MoveTaskInfo> MoveTasks::list(std::string_view source, std::size_t limit) {
  std::vector<MoveTaskInfo> out;
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "SELECT task_id, destination, source_arn, destination_arn, rate, status, moved, to_move, "
        "started_ms, failure_reason FROM txmq_sqs_move_tasks WHERE source = ? ORDER BY seq DESC "
        "LIMIT ?",
        {source, static_cast<std::int64_t>(limit)});
    out.clear();
    for (const SqlRow& row : r.rows) {
      MoveTaskInfo i;
      i.id = row.as_string(0);
      i.source = std::string(source);
      if (!row.is_null(1)) i.destination = row.as_string(1);
      i.source_arn = row.as_string(2);
      if (!row.is_null(3)) i.destination_arn = row.as_string(3);
      if (!row.is_null(4)) i.rate = static_cast<int>(row.as_int(4));
      i.status = row.as_string(5);
      i.moved = static_cast<std::uint64_t>(row.as_int(6));
      i.to_move = static_cast<std::uint64_t>(row.as_int(7));
      i.started_ms = row.as_int(8);
      i.failure_reason = row.as_string(9);
      out.push_back(std::move(i));
    }
  });
  return out;
}

void MoveTasks::run() {
  auto next_adopt = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    if (adopt_now_ || now >= next_adopt) {
      adopt_now_ = false;
      lock.unlock();
      try {
        adopt();
      } catch (const std::exception& e) {
        warn(fmt::format("tasks not adopted: {}", e.what()), "");
      }
      lock.lock();
      next_adopt = std::chrono::steady_clock::now() + kAdoptEvery;
      continue;
    }
    Held* due = nullptr;
    for (auto& [id, task] : held_) {
      if (due == nullptr || task.due < due->due) due = &task;
    }
    if (due != nullptr && due->due <= now) {
      lock.unlock();
      bool keep = true;
      try {
        keep = step(*due);
      } catch (const std::exception& e) {
        // The database failed (or a commit's outcome is unknown): the next adoption, within a
        // second, reloads the task's count from its row, and the task goes on if still ours.
        warn(fmt::format("step failed, tried again in a second: {}", e.what()), due->id);
        keep = false;
      }
      if (!keep) held_.erase(due->id);
      lock.lock();
      continue;
    }
    const auto until = due != nullptr ? std::min(due->due, next_adopt) : next_adopt;
    wake_.wait_until(lock, until, [&] { return stopping_ || adopt_now_; });
  }
  lock.unlock();
  release();
}

void MoveTasks::adopt() {
  const std::int64_t lease_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.lease).count();
  std::vector<Held> rows;
  client_.transact([&](Transaction& t) {
    // Renews this server's leases and takes the tasks nobody holds (a server that stopped gave
    // them up) or whose holder's lease ran out (it died, or lost the database).
    t.execute(fmt::format("UPDATE txmq_sqs_move_tasks SET owner = ?, lease_until = NOW(6) + "
                          "INTERVAL {} MICROSECOND WHERE active_source IS NOT NULL AND status = "
                          "'RUNNING' AND (owner = ? OR owner IS NULL OR lease_until < NOW(6))",
                          lease_us),
              {owner_, owner_});
    SqlResult r = t.execute(
        "SELECT task_id, source, destination, rate, moved, to_move FROM txmq_sqs_move_tasks "
        "WHERE active_source IS NOT NULL AND status = 'RUNNING' AND owner = ?",
        {owner_});
    rows.clear();
    for (const SqlRow& row : r.rows) {
      Held h;
      h.id = row.as_string(0);
      h.source = row.as_string(1);
      if (!row.is_null(2)) h.destination = row.as_string(2);
      if (!row.is_null(3)) h.rate = static_cast<int>(row.as_int(3));
      h.moved = static_cast<std::uint64_t>(row.as_int(4));
      h.to_move = static_cast<std::uint64_t>(row.as_int(5));
      rows.push_back(std::move(h));
    }
  });
  std::map<std::string, Held> now_held;
  const auto now = std::chrono::steady_clock::now();
  for (Held& h : rows) {
    auto it = held_.find(h.id);
    if (it != held_.end()) {
      now_held.emplace(h.id, std::move(it->second));
    } else {
      if (options_.log) {
        options_.log(LogLevel::kInfo,
                     fmt::format("move task {} of {}: running here ({} of {} moved)", h.id,
                                 h.source, h.moved, h.to_move),
                     {{"task", h.id}, {"source", h.source}, {"moved", h.moved}});
      }
      h.due = now;
      now_held.emplace(h.id, std::move(h));
    }
  }
  held_ = std::move(now_held);  // tasks cancelled or taken over meanwhile are dropped
}

std::string MoveTasks::destination_topic(const Held& task, const Message& m) {
  if (task.destination) {
    auto q = catalog_.find(*task.destination);
    if (!q) throw TaskFailure{"The destination queue does not exist any more."};
    return q->topic;
  }
  if (!m.dead_lettered_from) {
    throw TaskFailure{
        "A message was not dead-lettered from a queue (it was sent to the dead-letter queue "
        "directly): it has no source queue to go back to. Give a DestinationArn."};
  }
  if (!catalog_.name_of_topic(m.dead_lettered_from->topic)) {
    throw TaskFailure{"The source queue of a message does not exist any more."};
  }
  return m.dead_lettered_from->topic;
}

bool MoveTasks::step(Held& task) {
  if (task.moved >= task.to_move) {
    finish(task, "COMPLETED", "");
    return false;
  }
  auto source = catalog_.find(task.source);
  if (!source) {
    finish(task, "FAILED", "The source queue does not exist any more.");
    return false;
  }
  const std::uint64_t left = task.to_move - task.moved;
  const int n = static_cast<int>(
      std::min<std::uint64_t>(left, static_cast<std::uint64_t>(step_size(task.rate, options_.max_step))));
  const bool fifo = source->fifo;
  std::size_t got = 0;
  try {
    // One transaction: the claim from the dead-letter queue, the fence on the task's row, the
    // sends, the task's count, and the acknowledgement. Should it roll back after the claim
    // (the task was cancelled this instant, or cannot go on), the library counts a delivery
    // on the claimed messages, as after any handler that throws.
    ProcessOptions claim;
    claim.max_messages = n;
    got = client_.process(
        source->topic, claim,
        [&](Transaction& t, std::span<const Message> messages) {
          SqlResult r = t.execute(
              "SELECT status, owner FROM txmq_sqs_move_tasks WHERE task_id = ? FOR UPDATE",
              {task.id});
          if (r.rows.empty() || r.rows[0].as_string(0) != "RUNNING" ||
              r.rows[0].as_string(1) != owner_) {
            throw NotOurs{};
          }
          std::map<std::string, std::vector<OutgoingMessage>> by_topic;
          for (const Message& m : messages) {
            OutgoingMessage out;
            out.payload = m.payload;
            out.attributes = m.attributes;  // the message's own and its dedup id, trace header
            if (fifo) out.key = m.key;      // its MessageGroupId; no dedup: it was sent once
            by_topic[destination_topic(task, m)].push_back(std::move(out));
          }
          for (const auto& [topic, batch] : by_topic) t.send_batch(topic, batch);
          t.execute("UPDATE txmq_sqs_move_tasks SET moved = moved + ? WHERE task_id = ?",
                    {static_cast<std::uint64_t>(messages.size()), task.id});
        });
  } catch (const NotOurs&) {
    return false;
  } catch (const TaskFailure& f) {
    finish(task, "FAILED", f.reason);
    return false;
  } catch (const Error& e) {
    if (e.retryable() || e.code() == Errc::kCommitUnknown) throw;  // tried again (run())
    finish(task, "FAILED",
           e.code() == Errc::kNotFound ? "A queue of the task does not exist any more."
                                       : fmt::format("{}", e.what()));
    return false;
  }
  if (got == 0) {  // nothing left to claim: the rest is in flight, or was deleted
    finish(task, "COMPLETED", "");
    return false;
  }
  task.moved += got;
  if (task.moved >= task.to_move) {
    finish(task, "COMPLETED", "");
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (task.rate) {
    // Paced from the step's planned time, so that the rate holds over the task; a task that
    // fell behind (a slow database) does not rush to catch up more than a second.
    const auto spacing = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(static_cast<double>(got) / *task.rate));
    task.due = std::max(task.due, now - std::chrono::seconds(1)) + spacing;
  } else {
    task.due = now;
  }
  return true;
}

bool MoveTasks::finish(const Held& task, std::string_view status, std::string_view reason) {
  bool ours = false;
  client_.transact([&](Transaction& t) {
    SqlResult r = t.execute(
        "UPDATE txmq_sqs_move_tasks SET status = ?, failure_reason = ?, active_source = NULL, "
        "owner = NULL, lease_until = NULL WHERE task_id = ? AND owner = ? AND status = "
        "'RUNNING'",
        {status, reason.empty() ? SqlValue(nullptr) : SqlValue(reason.substr(0, 1000)), task.id,
         owner_});
    ours = r.affected_rows == 1;
  });
  if (ours && options_.log) {
    options_.log(status == "FAILED" ? LogLevel::kWarning : LogLevel::kInfo,
                 fmt::format("move task {} of {}: {} ({} of {} moved){}{}", task.id, task.source,
                             status, task.moved, task.to_move, reason.empty() ? "" : ": ", reason),
                 {{"task", task.id}, {"source", task.source}, {"status", status},
                  {"moved", task.moved}});
  }
  return ours;
}

void MoveTasks::release() {
  try {
    client_.transact([&](Transaction& t) {
      t.execute(
          "UPDATE txmq_sqs_move_tasks SET owner = NULL, lease_until = NULL WHERE active_source "
          "IS NOT NULL AND status = 'RUNNING' AND owner = ?",
          {owner_});
    });
  } catch (const std::exception& e) {
    warn(fmt::format("tasks not given up at stop (peers take them when the lease ends): {}",
                     e.what()),
         "");
  }
  held_.clear();
}

void MoveTasks::warn(std::string_view text, const std::string& task_id) {
  if (!options_.log) return;
  options_.log(LogLevel::kWarning,
               task_id.empty() ? fmt::format("move tasks: {}", text)
                               : fmt::format("move task {}: {}", task_id, text),
               {{"task", task_id}, {"error", text}});
}

}  // namespace txmq::server
