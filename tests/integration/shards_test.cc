// A topic sharded over three servers (docs/shards.md): the fixture's server is the
// catalog and server s1; CTest's txmq_server fixture starts s2 and s3 too, in TXMQ_SHARD_HOMES (set
// by tests/CMakeLists.txt; the environment variable overrides it).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "engine/partitions.h"
#include "catalog/names.h"
#include "support.h"
#include "txmq/local.h"

namespace txmq::test {
namespace {

std::vector<std::string> shard_homes() {
  const char* env = std::getenv("TXMQ_SHARD_HOMES");
  std::vector<std::string> homes;
  std::stringstream in(env ? env : TXMQ_SHARD_HOMES);
  for (std::string h; std::getline(in, h, ',');) homes.push_back(h);
  return homes;
}

// Records s1 (the fixture's own database), s2 and s3 in the catalog.
// Sends SIGCONT to a server a test SIGSTOPped, at now() or at the end of the scope.
struct Thaw {
  int pid;
  bool done = false;
  void now() {
    if (!done) ::kill(pid, SIGCONT);
    done = true;
  }
  ~Thaw() { now(); }
};

std::unique_ptr<Client> spread_client(const std::string& name = {}) {
  auto c = client(name);
  c->add_server("s1", dsn());
  const std::vector<std::string> homes = shard_homes();
  if (homes.size() != 2) throw std::runtime_error("TXMQ_SHARD_HOMES must name two homes");
  c->add_server("s2", LocalServer::status({homes[0]}).dsn);
  c->add_server("s3", LocalServer::status({homes[1]}).dsn);
  return c;
}

std::string create_spread(Client& c, const std::string& suffix, int partitions = 6) {
  const std::string topic = topic_for_test(suffix);
  TopicOptions o;
  o.partitions = partitions;
  o.servers = {"s1", "s2", "s3"};
  o.lease = std::chrono::seconds(5);
  EXPECT_TRUE(c.create_topic(topic, o));
  return topic;
}

unsigned partition_of(std::uint64_t id) { return internal::partition_of(id); }

// A MariaDB server of the test's own (to stop and start), stopped when the test ends.
struct PrivateServer {
  std::string home = scratch_dir();
  std::string dsn = LocalServer::ensure_running({home});
  PrivateServer() = default;
  PrivateServer(const PrivateServer&) = delete;
  PrivateServer& operator=(const PrivateServer&) = delete;
  ~PrivateServer() { LocalServer::stop({home}); }
};

// Receives and acks until `total` messages came (counting from `got`) or `tries` receives
// were made, pausing between them; `check` sees each message. Returns the new count.
std::size_t ack_until(Client& c, const std::string& topic, std::size_t got, std::size_t total,
                      int tries, std::chrono::milliseconds pause,
                      const std::function<void(const Message&)>& check = {}) {
  ReceiveOptions ro;
  ro.max_messages = 100;
  for (int t = 0; t < tries && got < total; ++t) {
    for (const Message& m : c.receive(topic, ro)) {
      if (check) check(m);
      ++got;
      c.ack(topic, m.receipt);
    }
    std::this_thread::sleep_for(pause);
  }
  return got;
}

TEST(Shards, EveryMessageDeliveredOnceWithKeyOrderAcrossThreeServers) {
  auto c = spread_client();
  const std::string topic = create_spread(*c, "all");
  const TopicInfo info = c->topic(topic);
  ASSERT_EQ(info.placement, (std::vector<std::string>{"s1", "s2", "s3", "s1", "s2", "s3"}));
  EXPECT_FALSE(c->create_topic(topic, [] {
    TopicOptions o;
    o.partitions = 6;
    o.servers = {"s1", "s2", "s3"};
    o.lease = std::chrono::seconds(5);
    return o;
  }()));

  constexpr int kKeys = 12, kPerKey = 20, kUnkeyed = 300;
  std::vector<std::thread> senders;
  std::mutex mutex;
  std::map<std::uint64_t, std::string> sent;  // id -> payload
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      auto mine = client(fmt::format("sender{}", t));
      for (int i = t; i < kUnkeyed; i += 4) {
        const std::string payload = fmt::format("u{}", i);
        const std::uint64_t id = mine->send(topic, payload);
        std::lock_guard lock(mutex);
        sent[id] = payload;
      }
    });
  }
  // Keyed: one thread per group of keys, so that each key's sends are in order.
  for (int t = 0; t < 3; ++t) {
    senders.emplace_back([&, t] {
      auto mine = client(fmt::format("keyed{}", t));
      for (int n = 0; n < kPerKey; ++n) {
        for (int k = t; k < kKeys; k += 3) {
          SendOptions so;
          so.key = fmt::format("key{}", k);
          const std::string payload = fmt::format("key{}:{}", k, n);
          const std::uint64_t id = mine->send(topic, payload, so);
          std::lock_guard lock(mutex);
          sent[id] = payload;
        }
      }
    });
  }
  for (std::thread& t : senders) t.join();
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kUnkeyed + kKeys * kPerKey));
  std::set<unsigned> partitions;
  for (const auto& [id, payload] : sent) partitions.insert(partition_of(id));
  EXPECT_EQ(partitions.size(), 6u) << "every partition, so every server, got messages";

  std::map<std::uint64_t, int> delivered;
  std::map<std::string, std::vector<int>> per_key;
  std::atomic<bool> stop{false};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 4; ++t) {
    consumers.emplace_back([&, t] {
      auto mine = client(fmt::format("consumer{}", t));
      while (!stop) {
        ReceiveOptions ro;
        ro.max_messages = 16;
        ro.wait = std::chrono::milliseconds(300);
        for (const Message& m : mine->receive(topic, ro)) {
          {
            std::lock_guard lock(mutex);
            ++delivered[m.id];
            if (m.key) per_key[*m.key].push_back(std::stoi(m.payload.substr(m.payload.find(':') + 1)));
          }
          EXPECT_EQ(mine->ack(topic, m.receipt), Settle::kOk);
        }
      }
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mutex);
      if (delivered.size() == sent.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (std::thread& t : consumers) t.join();
  EXPECT_EQ(delivered.size(), sent.size());
  for (const auto& [id, n] : delivered) {
    EXPECT_EQ(n, 1) << "id " << id;
    EXPECT_TRUE(sent.count(id)) << "unexpected id " << id;
  }
  for (const auto& [key, seq] : per_key) {
    ASSERT_EQ(seq.size(), static_cast<std::size_t>(kPerKey)) << key;
    for (int n = 0; n < kPerKey; ++n) EXPECT_EQ(seq[n], n) << key;
  }
  const TopicStats s = c->stats(topic);
  EXPECT_EQ(s.ready + s.in_flight + s.delayed + s.waiting_on_key, 0u);
  c->drop_topic(topic);
  EXPECT_THROW(c->topic(topic), Error);
}

TEST(Shards, BatchesCommitWholeOnOneServerOrAreRefused) {
  auto c = spread_client();
  const std::string topic = create_spread(*c, "batch");
  std::vector<OutgoingMessage> batch(2000);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].payload = fmt::format("b{}", i);
  const TopicInfo info = c->topic(topic);
  for (int round = 0; round < 3; ++round) {
    const std::vector<std::uint64_t> ids = c->send_batch(topic, batch);
    ASSERT_EQ(ids.size(), batch.size());
    std::set<std::string> servers;
    for (std::uint64_t id : ids) servers.insert(info.placement.at(partition_of(id)));
    EXPECT_EQ(servers.size(), 1u) << "a batch commits on one server";
  }
  // Keys that map to partitions on different servers: refused, nothing written.
  std::vector<OutgoingMessage> keyed(40);
  for (std::size_t i = 0; i < keyed.size(); ++i) {
    keyed[i].payload = "k";
    keyed[i].key = fmt::format("k{}", i);
  }
  const std::uint64_t before = c->stats(topic).ready;
  try {
    c->send_batch(topic, keyed);
    FAIL() << "a batch over servers was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("commits on one server"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c->stats(topic).ready, before);
  // Keys of one server's partitions go whole.
  std::vector<OutgoingMessage> one_server;
  for (int i = 0; one_server.size() < 30; ++i) {
    OutgoingMessage m;
    m.payload = "k";
    m.key = fmt::format("key{}", i);
    if (info.placement[internal::partition_of_key(*m.key, 6)] == "s2") one_server.push_back(m);
  }
  EXPECT_EQ(c->send_batch(topic, one_server).size(), 30u);
  EXPECT_EQ(c->stats(topic).ready, before + 30);
  c->drop_topic(topic);
}

TEST(Shards, GroupsAndExactlyOnceOnEveryServer) {
  auto c = spread_client();
  const std::string topic = create_spread(*c, "groups");
  EXPECT_TRUE(c->create_group(topic, "audit"));
  for (int i = 0; i < 120; ++i) c->send(topic, fmt::format("m{}", i));
  std::size_t processed = 0;
  for (int tries = 0; tries < 200 && processed < 120; ++tries) {
    ProcessOptions po;
    po.max_messages = 10;
    po.wait = std::chrono::milliseconds(200);
    processed += c->process(topic, po, [](Transaction&, std::span<const Message>) {});
  }
  EXPECT_EQ(processed, 120u);
  std::set<std::uint64_t> audit;
  for (int tries = 0; tries < 200 && audit.size() < 120; ++tries) {
    ReceiveOptions ro;
    ro.group = "audit";
    ro.max_messages = 50;
    ro.wait = std::chrono::milliseconds(200);
    std::vector<std::string> receipts;
    for (const Message& m : c->receive(topic, ro)) {
      EXPECT_TRUE(audit.insert(m.id).second);
      receipts.push_back(m.receipt);
    }
    for (Settle s : c->ack(topic, receipts)) EXPECT_EQ(s, Settle::kOk);
  }
  EXPECT_EQ(audit.size(), 120u);
  EXPECT_EQ(c->list_groups(topic).size(), 2u);
  c->drop_topic(topic);
}

// More partitions for a sharded topic are placed as at creation (p mod the server list), on
// every member, and take messages at once; fewer are refused.
TEST(Shards, NewPartitionsArePlacedLikeTheFirstOnes) {
  auto c = spread_client();
  const std::string topic = create_spread(*c, "grow", 3);
  TopicOptions more = c->topic(topic).options;
  more.partitions = 6;
  c->update_topic(topic, more);
  const TopicInfo info = c->topic(topic);
  EXPECT_EQ(info.options.partitions, 6);
  EXPECT_EQ(info.placement, (std::vector<std::string>{"s1", "s2", "s3", "s1", "s2", "s3"}));
  std::set<unsigned> used;
  for (int i = 0; used.size() < 6 && i < 200; ++i) {
    SendOptions so;
    so.key = fmt::format("k{}", i);
    used.insert(partition_of(c->send(topic, "m", so)));
  }
  EXPECT_EQ(used.size(), 6u) << "keys reach the new partitions";
  const std::size_t sent = static_cast<std::size_t>(c->stats(topic).ready);
  EXPECT_EQ(ack_until(*c, topic, 0, sent, 50, std::chrono::milliseconds(0)), sent);
  more.partitions = 4;
  EXPECT_THROW(c->update_topic(topic, more), Error);
  c->drop_topic(topic);
}

TEST(Shards, AMovedPartitionLosesNothingAndFencesStaleClients) {
  auto c = spread_client("mover");
  const std::string topic = create_spread(*c, "move");
  auto stale = client("stale");
  // A key of partition 1 (on s2).
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    if (internal::partition_of_key(fmt::format("key{}", i), 6) == 1) key = fmt::format("key{}", i);
  }
  SendOptions so;
  so.key = key;
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(stale->send(topic, fmt::format("{}", i), so));
  ReceiveOptions ro;
  ro.partitions = {1};
  const std::vector<Message> held = c->receive(topic, ro);  // in flight across the move
  ASSERT_EQ(held.size(), 1u);
  // The target numbers its consumers on its own: one more there first, so that a copied id
  // would name the wrong one.
  {
    ClientOptions other;
    other.dsn = LocalServer::status({shard_homes()[1]}).dsn;
    other.consumer_name = fmt::format("someone-else-{}", ::getpid());
    auto s3 = std::make_unique<Client>(other);
    const std::string scratch = topic_for_test("scratch");
    s3->create_topic(scratch);
    s3->receive(scratch);  // registers the consumer on s3
    s3->drop_topic(scratch);
  }
  c->move_partition(topic, 1, "s3");
  EXPECT_EQ(c->topic(topic).placement.at(1), "s3");
  const std::vector<InFlightMessage> flying = c->in_flight(topic);
  ASSERT_EQ(flying.size(), 1u);
  EXPECT_EQ(flying[0].id, held[0].id);
  EXPECT_EQ(flying[0].owner, "mover") << "the lease's owner, named on the target";
  // The stale client still routes partition 1 to s2: s2 refuses, it reads the shard map again.
  for (int i = 5; i < 10; ++i) ids.push_back(stale->send(topic, fmt::format("{}", i), so));
  EXPECT_EQ(stale->ack(topic, held[0].receipt), Settle::kOk) << "the lease moved with the row";
  std::vector<int> order{0};
  for (int tries = 0; tries < 100 && order.size() < 10; ++tries) {
    ReceiveOptions one;
    one.wait = std::chrono::milliseconds(200);
    for (const Message& m : stale->receive(topic, one)) {
      order.push_back(std::stoi(m.payload));
      EXPECT_EQ(stale->ack(topic, m.receipt), Settle::kOk);
    }
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // New ids continue above the moved ones (the counter moved too).
  EXPECT_GT(ids[5], ids[4]);
  c->drop_topic(topic);
}

TEST(Shards, ADownServerStopsOnlyItsPartitions) {
  auto c = spread_client();
  const PrivateServer s4;
  const std::string& home = s4.home;
  c->add_server("s4", s4.dsn);
  const std::string topic = topic_for_test("down");
  TopicOptions o;
  o.partitions = 4;
  o.servers = {"s1", "s4"};
  ASSERT_TRUE(c->create_topic(topic, o));
  for (int i = 0; i < 20; ++i) c->send(topic, "before");
  LocalServer::stop({home});
  // Unkeyed sends go to s1; claims go on there.
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t id = c->send(topic, "during");
    EXPECT_EQ(c->topic(topic).placement.at(partition_of(id)), "s1");
  }
  std::string s4_key;
  for (int i = 0; s4_key.empty(); ++i) {
    if (internal::partition_of_key(fmt::format("k{}", i), 4) % 2 == 1) s4_key = fmt::format("k{}", i);
  }
  SendOptions so;
  so.key = s4_key;
  try {
    c->send(topic, "keyed", so);
    FAIL() << "a send to a down server's partition succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(e.retryable()) << e.what();
  }
  std::size_t got = ack_until(*c, topic, 0, 30, 20, std::chrono::milliseconds(0));
  EXPECT_GE(got, 30u) << "s1's messages are claimed while s4 is down";
  LocalServer::ensure_running({home});
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the "down" memory
  got = ack_until(*c, topic, got, 40, 50, std::chrono::milliseconds(100));
  EXPECT_EQ(got, 40u) << "s4's messages come back with it";
  c->drop_topic(topic);
  c->remove_server("s4");
}

// A server that accepts connections but answers nothing (SIGSTOP: a host gone dark without
// resets) holds up only its own partitions: a receive returns the other server's messages
// within its wait, unkeyed sends go on there, counts fail at once, and the claim left behind
// gives its messages back when the server answers again (not when their lease ends).
TEST(Shards, AFrozenServerHoldsUpOnlyItsOwnPartitions) {
  auto c = spread_client();
  const PrivateServer s4;
  // Its own name: the tests share the catalog and may run at once (and a run that failed here
  // left it recorded with its own server's DSN).
  try {
    c->remove_server("frozen4");
  } catch (const Error&) {
  }
  c->add_server("frozen4", s4.dsn);
  const std::string topic = topic_for_test("frozen");
  TopicOptions o;
  o.partitions = 4;
  o.servers = {"s1", "frozen4"};
  o.lease = std::chrono::seconds(60);
  ASSERT_TRUE(c->create_topic(topic, o));
  auto on_s4 = [&](std::uint64_t id) { return o.servers[partition_of(id) % 2] == "frozen4"; };
  std::size_t on_s4_before = 0;
  for (int i = 0; i < 20; ++i) on_s4_before += on_s4(c->send(topic, "before"));
  ASSERT_GT(on_s4_before, 0u);
  const std::optional<int> pid = LocalServer::status({s4.home}).pid;
  ASSERT_TRUE(pid.has_value());
  ASSERT_EQ(::kill(*pid, SIGSTOP), 0);
  Thaw thaw{*pid};
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };

  ReceiveOptions ro;
  ro.max_messages = 100;
  ro.wait = std::chrono::seconds(4);
  auto started = Clock::now();
  std::vector<Message> got = c->receive(topic, ro);
  EXPECT_LT(seconds_since(started), 4.0) << "the receive waited for the frozen server";
  EXPECT_EQ(got.size(), 20 - on_s4_before);
  for (const Message& m : got) {
    EXPECT_FALSE(on_s4(m.id));
    EXPECT_EQ(c->ack(topic, m.receipt), Settle::kOk);
  }

  started = Clock::now();
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(on_s4(c->send(topic, "during")));
  EXPECT_LT(seconds_since(started), 4.0) << "unkeyed sends waited for the frozen server";
  std::string s4_key;
  for (int i = 0; s4_key.empty(); ++i) {
    if (internal::partition_of_key(fmt::format("k{}", i), 4) % 2 == 1) s4_key = fmt::format("k{}", i);
  }
  SendOptions so;
  so.key = s4_key;
  started = Clock::now();
  try {
    c->send(topic, "keyed", so);
    FAIL() << "a send to a frozen server's partition succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kUnavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not answer"), std::string::npos) << e.what();
  }
  try {
    c->stats(topic);
    FAIL() << "counts over a frozen server succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kUnavailable) << e.what();
  }
  EXPECT_LT(seconds_since(started), 4.0) << "a call to the frozen server waited for it";
  std::size_t acked = ack_until(*c, topic, 0, 10, 20, std::chrono::milliseconds(0));
  EXPECT_EQ(acked, 10u) << "the sends made while s4 was frozen";

  // Thawed: the claim left behind gives s4's messages back, with their attempt taken back.
  thaw.now();
  started = Clock::now();
  acked = ack_until(*c, topic, 0, on_s4_before, 100, std::chrono::milliseconds(100),
                    [](const Message& m) { EXPECT_EQ(m.attempt, 1) << m.id; });
  EXPECT_EQ(acked, on_s4_before);
  EXPECT_LT(seconds_since(started), 30.0) << "s4's messages waited for their lease (60 s)";
  c->drop_topic(topic);
  c->remove_server("frozen4");
}

// A client's first connect to a frozen server waits for its connect_timeout: its first visit to
// another server must not wait with it (connects were one at a time for all servers; the shards
// fault run saw a restarted producer's first send to a healthy server take 3.9 s).
TEST(Shards, AConnectToAFrozenServerHoldsUpNoOtherServer) {
  auto setup = spread_client();
  const PrivateServer s4;
  try {
    setup->remove_server("frozen5");
  } catch (const Error&) {
  }
  setup->add_server("frozen5", s4.dsn);
  const std::string topic = topic_for_test("frozenconnect");
  TopicOptions o;
  o.partitions = 2;
  o.servers = {"frozen5", "s2"};
  ASSERT_TRUE(setup->create_topic(topic, o));
  std::string key_on[2];
  for (int i = 0; key_on[0].empty() || key_on[1].empty(); ++i) {
    key_on[internal::partition_of_key(fmt::format("k{}", i), 2)] = fmt::format("k{}", i);
  }
  const std::optional<int> pid = LocalServer::status({s4.home}).pid;
  ASSERT_TRUE(pid.has_value());
  ASSERT_EQ(::kill(*pid, SIGSTOP), 0);
  Thaw thaw{*pid};
  using Clock = std::chrono::steady_clock;
  // A new client: it has connected to the catalog's server only.
  auto c = client();
  std::thread stuck([&] {
    SendOptions so;
    so.key = key_on[0];
    try {
      c->send(topic, "to the frozen server", so);
      ADD_FAILURE() << "a send to a frozen server's partition succeeded";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == Errc::kCommitUnknown || e.code() == Errc::kUnavailable) << e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its connect has begun
  SendOptions so;
  so.key = key_on[1];
  const auto started = Clock::now();
  EXPECT_NO_THROW(c->send(topic, "to s2", so));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - started).count(), 1.5)
      << "the first connect to s2 waited for the connect to the frozen server";
  stuck.join();
  thaw.now();
  setup->drop_topic(topic);
  setup->remove_server("frozen5");
}

// A server whose connections are all in use (a small pool, a long handler) is busy, not
// frozen: a call that waits for a free connection is not given up on after a second (only the
// wait on the server itself counts, src/shards/visits.h).
TEST(Shards, ABusyPoolIsNotTakenForAFrozenServer) {
  spread_client();  // s1..s3 recorded
  ClientOptions co;
  co.dsn = dsn();
  co.pool_size = 1;
  Client c(co);
  const std::string topic = topic_for_test("busypool");
  TopicOptions o;
  o.partitions = 2;
  o.servers = {"s1", "s2"};
  ASSERT_TRUE(c.create_topic(topic, o));
  std::string key;  // a key of partition 1, on s2
  for (int i = 0; key.empty(); ++i) {
    if (internal::partition_of_key(fmt::format("k{}", i), 2) == 1) key = fmt::format("k{}", i);
  }
  SendOptions so;
  so.key = key;
  c.send(topic, "first", so);
  c.send(topic, "second", so);
  ProcessOptions po;
  po.partitions = {1};
  std::atomic<bool> handling{false};
  std::thread slow([&] {
    c.process(topic, po, [&](Transaction&, std::span<const Message>) {
      handling = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    });
  });
  while (!handling) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // s2's only connection holds the slow handler's transaction; this call waits for it.
  std::size_t n = 0;
  EXPECT_NO_THROW(n = c.process(topic, po, [](Transaction&, std::span<const Message>) {}));
  slow.join();
  EXPECT_EQ(n, 1u) << "the second message, once the first one's transaction let go";
  EXPECT_NO_THROW(c.stats(topic)) << "s2 was taken for a frozen server";
  c.drop_topic(topic);
}

// The catalog's server holds partitions too; while it is down the client goes on with the
// shard map and DSNs it read before: the other server's partitions are sent to and claimed.
TEST(Shards, ADownCatalogStopsOnlyItsOwnPartitions) {
  const PrivateServer catalog;
  const std::string& home = catalog.home;
  const std::string& catalog_dsn = catalog.dsn;
  ClientOptions co;
  co.dsn = catalog_dsn;
  auto c = std::make_unique<Client>(co);
  c->add_server("cat", catalog_dsn);
  c->add_server("s2", LocalServer::status({shard_homes()[0]}).dsn);
  const std::string topic = topic_for_test("catdown");
  TopicOptions o;
  o.partitions = 4;
  o.servers = {"cat", "s2"};
  o.lease = std::chrono::seconds(5);
  ASSERT_TRUE(c->create_topic(topic, o));
  for (int i = 0; i < 20; ++i) c->send(topic, "before");
  LocalServer::stop({home});
  std::this_thread::sleep_for(std::chrono::seconds(6));  // past the shard map cache
  std::size_t sent = 0;
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t id = c->send(topic, "during");
    EXPECT_EQ(o.servers[partition_of(id) % 2], "s2");
    ++sent;
  }
  std::size_t got =
      ack_until(*c, topic, 0, 30, 20, std::chrono::milliseconds(0), [&](const Message& m) {
        EXPECT_EQ(o.servers[partition_of(m.id) % 2], "s2");
      });
  EXPECT_EQ(sent, 20u);
  EXPECT_EQ(got, 30u) << "s2's 10 earlier messages and the 20 sent while the catalog was down";
  LocalServer::ensure_running({home});
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the "down" memory
  got = ack_until(*c, topic, got, 40, 50, std::chrono::milliseconds(100));
  EXPECT_EQ(got, 40u) << "the catalog's own messages come back with it";
  c->drop_topic(topic);
}

// The catalog's server holds partitions too; when it stops answering (SIGSTOP), the visits to
// its partitions left behind hold its pool's connections until it answers again. A call whose
// shard map must be read again (older than 5 s) then goes on with the map known after a
// second, as for any frozen server, instead of waiting for one of those connections.
TEST(Shards, AFrozenCatalogHoldsUpOnlyItsOwnPartitions) {
  const PrivateServer catalog;
  ClientOptions co;
  co.dsn = catalog.dsn;
  co.pool_size = 2;
  Client c(co);
  c.add_server("cat", catalog.dsn);
  c.add_server("s2", LocalServer::status({shard_homes()[0]}).dsn);
  const std::string topic = topic_for_test("catfrozen");
  TopicOptions o;
  o.partitions = 4;
  o.servers = {"cat", "s2"};
  o.lease = std::chrono::seconds(60);
  ASSERT_TRUE(c.create_topic(topic, o));
  auto on_cat = [&](std::uint64_t id) { return o.servers[partition_of(id) % 2] == "cat"; };
  std::size_t on_cat_before = 0;
  for (int i = 0; i < 20; ++i) on_cat_before += on_cat(c.send(topic, "before"));
  ASSERT_GT(on_cat_before, 0u);
  ASSERT_LT(on_cat_before, 20u);
  std::string cat_key;
  for (int i = 0; cat_key.empty(); ++i) {
    if (internal::partition_of_key(fmt::format("k{}", i), 4) % 2 == 0) cat_key = fmt::format("k{}", i);
  }
  const std::optional<int> pid = LocalServer::status({catalog.home}).pid;
  ASSERT_TRUE(pid.has_value());
  ASSERT_EQ(::kill(*pid, SIGSTOP), 0);
  Thaw thaw{*pid};
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };

  // Two keyed sends to the catalog's partitions at once: each is left behind after a second
  // (commit_unknown) holding one of the pool's two connections.
  std::atomic<int> unknown{0};
  auto keyed_send = [&] {
    SendOptions so;
    so.key = cat_key;
    try {
      c.send(topic, "keyed", so);
    } catch (const Error& e) {
      if (e.code() == Errc::kCommitUnknown || e.code() == Errc::kUnavailable) ++unknown;
    }
  };
  std::thread first(keyed_send), second(keyed_send);
  first.join();
  second.join();
  EXPECT_EQ(unknown.load(), 2) << "a send to the frozen catalog's partition succeeded";
  std::this_thread::sleep_for(std::chrono::seconds(5));  // the shard map is now stale

  ReceiveOptions ro;
  ro.max_messages = 100;
  auto started = Clock::now();
  std::vector<Message> got = c.receive(topic, ro);
  EXPECT_LT(seconds_since(started), 2.5) << "the receive waited for the frozen catalog";
  EXPECT_EQ(got.size(), 20 - on_cat_before);
  for (const Message& m : got) {
    EXPECT_FALSE(on_cat(m.id));
    EXPECT_EQ(c.ack(topic, m.receipt), Settle::kOk);
  }
  started = Clock::now();
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(on_cat(c.send(topic, "during")));
  EXPECT_LT(seconds_since(started), 2.5) << "unkeyed sends waited for the frozen catalog";

  // Thawed: the catalog's messages come back (and the keyed sends, which may have committed).
  thaw.now();
  const std::size_t acked = ack_until(c, topic, 0, on_cat_before + 10, 100,
                                      std::chrono::milliseconds(100));
  EXPECT_GE(acked, on_cat_before + 10);
  c.drop_topic(topic);
}

TEST(Shards, ClearErrors) {
  auto c = spread_client();
  try {
    c->add_server("pw", "mysql://u:secret@127.0.0.1:1/x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos);
  }
  TopicOptions o;
  o.partitions = 2;
  o.servers = {"s1", "s2", "s3"};
  EXPECT_THROW(c->create_topic(topic_for_test("few"), o), Error);
  o.servers = {"s1", "nosuch"};
  try {
    c->create_topic(topic_for_test("nosuch"), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kNotFound) << e.what();
  }
  const std::string topic = create_spread(*c, "err");
  try {
    c->remove_server("s2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kFailedPrecondition) << e.what();
  }
  c->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test
