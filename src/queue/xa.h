#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

// Exactly-once across two databases (docs/design/exactly-once-across-databases.md): the queue's
// database A and the application's database B. B runs the handler's work in an XA branch; A's
// ordinary commit, which deletes the messages and writes the batch's decision row, is the
// decision; B's branch is then committed. Recovery finishes branches left in doubt by a crash.
// This file holds the two pure pieces: how a branch is named (so that recovery finds txmq's
// branches of one queue server among every branch on B) and what recovery does in each state.
namespace txmq::internal {

// formatID of txmq's branches: "txmq" in ASCII (0x74786D71), below 2^31.
constexpr std::int64_t kXaFormatId = 0x74786D71;

// What a txmq branch's xid says: gtrid "txmq1.<A's instance, 16 hex>.<batch token, 16 hex>",
// bqual "<owner id>.<B's connection id>" (decimal).
struct XaBranchName {
  std::uint64_t instance = 0;    // the queue server A (txmq_schema.instance_id)
  std::uint64_t token = 0;       // the batch: its decision row's key in A
  std::uint64_t owner = 0;       // txmq_consumers.id of the consumer that started it
  std::uint64_t connection = 0;  // B's CONNECTION_ID() of the session that holds it

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

}  // namespace txmq::internal
