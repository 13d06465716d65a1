// txmq::cluster_status (include/txmq/cluster.h).
#include <fmt/format.h>

#include "db/cluster.h"
#include "txmq/cluster.h"
#include "txmq/error.h"

namespace txmq {

ClusterStatus cluster_status(std::string_view dsn_text) {
  const internal::Dsn dsn = internal::parse_dsn(dsn_text);
  ClusterStatus result;
  const internal::NodeState* reader = nullptr;
  const std::vector<internal::NodeState> states = internal::probe_nodes(dsn);
  for (const internal::NodeState& s : states) {
    ClusterNode node;
    node.address = dsn.nodes.at(s.index).describe();
    node.answered = s.answered;
    node.error = s.error;
    node.galera = s.wsrep_on;
    node.state = s.state;
    node.status = s.status;
    node.ready = s.ready;
    node.can_write = s.qualifies();
    node.cluster_size = s.cluster_size;
    node.local_index = s.local_index;
    node.uuid = s.uuid;
    node.group = s.group;
    node.single_primary = s.single_primary;
    node.member_state = s.member_state;
    node.member_role = s.member_role;
    node.view = s.view;
    node.members = s.members;
    node.online_members = s.online_members;
    node.primary = s.primary_address;
    result.group = result.group || s.group;
    if (node.can_write && reader == nullptr) reader = &s;
    result.nodes.push_back(std::move(node));
  }
  if (result.group) {
    // The group elects its primary: the writer is the member clients choose (Cluster).
    const internal::NodeState* writer = nullptr;
    for (const internal::NodeState& s : states) {
      if (!s.qualifies()) continue;
      if (writer == nullptr ||
          std::pair(s.view_epoch, s.view) > std::pair(writer->view_epoch, writer->view)) {
        writer = &s;
      }
    }
    for (std::size_t i = 0; i < states.size(); ++i) {
      result.nodes[i].writer = writer == &states[i];
      if (!result.nodes[i].writer) result.nodes[i].can_write = false;
    }
    if (writer != nullptr) result.writer_address = dsn.nodes.at(writer->index).describe();
    return result;
  }
  if (reader == nullptr) return result;
  try {
    internal::Connection c(dsn.node(reader->index));
    c.query("SET SESSION wsrep_sync_wait = 1");
    internal::Result r = c.execute(
        "SELECT node_uuid, node_address, DATE_FORMAT(changed_at, '%Y-%m-%d %H:%i:%s.%f'), "
        "changed_by FROM txmq_cluster_writer WHERE singleton = 1",
        {});
    if (r.rows.empty()) return result;
    result.writer_address = r.rows[0].bytes(1);
    result.writer_since = r.rows[0].bytes(2);
    result.writer_chosen_by = r.rows[0].bytes(3);
    for (ClusterNode& node : result.nodes) node.writer = node.uuid == r.rows[0].bytes(0);
  } catch (const Error& e) {
    if (e.code() != Errc::kNotFound) throw;  // no client chose a writer yet
  }
  return result;
}

}  // namespace txmq
