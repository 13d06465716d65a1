#include "db/dsn.h"
#include "db/connection.h"

#include <gtest/gtest.h>

#include "txmq/error.h"

namespace txmq::internal {
namespace {

TEST(DsnTest, ParsesAllParts) {
  Dsn d = parse_dsn("mysql://app:s3cret@db.example:3307/orders?connect_timeout=7");
  EXPECT_EQ(d.user, "app");
  EXPECT_EQ(d.password, "s3cret");
  EXPECT_EQ(d.host, "db.example");
  EXPECT_EQ(d.port, 3307u);
  EXPECT_EQ(d.database, "orders");
  EXPECT_EQ(d.connect_timeout_seconds, 7);
  EXPECT_TRUE(d.socket.empty());
}

TEST(DsnTest, DefaultsAndSocket) {
  Dsn d = parse_dsn("mariadb://root@/txmq?socket=/tmp/my%20dir/s.sock");
  EXPECT_EQ(d.host, "localhost");
  EXPECT_EQ(d.port, 3306u);
  EXPECT_EQ(d.password, "");
  EXPECT_EQ(d.socket, "/tmp/my dir/s.sock");
}

TEST(DsnTest, PercentDecodesPasswordWithAt) {
  Dsn d = parse_dsn("mysql://u:p%40ss%3Aword@h/db");
  EXPECT_EQ(d.password, "p@ss:word");
  EXPECT_EQ(d.host, "h");
}

TEST(DsnTest, HostListNamesEveryNodeInOrder) {
  Dsn d = parse_dsn("mysql://u:pw@10.0.0.1:3307,db2,[::1]:3309/queue");
  ASSERT_EQ(d.nodes.size(), 3u);
  EXPECT_TRUE(d.is_host_list());
  EXPECT_EQ(d.nodes[0], (Dsn::Endpoint{"10.0.0.1", 3307}));
  EXPECT_EQ(d.nodes[1], (Dsn::Endpoint{"db2", 3306}));
  EXPECT_EQ(d.nodes[2], (Dsn::Endpoint{"::1", 3309}));
  EXPECT_EQ(d.host, "10.0.0.1");  // the first, until a node is picked
  EXPECT_EQ(d.port, 3307u);
  EXPECT_EQ(d.effective_read_timeout(), 30);
  const Dsn second = d.node(1);
  EXPECT_FALSE(second.is_host_list());
  EXPECT_EQ(second.host, "db2");
  EXPECT_EQ(second.port, 3306u);
  EXPECT_EQ(second.password, "pw");
  EXPECT_EQ(second.effective_read_timeout(), 30);  // a node of a list keeps the list's
  EXPECT_EQ(d.describe(), "u@10.0.0.1:3307,db2:3306,[::1]:3309 (database queue)");
  EXPECT_EQ(parse_dsn("mysql://u@h/db").effective_read_timeout(), 120);
  EXPECT_EQ(parse_dsn("mysql://u@h1,h2/db?read_timeout=9").node(0).effective_read_timeout(), 9);
}

TEST(DsnTest, BadHostListsAreRefused) {
  for (const char* text : {"mysql://u@h1,,h2/db", "mysql://u@h1,/db", "mysql://u@,h2/db",
                           "mysql://u@h1:1,h1:1/db", "mysql://u@h1,h2:x/db",
                           "mysql://u@h1,h2/db?socket=/tmp/s"}) {
    EXPECT_THROW(parse_dsn(text), Error) << text;
  }
}

TEST(DsnTest, Ipv6Host) {
  Dsn d = parse_dsn("mysql://u@[::1]:3310/db");
  EXPECT_EQ(d.host, "::1");
  EXPECT_EQ(d.port, 3310u);
}

TEST(DsnTest, TlsParameters) {
  Dsn d = parse_dsn("mysql://u@h/db?ssl-mode=verify-ca&ssl-ca=/etc/ca.pem");
  EXPECT_EQ(d.ssl_mode, "verify-ca");
  EXPECT_EQ(d.ssl_ca, "/etc/ca.pem");
}

void expect_refused(const char* text, const char* fragment) {
  try {
    parse_dsn(text);
    FAIL() << "accepted " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << text;
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << text << " -> " << e.what();
  }
}

TEST(DsnTest, RefusesTyposWithClearErrors) {
  expect_refused("mysq://u@h/db", "scheme");
  expect_refused("u@h/db", "expected mysql://");
  expect_refused("mysql://u@h", "missing /database");
  expect_refused("mysql://u@h/", "missing database");
  expect_refused("mysql://@h/db", "missing user");
  expect_refused("mysql://u@h:99999/db", "port");
  expect_refused("mysql://u@h:abc/db", "port");
  expect_refused("mysql://u@h/db?sockte=/x", "unknown parameter 'sockte'");
  expect_refused("mysql://u@h/db?ssl-mode=maybe", "ssl-mode");
  expect_refused("mysql://u@h/db?connect_timeout=0", "connect_timeout");
  expect_refused("mysql://u:%zz@h/db", "percent-escape in password");
}

TEST(DsnTest, ErrorsNeverEchoThePassword) {
  try {
    parse_dsn("mysql://u:hunter2@h:notaport/db");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
  }
  Dsn d = parse_dsn("mysql://u:hunter2@h/db");
  EXPECT_EQ(d.describe().find("hunter2"), std::string::npos);
}

// Which servers can hold txmq's queues: MariaDB 10.6 or later and MySQL 8.0.1 or later (both
// have FOR UPDATE SKIP LOCKED); older ones are refused naming why.
TEST(ServerVersion, MariaDb106AndMySql801AndLaterAreSupportedOlderOnesAreNot) {
  for (const char* ok : {"10.6.0-MariaDB", "10.11.19-MariaDB-0+deb12u1", "10.11.6-MariaDB-log",
                         "11.4.2-MariaDB-ubu2404", "12.0.1-MariaDB", "5.5.5-10.11.6-MariaDB",
                         "8.0.1", "8.0.36", "8.4.0-commercial", "9.7.4-2"}) {
    EXPECT_EQ(unsupported_server(ok), "") << ok;
  }
  EXPECT_NE(unsupported_server("8.0.0-dmr").find("MySQL 8.0.0-dmr"), std::string::npos);
  EXPECT_NE(unsupported_server("5.7.44-log").find("SKIP LOCKED"), std::string::npos);
  EXPECT_NE(unsupported_server("10.5.23-MariaDB").find("10.6 or later"), std::string::npos);
  EXPECT_NE(unsupported_server("5.5.5-10.3.39-MariaDB").find("10.6 or later"), std::string::npos);
  EXPECT_NE(unsupported_server("10.x-MariaDB").find("10.6 or later"), std::string::npos);
  EXPECT_NE(unsupported_server("").find("not one txmq knows"), std::string::npos);
}

TEST(ServerVersion, KindAndVersionAreReadFromTheHandshakeVersion) {
  ServerKind maria = server_kind_of("5.5.5-10.11.6-MariaDB-0+deb12u1");
  EXPECT_FALSE(maria.mysql);
  EXPECT_EQ(maria.describe(), "MariaDB 10.11.6");
  EXPECT_TRUE(maria.returning());
  ServerKind mysql = server_kind_of("9.7.4-2");
  EXPECT_TRUE(mysql.mysql);
  EXPECT_EQ(mysql.describe(), "MySQL 9.7.4");
  EXPECT_FALSE(mysql.returning());
  EXPECT_FALSE(mysql.alter_extensions());
}

}  // namespace
}  // namespace txmq::internal

// A DSN without '@' reads "user:secret" as host and port: the port's error must not show it.
TEST(DsnTest, PortErrorsDoNotEchoWhatMayBeAPassword) {
  try {
    txmq::internal::parse_dsn("mysql://app:Sup3rSecret/txmq");
    FAIL() << "accepted";
  } catch (const txmq::Error& e) {
    EXPECT_EQ(std::string(e.what()).find("Sup3rSecret"), std::string::npos) << e.what();
  }
}
