#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace txmq {

// One node of a DSN's host list, as a probe saw it (docs/galera.md, docs/group-replication.md).
struct ClusterNode {
  std::string address;  // host:port, as the DSN names it
  bool answered = false;
  std::string error;    // why it did not answer
  bool galera = false;  // wsrep_on
  std::string state;    // wsrep_local_state_comment: Synced, Joining, Donor/Desynced, ...
  std::string status;   // wsrep_cluster_status: Primary, non-Primary
  bool ready = false;   // wsrep_ready
  bool can_write = false;  // synced, ready, in the primary component
  std::uint64_t cluster_size = 0;
  std::uint64_t local_index = 0;
  std::string uuid;   // wsrep_gcomm_uuid: new at each start of the node; a group's server_uuid
  bool writer = false;  // the node txmq's clients write through
  // MySQL Group Replication: the member as it sees itself.
  bool group = false;          // a member of a group (the plugin runs with a group name)
  bool single_primary = true;  // group_replication_single_primary_mode (txmq refuses OFF)
  std::string member_state;    // ONLINE, RECOVERING, UNREACHABLE, ERROR, OFFLINE
  std::string member_role;     // PRIMARY, SECONDARY
  std::uint64_t view = 0;      // the counter of its VIEW_ID
  std::uint64_t members = 0;   // in its view
  std::uint64_t online_members = 0;
  std::string primary;         // host:port of the primary in its view, as the group reports it
};

struct ClusterStatus {
  std::vector<ClusterNode> nodes;
  bool group = false;  // the nodes are members of a Group Replication group
  // Galera:
  // The writer row (txmq_cluster_writer), read through a node that can write; empty when no
  // node can, or no client chose a writer yet.
  std::string writer_address;
  std::string writer_since;  // UTC
  std::string writer_chosen_by;
};

// Probes every node of `dsn` (a host list, or one host) without choosing or moving the writer
// (on a group: the writer is the ONLINE PRIMARY of the newest view where a majority is ONLINE):
// for `txmq cluster status` and monitoring. Throws Error(kInvalidArgument) for a bad DSN;
// nodes that cannot be reached are reported in the result (an error reading the writer's row
// from a node that has just answered the probe is thrown).
ClusterStatus cluster_status(std::string_view dsn);

}  // namespace txmq
