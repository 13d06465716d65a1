// Dead-letter redrive (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask) and
// the queue policy's AddPermission and RemovePermission through @aws-sdk/client-sqs v3 (AWS JSON
// 1.0): Debian's boto3 and awscli predate the move tasks. Run by tests/sqs/run.sh (suite
// "moves"), which installs the SDK into TXMQ_SQS_NODE_DIR, starts the server and sets
// TXMQ_SQS_ENDPOINT, TXMQ_SQS_PREFIX and the keys.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, describe, it } from "node:test";

const require = createRequire(`${process.env.TXMQ_SQS_NODE_DIR}/`);
const {
  SQSClient, CreateQueueCommand, DeleteQueueCommand, GetQueueAttributesCommand,
  SendMessageBatchCommand, ReceiveMessageCommand, DeleteMessageCommand,
  StartMessageMoveTaskCommand, ListMessageMoveTasksCommand, CancelMessageMoveTaskCommand,
  AddPermissionCommand, RemovePermissionCommand,
} = require("@aws-sdk/client-sqs");

const PREFIX = `${process.env.TXMQ_SQS_PREFIX}-m`;
const ACCOUNT = "000000000000";
const arn = (name) => `arn:aws:sqs:us-east-1:${ACCOUNT}:${name}`;
const sqs = new SQSClient({
  endpoint: process.env.TXMQ_SQS_ENDPOINT, region: "us-east-1", maxAttempts: 1,
  credentials: { accessKeyId: process.env.AWS_ACCESS_KEY_ID,
                 secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY },
});
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const created = [];
async function queue(name, attributes = {}) {
  const fifo = name.endsWith(".fifo");
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({
    QueueName: `${PREFIX}-${name}`, Attributes: fifo ? { ...attributes, FifoQueue: "true" } : attributes }));
  created.push(QueueUrl);
  return QueueUrl;
}

// A dead-letter queue and a source queue whose messages go there on their second receive.
async function redriven(name, fifo = false) {
  const suffix = fifo ? ".fifo" : "";
  const dlq = await queue(`${name}-dlq${suffix}`);
  const source = await queue(`${name}${suffix}`, {
    VisibilityTimeout: "0",
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: arn(`${PREFIX}-${name}-dlq${suffix}`),
                                    maxReceiveCount: 1 }),
    ...(fifo ? { ContentBasedDeduplication: "true" } : {}),
  });
  return { source, dlq, dlqArn: arn(`${PREFIX}-${name}-dlq${suffix}`),
           sourceArn: arn(`${PREFIX}-${name}${suffix}`) };
}

async function count(url) {
  const { Attributes: a } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["All"] }));
  return Number(a.ApproximateNumberOfMessages) + Number(a.ApproximateNumberOfMessagesNotVisible);
}

// Sends `entries` (SendMessageBatch entries) to the source, then receives until all are dead.
async function killAll(q, entries) {
  for (let i = 0; i < entries.length; i += 10) {
    await sqs.send(new SendMessageBatchCommand({ QueueUrl: q.source, Entries: entries.slice(i, i + 10) }));
  }
  const deadline = Date.now() + 30000;
  while (await count(q.dlq) < entries.length) {
    assert.ok(Date.now() < deadline, "messages were not dead-lettered");
    await sqs.send(new ReceiveMessageCommand({ QueueUrl: q.source, MaxNumberOfMessages: 10 }));
  }
}

async function takeAll(url, expected) {
  const got = [];
  const deadline = Date.now() + 20000;
  while (got.length < expected && Date.now() < deadline) {
    const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({
      QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
      MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"] }));
    for (const m of Messages) {
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    }
    got.push(...Messages);
  }
  return got;
}

async function tasks(sourceArn, MaxResults) {
  const { Results } = await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: sourceArn, MaxResults }));
  return Results ?? [];
}

async function finished(sourceArn) {
  const deadline = Date.now() + 30000;
  for (;;) {
    const [t] = await tasks(sourceArn);
    if (t && t.Status !== "RUNNING") return t;
    assert.ok(Date.now() < deadline, `task still running: ${JSON.stringify(t)}`);
    await sleep(100);
  }
}

async function rejectsWith(promise, name, text) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.name, name, `${e.name}: ${e.message}`);
    if (text) assert.match(e.message, text);
    return true;
  });
}

after(async () => {
  for (const url of created.reverse()) {
    try { await sqs.send(new DeleteQueueCommand({ QueueUrl: url })); } catch { /* gone already */ }
  }
});

describe("message move tasks", () => {
  it("move dead letters back to the queue they came from, keeping body and attributes", async () => {
    const q = await redriven("back");
    const entries = Array.from({ length: 25 }, (_, i) => ({
      Id: `e${i}`, MessageBody: `body ${i}`,
      MessageAttributes: { n: { DataType: "Number", StringValue: String(i) },
                           bin: { DataType: "Binary", BinaryValue: Buffer.from([i, 0, 255]) } } }));
    await killAll(q, entries);
    const before = Date.now();
    const { TaskHandle } = await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: q.dlqArn }));
    assert.ok(TaskHandle);
    const t = await finished(q.dlqArn);
    assert.equal(t.Status, "COMPLETED");
    assert.equal(t.ApproximateNumberOfMessagesMoved, 25);
    assert.equal(t.ApproximateNumberOfMessagesToMove, 25);
    assert.equal(t.SourceArn, q.dlqArn);
    assert.equal(t.DestinationArn, undefined);
    assert.equal(t.MaxNumberOfMessagesPerSecond, undefined);
    assert.equal(t.TaskHandle, undefined);
    assert.ok(Math.abs(t.StartedTimestamp - before) < 10000, `StartedTimestamp ${t.StartedTimestamp}`);
    assert.equal(await count(q.dlq), 0);
    const got = await takeAll(q.source, 25);
    assert.deepEqual(got.map((m) => m.Body).sort(), entries.map((e) => e.MessageBody).sort());
    for (const m of got) {
      const i = Number(m.Body.split(" ")[1]);
      assert.equal(m.MessageAttributes.n.StringValue, String(i));
      assert.deepEqual(Buffer.from(m.MessageAttributes.bin.BinaryValue), Buffer.from([i, 0, 255]));
      assert.equal(m.Attributes.ApproximateReceiveCount, "1");  // counted afresh
      assert.equal(m.Attributes.DeadLetterQueueSourceArn, undefined);
    }
  });

  it("move FIFO dead letters to a named queue, groups and their order kept", async () => {
    const q = await redriven("fifo", true);
    const target = await queue("fifo-target.fifo", { ContentBasedDeduplication: "true" });
    const entries = Array.from({ length: 12 }, (_, i) => ({
      Id: `e${i}`, MessageBody: `g${i % 3} ${i}`, MessageGroupId: `g${i % 3}` }));
    await killAll(q, entries);
    await sqs.send(new StartMessageMoveTaskCommand({
      SourceArn: q.dlqArn, DestinationArn: arn(`${PREFIX}-fifo-target.fifo`) }));
    const t = await finished(q.dlqArn);
    assert.equal(t.Status, "COMPLETED");
    assert.equal(t.ApproximateNumberOfMessagesMoved, 12);
    assert.equal(t.DestinationArn, arn(`${PREFIX}-fifo-target.fifo`));
    const got = await takeAll(target, 12);
    assert.equal(got.length, 12);
    for (const group of ["g0", "g1", "g2"]) {
      const bodies = got.filter((m) => m.Attributes.MessageGroupId === group).map((m) => m.Body);
      const sent = entries.filter((e) => e.MessageGroupId === group).map((e) => e.MessageBody);
      assert.deepEqual(bodies, sent, `group ${group} in order`);
    }
    assert.equal(await count(q.source), 0);
  });

  it("paces to MaxNumberOfMessagesPerSecond, one task per source, cancel, history", async () => {
    const q = await redriven("paced");
    await killAll(q, Array.from({ length: 40 }, (_, i) => ({ Id: `e${i}`, MessageBody: `m${i}` })));
    const { TaskHandle } = await sqs.send(new StartMessageMoveTaskCommand({
      SourceArn: q.dlqArn, MaxNumberOfMessagesPerSecond: 10 }));
    await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({ SourceArn: q.dlqArn })),
                      "UnsupportedOperation", /already a task running/);
    await sleep(1500);
    const [running] = await tasks(q.dlqArn);
    assert.equal(running.Status, "RUNNING");
    assert.equal(running.TaskHandle, TaskHandle);
    assert.equal(running.MaxNumberOfMessagesPerSecond, 10);
    assert.ok(running.ApproximateNumberOfMessagesMoved >= 5, JSON.stringify(running));
    assert.ok(running.ApproximateNumberOfMessagesMoved <= 25, JSON.stringify(running));
    const { ApproximateNumberOfMessagesMoved: moved } = await sqs.send(
      new CancelMessageMoveTaskCommand({ TaskHandle }));
    await sleep(700);
    const [cancelled] = await tasks(q.dlqArn);
    assert.equal(cancelled.Status, "CANCELLED");
    assert.equal(cancelled.ApproximateNumberOfMessagesMoved, moved);
    assert.equal(await count(q.source), moved);
    assert.equal(await count(q.dlq), 40 - moved);
    await rejectsWith(sqs.send(new CancelMessageMoveTaskCommand({ TaskHandle })), "UnsupportedOperation");
    // A second task moves the rest; the listing shows the most recent first.
    await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: q.dlqArn }));
    const second = await finished(q.dlqArn);
    assert.equal(second.ApproximateNumberOfMessagesMoved, 40 - moved);
    const both = await tasks(q.dlqArn, 10);
    assert.deepEqual(both.map((t) => t.Status), ["COMPLETED", "CANCELLED"]);
    assert.equal((await tasks(q.dlqArn)).length, 1);  // MaxResults 1 by default
    assert.equal(await count(q.source), 40);
  });

  it("refuses what SQS refuses", async () => {
    const q = await redriven("refused");
    const plain = await queue("plain");
    const fifo = await queue("other.fifo", { ContentBasedDeduplication: "true" });
    assert.ok(plain && fifo);
    await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({ SourceArn: arn(`${PREFIX}-nowhere`) })),
                      "ResourceNotFoundException");
    await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({ SourceArn: "arn:aws:sqs:eu-west-1:1:x" })),
                      "ResourceNotFoundException");
    await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({ SourceArn: arn(`${PREFIX}-plain`) })),
                      "InvalidParameterValue", /Dead Letter Queue/);
    await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({
      SourceArn: q.dlqArn, DestinationArn: arn(`${PREFIX}-nowhere`) })), "ResourceNotFoundException");
    await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({
      SourceArn: q.dlqArn, DestinationArn: arn(`${PREFIX}-other.fifo`) })), "InvalidParameterValue");
    for (const rate of [0, 501]) {
      await rejectsWith(sqs.send(new StartMessageMoveTaskCommand({
        SourceArn: q.dlqArn, MaxNumberOfMessagesPerSecond: rate })), "InvalidParameterValue");
    }
    await rejectsWith(sqs.send(new ListMessageMoveTasksCommand({ SourceArn: q.dlqArn, MaxResults: 11 })),
                      "InvalidParameterValue");
    await rejectsWith(sqs.send(new ListMessageMoveTasksCommand({ SourceArn: arn(`${PREFIX}-nowhere`) })),
                      "ResourceNotFoundException");
    for (const handle of ["bm90IGEgaGFuZGxl", "%%%", Buffer.from(JSON.stringify({
      taskId: "00000000-0000-0000-0000-000000000000", sourceArn: q.dlqArn })).toString("base64")]) {
      await rejectsWith(sqs.send(new CancelMessageMoveTaskCommand({ TaskHandle: handle })),
                        "ResourceNotFoundException");
    }
    assert.deepEqual(await tasks(q.dlqArn, 10), []);
    // Messages sent to a dead-letter queue directly have no source to go back to.
    await sqs.send(new SendMessageBatchCommand({ QueueUrl: q.dlq, Entries: [{ Id: "a", MessageBody: "direct" }] }));
    await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: q.dlqArn }));
    const t = await finished(q.dlqArn);
    assert.equal(t.Status, "FAILED");
    assert.match(t.FailureReason, /DestinationArn/);
    assert.equal(await count(q.dlq), 1);
    await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: q.dlqArn, DestinationArn: q.sourceArn }));
    assert.equal((await finished(q.dlqArn)).Status, "COMPLETED");
    assert.equal((await takeAll(q.source, 1))[0].Body, "direct");
  });
});

describe("permissions", () => {
  it("AddPermission and RemovePermission edit the queue's Policy", async () => {
    const url = await queue("shared");
    const policy = async () => {
      const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["Policy"] }));
      return Attributes?.Policy === undefined ? undefined : JSON.parse(Attributes.Policy);
    };
    await sqs.send(new AddPermissionCommand({ QueueUrl: url, Label: "send-1",
                                              AWSAccountIds: ["111122223333"], Actions: ["SendMessage"] }));
    await sqs.send(new AddPermissionCommand({ QueueUrl: url, Label: "both_2",
                                              AWSAccountIds: ["111122223333", "444455556666"],
                                              Actions: ["ReceiveMessage", "DeleteMessage"] }));
    const p = await policy();
    assert.equal(p.Version, "2012-10-17");
    assert.deepEqual(p.Statement, [
      { Sid: "send-1", Effect: "Allow", Principal: { AWS: "arn:aws:iam::111122223333:root" },
        Action: "SQS:SendMessage", Resource: arn(`${PREFIX}-shared`) },
      { Sid: "both_2", Effect: "Allow",
        Principal: { AWS: ["arn:aws:iam::111122223333:root", "arn:aws:iam::444455556666:root"] },
        Action: ["SQS:ReceiveMessage", "SQS:DeleteMessage"], Resource: arn(`${PREFIX}-shared`) },
    ]);
    const add = (Label, Actions, AWSAccountIds = ["111122223333"]) =>
      sqs.send(new AddPermissionCommand({ QueueUrl: url, Label, AWSAccountIds, Actions }));
    await rejectsWith(add("send-1", ["SendMessage"]), "InvalidParameterValue", /Already exists/);
    await rejectsWith(add("bad label", ["SendMessage"]), "InvalidParameterValue");
    await rejectsWith(add("x".repeat(81), ["SendMessage"]), "InvalidParameterValue");
    await rejectsWith(add("eight", ["SendMessage", "ReceiveMessage", "DeleteMessage", "PurgeQueue",
                                    "GetQueueUrl", "GetQueueAttributes", "ListQueueTags",
                                    "ChangeMessageVisibility"]), "OverLimit");
    await rejectsWith(add("nope", ["FlyAway"]), "InvalidParameterValue");
    await rejectsWith(add("owner", ["DeleteQueue"]), "InvalidParameterValue", /queue owner/);
    await rejectsWith(add("who", ["SendMessage"], ["12"]), "InvalidParameterValue");
    await add("all", ["*"]);
    await sqs.send(new RemovePermissionCommand({ QueueUrl: url, Label: "send-1" }));
    assert.deepEqual((await policy()).Statement.map((s) => s.Sid), ["both_2", "all"]);
    await rejectsWith(sqs.send(new RemovePermissionCommand({ QueueUrl: url, Label: "send-1" })),
                      "InvalidParameterValue", /can't find label/);
    await sqs.send(new RemovePermissionCommand({ QueueUrl: url, Label: "both_2" }));
    await sqs.send(new RemovePermissionCommand({ QueueUrl: url, Label: "all" }));
    assert.equal(await policy(), undefined);
    await rejectsWith(sqs.send(new AddPermissionCommand({ QueueUrl: `${url}-gone`, Label: "a",
                                                          AWSAccountIds: ["111122223333"], Actions: ["*"] })),
                      "QueueDoesNotExist");
  });
});
