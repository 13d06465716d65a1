#pragma once

// The SQS protocol over a txmq Client: decides each request's protocol (AWS JSON 1.0 when it has
// an X-Amz-Target header, else the Query protocol), checks its signature, runs the action on a
// pool of worker threads, and answers in the request's own protocol. Long polls wait on
// Client::subscribe and a timer, not on a thread; concurrent single sends and deletes of a queue
// share transactions (group commit).
//
// The folder: wire.h (the two wire formats and SQS's errors), digests.h, queues.h (SQS queues
// over topics), this service (service.cc: reading, dispatching and answering requests), the
// actions by family (queue_actions.cc, attribute_actions.cc, send_actions.cc,
// receive_actions.cc, receipt_actions.cc, move_task_actions.cc, permission_actions.cc; their
// input readers in inputs.h and messages.h), the group commit (group_commit.h) and the
// dead-letter redrive's tasks (move_tasks.h).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "server/auth/sigv4.h"
#include "server/base/log.h"
#include "server/http/http.h"
#include "server/sqs/group_commit.h"
#include "server/sqs/queues.h"
#include "server/sqs/wire.h"
#include "txmq/client.h"

namespace txmq::server {

class MoveTasks;
struct SqsError;

// Why a request that a browser on another site could have sent is refused when the server has
// no --credentials (so that any well-formed signature passes): a Host that is not a loopback
// name (DNS rebinding), an Origin header, Sec-Fetch-Site other than none or same-origin, or a
// signature in the query string. nullopt: not refused (always, with credentials).
std::optional<SqsError> cross_site_refusal(const RequestHeader& request, bool with_credentials);

// Takes a request that is not an SQS call (ServiceOptions::web): true when it did.
using WebHandler = std::function<bool(HttpRequest& request, Responder& respond,
                                      const std::shared_ptr<const Credentials>& credentials)>;

// Counts and times an answered request (ServiceOptions::record_request): its action, whether
// it was a Txmq.<Action>, its outcome ("ok" or the SQS error code) and its seconds.
using RequestRecorder = std::function<void(std::string_view action, bool txmq_action,
                                           std::string_view outcome, double seconds)>;

// What an SQS request asks, read only from what its signature covers.
struct SqsRequest {
  enum class Protocol { kQuery, kJson };
  Protocol protocol = Protocol::kJson;
  std::string action;
  bool txmq_action = false;  // X-Amz-Target: Txmq.<Action>
  nlohmann::json input;      // the action's input in the JSON protocol's shape
  std::string host;          // the Host header: queue URLs are built from it
  std::string path;          // the request's path, without its query
  std::string region;        // the region it was signed for: its answers' ARNs are in it
};

// Reads an SQS request into `out`: refuses what a browser on another site would send
// (cross_site_refusal), chooses the protocol (set first, so that a refusal is answered in
// it), checks the signature (verify(); `credentials` null: any well-formed one), and parses the
// input with bounded depth and size. Throws SqsError. No database: also run by a fuzzer.
void read_request(const HttpRequest& request, const Credentials* credentials,
                  const Regions& regions, std::chrono::system_clock::time_point now,
                  SqsRequest& out);

struct ServiceOptions {
  // The regions answered (--region); answers are in each request's own.
  Regions regions = Regions("us-east-1");
  std::string account = "000000000000";
  // The --credentials file; empty: any well-formed signature is accepted.
  std::string credentials_file;
  // CreateQueue makes a queue's tables at its first use (--tables-at-first-use): an empty
  // queue is its catalog rows only, but the SQL interface cannot send to it before then.
  bool tables_at_first_use = false;
  // CreateQueue puts a queue in shared storage (--queue-storage shared): no tables of its own,
  // no DDL (TableCreation::kShared); over tables_at_first_use.
  bool shared_storage = false;
  // Threads that run actions (library calls block); long polls do not hold one.
  int workers = 16;
  // Where errors and credential reloads are logged, one line each (never a secret).
  Log log;
  // Requests that are not SQS API calls (/healthz and /readyz, the dashboard, /metrics): called
  // on an HTTP thread for every request before the SQS dispatch, with the credentials in force
  // (null without --credentials); returns true when it took the request, which it then answers
  // through `respond` (posting any work that blocks to threads of its own). txmq serve chains
  // its web endpoints here (server/app/sqs_server.cc).
  WebHandler web;
  // Where each answered request is counted and timed (GET /metrics); empty: not counted.
  RequestRecorder record_request;
  // A request not answered this long after it arrived (a long poll: after its wait) gets 503
  // ServiceUnavailable, which SDKs retry: a database that stopped answering (frozen, cut off)
  // must not hold callers for ever. What the late action then does is not reported; a send
  // may still commit (at-least-once: the retry sends it again).
  std::chrono::milliseconds request_timeout{10000};
};

struct Counters {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> polls_held{0};
  // Group commit: transactions of single sends and deletes, and the calls they settled.
  std::atomic<std::uint64_t> send_groups{0};
  std::atomic<std::uint64_t> sends_grouped{0};
  std::atomic<std::uint64_t> delete_groups{0};
  std::atomic<std::uint64_t> deletes_grouped{0};
};

class SqsService {
 public:
  SqsService(Client& client, boost::asio::io_context& io, ServiceOptions options);
  ~SqsService();

  // Before a request's body is read (the HTTP layer's admission): an SQS request refused by
  // what its headers show (cross_site_refusal, precheck: no or a malformed signature, an
  // unknown key, a stale date) is answered without reading its body; one that passes may send
  // up to body_limit bytes (SQS's largest request, or Txmq.SendMessageBatch's).
  struct BodyAdmission {
    std::size_t body_limit = kDefaultBodyLimit;
    std::optional<SqsError> refusal;
    bool json = false;  // the protocol the refusal is answered in
    std::optional<HttpResponse> web_refusal;  // of /metrics or the dashboard: 401 or 403
    bool credentialed = false;                // Admission::credentialed
  };
  static constexpr std::size_t kMaxTxmqBatchBody = 64u << 20;  // 10,000 messages
  // A Query request of 1 MiB: a binary attribute's base64 of '+' and '/' percent-encodes to
  // 4 MiB, and the parameters' names come on top.
  static constexpr std::size_t kMaxQueryBody = 5u << 20;
  static constexpr std::size_t kMaxDashboardBody = 1u << 20;    // /ui/
  BodyAdmission admit_body(const RequestHeader& header) const;
  // admit_body() as the HTTP layer's AdmissionCheck (HttpServerOptions::admission).
  Admission admit(const RequestHeader& header) const;

  // Every HTTP request (from the HTTP threads). A request of up to kReadOnHttpThread bytes is
  // read and checked there; a single SendMessage or DeleteMessage of a queue in the catalog's
  // cache is then queued for its group commit there too, without a hop to a worker (the group
  // commit itself runs on a worker). The rest is posted to the workers.
  void handle(HttpRequest&& request, Responder respond);
  static constexpr std::size_t kReadOnHttpThread = 64u << 10;
  // Re-reads the credentials file (SIGHUP); keeps the old keys when the new file is broken.
  void reload_credentials();
  // Starts running dead-letter redrive tasks (StartMessageMoveTask) on a thread of the
  // service's: those started here, and those another server left (stopped, or died holding
  // them). Until then tasks are recorded but run only by other servers of the database.
  void start_move_tasks();
  // Long polls answer now with what they have; later polls do not wait. Then waits for the
  // workers to finish what they run, and stops the move tasks (a peer or a restart resumes them).
  void shutdown();
  const Counters& counters() const { return counters_; }
  // The ReceiptHandle this server gives for a library receipt of `queue` (for a load generator
  // that leases through the library and deletes over HTTP).
  std::string receipt_handle(std::string_view queue, std::string_view receipt) const {
    return catalog_.seal(queue, receipt);
  }

  struct Call;
  struct Poll;

 private:
  void execute(const std::shared_ptr<Call>& call);
  // Runs a read call on the HTTP thread when nothing it does blocks; false: post it to a worker.
  bool dispatch_on_http_thread(const std::shared_ptr<Call>& call);
  void dispatch(const std::shared_ptr<Call>& call);
  void reply(Call& call, const nlohmann::json& output);
  void reply_error(Call& call, std::exception_ptr error);
  // The SQS error a caller sees for an exception (the database's errors mapped to SQS's).
  static SqsError sqs_error_of(std::exception_ptr error);
  void count_request(const Call& call, std::string_view outcome);
  // Deadlines: calls not answered yet, looked at every quarter second.
  void track(const std::shared_ptr<Call>& call);
  void untrack(const Call& call);
  void watch_deadlines();
  void reply_timeout(Call& call);
  // The keys in force (SIGHUP may replace them); null without --credentials.
  std::shared_ptr<const Credentials> current_credentials() const;

  // Queues (queue_actions.cc).
  nlohmann::json create_queue(Call& call);
  nlohmann::json get_queue_url(Call& call);
  nlohmann::json list_queues(Call& call);
  nlohmann::json delete_queue(Call& call);
  nlohmann::json purge_queue(Call& call);
  nlohmann::json list_dead_letter_source_queues(Call& call);
  // The queue a call names by its QueueUrl, and the URL of a queue as this call reached us.
  std::shared_ptr<const QueueInfo> queue_of(Call& call);
  std::string queue_url(const Call& call, std::string_view name) const;

  // Attributes and tags (attribute_actions.cc).
  nlohmann::json get_queue_attributes(Call& call);
  nlohmann::json set_queue_attributes(Call& call);
  nlohmann::json tag_queue(Call& call);
  nlohmann::json untag_queue(Call& call);
  nlohmann::json list_queue_tags(Call& call);

  // Sending (send_actions.cc).
  void send_message(const std::shared_ptr<Call>& call);
  nlohmann::json send_message_batch(Call& call, std::size_t max_entries);
  // SendMessageBatch of a standard queue: its entries join the topic's group commit.
  void send_message_batch_grouped(const std::shared_ptr<Call>& call);

  // Receiving, with the long poll (receive_actions.cc).
  void receive_message(const std::shared_ptr<Call>& call);
  nlohmann::json message_json(const Poll& poll, const Message& m);
  void try_claim(const std::shared_ptr<Poll>& poll);
  void finish_poll(const std::shared_ptr<Poll>& poll, std::vector<Message> messages);

  // Deleting and visibility, by ReceiptHandle (receipt_actions.cc).
  void delete_message(const std::shared_ptr<Call>& call);
  void delete_message_batch(const std::shared_ptr<Call>& call);
  nlohmann::json change_message_visibility(Call& call);
  nlohmann::json change_message_visibility_batch(Call& call);

  // Dead-letter redrive (move_task_actions.cc).
  nlohmann::json start_message_move_task(Call& call);
  nlohmann::json list_message_move_tasks(Call& call);
  nlohmann::json cancel_message_move_task(Call& call);
  // The queue an ARN names (ResourceNotFoundException naming `parameter` when none).
  std::shared_ptr<const QueueInfo> queue_of_arn(const std::string& arn, const char* parameter);

  // The queue's policy (permission_actions.cc).
  nlohmann::json add_permission(Call& call);
  nlohmann::json remove_permission(Call& call);

  // A batch call whose entries are settled by group commits (group_commit.cc): each entry's
  // outcome is gathered here, and the last one answers the call.
  struct BatchGather;
  void gather(const std::shared_ptr<Call>& call, BatchGather& batch, nlohmann::json success,
              std::exception_ptr error);
  // Queues a batch call's valid entries, entry i (whose Id is ids[i]) by enqueue(i); answers
  // at once when none is valid (batch->failed holds the refused ones), and fails the entries
  // not queued when queuing stops (the server is stopping).
  void queue_entries(const std::shared_ptr<Call>& call, const std::shared_ptr<BatchGather>& batch,
                     const std::vector<std::string>& ids,
                     const std::function<void(std::size_t)>& enqueue);

  // Group commit of single sends and deletes, per topic (group_commit.cc).
  struct PendingSend {
    std::shared_ptr<const Call> call;  // not sent once the call was answered (timed out)
    OutgoingMessage message;
    std::function<void(std::uint64_t id, std::exception_ptr error)> done;
  };
  struct PendingDelete {
    std::shared_ptr<const Call> call;
    std::string receipt;
    std::function<void(Settle outcome, std::exception_ptr error)> done;
  };
  void enqueue_send(const std::string& topic, PendingSend pending);
  void drain_sends(const std::string& topic);
  void enqueue_delete(const std::string& topic, PendingDelete pending);
  void drain_deletes(const std::string& topic);
  template <typename Pending>
  void enqueue(CommitGroups<Pending>& groups, void (SqsService::*drain)(const std::string&),
               const std::string& topic, Pending pending);
  template <typename Pending, typename Outcome>
  void answer_group(CommitGroups<Pending>& groups, const std::string& topic,
                    std::vector<Pending> group, std::vector<Outcome> outcomes);

  Client& client_;
  boost::asio::io_context& io_;
  const ServiceOptions options_;
  QueueCatalog catalog_;
  boost::asio::thread_pool workers_;
  mutable std::mutex credentials_mutex_;
  std::shared_ptr<const Credentials> credentials_;  // null: no --credentials
  mutable Counters counters_;  // admit() counts refusals too
  // Refused signatures and keys: one line each, at most 10 per 10 s (a flood is counted).
  mutable LogThrottle refusal_log_{10, std::chrono::seconds(10)};
  void log_failure(const SqsError& e, std::string_view action, const std::string& request_id) const;
  std::mutex posting_mutex_;  // handle() posts and shutdown() stops under it
  std::atomic<bool> stopping_{false};
  std::mutex calls_mutex_;
  std::map<const Call*, std::weak_ptr<Call>> calls_;  // not answered yet
  boost::asio::steady_timer deadline_timer_;
  std::mutex polls_mutex_;
  std::set<std::shared_ptr<Poll>> polls_;
  // One drain at a time per topic for its sends, one for its deletes (group_commit.cc).
  CommitGroups<PendingSend> sends_{1};
  CommitGroups<PendingDelete> deletes_{1};
  // FIFO ReceiveRequestAttemptId: the answer given, for retries within 5 minutes.
  std::mutex attempts_mutex_;
  struct Attempt {
    std::chrono::steady_clock::time_point at;
    nlohmann::json answer;
    std::size_t bytes;  // about what the answer holds in memory
  };
  std::map<std::string, Attempt> receive_attempts_;
  std::size_t attempts_bytes_ = 0;
  std::unique_ptr<MoveTasks> move_tasks_;
};

}  // namespace txmq::server
