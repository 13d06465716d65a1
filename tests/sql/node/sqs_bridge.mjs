// SQL sends to SQS queues by name (CALL txmq_sqs_send, docs/sqs.md), received over SQS's JSON
// protocol by @aws-sdk/client-sqs v3: what a Node consumer receives of a message sent from SQL
// in the application's transaction is what it receives of the same message sent by SendMessage,
// on a standard and a FIFO queue, with attributes, delays, groups and deduplication.
// Run by tests/sql/run.sh node: mysql2 in TXMQ_SQL_NODE_DIR, the SDK in TXMQ_SQS_NODE_DIR,
// TXMQ_SQL_* in the environment. Starts its own `txmq serve` on the admin DSN (a free loopback
// port, scratch keys) and stops it with SIGTERM (it must exit 0).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const mysql = createRequire(`${process.env.TXMQ_SQL_NODE_DIR}/`)("mysql2/promise");
const {
  SQSClient, CreateQueueCommand, DeleteQueueCommand, SendMessageCommand, ReceiveMessageCommand,
  DeleteMessageCommand,
} = createRequire(`${process.env.TXMQ_SQS_NODE_DIR}/`)("@aws-sdk/client-sqs");

const env = process.env;
const P = env.TXMQ_SQL_PREFIX;
const ORDERS = `${P}_orders`;

const connect = () => mysql.createConnection({
  socketPath: env.TXMQ_SQL_SOCKET, user: env.TXMQ_SQL_USER, password: env.TXMQ_SQL_PASSWORD,
  database: env.TXMQ_SQL_DATABASE, charset: "utf8mb4", supportBigNumbers: true,
  bigNumberStrings: true,
});
// The CALL's one row: id, MessageId, SequenceNumber, MD5OfMessageBody, MD5OfMessageAttributes.
async function sqsSend(conn, queue, body, options) {
  const [results] = await conn.query("CALL txmq_sqs_send(?, ?, ?)",
                                     [queue, body, options ? JSON.stringify(options) : null]);
  return results[0][0];
}

// --- txmq serve ----------------------------------------------------------------------------
const scratch = mkdtempSync(join(tmpdir(), "txmq-sql-bridge-js."));
const KEY = `AKIDTXMQ${randomBytes(6).toString("hex").toUpperCase()}`;
const SECRET = randomBytes(20).toString("hex");
writeFileSync(join(scratch, "credentials"), `# scratch keys of tests/sql/node/sqs_bridge.mjs\n${KEY} ${SECRET}\n`);
const serve = spawn(env.TXMQ_SQL_TXMQ, ["--dsn", env.TXMQ_SQL_ADMIN_DSN, "serve", "--listen",
                                        "127.0.0.1:0", "--credentials", join(scratch, "credentials")],
                    { stdio: ["ignore", "pipe", "pipe"] });
let serveErr = "";
serve.stderr.on("data", (d) => { serveErr += d; });
const endpoint = await new Promise((resolve, reject) => {
  let out = "";
  serve.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/^txmq serve: listening on (http:\/\/\S+)/m);
    if (m) resolve(m[1]);
  });
  serve.on("exit", (code) => reject(new Error(`txmq serve exited ${code}: ${serveErr}`)));
  setTimeout(() => reject(new Error(`txmq serve did not listen within 60 s: ${serveErr}`)), 60000);
});
const sqs = new SQSClient({ endpoint, region: "us-east-1", maxAttempts: 1,
                            credentials: { accessKeyId: KEY, secretAccessKey: SECRET } });

async function receiveAll(url, want, seconds = 10) {
  const got = [];
  const until = Date.now() + seconds * 1000;
  while (got.length < want && Date.now() < until) {
    const r = await sqs.send(new ReceiveMessageCommand({
      QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["All"] }));
    for (const m of r.Messages ?? []) {
      got.push(m);
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    }
  }
  return got;
}

const failures = [];
async function test(name, body) {
  try {
    await body();
    console.log(`ok - ${name}`);
  } catch (e) {
    failures.push(name);
    console.log(`not ok - ${name}\n${e.stack}`);
  }
}

const conn = await connect();
const [[{ v }]] = await conn.query("SELECT VERSION() AS v");
const onMysql = !v.includes("MariaDB");

await test("a standard queue: the SQL send and SendMessage's copy arrive alike", async () => {
  const name = `${P}-bridge-js`;
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: name }));
  try {
    const body = `żółty 🦀 ${randomBytes(4).toString("hex")}`;
    const attributes = {
      colour: { DataType: "String", StringValue: "żółty" },
      amount: { DataType: "Number", StringValue: "12.5" },
      blob: { DataType: "Binary.gz", BinaryValue: "AAEC/w==" },
    };
    // Rolled back: never seen. Committed beside the business row: received.
    await conn.beginTransaction();
    await sqsSend(conn, name, "rolled back", null);
    await conn.rollback();
    await conn.beginTransaction();
    await conn.query(`INSERT INTO \`${ORDERS}\` (ref, amount) VALUES (?, 4)`, [body.slice(-8)]);
    const answer = await sqsSend(conn, url, body, { MessageAttributes: attributes });
    await conn.commit();
    const sent = await sqs.send(new SendMessageCommand({
      QueueUrl: url, MessageBody: body, MessageAttributes: {
        colour: attributes.colour, amount: attributes.amount,
        blob: { DataType: "Binary.gz", BinaryValue: Buffer.from([0, 1, 2, 255]) } } }));
    assert.equal(answer.SequenceNumber, null);
    if (answer.MD5OfMessageBody !== null || !onMysql) {  // MySQL 9 has no MD5(): NULL there
      assert.equal(answer.MD5OfMessageBody, sent.MD5OfMessageBody);
      assert.equal(answer.MD5OfMessageAttributes, sent.MD5OfMessageAttributes);
    }
    assert.equal(answer.MD5OfMessageBody ?? createHash("md5").update(body).digest("hex"),
                 sent.MD5OfMessageBody);
    const got = await receiveAll(url, 2);
    assert.equal(got.length, 2, "two messages");
    const fromSql = got.find((m) => m.MessageId === answer.MessageId);
    const fromSqs = got.find((m) => m.MessageId === sent.MessageId);
    assert.ok(fromSql && fromSqs, "both MessageIds received");
    for (const field of ["Body", "MD5OfBody", "MD5OfMessageAttributes"]) {
      assert.deepEqual(fromSql[field], fromSqs[field], field);
    }
    assert.deepEqual(fromSql.MessageAttributes, fromSqs.MessageAttributes);
    assert.equal(fromSql.Body, body);
  } finally {
    await sqs.send(new DeleteQueueCommand({ QueueUrl: url }));
  }
});

await test("a delayed SQL send is received after its DelaySeconds", async () => {
  const name = `${P}-bridge-js-delay`;
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: name }));
  try {
    const started = Date.now();
    await sqsSend(conn, name, "later", { DelaySeconds: 2 });
    const early = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 1 }));
    assert.deepEqual(early.Messages ?? [], [], "not before its delay");
    const got = await receiveAll(url, 1);
    assert.equal(got.length, 1);
    assert.equal(got[0].Body, "later");
    assert.ok(Date.now() - started >= 1900, `received after ${Date.now() - started} ms`);
  } finally {
    await sqs.send(new DeleteQueueCommand({ QueueUrl: url }));
  }
});

await test("a FIFO queue: SQL sends keep the group's order and dedup with SendMessage", async () => {
  const name = `${P}-bridge-js.fifo`;
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({
    QueueName: name, Attributes: { FifoQueue: "true" } }));
  try {
    await conn.beginTransaction();
    const first = await sqsSend(conn, name, "one", { MessageGroupId: "g", MessageDeduplicationId: "d1" });
    await sqsSend(conn, name, "two", { MessageGroupId: "g", MessageDeduplicationId: "d2" });
    await conn.commit();
    assert.match(String(first.SequenceNumber), /^\d+$/);
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "three", MessageGroupId: "g",
                                            MessageDeduplicationId: "d3" }));
    // d1 again within the window: SQS answers the first send's MessageId and sends nothing.
    const again = await sqs.send(new SendMessageCommand({
      QueueUrl: url, MessageBody: "one again", MessageGroupId: "g", MessageDeduplicationId: "d1" }));
    assert.equal(again.MessageId, first.MessageId);
    const got = await receiveAll(url, 3);
    assert.deepEqual(got.map((m) => m.Body), ["one", "two", "three"]);
    assert.equal(got[0].Attributes.MessageGroupId, "g");
    assert.equal(got[0].Attributes.MessageDeduplicationId, "d1");
    assert.equal(got[0].Attributes.SequenceNumber, String(first.SequenceNumber));
    await assert.rejects(sqsSend(conn, name, "x", null), /needs MessageGroupId/);
  } finally {
    await sqs.send(new DeleteQueueCommand({ QueueUrl: url }));
  }
});

await conn.end();
serve.kill("SIGTERM");
const status = await new Promise((resolve) => {
  if (serve.exitCode !== null) resolve(serve.exitCode);
  serve.on("exit", (code) => resolve(code));
  setTimeout(() => resolve("no exit within 30 s of SIGTERM"), 30000);
});
rmSync(scratch, { recursive: true, force: true });
if (status !== 0) failures.push(`txmq serve exited ${status} after SIGTERM: ${serveErr}`);
if (failures.length > 0) {
  console.log(`sqs_bridge.mjs: FAILED: ${failures.join("; ")}`);
  process.exit(1);
}
console.log("sqs_bridge.mjs: every test passed");
process.exit(0);
