#!/usr/bin/python3
"""A message sent through SQL in a Python transaction is received through `txmq serve` by boto3.

Usage: test_sqs_bridge.py TXMQ (run by tests/sql/run.sh python, TXMQ_SQL_* in the environment).
Starts its own `txmq serve` on the admin DSN (a free loopback port, scratch credentials and AWS
configuration), creates a queue with boto3, sends into its topic with CALL txmq_send as the
least-privilege user (once rolled back, once committed beside a business row, the latter while a
long poll waits) and receives with boto3; stops the server with SIGTERM (it must exit 0).
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import boto3
import pymysql

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_pymysql as sql  # noqa: E402  (the suite's connection and calls)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import admin  # noqa: E402

TXMQ = sys.argv.pop(1) if len(sys.argv) > 1 else os.environ["TXMQ_SQL_TXMQ"]


class SqsBridge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory(prefix="txmq-sql-bridge.")
        d = cls.scratch.name
        key = "AKIDTXMQ" + os.urandom(6).hex().upper()
        secret = os.urandom(20).hex()
        with open(f"{d}/credentials", "w") as f:
            f.write(f"# scratch keys of tests/sql/python/test_sqs_bridge.py\n{key} {secret}\n")
        for name in ("aws-config", "aws-credentials"):
            open(f"{d}/{name}", "w").close()
        os.environ.update(AWS_CONFIG_FILE=f"{d}/aws-config",
                          AWS_SHARED_CREDENTIALS_FILE=f"{d}/aws-credentials")
        cls.out = open(f"{d}/serve.out", "w+")
        cls.err = open(f"{d}/serve.err", "w+")
        cls.serve = subprocess.Popen(
            [TXMQ, "--dsn", os.environ["TXMQ_SQL_ADMIN_DSN"], "serve", "--listen", "127.0.0.1:0",
             "--credentials", f"{d}/credentials"], stdout=cls.out, stderr=cls.err)
        endpoint = None
        for _ in range(600):
            cls.out.seek(0)
            for line in cls.out.read().splitlines():
                if line.startswith("txmq serve: listening on "):
                    endpoint = line.split()[4]
            if endpoint or cls.serve.poll() is not None:
                break
            time.sleep(0.1)
        if not endpoint:
            cls.serve.kill()
            cls.err.seek(0)
            raise RuntimeError("txmq serve did not start: " + cls.err.read())
        cls.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                               aws_access_key_id=key, aws_secret_access_key=secret)
        cls.queue = f"{os.environ['TXMQ_SQL_PREFIX']}-bridge"
        cls.url = cls.sqs.create_queue(QueueName=cls.queue)["QueueUrl"]
        admin_conn = pymysql.connect(**admin.admin_params())
        with admin_conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            cls.mysql = "MariaDB" not in cur.fetchone()[0]
            cur.execute("SELECT topic FROM txmq_sqs_queues WHERE name = %s", (cls.queue,))
            (cls.topic,) = cur.fetchone()
        admin_conn.close()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.sqs.delete_queue(QueueUrl=cls.url)
        finally:
            cls.serve.send_signal(signal.SIGTERM)
            try:
                status = cls.serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cls.serve.kill()
                status = "no exit within 30 s of SIGTERM"
            cls.scratch.cleanup()
        if status != 0:
            raise RuntimeError(f"txmq serve exited {status} after SIGTERM")

    def test_sql_send_is_received_by_boto3(self):
        conn = sql.connect()
        cur = conn.cursor()
        ref = f"bridge-{random.getrandbits(32):x}"
        conn.begin()
        cur.execute(f"INSERT INTO `{sql.ORDERS}` (ref, amount) VALUES (%s, 1)", (ref,))
        sql.send(cur, self.topic, "rolled back " + ref)
        conn.rollback()

        received = {}

        def long_poll():
            t0 = time.monotonic()
            received["answer"] = self.sqs.receive_message(
                QueueUrl=self.url, WaitTimeSeconds=10, MaxNumberOfMessages=10,
                MessageAttributeNames=["All"])
            received["at"] = time.monotonic()

        poller = threading.Thread(target=long_poll)
        poller.start()
        time.sleep(0.5)  # the receive is waiting
        conn.begin()
        cur.execute(f"INSERT INTO `{sql.ORDERS}` (ref, amount) VALUES (%s, 2)", (ref,))
        msg_id = sql.send(cur, self.topic, "order " + ref, json.dumps(
            {"attributes": {"origin": "sql", "amount": {"type": "Number", "value": "12"}}}))
        committed = time.monotonic()
        conn.commit()
        poller.join(15)
        self.assertFalse(poller.is_alive())
        messages = received["answer"].get("Messages", [])
        self.assertEqual([m["Body"] for m in messages], ["order " + ref])
        attrs = messages[0]["MessageAttributes"]
        self.assertEqual(attrs["origin"], {"DataType": "String", "StringValue": "sql"})
        self.assertEqual(attrs["amount"], {"DataType": "Number", "StringValue": "12"})
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=messages[0]["ReceiptHandle"])
        print(f"\n  message {msg_id}: long poll returned {received['at'] - committed:.3f} s "
              "after the SQL commit", file=sys.stderr)
        again = self.sqs.receive_message(QueueUrl=self.url, WaitTimeSeconds=1)
        self.assertEqual(again.get("Messages", []), [])
        cur.execute(f"SELECT amount FROM `{sql.ORDERS}` WHERE ref = %s", (ref,))
        self.assertEqual(cur.fetchall(), ((2,),))
        conn.close()

    def test_sqs_send_names_the_queue_as_send_message_does(self):
        """CALL txmq_sqs_send(queue, body, options): what boto3 receives is what it receives of
        the same message sent by SendMessage; the call answers SendMessage's MessageId and MD5s."""
        conn = sql.connect()
        cur = conn.cursor()
        body = "żółty 🦀 " + os.urandom(4).hex()
        attributes = {
            "colour": {"DataType": "String", "StringValue": "żółty"},
            "amount": {"DataType": "Number", "StringValue": "12.5"},
            "blob": {"DataType": "Binary.gz", "BinaryValue": "AAEC/w=="},
        }
        conn.begin()
        cur.execute(f"INSERT INTO `{sql.ORDERS}` (ref, amount) VALUES (%s, 3)", (body[-8:],))
        (answer,) = sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                             (self.url, body, json.dumps({"MessageAttributes": attributes})))
        conn.commit()
        sent = self.sqs.send_message(QueueUrl=self.url, MessageBody=body, MessageAttributes={
            "colour": {"DataType": "String", "StringValue": "żółty"},
            "amount": {"DataType": "Number", "StringValue": "12.5"},
            "blob": {"DataType": "Binary.gz", "BinaryValue": bytes([0, 1, 2, 255])}})
        _, message_id, sequence, md5_body, md5_attributes = answer
        self.assertIsNone(sequence)
        if md5_body is not None or not self.mysql:  # MySQL 9 has no MD5(): NULL there
            self.assertEqual(md5_body, sent["MD5OfMessageBody"])
            self.assertEqual(md5_attributes, sent["MD5OfMessageAttributes"])
        got = []
        for _ in range(5):
            got += self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10,
                                            MessageAttributeNames=["All"],
                                            WaitTimeSeconds=1).get("Messages", [])
            if len(got) >= 2:
                break
        self.assertEqual(len(got), 2)
        by_id = {m["MessageId"]: m for m in got}
        self.assertIn(message_id, by_id)
        from_sql, from_sqs = by_id[message_id], by_id[sent["MessageId"]]
        for field in ("Body", "MD5OfBody", "MessageAttributes", "MD5OfMessageAttributes"):
            self.assertEqual(from_sql[field], from_sqs[field], field)
        for m in got:
            self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])
        # Refusals: nothing written, the caller's transaction usable.
        for queue, options, says in (
                ("no-such-queue", None, "no SQS queue"),
                (self.queue, {"MessageDeduplicationId": "d"}, "a standard queue takes no"),
                (self.queue, {"MessageGroupId": "g"}, "is not fair yet"),
                (self.queue, {"MessageAttributes": {"AWS.x": {"DataType": "String", "StringValue": "v"}}}, "reserved"),
                (self.queue, {"MessageAttributes": {"n": {"DataType": "Number", "StringValue": "x1"}}}, "must be a number"),
                (self.queue, {"DelaySecond": 1}, "unknown field")):
            with self.assertRaises(pymysql.err.OperationalError) as caught:
                sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                         (queue, "x", None if options is None else json.dumps(options)))
            self.assertIn(says, caught.exception.args[1])
        self.assertEqual(self.sqs.receive_message(QueueUrl=self.url, WaitTimeSeconds=1).get("Messages", []), [])
        conn.close()

    def test_sqs_send_with_message_group_id_is_a_fair_queues_tenant(self):
        """MessageGroupId on a standard queue: the tenant of a fair queue (docs/sqs.md, "Fair
        queues"), placed in line as SendMessage places it; refused while the queue is not fair
        (making it fair is DDL, which cannot run in the caller's transaction)."""
        name = f"{os.environ['TXMQ_SQL_PREFIX']}-bridge-fair"
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        try:
            conn = sql.connect()
            cur = conn.cursor()
            with self.assertRaises(pymysql.err.OperationalError) as caught:
                sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                         (name, "x", json.dumps({"MessageGroupId": "quiet"})))
            self.assertIn("is not fair yet", caught.exception.args[1])
            # SendMessage with a MessageGroupId makes it fair; then a noisy tenant's backlog
            # and a quiet tenant's two messages, all from SQL in one transaction.
            self.sqs.send_message(QueueUrl=url, MessageBody="warm", MessageGroupId="warm")
            conn.begin()
            for i in range(20):
                sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                         (name, f"noisy {i}", json.dumps({"MessageGroupId": "noisy"})))
            for i in range(2):
                sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                         (name, f"quiet {i}", json.dumps({"MessageGroupId": "quiet"})))
            conn.commit()
            order = []
            for _ in range(40):
                got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1,
                                               AttributeNames=["All"],
                                               WaitTimeSeconds=1).get("Messages", [])
                for m in got:
                    order.append((m["Body"], m.get("Attributes", {}).get("MessageGroupId")))
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                if len(order) >= 23:
                    break
            self.assertEqual(len(order), 23, order)
            self.assertIn(("quiet 0", "quiet"), order)
            # The quiet tenant waits behind about one message of each other, not the backlog.
            quiet = [i for i, (body, _) in enumerate(order) if body.startswith("quiet")]
            self.assertLessEqual(max(quiet), 6, order)
            noisy = [body for body, _ in order if body.startswith("noisy")]
            self.assertEqual(noisy, [f"noisy {i}" for i in range(20)])
            conn.close()
        finally:
            self.sqs.delete_queue(QueueUrl=url)

    def test_sqs_send_to_a_fifo_queue_orders_and_deduplicates_with_send_message(self):
        fifo = f"{os.environ['TXMQ_SQL_PREFIX']}-bridge.fifo"
        url = self.sqs.create_queue(QueueName=fifo, Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
        try:
            conn = sql.connect()
            cur = conn.cursor()
            conn.begin()
            first = sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                             (fifo, "one", json.dumps({"MessageGroupId": "g"})))[0]
            sql.call(cur, "CALL txmq_sqs_send(%s, %s, %s)",
                     (fifo, "two", json.dumps({"MessageGroupId": "g"})))
            conn.commit()
            self.sqs.send_message(QueueUrl=url, MessageBody="three", MessageGroupId="g")
            # The same body within the dedup window: the SQL send's message, not a new one.
            again = self.sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g")
            self.assertEqual(again["MessageId"], first[1])
            bodies = []
            for _ in range(10):
                for m in self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                  AttributeNames=["All"],
                                                  WaitTimeSeconds=1).get("Messages", []):
                    bodies.append(m["Body"])
                    if m["Body"] == "one":
                        self.assertEqual(m["Attributes"]["SequenceNumber"], first[2])
                        self.assertEqual(m["Attributes"]["MessageGroupId"], "g")
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                if len(bodies) >= 3:
                    break
            self.assertEqual(bodies, ["one", "two", "three"])
            with self.assertRaises(pymysql.err.OperationalError) as caught:
                sql.call(cur, "CALL txmq_sqs_send(%s, %s, NULL)", (fifo, "x"))
            self.assertIn("needs MessageGroupId", caught.exception.args[1])
            conn.close()
        finally:
            self.sqs.delete_queue(QueueUrl=url)


if __name__ == "__main__":
    unittest.main(verbosity=2)
