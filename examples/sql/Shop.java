// txmq's SQL interface from Java (JDBC; Debian's MariaDB Connector/J): an order and its message
// in one transaction, and a consumer that turns each message into exactly one invoice.
// Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then
// (Java 11+ runs the source; JNA for the socket):
//   CP=/usr/share/java/mariadb-java-client.jar:/usr/share/java/jna.jar
//   APP_PASSWORD=secret java -cp $CP examples/sql/Shop.java send 3   # 3 orders, each with its message
//   APP_PASSWORD=secret java -cp $CP examples/sql/Shop.java consume  # one invoice per message, as they come
// Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC, WAIT_SECONDS (how
// long consume waits for a message before it exits; 5).
import java.sql.*;
import java.util.*;

public class Shop {
    static String env(String name, String def) { return System.getenv().getOrDefault(name, def); }
    static final String TOPIC = env("TOPIC", "orders"), Q = env("TXMQ_DB", "txmq");
    static final double WAIT = Double.parseDouble(env("WAIT_SECONDS", "5"));

    public static void main(String[] args) throws SQLException {
        try (Connection c = DriverManager.getConnection("jdbc:mariadb://localhost/" + env("APP_DB", "shop")
                 + "?localSocket=" + env("MYSQL_UNIX_PORT", "/run/mysqld/mysqld.sock"),
                 env("APP_USER", "app"), env("APP_PASSWORD", ""))) {
            c.setAutoCommit(false);  // every statement in a transaction, until commit() or rollback()
            c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);  // txmq_take_wait's
            if (args[0].equals("send")) {
                for (int i = 0; i < Integer.parseInt(args[1]); i++) {
                    PreparedStatement order = c.prepareStatement(
                        "INSERT INTO orders (customer, amount) VALUES ('alice', ?)", Statement.RETURN_GENERATED_KEYS);
                    order.setInt(1, 1 + new Random().nextInt(100));
                    order.executeUpdate();
                    ResultSet key = order.getGeneratedKeys();
                    key.next();
                    PreparedStatement send = c.prepareStatement("CALL " + Q + ".txmq_send(?, ?, NULL)");
                    send.setString(1, TOPIC);
                    send.setString(2, "{\"order\": " + key.getLong(1) + "}");
                    ResultSet id = send.executeQuery();
                    id.next();
                    c.commit();  // the order and its message: both or neither
                    System.out.println("order " + key.getLong(1) + ": message " + id.getLong(1));
                }
                return;
            }
            // returns at once when there are messages, else as soon as one is committed
            PreparedStatement take = c.prepareStatement("CALL " + Q + ".txmq_take_wait(?, NULL, 10, ?)");
            PreparedStatement invoice = c.prepareStatement("INSERT INTO invoices (msg_id, order_id, amount) "
                + "SELECT ?, id, amount FROM orders WHERE id = JSON_VALUE(?, '$.order')");
            PreparedStatement ack = c.prepareStatement("CALL " + Q + ".txmq_ack(?, NULL, ?)");
            for (;;) {
                take.setString(1, TOPIC);
                take.setDouble(2, WAIT);
                List<Long> ids = new ArrayList<>();
                try {
                    try (ResultSet rs = take.executeQuery()) {
                        while (rs.next()) {
                            ids.add(rs.getLong("id"));
                            invoice.setLong(1, rs.getLong("id"));
                            invoice.setString(2, rs.getString("payload"));
                            invoice.addBatch();
                        }
                    }
                    if (ids.isEmpty()) {
                        c.rollback();
                        return;  // nothing arrived for WAIT seconds (a service would simply take again)
                    }
                    invoice.executeBatch();
                    ack.setString(1, TOPIC);
                    ack.setString(2, ids.toString());  // [17, 18]: a JSON array
                    ack.execute();
                    c.commit();  // the invoices and the acks together: a crash before it redoes both
                } catch (SQLException e) {
                    c.rollback();  // nothing invoiced, nothing acknowledged
                    invoice.clearBatch();
                    if (e.getErrorCode() == 1317 || e.getErrorCode() == 1213) {
                        continue;  // a wake-up ended the wait; a deadlock: take again
                    }
                    throw e;
                }
                System.out.println("invoiced " + ids.size() + " orders");
            }
        }
    }
}
