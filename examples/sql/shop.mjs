// txmq's SQL interface from Node.js (mysql2/promise): an order and its message in one
// transaction, and a consumer that turns each message into exactly one invoice.
// Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'; then, with
// mysql2 installed beside this file (npm install mysql2):
//   APP_PASSWORD=secret node shop.mjs send 3    # 3 orders, each with its message
//   APP_PASSWORD=secret node shop.mjs consume   # invoices, one per message; exits when drained
// Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC.
import mysql from "mysql2/promise";

const env = process.env;
const [TOPIC, Q] = [env.TOPIC ?? "orders", env.TXMQ_DB ?? "txmq"];
const conn = await mysql.createConnection({
  socketPath: env.MYSQL_UNIX_PORT ?? "/run/mysqld/mysqld.sock", user: env.APP_USER ?? "app",
  password: env.APP_PASSWORD ?? "", database: env.APP_DB ?? "shop", supportBigNumbers: true,
});

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
    await conn.beginTransaction(); // txmq_take holds the messages until the transaction ends
    const [[rows]] = await conn.query(`CALL ${Q}.txmq_take(?, NULL, 10)`, [TOPIC]);
    if (rows.length === 0) {
      await conn.rollback();
      return; // drained (a service would wait a little and take again)
    }
    for (const m of rows) {
      await conn.query("INSERT INTO invoices (msg_id, order_id, amount) " +
        "SELECT ?, id, amount FROM orders WHERE id = ?", [m.id, JSON.parse(m.payload).order]);
    }
    await conn.query(`CALL ${Q}.txmq_ack(?, NULL, ?)`, [TOPIC, JSON.stringify(rows.map((m) => m.id))]);
    await conn.commit(); // the invoices and the acks together: a crash before it redoes both
    console.log(`invoiced ${rows.length} orders`);
  }
}

await (process.argv[2] === "send" ? send(Number(process.argv[3])) : consume());
await conn.end();
