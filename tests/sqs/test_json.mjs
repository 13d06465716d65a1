// txmq serve through @aws-sdk/client-sqs v3, which speaks AWS JSON 1.0 (X-Amz-Target) and checks
// body MD5s itself. Run by tests/sqs/run.sh (node --test), which installs the SDK into
// TXMQ_SQS_NODE_DIR, starts the server and sets TXMQ_SQS_ENDPOINT, TXMQ_SQS_PREFIX and the keys.
// Every response, errors included, is recorded: a JSON client must never get XML back.
import assert from "node:assert/strict";
import { createHash, createHmac } from "node:crypto";
import { createRequire } from "node:module";
import { after, describe, it } from "node:test";

const require = createRequire(`${process.env.TXMQ_SQS_NODE_DIR}/`);
const sqsSdk = require("@aws-sdk/client-sqs");
const {
  SQSClient, CreateQueueCommand, GetQueueUrlCommand, ListQueuesCommand, DeleteQueueCommand,
  GetQueueAttributesCommand, SetQueueAttributesCommand, PurgeQueueCommand, SendMessageCommand,
  SendMessageBatchCommand, ReceiveMessageCommand, DeleteMessageCommand, DeleteMessageBatchCommand,
  ChangeMessageVisibilityCommand, ChangeMessageVisibilityBatchCommand,
  ListDeadLetterSourceQueuesCommand, TagQueueCommand, UntagQueueCommand, AddPermissionCommand,
  ListQueueTagsCommand, QueueDoesNotExist, QueueNameExists, InvalidBatchEntryId,
  BatchEntryIdsNotDistinct, TooManyEntriesInBatchRequest, EmptyBatchRequest,
  InvalidMessageContents, InvalidAttributeName, UnsupportedOperation,
} = sqsSdk;

const ENDPOINT = process.env.TXMQ_SQS_ENDPOINT;
const PREFIX = `${process.env.TXMQ_SQS_PREFIX}-j`;
const KEY = process.env.AWS_ACCESS_KEY_ID;
const SECRET = process.env.AWS_SECRET_ACCESS_KEY;
const ACCOUNT = "000000000000";
const arn = (name) => `arn:aws:sqs:us-east-1:${ACCOUNT}:${name}`;

// Every HTTP response the SDK got: [operation, status, content type, first byte of the body].
const responses = [];

function makeClient(accessKeyId = KEY, secretAccessKey = SECRET) {
  const client = new SQSClient({
    endpoint: ENDPOINT, region: "us-east-1", maxAttempts: 1,
    credentials: { accessKeyId, secretAccessKey },
  });
  // Innermost in the stack: sees the raw HTTP response, before deserialization.
  client.middlewareStack.add((next, context) => async (args) => {
    const result = await next(args);
    const r = result.response;
    const chunks = [];
    for await (const chunk of r.body) chunks.push(Buffer.from(chunk));
    const body = Buffer.concat(chunks);
    let type;
    if (r.statusCode >= 400) {
      try { type = JSON.parse(body.toString("utf8")).__type; } catch { /* not JSON: the wire test says so */ }
    }
    responses.push({ operation: context.commandName, status: r.statusCode,
                     contentType: r.headers["content-type"], first: body.toString("utf8", 0, 1),
                     queryError: r.headers["x-amzn-query-error"], type });
    r.body = new Uint8Array(body);  // read once here; the deserializer takes bytes too
    return result;
  }, { step: "deserialize", priority: "low", name: "recordResponses" });
  return client;
}

const sqs = makeClient();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const md5 = (data) => createHash("md5").update(data).digest("hex");

// SQS's MD5OfMessageAttributes (see test_query.py).
function md5OfAttributes(attributes) {
  const field = (bytes) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    return Buffer.concat([length, bytes]);
  };
  const parts = [];
  for (const name of Object.keys(attributes).sort()) {
    const a = attributes[name];
    parts.push(field(Buffer.from(name, "utf8")), field(Buffer.from(a.DataType, "utf8")));
    if (a.StringValue !== undefined) {
      parts.push(Buffer.from([1]), field(Buffer.from(a.StringValue, "utf8")));
    } else {
      parts.push(Buffer.from([2]), field(Buffer.from(a.BinaryValue)));
    }
  }
  return md5(Buffer.concat(parts));
}

const created = [];
async function createQueue(suffix, attributes = {}, fifo = false) {
  const name = `${PREFIX}-${suffix}${fifo ? ".fifo" : ""}`;
  const attrs = fifo ? { ...attributes, FifoQueue: "true" } : attributes;
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attrs }));
  created.push(QueueUrl);
  return QueueUrl;
}

async function receive(url, options = {}) {
  const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 1, ...options }));
  return out.Messages ?? [];
}

async function drain(url, expected, seconds = 15, options = {}) {
  const got = [];
  const deadline = Date.now() + seconds * 1000;
  while (got.length < expected && Date.now() < deadline) {
    const batch = await receive(url, { MaxNumberOfMessages: 10, ...options });
    for (const m of batch) {
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    }
    got.push(...batch);
  }
  return got;
}

async function counts(url) {
  const { Attributes: a } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["All"] }));
  return [a.ApproximateNumberOfMessages, a.ApproximateNumberOfMessagesNotVisible,
          a.ApproximateNumberOfMessagesDelayed].map(Number);
}

// Rejects with an error of the given name (and class, when given).
async function rejectsWith(promise, name, errorClass) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.name, name, `${e.name}: ${e.message}`);
    if (errorClass) assert.ok(e instanceof errorClass, `${e.name} is not the SDK's ${errorClass.name}`);
    return true;
  });
}

after(async () => {
  // Newest first: a consumer-group queue goes before its source.
  for (const url of created.reverse()) {
    try { await sqs.send(new DeleteQueueCommand({ QueueUrl: url })); } catch { /* gone already */ }
  }
});

describe("queues", () => {
  it("creates, gets, lists with prefix and pages, deletes", async () => {
    const urls = [];
    for (const s of ["list-a", "list-b", "list-c"]) urls.push(await createQueue(s));
    assert.equal(urls[0], `${ENDPOINT}/${ACCOUNT}/${PREFIX}-list-a`);
    const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: `${PREFIX}-list-b` }));
    assert.equal(QueueUrl, urls[1]);
    const all = await sqs.send(new ListQueuesCommand({ QueueNamePrefix: `${PREFIX}-list-` }));
    assert.deepEqual([...all.QueueUrls].sort(), urls);
    const first = await sqs.send(new ListQueuesCommand({ QueueNamePrefix: `${PREFIX}-list-`, MaxResults: 2 }));
    assert.equal(first.QueueUrls.length, 2);
    assert.ok(first.NextToken);
    const second = await sqs.send(new ListQueuesCommand({
      QueueNamePrefix: `${PREFIX}-list-`, MaxResults: 2, NextToken: first.NextToken }));
    assert.deepEqual([...first.QueueUrls, ...second.QueueUrls].sort(), urls);
    assert.equal(second.NextToken, undefined);
    await sqs.send(new DeleteQueueCommand({ QueueUrl: urls[2] }));
    await rejectsWith(sqs.send(new GetQueueUrlCommand({ QueueName: `${PREFIX}-list-c` })),
                      "QueueDoesNotExist", QueueDoesNotExist);
  });

  it("create is idempotent with equal attributes, QueueNameExists with others", async () => {
    const url = await createQueue("idem", { VisibilityTimeout: "40" });
    const again = await sqs.send(new CreateQueueCommand({
      QueueName: `${PREFIX}-idem`, Attributes: { VisibilityTimeout: "40" } }));
    assert.equal(again.QueueUrl, url);
    await rejectsWith(sqs.send(new CreateQueueCommand({
      QueueName: `${PREFIX}-idem`, Attributes: { VisibilityTimeout: "41" } })),
                      "QueueNameExists", QueueNameExists);
  });

  it("attributes: get, set, invalid names and values, tags", async () => {
    const url = await createQueue("attrs");
    const { Attributes: a } = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["All"] }));
    assert.equal(a.VisibilityTimeout, "30");
    assert.equal(a.QueueArn, arn(`${PREFIX}-attrs`));
    await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { DelaySeconds: "3" } }));
    const { Attributes: b } = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["DelaySeconds"] }));
    assert.deepEqual(b, { DelaySeconds: "3" });
    await rejectsWith(sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["Bogus"] })),
                      "InvalidAttributeName", InvalidAttributeName);
    await rejectsWith(sqs.send(new SetQueueAttributesCommand({
      QueueUrl: url, Attributes: { VisibilityTimeout: "99999" } })), "InvalidAttributeValue");
    await sqs.send(new TagQueueCommand({ QueueUrl: url, Tags: { team: "json" } }));
    const tags = await sqs.send(new ListQueueTagsCommand({ QueueUrl: url }));
    assert.deepEqual(tags.Tags, { team: "json" });
  });
});

describe("messages", () => {
  it("send, receive and delete with attributes and digests", async () => {
    const url = await createQueue("msg");
    const body = "json body: \r\n\t \"quoted\" \\ <x> & \u00e9 \u65e5\u672c \ud83d\ude00";
    const attributes = {
      text: { DataType: "String", StringValue: "v\u00e4lue" },
      num: { DataType: "Number", StringValue: "42.5" },
      bin: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 254, 255]) },
      custom: { DataType: "String.custom", StringValue: "c" },
    };
    const before = Date.now();
    const sent = await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body,
                                                         MessageAttributes: attributes }));
    assert.equal(sent.MD5OfMessageBody, md5(body));
    assert.equal(sent.MD5OfMessageAttributes, md5OfAttributes(attributes));
    const [m] = await receive(url, { MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"],
                                     VisibilityTimeout: 60 });
    assert.equal(m.Body, body);
    assert.equal(m.MessageId, sent.MessageId);
    assert.equal(m.MD5OfBody, md5(body));
    assert.deepEqual(Object.keys(m.MessageAttributes).sort(), Object.keys(attributes).sort());
    assert.deepEqual(Buffer.from(m.MessageAttributes.bin.BinaryValue), Buffer.from([0, 1, 254, 255]));
    assert.equal(m.MessageAttributes.num.StringValue, "42.5");
    assert.equal(m.MD5OfMessageAttributes, md5OfAttributes(attributes));
    assert.equal(m.Attributes.ApproximateReceiveCount, "1");
    const sentAt = Number(m.Attributes.SentTimestamp);
    assert.ok(sentAt >= before - 2000 && sentAt <= Date.now() + 2000, `SentTimestamp ${sentAt}`);
    assert.ok(Number(m.Attributes.ApproximateFirstReceiveTimestamp) >= sentAt);
    assert.deepEqual(await counts(url), [0, 1, 0]);
    await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    assert.deepEqual(await counts(url), [0, 0, 0]);
  });

  it("batch send and batch delete report failures per entry", async () => {
    const url = await createQueue("batch");
    const sent = await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [
      { Id: "a", MessageBody: "first" }, { Id: "b", MessageBody: "second" },
      { Id: "c", MessageBody: "bad \u0000" }, { Id: "d", MessageBody: "third" }] }));
    assert.deepEqual(sent.Successful.map((s) => s.Id).sort(), ["a", "b", "d"]);
    assert.deepEqual(sent.Failed.map((f) => [f.Id, f.Code, f.SenderFault]), [["c", "InvalidMessageContents", true]]);
    const got = [];
    const deadline = Date.now() + 10000;
    while (got.length < 3 && Date.now() < deadline) {
      got.push(...await receive(url, { MaxNumberOfMessages: 10, VisibilityTimeout: 60 }));
    }
    assert.deepEqual(got.map((m) => m.Body).sort(), ["first", "second", "third"]);
    const entries = got.map((m, i) => ({ Id: `e${i}`, ReceiptHandle: m.ReceiptHandle }));
    entries.push({ Id: "bogus", ReceiptHandle: "no-such-receipt" });
    const deleted = await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: url, Entries: entries }));
    assert.deepEqual(deleted.Successful.map((s) => s.Id).sort(), ["e0", "e1", "e2"]);
    assert.deepEqual(deleted.Failed.map((f) => [f.Id, f.Code]), [["bogus", "ReceiptHandleIsInvalid"]]);
    assert.deepEqual(await counts(url), [0, 0, 0]);
  });

  it("a long poll is woken by a send", async () => {
    const url = await createQueue("poll");
    const poller = makeClient();
    const started = Date.now();
    const polling = poller.send(new ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 5 }))
      .then((out) => ({ out, at: Date.now() }));
    await sleep(1500);
    const sentAt = Date.now();
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "wake" }));
    const { out, at } = await polling;
    assert.deepEqual((out.Messages ?? []).map((m) => m.Body), ["wake"]);
    assert.ok(at - sentAt < 1000, `returned ${at - sentAt} ms after the send`);
    assert.ok(at - started > 1000);
  });

  it("visibility: 0 makes it visible at once, an extension keeps it hidden", async () => {
    const url = await createQueue("vis");
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "v" }));
    const [m] = await receive(url, { VisibilityTimeout: 60 });
    await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle,
                                                        VisibilityTimeout: 0 }));
    const [again] = await receive(url, { VisibilityTimeout: 2, WaitTimeSeconds: 2,
                                         MessageSystemAttributeNames: ["ApproximateReceiveCount"] });
    assert.equal(again.MessageId, m.MessageId);
    assert.equal(again.Attributes.ApproximateReceiveCount, "2");
    await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: again.ReceiptHandle,
                                                        VisibilityTimeout: 30 }));
    await sleep(3000);
    assert.deepEqual(await receive(url), []);
  });
});

describe("fifo", () => {
  it("keeps order within groups, blocks a group in flight, deduplicates", async () => {
    const url = await createQueue("order", {}, true);
    for (let i = 0; i < 4; i++) {
      for (const g of ["g1", "g2", "g3"]) {
        await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: `${g}-${i}`, MessageGroupId: g,
                                                MessageDeduplicationId: `${g}-${i}` }));
      }
    }
    // A duplicate id within the window: accepted, not delivered.
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "dup", MessageGroupId: "g1",
                                            MessageDeduplicationId: "g1-0" }));
    const [held] = await receive(url, { MaxNumberOfMessages: 1, VisibilityTimeout: 60 });
    assert.equal(held.Body, "g1-0");
    const others = await drain(url, 8, 20, { MessageSystemAttributeNames: ["All"] });
    assert.ok(others.every((m) => m.Attributes.MessageGroupId !== "g1"), "g1 was received while in flight");
    for (const g of ["g2", "g3"]) {
      const mine = others.filter((m) => m.Attributes.MessageGroupId === g);
      assert.deepEqual(mine.map((m) => m.Body), [0, 1, 2, 3].map((i) => `${g}-${i}`));
      const seq = mine.map((m) => BigInt(m.Attributes.SequenceNumber));
      for (let i = 1; i < seq.length; i++) assert.ok(seq[i] > seq[i - 1]);
    }
    await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: held.ReceiptHandle }));
    const rest = await drain(url, 3, 15);
    assert.deepEqual(rest.map((m) => m.Body), ["g1-1", "g1-2", "g1-3"]);
    assert.deepEqual(await receive(url), []);
  });

  it("content-based deduplication and a missing group id", async () => {
    const url = await createQueue("cbd", { ContentBasedDeduplication: "true" }, true);
    for (const body of ["same", "same", "other"]) {
      await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body, MessageGroupId: "g" }));
    }
    const got = await drain(url, 2, 10);
    assert.deepEqual(got.map((m) => m.Body), ["same", "other"]);
    assert.deepEqual(await receive(url), []);
    await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x" })), "MissingParameter");
  });
});

describe("redrive and purge", () => {
  it("moves a message received maxReceiveCount times to the dead-letter queue", async () => {
    const dlq = await createQueue("dlq");
    const source = await createQueue("src", { RedrivePolicy: JSON.stringify({
      deadLetterTargetArn: arn(`${PREFIX}-dlq`), maxReceiveCount: 2 }) });
    const attributes = { why: { DataType: "String", StringValue: "poison" } };
    const sent = await sqs.send(new SendMessageCommand({ QueueUrl: source, MessageBody: "poison",
                                                         MessageAttributes: attributes }));
    for (let i = 0; i < 2; i++) {
      const [m] = await receive(source, { WaitTimeSeconds: 3, VisibilityTimeout: 60 });
      assert.ok(m, `receive ${i + 1}`);
      await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: source, ReceiptHandle: m.ReceiptHandle,
                                                          VisibilityTimeout: 0 }));
    }
    assert.deepEqual(await receive(source, { WaitTimeSeconds: 2 }), []);
    const [dead] = await receive(dlq, { WaitTimeSeconds: 5, MessageAttributeNames: ["All"],
                                        MessageSystemAttributeNames: ["All"] });
    assert.equal(dead.Body, "poison");
    assert.equal(dead.MessageId, sent.MessageId);
    assert.deepEqual(dead.MessageAttributes, attributes);
    assert.equal(dead.Attributes.DeadLetterQueueSourceArn, arn(`${PREFIX}-src`));
    const sources = await sqs.send(new ListDeadLetterSourceQueuesCommand({ QueueUrl: dlq }));
    assert.deepEqual(sources.queueUrls, [source]);
  });

  it("purge removes ready, in-flight and delayed messages", async () => {
    const url = await createQueue("purge");
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "ready" }));
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "delayed", DelaySeconds: 60 }));
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "in flight" }));
    assert.equal((await receive(url, { VisibilityTimeout: 2 })).length, 1);
    await sqs.send(new PurgeQueueCommand({ QueueUrl: url }));
    assert.deepEqual(await counts(url), [0, 0, 0]);
    await sleep(2500);
    assert.deepEqual(await receive(url), []);
  });
});

describe("consumer-group queues", () => {
  it("each group queue gets every message sent to its source, and cannot be sent to", async () => {
    const source = await createQueue("gsrc");
    const audit = await createQueue("gaudit", { TxmqSourceQueue: `${PREFIX}-gsrc` });
    const billing = await createQueue("gbilling", { TxmqSourceQueue: arn(`${PREFIX}-gsrc`),
                                                    TxmqConsumerGroup: "billing" });
    const sent = [];
    for (let i = 0; i < 3; i++) {
      sent.push((await sqs.send(new SendMessageCommand({ QueueUrl: source, MessageBody: `m${i}` }))).MessageId);
    }
    for (const url of [source, audit, billing]) {
      const got = await drain(url, 3);
      assert.deepEqual(got.map((m) => m.Body).sort(), ["m0", "m1", "m2"], url);
      assert.deepEqual(got.map((m) => m.MessageId).sort(), [...sent].sort(), url);
    }
    const { Attributes: a } = await sqs.send(new GetQueueAttributesCommand({
      QueueUrl: billing, AttributeNames: ["All"] }));
    assert.equal(a.TxmqSourceQueue, `${PREFIX}-gsrc`);
    assert.equal(a.TxmqConsumerGroup, "billing");
    await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: audit, MessageBody: "x" })),
                      "UnsupportedOperation", UnsupportedOperation);
    await rejectsWith(sqs.send(new SetQueueAttributesCommand({
      QueueUrl: audit, Attributes: { DelaySeconds: "3" } })), "InvalidAttributeName", InvalidAttributeName);
  });
});

describe("errors", () => {
  it("a missing queue raises the SDK's QueueDoesNotExist", async () => {
    const missing = `${ENDPOINT}/${ACCOUNT}/${PREFIX}-missing`;
    await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: missing, MessageBody: "x" })),
                      "QueueDoesNotExist", QueueDoesNotExist);
    await rejectsWith(sqs.send(new ReceiveMessageCommand({ QueueUrl: missing })),
                      "QueueDoesNotExist", QueueDoesNotExist);
    const last = responses.at(-1);
    assert.equal(last.status, 400);
    assert.equal(last.queryError, "AWS.SimpleQueueService.NonExistentQueue;Sender");
  });

  it("batch errors", async () => {
    const url = await createQueue("berr");
    await rejectsWith(sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [
      { Id: "bad id!", MessageBody: "x" }] })), "InvalidBatchEntryId", InvalidBatchEntryId);
    await rejectsWith(sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [
      { Id: "same", MessageBody: "x" }, { Id: "same", MessageBody: "y" }] })),
                      "BatchEntryIdsNotDistinct", BatchEntryIdsNotDistinct);
    await rejectsWith(sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries:
      Array.from({ length: 11 }, (_, i) => ({ Id: `e${i}`, MessageBody: "x" })) })),
                      "TooManyEntriesInBatchRequest", TooManyEntriesInBatchRequest);
    await rejectsWith(sqs.send(new DeleteMessageBatchCommand({ QueueUrl: url, Entries: [] })),
                      "EmptyBatchRequest", EmptyBatchRequest);
    assert.deepEqual(await counts(url), [0, 0, 0]);
  });

  it("oversize messages and invalid characters", async () => {
    const url = await createQueue("size", { MaximumMessageSize: "1024" });
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x".repeat(1024) }));
    await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x".repeat(1025) })),
                      "InvalidParameterValue");
    await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x".repeat(1000),
      MessageAttributes: { pad: { DataType: "String", StringValue: "y".repeat(20) } } })),
                      "InvalidParameterValue");
    for (const body of ["nul \u0000", "\uffff", "\u0008"]) {
      await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body })),
                        "InvalidMessageContents", InvalidMessageContents);
    }
    assert.deepEqual(await counts(url), [1, 0, 0]);
  });

  it("a wrong secret and an unknown key are refused", async () => {
    await rejectsWith(makeClient(KEY, `${SECRET}x`).send(new ListQueuesCommand({})), "SignatureDoesNotMatch");
    assert.equal(responses.at(-1).status, 403);
    await rejectsWith(makeClient(process.env.TXMQ_SQS_UNKNOWN_KEY, SECRET).send(new ListQueuesCommand({})),
                      "InvalidClientTokenId");
    assert.equal(responses.at(-1).status, 403);
  });

  it("an unknown operation is refused in JSON", async () => {
    // A signed request for an action SQS does not have, through the SDK's own signer.
    const { SignatureV4 } = require("@smithy/signature-v4");
    class Sha256 {
      constructor(secret) { this.hash = secret ? createHmac("sha256", secret) : createHash("sha256"); }
      update(data) { this.hash.update(data); }
      async digest() { return new Uint8Array(this.hash.digest()); }
    }
    const signer = new SignatureV4({ service: "sqs", region: "us-east-1", sha256: Sha256,
                                     credentials: { accessKeyId: KEY, secretAccessKey: SECRET } });
    const target = new URL(ENDPOINT);
    const body = "{}";
    const signed = await signer.sign({
      method: "POST", protocol: target.protocol, hostname: target.hostname, port: Number(target.port),
      path: "/", headers: { host: target.host, "content-type": "application/x-amz-json-1.0",
                            "x-amz-target": "AmazonSQS.NoSuchAction" }, body });
    const response = await fetch(ENDPOINT + "/", { method: "POST", headers: signed.headers, body });
    assert.equal(response.status, 400);
    assert.match(response.headers.get("content-type"), /^application\/x-amz-json-1\.0/);
    const error = await response.json();
    assert.match(error.__type, /UnknownOperation/);
  });
});

// Refused as SQS refuses it: the error's name in the SDK, its Query code (the x-amzn-query-error
// header, which the SDK gives as e.Code), its text, HTTP 400 and the JSON __type.
async function refusedAs(promise, name, queryCode, message, type = name) {
  await rejectsWith(promise, name);
  const last = responses.at(-1);
  assert.equal(last.status, 400);
  assert.equal(last.queryError, `${queryCode};Sender`);
  assert.equal(last.type, `com.amazonaws.sqs#${type}`);
  await promise.catch((e) => {
    assert.equal(e.message, message);
    assert.equal(e.Code, queryCode);
  });
}

describe("as SQS", () => {
  const MIB = 1024 * 1024;
  const invalid = (promise, message) =>
    refusedAs(promise, "InvalidParameterValue", "InvalidParameterValue", message,
              "InvalidParameterValueException");

  it("MessageAttributeNames: a prefix and .* asks for every name that starts with it", async () => {
    const url = await createQueue("prefix");
    const names = ["Custom.a", "Custom.b", "CustomX", "Help.Me", "Hello", "General"];
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x", MessageAttributes:
      Object.fromEntries(names.map((n) => [n, { DataType: "String", StringValue: n }])) }));
    const asked = async (wanted) => {
      const [m] = await receive(url, { MessageAttributeNames: wanted, VisibilityTimeout: 0, WaitTimeSeconds: 3 });
      const got = m.MessageAttributes ?? {};
      if (Object.keys(got).length) assert.equal(m.MD5OfMessageAttributes, md5OfAttributes(got));
      return Object.keys(got).sort();
    };
    assert.deepEqual(await asked(["Custom.*"]), ["Custom.a", "Custom.b", "CustomX"]);
    assert.deepEqual(await asked(["Hel.*"]), ["Hello", "Help.Me"]);
    assert.deepEqual(await asked(["*"]), [...names].sort());
    assert.deepEqual(await asked(["nothing.*"]), []);
  });

  it("a FIFO queue takes DelaySeconds 0, single and batch, and no other", async () => {
    const url = await createQueue("fdelay", { ContentBasedDeduplication: "true" }, true);
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "zero", MessageGroupId: "g", DelaySeconds: 0 }));
    const batch = await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [
      { Id: "zero", MessageBody: "batch zero", MessageGroupId: "g", DelaySeconds: 0 },
      { Id: "two", MessageBody: "batch two", MessageGroupId: "g", DelaySeconds: 2 }] }));
    assert.deepEqual(batch.Successful.map((s) => s.Id), ["zero"]);
    assert.deepEqual(batch.Failed.map((f) => [f.Id, f.Code]), [["two", "InvalidParameterValue"]]);
    await invalid(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "two", MessageGroupId: "g",
                                                     DelaySeconds: 2 })),
                  "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.");
    assert.deepEqual((await drain(url, 2, 5)).map((m) => m.Body), ["zero", "batch zero"]);
  });

  it("a standard queue has no FifoQueue attribute, not even false", async () => {
    const name = `${PREFIX}-stdfifo`;
    for (const [attributes, message] of [
      [{ FifoQueue: "false" }, "Unknown Attribute FifoQueue."],
      [{ DeduplicationScope: "queue" }, "You can specify the DeduplicationScope only when FifoQueue is set to true."]]) {
      await refusedAs(sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes })),
                      "InvalidAttributeName", "InvalidAttributeName", message);
    }
    const url = await createQueue("stdfifo2");
    await refusedAs(sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { FifoQueue: "false" } })),
                    "InvalidAttributeName", "InvalidAttributeName", "Unknown Attribute FifoQueue.");
    const fifo = await createQueue("fifoattr", {}, true);
    await refusedAs(sqs.send(new SetQueueAttributesCommand({ QueueUrl: fifo, Attributes: { FifoQueue: "false" } })),
                    "InvalidAttributeValue", "InvalidAttributeValue",
                    "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.");
  });

  it("ReceiptHandleIsInvalid is HTTP 400", async () => {
    const url = await createQueue("handles");
    await refusedAs(sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: "garbage" })),
                    "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid",
                    'The input receipt handle "garbage" is not a valid receipt handle.');
    await refusedAs(sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: "garbage",
                                                                 VisibilityTimeout: 5 })),
                    "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid",
                    'The input receipt handle "garbage" is not a valid receipt handle.');
  });

  it("texts: a missing queue, empty batches, parameters", async () => {
    await refusedAs(sqs.send(new GetQueueUrlCommand({ QueueName: `${PREFIX}-nope` })), "QueueDoesNotExist",
                    "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.");
    const url = await createQueue("texts");
    for (const [command, entry] of [[SendMessageBatchCommand, "SendMessageBatchRequestEntry"],
                                    [DeleteMessageBatchCommand, "DeleteMessageBatchRequestEntry"],
                                    [ChangeMessageVisibilityBatchCommand, "ChangeMessageVisibilityBatchRequestEntry"]]) {
      await refusedAs(sqs.send(new command({ QueueUrl: url, Entries: [] })), "EmptyBatchRequest",
                      "AWS.SimpleQueueService.EmptyBatchRequest", `There should be at least one ${entry} in the request.`);
    }
    await invalid(sqs.send(new ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 21 })),
                  "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.");
    await invalid(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x", MessageAttributes: {
      ErrorDetails: { DataType: "String", StringValue: "" } } })),
                  "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.");
    await invalid(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x", MessageGroupId: "group 123" })),
                  "Value group 123 for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length.");
    await refusedAs(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "" })),
                    "MissingParameter", "MissingParameter",
                    "The request must contain the parameter MessageBody.", "MissingRequiredParameterException");
    const fifo = await createQueue("fbatch", {}, true);
    await refusedAs(sqs.send(new SendMessageBatchCommand({ QueueUrl: fifo, Entries: [
      { Id: "good", MessageBody: "x", MessageGroupId: "g", MessageDeduplicationId: "d1" },
      { Id: "nogroup", MessageBody: "y", MessageDeduplicationId: "d2" }] })),
                    "MissingParameter", "MissingParameter",
                    "The request must contain the parameter MessageGroupId.", "MissingRequiredParameterException");
    assert.deepEqual(await counts(url), [0, 0, 0]);
    assert.deepEqual(await counts(fifo), [0, 0, 0]);
  });

  it("SQS's texts for attribute types and names, permissions and tags", async () => {
    const url = await createQueue("texts");
    await invalid(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x", MessageAttributes: {
      t: { DataType: "Integer", StringValue: "1" } } })),
                  "The message attribute 't' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.");
    for (const name of ["bad name", ".dot", "a..b"]) {
      await invalid(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x", MessageAttributes: {
        [name]: { DataType: "String", StringValue: "v" } } })),
                    `The message attribute name '${name}' is invalid. Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters.`);
    }
    await invalid(sqs.send(new AddPermissionCommand({ QueueUrl: url, Label: "l", AWSAccountIds: ["111122223333"],
                                                       Actions: ["CreateQueue"] })),
                  "Value SQS:CreateQueue for parameter ActionName is invalid. Reason: Only the queue owner is allowed to invoke this action.");
    await invalid(sqs.send(new AddPermissionCommand({ QueueUrl: url, Label: "l", AWSAccountIds: ["111122223333"],
                                                       Actions: ["Fly"] })),
                  "Value SQS:Fly for parameter ActionName is invalid. Reason: Please refer to the appropriate WSDL for a list of valid actions.");
    await assert.rejects(sqs.send(new AddPermissionCommand({ QueueUrl: url, Label: "l", AWSAccountIds: [],
                                                            Actions: ["SendMessage"] })),
                         (e) => e.name === "InvalidParameterValue" && /PrincipalId/.test(e.message));
    await sqs.send(new TagQueueCommand({ QueueUrl: url,
                                         Tags: Object.fromEntries([...Array(50).keys()].map((i) => [`k${i}`, "v"])) }));
    await invalid(sqs.send(new TagQueueCommand({ QueueUrl: url, Tags: { "one-more": "v" } })),
                  `Too many tags added for queue ${PREFIX}-texts.`);
    for (const keys of [[], [""], ["k".repeat(129)], ["k1", ""]]) {
      await invalid(sqs.send(new UntagQueueCommand({ QueueUrl: url, TagKeys: keys })),
                    "Tag keys must be between 1 and 128 characters in length.");
    }
    await sqs.send(new UntagQueueCommand({ QueueUrl: url, TagKeys: ["k".repeat(128), "k1"] }));
    assert.equal(Object.keys((await sqs.send(new ListQueueTagsCommand({ QueueUrl: url }))).Tags).length, 49);
  });

  it("an older handle of a message received again: deletes nothing, changes no visibility", async () => {
    const url = await createQueue("older");
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "twice" }));
    const [first] = await receive(url, { VisibilityTimeout: 1 });
    await sleep(1500);
    const [again] = await receive(url, { WaitTimeSeconds: 3, VisibilityTimeout: 60 });
    assert.equal(again.MessageId, first.MessageId);
    const old = first.ReceiptHandle;
    await invalid(sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: old, VisibilityTimeout: 0 })),
                  `Value ${old} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.`);
    const batch = await sqs.send(new ChangeMessageVisibilityBatchCommand({ QueueUrl: url, Entries: [
      { Id: "old", ReceiptHandle: old, VisibilityTimeout: 0 }] }));
    assert.deepEqual((batch.Failed ?? []).map((f) => [f.Id, f.Code]), [["old", "InvalidParameterValue"]]);
    assert.deepEqual(await receive(url, { WaitTimeSeconds: 1 }), []);
    await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: old }));
    assert.deepEqual(await counts(url), [0, 1, 0]);
    await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: again.ReceiptHandle }));
    assert.deepEqual(await counts(url), [0, 0, 0]);
  });

  it("1 MiB: a message of exactly 1,048,576 bytes, and no more", async () => {
    const url = await createQueue("mib");
    // Tabs and quotes, which JSON escapes to 2 bytes each, and 3-byte characters.
    for (const body of ["x".repeat(MIB), "\t\"".repeat(MIB / 2), "\u20ac".repeat((MIB - 1) / 3) + "a"]) {
      assert.equal(Buffer.byteLength(body), MIB);
      const sent = await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body }));
      assert.equal(sent.MD5OfMessageBody, md5(body));
      const [m] = await receive(url, { WaitTimeSeconds: 5 });
      assert.equal(m.Body, body);
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    }
    await invalid(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "x".repeat(MIB + 1) })),
                  "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.");
    const k = { k: { DataType: "String", StringValue: "x" } };
    await refusedAs(sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [
      { Id: "1", MessageBody: "a".repeat(MIB - 8), MessageAttributes: k }, { Id: "2", MessageBody: "a" }] })),
                    "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong",
                    "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes.");
    // A binary attribute counts by its bytes, not its base64.
    const binary = { b: { DataType: "Binary", BinaryValue: Buffer.alloc(3000, 0xfb) } };
    const full = await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: [
      { Id: "full", MessageBody: "y".repeat(MIB - 1 - 6 - 3000), MessageAttributes: binary }] }));
    assert.deepEqual(full.Successful.map((s) => s.Id), ["full"]);
    assert.deepEqual(await counts(url), [1, 0, 0]);
  });
});

describe("wire", () => {
  it("every response was JSON, never XML", () => {
    assert.ok(responses.length > 50, `only ${responses.length} responses recorded`);
    for (const r of responses) {
      assert.match(r.contentType ?? "", /^application\/x-amz-json-1\.0/, JSON.stringify(r));
      assert.notEqual(r.first, "<", JSON.stringify(r));
    }
  });
});
