// The SQL interface on a database whose character set is latin1 (MariaDB's built-in default, and
// that of many older databases): every text that crosses into the routines (payloads given as
// text, keys, dedup keys, attributes, JSON escaped as Python's json.dumps writes it or raw UTF-8
// as JavaScript's JSON.stringify does) arrives byte for byte, and comes back so from txmq_take,
// the library and dead-lettering. The application connects as drivers do: utf8mb4, text
// protocol, its strings in quoted literals.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mysql.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>

#include "db/dsn.h"
#include "support.h"
#include "txmq/client.h"

namespace txmq::test {
namespace {

using Json = nlohmann::json;

// Text in several scripts, with characters of 2, 3 and 4 UTF-8 bytes (latin1 has the first only
// in part; utf8mb3 lacks the last).
const std::vector<std::string> kTexts = {"ü", "€", "ż", "🦀", "żółty", "日本語 ✓", "a\"b\\c'd", "x"};

// A database of this test's, made latin1 whatever the server's default, dropped at the end.
class Latin1Database {
 public:
  explicit Latin1Database(const std::string& suffix)
      : name_(fmt::format("txmq_l1_{}", suffix)), admin_(admin()) {
    admin_->query(fmt::format("DROP DATABASE IF EXISTS `{}`", name_));
    admin_->query(fmt::format("CREATE DATABASE `{}` CHARACTER SET latin1 COLLATE latin1_swedish_ci", name_));
    const internal::Result r = admin_->execute(
        "SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
        {name_});
    EXPECT_EQ(r.rows.at(0).bytes(0), "latin1");
    // The DSN of the server under test, with this database in its path.
    dsn_ = std::regex_replace(test::dsn(), std::regex("^(mysql://[^/]*/)[^?]*"), "$1" + name_);
  }
  ~Latin1Database() {
    try {
      admin_->query(fmt::format("DROP DATABASE IF EXISTS `{}`", name_));
    } catch (const std::exception&) {
    }
  }
  const std::string& name() const { return name_; }
  const std::string& dsn() const { return dsn_; }

 private:
  std::string name_;
  std::unique_ptr<internal::Connection> admin_;
  std::string dsn_;
};

// An application's connection: Connector/C in utf8mb4, text protocol.
class AppConnection {
 public:
  explicit AppConnection(const std::string& dsn) : m_(mysql_init(nullptr), &mysql_close) {
    const internal::Dsn d = internal::parse_dsn(dsn);
    mysql_optionsv(m_.get(), MYSQL_SET_CHARSET_NAME, "utf8mb4");
    const char* socket = d.socket.empty() ? nullptr : d.socket.c_str();
    if (mysql_real_connect(m_.get(), socket != nullptr ? "localhost" : d.host.c_str(),
                           d.user.c_str(), d.password.c_str(), d.database.c_str(), d.port, socket,
                           CLIENT_MULTI_RESULTS) == nullptr) {
      throw std::runtime_error(std::string("cannot connect: ") + mysql_error(m_.get()));
    }
  }
  // A quoted literal of the text, escaped as a driver escapes it.
  std::string quote(std::string_view text) {
    std::string out(text.size() * 2 + 1, '\0');
    out.resize(mysql_real_escape_string(m_.get(), out.data(), text.data(), text.size()));
    return "'" + out + "'";
  }
  // The rows of the statement's first result set (NULL as nullopt); the CALL's status read too.
  std::vector<std::vector<std::optional<std::string>>> rows(const std::string& sql) {
    if (mysql_real_query(m_.get(), sql.data(), sql.size()) != 0) throw_error();
    std::vector<std::vector<std::optional<std::string>>> out;
    bool first = true;
    do {
      if (MYSQL_RES* res = mysql_store_result(m_.get())) {
        while (MYSQL_ROW row = mysql_fetch_row(res)) {
          if (!first) continue;
          const unsigned long* lengths = mysql_fetch_lengths(res);
          std::vector<std::optional<std::string>> values;
          for (unsigned i = 0; i < mysql_num_fields(res); ++i) {
            values.push_back(row[i] == nullptr ? std::nullopt
                                               : std::optional<std::string>(std::string(row[i], lengths[i])));
          }
          out.push_back(std::move(values));
        }
        mysql_free_result(res);
        first = false;
      }
    } while (mysql_next_result(m_.get()) == 0);
    if (mysql_errno(m_.get()) != 0) throw_error();
    return out;
  }
  void run(const std::string& sql) { rows(sql); }

 private:
  [[noreturn]] void throw_error() {
    throw std::runtime_error(fmt::format("{} ({})", mysql_error(m_.get()), mysql_errno(m_.get())));
  }
  std::unique_ptr<MYSQL, void (*)(MYSQL*)> m_;
};

std::uint64_t first_id(const std::vector<std::vector<std::optional<std::string>>>& rows) {
  return std::stoull(rows.at(0).at(0).value());
}

// Python's json.dumps (ensure_ascii: \uXXXX, surrogate pairs) or JavaScript's JSON.stringify.
std::string dump(const Json& j, bool escaped) { return j.dump(-1, ' ', escaped); }

struct Expected {
  std::string payload;
  std::optional<std::string> key;
  Attributes attributes;
};

// Every send shape with every text, escaped and raw; returns what each id must hold.
std::map<std::uint64_t, Expected> send_everything(AppConnection& app, const std::string& topic) {
  std::map<std::uint64_t, Expected> sent;
  int serial = 0;
  for (const bool escaped : {true, false}) {
    // A batch of plain strings (the fast path).
    Json strings = Json::array();
    for (const std::string& t : kTexts) strings.push_back(t);
    const auto ids = app.rows(fmt::format("CALL txmq_send_batch({}, {})", app.quote(topic),
                                          app.quote(dump(strings, escaped))));
    EXPECT_EQ(ids.size(), kTexts.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      sent[std::stoull(ids[i].at(0).value())] = Expected{kTexts[i], std::nullopt, {}};
    }
    // A batch of objects: text payloads, keys, dedup keys and attributes of every text.
    Json objects = Json::array();
    std::vector<Expected> expected;
    for (const std::string& t : kTexts) {
      const std::string key = fmt::format("{}-{}", t, ++serial);
      objects.push_back({{"payload", "p " + t},
                         {"key", key},
                         {"dedup_key", "d " + key},
                         {"attributes", {{"colour", t}, {"n.b", {{"type", "String.ü"}, {"value", t}}}}}});
      expected.push_back(Expected{"p " + t, key, {{"colour", {"String", t}}}});
    }
    // ("String.ü" is not a valid type: the batch is refused whole, saying which message.)
    try {
      app.run(fmt::format("CALL txmq_send_batch({}, {})", app.quote(topic),
                          app.quote(dump(objects, escaped))));
      ADD_FAILURE() << "a type outside A-Z a-z 0-9 _ - . was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("message 1 of the batch: attribute 'n.b': types are"),
                std::string::npos)
          << e.what();
    }
    for (std::size_t i = 0; i < objects.size(); ++i) {
      objects[i]["attributes"]["n.b"]["type"] = "Number.x";
      expected[i].attributes["n.b"] = {"Number.x", kTexts[i]};
    }
    const auto object_ids = app.rows(fmt::format("CALL txmq_send_batch({}, {})", app.quote(topic),
                                                 app.quote(dump(objects, escaped))));
    EXPECT_EQ(object_ids.size(), kTexts.size());
    for (std::size_t i = 0; i < object_ids.size(); ++i) {
      sent[std::stoull(object_ids[i].at(0).value())] = expected[i];
    }
    // Single sends: the payload as a text literal, options with a key and attributes.
    for (const std::string& t : kTexts) {
      const std::string key = fmt::format("s {}-{}", t, ++serial);
      const Json options = {{"key", key}, {"attributes", {{"colour", t}}}};
      const std::uint64_t id = first_id(app.rows(fmt::format(
          "CALL txmq_send({}, {}, {})", app.quote(topic), app.quote(t), app.quote(dump(options, escaped)))));
      sent[id] = Expected{t, key, {{"colour", {"String", t}}}};
      const std::uint64_t plain = first_id(
          app.rows(fmt::format("CALL txmq_send({}, {}, NULL)", app.quote(topic), app.quote(t))));
      sent[plain] = Expected{t, std::nullopt, {}};
    }
  }
  return sent;
}

// txmq_take's attributes column ({"name": {"type": ..., "value": ...}}) as the library's.
Attributes attributes_of(const std::optional<std::string>& json) {
  Attributes out;
  if (!json) return out;
  const Json parsed = Json::parse(*json);
  for (const auto& [name, entry] : parsed.items()) {
    if (!entry.is_object() || !entry.contains("type") || !entry["type"].is_string() ||
        !entry.contains("value") || !entry["value"].is_string()) {
      ADD_FAILURE() << "attribute " << name << " is not {type, value}: " << *json;
      continue;
    }
    out[name] = {entry["type"].get<std::string>(), entry["value"].get<std::string>()};
  }
  return out;
}

TEST(SqlCharset, EveryCallKeepsTextByteForByteOnALatin1Database) {
  Latin1Database db(fmt::format("every_{}", ::getpid()));
  ClientOptions options;
  options.dsn = db.dsn();
  Client lib(options);  // makes txmq's schema and routines in the latin1 database
  const std::string topic = "latin1_texts";
  ASSERT_TRUE(lib.create_topic(topic, {}));
  AppConnection app(db.dsn());

  const std::map<std::uint64_t, Expected> sent = send_everything(app, topic);
  ASSERT_EQ(sent.size(), kTexts.size() * 2 * 4);

  // txmq_take returns them as they were sent.
  app.run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  app.run("START TRANSACTION");
  const auto taken = app.rows(fmt::format("CALL txmq_take({}, NULL, 1000)", app.quote(topic)));
  ASSERT_EQ(taken.size(), sent.size());
  for (const auto& row : taken) {
    const Expected& e = sent.at(std::stoull(row.at(0).value()));
    EXPECT_EQ(row.at(1).value(), e.payload);
    EXPECT_EQ(row.at(2), e.key);
    EXPECT_EQ(attributes_of(row.at(5)), e.attributes) << row.at(5).value_or("NULL");
  }
  app.run("ROLLBACK");

  // And the library reads the same bytes.
  std::set<std::uint64_t> received;
  for (int round = 0; round < 10 && received.size() < sent.size(); ++round) {
    for (const Message& m : lib.receive(topic, {.max_messages = 1000})) {
      const Expected& e = sent.at(m.id);
      EXPECT_EQ(m.payload, e.payload);
      EXPECT_EQ(m.key, e.key);
      EXPECT_EQ(m.attributes, e.attributes);
      received.insert(m.id);
      lib.ack(topic, m.receipt);
    }
  }
  EXPECT_EQ(received.size(), sent.size());
}

// Dead-lettering by txmq_take into a dead-letter topic keeps the attributes' text, and errors
// that quote the caller's text quote it whole, as txmq errors and not the server's 1366.
TEST(SqlCharset, DeadLettersAndErrorsKeepTheirText) {
  Latin1Database db(fmt::format("dead_{}", ::getpid()));
  ClientOptions options;
  options.dsn = db.dsn();
  Client lib(options);
  ASSERT_TRUE(lib.create_topic("graveyard", {}));
  TopicOptions once;
  once.max_attempts = 1;
  once.dead_letter_topic = "graveyard";
  ASSERT_TRUE(lib.create_topic("fragile", once));
  AppConnection app(db.dsn());
  const Json attributes = {{"colour", "żółty 🦀"}};
  for (const bool escaped : {true, false}) {
    app.run(fmt::format("CALL txmq_send('fragile', {}, {})", app.quote("jeż 🦔"),
                        app.quote(dump(Json{{"attributes", attributes}}, escaped))));
  }
  app.run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  app.run("START TRANSACTION");
  EXPECT_EQ(app.rows("CALL txmq_take('fragile', NULL, 10)").size(), 2u);
  app.run("ROLLBACK");  // one attempt of one: the next take moves them
  app.run("START TRANSACTION");
  EXPECT_EQ(app.rows("CALL txmq_take('fragile', NULL, 10)").size(), 0u);
  app.run("COMMIT");
  int dead = 0;
  for (const Message& m : lib.receive("graveyard", {.max_messages = 10})) {
    EXPECT_EQ(m.payload, "jeż 🦔");
    EXPECT_EQ(m.attributes, (Attributes{{"colour", {"String", "żółty 🦀"}}}));
    ASSERT_TRUE(m.dead_lettered_from.has_value());
    EXPECT_EQ(m.dead_lettered_from->topic, "fragile");
    ++dead;
  }
  EXPECT_EQ(dead, 2);

  const auto refused = [&](const std::string& sql) -> std::string {
    try {
      app.run(sql);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "accepted";
  };
  app.run("START TRANSACTION");
  const std::string no_group = refused("CALL txmq_take('fragile', 'żółw', 1)");
  EXPECT_NE(no_group.find("has no group 'żółw'"), std::string::npos) << no_group;
  app.run("ROLLBACK");
  // (MariaDB keeps an error's text in utf8mb3: characters outside the BMP would show as '?'.)
  const std::string unknown = refused("CALL txmq_send('fragile', 'x', '{\"kéy ✓\": 1}')");
  EXPECT_NE(unknown.find("unknown field \"kéy ✓\""), std::string::npos) << unknown;
  EXPECT_NE(refused("CALL txmq_send('żółty', 'x', NULL)").find("txmq: invalid topic name"),
            std::string::npos);
  EXPECT_NE(refused("CALL txmq_send_batch('żółty', '[\"x\"]')").find("txmq: invalid topic name"),
            std::string::npos);
  EXPECT_NE(refused("CALL txmq_send('fragile', 'x', '{\"attributes\": {\"ż\": \"x\"}}')")
                .find("txmq: attribute names are"),
            std::string::npos);
}

// An application that reads a failed call's error with GET DIAGNOSTICS gets txmq's SQLSTATE,
// 45000, in condition 1, as the error packet says; MariaDB's ROLLBACK TO SAVEPOINT of a call
// that made its temporary tables warned first (1196, HY000).
TEST(SqlInterface, GetDiagnosticsReadsTheSqlstateOfTheError) {
  auto lib = client();
  const std::string topic = topic_for_test();
  TopicOptions options;
  options.max_payload_bytes = 100;
  ASSERT_TRUE(lib->create_topic(topic, options));
  AppConnection app(test::dsn());
  app.run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  const std::vector<std::string> failing = {
      fmt::format("CALL txmq_send('{}', REPEAT('x', 101), NULL)", topic),
      fmt::format("CALL txmq_send_batch('{}', '[\"a\", {{\"payload\": \"b\", \"key\": 3}}]')", topic),
      fmt::format("CALL txmq_ack('{}', NULL, '[1]')", topic),
      fmt::format("CALL txmq_take('{}', 'nosuchgroup', 1)", topic),
  };
  for (const std::string& call : failing) {
    app.run("START TRANSACTION");
    app.run(fmt::format("CALL txmq_take('{}', NULL, 1)", topic));  // the temporary tables exist
    try {
      app.run(call);
      ADD_FAILURE() << call << " succeeded";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("txmq: "), std::string::npos) << e.what();
    }
    app.run("GET DIAGNOSTICS CONDITION 1 @txmq_test_state = RETURNED_SQLSTATE, "
            "@txmq_test_errno = MYSQL_ERRNO");
    const auto read = app.rows("SELECT @txmq_test_state, @txmq_test_errno");
    EXPECT_EQ(read.at(0).at(0), "45000") << call;
    EXPECT_EQ(read.at(0).at(1), "1644") << call;
    app.run("ROLLBACK");
  }
  lib->drop_topic(topic);
}

}  // namespace
}  // namespace txmq::test
