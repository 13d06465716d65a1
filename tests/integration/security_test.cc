// Security basics: passwords kept out of `ps`, errors and logs; TLS to a server with a
// certificate the test makes; and hostile input through every command, which must get a clear
// refusal and leave the database as it was.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "db/dsn.h"
#include "util/codec.h"
#include "support.h"

namespace txmq {
namespace {

using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A user with a password, on the server under test; the DSN carries `password_part`.
std::string dsn_for_user(const std::string& user, const std::string& password_part) {
  const std::string dsn = test::dsn();
  return dsn.substr(0, dsn.find("://") + 3) + user + password_part + "@" +
         dsn.substr(dsn.find('@') + 1);
}

void create_user(const std::string& user, const std::string& password) {
  auto admin = test::admin();
  for (const char* host : {"localhost", "%"}) {
    admin->query(fmt::format("CREATE USER IF NOT EXISTS '{}'@'{}' IDENTIFIED BY '{}'", user, host,
                             password));
    admin->query(
        fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON txmq.* TO '{}'@'{}'", user, host));
  }
}

TEST(Security, PasswordOnTheCommandLineIsBlankedInPs) {
  create_user("txmq_sec_ps", "Pw-S3cretValue");
  std::string topic = test::topic_for_test();
  test::client()->create_topic(topic);
  test::Background b = test::start_txmq(
      {"--dsn", dsn_for_user("txmq_sec_ps", ":Pw-S3cretValue"), "receive", topic, "--wait", "3"});
  std::this_thread::sleep_for(500ms);  // long polling by now
  const std::string cmdline = read_file(fmt::format("/proc/{}/cmdline", b.pid));
  EXPECT_EQ(b.wait(), 0) << b.err();
  EXPECT_NE(cmdline.find("receive"), std::string::npos);
  EXPECT_EQ(cmdline.find("Pw-S3cretValue"), std::string::npos) << cmdline;
  EXPECT_NE(cmdline.find("xxxxxxxxxxxxxx"), std::string::npos) << cmdline;
}

TEST(Security, PasswordFromAFileOrTheEnvironment) {
  create_user("txmq_sec_file", "from-a-file");
  const std::string path = test::scratch_dir() + "/password";
  std::ofstream(path) << "from-a-file\n";
  std::string dsn = dsn_for_user("txmq_sec_file", "");
  dsn += fmt::format("{}password-file={}", dsn.find('?') == std::string::npos ? "?" : "&", path);
  test::ProcessResult r = test::run_txmq({"--dsn", dsn, "topic", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = test::run_txmq({"topic", "list"}, "", {{"TXMQ_DSN", dsn}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A missing file is a clear error that names the file.
  r = test::run_txmq({"topic", "list"}, "", {{"TXMQ_DSN", dsn + "-missing"}});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("cannot read the password file"), std::string::npos) << r.err;
  // A wrong password in the file: refused, and not shown.
  std::ofstream(path) << "Wr0ngFilePassword\n";
  r = test::run_txmq({"topic", "list"}, "", {{"TXMQ_DSN", dsn}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.find("Wr0ngFilePassword"), std::string::npos) << r.err;
}

// A user with the documented least privileges (no EXECUTE) cannot see the SQL interface's
// routines, so each of its clients tries to install them under the schema lock. One killed while
// it held the lock (here: a lock with a dead token, valid for a minute) must not make the next
// clients wait for the lock to run out: the Galera fault run's new consumers waited 60 s.
TEST(Security, ALeastPrivilegedClientDoesNotWaitForADeadClientsSchemaLock) {
  create_user("txmq_sec_lock", "Lock-Pw-1");
  auto admin = test::admin();
  admin->query(
      "UPDATE txmq_schema SET claimed_by = 'a-killed-clients-token', claimed_until = NOW(6) + "
      "INTERVAL 60 SECOND WHERE singleton = 1");
  struct Unlock {
    std::unique_ptr<internal::Connection>& admin;
    ~Unlock() {
      try {
        admin->query(
            "UPDATE txmq_schema SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = "
            "'a-killed-clients-token'");
      } catch (const std::exception&) {  // it runs out by itself within the minute
      }
    }
  } unlock{admin};
  const auto started = std::chrono::steady_clock::now();
  test::ProcessResult r =
      test::run_txmq({"--dsn", dsn_for_user("txmq_sec_lock", ":Lock-Pw-1"), "topic", "list"});
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(took, 10s) << "the client waited for the dead client's lock";
}

// --- TLS --------------------------------------------------------------------------------------

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

void sh(const std::string& command) { ASSERT_EQ(std::system(command.c_str()), 0) << command; }

// A MariaDB server on 127.0.0.1 that accepts only TLS, with a CA and certificate made here.
class TlsServer {
 public:
  TlsServer() : dir_(test::scratch_dir()), port_(free_port()) {}
  ~TlsServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  void start() {
    const std::string d = dir_;
    sh(
        fmt::format("cd {} && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "
                    "/CN=txmq-test-ca -keyout ca.key -out ca.pem 2>/dev/null && "
                    "openssl req -newkey rsa:2048 -nodes -subj /CN=txmq-test-server -keyout "
                    "server.key -out server.csr 2>/dev/null && "
                    "printf 'subjectAltName=IP:127.0.0.1\\n' > san.cnf && "
                    "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                    "-days 2 -extfile san.cnf -out server.pem 2>/dev/null && "
                    "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=another-ca "
                    "-keyout other.key -out other.pem 2>/dev/null",
                    d));
    const std::string user = geteuid() == 0 ? " --user=root" : "";
    sh(
        fmt::format("mariadb-install-db --no-defaults --datadir={0}/data "
                    "--auth-root-authentication-method=normal --skip-test-db{1} > {0}/install.log "
                    "2>&1",
                    d, user));
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> args = {"mariadbd",
                                       "--no-defaults",
                                       "--datadir=" + d + "/data",
                                       "--socket=" + d + "/s.sock",
                                       fmt::format("--port={}", port_),
                                       "--bind-address=127.0.0.1",
                                       "--log-error=" + d + "/server.log",
                                       "--pid-file=" + d + "/server.pid",
                                       "--ssl-ca=" + d + "/ca.pem",
                                       "--ssl-cert=" + d + "/server.pem",
                                       "--ssl-key=" + d + "/server.key",
                                       "--require-secure-transport=ON",
                                       "--innodb-buffer-pool-size=32M",
                                       "--skip-name-resolve"};
      if (geteuid() == 0) args.push_back("--user=root");
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("mariadbd", argv.data());
      _exit(127);
    }
    for (int i = 0; i < 600 && !std::filesystem::exists(d + "/s.sock"); ++i) {
      std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(std::filesystem::exists(d + "/s.sock")) << read_file(d + "/server.log");
    internal::Dsn root;
    root.user = "root";
    root.database = "mysql";
    root.socket = d + "/s.sock";
    internal::Connection c(root);
    c.query("CREATE DATABASE txmq");
    c.query("CREATE USER 'tls'@'127.0.0.1' IDENTIFIED BY 'tls-pw' REQUIRE SSL");
    c.query("GRANT ALL ON txmq.* TO 'tls'@'127.0.0.1'");
  }

  std::string dsn(const std::string& params) const {
    return fmt::format("mysql://tls:tls-pw@127.0.0.1:{}/txmq?{}", port_, params);
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
  int port_;
  pid_t pid_ = -1;
};

std::string cipher_of(const std::string& dsn) {
  internal::Connection c(internal::parse_dsn(dsn));
  internal::Result r = c.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'");
  return r.rows.empty() ? "" : r.rows[0].bytes(1);
}

TEST(Security, TlsToAServerWithACertificateMadeHere) {
  TlsServer server;
  ASSERT_NO_FATAL_FAILURE(server.start());

  // verify-identity: the chain to our CA and the host (the certificate names 127.0.0.1).
  const std::string good = server.dsn("ssl-mode=verify-identity&ssl-ca=" + server.file("ca.pem"));
  EXPECT_NE(cipher_of(good), "");
  {
    ClientOptions o;
    o.dsn = good;
    Client c(o);
    c.create_topic("over_tls");
    c.send("over_tls", "sealed");
    auto got = c.receive("over_tls");
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].payload, "sealed");
    EXPECT_EQ(c.ack("over_tls", got[0].receipt), Settle::kOk);
  }
  EXPECT_NE(cipher_of(server.dsn("ssl-mode=verify-ca&ssl-ca=" + server.file("ca.pem"))), "");
  EXPECT_NE(cipher_of(server.dsn("ssl-mode=required")), "");

  // A certificate our CA did not sign is refused, and so is a session without TLS.
  for (const std::string& params : {"ssl-mode=verify-ca&ssl-ca=" + server.file("other.pem"),
                                    "ssl-mode=verify-identity&ssl-ca=" + server.file("other.pem"),
                                    std::string("ssl-mode=disabled"), std::string("")}) {
    try {
      cipher_of(server.dsn(params));
      ADD_FAILURE() << "connected with " << params;
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == Errc::kUnavailable || e.code() == Errc::kFailedPrecondition)
          << params << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find("tls-pw"), std::string::npos) << e.what();
    }
  }
  // The command line too, with a clear error for a DSN that asks to verify without a CA.
  test::ProcessResult r = test::run_txmq({"--dsn", good, "stats", "over_tls"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = test::run_txmq({"--dsn", server.dsn("ssl-mode=verify-ca"), "stats", "over_tls"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("needs ssl-ca"), std::string::npos) << r.err;
}

// MySQL 9 has only caching_sha2_password: a login the server has not cached sends the password,
// over TLS or encrypted with the server's RSA key. Over TCP to the server under test (on
// MariaDB, which has no such plugin, the test has nothing to do).
TEST(Security, CachingSha2PasswordLogsInOverTlsOrWithThePinnedServerKey) {
  auto admin = test::admin();
  if (!admin->server().mysql) GTEST_SKIP() << "MySQL only: " << admin->server().describe();
  test::client();  // the catalog exists: the user below may not create it
  const internal::Row vars =
      admin->execute("SELECT @@port, @@datadir, @@caching_sha2_password_public_key_path", {})
          .rows.at(0);
  std::string key_path = vars.bytes(2);
  if (!key_path.starts_with('/')) key_path = vars.bytes(1) + "/" + key_path;
  ASSERT_TRUE(std::filesystem::exists(key_path)) << key_path;
  const std::string user = "sha2_user";
  admin->query(fmt::format("DROP USER IF EXISTS '{}'@'127.0.0.1'", user));
  admin->query(fmt::format(
      "CREATE USER '{}'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY 'sha2-pw'", user));
  admin->query(fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON txmq.* TO '{}'@'127.0.0.1'",
                           user));
  const auto dsn = [&](const std::string& params) {
    return fmt::format("mysql://{}:sha2-pw@127.0.0.1:{}/txmq?{}", user, vars.i64(0), params);
  };
  const auto logs_in = [&](const std::string& params) {
    admin->query("FLUSH PRIVILEGES");  // forget the cached login: the full exchange again
    internal::Connection c(internal::parse_dsn(dsn(params)));
    return c.execute("SELECT CURRENT_USER()", {}).rows.at(0).bytes(0);
  };
  EXPECT_EQ(logs_in("ssl-mode=required"), user + "@127.0.0.1");
  EXPECT_EQ(logs_in("ssl-mode=disabled&server-public-key=" + key_path), user + "@127.0.0.1");
  // The library, and the command, log in so.
  {
    ClientOptions o;
    o.dsn = dsn("ssl-mode=required");
    Client c(o);
    EXPECT_NO_THROW(c.list_topics());
  }
  test::ProcessResult r = test::run_txmq({"--dsn", dsn("ssl-mode=required"), "topic", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Another key than the server's: the password cannot be read by the server; refused, and the
  // error does not echo the password.
  const std::string wrong = test::scratch_dir() + "/wrong.pem";
  ASSERT_EQ(std::system(fmt::format("openssl genrsa 2048 2>/dev/null | openssl rsa -pubout -out "
                                    "'{}' 2>/dev/null",
                                    wrong)
                            .c_str()),
            0);
  try {
    logs_in("ssl-mode=disabled&server-public-key=" + wrong);
    ADD_FAILURE() << "logged in with another server's key";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("sha2-pw"), std::string::npos) << e.what();
  }
  // A key file that is not there is a DSN error, before any connection.
  try {
    internal::parse_dsn(dsn("server-public-key=/nonexistent/key.pem"));
    ADD_FAILURE() << "a missing key file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("public key"), std::string::npos) << e.what();
  }
  admin->query(fmt::format("DROP USER '{}'@'127.0.0.1'", user));
}

// --- hostile input ----------------------------------------------------------------------------

// An error for the user: exit 1 (usage), 3 (not found) or 5 (refused), one "txmq: " line or
// CLI11's usage text, and nothing unprintable echoed back to the terminal.
void expect_clear_refusal(const std::vector<std::string>& args, const std::string& input = "") {
  test::ProcessResult r = test::run_txmq(args, input);
  std::string shown;
  for (const std::string& a : args) shown += util::printable(a, 40) + " ";
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 3 || r.exit_code == 5)
      << shown << "→ exit " << r.exit_code << ": " << r.err;
  EXPECT_FALSE(r.err.empty()) << shown;
  for (char c : r.err) {
    const auto b = static_cast<unsigned char>(c);
    EXPECT_TRUE(b == '\n' || (b >= 0x20 && b < 0x7f)) << shown << "printed byte " << int(b);
    if (!(b == '\n' || (b >= 0x20 && b < 0x7f))) break;
  }
}

TEST(Security, HostileInputThroughEveryCommandIsRefusedAndChangesNothing) {
  auto client = test::client();
  const std::string topic = test::topic_for_test();
  client->create_topic(topic);
  client->send_batch(topic, std::vector<OutgoingMessage>(3, OutgoingMessage{"keep", {}, {}, {}}));
  auto admin = test::admin();
  // The catalog's tables and this test's: other tests make and drop theirs meanwhile.
  auto tables = [&] {
    std::vector<std::string> names;
    for (const auto& row : admin->execute("SHOW TABLES").rows) {
      const std::string& name = row.bytes(0);
      // A topic's tables carry one of these prefixes; the catalog's are the other txmq_ ones.
      // (Not "has no _t_": the SQS suites' topics, sqs_t..., make and drop tables meanwhile.)
      bool catalog = name.starts_with("txmq_");
      for (const char* prefix : {"txmq_q_", "txmq_dlq_", "txmq_a_", "txmq_dd_", "txmq_k_",
                                 "txmq_kp_"}) {
        if (name.starts_with(prefix)) catalog = false;
      }
      if (catalog || name.find(topic) != std::string::npos ||
          name.find("hostile") != std::string::npos) {
        names.push_back(name);
      }
    }
    return names;
  };
  const std::vector<std::string> tables_before = tables();
  const std::string receipt = "1.0000000000000001";

  const std::vector<std::string> names = {"x'; DROP TABLE txmq_topics; --",
                                          "a`b",
                                          "ORDERS",
                                          "a b",
                                          "\xff\xfe",
                                          "caf\xc3\xa9",
                                          std::string(49, 'a'),
                                          "a;b",
                                          "a\x01"
                                          "b",
                                          "a\\b",
                                          "a%b",
                                          "1abc",
                                          std::string(5000, 'z')};
  for (const std::string& n : names) {
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"topic", "create", n},
             {"topic", "drop", n},
             {"topic", "set", n, "--lease", "1"},
             {"send", n, "x"},
             {"send-batch", n},
             {"receive", n},
             {"ack", n, receipt},
             {"nack", n, receipt},
             {"extend", n, receipt, "--lease", "1"},
             {"stats", n},
             {"inflight", n},
             {"dead", "list", n},
             {"dead", "requeue", n},
             {"group", "create", n, "g"},
             {"group", "create", topic, n},
             {"group", "list", n},
             {"group", "drop", topic, n},
             {"archive", "list", n},
             {"archive", "purge", n},
             {"consume", n, "--exec", "true", "--exit-when-empty"},
             {"receive", topic, "--group", n},
             {"stats", topic, "--group", n}}) {
      expect_clear_refusal(args, "x\n");
    }
  }
  // Numbers out of range, negative, huge, not numbers.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"topic", "create", "t_hostile_n", "--lease", "-1"},
           {"topic", "create", "t_hostile_n", "--lease", "1e300"},
           {"topic", "create", "t_hostile_n", "--lease", "nan"},
           {"topic", "create", "t_hostile_n", "--max-attempts", "-5"},
           {"topic", "create", "t_hostile_n", "--max-attempts", "99999999999999999999"},
           {"topic", "create", "t_hostile_n", "--max-payload", "-1"},
           {"topic", "create", "t_hostile_n", "--partitions", "0"},
           {"topic", "create", "t_hostile_n", "--partitions", "65"},
           {"topic", "create", "t_hostile_n", "--retry-multiplier", "-2"},
           {"topic", "create", "t_hostile_n", "--archive", "-1"},
           {"receive", topic, "--max", "-1"},
           {"receive", topic, "--max", "0"},
           {"receive", topic, "--max", "99999999999999999999"},
           {"receive", topic, "--wait", "-1"},
           {"receive", topic, "--wait", "1e308"},
           {"receive", topic, "--lease", "-3"},
           {"receive", topic, "--partition", "-1"},
           {"receive", topic, "--partition", "64"},
           {"send", topic, "x", "--delay", "-1"},
           {"send", topic, "x", "--delay", "inf"},
           {"nack", topic, receipt, "--delay", "-1"},
           {"inflight", topic, "--limit", "-1"},
           {"dead", "list", topic, "--limit", "99999999999999999999"},
           {"archive", "list", topic, "--from", "-1"},
           {"consume", topic, "--exec", "true", "--concurrency", "0"},
           {"consume", topic, "--exec", "true", "--max-messages", "-1"},
           {"dead", "requeue", topic, "-5"},
           {"dead", "requeue", topic, "x'; --"}}) {
    expect_clear_refusal(args);
  }
  // Receipts: SQL, bytes, huge.
  for (const std::string& r : {std::string("1'; DROP TABLE txmq_topics; --"), std::string("\xff"),
                               std::string(10000, '9') + ".0000000000000001", std::string(""),
                               std::string("-1.0000000000000001")}) {
    expect_clear_refusal({"ack", topic, r});
    expect_clear_refusal({"nack", topic, r});
    expect_clear_refusal({"extend", topic, r, "--lease", "1"});
  }
  // Payloads over the limit, alone and in a batch: refused whole.
  const std::string big((1 << 20) + 1, 'b');
  expect_clear_refusal({"send", topic}, big);
  expect_clear_refusal({"send-batch", topic}, "small\n" + big + "\nsmall\n");
  // DSNs with typos.
  expect_clear_refusal({"--dsn", "mysql//root@localhost/txmq", "topic", "list"});
  expect_clear_refusal({"--dsn", "mysql://root@localhost/txmq?sslmode=required", "topic", "list"});
  expect_clear_refusal({"--dsn", "mysql://root@localhost:99999/txmq", "topic", "list"});

  // NUL and invalid UTF-8 are payload like any other bytes: kept exactly.
  const std::string odd = std::string("a\0b\xff\xfe';--", 10);
  test::ProcessResult sent = test::run_txmq({"send", topic}, odd);
  EXPECT_EQ(sent.exit_code, 0) << sent.err;

  // Nothing changed: the same tables, the topic's three messages (and the odd one) intact.
  EXPECT_EQ(tables(), tables_before);
  TopicStats s = client->stats(topic);
  EXPECT_EQ(s.ready, 4u);
  auto got = client->receive(topic, ReceiveOptions{.max_messages = 10});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].payload, odd);
  EXPECT_THROW(client->topic("t_hostile_n"), Error);  // none of the bad creates made it
}

}  // namespace
}  // namespace txmq
