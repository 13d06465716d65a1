// The writer rule's pure parts (db/cluster.h): which member of a Group Replication group may
// take the queue's writes, and which of a member's errors send a statement to the primary.
#include "db/cluster.h"

#include <gtest/gtest.h>

#include "db/connection.h"

namespace txmq::internal {
namespace {

// A member that sees `online` of `members` ONLINE and the rest UNREACHABLE.
NodeState member(std::string state, std::string role, std::uint64_t online,
                 std::uint64_t members) {
  NodeState s;
  s.answered = true;
  s.group = true;
  s.member_state = std::move(state);
  s.member_role = std::move(role);
  s.online_members = online;
  s.members = members;
  s.unreachable_members = members - online;
  return s;
}

TEST(GroupWriterRule, TheOnlinePrimaryOfAMajorityQualifies) {
  EXPECT_TRUE(member("ONLINE", "PRIMARY", 3, 3).qualifies());
  EXPECT_TRUE(member("ONLINE", "PRIMARY", 2, 3).qualifies());  // one member lost: still a majority
  EXPECT_TRUE(member("ONLINE", "PRIMARY", 2, 2).qualifies());
}

TEST(GroupWriterRule, APrimaryInAMinorityDoesNotQualify) {
  // Cut off, or just resumed from a freeze: it still calls itself ONLINE PRIMARY, but its view
  // shows the others UNREACHABLE.
  EXPECT_FALSE(member("ONLINE", "PRIMARY", 1, 3).qualifies());
  EXPECT_FALSE(member("ONLINE", "PRIMARY", 2, 4).qualifies());
}

TEST(GroupWriterRule, RecoveringMembersCountForTheMajority) {
  // A member joining (RECOVERING) votes: one member UNREACHABLE of 4 leaves a majority.
  NodeState s = member("ONLINE", "PRIMARY", 2, 4);
  s.unreachable_members = 1;
  EXPECT_TRUE(s.qualifies());
  s.unreachable_members = 2;
  EXPECT_FALSE(s.qualifies());
}

TEST(GroupWriterRule, SecondariesReadOnlyAndOutOfGroupMembersDoNotQualify) {
  EXPECT_FALSE(member("ONLINE", "SECONDARY", 3, 3).qualifies());
  EXPECT_FALSE(member("RECOVERING", "SECONDARY", 3, 3).qualifies());
  EXPECT_FALSE(member("ERROR", "", 0, 1).qualifies());
  EXPECT_FALSE(member("OFFLINE", "", 0, 0).qualifies());
  NodeState read_only = member("ONLINE", "PRIMARY", 3, 3);
  read_only.super_read_only = true;  // a new primary before it turned writable
  EXPECT_FALSE(read_only.qualifies());
  NodeState silent = member("ONLINE", "PRIMARY", 3, 3);
  silent.answered = false;
  EXPECT_FALSE(silent.qualifies());
}

TEST(GroupWriterRule, GaleraNodesKeepTheirOwnRule) {
  NodeState s;
  s.answered = s.wsrep_on = s.ready = true;
  s.status = "Primary";
  s.state = "Synced";
  EXPECT_TRUE(s.qualifies());
  s.state = "Donor/Desynced";
  EXPECT_FALSE(s.qualifies());
}

TEST(GroupRefusals, StatementsAMemberRefusedWithoutRunningThemGoToThePrimary) {
  for (unsigned e : {1290u, 1836u, 3032u, 3781u, 3782u, 3783u, 3796u, 3797u, 3799u}) {
    EXPECT_TRUE(is_group_refusal(e)) << e;
  }
  // A COMMIT the member could not get certified may have reached the others: not a refusal.
  EXPECT_FALSE(is_group_refusal(3100));
  EXPECT_FALSE(is_group_refusal(1213));
  EXPECT_FALSE(is_group_refusal(1062));
}

}  // namespace
}  // namespace txmq::internal
