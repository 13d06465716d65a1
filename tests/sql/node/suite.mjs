// The SQL interface through Node.js's mysql2 (promise API), as the least-privilege user.
// Run by tests/sql/run.sh node: mysql2 in TXMQ_SQL_NODE_DIR, TXMQ_SQL_* in the environment.
// `node suite.mjs consume` is the exactly-once test's child process.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomInt } from "node:crypto";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

const require = createRequire(`${process.env.TXMQ_SQL_NODE_DIR}/`);
const mysql = require("mysql2/promise");

const env = process.env;
const P = env.TXMQ_SQL_PREFIX;
const [TX, BATCH, EO] = [`${P}_tx`, `${P}_batch`, `${P}_eo`];
const [ORDERS, ACCOUNTS, PROCESSED] = [`${P}_orders`, `${P}_accounts`, `${P}_processed`];

const connect = () => mysql.createConnection({
  socketPath: env.TXMQ_SQL_SOCKET, user: env.TXMQ_SQL_USER, password: env.TXMQ_SQL_PASSWORD,
  database: env.TXMQ_SQL_DATABASE, supportBigNumbers: true, bigNumberStrings: true,
});

// A CALL's first result set (mysql2 gives [rows, the CALL's OK]).
async function call(conn, sql, args) {
  const [results] = await conn.query(sql, args);
  return Array.isArray(results[0]) ? results[0] : [];
}
const send = async (conn, topic, payload, options = null) =>
  (await call(conn, "CALL txmq_send(?, ?, ?)", [topic, payload, options]))[0].id;
const sendBatch = async (conn, topic, messages) =>
  (await call(conn, "CALL txmq_send_batch(?, ?)", [topic, JSON.stringify(messages)])).map((r) => r.id);
const take = (conn, topic, n) => call(conn, "CALL txmq_take(?, NULL, ?)", [topic, n]);
const ack = (conn, topic, ids) => call(conn, "CALL txmq_ack(?, NULL, ?)", [topic, JSON.stringify(ids)]);
// attributes: JSON text, a Buffer, or already parsed (MySQL's JSON type)
const parsed = (v) => (typeof v === "string" || Buffer.isBuffer(v) ? JSON.parse(v.toString()) : v);

async function consume() {
  const conn = await connect();
  console.log("ready");
  for (;;) {
    await conn.beginTransaction();
    const rows = await take(conn, EO, 5);
    if (rows.length === 0) {
      await conn.rollback();
      await conn.end();
      return;
    }
    for (const r of rows) {
      const amount = Number(r.payload.toString());
      await conn.query(`UPDATE \`${ACCOUNTS}\` SET balance = balance + ? WHERE id = 1`, [amount]);
      await conn.query(`INSERT INTO \`${PROCESSED}\` (msg_id, amount) VALUES (?, ?)`, [r.id, amount]);
    }
    await ack(conn, EO, rows.map((r) => r.id));
    await conn.commit();
  }
}

async function nothingToTake(conn, topic) {
  await conn.beginTransaction();
  const rows = await take(conn, topic, 1000);
  await conn.rollback();
  assert.deepEqual(rows, [], `messages in ${topic}`);
}

async function orders(conn, ref) {
  const [rows] = await conn.query(`SELECT COUNT(*) AS n FROM \`${ORDERS}\` WHERE ref = ?`, [ref]);
  return Number(rows[0].n);
}

async function assertTxmqError(conn, sql, args, { inTransaction = false, says = "" } = {}) {
  if (inTransaction) await conn.beginTransaction();
  await assert.rejects(call(conn, sql, args), (err) => {
    assert.equal(err.errno, 1644, err.message);
    assert.ok(err.sqlMessage.startsWith("txmq: "), err.sqlMessage);
    assert.ok(err.sqlMessage.includes(says), err.sqlMessage);
    return true;
  });
  if (inTransaction) await conn.rollback();
}

const tests = {
  async "send rolled back leaves neither"(conn) {
    const ref = `js-${randomInt(1e12)}`;
    await conn.beginTransaction();
    await conn.query(`INSERT INTO \`${ORDERS}\` (ref, amount) VALUES (?, 5)`, [ref]);
    assert.ok(BigInt(await send(conn, TX, Buffer.from(`order ${ref}`))) > 0n);
    await conn.rollback();
    assert.equal(await orders(conn, ref), 0);
    await nothingToTake(conn, TX);
  },

  async "send committed leaves both, and its id is the message's"(conn) {
    const ref = `js-${randomInt(1e12)}`;
    const payload = Buffer.concat([Buffer.from([0, 255]), Buffer.from(` binary ${ref}`)]);
    await conn.beginTransaction();
    await conn.query(`INSERT INTO \`${ORDERS}\` (ref, amount) VALUES (?, 5)`, [ref]);
    const id = await send(conn, TX, payload,
      JSON.stringify({ key: "acct-1", attributes: { lang: "node" } }));
    await conn.commit();
    assert.equal(await orders(conn, ref), 1);
    await conn.beginTransaction();
    const rows = await take(conn, TX, 100);
    await ack(conn, TX, rows.map((r) => r.id));
    await conn.commit();
    assert.equal(rows.length, 1);
    assert.equal(rows[0].id, id);
    assert.deepEqual(rows[0].payload, payload);
    assert.equal(rows[0].msg_key.toString(), "acct-1");
    assert.equal(Number(rows[0].attempt), 1);
    assert.deepEqual(parsed(rows[0].attributes).lang, { type: "String", value: "node" });
  },

  async "a batch of 1000 is all or none"(conn) {
    const messages = Array.from({ length: 1000 }, (_, i) => ({ payload: `m${i}` }));
    await conn.beginTransaction();
    let ids = await sendBatch(conn, BATCH, messages);
    assert.equal(new Set(ids).size, 1000);
    await conn.rollback();
    await nothingToTake(conn, BATCH);
    await assertTxmqError(conn, "CALL txmq_send_batch(?, ?)",  // one over the topic's 100 bytes
      [BATCH, JSON.stringify([...messages.slice(0, 999), { payload: "x".repeat(200) }])]);
    await nothingToTake(conn, BATCH);
    const ref = `js-${randomInt(1e12)}`;
    await conn.beginTransaction();
    await conn.query(`INSERT INTO \`${ORDERS}\` (ref, amount) VALUES (?, 1000)`, [ref]);
    ids = await sendBatch(conn, BATCH, messages);
    await conn.commit();
    await conn.beginTransaction();
    const rows = await take(conn, BATCH, 1000);
    await ack(conn, BATCH, ids);
    await conn.commit();
    const want = new Map(ids.map((id, i) => [id, messages[i].payload]));
    assert.deepEqual(new Map(rows.map((r) => [r.id, r.payload.toString()])), want);
    assert.equal(await orders(conn, ref), 1);
    await nothingToTake(conn, BATCH);
  },

  async "exactly once while the consumer is killed"(conn) {
    const amounts = Array.from({ length: 800 }, () => randomInt(1, 101));
    await conn.beginTransaction();
    const ids = await sendBatch(conn, EO, amounts.map(String));
    await conn.commit();
    const processed = async () =>
      Number((await conn.query(`SELECT COUNT(*) AS n FROM \`${PROCESSED}\``))[0][0].n);
    let kills = 0;
    const deadline = Date.now() + 45000;
    for (;;) {
      assert.ok(Date.now() < deadline, `not drained; ${kills} kills`);
      const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "consume"],
        { stdio: ["ignore", "pipe", "inherit"] });
      const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
      const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
      assert.equal((await lines.next()).value, "ready");
      if (kills < 6 && (await processed()) < ids.length) {
        await sleep(randomInt(5, 60));
        if (child.exitCode === null) {
          child.kill("SIGKILL");
          await exited;
          kills++;
          continue;
        }
      }
      assert.deepEqual(await exited, { code: 0, signal: null });
      if ((await processed()) === ids.length) break;
      await sleep(50);
    }
    assert.ok(kills >= 3, `${kills} kills`);
    const [rows] = await conn.query(`SELECT msg_id, amount FROM \`${PROCESSED}\``);
    assert.deepEqual(new Map(rows.map((r) => [String(r.msg_id), r.amount])),
      new Map(ids.map((id, i) => [id, amounts[i]])));
    const [[account]] = await conn.query(`SELECT balance FROM \`${ACCOUNTS}\` WHERE id = 1`);
    assert.equal(Number(account.balance), amounts.reduce((a, b) => a + b, 0));
    await nothingToTake(conn, EO);
    console.log(`  exactly once: ${ids.length} messages, ${kills} kills`);
  },

  async "bad input is a txmq error and writes nothing"(conn) {
    const nosuch = `nosuch_${randomInt(1e9)}`;
    await assertTxmqError(conn, "CALL txmq_send(?, 'x', NULL)", [nosuch], { says: nosuch });
    await assertTxmqError(conn, "CALL txmq_send(?, 'x', NULL)", ["x; DROP TABLE y"],
      { says: "invalid topic name" });
    await assertTxmqError(conn, "CALL txmq_send_batch(?, ?)", [TX, '[{"payload": "a"},']);
    await assertTxmqError(conn, "CALL txmq_send_batch(?, ?)", [TX, "[]"]);
    await assertTxmqError(conn, "CALL txmq_take(?, NULL, 1)", [TX], { says: "transaction" });
    await assertTxmqError(conn, "CALL txmq_take(?, NULL, 1)", [nosuch], { inTransaction: true });
    await nothingToTake(conn, TX);
  },

  async "the app user cannot touch txmq's tables"(conn) {
    for (const sql of ["SELECT * FROM txmq_topics", `SELECT COUNT(*) FROM txmq_q_${TX}`,
      `INSERT INTO txmq_q_${TX} (payload) VALUES ('forged')`]) {
      await assert.rejects(conn.query(sql), (err) => err.errno === 1142, sql);
    }
  },
};

if (process.argv[2] === "consume") {
  await consume();
} else {
  let failed = 0;
  for (const [name, body] of Object.entries(tests)) {
    const conn = await connect();
    const t0 = Date.now();
    try {
      await body(conn);
      console.log(`ok ${name} (${Date.now() - t0} ms)`);
    } catch (err) {
      failed++;
      console.log(`FAIL ${name}\n`, err);
    } finally {
      await conn.end();
    }
  }
  console.log(`${Object.keys(tests).length - failed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}
