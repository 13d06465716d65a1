"""Dead-letter redrive (StartMessageMoveTask) across restarts and servers: a slow task survives
SIGKILL of txmq serve and finishes after a restart, a cancel stops a task mid-way, two servers on
one database never move a message twice, and a server that stops hands its task to the other.
Every message must end exactly once in the destination or still be in the dead-letter queue.
Also the Query protocol's side: the move tasks' XML, and boto3's AddPermission and
RemovePermission.

    /usr/bin/python3 tests/sqs/redrive.py TXMQ_BINARY

Debian's boto3 predates the move-task actions: they are JSON-protocol requests signed with
botocore's SigV4Auth; the rest goes through boto3. Each test starts its own txmq serve processes
on the database of the usual DSN resolution (CTest's txmq_server fixture: TXMQ_HOME), or on
TXMQ_TEST_DSN when set, and stops them by their pids.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

TXMQ = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build/txmq")
SCRATCH = tempfile.mkdtemp(prefix="txmq-redrive-")
REGION = "us-east-1"
ACCOUNT = "000000000000"
KEY = "AKIDREDRIVE" + "".join(random.choice("0123456789ABCDEF") for _ in range(8))
SECRET = "".join(random.choice("0123456789abcdef") for _ in range(40))
CREDENTIALS = os.path.join(SCRATCH, "credentials")
with open(CREDENTIALS, "w") as f:
    f.write(f"{KEY} {SECRET}\n")
PREFIX = "rd" + "".join(random.choice("0123456789abcdef") for _ in range(6))


class Serve:
    """txmq serve on the shared database; stopped (or killed) by its pid."""

    def __init__(self):
        env = dict(os.environ)
        args = [TXMQ]
        if os.environ.get("TXMQ_TEST_DSN"):
            args += ["--dsn", os.environ["TXMQ_TEST_DSN"]]
        else:
            env.pop("TXMQ_DSN", None)
        self.log_path = os.path.join(SCRATCH, f"serve-{time.monotonic_ns()}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            args + ["serve", "--listen", "127.0.0.1:0", "--credentials", CREDENTIALS], env=env,
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if not m:
            self.kill()
            raise AssertionError(f"no listening line: {line!r} {self.stderr()}")
        self.endpoint = m.group(1)
        self.sqs = boto3.client(
            "sqs", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=KEY,
            aws_secret_access_key=SECRET, config=Config(retries={"max_attempts": 2}))

    def stderr(self):
        with open(self.log_path) as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()

    def terminate(self, timeout=20):
        """SIGTERM; it must exit 0 within `timeout` seconds."""
        started = time.monotonic()
        self.proc.terminate()
        code = self.proc.wait(timeout)
        self.proc.stdout.close()
        self.log.close()
        return code, time.monotonic() - started

    def call(self, action, body):
        """A JSON-protocol action: (HTTP status, answer)."""
        data = json.dumps(body).encode()
        request = AWSRequest(method="POST", url=self.endpoint + "/", data=data, headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS." + action})
        SigV4Auth(Credentials(KEY, SECRET), "sqs", REGION).add_auth(request)
        http = urllib.request.Request(self.endpoint + "/", data=data,
                                      headers=dict(request.headers.items()), method="POST")
        try:
            with urllib.request.urlopen(http, timeout=30) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def query(self, params):
        """A Query-protocol request: (HTTP status, XML root)."""
        data = urllib.parse.urlencode({**params, "Version": "2012-11-05"}).encode()
        request = AWSRequest(method="POST", url=self.endpoint + "/", data=data, headers={
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
        SigV4Auth(Credentials(KEY, SECRET), "sqs", REGION).add_auth(request)
        http = urllib.request.Request(self.endpoint + "/", data=data,
                                      headers=dict(request.headers.items()), method="POST")
        try:
            with urllib.request.urlopen(http, timeout=30) as r:
                return r.status, ET.fromstring(r.read())
        except urllib.error.HTTPError as e:
            return e.code, ET.fromstring(e.read())

    def ok(self, action, body):
        status, answer = self.call(action, body)
        if status != 200:
            raise AssertionError(f"{action}: {status} {answer}")
        return answer


def arn(name):
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def make_queues(serve, name):
    """A source queue whose messages go to its dead-letter queue after one receive, and that
    DLQ; returns their URLs."""
    dlq = serve.sqs.create_queue(QueueName=f"{PREFIX}_{name}_dlq")["QueueUrl"]
    src = serve.sqs.create_queue(QueueName=f"{PREFIX}_{name}", Attributes={
        "VisibilityTimeout": "0",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn(f"{PREFIX}_{name}_dlq"),
                                     "maxReceiveCount": 1})})["QueueUrl"]
    return src, dlq


def count(serve, url):
    a = serve.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])
            + int(a["ApproximateNumberOfMessagesDelayed"]))


def dead_letter(serve, src, dlq, n):
    """Sends n messages to src and receives them until all are in the DLQ; returns the bodies."""
    bodies = [f"m{i:04d}-{random.random()}" for i in range(n)]
    for i in range(0, n, 10):
        serve.sqs.send_message_batch(QueueUrl=src, Entries=[
            {"Id": str(j), "MessageBody": b, "MessageAttributes": {
                "n": {"DataType": "Number", "StringValue": str(i + j)}}}
            for j, b in enumerate(bodies[i:i + 10])])
    deadline = time.monotonic() + 60
    while count(serve, dlq) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {count(serve, dlq)} of {n} dead-lettered")
        serve.sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)
    return bodies


def drain(serve, url):
    """Receives and deletes everything url holds; returns the bodies in receive order."""
    got = []
    empty = 0
    while empty < 2:
        r = serve.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                      VisibilityTimeout=60, MessageAttributeNames=["All"])
        messages = r.get("Messages", [])
        empty = 0 if messages else empty + 1
        for m in messages:
            got.append(m["Body"])
            serve.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return got


def task(serve, dlq_name):
    results = serve.ok("ListMessageMoveTasks", {"SourceArn": arn(dlq_name)})["Results"]
    return results[0] if results else None


def wait_for(serve, dlq_name, predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        t = task(serve, dlq_name)
        if t and predicate(t):
            return t
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s; last {t}")
        time.sleep(0.2)


class RedriveTest(unittest.TestCase):
    def setUp(self):
        self.serves = []

    def tearDown(self):
        for s in self.serves:
            s.kill()

    def serve(self):
        s = Serve()
        self.serves.append(s)
        return s

    def test_slow_task_survives_sigkill_of_serve(self):
        a = self.serve()
        src, dlq = make_queues(a, "restart")
        bodies = dead_letter(a, src, dlq, 100)
        started = time.monotonic()
        handle = a.ok("StartMessageMoveTask", {"SourceArn": arn(f"{PREFIX}_restart_dlq"),
                                               "MaxNumberOfMessagesPerSecond": 5})["TaskHandle"]
        self.assertTrue(handle)
        t = wait_for(a, f"{PREFIX}_restart_dlq", lambda t: t["ApproximateNumberOfMessagesMoved"] >= 10,
                     30, "10 messages moved")
        elapsed = time.monotonic() - started
        # Paced: 5 a second (a step of one every 0.2 s), not all at once.
        self.assertLessEqual(t["ApproximateNumberOfMessagesMoved"], 5 * elapsed + 6, t)
        self.assertEqual(t["Status"], "RUNNING")
        self.assertEqual(t["ApproximateNumberOfMessagesToMove"], 100)
        self.assertEqual(t["MaxNumberOfMessagesPerSecond"], 5)
        self.assertNotIn("DestinationArn", t)
        a.kill()  # SIGKILL mid-task: its lease on the task runs out, nothing is given up
        b = self.serve()
        t = wait_for(b, f"{PREFIX}_restart_dlq", lambda t: t["Status"] != "RUNNING", 120,
                     "the task finished after the restart")
        self.assertEqual(t["Status"], "COMPLETED", t)
        self.assertEqual(t["ApproximateNumberOfMessagesMoved"], 100, t)
        self.assertNotIn("TaskHandle", t)  # only RUNNING tasks show theirs
        # Taken over after a's lease ran out: by b, or by the serve of another suite that runs on
        # this database at the same time (every serve of a database runs its tasks), so b's log
        # need not say "running here".
        got = drain(b, src)
        self.assertEqual(sorted(got), sorted(bodies))  # each exactly once, none lost
        self.assertEqual(count(b, dlq), 0)

    def test_cancel_mid_way(self):
        a = self.serve()
        src, dlq = make_queues(a, "cancel")
        bodies = dead_letter(a, src, dlq, 60)
        dlq_name = f"{PREFIX}_cancel_dlq"
        handle = a.ok("StartMessageMoveTask", {"SourceArn": arn(dlq_name),
                                               "MaxNumberOfMessagesPerSecond": 10})["TaskHandle"]
        status, error = a.call("StartMessageMoveTask", {"SourceArn": arn(dlq_name)})
        self.assertEqual((status, error.get("__type")),
                         (400, "com.amazonaws.sqs#UnsupportedOperation"), error)
        wait_for(a, dlq_name, lambda t: t["ApproximateNumberOfMessagesMoved"] >= 5, 30, "5 moved")
        moved = a.ok("CancelMessageMoveTask", {"TaskHandle": handle})[
            "ApproximateNumberOfMessagesMoved"]
        self.assertGreaterEqual(moved, 5)
        self.assertLess(moved, 60)
        time.sleep(1.5)  # nothing moves after the cancel
        t = task(a, dlq_name)
        self.assertEqual((t["Status"], t["ApproximateNumberOfMessagesMoved"]), ("CANCELLED", moved))
        status, error = a.call("CancelMessageMoveTask", {"TaskHandle": handle})
        self.assertEqual(status, 400, error)
        moved_bodies = drain(a, src)
        left = drain(a, dlq)
        self.assertEqual(len(moved_bodies), moved)
        self.assertEqual(sorted(moved_bodies + left), sorted(bodies))
        # A later task may start once the first is over.
        self.assertTrue(a.ok("StartMessageMoveTask", {"SourceArn": arn(dlq_name)})["TaskHandle"])

    def test_two_servers_move_each_message_once(self):
        a = self.serve()
        b = self.serve()
        src, dlq = make_queues(a, "pair")
        target = a.sqs.create_queue(QueueName=f"{PREFIX}_pair_target")["QueueUrl"]
        bodies = dead_letter(a, src, dlq, 200)
        dlq_name = f"{PREFIX}_pair_dlq"
        a.ok("StartMessageMoveTask", {"SourceArn": arn(dlq_name),
                                      "DestinationArn": arn(f"{PREFIX}_pair_target"),
                                      "MaxNumberOfMessagesPerSecond": 20})
        wait_for(b, dlq_name, lambda t: t["ApproximateNumberOfMessagesMoved"] >= 20, 30, "20 moved")
        # A server that stops gives its tasks up: the other takes this one over at once.
        code, seconds = a.terminate()
        self.assertEqual(code, 0)
        self.assertLess(seconds, 10)
        t = wait_for(b, dlq_name, lambda t: t["Status"] != "RUNNING", 60, "finished on b")
        self.assertEqual((t["Status"], t["ApproximateNumberOfMessagesMoved"]), ("COMPLETED", 200))
        self.assertEqual(t["DestinationArn"], arn(f"{PREFIX}_pair_target"))
        got = drain(b, target)
        self.assertEqual(sorted(got), sorted(bodies))
        self.assertEqual(count(b, dlq), 0)
        self.assertEqual(count(b, src), 0)

    def test_attribute_and_policy_changes_through_two_servers_are_all_kept(self):
        """AddPermission, RemovePermission and SetQueueAttributes each rewrite a queue's stored
        attributes; made at the same time through two servers, none of them is lost."""
        a = self.serve()
        b = self.serve()
        name = f"{PREFIX}_policy2"
        url = a.sqs.create_queue(QueueName=name)["QueueUrl"]
        labels = [f"l{i:02d}" for i in range(20)]  # SQS's limit: 20 statements
        errors = []

        def run(work):
            try:
                work()
            except Exception as e:  # reported by the main thread
                errors.append(e)

        def add(serve, mine):
            for label in mine:
                serve.sqs.add_permission(QueueUrl=url, Label=label,
                                         AWSAccountIds=["111122223333"], Actions=["SendMessage"])

        def remove(serve, mine):
            for label in mine:
                serve.sqs.remove_permission(QueueUrl=url, Label=label)

        def set_attribute(serve, attribute, first=1):
            for i in range(first, first + 10):
                serve.sqs.set_queue_attributes(QueueUrl=url, Attributes={attribute: str(i)})

        def together(*works):
            threads = [threading.Thread(target=run, args=(w,)) for w in works]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])

        together(lambda: add(a, labels[0::4]), lambda: add(b, labels[1::4]),
                 lambda: add(a, labels[2::4]), lambda: add(b, labels[3::4]),
                 lambda: set_attribute(a, "DelaySeconds"),
                 lambda: set_attribute(b, "ReceiveMessageWaitTimeSeconds"))
        for s in (a, b):
            attributes = s.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
                "Attributes"]
            policy = json.loads(attributes["Policy"])
            self.assertEqual(sorted(st["Sid"] for st in policy["Statement"]), labels)
            self.assertEqual(attributes["DelaySeconds"], "10")
            self.assertEqual(attributes["ReceiveMessageWaitTimeSeconds"], "10")
        together(lambda: remove(a, labels[0::2]), lambda: remove(b, labels[1::2]),
                 lambda: set_attribute(a, "MessageRetentionPeriod", 60))
        attributes = b.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        self.assertNotIn("Policy", attributes)  # the policy goes with its last statement
        self.assertEqual(attributes["MessageRetentionPeriod"], "69")
        a.sqs.delete_queue(QueueUrl=url)


def strip(tag):
    return tag.rsplit("}", 1)[-1]


class QueryProtocolTest(unittest.TestCase):
    def setUp(self):
        self.s = Serve()

    def tearDown(self):
        self.s.kill()

    def test_move_tasks_in_query_xml(self):
        src, dlq = make_queues(self.s, "query")
        bodies = dead_letter(self.s, src, dlq, 3)
        dlq_arn = arn(f"{PREFIX}_query_dlq")
        status, root = self.s.query({"Action": "StartMessageMoveTask", "SourceArn": dlq_arn,
                                     "MaxNumberOfMessagesPerSecond": "100"})
        self.assertEqual(status, 200)
        handle = [e.text for e in root.iter() if strip(e.tag) == "TaskHandle"]
        self.assertEqual(len(handle), 1)
        wait_for(self.s, f"{PREFIX}_query_dlq", lambda t: t["Status"] == "COMPLETED", 30, "done")
        status, root = self.s.query({"Action": "ListMessageMoveTasks", "SourceArn": dlq_arn,
                                     "MaxResults": "10"})
        self.assertEqual(status, 200)
        entries = [e for e in root.iter() if strip(e.tag) == "ListMessageMoveTasksResultEntry"]
        self.assertEqual(len(entries), 1)
        fields = {strip(c.tag): c.text for c in entries[0]}
        self.assertEqual(fields["Status"], "COMPLETED")
        self.assertEqual(fields["ApproximateNumberOfMessagesMoved"], "3")
        self.assertEqual(fields["MaxNumberOfMessagesPerSecond"], "100")
        status, root = self.s.query({"Action": "CancelMessageMoveTask", "TaskHandle": handle[0]})
        self.assertEqual(status, 400)
        self.assertIn("AWS.SimpleQueueService.UnsupportedOperation",
                      [e.text for e in root.iter() if strip(e.tag) == "Code"])
        self.assertEqual(sorted(drain(self.s, src)), sorted(bodies))

    def test_add_and_remove_permission_with_boto3(self):
        sqs = self.s.sqs
        url = sqs.create_queue(QueueName=f"{PREFIX}_perm")["QueueUrl"]
        sqs.add_permission(QueueUrl=url, Label="ops", AWSAccountIds=["111122223333"],
                           Actions=["SendMessage", "ReceiveMessage"])
        policy = json.loads(sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
        self.assertEqual(policy["Statement"], [{
            "Sid": "ops", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
            "Action": ["SQS:SendMessage", "SQS:ReceiveMessage"], "Resource": arn(f"{PREFIX}_perm")}])
        self.assertEqual(policy["Id"], arn(f"{PREFIX}_perm") + "/SQSDefaultPolicy")
        with self.assertRaises(sqs.exceptions.ClientError) as e:
            sqs.add_permission(QueueUrl=url, Label="ops", AWSAccountIds=["111122223333"],
                               Actions=["SendMessage"])
        self.assertEqual(e.exception.response["Error"]["Code"], "InvalidParameterValue")
        with self.assertRaises(sqs.exceptions.ClientError) as e:
            sqs.add_permission(QueueUrl=url, Label="many", AWSAccountIds=["111122223333"],
                               Actions=["SendMessage"] * 8)
        self.assertEqual(e.exception.response["Error"]["Code"], "OverLimit")
        sqs.remove_permission(QueueUrl=url, Label="ops")
        self.assertNotIn("Policy", sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["All"])["Attributes"])
        with self.assertRaises(sqs.exceptions.ClientError) as e:
            sqs.remove_permission(QueueUrl=url, Label="ops")
        self.assertEqual(e.exception.response["Error"]["Code"], "InvalidParameterValue")
        sqs.delete_queue(QueueUrl=url)


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
