#pragma once

// Dead-letter redrive (SQS's message move tasks): tasks that move the messages of a dead-letter
// queue back to the queues they were dead-lettered from, or to one named queue. A task is a row
// of the server's own table, txmq_sqs_move_tasks, so that it outlives the txmq serve that
// started it; every txmq serve of the database runs a mover that leases the RUNNING tasks no
// live server holds and moves their messages in steps, each step one transaction of the
// library's exactly-once processing (claimed from the dead-letter queue, sent to the
// destination, acknowledged, and the task's count raised): a crash loses and repeats nothing.
//
// Thread safety: every member may be called from any thread; the mover runs on a thread of its
// own between start() and stop().
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/base/log.h"
#include "server/sqs/queues.h"
#include "txmq/client.h"

namespace txmq::server {

// One task as ListMessageMoveTasks shows it.
struct MoveTaskInfo {
  std::string id;
  std::string source;                      // the dead-letter queue's name
  std::optional<std::string> destination;  // empty: each message to the queue it came from
  std::string source_arn;
  std::optional<std::string> destination_arn;
  std::optional<int> rate;  // MaxNumberOfMessagesPerSecond as given
  std::string status;       // RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED
  std::uint64_t moved = 0;
  std::uint64_t to_move = 0;  // counted when the task started
  std::int64_t started_ms = 0;
  std::string failure_reason;
};

struct MoveTaskOptions {
  Log log;
  // How long a server's hold on a task lasts without renewal (it renews every second): a server
  // that dies holding tasks leaves them to its peers, or to itself restarted, this long after.
  std::chrono::milliseconds lease{10000};
  // The most messages one step (one transaction) moves.
  int max_step = 100;
};

class MoveTasks {
 public:
  // Creates txmq_sqs_move_tasks when missing.
  MoveTasks(Client& client, QueueCatalog& catalog, MoveTaskOptions options);
  ~MoveTasks();
  MoveTasks(const MoveTasks&) = delete;
  MoveTasks& operator=(const MoveTasks&) = delete;

  // The mover's thread: runs this server's tasks, and every second adopts the RUNNING tasks
  // whose holder's lease ran out. stop() lets a step in progress commit, gives the tasks up (a
  // peer, or this server restarted, takes them at once) and joins.
  void start();
  void stop();

  // Starts a task (RUNNING, held by this server) and returns its id. `destination` null: each
  // message goes back to the queue it was dead-lettered from. Throws SqsError
  // UnsupportedOperation when a task of `source` is RUNNING already.
  std::string start_task(const QueueInfo& source, const QueueInfo* destination,
                         std::optional<int> rate, const std::string& source_arn,
                         const std::optional<std::string>& destination_arn);
  // Cancels a RUNNING task of `source` and returns how many messages it moved: a step in
  // progress commits first, none follows. Throws SqsError ResourceNotFoundException when there
  // is no such task, UnsupportedOperation when it is not RUNNING.
  std::uint64_t cancel(std::string_view id, std::string_view source);
  // The latest `limit` tasks of `source`, the most recent first.
  std::vector<MoveTaskInfo> list(std::string_view source, std::size_t limit);

  // Tasks kept per source queue, the active one included (ListMessageMoveTasks shows 10).
  static constexpr int kKeptPerSource = 10;

 private:
  // A task this server runs (only the mover's thread sees these).
  struct Held {
    std::string id;
    std::string source;
    std::optional<std::string> destination;
    std::optional<int> rate;
    std::uint64_t moved = 0;
    std::uint64_t to_move = 0;
    std::chrono::steady_clock::time_point due;  // its next step
  };
  void run();
  void adopt();
  // One step of `task`: false when the task is done here (finished, failed, or no longer ours).
  bool step(Held& task);
  // Sets a held task's final status; false when it was no longer ours.
  bool finish(const Held& task, std::string_view status, std::string_view reason);
  void release();
  std::string destination_topic(const Held& task, const Message& m);
  void warn(std::string_view text, const std::string& task_id);

  Client& client_;
  QueueCatalog& catalog_;
  const MoveTaskOptions options_;
  const std::string owner_;  // this server's name on the rows it holds

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool adopt_now_ = false;
  std::map<std::string, Held> held_;  // by task id; only the mover's thread uses it
  std::thread thread_;
};

}  // namespace txmq::server
