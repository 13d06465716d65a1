// txmq xa status | recover: exactly-once across two databases (Client::process_xa, docs/library.md
// "Exactly-once across databases"): the batches a resource holds in doubt, and one recovery pass.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli.h"

namespace txmq::cli {
namespace {

using nlohmann::json;

// recover's exit code when branches of consumers still at work are left in doubt: its own, so
// that a script tells it from a usage error (1) or a database that is down (2).
constexpr int kExitLiveBranches = 6;

void print_json(const json& j) { std::fputs((j.dump() + "\n").c_str(), stdout); }

// The rule XaResource::name follows (the library checks it again): [a-z][a-z0-9_]{0,47}.
bool is_resource_name(std::string_view name) {
  if (name.empty() || name.size() > 48 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// --resource NAME=DSN. Refused (exit 5, as a bad name or DSN anywhere else) before anything
// connects. The DSN's password, if it has one, is never echoed.
XaResource parse_resource(const std::string& spec) {
  std::string shown = spec;  // for messages: without a password the DSN may hold
  if (const auto [offset, length] = password_span(shown); length > 0) {
    shown.replace(offset, length, "***");
  }
  const std::size_t eq = spec.find('=');
  // "mysql://...?socket=..." alone: its first '=' is the DSN's own.
  const bool dsn_only = spec.substr(0, eq).find("://") != std::string::npos;
  if (eq == std::string::npos || dsn_only) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("--resource takes NAME=DSN (such as ledger=mysql://app@db2/ledger), "
                            "not '{}': {}",
                            printable(shown, 120),
                            dsn_only || spec.find("://") != std::string::npos
                                ? "the resource's name and the '=' before its DSN are missing"
                                : "the '=' and the resource's DSN after it are missing"));
  }
  XaResource r{spec.substr(0, eq), spec.substr(eq + 1)};
  if (!is_resource_name(r.name)) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("--resource: '{}' is not a resource name: it must be the name the "
                            "consumers give process_xa, [a-z][a-z0-9_]{{0,47}} (a lower-case "
                            "letter, then lower-case letters, digits or _, up to 48 in all)",
                            printable(r.name, 80)));
  }
  if (r.dsn.empty()) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("--resource {}=: the DSN of the resource's database is missing "
                            "(mysql://user@host:port/database)",
                            r.name));
  }
  return r;
}

// Errors of the calls name the resource, so that a typo in its DSN is not taken for trouble
// with the queue's own database. Keeps the code (and with it the exit code).
[[noreturn]] void rethrow_for(const XaResource& r, const Error& e) {
  throw Error(e.code(), fmt::format("resource '{}': {}", r.name, e.what()), e.server_errno(),
              std::string(e.sqlstate()), std::string(e.server_message()));
}

std::string hex_token(std::uint64_t token) { return fmt::format("{:016x}", token); }

// 42s, 3m05s, 2h07m, 3d04h.
std::string age_text(double seconds) {
  if (seconds < 0) seconds = 0;
  const auto s = static_cast<long long>(seconds);
  if (s < 60) return fmt::format("{:.1f}s", seconds);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::optional<double> decision_age(const XaBranchStatus& s) {
  if (!s.decided_at) return std::nullopt;
  return std::chrono::duration<double>(Clock::now() - *s.decided_at).count();
}

std::string action_meaning(const std::string& action) {
  if (action == "commit") {
    return "the batch committed in the queue's database: recovery commits its branch";
  }
  if (action == "rollback") return "the batch was aborted: recovery rolls its branch back";
  if (action == "fence") {
    return "no decision recorded: recovery rolls the branch back if its consumer died before "
           "committing, and leaves it to the consumer if that is still at work";
  }
  if (action == "purge") return "both sides are done: recovery deletes the decision record";
  return "";
}

void print_status(const XaResource& r, const std::vector<XaBranchStatus>& list, bool as_json) {
  if (as_json) {
    json out = json::array();
    for (const XaBranchStatus& s : list) {
      const bool recorded = !s.decision.empty();
      const std::optional<double> age = decision_age(s);
      out.push_back({{"token", hex_token(s.token)},
                     {"prepared", s.prepared},
                     {"decision", recorded ? json(s.decision) : json(nullptr)},
                     {"owner_id", s.owner_id},
                     {"topic", recorded ? json(s.topic) : json(nullptr)},
                     {"group", recorded ? json(s.group) : json(nullptr)},
                     {"first_id", recorded ? json(s.first_id) : json(nullptr)},
                     {"messages", recorded ? json(s.messages) : json(nullptr)},
                     {"decided_at", s.decided_at ? json(iso_time(*s.decided_at)) : json(nullptr)},
                     {"decision_age_seconds", age ? json(*age) : json(nullptr)},
                     {"action", s.action}});
    }
    print_json(out);
    return;
  }
  if (list.empty()) {
    std::printf("nothing in doubt on resource %s\n", r.name.c_str());
    return;
  }
  std::vector<std::vector<std::string>> rows = {{"TOKEN", "PREPARED", "DECISION", "OWNER",
                                                 "TOPIC/GROUP", "FIRST ID", "MESSAGES",
                                                 "DECIDED", "ACTION"}};
  std::vector<std::string> actions;
  for (const XaBranchStatus& s : list) {
    const bool recorded = !s.decision.empty();
    const std::optional<double> age = decision_age(s);
    rows.push_back({hex_token(s.token), s.prepared ? "yes" : "no",
                    recorded ? s.decision : "none", std::to_string(s.owner_id),
                    recorded ? s.topic + "/" + s.group : "-",
                    recorded ? std::to_string(s.first_id) : "-",
                    recorded ? std::to_string(s.messages) : "-",
                    age ? age_text(*age) + " ago" : "-", s.action});
    if (std::find(actions.begin(), actions.end(), s.action) == actions.end()) {
      actions.push_back(s.action);
    }
  }
  std::vector<std::size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += i + 1 == row.size() ? row[i] : fmt::format("{:<{}}  ", row[i], widths[i]);
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("\n");
  for (const std::string& a : actions) {
    const std::string meaning = action_meaning(a);
    if (!meaning.empty()) std::printf("%-8s  %s\n", a.c_str(), meaning.c_str());
  }
  std::printf("Consumers using the resource run recovery every 10 s; `txmq xa recover` runs it "
              "now.\n");
}

}  // namespace

void add_xa_commands(CLI::App& app, Globals& g) {
  CLI::App* xa = app.add_subcommand(
      "xa", "exactly-once across two databases (Client::process_xa): the batches a resource "
            "holds in doubt after a crash, and their recovery");
  xa->require_subcommand(1);
  const std::string resource_help =
      "the application's database that the consumers' process_xa writes to, as NAME=DSN: NAME "
      "is the resource's name as the consumers give it (XaResource::name, [a-z][a-z0-9_]{0,47}), "
      "DSN its mysql://user@host:port/database (password-file=PATH or password-env=NAME keep the "
      "password off the command line). The queue's database is --dsn's, as for every command";

  auto status_spec = std::make_shared<std::string>();
  CLI::App* status = xa->add_subcommand(
      "status", "list the resource's branches in doubt and the decision records left, with what "
                "recovery will do to each; changes nothing");
  status->add_option("--resource", *status_spec, resource_help)
      ->required()
      ->type_name("NAME=DSN");
  status->footer(
      "Example: txmq xa status --resource ledger=mysql://app@db2/ledger?password-file=/etc/pw");
  status->callback([&g, status_spec] {
    const XaResource r = parse_resource(*status_spec);
    auto client = connect(g);
    std::vector<XaBranchStatus> list;
    try {
      list = client->xa_status(r);
    } catch (const Error& e) {
      rethrow_for(r, e);
    }
    print_status(r, list, g.json);
  });

  auto recover_spec = std::make_shared<std::string>();
  CLI::App* recover = xa->add_subcommand(
      "recover",
      "run one recovery pass now: commit the branches whose batch committed, roll back those "
      "whose consumer died before its batch committed, delete decision records no longer "
      "needed. Branches of consumers still at work are left alone. Exit 0 when nothing is left "
      "in doubt, 6 when such branches remain. Safe to run at any time, from anywhere");
  recover->add_option("--resource", *recover_spec, resource_help)
      ->required()
      ->type_name("NAME=DSN");
  recover->footer(
      "Example: txmq xa recover --resource ledger=mysql://app@db2/ledger?password-file=/etc/pw");
  recover->callback([&g, recover_spec] {
    const XaResource r = parse_resource(*recover_spec);
    auto client = connect(g);
    XaRecovery done;
    try {
      done = client->recover_xa(r);
    } catch (const Error& e) {
      rethrow_for(r, e);
    }
    if (g.json) {
      print_json({{"resource", r.name},
                  {"committed", done.committed},
                  {"rolled_back", done.rolled_back},
                  {"purged", done.purged},
                  {"live", done.live}});
    } else {
      std::printf("committed    %zu  branches whose batch had committed in the queue\n",
                  done.committed);
      std::printf("rolled back  %zu  branches whose consumer died before its batch committed\n",
                  done.rolled_back);
      std::printf("purged       %zu  decision records no longer needed\n", done.purged);
      std::printf("live         %zu  branches of consumers still at work, left to them\n",
                  done.live);
      if (done.live == 0) std::printf("nothing left in doubt on resource %s\n", r.name.c_str());
    }
    if (done.live > 0) {
      const bool one = done.live == 1;
      print_error(fmt::format(
          "{} branch{} on resource '{}' {} still in doubt: {} to {} still running (an open "
          "transaction in the queue's database), which finish{} {}. If {} died instead, "
          "running `txmq xa recover` again later finishes {}",
          done.live, one ? "" : "es", r.name, one ? "is" : "are",
          one ? "it belongs" : "they belong", one ? "a consumer" : "consumers", one ? "es" : "",
          one ? "it" : "them", one ? "that consumer" : "those consumers", one ? "it" : "them"));
      g.exit_code = kExitLiveBranches;
    }
  });
}

}  // namespace txmq::cli
