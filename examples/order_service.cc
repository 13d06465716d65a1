// An order service: each order row and the message announcing it commit in one transaction,
// so that no order goes unannounced and no message announces an order that was rolled back.
//
//   order_service [COUNT]      (the server: TXMQ_DSN, e.g. mysql://app:secret@db:3306/shop)
//
// The orders go through a txmq Transaction. When the application's own connection settings are
// in APP_DB_NAME and APP_DB_SOCKET or APP_DB_HOST (with APP_DB_PORT, APP_DB_USER,
// APP_DB_PASSWORD), one more goes through the application's own Connector/C connection
// (MYSQL*), enlisted with Client::enlist, as code with its own database layer would do.
#include <mysql.h>
#include <txmq/client.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void place_order(txmq::Client& client, const std::string& customer, std::int64_t cents) {
  // transact runs the function again after a deadlock or a lost connection, so it does nothing
  // but statements in the transaction it is given.
  client.transact([&](txmq::Transaction& tx) {
    txmq::SqlResult r = tx.execute("INSERT INTO orders (customer, total_cents) VALUES (?, ?)",
                                   {std::string_view(customer), cents});
    const std::string id = std::to_string(r.insert_id);
    // The dedup key makes a retried send (after kCommitUnknown) harmless.
    txmq::SendOptions options;
    options.dedup_key = "order-" + id;
    tx.send("orders",
            "{\"order\":" + id + ",\"customer\":\"" + customer +
                "\",\"total_cents\":" + std::to_string(cents) + "}",
            options);
    std::printf("order %s placed through a txmq transaction\n", id.c_str());
  });
}

// The same with the application's own connection: START TRANSACTION, its own INSERT, the
// message through the Outbox, its own COMMIT.
void place_order_on_own_connection(txmq::Client& client, MYSQL* db, const std::string& customer,
                                   std::int64_t cents) {
  auto run = [&](const std::string& sql) {
    if (mysql_query(db, sql.c_str()) != 0) throw std::runtime_error(mysql_error(db));
  };
  run("START TRANSACTION");
  try {
    run("INSERT INTO orders (customer, total_cents) VALUES ('" + customer + "', " +
        std::to_string(cents) + ")");  // a fixed, trusted customer name in this example
    const std::string id = std::to_string(mysql_insert_id(db));
    txmq::Outbox outbox = client.enlist(db);
    txmq::SendOptions options;
    options.dedup_key = "order-" + id;
    outbox.send("orders", "{\"order\":" + id + ",\"total_cents\":" + std::to_string(cents) + "}",
                options);
    run("COMMIT");
    std::printf("order %s placed through the application's own connection\n", id.c_str());
  } catch (...) {
    mysql_query(db, "ROLLBACK");
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 3;
  try {
    txmq::Client client(txmq::ClientOptions{});  // TXMQ_DSN
    client.create_topic("orders");
    client.transact([](txmq::Transaction& tx) {
      tx.execute(
          "CREATE TABLE IF NOT EXISTS orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
          "customer VARCHAR(100) NOT NULL, total_cents BIGINT NOT NULL) ENGINE=InnoDB");
    });
    for (int i = 1; i < count; ++i) place_order(client, "customer-" + std::to_string(i), 1000 * i);

    if (const char* name = std::getenv("APP_DB_NAME")) {
      auto env = [](const char* key) { return std::getenv(key); };
      MYSQL* db = mysql_init(nullptr);
      const char* port = env("APP_DB_PORT");
      if (mysql_real_connect(db, env("APP_DB_HOST"), env("APP_DB_USER"), env("APP_DB_PASSWORD"),
                             name, port ? std::atoi(port) : 0, env("APP_DB_SOCKET"),
                             0) == nullptr) {
        std::fprintf(stderr, "order_service: %s\n", mysql_error(db));
        mysql_close(db);
        return 1;
      }
      place_order_on_own_connection(client, db, "walk-in", 4200);
      mysql_close(db);
    }
    txmq::TopicStats stats = client.stats("orders");
    std::printf("orders topic: %llu ready\n", static_cast<unsigned long long>(stats.ready));
  } catch (const txmq::Error& e) {
    std::fprintf(stderr, "order_service: %s (%s)\n", e.what(),
                 std::string(txmq::errc_name(e.code())).c_str());
    return 1;
  }
  return 0;
}
