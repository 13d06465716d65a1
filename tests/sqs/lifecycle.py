"""txmq serve's life: the line it prints, SIGTERM while a long poll waits (answered, exit 0),
SIGHUP re-reading --credentials, a broken credentials file, the loopback-only rule without
credentials, and /readyz while its database goes down and comes back.

    /usr/bin/python3 tests/sqs/lifecycle.py TXMQ_BINARY

Starts a private MariaDB of its own (txmq local start in a scratch TXMQ_HOME) and stops
everything it started, by pid.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config
import botocore.credentials
import botocore.exceptions

TXMQ = sys.argv.pop(1) if len(sys.argv) > 1 else "build/txmq"
SCRATCH = tempfile.mkdtemp(prefix="txmq-lifecycle-")
HOME = os.path.join(SCRATCH, "home")


def txmq(*args, env=None, **kw):
    e = dict(os.environ, TXMQ_HOME=HOME, **(env or {}))
    return subprocess.run([TXMQ, *args], env=e, capture_output=True, text=True, timeout=120, **kw)


def dsn():
    out = txmq("local", "status", "--json")
    return json.loads(out.stdout)["dsn"]


class Serve:
    def __init__(self, *args):
        e = dict(os.environ, TXMQ_HOME=HOME)
        e.pop("TXMQ_DSN", None)
        self.proc = subprocess.Popen([TXMQ, "serve", "--listen", "127.0.0.1:0", *args], env=e,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"no listening line: {self.line!r} {self.proc.stderr.read()}")
        self.url = m.group(1)

    def client(self, key="any", secret="any"):
        return boto3.client("sqs", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            config=botocore.config.Config(retries={"max_attempts": 0},
                                                          read_timeout=60))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Lifecycle(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        out = txmq("local", "start")
        assert out.returncode == 0, out.stderr

    @classmethod
    def tearDownClass(cls):
        txmq("local", "stop")
        shutil.rmtree(SCRATCH, ignore_errors=True)

    def test_sigterm_answers_a_waiting_long_poll_and_exits_0(self):
        s = Serve()
        try:
            self.assertIn("txmq serve: listening on http://127.0.0.1:", s.line)
            sqs = s.client()
            url = sqs.create_queue(QueueName="lifecycle-term")["QueueUrl"]
            got = {}

            def poll():
                start = time.monotonic()
                got["answer"] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
                got["seconds"] = time.monotonic() - start

            t = threading.Thread(target=poll)
            t.start()
            time.sleep(1.5)
            s.proc.send_signal(signal.SIGTERM)
            t.join(15)
            self.assertFalse(t.is_alive(), "the long poll was not answered")
            self.assertNotIn("Messages", got["answer"])
            self.assertLess(got["seconds"], 10)
            status = s.proc.wait(15)
            log = s.proc.stderr.read()
            self.assertEqual(status, 0, log)
            self.assertIn("SIGTERM", log)
        finally:
            s.stop()

    def test_sighup_rereads_credentials_and_a_broken_file_keeps_the_old_keys(self):
        path = os.path.join(SCRATCH, "credentials")
        with open(path, "w") as f:
            f.write("# the first key\nAKIDFIRST firstsecret\n")
        s = Serve("--credentials", path)
        try:
            self.assertEqual(s.client("AKIDFIRST", "firstsecret").list_queues()["ResponseMetadata"]
                             ["HTTPStatusCode"], 200)
            with self.assertRaises(botocore.exceptions.ClientError) as e:
                s.client("AKIDSECOND", "secondsecret").list_queues()
            self.assertEqual(e.exception.response["Error"]["Code"], "InvalidClientTokenId")
            with open(path, "a") as f:
                f.write("\nAKIDSECOND secondsecret\n")
            s.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20  # a loaded machine may take a moment
            while True:
                try:
                    s.client("AKIDSECOND", "secondsecret").list_queues()
                    break
                except botocore.exceptions.ClientError:
                    self.assertLess(time.monotonic(), deadline, "SIGHUP did not load the key")
                    time.sleep(0.2)
            with open(path, "w") as f:
                f.write("AKIDTHIRD\n")  # malformed: the keys stay
            s.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20  # a loaded machine may take a moment
            while True:
                try:
                    s.client("AKIDSECOND", "secondsecret").list_queues()
                    break
                except botocore.exceptions.ClientError:
                    self.assertLess(time.monotonic(), deadline, "SIGHUP did not load the key")
                    time.sleep(0.2)
        finally:
            s.proc.send_signal(signal.SIGTERM)
            self.assertEqual(s.proc.wait(15), 0)
            log = s.proc.stderr.read()
            s.stop()
        self.assertIn("credentials reloaded", log)
        self.assertIn("old keys kept", log)
        for secret in ("firstsecret", "secondsecret"):
            self.assertNotIn(secret, log)

    def test_bad_start_options_are_refused_clearly(self):
        path = os.path.join(SCRATCH, "broken")
        with open(path, "w") as f:
            f.write("AKIDOK oksecret\nAKIDBAD bad secret here\n")
        for args, expect in ((["--credentials", path], "2"),
                             (["--credentials", os.path.join(SCRATCH, "missing")], "missing"),
                             (["--listen", "0.0.0.0:0"], "loopback"),
                             (["--listen", "127.0.0.1:notaport"], "port"),
                             (["--account-id", "12"], "12 digits")):
            e = dict(os.environ, TXMQ_HOME=HOME)
            r = subprocess.run([TXMQ, "serve", *(["--listen", "127.0.0.1:0"] if "--listen" not in
                                                 args else []), *args],
                               env=e, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(expect, r.stderr, args)
            self.assertNotIn("oksecret", r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)

    def test_txmq_send_message_batch_sends_10000_in_one_transaction(self):
        s = Serve()
        try:
            sqs = s.client()
            url = sqs.create_queue(QueueName="lifecycle-big")["QueueUrl"]

            def call(entries):
                body = json.dumps({"QueueUrl": url, "Entries": entries})
                request = botocore.awsrequest.AWSRequest(
                    method="POST", url=s.url + "/", data=body,
                    headers={"X-Amz-Target": "Txmq.SendMessageBatch",
                             "Content-Type": "application/x-amz-json-1.0"})
                botocore.auth.SigV4Auth(botocore.credentials.Credentials("any", "any"), "sqs",
                                        "us-east-1").add_auth(request)
                prepared = request.prepare()
                r = urllib.request.Request(prepared.url, data=body.encode(), method="POST",
                                           headers=dict(prepared.headers))
                try:
                    with urllib.request.urlopen(r, timeout=120) as answer:
                        return answer.status, answer.headers, json.loads(answer.read())
                except urllib.error.HTTPError as e:
                    return e.code, e.headers, json.loads(e.read())

            entries = [{"Id": f"m{i}", "MessageBody": f"message {i}"} for i in range(10000)]
            status, headers, out = call(entries)
            self.assertEqual(status, 200, out)
            self.assertEqual(len(out["Successful"]), 10000)
            self.assertEqual(out["Failed"], [])
            self.assertTrue(headers["Content-Type"].startswith("application/x-amz-json-1.0"))
            count = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
                "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
            self.assertEqual(count, "10000")
            # All or nothing: one bad entry refuses the request, in JSON, and sends nothing.
            entries[5000]["MessageBody"] = "bad \u0000 body"
            status, headers, out = call(entries)
            self.assertEqual(status, 400)
            self.assertEqual(out["__type"], "com.amazonaws.sqs#InvalidMessageContents")
            self.assertEqual(headers["x-amzn-query-error"], "InvalidMessageContents;Sender")
            count = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
                "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
            self.assertEqual(count, "10000")
        finally:
            s.stop()

    def test_a_catalog_from_before_group_queues_gains_their_column(self):
        s = Serve()
        try:
            s.client().create_queue(QueueName="legacy")
        finally:
            s.stop()
        # Back to the catalog's first shape, with its queue in it.
        socket = re.search(r"socket=([^&]+)", dsn()).group(1)
        sql = ("ALTER TABLE txmq_sqs_queues DROP INDEX topic, DROP COLUMN consumer_group, "
               "ADD UNIQUE KEY topic (topic)")
        out = subprocess.run(["mariadb", "-uroot", "-S", socket, "txmq", "-e", sql],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        s = Serve()
        try:
            sqs = s.client()
            legacy = sqs.get_queue_url(QueueName="legacy")["QueueUrl"]
            audit = sqs.create_queue(QueueName="legacy-audit",
                                     Attributes={"TxmqSourceQueue": "legacy"})["QueueUrl"]
            sqs.send_message(QueueUrl=legacy, MessageBody="both")
            for url in (legacy, audit):
                got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5).get("Messages", [])
                self.assertEqual([m["Body"] for m in got], ["both"])
            sqs.delete_queue(QueueUrl=audit)
            sqs.delete_queue(QueueUrl=legacy)
        finally:
            s.stop()

    def test_readyz_follows_the_database(self):
        s = Serve()
        try:
            for probe in ("/healthz", "/readyz"):
                with urllib.request.urlopen(s.url + probe, timeout=10) as r:
                    self.assertEqual((r.status, r.read()), (200, b"ok\n"))
            self.assertEqual(txmq("local", "stop").returncode, 0)
            # /readyz answers from a check at most 1 s old; then it is the database's turn.
            deadline = time.monotonic() + 10
            while True:
                try:
                    urllib.request.urlopen(s.url + "/readyz", timeout=10).close()
                    self.assertLess(time.monotonic(), deadline, "still ready without a database")
                    time.sleep(0.2)
                except urllib.error.HTTPError as e:
                    self.assertEqual(e.code, 503)
                    self.assertTrue(e.read().startswith(b"database "))
                    break
            # Liveness does not follow the database: the server itself is fine.
            with urllib.request.urlopen(s.url + "/healthz", timeout=10) as r:
                self.assertEqual(r.status, 200)
            self.assertEqual(txmq("local", "start").returncode, 0)
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(s.url + "/readyz", timeout=60) as r:
                        self.assertEqual(r.status, 200)
                        break
                except urllib.error.HTTPError:
                    self.assertLess(time.monotonic(), deadline, "not ready again")
                    time.sleep(0.5)
        finally:
            s.stop()
            txmq("local", "start")


if __name__ == "__main__":
    unittest.main(verbosity=2)
