// txmq cluster status: the nodes of a host-list DSN and the writer (docs/galera.md,
// docs/group-replication.md).
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "txmq/cluster.h"

namespace txmq::cli {

using nlohmann::json;

namespace {
void print_json(const json& j) { std::fputs((j.dump() + "\n").c_str(), stdout); }
}  // namespace

void add_cluster_command(CLI::App& app, Globals& g) {
  CLI::App* cluster = app.add_subcommand("cluster", "the nodes of a Galera cluster or Group Replication group, and the writer");
  cluster->require_subcommand(1);
  CLI::App* status = cluster->add_subcommand(
      "status", "probe every node of the DSN's host list; exit 2 when no node can take writes");
  status->callback([&g] {
    const ClusterStatus s = cluster_status(resolve_dsn(g));
    bool writable = false;
    for (const ClusterNode& n : s.nodes) writable = writable || n.can_write;
    if (g.json) {
      json nodes = json::array();
      for (const ClusterNode& n : s.nodes) {
        nodes.push_back({{"address", n.address},     {"answered", n.answered},
                         {"error", n.error},         {"galera", n.galera},
                         {"state", n.state},         {"status", n.status},
                         {"ready", n.ready},         {"can_write", n.can_write},
                         {"cluster_size", n.cluster_size}, {"local_index", n.local_index},
                         {"uuid", n.uuid},           {"writer", n.writer}});
        if (n.group) {
          nodes.back().update({{"group", true},
                               {"single_primary", n.single_primary},
                               {"member_state", n.member_state},
                               {"member_role", n.member_role},
                               {"view", n.view},
                               {"members", n.members},
                               {"online_members", n.online_members},
                               {"primary", n.primary}});
        }
      }
      print_json({{"nodes", nodes},
                  {"writer", s.writer_address.empty() ? json(nullptr) : json(s.writer_address)},
                  {"writer_since", s.writer_since},
                  {"writer_chosen_by", s.writer_chosen_by}});
    } else if (s.group) {
      std::printf("%-24s %-8s %-12s %-10s %-6s %-8s %s\n", "member", "writer", "state", "role",
                  "view", "online", "server_uuid");
      for (const ClusterNode& n : s.nodes) {
        if (!n.answered) {
          std::printf("%-24s %-8s %s\n", n.address.c_str(), "", printable(n.error).c_str());
        } else if (!n.group) {
          std::printf("%-24s %-8s not a member of a group\n", n.address.c_str(), "");
        } else {
          std::printf("%-24s %-8s %-12s %-10s %-6llu %-8s %s%s\n", n.address.c_str(),
                      n.writer ? "writer" : "", n.member_state.c_str(),
                      n.member_role.empty() ? "-" : n.member_role.c_str(),
                      static_cast<unsigned long long>(n.view),
                      fmt::format("{}/{}", n.online_members, n.members).c_str(), n.uuid.c_str(),
                      n.single_primary ? "" : " (multi-primary: txmq refuses it)");
        }
      }
      if (s.writer_address.empty()) std::printf("no member can take writes now\n");
    } else {
      std::printf("%-24s %-8s %-16s %-12s %-5s %s\n", "node", "writer", "state", "status",
                  "size", "uuid");
      for (const ClusterNode& n : s.nodes) {
        if (!n.answered) {
          std::printf("%-24s %-8s %s\n", n.address.c_str(), "", printable(n.error).c_str());
        } else if (!n.galera) {
          std::printf("%-24s %-8s not a Galera node (wsrep_on = OFF)\n", n.address.c_str(), "");
        } else {
          std::printf("%-24s %-8s %-16s %-12s %-5llu %s%s\n", n.address.c_str(),
                      n.writer ? "writer" : "", n.state.c_str(), n.status.c_str(),
                      static_cast<unsigned long long>(n.cluster_size), n.uuid.c_str(),
                      n.ready ? "" : " (not ready)");
        }
      }
      if (!s.writer_address.empty()) {
        std::printf("writer since %s UTC, chosen by %s\n", s.writer_since.c_str(),
                    s.writer_chosen_by.c_str());
      }
    }
    if (!writable) g.exit_code = kExitDatabase;
  });
}

}  // namespace txmq::cli
