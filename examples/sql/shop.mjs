// txmq's SQL interface from Node.js (mysql2/promise): an order and its message in one
// transaction, and a consumer that turns each message into exactly one invoice.
// Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'; then, with
// mysql2 installed beside this file (npm install mysql2):
//   APP_PASSWORD=secret node shop.mjs send 3    # 3 orders, each with its message
//   APP_PASSWORD=secret node shop.mjs consume   # invoices, one per message, as they come
// Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC, WAIT_SECONDS (how
// long consume waits for a message before it exits; 5).
import mysql from "mysql2/promise";

const env = process.env;
const [TOPIC, Q, WAIT] = [env.TOPIC ?? "orders", env.TXMQ_DB ?? "txmq", Number(env.WAIT_SECONDS ?? 5)];
const conn = await mysql.createConnection({
  socketPath: env.MYSQL_UNIX_PORT ?? "/run/mysqld/mysqld.sock", user: env.APP_USER ?? "app",
  password: env.APP_PASSWORD ?? "", database: env.APP_DB ?? "shop", supportBigNumbers: true,
});
await conn.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); // txmq_take_wait's

async function send(n) {
  for (let i = 0; i < n; i++) {
    await conn.beginTransaction(); // the order and its message: both or neither
    const [order] = await conn.query("INSERT INTO orders (customer, amount) VALUES (?, ?)",
      ["alice", 1 + Math.floor(Math.random() * 100)]);
    const [[[{ id }]]] = await conn.query(`CALL ${Q}.txmq_send(?, ?, NULL)`,
      [TOPIC, JSON.stringify({ order: order.insertId })]); // [[rows], the CALL's OK]
    await conn.commit();
    console.log(`order ${order.insertId}: message ${id}`);
  }
}

async function consume() {
  for (;;) {
    await conn.beginTransaction(); // txmq_take_wait holds the messages until the transaction ends
    let rows;
    try {
      // returns at once when there are messages, else as soon as one is committed
      [[rows]] = await conn.query(`CALL ${Q}.txmq_take_wait(?, NULL, 10, ?)`, [TOPIC, WAIT]);
      if (rows.length === 0) {
        await conn.rollback();
        return; // nothing arrived for WAIT seconds (a service would simply take again)
      }
      for (const m of rows) {
        await conn.query("INSERT INTO invoices (msg_id, order_id, amount) " +
          "SELECT ?, id, amount FROM orders WHERE id = ?", [m.id, JSON.parse(m.payload).order]);
      }
      await conn.query(`CALL ${Q}.txmq_ack(?, NULL, ?)`, [TOPIC, JSON.stringify(rows.map((m) => m.id))]);
      await conn.commit(); // the invoices and the acks together: a crash before it redoes both
    } catch (e) {
      await conn.rollback(); // nothing invoiced, nothing acknowledged
      if (e.errno === 1317 || e.errno === 1213) continue; // a wake-up ended the wait; a deadlock: take again
      throw e;
    }
    console.log(`invoiced ${rows.length} orders`);
  }
}

await (process.argv[2] === "send" ? send(Number(process.argv[3])) : consume());
await conn.end();
