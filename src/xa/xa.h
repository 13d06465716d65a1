// xa: exactly-once across databases: XA branches on the resource's server and their recovery.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.h"
#include "db/dsn.h"
#include "txmq/types.h"

// Exactly-once across two databases (docs/design/exactly-once-across-databases.md): the queue's
// database A and the application's database B. B runs the handler's work in an XA branch; A's
// ordinary commit, which deletes the messages and writes the batch's decision row, is the
// decision; B's branch is then committed. Recovery finishes branches left in doubt by a crash.
// This file holds how a branch is named (so that recovery finds txmq's branches of one queue
// server among every branch on B), what recovery does in each state, and a resource's
// connections; xa_process.cc the protocol.
namespace txmq::internal {

// formatID of txmq's branches: "txmq" in ASCII (0x74786D71), below 2^31.
constexpr std::int64_t kXaFormatId = 0x74786D71;

// What a txmq branch's xid says: gtrid "txmq1.<A's instance, 16 hex>.<batch token, 16 hex>",
// bqual "<owner id>.<B's connection id>.<resource, 8 hex>" (decimal, decimal, hex).
struct XaBranchName {
  std::uint64_t instance = 0;    // the queue server A (txmq_schema.instance_id)
  std::uint64_t token = 0;       // the batch: its decision row's key in A
  std::uint64_t owner = 0;       // txmq_consumers.id of the consumer that started it
  std::uint64_t connection = 0;  // B's CONNECTION_ID() of the session that holds it
  // xa_resource_hash of the resource's name: recovery for one resource leaves the branches of
  // others (two resource names may be databases of one server).
  std::uint32_t resource = 0;

  std::string gtrid() const;
  std::string bqual() const;
  // The xid as XA statements take it, in hex literals: X'…',X'…',1954049393.
  std::string sql() const;
  // A row of XA RECOVER (formatID, gtrid_length, bqual_length, data); nullopt for a branch that
  // is not txmq's (another formatID, another shape).
  static std::optional<XaBranchName> from_recovered(std::int64_t format_id,
                                                    std::int64_t gtrid_length,
                                                    std::int64_t bqual_length,
                                                    std::string_view data);
};

// 32-bit FNV-1a of a resource's name, as branch names carry it.
std::uint32_t xa_resource_hash(std::string_view name);

// A's decision row for a batch: none, 'commit' (written by the consumer in the transaction that
// deletes the messages), 'abort' (written by recovery's fence).
enum class XaDecision { kNone, kCommit, kAbort };

enum class XaAction {
  kCommit,    // XA COMMIT the branch
  kRollback,  // XA ROLLBACK the branch
  kFence,     // insert an 'abort' row for the token in A: success ⇒ roll back; duplicate key ⇒
              // the owner committed meanwhile (read again); lock wait timeout ⇒ owner alive
  kWait,      // a branch too young to be anything but a batch in progress: look next pass
  kPurge,     // the branch is finished: delete the decision row
  kNothing,
};

// Recovery's choice for one token. `listed`: the branch is in B's XA RECOVER, read AFTER A's
// decision rows (so a 'commit' row whose branch is not listed is really finished). `age`: how
// long the branch has been seen in doubt (a fresh one is most likely a live batch between its
// PREPARE and A's commit).
XaAction recovery_action(bool listed, XaDecision decision, std::chrono::microseconds age);

// Branches younger than this are left to their owner.
constexpr std::chrono::seconds kXaYoungBranch{5};

// A connection to a resource (B), and its session id (the bqual names who holds a branch).
struct XaConnection {
  std::unique_ptr<Connection> connection;
  std::uint64_t id = 0;
};

// One resource: its connections, and what recovery keeps between passes. A connection goes back
// to the idle list only with no branch on it; one that holds a prepared branch it cannot finish
// is closed (never reset: COM_RESET_CONNECTION corrupts a prepared branch, design doc E10), which
// leaves the branch to recovery.
class XaSite {
 public:
  XaSite(std::string name, Dsn dsn) : name_(std::move(name)), dsn_(std::move(dsn)) {}

  const std::string& name() const { return name_; }
  const Dsn& dsn() const { return dsn_; }
  // An idle connection or a new one (autocommit, no transaction open). The first checks the
  // server: kFailedPrecondition for a Galera node; `warn` tells of unsafe settings.
  XaConnection acquire(const std::function<void(std::string_view)>& warn);
  void release(XaConnection connection);

  // Recovery's state: one pass at a time per process; when branches without a decision were
  // first seen (a young one is most likely a batch in progress); decision records this
  // process's batches finished, deleted by the next batch's transaction.
  std::mutex recovering;
  std::optional<std::chrono::steady_clock::time_point> last_pass;
  std::map<std::uint64_t, std::chrono::steady_clock::time_point> first_seen;
  void finished(std::uint64_t token);
  std::vector<std::uint64_t> take_finished();
  void give_back(const std::vector<std::uint64_t>& tokens);

 private:
  const std::string name_;
  const Dsn dsn_;
  std::mutex mutex_;
  std::vector<XaConnection> idle_;
  bool checked_ = false;
  std::vector<std::uint64_t> finished_;
};

// The resources a client has used, by name; and the queue database's instance id.
class XaSites {
 public:
  // kInvalidArgument for a bad name or DSN, or a name used before with another DSN.
  XaSite& get(const XaResource& resource);
  std::uint64_t instance = 0;  // txmq_schema.instance_id once read; under mutex_
  std::mutex instance_mutex;

 private:
  std::mutex mutex_;
  std::map<std::string, std::pair<std::string, std::unique_ptr<XaSite>>, std::less<>> sites_;
};

}  // namespace txmq::internal
