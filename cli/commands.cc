// topic, send, send-batch, receive, ack, nack, extend, stats, inflight, dead, local.
#include <sstream>
#include <fmt/format.h>

#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "txmq/local.h"

namespace txmq::cli {
namespace {

// Checked as signed numbers: an unsigned option would take "-1" as 2^64-1.
const CLI::Range kListLimit(std::int64_t{1}, std::int64_t{1'000'000});

using nlohmann::json;

void print_json(const json& j) { std::fputs((j.dump() + "\n").c_str(), stdout); }

// The worst outcome of a settle decides the exit code; each miss is named on stderr.
int report_settle(Settle s, std::string_view receipt) {
  switch (s) {
    case Settle::kOk:
      return kExitOk;
    case Settle::kLeaseLost:
      print_error(
          fmt::format("receipt {}: lease lost: the message was delivered again to another "
                      "consumer (or released), so this receipt no longer applies",
                      receipt));
      return kExitLeaseLost;
    case Settle::kNotFound:
      print_error(
          fmt::format("receipt {}: no such message (already acknowledged, "
                      "dead-lettered, or never sent)",
                      receipt));
      return kExitNotFound;
  }
  return kExitDatabase;
}

// --group on ack and nack: receipts name their group, so the option is a check that it exists.
void check_group(Client& client, const std::string& topic, const std::string& group) {
  if (group.empty()) return;
  for (const GroupInfo& g : client.list_groups(topic)) {
    if (g.name == group) return;
  }
  throw Error(Errc::kNotFound, fmt::format("topic '{}' has no group '{}'", topic, group));
}

json payload_json(json j, const std::optional<std::string>& key, const std::string& payload) {
  j["key"] = key ? json(is_valid_utf8(*key) ? *key : base64(*key)) : json(nullptr);
  if (is_valid_utf8(payload)) {
    j["payload"] = payload;
  } else {
    j["payload_base64"] = base64(payload);
  }
  return j;
}

int worse(int a, int b) {
  // lease lost (4) outranks not found (3): it is the one that says "your work may be repeated".
  auto rank = [](int c) { return c == kExitLeaseLost ? 2 : c == kExitNotFound ? 1 : 0; };
  return rank(a) >= rank(b) ? a : b;
}

std::string settle_name(Settle s) {
  return s == Settle::kOk ? "ok" : s == Settle::kLeaseLost ? "lease_lost" : "not_found";
}

// {"name": {"type", "value" | "value_base64"}}.
json attributes_json(const Attributes& attributes) {
  json out = json::object();
  for (const auto& [name, a] : attributes) {
    json v = {{"type", a.type}};
    if (is_valid_utf8(a.value)) {
      v["value"] = a.value;
    } else {
      v["value_base64"] = base64(a.value);
    }
    out[name] = std::move(v);
  }
  return out;
}

// --attr NAME=VALUE (type String) or NAME:TYPE=VALUE.
Attributes parse_attributes(const std::vector<std::string>& specs) {
  Attributes out;
  for (const std::string& spec : specs) {
    const std::size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("--attr takes NAME=VALUE or NAME:TYPE=VALUE, not '{}'",
                              printable(spec, 80)));
    }
    std::string name = spec.substr(0, eq);
    AttributeValue v;
    v.value = spec.substr(eq + 1);
    if (const std::size_t colon = name.find(':'); colon != std::string::npos) {
      v.type = name.substr(colon + 1);
      name.resize(colon);
    }
    if (!out.emplace(name, std::move(v)).second) {
      throw Error(Errc::kInvalidArgument,
                  fmt::format("--attr '{}' is given twice", printable(name, 80)));
    }
  }
  return out;
}

json message_json(const Message& m) {
  json j = {{"id", m.id},
            {"receipt", m.receipt},
            {"attempt", m.attempt},
            {"key", m.key ? json(is_valid_utf8(*m.key) ? *m.key : base64(*m.key)) : json(nullptr)},
            {"enqueued_at", iso_time(m.enqueued_at)},
            {"lease_expires_at", iso_time(m.lease_expires_at)},
            {"first_received_at", iso_time(m.first_received_at)},
            {"attributes", attributes_json(m.attributes)}};
  if (m.tenant) j["tenant"] = is_valid_utf8(*m.tenant) ? *m.tenant : base64(*m.tenant);
  if (is_valid_utf8(m.payload)) {
    j["payload"] = m.payload;
  } else {
    j["payload_base64"] = base64(m.payload);
  }
  return j;
}

// Settings shared by `topic create` and `topic set`; unset ones keep their value.
struct TopicSettingArgs {
  std::optional<double> lease, dedup_window, retry_initial, retry_max, retry_multiplier,
      retry_jitter;
  std::optional<int> max_attempts, partitions;
  std::optional<std::uint64_t> max_payload;
  std::optional<double> archive, retention;
  std::optional<std::string> dead_letter_topic;
};

void add_topic_setting_options(CLI::App* cmd, TopicSettingArgs& a) {
  cmd->add_option("--lease", a.lease, "default lease in seconds (30)");
  cmd->add_option("--max-attempts", a.max_attempts,
                  "deliveries before dead-lettering (5; 0: never)");
  cmd->add_option("--max-payload", a.max_payload, "largest payload in bytes (1 MiB)");
  cmd->add_option("--dedup-window", a.dedup_window,
                  "seconds a send's dedup key is remembered (300)");
  cmd->add_option("--retry-initial", a.retry_initial,
                  "seconds before the first retry of a failed delivery (1; 0: at once)");
  cmd->add_option("--retry-multiplier", a.retry_multiplier,
                  "each further retry waits this many times longer (2)");
  cmd->add_option("--retry-max", a.retry_max, "longest retry delay in seconds (300)");
  cmd->add_option("--retry-jitter", a.retry_jitter,
                  "each delay is shortened at random by up to this fraction (0.2)");
  cmd->add_option("--partitions", a.partitions,
                  "partitions, 1 to 64 (1); can be raised later, not lowered");
  cmd->add_option("--archive", a.archive,
                  "seconds to keep acknowledged messages in the archive (0: no archive)");
  cmd->add_option("--dead-letter-topic", a.dead_letter_topic,
                  "send messages past max attempts into this topic instead of the dead-letter "
                  "table (\"\": the table)");
  cmd->add_option("--retention", a.retention,
                  "seconds a message is kept unacknowledged; older ones are deleted, not "
                  "delivered (0: until acknowledged)");
}

void apply_topic_settings(const TopicSettingArgs& a, TopicOptions& o) {
  if (a.lease) o.lease = seconds_to_micros(*a.lease, "--lease");
  if (a.max_attempts) o.max_attempts = *a.max_attempts;
  if (a.max_payload) o.max_payload_bytes = *a.max_payload;
  if (a.dedup_window) o.dedup_window = seconds_to_micros(*a.dedup_window, "--dedup-window");
  if (a.retry_initial) o.retry.initial = seconds_to_micros(*a.retry_initial, "--retry-initial");
  if (a.retry_max) o.retry.max = seconds_to_micros(*a.retry_max, "--retry-max");
  if (a.retry_multiplier) o.retry.multiplier = *a.retry_multiplier;
  if (a.retry_jitter) o.retry.jitter = *a.retry_jitter;
  if (a.partitions) o.partitions = *a.partitions;
  if (a.archive) o.archive = seconds_to_micros(*a.archive, "--archive");
  if (a.retention) o.retention = seconds_to_micros(*a.retention, "--retention");
  if (a.dead_letter_topic) o.dead_letter_topic = *a.dead_letter_topic;
  // A lower initial delay than the default cap is fine; a cap below the initial one is not,
  // unless the user set both.
  if (a.retry_initial && !a.retry_max && o.retry.max < o.retry.initial) o.retry.max = o.retry.initial;
}

nlohmann::json topic_json(const TopicInfo& t) {
  return {{"name", t.name},
          {"lease_seconds", t.options.lease.count() / 1e6},
          {"max_attempts", t.options.max_attempts},
          {"max_payload_bytes", t.options.max_payload_bytes},
          {"dedup_window_seconds", t.options.dedup_window.count() / 1e6},
          {"retry_initial_seconds", t.options.retry.initial.count() / 1e6},
          {"retry_multiplier", t.options.retry.multiplier},
          {"retry_max_seconds", t.options.retry.max.count() / 1e6},
          {"retry_jitter", t.options.retry.jitter},
          {"partitions", t.options.partitions},
          {"archive_seconds", t.options.archive.count() / 1e6},
          {"dead_letter_topic", t.options.dead_letter_topic.empty()
                                    ? nlohmann::json(nullptr)
                                    : nlohmann::json(t.options.dead_letter_topic)},
          {"retention_seconds", t.options.retention.count() / 1e6},
          {"fair", t.options.fair},
          {"storage", t.shared_storage ? "shared" : "dedicated"},
          {"servers", t.options.servers},
          {"placement", t.placement},
          {"placement_epoch", t.placement_epoch},
          {"created_at", iso_time(t.created_at)}};
}

}  // namespace

void add_topic_commands(CLI::App& app, Globals& g) {
  CLI::App* topic = app.add_subcommand("topic", "create, list and drop topics");
  topic->require_subcommand(1);

  auto create_name = std::make_shared<std::string>();
  auto create_settings = std::make_shared<TopicSettingArgs>();
  CLI::App* create = topic->add_subcommand("create",
                                           "create a topic (idempotent when settings "
                                           "match)");
  create->add_option("name", *create_name, "topic name: [a-z][a-z0-9_]{0,47}")->required();
  add_topic_setting_options(create, *create_settings);
  auto create_servers = std::make_shared<std::string>();
  create->add_option("--servers", *create_servers,
                     "shard the topic over these servers (txmq server add), partition p "
                     "on the (p mod N)-th: a,b,c");
  auto create_fair = std::make_shared<bool>(false);
  create->add_flag("--fair", *create_fair,
                   "fair delivery between tenants (txmq send --tenant): a tenant with a backlog "
                   "does not hold the others up (docs/library.md, \"Fair topics\")");
  auto create_storage = std::make_shared<std::string>("dedicated");
  create->add_option("--storage", *create_storage,
                     "dedicated: tables of its own (the default); shared: none of its own, its "
                     "messages in tables that such topics share (no DDL, a few KiB a topic: for "
                     "many small queues; docs/design/shared-queues.md)")
      ->check(CLI::IsMember({"dedicated", "shared"}));
  create->callback([&g, create_name, create_settings, create_servers, create_fair,
                    create_storage] {
    TopicOptions options;
    apply_topic_settings(*create_settings, options);
    options.fair = *create_fair;
    std::stringstream servers(*create_servers);
    for (std::string s; std::getline(servers, s, ',');) {
      if (!s.empty()) options.servers.push_back(s);
    }
    auto client = connect(g);
    bool created = client->create_topic(
        *create_name, options,
        *create_storage == "shared" ? TableCreation::kShared : TableCreation::kNow);
    if (g.json) {
      print_json({{"topic", *create_name}, {"created", created}});
    } else {
      std::printf("%s topic %s\n", created ? "created" : "exists with the same settings:",
                  create_name->c_str());
    }
  });

  auto set_name = std::make_shared<std::string>();
  auto set_settings = std::make_shared<TopicSettingArgs>();
  CLI::App* set = topic->add_subcommand(
      "set", "change a topic's settings (those given; others keep their values)");
  set->add_option("name", *set_name, "topic name")->required();
  add_topic_setting_options(set, *set_settings);
  auto set_fair = std::make_shared<bool>(false);
  set->add_flag("--fair", *set_fair,
                "make the topic fair (an online change of its tables, once; a fair topic stays "
                "fair): docs/library.md, \"Fair topics\"");
  set->callback([&g, set_name, set_settings, set_fair] {
    auto client = connect(g);
    TopicOptions options = client->topic(*set_name).options;
    apply_topic_settings(*set_settings, options);
    if (*set_fair) options.fair = true;
    client->update_topic(*set_name, options);
    if (g.json) {
      print_json(topic_json(client->topic(*set_name)));
    } else {
      std::printf("updated topic %s\n", set_name->c_str());
    }
  });

  CLI::App* list = topic->add_subcommand("list", "list topics");
  list->callback([&g] {
    auto client = connect(g);
    auto topics = client->list_topics();
    if (g.json) {
      for (const TopicInfo& t : topics) print_json(topic_json(t));
      return;
    }
    if (topics.empty()) {
      std::printf("no topics\n");
      return;
    }
    std::printf("%-32s %8s %12s %11s %8s %-22s %5s %9s  %-27s %s\n", "NAME", "LEASE_S",
                "MAX_ATTEMPTS", "MAX_PAYLOAD", "DEDUP_S", "RETRY(S,xMULT,MAX_S,J)", "PARTS",
                "ARCHIVE_S", "CREATED", "SERVERS");
    for (const TopicInfo& t : topics) {
      const RetryPolicy& r = t.options.retry;
      const std::string retry = fmt::format("{:g},x{:g},{:g},{:g}", r.initial.count() / 1e6,
                                            r.multiplier, r.max.count() / 1e6, r.jitter);
      std::string servers;
      for (const std::string& s : t.options.servers) servers += (servers.empty() ? "" : ",") + s;
      std::printf("%-32s %8g %12d %11zu %8g %-22s %5d %9g  %-27s %s\n", t.name.c_str(),
                  t.options.lease.count() / 1e6, t.options.max_attempts,
                  t.options.max_payload_bytes, t.options.dedup_window.count() / 1e6,
                  retry.c_str(), t.options.partitions, t.options.archive.count() / 1e6,
                  iso_time(t.created_at).c_str(), servers.empty() ? "-" : servers.c_str());
    }
  });

  auto show_name = std::make_shared<std::string>();
  CLI::App* show = topic->add_subcommand("show", "a topic's settings and, when sharded, where "
                                                 "each partition lives");
  show->add_option("name", *show_name, "topic name")->required();
  show->callback([&g, show_name] {
    const TopicInfo t = connect(g)->topic(*show_name);
    if (g.json) {
      print_json(topic_json(t));
      return;
    }
    std::printf("%s\n", topic_json(t).dump(2).c_str());
    if (!t.placement.empty()) {
      std::printf("placement (epoch %llu):\n", static_cast<unsigned long long>(t.placement_epoch));
      for (std::size_t p = 0; p < t.placement.size(); ++p) {
        std::printf("  partition %2zu  %s\n", p, t.placement[p].c_str());
      }
    }
  });

  auto drop_name = std::make_shared<std::string>();
  CLI::App* drop = topic->add_subcommand("drop", "drop a topic with its messages and dead letters");
  drop->add_option("name", *drop_name, "topic name")->required();
  drop->callback([&g, drop_name] {
    connect(g)->drop_topic(*drop_name);
    if (g.json) {
      print_json({{"topic", *drop_name}, {"dropped", true}});
    } else {
      std::printf("dropped topic %s\n", drop_name->c_str());
    }
  });
}

void add_message_commands(CLI::App& app, Globals& g) {
  struct SendArgs {
    std::string topic, key, payload, dedup_key, tenant;
    double delay = 0;
    std::vector<std::string> attributes;
  };
  auto sa = std::make_shared<SendArgs>();
  CLI::App* send = app.add_subcommand("send", "send one message; prints its id");
  send->add_option("topic", sa->topic)->required();
  CLI::Option* payload_opt =
      send->add_option("payload", sa->payload, "the payload (default: all of standard input)");
  CLI::Option* key_opt = send->add_option("--key", sa->key, "message key");
  send->add_option("--delay", sa->delay, "seconds before it can be received");
  send->add_option("--attr", sa->attributes,
                   "an attribute stored with the message: NAME=VALUE (type String) or "
                   "NAME:TYPE=VALUE; repeatable")
      ->allow_extra_args(false);  // one value per --attr: a payload may follow
  CLI::Option* dedup_opt = send->add_option(
      "--dedup-key", sa->dedup_key,
      "deduplication key: a send with a key seen in the topic's dedup window sends nothing and "
      "prints the first message's id (safe to retry)");
  CLI::Option* tenant_opt = send->add_option(
      "--tenant", sa->tenant, "whose message it is, on a fair topic (topic create --fair)");
  send->callback([&g, sa, payload_opt, key_opt, dedup_opt, tenant_opt] {
    SendOptions options;
    if (key_opt->count() > 0) options.key = sa->key;
    if (tenant_opt->count() > 0) options.tenant = sa->tenant;
    if (dedup_opt->count() > 0) options.dedup_key = sa->dedup_key;
    options.delay = seconds_to_micros(sa->delay, "--delay");
    options.attributes = parse_attributes(sa->attributes);
    std::string payload = payload_opt->count() > 0 ? sa->payload : read_all(stdin);
    auto id = connect(g)->send(sa->topic, payload, options);
    if (g.json) {
      print_json({{"id", id}});
    } else {
      std::printf("%llu\n", static_cast<unsigned long long>(id));
    }
  });

  struct BatchArgs {
    std::string topic, file;
  };
  auto ba = std::make_shared<BatchArgs>();
  CLI::App* batch = app.add_subcommand(
      "send-batch", "send one message per line of FILE (or stdin) in one transaction");
  batch->add_option("topic", ba->topic)->required();
  CLI::Option* file_opt = batch->add_option("file", ba->file, "input file (default: stdin)");
  batch->callback([&g, ba, file_opt] {
    std::string data;
    if (file_opt->count() > 0) {
      std::FILE* f = std::fopen(ba->file.c_str(), "rb");
      if (f == nullptr) {
        throw Error(Errc::kInvalidArgument, fmt::format("cannot open {}", ba->file));
      }
      data = read_all(f);
      std::fclose(f);
    } else {
      data = read_all(stdin);
    }
    std::vector<OutgoingMessage> messages = batch_lines(data);
    auto ids = connect(g)->send_batch(ba->topic, messages);
    std::uint64_t first = ids.empty() ? 0 : *std::min_element(ids.begin(), ids.end());
    std::uint64_t last = ids.empty() ? 0 : *std::max_element(ids.begin(), ids.end());
    if (g.json) {
      print_json({{"count", ids.size()}, {"first_id", first}, {"last_id", last}});
    } else if (ids.empty()) {
      std::printf("sent 0 messages\n");
    } else {
      std::printf("sent %zu messages, ids %llu..%llu\n", ids.size(),
                  static_cast<unsigned long long>(first), static_cast<unsigned long long>(last));
    }
  });

  struct ReceiveArgs {
    std::string topic;
    int max = 1;
    double lease = 0, wait = 0;
    std::string group;
    std::vector<int> partitions;
  };
  auto ra = std::make_shared<ReceiveArgs>();
  CLI::App* receive = app.add_subcommand("receive", "lease up to --max messages");
  receive->add_option("topic", ra->topic)->required();
  receive->add_option("--max", ra->max, "most messages to lease (1)");
  CLI::Option* lease_opt = receive->add_option("--lease", ra->lease, "lease seconds (topic's)");
  receive->add_option("--wait", ra->wait, "seconds to wait for a message (0)");
  receive->add_option("--group", ra->group, "consumer group (default)");
  receive->add_option("--partition", ra->partitions,
                      "claim only from this partition (repeatable; default: all)");
  receive->callback([&g, ra, lease_opt] {
    ReceiveOptions options;
    options.max_messages = ra->max;
    if (lease_opt->count() > 0) options.lease = seconds_to_micros(ra->lease, "--lease");
    options.wait = seconds_to_micros(ra->wait, "--wait");
    options.group = ra->group;
    options.partitions = ra->partitions;
    auto messages = connect(g)->receive(ra->topic, options);
    for (const Message& m : messages) {
      if (g.json) {
        print_json(message_json(m));
      } else {
        std::printf("id=%llu attempt=%d receipt=%s key=%s\n%s\n",
                    static_cast<unsigned long long>(m.id), m.attempt, m.receipt.c_str(),
                    m.key ? printable(*m.key).c_str() : "-", printable(m.payload, 4096).c_str());
      }
    }
  });

  struct AckArgs {
    std::string topic, group;
    std::vector<std::string> receipts;
  };
  auto aa = std::make_shared<AckArgs>();
  CLI::App* ack = app.add_subcommand("ack", "acknowledge (delete) messages by receipt");
  ack->add_option("topic", aa->topic)->required();
  ack->add_option("receipts", aa->receipts)->required();
  ack->add_option("--group", aa->group,
                  "the group that received them (checked to exist; receipts name their group)");
  ack->callback([&g, aa] {
    auto client = connect(g);
    check_group(*client, aa->topic, aa->group);
    auto results = client->ack(aa->topic, aa->receipts);
    int code = kExitOk;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (g.json) print_json({{"receipt", aa->receipts[i]}, {"result", settle_name(results[i])}});
      code = worse(code, report_settle(results[i], aa->receipts[i]));
    }
    g.exit_code = code;
  });

  struct NackArgs {
    std::string topic, receipt, group;
    std::optional<double> delay;
  };
  auto na = std::make_shared<NackArgs>();
  CLI::App* nack = app.add_subcommand("nack", "give a message back for redelivery");
  nack->add_option("topic", na->topic)->required();
  nack->add_option("receipt", na->receipt)->required();
  nack->add_option("--delay", na->delay,
                   "seconds before it can be received again (default: the topic's retry delay)");
  nack->add_option("--group", na->group,
                   "the group that received it (checked to exist; receipts name their group)");
  nack->callback([&g, na] {
    std::optional<Micros> delay;
    if (na->delay) delay = seconds_to_micros(*na->delay, "--delay");
    auto client = connect(g);
    check_group(*client, na->topic, na->group);
    Settle s = client->nack(na->topic, na->receipt, delay);
    if (g.json) print_json({{"receipt", na->receipt}, {"result", settle_name(s)}});
    g.exit_code = report_settle(s, na->receipt);
  });

  struct ExtendArgs {
    std::string topic, receipt;
    double lease = 0;
  };
  auto ea = std::make_shared<ExtendArgs>();
  CLI::App* extend = app.add_subcommand("extend", "extend a lease to now + --lease seconds");
  extend->add_option("topic", ea->topic)->required();
  extend->add_option("receipt", ea->receipt)->required();
  extend->add_option("--lease", ea->lease, "new lease in seconds from now")->required();
  extend->callback([&g, ea] {
    Settle s = connect(g)->extend(ea->topic, ea->receipt, seconds_to_micros(ea->lease, "--lease"));
    if (g.json) print_json({{"receipt", ea->receipt}, {"result", settle_name(s)}});
    g.exit_code = report_settle(s, ea->receipt);
  });
}

namespace {

// What dead requeue and dead delete print: how many `done` ("requeued", "deleted"); exit 3 when
// some of the `asked` ids (0: all) were not dead letters.
void report_dead_change(Globals& g, const std::string& topic, const char* done, std::size_t n,
                        std::size_t asked) {
  if (g.json) {
    print_json({{"topic", topic}, {done, n}});
  } else {
    std::printf("%s %zu dead letters\n", done, n);
  }
  if (asked > 0 && n < asked) {
    print_error(fmt::format("{} of the {} ids given were not dead letters of {}", asked - n,
                            asked, topic));
    g.exit_code = kExitNotFound;
  }
}

}  // namespace

void add_inspect_commands(CLI::App& app, Globals& g) {
  auto stats_topic = std::make_shared<std::string>();
  auto stats_group = std::make_shared<std::string>();
  CLI::App* stats = app.add_subcommand("stats", "counts of a topic's messages, for one group");
  stats->add_option("topic", *stats_topic)->required();
  stats->add_option("--group", *stats_group, "consumer group (default)");
  stats->callback([&g, stats_topic, stats_group] {
    TopicStats s = connect(g)->stats(*stats_topic, *stats_group);
    if (g.json) {
      print_json({{"topic", s.topic},
                  {"group", s.group},
                  {"lag_seconds", s.lag_seconds},
                  {"ready", s.ready},
                  {"in_flight", s.in_flight},
                  {"delayed", s.delayed},
                  {"waiting_on_key", s.waiting_on_key},
                  {"dead", s.dead},
                  {"oldest_ready_age_seconds", s.oldest_ready_age_seconds}});
    } else {
      std::printf(
          "topic      %s\ngroup      %s\nready      %llu\nin_flight  %llu\ndelayed    %llu\n"
          "waiting_on_key %llu\ndead       %llu\noldest_ready_age_seconds %.3f\nlag_seconds "
          "%.3f\n",
          s.topic.c_str(), s.group.c_str(), static_cast<unsigned long long>(s.ready),
          static_cast<unsigned long long>(s.in_flight), static_cast<unsigned long long>(s.delayed),
          static_cast<unsigned long long>(s.waiting_on_key),
          static_cast<unsigned long long>(s.dead), s.oldest_ready_age_seconds, s.lag_seconds);
    }
  });

  struct ListArgs {
    std::string topic, group;
    std::size_t limit = 1000;
  };
  auto ia = std::make_shared<ListArgs>();
  CLI::App* inflight = app.add_subcommand("inflight", "leased messages with owner and expiry");
  inflight->add_option("topic", ia->topic)->required();
  inflight->add_option("--limit", ia->limit, "most rows (1000)")->check(kListLimit);
  inflight->add_option("--group", ia->group, "consumer group (default)");
  inflight->callback([&g, ia] {
    auto rows = connect(g)->in_flight(ia->topic, ia->limit, ia->group);
    if (!g.json) std::printf("%-20s %-40s %8s  %s\n", "ID", "OWNER", "ATTEMPT", "LEASE_EXPIRES");
    for (const InFlightMessage& m : rows) {
      if (g.json) {
        print_json({{"id", m.id},
                    {"owner", m.owner},
                    {"attempt", m.attempt},
                    {"lease_expires_at", iso_time(m.lease_expires_at)}});
      } else {
        std::printf("%-20llu %-40s %8d  %s\n", static_cast<unsigned long long>(m.id),
                    m.owner.c_str(), m.attempt, iso_time(m.lease_expires_at).c_str());
      }
    }
  });

  CLI::App* dead = app.add_subcommand("dead", "dead letters: list, requeue, delete");
  dead->require_subcommand(1);
  auto da = std::make_shared<ListArgs>();
  CLI::App* dlist = dead->add_subcommand("list", "list dead letters");
  dlist->add_option("topic", da->topic)->required();
  dlist->add_option("--limit", da->limit, "most rows (1000)")->check(kListLimit);
  dlist->add_option("--group", da->group, "consumer group (default)");
  dlist->callback([&g, da] {
    auto rows = connect(g)->dead_letters(da->topic, da->limit, da->group);
    if (!g.json) {
      std::printf("%-20s %8s %-30s %-28s  %s\n", "ID", "ATTEMPTS", "LAST_OWNER", "DIED_AT",
                  "PAYLOAD");
    }
    for (const DeadLetter& d : rows) {
      if (g.json) {
        json j = {
            {"id", d.id},
            {"attributes", attributes_json(d.attributes)},
            {"attempts", d.attempts},
            {"last_owner", d.last_owner},
            {"key", d.key ? json(is_valid_utf8(*d.key) ? *d.key : base64(*d.key)) : json(nullptr)},
            {"enqueued_at", iso_time(d.enqueued_at)},
            {"died_at", iso_time(d.died_at)}};
        if (is_valid_utf8(d.payload)) {
          j["payload"] = d.payload;
        } else {
          j["payload_base64"] = base64(d.payload);
        }
        print_json(j);
      } else {
        std::printf("%-20llu %8d %-30s %-28s  %s\n", static_cast<unsigned long long>(d.id),
                    d.attempts, d.last_owner.c_str(), iso_time(d.died_at).c_str(),
                    printable(d.payload, 60).c_str());
      }
    }
  });

  struct RequeueArgs {
    std::string topic, group;
    std::vector<std::uint64_t> ids;
  };
  auto rq = std::make_shared<RequeueArgs>();
  CLI::App* requeue = dead->add_subcommand("requeue", "move dead letters back (all without ids)");
  requeue->add_option("topic", rq->topic)->required();
  requeue->add_option("ids", rq->ids, "dead letter ids (default: all)");
  requeue->add_option("--group", rq->group, "consumer group (default)");
  requeue->callback([&g, rq] {
    const std::size_t n = connect(g)->requeue_dead(rq->topic, rq->ids, rq->group);
    report_dead_change(g, rq->topic, "requeued", n, rq->ids.size());
  });

  struct DeleteArgs {
    std::string topic, group;
    std::vector<std::uint64_t> ids;
    bool all = false;
  };
  auto dd = std::make_shared<DeleteArgs>();
  CLI::App* ddelete =
      dead->add_subcommand("delete", "delete dead letters for good (the ids given, or --all)");
  ddelete->add_option("topic", dd->topic)->required();
  CLI::Option* ids_option = ddelete->add_option("ids", dd->ids, "dead letter ids");
  ddelete->add_flag("--all", dd->all, "every dead letter of the group")->excludes(ids_option);
  ddelete->add_option("--group", dd->group, "consumer group (default)");
  ddelete->callback([&g, dd] {
    if (dd->ids.empty() && !dd->all) {
      throw CLI::ValidationError("ids", "give the ids to delete, or --all");
    }
    const std::size_t n = connect(g)->delete_dead(dd->topic, dd->ids, dd->group);
    report_dead_change(g, dd->topic, "deleted", n, dd->ids.size());
  });
}

void add_group_commands(CLI::App& app, Globals& g) {
  CLI::App* group = app.add_subcommand("group", "consumer groups: create, list, drop");
  group->require_subcommand(1);

  struct GroupArgs {
    std::string topic, group, from = "now";
  };
  auto ca = std::make_shared<GroupArgs>();
  CLI::App* create = group->add_subcommand(
      "create", "create a group: it receives every message sent from now on (or retained)");
  create->add_option("topic", ca->topic)->required();
  create->add_option("group", ca->group, "group name: [a-z][a-z0-9_]{0,47}")->required();
  create->add_option("--from", ca->from,
                     "now: messages sent from now on; earliest: also every message retained");
  create->callback([&g, ca] {
    if (ca->from != "now" && ca->from != "earliest") {
      throw Error(Errc::kInvalidArgument, "--from must be 'now' or 'earliest'");
    }
    bool created = connect(g)->create_group(
        ca->topic, ca->group, ca->from == "now" ? GroupStart::kNow : GroupStart::kEarliest);
    if (g.json) {
      print_json({{"topic", ca->topic}, {"group", ca->group}, {"created", created}});
    } else {
      std::printf("%s group %s of topic %s\n", created ? "created" : "exists already:",
                  ca->group.c_str(), ca->topic.c_str());
    }
  });

  auto la = std::make_shared<GroupArgs>();
  CLI::App* list = group->add_subcommand("list", "list a topic's groups with their counts");
  list->add_option("topic", la->topic)->required();
  list->callback([&g, la] {
    auto client = connect(g);
    auto groups = client->list_groups(la->topic);
    if (!g.json) {
      std::printf("%-32s %10s %10s %10s %10s %10s  %s\n", "GROUP", "READY", "IN_FLIGHT",
                  "DELAYED", "DEAD", "LAG_S", "CREATED");
    }
    for (const GroupInfo& info : groups) {
      const TopicStats s = client->stats(la->topic, info.name);
      if (g.json) {
        print_json({{"group", info.name},
                    {"ready", s.ready},
                    {"in_flight", s.in_flight},
                    {"delayed", s.delayed},
                    {"waiting_on_key", s.waiting_on_key},
                    {"dead", s.dead},
                    {"lag_seconds", s.lag_seconds},
                    {"created_at", iso_time(info.created_at)}});
      } else {
        std::printf("%-32s %10llu %10llu %10llu %10llu %10.3f  %s\n", info.name.c_str(),
                    static_cast<unsigned long long>(s.ready),
                    static_cast<unsigned long long>(s.in_flight),
                    static_cast<unsigned long long>(s.delayed),
                    static_cast<unsigned long long>(s.dead), s.lag_seconds,
                    iso_time(info.created_at).c_str());
      }
    }
  });

  auto da = std::make_shared<GroupArgs>();
  CLI::App* drop = group->add_subcommand("drop", "drop a group with its messages and dead letters");
  drop->add_option("topic", da->topic)->required();
  drop->add_option("group", da->group)->required();
  drop->callback([&g, da] {
    connect(g)->drop_group(da->topic, da->group);
    if (g.json) {
      print_json({{"topic", da->topic}, {"group", da->group}, {"dropped", true}});
    } else {
      std::printf("dropped group %s of topic %s\n", da->group.c_str(), da->topic.c_str());
    }
  });
}

// txmq purge TOPIC [--group G] [--forget-dedup-keys]: deletes a group's waiting, in-flight and
// delayed messages (as SQS's PurgeQueue).
void add_purge_command(CLI::App& app, Globals& g) {
  struct PurgeArgs {
    std::string topic, group;
    bool forget = false;
  };
  auto pa = std::make_shared<PurgeArgs>();
  CLI::App* purge = app.add_subcommand(
      "purge", "delete a group's messages: ready, in flight, delayed and waiting on their key "
               "(not its dead letters); prints how many");
  purge->add_option("topic", pa->topic)->required();
  purge->add_option("--group", pa->group, "consumer group (default)");
  purge->add_flag("--forget-dedup-keys", pa->forget,
                  "also forget the topic's dedup keys (later sends with them are new messages)");
  purge->callback([&g, pa] {
    auto client = connect(g);
    const std::uint64_t n = client->purge(pa->topic, pa->group);
    if (pa->forget) client->forget_dedup_keys(pa->topic);
    if (g.json) {
      print_json({{"topic", pa->topic}, {"purged", n}});
    } else {
      std::printf("%llu\n", static_cast<unsigned long long>(n));
    }
  });
}

// txmq sql install: the SQL interface's procedures (docs/sql.md), as this DSN's user.
void add_sql_commands(CLI::App& app, Globals& g) {
  CLI::App* sql = app.add_subcommand("sql", "the SQL interface: procedures applications CALL");
  sql->require_subcommand(1);
  sql->add_subcommand("install", "(re)install txmq's stored procedures as this DSN's user "
                                 "(their definer); migrations do it when their user may")
      ->callback([&g] {
        connect(g)->install_sql_interface();
        if (g.json) {
          print_json({{"installed", true}});
        } else {
          std::printf("installed\n");
        }
      });
}

void add_archive_commands(CLI::App& app, Globals& g) {
  add_purge_command(app, g);
  CLI::App* archive = app.add_subcommand("archive", "acknowledged messages kept: list, purge");
  archive->require_subcommand(1);

  struct ArchiveArgs {
    std::string topic;
    std::uint64_t from = 0;
    std::size_t limit = 1000;
  };
  auto la = std::make_shared<ArchiveArgs>();
  CLI::App* list = archive->add_subcommand("list", "list archived messages in id order");
  list->add_option("topic", la->topic)->required();
  list->add_option("--from", la->from, "first id (0)")
      ->check(CLI::Range(std::int64_t{0}, std::numeric_limits<std::int64_t>::max()));
  list->add_option("--limit", la->limit, "most rows (1000)")->check(kListLimit);
  list->callback([&g, la] {
    auto rows = connect(g)->archived(la->topic, la->from, la->limit);
    if (!g.json) std::printf("%-20s %-28s %-28s  %s\n", "ID", "ENQUEUED_AT", "ACKED_AT", "PAYLOAD");
    for (const ArchivedMessage& m : rows) {
      if (g.json) {
        print_json(payload_json({{"id", m.id},
                                 {"enqueued_at", iso_time(m.enqueued_at)},
                                 {"acked_at", iso_time(m.acked_at)},
                                 {"attributes", attributes_json(m.attributes)}},
                                m.key, m.payload));
      } else {
        std::printf("%-20llu %-28s %-28s  %s\n", static_cast<unsigned long long>(m.id),
                    iso_time(m.enqueued_at).c_str(), iso_time(m.acked_at).c_str(),
                    printable(m.payload, 60).c_str());
      }
    }
  });

  auto pa = std::make_shared<ArchiveArgs>();
  CLI::App* purge = archive->add_subcommand(
      "purge", "delete archived messages past the topic's archive period, 1,000 rows at a time");
  purge->add_option("topic", pa->topic)->required();
  purge->callback([&g, pa] {
    const std::uint64_t n = connect(g)->purge_archive(pa->topic);
    if (g.json) {
      print_json({{"topic", pa->topic}, {"purged", n}});
    } else {
      std::printf("purged %llu archived messages of topic %s\n",
                  static_cast<unsigned long long>(n), pa->topic.c_str());
    }
  });
}

void add_server_commands(CLI::App& app, Globals& g) {
  CLI::App* server = app.add_subcommand(
      "server", "servers that topics may be sharded over (docs/shards.md)");
  server->require_subcommand(1);
  auto add_args = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* add = server->add_subcommand(
      "add", "record a server by name: its DSN may not hold a password (use password-file=PATH "
             "or password-env=NAME)");
  add->add_option("name", add_args->first, "server name: [a-z][a-z0-9_]{0,47}")->required();
  add->add_option("dsn", add_args->second, "mysql://user@host:port/database?password-file=PATH")
      ->required();
  add->callback([&g, add_args] {
    connect(g)->add_server(add_args->first, add_args->second);
    if (g.json) {
      print_json({{"server", add_args->first}, {"added", true}});
    } else {
      std::printf("added server %s\n", add_args->first.c_str());
    }
  });
  server->add_subcommand("list", "list the recorded servers")->callback([&g] {
    const std::vector<ServerInfo> servers = connect(g)->list_servers();
    if (g.json) {
      for (const ServerInfo& s : servers) {
        print_json({{"name", s.name}, {"dsn", s.dsn}, {"added_at", iso_time(s.added_at)}});
      }
      return;
    }
    if (servers.empty()) {
      std::printf("no servers\n");
      return;
    }
    std::printf("%-24s %-27s %s\n", "NAME", "ADDED", "DSN");
    for (const ServerInfo& s : servers) {
      std::printf("%-24s %-27s %s\n", s.name.c_str(), iso_time(s.added_at).c_str(),
                  s.dsn.c_str());
    }
  });
  auto remove_name = std::make_shared<std::string>();
  CLI::App* remove =
      server->add_subcommand("remove", "forget a server (refused while partitions live on it)");
  remove->add_option("name", *remove_name, "server name")->required();
  remove->callback([&g, remove_name] {
    connect(g)->remove_server(*remove_name);
    if (g.json) {
      print_json({{"server", *remove_name}, {"removed", true}});
    } else {
      std::printf("removed server %s\n", remove_name->c_str());
    }
  });

  CLI::App* partition = app.add_subcommand("partition", "partitions of a sharded topic");
  partition->require_subcommand(1);
  struct MoveArgs {
    std::string topic, to;
    int partition = 0;
  };
  auto move_args = std::make_shared<MoveArgs>();
  CLI::App* move = partition->add_subcommand(
      "move", "move a partition, with its messages, to another server while sends go on");
  move->add_option("topic", move_args->topic, "topic name")->required();
  move->add_option("partition", move_args->partition, "partition number (0-based)")->required();
  move->add_option("--to", move_args->to, "server name")->required();
  move->callback([&g, move_args] {
    const auto start = std::chrono::steady_clock::now();
    connect(g)->move_partition(move_args->topic, move_args->partition, move_args->to);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (g.json) {
      print_json({{"topic", move_args->topic},
                  {"partition", move_args->partition},
                  {"server", move_args->to},
                  {"seconds", took}});
    } else {
      std::printf("partition %d of topic %s is on server %s (%.2f s)\n", move_args->partition,
                  move_args->topic.c_str(), move_args->to.c_str(), took);
    }
  });
}

void add_local_commands(CLI::App& app, Globals& g) {
  CLI::App* local = app.add_subcommand("local", "the embedded MariaDB server in TXMQ_HOME");
  local->require_subcommand(1);
  auto print_status = [&g](const LocalServerStatus& s) {
    if (g.json) {
      print_json({{"home", s.home},
                  {"running", s.running},
                  {"pid", s.pid ? json(*s.pid) : json(nullptr)},
                  {"socket", s.socket},
                  {"dsn", s.dsn}});
    } else if (s.running) {
      std::printf("running (pid %d) in %s\nDSN: %s\n", *s.pid, s.home.c_str(), s.dsn.c_str());
    } else {
      std::printf("not running (home %s)\n", s.home.c_str());
    }
  };
  local->add_subcommand("status", "is it running, where, with which DSN")->callback([print_status] {
    print_status(LocalServer::status({}));
  });
  local->add_subcommand("start", "start it (commands start it on demand anyway)")
      ->callback([print_status] {
        LocalServer::ensure_running({});
        print_status(LocalServer::status({}));
      });
  local->add_subcommand("stop", "stop it (by its pid file) and wait for it to exit")
      ->callback([&g] {
        bool stopped = LocalServer::stop({});
        if (g.json) {
          print_json({{"stopped", stopped}});
        } else {
          std::printf(stopped ? "stopped\n" : "not running\n");
        }
      });
}

}  // namespace txmq::cli
