// The SQL interface through JDBC (Debian's MariaDB Connector/J, over the socket with JNA), as
// the least-privilege user, in JDBC's own way: setAutoCommit(false), commit(), rollback().
// Compiled and run by tests/sql/run.sh java (TXMQ_SQL_* in the environment);
// `java SqlSuite consume` is the exactly-once test's child process.
import java.nio.charset.StandardCharsets;
import java.sql.*;
import java.util.*;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

public class SqlSuite {
    static final Map<String, String> ENV = System.getenv();
    static final String P = ENV.get("TXMQ_SQL_PREFIX");
    static final String TX = P + "_tx", BATCH = P + "_batch", EO = P + "_eo";
    static final String ORDERS = "`" + P + "_orders`", ACCOUNTS = "`" + P + "_accounts`",
                        PROCESSED = "`" + P + "_processed`";

    record Message(long id, byte[] payload, byte[] key, int attempt, String attributes) {}

    static Connection connect() throws SQLException {
        return DriverManager.getConnection("jdbc:mariadb://localhost/" + ENV.get("TXMQ_SQL_DATABASE")
            + "?localSocket=" + ENV.get("TXMQ_SQL_SOCKET"), ENV.get("TXMQ_SQL_USER"), ENV.get("TXMQ_SQL_PASSWORD"));
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static List<Long> ids(Connection c, String sql, Object... args) throws SQLException {
        try (PreparedStatement st = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) st.setObject(i + 1, args[i]);
            List<Long> out = new ArrayList<>();
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) out.add(rs.getLong(1));
            }
            return out;
        }
    }

    static long send(Connection c, String topic, byte[] payload, String options) throws SQLException {
        List<Long> got = ids(c, "CALL txmq_send(?, ?, ?)", topic, payload, options);
        check(got.size() == 1, "txmq_send gave " + got);
        return got.get(0);
    }

    static List<Message> take(Connection c, String topic, int n) throws SQLException {
        try (PreparedStatement st = c.prepareStatement("CALL txmq_take(?, NULL, ?)")) {
            st.setString(1, topic);
            st.setInt(2, n);
            List<Message> out = new ArrayList<>();
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next())
                    out.add(new Message(rs.getLong("id"), rs.getBytes("payload"), rs.getBytes("msg_key"),
                                        rs.getInt("attempt"), rs.getString("attributes")));
            }
            return out;
        }
    }

    static void ack(Connection c, String topic, List<Long> idList) throws SQLException {
        try (PreparedStatement st = c.prepareStatement("CALL txmq_ack(?, NULL, ?)")) {
            st.setString(1, topic);
            st.setString(2, idList.toString());  // [1, 2, 3]: a JSON array
            st.execute();
        }
    }

    static long count(Connection c, String sql, Object... args) throws SQLException {
        try (PreparedStatement st = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) st.setObject(i + 1, args[i]);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }

    static void nothingToTake(Connection c, String topic) throws SQLException {
        c.setAutoCommit(false);
        List<Message> got = take(c, topic, 1000);
        c.rollback();
        c.setAutoCommit(true);
        check(got.isEmpty(), got.size() + " messages in " + topic);
    }

    static String json(List<String> strings) {
        StringBuilder b = new StringBuilder("[");
        for (String s : strings) b.append(b.length() > 1 ? "," : "").append('"').append(s).append('"');
        return b.append(']').toString();
    }

    static void consume() throws Exception {
        try (Connection c = connect()) {
            c.setAutoCommit(false);
            System.out.println("ready");
            System.out.flush();
            for (;;) {
                List<Message> got = take(c, EO, 5);
                if (got.isEmpty()) {
                    c.rollback();
                    return;
                }
                List<Long> done = new ArrayList<>();
                for (Message m : got) {
                    int amount = Integer.parseInt(new String(m.payload(), StandardCharsets.UTF_8));
                    try (PreparedStatement st = c.prepareStatement(
                             "UPDATE " + ACCOUNTS + " SET balance = balance + ? WHERE id = 1")) {
                        st.setInt(1, amount);
                        st.executeUpdate();
                    }
                    try (PreparedStatement st = c.prepareStatement(
                             "INSERT INTO " + PROCESSED + " (msg_id, amount) VALUES (?, ?)")) {
                        st.setLong(1, m.id());
                        st.setInt(2, amount);
                        st.executeUpdate();
                    }
                    done.add(m.id());
                }
                ack(c, EO, done);
                c.commit();
            }
        }
    }

    static void testRollback(Connection c) throws Exception {
        String ref = "jv-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
        c.setAutoCommit(false);
        insertOrder(c, ref, 5);
        check(send(c, TX, ("order " + ref).getBytes(StandardCharsets.UTF_8), null) > 0, "no id");
        c.rollback();
        c.setAutoCommit(true);
        check(count(c, "SELECT COUNT(*) FROM " + ORDERS + " WHERE ref = ?", ref) == 0, "the order is there");
        nothingToTake(c, TX);
    }

    static void insertOrder(Connection c, String ref, int amount) throws SQLException {
        try (PreparedStatement st = c.prepareStatement("INSERT INTO " + ORDERS + " (ref, amount) VALUES (?, ?)")) {
            st.setString(1, ref);
            st.setInt(2, amount);
            st.executeUpdate();
        }
    }

    static void testCommit(Connection c) throws Exception {
        String ref = "jv-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
        byte[] text = (" binary " + ref).getBytes(StandardCharsets.UTF_8);
        byte[] payload = new byte[text.length + 2];
        payload[0] = 0;
        payload[1] = (byte) 0xff;
        System.arraycopy(text, 0, payload, 2, text.length);
        c.setAutoCommit(false);
        insertOrder(c, ref, 5);
        long id = send(c, TX, payload, "{\"key\": \"acct-1\", \"attributes\": {\"lang\": \"java\"}}");
        c.commit();
        check(count(c, "SELECT COUNT(*) FROM " + ORDERS + " WHERE ref = ?", ref) == 1, "no order");
        List<Message> got = take(c, TX, 100);
        for (Message m : got) ack(c, TX, List.of(m.id()));
        c.commit();
        c.setAutoCommit(true);
        check(got.size() == 1, "took " + got.size());
        Message m = got.get(0);
        check(m.id() == id && Arrays.equals(m.payload(), payload) && m.attempt() == 1
              && "acct-1".equals(new String(m.key(), StandardCharsets.UTF_8)), "took " + m + ", sent " + id);
        String attrs = m.attributes().replaceAll("\\s", "");
        check(attrs.contains("\"lang\":{\"type\":\"String\",\"value\":\"java\"}")
              || attrs.contains("\"lang\":{\"value\":\"java\",\"type\":\"String\"}"), "attributes " + attrs);
    }

    static void testBatch(Connection c) throws Exception {
        List<String> payloads = new ArrayList<>();
        for (int i = 0; i < 1000; i++) payloads.add(String.format("m%04d", i));
        c.setAutoCommit(false);
        List<Long> sent = ids(c, "CALL txmq_send_batch(?, ?)", BATCH, json(payloads));
        check(new HashSet<>(sent).size() == 1000, sent.size() + " ids");
        c.rollback();
        nothingToTake(c, BATCH);
        List<String> bad = new ArrayList<>(payloads.subList(0, 999));
        bad.add("x".repeat(200));  // over the topic's 100 bytes: the whole call fails
        expectTxmqError(() -> ids(c, "CALL txmq_send_batch(?, ?)", BATCH, json(bad)), "");
        nothingToTake(c, BATCH);
        String ref = "jv-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
        c.setAutoCommit(false);
        insertOrder(c, ref, 1000);
        sent = ids(c, "CALL txmq_send_batch(?, ?)", BATCH, json(payloads));
        c.commit();
        List<Message> got = take(c, BATCH, 1000);
        ack(c, BATCH, sent);
        c.commit();
        c.setAutoCommit(true);
        Map<Long, String> want = new HashMap<>(), have = new HashMap<>();
        for (int i = 0; i < sent.size(); i++) want.put(sent.get(i), payloads.get(i));
        for (Message m : got) have.put(m.id(), new String(m.payload(), StandardCharsets.UTF_8));
        check(want.equals(have), "took " + got.size() + " of 1000, or other payloads");
        check(count(c, "SELECT COUNT(*) FROM " + ORDERS + " WHERE ref = ?", ref) == 1, "no order");
        nothingToTake(c, BATCH);
    }

    static void testExactlyOnce(Connection c) throws Exception {
        List<String> amounts = new ArrayList<>();
        long sum = 0;
        for (int i = 0; i < 800; i++) {
            int a = ThreadLocalRandom.current().nextInt(1, 101);
            sum += a;
            amounts.add(Integer.toString(a));
        }
        c.setAutoCommit(false);
        List<Long> sent = ids(c, "CALL txmq_send_batch(?, ?)", EO, json(amounts));
        c.commit();
        c.setAutoCommit(true);
        String java = System.getProperty("java.home") + "/bin/java";
        int kills = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(50);
        for (;;) {
            check(System.nanoTime() < deadline, "not drained; " + kills + " kills");
            Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), "SqlSuite", "consume")
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            var out = new java.io.BufferedReader(new java.io.InputStreamReader(child.getInputStream()));
            String line = out.readLine();
            check("ready".equals(line), "child said " + line);
            if (kills < 6 && count(c, "SELECT COUNT(*) FROM " + PROCESSED) < sent.size()) {
                Thread.sleep(ThreadLocalRandom.current().nextInt(5, 60));
                if (child.isAlive()) {
                    child.destroyForcibly();  // SIGKILL
                    child.waitFor();
                    kills++;
                    continue;
                }
            }
            check(child.waitFor(30, TimeUnit.SECONDS) && child.exitValue() == 0, "child failed");
            if (count(c, "SELECT COUNT(*) FROM " + PROCESSED) == sent.size()) break;
            Thread.sleep(50);
        }
        check(kills >= 3, kills + " kills");
        Map<Long, String> want = new HashMap<>(), have = new HashMap<>();
        for (int i = 0; i < sent.size(); i++) want.put(sent.get(i), amounts.get(i));
        try (Statement st = c.createStatement();
             ResultSet rs = st.executeQuery("SELECT msg_id, amount FROM " + PROCESSED)) {
            while (rs.next()) have.put(rs.getLong(1), rs.getString(2));
        }
        check(want.equals(have), "processed " + have.size() + " of " + want.size() + ", or other amounts");
        check(count(c, "SELECT balance FROM " + ACCOUNTS + " WHERE id = 1") == sum, "balance");
        nothingToTake(c, EO);
        System.out.println("  exactly once: " + sent.size() + " messages, " + kills + " kills");
    }

    interface Call { void run() throws SQLException; }

    static void expectTxmqError(Call call, String says) {
        try {
            call.run();
        } catch (SQLException e) {
            // Connector/J puts "(conn=N) " before the server's message
            String message = e.getMessage().replaceFirst("^\\(conn=\\d+\\) ", "");
            check(e.getErrorCode() == 1644 && message.startsWith("txmq: ") && message.contains(says),
                  "error " + e.getErrorCode() + " " + e.getMessage());
            return;
        }
        throw new AssertionError("no error");
    }

    static void testBadInput(Connection c) throws Exception {
        String nosuch = "nosuch_" + Integer.toHexString(ThreadLocalRandom.current().nextInt());
        expectTxmqError(() -> ids(c, "CALL txmq_send(?, 'x', NULL)", nosuch), nosuch);
        expectTxmqError(() -> ids(c, "CALL txmq_send(?, 'x', NULL)", "x; DROP TABLE y"), "invalid topic name");
        expectTxmqError(() -> ids(c, "CALL txmq_send_batch(?, ?)", TX, "[{\"payload\": \"a\"},"), "");
        expectTxmqError(() -> ids(c, "CALL txmq_send_batch(?, ?)", TX, "[]"), "");
        expectTxmqError(() -> take(c, TX, 1), "transaction");  // autocommit
        c.setAutoCommit(false);
        expectTxmqError(() -> take(c, nosuch, 1), "");
        c.rollback();
        c.setAutoCommit(true);
        nothingToTake(c, TX);
    }

    static void testPrivileges(Connection c) throws Exception {
        for (String sql : List.of("SELECT * FROM txmq_topics", "SELECT COUNT(*) FROM txmq_q_" + TX,
                                  "INSERT INTO txmq_q_" + TX + " (payload) VALUES ('forged')")) {
            try (Statement st = c.createStatement()) {
                st.execute(sql);
                throw new AssertionError("allowed: " + sql);
            } catch (SQLException e) {
                check(e.getErrorCode() == 1142, sql + ": " + e.getMessage());
            }
        }
    }

    interface Test { void run(Connection c) throws Exception; }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("consume")) {
            consume();
            return;
        }
        Map<String, Test> tests = new LinkedHashMap<>();
        tests.put("send rolled back leaves neither", SqlSuite::testRollback);
        tests.put("send committed leaves both, and its id is the message's", SqlSuite::testCommit);
        tests.put("a batch of 1000 is all or none", SqlSuite::testBatch);
        tests.put("exactly once while the consumer is killed", SqlSuite::testExactlyOnce);
        tests.put("bad input is a txmq error and writes nothing", SqlSuite::testBadInput);
        tests.put("the app user cannot touch txmq's tables", SqlSuite::testPrivileges);
        int failed = 0;
        for (var test : tests.entrySet()) {
            long start = System.nanoTime();
            try (Connection c = connect()) {
                test.getValue().run(c);
                System.out.printf("ok %s (%d ms)%n", test.getKey(), (System.nanoTime() - start) / 1_000_000);
            } catch (Throwable e) {
                failed++;
                System.out.println("FAIL " + test.getKey() + ": " + e);
                e.printStackTrace(System.out);
            }
        }
        System.out.printf("%d passed, %d failed%n", tests.size() - failed, failed);
        System.exit(failed > 0 ? 1 : 0);
    }
}
