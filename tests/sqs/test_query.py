#!/usr/bin/python3
"""txmq serve through Debian's python3-boto3 1.26, which speaks SQS's Query protocol.

Run by tests/sqs/run.sh, which starts the server and sets TXMQ_SQS_ENDPOINT, TXMQ_SQS_PREFIX
(unique queue names for this run), the access keys and scratch AWS config files. Every test
makes its own queues and deletes them. What is checked is what Amazon SQS does.
"""
import base64
import datetime
import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
import types
import unittest
import urllib.error
import urllib.parse
import urllib.request
from unittest import mock

import boto3
import botocore.auth
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["TXMQ_SQS_ENDPOINT"]
PREFIX = os.environ["TXMQ_SQS_PREFIX"]
KEY = os.environ["AWS_ACCESS_KEY_ID"]
SECRET = os.environ["AWS_SECRET_ACCESS_KEY"]
OTHER_KEY = os.environ["TXMQ_SQS_OTHER_KEY"]
UNKNOWN_KEY = os.environ["TXMQ_SQS_UNKNOWN_KEY"]
REGION = "us-east-1"
ACCOUNT = "000000000000"


def make_client(key=KEY, secret=SECRET, validate=True):
    # No retries: a test sees the server's first answer.
    config = Config(retries={"mode": "standard", "total_max_attempts": 1}, read_timeout=60,
                    connect_timeout=10, max_pool_connections=20,
                    parameter_validation=validate)
    return boto3.session.Session().client(
        "sqs", endpoint_url=ENDPOINT, region_name=REGION, aws_access_key_id=key,
        aws_secret_access_key=secret, config=config)


def md5_hex(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.md5(data).hexdigest()


def md5_of_attributes(attributes):
    """SQS's MD5OfMessageAttributes: for each attribute in name order, the name, the data type
    (each as a 4-byte big-endian length and UTF-8 bytes), a transport byte (1 string, 2 binary)
    and the value (length-prefixed UTF-8 or raw bytes)."""
    def field(b):
        return struct.pack(">I", len(b)) + b
    out = b""
    for name in sorted(attributes):
        a = attributes[name]
        out += field(name.encode("utf-8")) + field(a["DataType"].encode("utf-8"))
        if "StringValue" in a:
            out += b"\x01" + field(a["StringValue"].encode("utf-8"))
        else:
            value = a["BinaryValue"]
            if isinstance(value, str):
                value = base64.b64decode(value)
            out += b"\x02" + field(value)
    return hashlib.md5(out).hexdigest()


def arn(name):
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


class SqsTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sqs = make_client()
        cls.raw = make_client(validate=False)  # sends what boto3 would refuse to

    def name(self, suffix, fifo=False):
        base = f"{PREFIX}-{self._testMethodName[5:25]}-{suffix}".replace("_", "-")
        return base + ".fifo" if fifo else base

    def create(self, suffix, fifo=False, attributes=None, **kwargs):
        attributes = dict(attributes or {})
        if fifo:
            attributes["FifoQueue"] = "true"
        url = self.sqs.create_queue(QueueName=self.name(suffix, fifo), Attributes=attributes,
                                    **kwargs)["QueueUrl"]
        self.addCleanup(self.delete_quietly, url)
        return url

    def delete_quietly(self, url):
        try:
            self.sqs.delete_queue(QueueUrl=url)
        except ClientError:
            pass

    def assert_error(self, code, call, *args, **kwargs):
        with self.assertRaises(ClientError) as cm:
            call(*args, **kwargs)
        self.assertEqual(cm.exception.response["Error"]["Code"], code, cm.exception.response)
        return cm.exception

    def assert_error_in(self, codes, call, *args, **kwargs):
        with self.assertRaises(ClientError) as cm:
            call(*args, **kwargs)
        self.assertIn(cm.exception.response["Error"]["Code"], codes, cm.exception.response)
        return cm.exception

    def receive(self, url, **kwargs):
        kwargs.setdefault("WaitTimeSeconds", 1)
        return self.sqs.receive_message(QueueUrl=url, **kwargs).get("Messages", [])

    def drain(self, url, expected, seconds=15, **kwargs):
        """Receives and deletes until `expected` messages came or `seconds` passed."""
        got = []
        deadline = time.monotonic() + seconds
        while len(got) < expected and time.monotonic() < deadline:
            batch = self.receive(url, MaxNumberOfMessages=10, **kwargs)
            for m in batch:
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            got.extend(batch)
        return got

    def counts(self, url):
        a = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return (int(a["ApproximateNumberOfMessages"]),
                int(a["ApproximateNumberOfMessagesNotVisible"]),
                int(a["ApproximateNumberOfMessagesDelayed"]))


class DigestTest(unittest.TestCase):
    def test_own_md5_of_attributes_matches_published_digests(self):
        # Digests that SQS returned, as recorded in open SDK and emulator test suites.
        self.assertEqual(md5_of_attributes(
            {"SellerName": {"DataType": "String", "StringValue": "Example Store"}}),
            "cd28f3b68aeee4b2eac9c66f2f694b58")
        self.assertEqual(md5_of_attributes(
            {"ordinal": {"DataType": "Number", "StringValue": "1"},
             "category": {"DataType": "String", "StringValue": "test"}}),
            "d21ae90c49061e927f57df5f5d72be1f")


class QueuesTest(SqsTestCase):
    def test_create_get_delete(self):
        name = self.name("a")
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        self.addCleanup(self.delete_quietly, url)
        self.assertEqual(url, f"{ENDPOINT}/{ACCOUNT}/{name}")
        self.assertEqual(self.sqs.get_queue_url(QueueName=name)["QueueUrl"], url)
        self.sqs.delete_queue(QueueUrl=url)
        with self.assertRaises(self.sqs.exceptions.QueueDoesNotExist):
            self.sqs.get_queue_url(QueueName=name)

    def test_names_are_case_sensitive(self):
        lower = self.create("mixed")
        upper = self.create("MIXED")
        self.assertNotEqual(lower, upper)
        self.sqs.send_message(QueueUrl=lower, MessageBody="lower")
        self.assertEqual([m["Body"] for m in self.drain(upper, 1, seconds=2)], [])
        self.assertEqual([m["Body"] for m in self.drain(lower, 1)], ["lower"])

    def test_create_is_idempotent_with_equal_attributes(self):
        url = self.create("idem", attributes={"VisibilityTimeout": "40"})
        again = self.sqs.create_queue(QueueName=self.name("idem"),
                                      Attributes={"VisibilityTimeout": "40"})["QueueUrl"]
        self.assertEqual(again, url)
        with self.assertRaises(self.sqs.exceptions.QueueNameExists) as cm:
            self.sqs.create_queue(QueueName=self.name("idem"),
                                  Attributes={"VisibilityTimeout": "50"})
        self.assertEqual(cm.exception.response["Error"]["Code"], "QueueAlreadyExists")

    def test_concurrent_creates_of_one_name(self):
        name = self.name("race")
        barrier = threading.Barrier(8)
        urls, errors = [], []

        def create():
            client = make_client()
            barrier.wait()
            try:
                urls.append(client.create_queue(QueueName=name,
                                                Attributes={"DelaySeconds": "1"})["QueueUrl"])
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if urls:
            self.addCleanup(self.delete_quietly, urls[0])
        self.assertEqual(errors, [])
        self.assertEqual(len(urls), 8)
        self.assertEqual(set(urls), {f"{ENDPOINT}/{ACCOUNT}/{name}"})

    def test_list_with_prefix_and_pages(self):
        urls = sorted(self.create(s) for s in ("x1", "x2", "x3"))
        prefix = self.name("x")
        listed = self.sqs.list_queues(QueueNamePrefix=prefix)
        self.assertEqual(sorted(listed["QueueUrls"]), urls)
        self.assertNotIn("NextToken", listed)
        first = self.sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2)
        self.assertEqual(len(first["QueueUrls"]), 2)
        self.assertIn("NextToken", first)
        second = self.sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2,
                                      NextToken=first["NextToken"])
        self.assertEqual(len(second["QueueUrls"]), 1)
        self.assertNotIn("NextToken", second)
        self.assertEqual(sorted(first["QueueUrls"] + second["QueueUrls"]), urls)
        self.assertNotIn("QueueUrls", self.sqs.list_queues(QueueNamePrefix=self.name("nothing")))

    def test_invalid_queue_names(self):
        for bad in ("has space", "x" * 81, "dot.in.name", "bad.fifo.fifo", "\u00e9t\u00e9"):
            self.assert_error("InvalidParameterValue", self.raw.create_queue, QueueName=bad)
        # A .fifo name needs FifoQueue=true, and FifoQueue=true a .fifo name.
        self.assert_error("InvalidParameterValue", self.sqs.create_queue,
                          QueueName=self.name("plain", fifo=True))
        self.assert_error_in(("InvalidParameterValue", "InvalidAttributeValue"),
                             self.sqs.create_queue, QueueName=self.name("plain"),
                             Attributes={"FifoQueue": "true"})

    def test_queue_attributes(self):
        url = self.create("attrs")
        a = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for key in ("VisibilityTimeout", "DelaySeconds", "MaximumMessageSize",
                    "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds", "QueueArn",
                    "CreatedTimestamp", "LastModifiedTimestamp", "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed"):
            self.assertIn(key, a)
        self.assertEqual(a["VisibilityTimeout"], "30")
        self.assertEqual(a["DelaySeconds"], "0")
        self.assertIn(a["MaximumMessageSize"], ("262144", "1048576"))
        self.assertEqual(a["MessageRetentionPeriod"], "345600")
        self.assertEqual(a["QueueArn"], arn(self.name("attrs")))
        self.assertLessEqual(abs(int(a["CreatedTimestamp"]) - time.time()), 60)
        self.assertNotIn("FifoQueue", a)

        self.sqs.set_queue_attributes(QueueUrl=url, Attributes={
            "VisibilityTimeout": "45", "DelaySeconds": "2", "ReceiveMessageWaitTimeSeconds": "3"})
        a = self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"])["Attributes"]
        self.assertEqual(a, {"VisibilityTimeout": "45", "DelaySeconds": "2"})

        self.assert_error("InvalidAttributeName", self.raw.get_queue_attributes, QueueUrl=url,
                          AttributeNames=["NoSuchAttribute"])
        self.assert_error("InvalidAttributeName", self.sqs.set_queue_attributes, QueueUrl=url,
                          Attributes={"NoSuchAttribute": "1"})
        for name, value in (("VisibilityTimeout", "43201"), ("VisibilityTimeout", "-1"),
                            ("MaximumMessageSize", "1023"), ("DelaySeconds", "abc"),
                            ("ReceiveMessageWaitTimeSeconds", "21"),
                            ("RedrivePolicy", "not json")):
            self.assert_error("InvalidAttributeValue", self.sqs.set_queue_attributes,
                              QueueUrl=url, Attributes={name: value})
        # Read-only attributes cannot be set.
        self.assert_error("InvalidAttributeName", self.sqs.set_queue_attributes, QueueUrl=url,
                          Attributes={"QueueArn": arn("other")})
        self.assertEqual(self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"],
            {"VisibilityTimeout": "45"})

    def test_fifo_attributes(self):
        url = self.create("fa", fifo=True, attributes={"ContentBasedDeduplication": "true"})
        a = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        self.assertEqual(a["FifoQueue"], "true")
        self.assertEqual(a["ContentBasedDeduplication"], "true")

    def test_tags(self):
        url = self.create("tags", tags={"team": "billing"})
        self.assertEqual(self.sqs.list_queue_tags(QueueUrl=url)["Tags"], {"team": "billing"})
        self.sqs.tag_queue(QueueUrl=url, Tags={"env": "test", "team": "payments"})
        self.assertEqual(self.sqs.list_queue_tags(QueueUrl=url)["Tags"],
                         {"team": "payments", "env": "test"})
        self.sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
        self.assertEqual(self.sqs.list_queue_tags(QueueUrl=url)["Tags"], {"env": "test"})
        self.sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
        self.assertNotIn("Tags", self.sqs.list_queue_tags(QueueUrl=url))


class MessagesTest(SqsTestCase):
    def test_send_receive_delete(self):
        url = self.create("srd")
        body = "hello from boto3"
        sent = self.sqs.send_message(QueueUrl=url, MessageBody=body)
        self.assertEqual(sent["MD5OfMessageBody"], md5_hex(body))
        self.assertNotIn("MD5OfMessageAttributes", sent)
        [m] = self.receive(url)
        self.assertEqual(m["Body"], body)
        self.assertEqual(m["MessageId"], sent["MessageId"])
        self.assertEqual(m["MD5OfBody"], md5_hex(body))
        self.assertEqual(self.counts(url), (0, 1, 0))
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        self.assertEqual(self.receive(url), [])
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_concurrent_batches_share_group_commits_and_lose_nothing(self):
        # The entries of concurrent batches join one group commit (docs/sqs.md): each caller
        # still gets its own ten answers, with its ids and digests, and every message arrives
        # once; the deletes of concurrent DeleteMessageBatch calls are grouped the same way.
        url = self.create("grouped")
        threads, calls = 8, 10
        answers, errors = [], []

        def send(t):
            client = make_client()
            for c in range(calls):
                entries = [{"Id": f"e{i}", "MessageBody": f"t{t} c{c} m{i}"} for i in range(10)]
                entries[7]["MessageAttributes"] = {
                    "n": {"DataType": "Number", "StringValue": str(t * 100 + c)}}
                try:
                    answers.append((entries, client.send_message_batch(QueueUrl=url,
                                                                       Entries=entries)))
                except ClientError as e:
                    errors.append(e)

        workers = [threading.Thread(target=send, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        self.assertEqual(errors, [])
        ids = set()
        for entries, answer in answers:
            self.assertEqual(answer.get("Failed", []), [])
            by_id = {s["Id"]: s for s in answer["Successful"]}
            self.assertEqual(sorted(by_id), sorted(e["Id"] for e in entries))
            for e in entries:
                self.assertEqual(by_id[e["Id"]]["MD5OfMessageBody"], md5_hex(e["MessageBody"]))
                ids.add(by_id[e["Id"]]["MessageId"])
            self.assertEqual(by_id["e7"]["MD5OfMessageAttributes"],
                             md5_of_attributes(entries[7]["MessageAttributes"]))
        self.assertEqual(len(ids), threads * calls * 10)
        got = {}
        deadline = time.monotonic() + 60
        while len(got) < len(ids) and time.monotonic() < deadline:
            batch = self.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=120)
            for m in batch:
                self.assertNotIn(m["MessageId"], got)
                got[m["MessageId"]] = m
        self.assertEqual(set(got), ids)
        handles = [m["ReceiptHandle"] for m in got.values()]
        deleted, delete_errors = [], []

        def delete(part):
            client = make_client()
            for i in range(0, len(part), 10):
                try:
                    r = client.delete_message_batch(QueueUrl=url, Entries=[
                        {"Id": f"d{j}", "ReceiptHandle": h} for j, h in enumerate(part[i:i + 10])])
                    deleted.extend(r["Successful"])
                    delete_errors.extend(r.get("Failed", []))
                except ClientError as e:
                    delete_errors.append(e)

        workers = [threading.Thread(target=delete, args=(handles[t::threads],))
                   for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        self.assertEqual(delete_errors, [])
        self.assertEqual(len(deleted), len(ids))
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_batch_send_and_delete(self):
        url = self.create("batch")
        attrs = {"k": {"DataType": "String", "StringValue": "v"}}
        entries = [{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)]
        entries[3]["MessageAttributes"] = attrs
        entries[4]["MessageBody"] = "bad \x00 body"
        result = self.sqs.send_message_batch(QueueUrl=url, Entries=entries)
        self.assertEqual(len(result["Successful"]), 9)
        [failed] = result["Failed"]
        self.assertEqual(failed["Id"], "m4")
        self.assertEqual(failed["Code"], "InvalidMessageContents")
        self.assertTrue(failed["SenderFault"])
        by_id = {s["Id"]: s for s in result["Successful"]}
        for i in (0, 1, 2, 3, 5, 6, 7, 8, 9):
            self.assertEqual(by_id[f"m{i}"]["MD5OfMessageBody"], md5_hex(f"body {i}"))
        self.assertEqual(by_id["m3"]["MD5OfMessageAttributes"], md5_of_attributes(attrs))

        got = []
        deadline = time.monotonic() + 15
        while len(got) < 9 and time.monotonic() < deadline:
            got += self.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=60)
        self.assertEqual(sorted(m["Body"] for m in got),
                         sorted(f"body {i}" for i in (0, 1, 2, 3, 5, 6, 7, 8, 9)))
        entries = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]}
                   for i, m in enumerate(got[:9])]
        entries.append({"Id": "bogus", "ReceiptHandle": "not-a-receipt-handle"})
        deleted = self.sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        self.assertEqual(sorted(s["Id"] for s in deleted["Successful"]),
                         sorted(f"d{i}" for i in range(9)))
        [bad] = deleted["Failed"]
        self.assertEqual(bad["Id"], "bogus")
        self.assertEqual(bad["Code"], "ReceiptHandleIsInvalid")
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_long_poll_wakes_on_send(self):
        url = self.create("poll")
        result = {}

        def poll():
            started = time.monotonic()
            result["messages"] = make_client().receive_message(
                QueueUrl=url, WaitTimeSeconds=5).get("Messages", [])
            result["returned"] = time.monotonic()
            result["waited"] = result["returned"] - started

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(1.5)
        sent_at = time.monotonic()
        self.sqs.send_message(QueueUrl=url, MessageBody="wake up")
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual([m["Body"] for m in result["messages"]], ["wake up"])
        self.assertLess(result["returned"] - sent_at, 1.0)
        self.assertGreater(result["waited"], 1.0)

    def test_long_poll_waits_its_time_when_empty(self):
        url = self.create("idle")
        started = time.monotonic()
        self.assertEqual(self.receive(url, WaitTimeSeconds=2), [])
        self.assertGreaterEqual(time.monotonic() - started, 1.8)
        # The queue's ReceiveMessageWaitTimeSeconds is the default wait.
        self.sqs.set_queue_attributes(QueueUrl=url,
                                      Attributes={"ReceiveMessageWaitTimeSeconds": "2"})
        time.sleep(1.2)  # attributes reach every server within about a second
        started = time.monotonic()
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=url))
        self.assertGreaterEqual(time.monotonic() - started, 1.8)

    def test_receive_parameter_ranges(self):
        url = self.create("ranges")
        self.assert_error("InvalidParameterValue", self.sqs.receive_message, QueueUrl=url,
                          MaxNumberOfMessages=11)
        self.assert_error("InvalidParameterValue", self.sqs.receive_message, QueueUrl=url,
                          MaxNumberOfMessages=0)
        self.assert_error("InvalidParameterValue", self.sqs.receive_message, QueueUrl=url,
                          WaitTimeSeconds=21)

    def test_visibility_zero_makes_visible_at_once(self):
        url = self.create("vis0")
        self.sqs.send_message(QueueUrl=url, MessageBody="again")
        [first] = self.receive(url, VisibilityTimeout=60)
        self.assertEqual(self.receive(url, WaitTimeSeconds=0), [])
        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                                           VisibilityTimeout=0)
        started = time.monotonic()
        [second] = self.receive(url, WaitTimeSeconds=2, AttributeNames=["All"])
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertEqual(second["MessageId"], first["MessageId"])
        self.assertEqual(second["Attributes"]["ApproximateReceiveCount"], "2")
        self.assertNotEqual(second["ReceiptHandle"], first["ReceiptHandle"])

    def test_visibility_extension_keeps_it_hidden(self):
        url = self.create("visx")
        self.sqs.send_message(QueueUrl=url, MessageBody="hidden")
        [m] = self.receive(url, VisibilityTimeout=2)
        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                           VisibilityTimeout=30)
        time.sleep(3)
        self.assertEqual(self.receive(url, WaitTimeSeconds=1), [])
        # Without an extension, the visibility timeout runs out and it comes back.
        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                           VisibilityTimeout=1)
        [again] = self.receive(url, WaitTimeSeconds=5)
        self.assertEqual(again["MessageId"], m["MessageId"])

    def test_visibility_batch(self):
        url = self.create("visb")
        self.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}])
        got = self.drain_without_delete(url, 2)
        result = self.sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": "one", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "two", "ReceiptHandle": got[1]["ReceiptHandle"], "VisibilityTimeout": 120},
            {"Id": "bad", "ReceiptHandle": "nonsense", "VisibilityTimeout": 0}])
        self.assertEqual(sorted(s["Id"] for s in result["Successful"]), ["one", "two"])
        self.assertEqual([f["Id"] for f in result["Failed"]], ["bad"])
        [back] = self.receive(url, WaitTimeSeconds=2, MaxNumberOfMessages=10)
        self.assertEqual(back["Body"], got[0]["Body"])

    def drain_without_delete(self, url, expected):
        got = []
        deadline = time.monotonic() + 10
        while len(got) < expected and time.monotonic() < deadline:
            got += self.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=60)
        self.assertEqual(len(got), expected)
        return got

    def test_delete_twice_and_stale_handle(self):
        url = self.create("stale")
        self.sqs.send_message(QueueUrl=url, MessageBody="once")
        [m] = self.receive(url, VisibilityTimeout=60)
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        # SQS: deleting an already deleted message with its handle succeeds.
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        self.assert_error("ReceiptHandleIsInvalid", self.sqs.delete_message, QueueUrl=url,
                          ReceiptHandle="garbage")

    def test_an_older_handle_of_a_message_received_again(self):
        # docs/sqs.md, "What differs from SQS": the lease is fenced by its handle. A delete with
        # the older handle succeeds and keeps the message (as AWS documents it may); a visibility
        # change with it is refused, alone and in a batch, and moves nothing.
        url = self.create("older")
        self.sqs.send_message(QueueUrl=url, MessageBody="twice")
        [first] = self.receive(url, VisibilityTimeout=1)
        time.sleep(1.5)
        [again] = self.receive(url, WaitTimeSeconds=3, VisibilityTimeout=60)
        self.assertEqual(again["MessageId"], first["MessageId"])
        old = first["ReceiptHandle"]
        e = self.assert_error("InvalidParameterValue", self.sqs.change_message_visibility,
                              QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=0)
        self.assertEqual(e.response["Error"]["Message"],
                         f"Value {old} for parameter ReceiptHandle is invalid. Reason: Message "
                         "does not exist or is not available for visibility timeout change.")
        batch = self.sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": "old", "ReceiptHandle": old, "VisibilityTimeout": 0}])
        self.assertEqual([f["Id"] for f in batch.get("Failed", [])], ["old"])
        self.assertEqual(batch["Failed"][0]["Code"], "InvalidParameterValue")
        self.assertEqual(self.receive(url, WaitTimeSeconds=1), [])  # still leased to `again`
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=old)
        self.assertEqual(self.counts(url)[1], 1)  # in flight, not deleted
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_message_attributes_and_digests(self):
        url = self.create("mattr")
        attrs = {
            "text": {"DataType": "String", "StringValue": "h\u00e9llo \u65e5\u672c & <x>"},
            "count": {"DataType": "Number", "StringValue": "-12.5e3"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff"},
            "kind": {"DataType": "String.custom", "StringValue": "special"},
            "image": {"DataType": "Binary.png", "BinaryValue": b"\x89PNG"},
            "tag.one": {"DataType": "String", "StringValue": "1"},
            "tag.two": {"DataType": "Number", "StringValue": "2"},
        }
        body = "with attributes"
        sent = self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)
        self.assertEqual(sent["MD5OfMessageBody"], md5_hex(body))
        self.assertEqual(sent["MD5OfMessageAttributes"], md5_of_attributes(attrs))

        [m] = self.receive(url, MessageAttributeNames=["All"], VisibilityTimeout=0)
        self.assertEqual(m["MessageAttributes"], attrs)
        self.assertEqual(m["MD5OfMessageAttributes"], md5_of_attributes(attrs))
        self.assertEqual(m["MD5OfBody"], md5_hex(body))

        # Filters: by name, and by prefix with ".*"; the digest covers what is returned.
        [m] = self.receive(url, MessageAttributeNames=["count", "tag.*"], VisibilityTimeout=0,
                           WaitTimeSeconds=3)
        subset = {k: attrs[k] for k in ("count", "tag.one", "tag.two")}
        self.assertEqual(m["MessageAttributes"], subset)
        self.assertEqual(m["MD5OfMessageAttributes"], md5_of_attributes(subset))
        # None asked for: none returned, and no digest.
        [m] = self.receive(url, VisibilityTimeout=0, WaitTimeSeconds=3)
        self.assertNotIn("MessageAttributes", m)
        self.assertNotIn("MD5OfMessageAttributes", m)

    def test_invalid_message_attributes(self):
        url = self.create("badattr")
        for attrs in ({"AWS.reserved": {"DataType": "String", "StringValue": "x"}},
                      {"n": {"DataType": "Number", "StringValue": "twelve"}},
                      {"t": {"DataType": "Integer", "StringValue": "1"}},
                      {"e": {"DataType": "String", "StringValue": ""}},
                      {f"a{i}": {"DataType": "String", "StringValue": "x"} for i in range(11)}):
            self.assert_error("InvalidParameterValue", self.raw.send_message, QueueUrl=url,
                              MessageBody="x", MessageAttributes=attrs)

    def test_system_attributes(self):
        url = self.create("sys")
        before = int(time.time() * 1000)
        self.sqs.send_message(QueueUrl=url, MessageBody="system")
        after = int(time.time() * 1000)
        [m] = self.receive(url, AttributeNames=["All"], VisibilityTimeout=60)
        a = m["Attributes"]
        self.assertEqual(a["ApproximateReceiveCount"], "1")
        sent = int(a["SentTimestamp"])
        self.assertGreaterEqual(sent, before - 2000)
        self.assertLessEqual(sent, after + 2000)
        first = int(a["ApproximateFirstReceiveTimestamp"])
        self.assertGreaterEqual(first, sent)
        self.assertLessEqual(first, int(time.time() * 1000) + 2000)
        self.assertNotIn("MessageGroupId", a)

        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                           VisibilityTimeout=0)
        [m2] = self.receive(url, AttributeNames=["ApproximateReceiveCount",
                                                 "ApproximateFirstReceiveTimestamp"],
                            WaitTimeSeconds=3)
        self.assertEqual(m2["Attributes"], {"ApproximateReceiveCount": "2",
                                            "ApproximateFirstReceiveTimestamp": str(first)})

    def test_delay(self):
        url = self.create("delay")
        self.sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
        self.assertEqual(self.counts(url), (0, 0, 1))
        self.assertEqual(self.receive(url, WaitTimeSeconds=1), [])
        [m] = self.receive(url, WaitTimeSeconds=5)
        self.assertEqual(m["Body"], "later")

    def test_xml_escaping_round_trip(self):
        url = self.create("xml")
        body = "line1\r\nline2\rx & y \"quoted\" 'single' <tag> ]]> \t tab \u00e9\u00df \u65e5\u672c \U0001f600 \ue000"
        attrs = {"note": {"DataType": "String", "StringValue": "a\r\n<&>\"' \u00fc"}}
        sent = self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)
        self.assertEqual(sent["MD5OfMessageBody"], md5_hex(body))
        self.assertEqual(sent["MD5OfMessageAttributes"], md5_of_attributes(attrs))
        [m] = self.receive(url, MessageAttributeNames=["All"])
        self.assertEqual(m["Body"], body)
        self.assertEqual(m["MD5OfBody"], md5_hex(body))
        self.assertEqual(m["MessageAttributes"], attrs)

    def test_invalid_characters(self):
        url = self.create("chars")
        for body in ("nul \x00 inside", "noncharacter \uffff", "control \x01", "\ufffe"):
            with self.assertRaises(self.sqs.exceptions.InvalidMessageContents, msg=repr(body)):
                self.sqs.send_message(QueueUrl=url, MessageBody=body)
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_oversize_messages(self):
        url = self.create("size", attributes={"MaximumMessageSize": "1024"})
        self.sqs.send_message(QueueUrl=url, MessageBody="x" * 1024)
        self.assert_error("InvalidParameterValue", self.sqs.send_message, QueueUrl=url,
                          MessageBody="x" * 1025)
        # Attributes count: name, type and value.
        attrs = {"pad": {"DataType": "String", "StringValue": "y" * 10}}  # 3 + 6 + 10 bytes
        self.sqs.send_message(QueueUrl=url, MessageBody="x" * (1024 - 19),
                              MessageAttributes=attrs)
        self.assert_error("InvalidParameterValue", self.sqs.send_message, QueueUrl=url,
                          MessageBody="x" * (1024 - 18), MessageAttributes=attrs)
        result = self.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "fits", "MessageBody": "x" * 1000},
            {"Id": "big", "MessageBody": "x" * 2000}])
        self.assertEqual([s["Id"] for s in result["Successful"]], ["fits"])
        self.assertEqual([(f["Id"], f["Code"]) for f in result["Failed"]],
                         [("big", "InvalidParameterValue")])
        self.assertEqual(self.counts(url)[0], 3)

    def test_batch_request_too_long(self):
        url = self.create("long")
        entries = [{"Id": f"e{i}", "MessageBody": "z" * 120_000} for i in range(10)]
        with self.assertRaises(self.sqs.exceptions.BatchRequestTooLong):
            self.sqs.send_message_batch(QueueUrl=url, Entries=entries)


class FifoTest(SqsTestCase):
    def test_order_within_groups(self):
        url = self.create("order", fifo=True)
        sent = []
        for i in range(5):
            for g in ("g1", "g2", "g3"):
                r = self.sqs.send_message(QueueUrl=url, MessageBody=f"{g}-{i}", MessageGroupId=g,
                                          MessageDeduplicationId=f"{g}-{i}")
                sent.append((g, f"{g}-{i}", int(r["SequenceNumber"])))
        for g in ("g1", "g2", "g3"):
            numbers = [n for group, _, n in sent if group == g]
            self.assertEqual(numbers, sorted(numbers))
            self.assertEqual(len(set(numbers)), len(numbers))
        got = self.drain(url, 15, seconds=30, AttributeNames=["All"])
        self.assertEqual(len(got), 15)
        for g in ("g1", "g2", "g3"):
            bodies = [m["Body"] for m in got if m["Attributes"]["MessageGroupId"] == g]
            self.assertEqual(bodies, [f"{g}-{i}" for i in range(5)])
            numbers = [int(m["Attributes"]["SequenceNumber"]) for m in got
                       if m["Attributes"]["MessageGroupId"] == g]
            self.assertEqual(numbers, [n for group, _, n in sent if group == g])
        for m in got:
            self.assertEqual(m["Attributes"]["MessageDeduplicationId"], m["Body"])

    def test_group_in_flight_blocks_only_its_group(self):
        url = self.create("block", fifo=True, attributes={"ContentBasedDeduplication": "true"})
        for body, group in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")):
            self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
        [held] = self.receive(url, MaxNumberOfMessages=1, VisibilityTimeout=60)
        self.assertEqual(held["Body"], "a1")
        others = []
        deadline = time.monotonic() + 10
        while len(others) < 2 and time.monotonic() < deadline:
            batch = self.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=60)
            for m in batch:
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            others += [m["Body"] for m in batch]
        self.assertEqual(others, ["b1", "b2"])
        self.assertEqual(self.receive(url, WaitTimeSeconds=1), [])
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=held["ReceiptHandle"])
        self.assertEqual([m["Body"] for m in self.receive(url, WaitTimeSeconds=3)], ["a2"])

    def test_deduplication_by_id(self):
        url = self.create("dedup", fifo=True)
        for body, dedup in (("one", "same"), ("two", "same"), ("three", "other")):
            self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g",
                                  MessageDeduplicationId=dedup)
        got = self.drain(url, 2, seconds=10)
        self.assertEqual([m["Body"] for m in got], ["one", "three"])
        self.assertEqual(self.receive(url), [])
        # The window also covers deleted messages.
        self.sqs.send_message(QueueUrl=url, MessageBody="four", MessageGroupId="g",
                              MessageDeduplicationId="same")
        self.assertEqual(self.receive(url), [])

    def test_content_based_deduplication(self):
        url = self.create("cbd", fifo=True, attributes={"ContentBasedDeduplication": "true"})
        for body in ("same body", "same body", "different body"):
            self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
        got = self.drain(url, 2, seconds=10, AttributeNames=["MessageDeduplicationId"])
        self.assertEqual([m["Body"] for m in got], ["same body", "different body"])
        self.assertEqual(self.receive(url), [])
        self.assertEqual(got[0]["Attributes"]["MessageDeduplicationId"],
                         hashlib.sha256(b"same body").hexdigest())

    def test_fifo_send_errors(self):
        url = self.create("ferr", fifo=True)
        self.assert_error("MissingParameter", self.sqs.send_message, QueueUrl=url,
                          MessageBody="no group", MessageDeduplicationId="d")
        # Neither a deduplication id nor content-based deduplication.
        self.assert_error("InvalidParameterValue", self.sqs.send_message, QueueUrl=url,
                          MessageBody="no dedup", MessageGroupId="g")
        self.assert_error("InvalidParameterValue", self.sqs.send_message, QueueUrl=url,
                          MessageBody="delayed", MessageGroupId="g",
                          MessageDeduplicationId="d", DelaySeconds=5)
        standard = self.create("std")
        self.assert_error("InvalidParameterValue", self.sqs.send_message, QueueUrl=standard,
                          MessageBody="x", MessageDeduplicationId="d")

    def test_receive_request_attempt_id(self):
        url = self.create("attempt", fifo=True, attributes={"ContentBasedDeduplication": "true"})
        for g in ("g1", "g2", "g3"):
            self.sqs.send_message(QueueUrl=url, MessageBody=f"{g} body", MessageGroupId=g)
        first = self.receive(url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="attempt-1",
                             VisibilityTimeout=60)
        self.assertGreater(len(first), 0)
        retry = self.receive(url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="attempt-1",
                             VisibilityTimeout=60)
        self.assertEqual([(m["MessageId"], m["ReceiptHandle"]) for m in retry],
                         [(m["MessageId"], m["ReceiptHandle"]) for m in first])
        # A new attempt id gets the others.
        rest = self.drain(url, 3 - len(first), seconds=5)
        self.assertEqual(sorted(m["Body"] for m in first + rest),
                         ["g1 body", "g2 body", "g3 body"])

    def test_stale_handle_refused_on_fifo(self):
        url = self.create("fstale", fifo=True, attributes={"ContentBasedDeduplication": "true"})
        self.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
        [m] = self.receive(url, VisibilityTimeout=60)
        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                           VisibilityTimeout=0)
        [again] = self.receive(url, WaitTimeSeconds=3, VisibilityTimeout=60)
        self.assertEqual(again["MessageId"], m["MessageId"])
        e = self.assert_error("InvalidParameterValue", self.sqs.delete_message, QueueUrl=url,
                              ReceiptHandle=m["ReceiptHandle"])
        self.assertEqual(e.response["Error"]["Message"],
                         f"Value {m['ReceiptHandle']} for parameter ReceiptHandle is invalid. "
                         "Reason: The receipt handle has expired.")
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])


class RedriveAndPurgeTest(SqsTestCase):
    def test_redrive_to_dead_letter_queue(self):
        dlq = self.create("dlq")
        policy = json.dumps({"deadLetterTargetArn": arn(self.name("dlq")), "maxReceiveCount": 2})
        source = self.create("src", attributes={"RedrivePolicy": policy})
        a = self.sqs.get_queue_attributes(QueueUrl=source,
                                          AttributeNames=["RedrivePolicy"])["Attributes"]
        self.assertEqual(json.loads(a["RedrivePolicy"]),
                         {"deadLetterTargetArn": arn(self.name("dlq")), "maxReceiveCount": 2})
        attrs = {"origin": {"DataType": "String", "StringValue": "source"},
                 "raw": {"DataType": "Binary", "BinaryValue": b"\x01\x02"}}
        sent = self.sqs.send_message(QueueUrl=source, MessageBody="poison", MessageAttributes=attrs)
        for count in ("1", "2"):
            [m] = self.receive(source, WaitTimeSeconds=3, VisibilityTimeout=60,
                               AttributeNames=["ApproximateReceiveCount"])
            self.assertEqual(m["Attributes"]["ApproximateReceiveCount"], count)
            self.sqs.change_message_visibility(QueueUrl=source, ReceiptHandle=m["ReceiptHandle"],
                                               VisibilityTimeout=0)
        self.assertEqual(self.receive(source, WaitTimeSeconds=2), [])
        [dead] = self.receive(dlq, WaitTimeSeconds=5, AttributeNames=["All"],
                              MessageAttributeNames=["All"])
        self.assertEqual(dead["Body"], "poison")
        self.assertEqual(dead["MessageId"], sent["MessageId"])
        self.assertEqual(dead["MessageAttributes"], attrs)
        self.assertEqual(dead["MD5OfMessageAttributes"], md5_of_attributes(attrs))
        self.assertEqual(dead["Attributes"]["DeadLetterQueueSourceArn"], arn(self.name("src")))
        self.assertEqual(self.sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"],
                         [source])
        # An empty flattened list is no element at all in the Query protocol's XML.
        self.assertEqual(self.sqs.list_dead_letter_source_queues(QueueUrl=source)
                         .get("queueUrls", []), [])

    def test_redrive_policy_needs_an_existing_target(self):
        policy = json.dumps({"deadLetterTargetArn": arn(self.name("missing")),
                             "maxReceiveCount": 2})
        # SQS: "Value ... for parameter RedrivePolicy is invalid. Reason: Dead letter target
        # does not exist."
        self.assert_error_in(("InvalidParameterValue", "InvalidAttributeValue"),
                             self.sqs.create_queue, QueueName=self.name("src"),
                             Attributes={"RedrivePolicy": policy})

    def test_purge(self):
        url = self.create("purge")
        self.sqs.send_message(QueueUrl=url, MessageBody="ready 1")
        self.sqs.send_message(QueueUrl=url, MessageBody="ready 2")
        self.sqs.send_message(QueueUrl=url, MessageBody="delayed", DelaySeconds=60)
        self.sqs.send_message(QueueUrl=url, MessageBody="in flight")
        got = self.receive(url, MaxNumberOfMessages=1, VisibilityTimeout=2)
        self.assertEqual(len(got), 1)
        self.sqs.purge_queue(QueueUrl=url)
        self.assertEqual(self.counts(url), (0, 0, 0))
        time.sleep(2.5)  # the in-flight message's visibility timeout has run out
        self.assertEqual(self.receive(url, WaitTimeSeconds=1), [])
        self.sqs.send_message(QueueUrl=url, MessageBody="after purge")
        self.assertEqual([m["Body"] for m in self.drain(url, 1)], ["after purge"])

    def test_purge_forgets_fifo_deduplication_ids(self):
        url = self.create("fpurge", fifo=True)
        self.sqs.send_message(QueueUrl=url, MessageBody="first", MessageGroupId="g",
                              MessageDeduplicationId="d1")
        self.sqs.purge_queue(QueueUrl=url)
        self.sqs.send_message(QueueUrl=url, MessageBody="second", MessageGroupId="g",
                              MessageDeduplicationId="d1")
        self.assertEqual([m["Body"] for m in self.drain(url, 1)], ["second"])


class ConsumerGroupQueuesTest(SqsTestCase):
    """Queues that read a consumer group of another queue's topic (TxmqSourceQueue): every
    message sent to the source reaches the source and each group queue, each deleting its own."""

    def group_queue(self, suffix, source_url, fifo=False, **attributes):
        attributes["TxmqSourceQueue"] = source_url.rsplit("/", 1)[1]
        return self.create(suffix, fifo=fifo, attributes=attributes)

    def test_every_group_queue_gets_every_message(self):
        source = self.create("src")
        audit = self.group_queue("audit", source)
        billing = self.group_queue("billing", source, VisibilityTimeout="1")
        bodies = [f"order {i}" for i in range(5)]
        for b in bodies:
            self.sqs.send_message(QueueUrl=source, MessageBody=b)
        ids = {}
        for url in (source, audit, billing):
            got = self.drain(url, len(bodies))
            self.assertEqual(sorted(m["Body"] for m in got), bodies, url)
            ids[url] = sorted(m["MessageId"] for m in got)
        # One message, one id, whichever queue received it.
        self.assertEqual(ids[source], ids[audit])
        self.assertEqual(ids[source], ids[billing])

    def test_each_queue_keeps_its_own_messages(self):
        source = self.create("src")
        audit = self.group_queue("audit", source, VisibilityTimeout="1")
        self.sqs.send_message(QueueUrl=source, MessageBody="one")
        self.assertEqual(len(self.drain(source, 1)), 1)
        self.assertEqual(self.counts(source), (0, 0, 0))
        self.assertEqual(self.counts(audit), (1, 0, 0))
        [m] = self.receive(audit, AttributeNames=["ApproximateReceiveCount"])
        self.assertEqual(m["Attributes"]["ApproximateReceiveCount"], "1")
        self.assertEqual(self.counts(audit), (0, 1, 0))
        # Not deleted: visible again after the group queue's own visibility timeout (1 s).
        [again] = self.receive(audit, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])
        self.assertEqual(again["Body"], "one")
        self.assertEqual(again["Attributes"]["ApproximateReceiveCount"], "2")
        self.sqs.delete_message(QueueUrl=audit, ReceiptHandle=again["ReceiptHandle"])
        self.assertEqual(self.counts(audit), (0, 0, 0))

    def test_long_poll_of_a_group_queue_wakes_on_send(self):
        source = self.create("src")
        audit = self.group_queue("audit", source)
        got = {}

        def poll():
            started = time.monotonic()
            got["messages"] = self.sqs.receive_message(QueueUrl=audit, WaitTimeSeconds=10)
            got["seconds"] = time.monotonic() - started
        t = threading.Thread(target=poll)
        t.start()
        time.sleep(1)
        self.sqs.send_message(QueueUrl=source, MessageBody="wake")
        t.join()
        self.assertEqual([m["Body"] for m in got["messages"]["Messages"]], ["wake"])
        self.assertLess(got["seconds"], 5)

    def test_attributes_of_a_group_queue(self):
        source = self.create("src", attributes={"DelaySeconds": "0",
                                                "MessageRetentionPeriod": "3600"})
        audit = self.group_queue("audit", source, VisibilityTimeout="7")
        a = self.sqs.get_queue_attributes(QueueUrl=audit, AttributeNames=["All"])["Attributes"]
        self.assertEqual(a["TxmqSourceQueue"], self.name("src"))
        self.assertTrue(a["TxmqConsumerGroup"].startswith("sqs_"), a)
        self.assertEqual(a["VisibilityTimeout"], "7")
        self.assertEqual(a["MessageRetentionPeriod"], "3600")  # the source's topic setting
        self.assertEqual(a["QueueArn"], arn(self.name("audit")))
        # Own settings change; the topic's are the source's.
        self.sqs.set_queue_attributes(QueueUrl=audit, Attributes={"VisibilityTimeout": "9"})
        a = self.sqs.get_queue_attributes(QueueUrl=audit,
                                          AttributeNames=["VisibilityTimeout"])["Attributes"]
        self.assertEqual(a, {"VisibilityTimeout": "9"})
        self.assert_error("InvalidAttributeName", self.sqs.set_queue_attributes, QueueUrl=audit,
                          Attributes={"DelaySeconds": "5"})
        self.assert_error("InvalidAttributeName", self.sqs.set_queue_attributes, QueueUrl=audit,
                          Attributes={"TxmqSourceQueue": self.name("src")})
        # Created again with equal attributes: the same queue; with another source: refused.
        same = self.sqs.create_queue(QueueName=self.name("audit"), Attributes={
            "TxmqSourceQueue": self.name("src")})["QueueUrl"]
        self.assertEqual(same, audit)
        other = self.create("other")
        self.assert_error("QueueAlreadyExists", self.sqs.create_queue,
                          QueueName=self.name("audit"),
                          Attributes={"TxmqSourceQueue": self.name("other")})
        self.assert_error("QueueAlreadyExists", self.sqs.create_queue,
                          QueueName=self.name("other"),
                          Attributes={"TxmqSourceQueue": self.name("src")})

    def test_named_group_and_earliest_start(self):
        source = self.create("src")
        self.sqs.send_message(QueueUrl=source, MessageBody="before")
        late = self.group_queue("late", source)
        early = self.group_queue("early", source, TxmqConsumerGroup="early_readers",
                                 TxmqGroupStart="earliest")
        self.sqs.send_message(QueueUrl=source, MessageBody="after")
        self.assertEqual([m["Body"] for m in self.drain(late, 1)], ["after"])
        self.assertEqual(sorted(m["Body"] for m in self.drain(early, 2)), ["after", "before"])
        a = self.sqs.get_queue_attributes(QueueUrl=early, AttributeNames=["All"])["Attributes"]
        self.assertEqual(a["TxmqConsumerGroup"], "early_readers")
        # One queue per group.
        self.assert_error("InvalidAttributeValue", self.sqs.create_queue,
                          QueueName=self.name("twin"),
                          Attributes={"TxmqSourceQueue": self.name("src"),
                                      "TxmqConsumerGroup": "early_readers"})

    def test_send_to_a_group_queue_is_refused(self):
        source = self.create("src")
        audit = self.group_queue("audit", source)
        e = self.assert_error("AWS.SimpleQueueService.UnsupportedOperation",
                              self.sqs.send_message, QueueUrl=audit, MessageBody="x")
        self.assertIn(self.name("src"), e.response["Error"]["Message"])
        self.assert_error("AWS.SimpleQueueService.UnsupportedOperation",
                          self.sqs.send_message_batch, QueueUrl=audit,
                          Entries=[{"Id": "a", "MessageBody": "x"}])
        self.assertEqual(self.counts(source), (0, 0, 0))

    def test_purge_of_a_group_queue_leaves_the_others(self):
        source = self.create("src")
        audit = self.group_queue("audit", source)
        for i in range(3):
            self.sqs.send_message(QueueUrl=source, MessageBody=f"m{i}")
        self.sqs.purge_queue(QueueUrl=audit)
        self.assertEqual(self.counts(audit), (0, 0, 0))
        self.assertEqual(self.counts(source), (3, 0, 0))

    def test_delete_order_and_refusals(self):
        source = self.create("src")
        audit = self.group_queue("audit", source)
        self.sqs.send_message(QueueUrl=source, MessageBody="kept")
        # The source goes last: deleting it first would take the group queue's messages.
        e = self.assert_error("InvalidParameterValue", self.sqs.delete_queue, QueueUrl=source)
        self.assertIn(self.name("audit"), e.response["Error"]["Message"])
        self.assertEqual(self.counts(audit), (1, 0, 0))
        # Not a source of another group queue, nor a dead-letter target.
        self.assert_error("InvalidAttributeValue", self.sqs.create_queue,
                          QueueName=self.name("nested"),
                          Attributes={"TxmqSourceQueue": self.name("audit")})
        policy = json.dumps({"deadLetterTargetArn": arn(self.name("audit")),
                             "maxReceiveCount": 2})
        self.assert_error_in(("InvalidParameterValue", "InvalidAttributeValue"),
                             self.sqs.create_queue, QueueName=self.name("dlsrc"),
                             Attributes={"RedrivePolicy": policy})
        self.assert_error("InvalidAttributeValue", self.sqs.create_queue,
                          QueueName=self.name("orphan"),
                          Attributes={"TxmqSourceQueue": self.name("missing")})
        self.assert_error("InvalidAttributeName", self.sqs.create_queue,
                          QueueName=self.name("lonely"),
                          Attributes={"TxmqConsumerGroup": "lonely"})
        self.assert_error("InvalidAttributeName", self.sqs.create_queue,
                          QueueName=self.name("delayed"),
                          Attributes={"TxmqSourceQueue": self.name("src"),
                                      "DelaySeconds": "3"})
        self.sqs.delete_queue(QueueUrl=audit)
        self.assert_error("AWS.SimpleQueueService.NonExistentQueue",
                          self.sqs.get_queue_attributes, QueueUrl=audit)
        self.assertEqual(self.counts(source), (1, 0, 0))
        self.sqs.delete_queue(QueueUrl=source)

    def test_fifo_group_queue_keeps_order_and_blocks_groups(self):
        source = self.create("src", fifo=True,
                             attributes={"ContentBasedDeduplication": "true"})
        self.assert_error("InvalidAttributeValue", self.sqs.create_queue,
                          QueueName=self.name("plain"),
                          Attributes={"TxmqSourceQueue": self.name("src", fifo=True)})
        audit = self.group_queue("audit", source, fifo=True)
        for i in range(4):
            self.sqs.send_message(QueueUrl=source, MessageBody=f"a{i}", MessageGroupId="a")
        self.sqs.send_message(QueueUrl=source, MessageBody="a0", MessageGroupId="a")  # a dup
        [first] = self.receive(audit, VisibilityTimeout=30)
        self.assertEqual(first["Body"], "a0")
        self.assertEqual(self.receive(audit, WaitTimeSeconds=0), [])  # group a is in flight
        self.sqs.delete_message(QueueUrl=audit, ReceiptHandle=first["ReceiptHandle"])
        rest = [m["Body"] for m in self.drain(audit, 3)]
        self.assertEqual(rest, ["a1", "a2", "a3"])
        self.assertEqual([m["Body"] for m in self.drain(source, 4)], ["a0", "a1", "a2", "a3"])


class ErrorsTest(SqsTestCase):
    def test_missing_queue(self):
        missing = f"{ENDPOINT}/{ACCOUNT}/{self.name('nope')}"
        with self.assertRaises(self.sqs.exceptions.QueueDoesNotExist) as cm:
            self.sqs.send_message(QueueUrl=missing, MessageBody="x")
        self.assertEqual(cm.exception.response["ResponseMetadata"]["HTTPStatusCode"], 400)
        with self.assertRaises(self.sqs.exceptions.QueueDoesNotExist):
            self.sqs.receive_message(QueueUrl=missing)
        with self.assertRaises(self.sqs.exceptions.QueueDoesNotExist):
            self.sqs.get_queue_url(QueueName=self.name("nope"))
        with self.assertRaises(self.sqs.exceptions.QueueDoesNotExist):
            self.sqs.delete_queue(QueueUrl=missing)

    def test_batch_errors(self):
        url = self.create("berr")
        with self.assertRaises(self.sqs.exceptions.InvalidBatchEntryId):
            self.sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": "bad id!", "MessageBody": "x"}])
        with self.assertRaises(self.sqs.exceptions.InvalidBatchEntryId):
            self.sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": "x" * 81, "ReceiptHandle": "r"}])
        with self.assertRaises(self.sqs.exceptions.BatchEntryIdsNotDistinct):
            self.sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}])
        with self.assertRaises(self.sqs.exceptions.TooManyEntriesInBatchRequest):
            self.sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": f"e{i}", "MessageBody": "x"} for i in range(11)])
        with self.assertRaises(self.sqs.exceptions.TooManyEntriesInBatchRequest):
            self.sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": f"e{i}", "ReceiptHandle": "r"} for i in range(11)])
        with self.assertRaises(self.raw.exceptions.EmptyBatchRequest):
            self.raw.send_message_batch(QueueUrl=url, Entries=[])
        with self.assertRaises(self.raw.exceptions.EmptyBatchRequest):
            self.raw.delete_message_batch(QueueUrl=url, Entries=[])
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_wrong_signature(self):
        wrong = make_client(secret=SECRET[::-1])
        e = self.assert_error("SignatureDoesNotMatch", wrong.list_queues)
        self.assertEqual(e.response["ResponseMetadata"]["HTTPStatusCode"], 403)
        self.assertNotIn(SECRET, str(e.response))
        # The other key of the credentials file, with this key's secret: also a wrong signature.
        self.assert_error("SignatureDoesNotMatch", make_client(key=OTHER_KEY).list_queues)

    def test_unknown_key(self):
        e = self.assert_error("InvalidClientTokenId", make_client(key=UNKNOWN_KEY).list_queues)
        self.assertEqual(e.response["ResponseMetadata"]["HTTPStatusCode"], 403)

    def test_clock_skew_over_15_minutes(self):
        # botocore's signers (its own, or awscrt's when installed) stamp X-Amz-Date from
        # datetime.datetime.utcnow(): sign as if the clock were off by `minutes`.
        signer = sys.modules[botocore.auth.AUTH_TYPE_MAPS["v4"].__module__]

        def skewed(minutes):
            class Skewed(datetime.datetime):
                @classmethod
                def utcnow(cls):
                    return datetime.datetime.utcnow() + datetime.timedelta(minutes=minutes)
            fake = types.SimpleNamespace(**vars(datetime))
            fake.datetime = Skewed
            return mock.patch.object(signer, "datetime", fake)

        for minutes in (-20, 20):
            with skewed(minutes):
                e = self.assert_error("RequestExpired", make_client().list_queues)
            self.assertEqual(e.response["ResponseMetadata"]["HTTPStatusCode"], 400)
        with skewed(-10):  # within SQS's 15 minutes
            make_client().list_queues()

    def test_presigned_url(self):
        # SigV4 in the query string: a GET with every parameter and the signature in the URL.
        name = self.name("pre")
        url = self.create("pre")
        presigned = self.sqs.generate_presigned_url(
            "get_queue_url", Params={"QueueName": name}, ExpiresIn=60)
        self.assertIn("X-Amz-Signature=", presigned)
        # botocore signs the Query protocol's POST: the URL is sent as a POST with no body.
        with urllib.request.urlopen(urllib.request.Request(presigned, data=b"", method="POST"),
                                    timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertIn(f"<QueueUrl>{url}</QueueUrl>", r.read().decode())
        # The same signature over another queue's name does not match.
        tampered = presigned.replace(urllib.parse.quote(name, safe=""), name + "x")
        self.assertNotEqual(tampered, presigned)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(urllib.request.Request(tampered, data=b"", method="POST"),
                                   timeout=10)
        self.assertEqual(cm.exception.code, 403)
        self.assertIn(b"SignatureDoesNotMatch", cm.exception.read())

    def test_unsigned_request_refused(self):
        request = urllib.request.Request(ENDPOINT + "/", data=b"Action=ListQueues&Version=2012-11-05",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(request, timeout=10)
        self.assertIn(cm.exception.code, (400, 403))
        self.assertIn(b"<ErrorResponse", cm.exception.read())

    def test_health(self):
        with urllib.request.urlopen(ENDPOINT + "/healthz", timeout=10) as r:
            self.assertEqual(r.status, 200)



class AsSqsTest(SqsTestCase):
    """Where SQS is exact: its answers as recorded against AWS (codes, statuses, texts)."""

    MIB = 1024 * 1024

    def assert_refused(self, code, message, call, *args, **kwargs):
        e = self.assert_error(code, call, *args, **kwargs)
        self.assertEqual(e.response["Error"]["Message"], message)
        self.assertEqual(e.response["ResponseMetadata"]["HTTPStatusCode"], 400)
        return e

    def test_message_attribute_name_prefixes(self):
        url = self.create("prefix")
        attrs = {name: {"DataType": "String", "StringValue": name}
                 for name in ("Custom.a", "Custom.b", "CustomX", "Help.Me", "Hello", "General")}
        self.sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attrs)

        def names(wanted):
            [m] = self.receive(url, MessageAttributeNames=wanted, VisibilityTimeout=0,
                               WaitTimeSeconds=3)
            got = m.get("MessageAttributes", {})
            if got:
                self.assertEqual(m["MD5OfMessageAttributes"], md5_of_attributes(got))
            return sorted(got)

        # ".*" stands for any rest of the name, dot or not: "Hel.*" asks for Hello and Help.Me.
        self.assertEqual(names(["Custom.*"]), ["Custom.a", "Custom.b", "CustomX"])
        self.assertEqual(names(["Hel.*"]), ["Hello", "Help.Me"])
        self.assertEqual(names(["Hel.*", "General"]), ["General", "Hello", "Help.Me"])
        self.assertEqual(names(["*"]), sorted(attrs))
        self.assertEqual(names([".*"]), sorted(attrs))
        self.assertEqual(names(["Foo", "Help"]), [])
        self.assertEqual(names(["nothing.*"]), [])

    def test_fifo_takes_a_delay_of_zero_only(self):
        url = self.create("fdelay", fifo=True, attributes={"ContentBasedDeduplication": "true"})
        self.sqs.send_message(QueueUrl=url, MessageBody="zero", MessageGroupId="g", DelaySeconds=0)
        result = self.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "zero", "MessageBody": "batch zero", "MessageGroupId": "g", "DelaySeconds": 0},
            {"Id": "two", "MessageBody": "batch two", "MessageGroupId": "g", "DelaySeconds": 2}])
        self.assertEqual([s["Id"] for s in result["Successful"]], ["zero"])
        [failed] = result["Failed"]
        self.assertEqual((failed["Id"], failed["Code"], failed["SenderFault"]),
                         ("two", "InvalidParameterValue", True))
        self.assertEqual(failed["Message"], "Value 2 for parameter DelaySeconds is invalid. Reason: "
                         "The request include parameter that is not valid for this queue type.")
        self.assert_refused("InvalidParameterValue",
                            "Value 2 for parameter DelaySeconds is invalid. Reason: The request "
                            "include parameter that is not valid for this queue type.",
                            self.sqs.send_message, QueueUrl=url, MessageBody="two",
                            MessageGroupId="g", DelaySeconds=2)
        self.assertEqual([m["Body"] for m in self.drain(url, 2, seconds=5)],
                         ["zero", "batch zero"])
        # A message's 0 leaves the queue's own delay in force.
        delayed = self.create("fqdelay", fifo=True, attributes={
            "ContentBasedDeduplication": "true", "DelaySeconds": "2"})
        self.sqs.send_message(QueueUrl=delayed, MessageBody="later", MessageGroupId="g",
                              DelaySeconds=0)
        self.assertEqual(self.counts(delayed), (0, 0, 1))
        self.assertEqual(self.receive(delayed, WaitTimeSeconds=0), [])

    def test_standard_queue_has_no_fifo_attributes(self):
        name = self.name("std")
        for attributes, message in (
                ({"FifoQueue": "false"}, "Unknown Attribute FifoQueue."),
                ({"ContentBasedDeduplication": "false"},
                 "Unknown Attribute ContentBasedDeduplication."),
                ({"DeduplicationScope": "queue"},
                 "You can specify the DeduplicationScope only when FifoQueue is set to true."),
                ({"FifoThroughputLimit": "perQueue"},
                 "You can specify the FifoThroughputLimit only when FifoQueue is set to true.")):
            self.assert_refused("InvalidAttributeName", message, self.sqs.create_queue,
                                QueueName=name, Attributes=attributes)
        self.assert_error("AWS.SimpleQueueService.NonExistentQueue", self.sqs.get_queue_url,
                          QueueName=name)
        url = self.create("std")
        for value in ("true", "false"):
            self.assert_refused("InvalidAttributeName", "Unknown Attribute FifoQueue.",
                                self.sqs.set_queue_attributes, QueueUrl=url,
                                Attributes={"FifoQueue": value})
        fifo = self.create("fifo", fifo=True)
        self.sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})
        self.assert_refused("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. "
                            "Reason: Modifying queue type is not supported.",
                            self.sqs.set_queue_attributes, QueueUrl=fifo,
                            Attributes={"FifoQueue": "false"})

    def test_visibility_change_after_the_lease_ran_out(self):
        url = self.create("expired", attributes={"VisibilityTimeout": "1"})
        self.sqs.send_message(QueueUrl=url, MessageBody="x")
        [m] = self.receive(url)
        time.sleep(2)
        # Nobody received it since: the handle still changes its visibility, as in SQS.
        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                           VisibilityTimeout=30)
        self.assertEqual(self.counts(url), (0, 1, 0))

    def test_one_kind_of_server_side_encryption(self):
        url = self.create("sse")
        self.assert_refused("InvalidAttributeName", "You can use one type of server-side "
                            "encryption (SSE) at one time. You can either enable KMS SSE or SQS "
                            "SSE.", self.sqs.set_queue_attributes, QueueUrl=url, Attributes={
                                "KmsMasterKeyId": "testKeyId", "SqsManagedSseEnabled": "true"})
        self.sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "testKeyId"})
        a = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        self.assertEqual((a["KmsMasterKeyId"], a["SqsManagedSseEnabled"]), ("testKeyId", "false"))

    def test_receipt_handle_errors(self):
        url = self.create("handles")
        for call, extra in ((self.sqs.delete_message, {}),
                            (self.sqs.change_message_visibility, {"VisibilityTimeout": 60})):
            self.assert_refused("ReceiptHandleIsInvalid",
                                'The input receipt handle "garbage" is not a valid receipt handle.',
                                call, QueueUrl=url, ReceiptHandle="garbage", **extra)
        self.sqs.send_message(QueueUrl=url, MessageBody="x")
        [m] = self.receive(url, VisibilityTimeout=60)
        handle = m["ReceiptHandle"]
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
        self.assert_refused("InvalidParameterValue",
                            f"Value {handle} for parameter ReceiptHandle is invalid. Reason: "
                            "Message does not exist or is not available for visibility timeout "
                            "change.", self.sqs.change_message_visibility, QueueUrl=url,
                            ReceiptHandle=handle, VisibilityTimeout=42)

    def test_texts(self):
        missing = f"{ENDPOINT}/{ACCOUNT}/{self.name('nope')}"
        self.assert_refused("AWS.SimpleQueueService.NonExistentQueue",
                            "The specified queue does not exist for this wsdl version.",
                            self.sqs.get_queue_url, QueueName=self.name("nope"))
        self.assert_refused("AWS.SimpleQueueService.NonExistentQueue",
                            "The specified queue does not exist for this wsdl version.",
                            self.sqs.send_message, QueueUrl=missing, MessageBody="x")
        url = self.create("texts")
        for call, entry in ((self.raw.send_message_batch, "SendMessageBatchRequestEntry"),
                            (self.raw.delete_message_batch, "DeleteMessageBatchRequestEntry"),
                            (self.raw.change_message_visibility_batch,
                             "ChangeMessageVisibilityBatchRequestEntry")):
            self.assert_refused("AWS.SimpleQueueService.EmptyBatchRequest",
                                f"There should be at least one {entry} in the request.",
                                call, QueueUrl=url, Entries=[])
        self.assert_refused("AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                            "Maximum number of entries per request are 10. You have sent 11.",
                            self.sqs.send_message_batch, QueueUrl=url, Entries=[
                                {"Id": f"e{i}", "MessageBody": "x"} for i in range(11)])
        self.assert_refused("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id same repeated.",
                            self.sqs.delete_message_batch, QueueUrl=url, Entries=[
                                {"Id": "same", "ReceiptHandle": "r"},
                                {"Id": "same", "ReceiptHandle": "r"}])
        self.assert_refused("AWS.SimpleQueueService.InvalidBatchEntryId",
                            "A batch entry id can only contain alphanumeric characters, hyphens "
                            "and underscores. It can be at most 80 letters long.",
                            self.sqs.send_message_batch, QueueUrl=url,
                            Entries=[{"Id": "a.b", "MessageBody": "x"}])
        self.assert_refused("InvalidParameterValue", "Value 21 for parameter WaitTimeSeconds is "
                            "invalid. Reason: Must be >= 0 and <= 20, if provided.",
                            self.raw.receive_message, QueueUrl=url, WaitTimeSeconds=21)
        self.assert_refused("InvalidParameterValue", "Value 11 for parameter MaxNumberOfMessages "
                            "is invalid. Reason: Must be between 1 and 10, if provided.",
                            self.raw.receive_message, QueueUrl=url, MaxNumberOfMessages=11)
        self.assert_refused("InvalidParameterValue", "Message (user) attribute 'ErrorDetails' "
                            "must contain a non-empty value of type 'String'.",
                            self.raw.send_message, QueueUrl=url, MessageBody="x",
                            MessageAttributes={"ErrorDetails": {"DataType": "String",
                                                                "StringValue": ""}})
        self.assert_refused("MissingParameter", "The request must contain the parameter "
                            "MessageBody.", self.raw.send_message, QueueUrl=url, MessageBody="")
        self.assert_refused("InvalidParameterValue", "Value 0 for parameter MaxResults is "
                            "invalid. Reason: Must be between 1 and 1000, if provided.",
                            self.raw.list_queues, MaxResults=0)
        for group in ("", "a" * 129, "group 123"):
            self.assert_refused("InvalidParameterValue", f"Value {group} for parameter "
                                "MessageGroupId is invalid. Reason: MessageGroupId can only "
                                "include alphanumeric and punctuation characters. 1 to 128 in "
                                "length.", self.raw.send_message, QueueUrl=url,
                                MessageBody="x", MessageGroupId=group)
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_sqs_texts_for_attributes_permissions_and_tags(self):
        url = self.create("texts")
        self.assert_refused("InvalidParameterValue", "The message attribute 't' has an invalid "
                            "message attribute type, the set of supported type prefixes is "
                            "Binary, Number, and String.", self.raw.send_message, QueueUrl=url,
                            MessageBody="x",
                            MessageAttributes={"t": {"DataType": "Integer", "StringValue": "1"}})
        for name in ("bad name", ".dot", "a..b"):
            self.assert_refused("InvalidParameterValue", f"The message attribute name '{name}' "
                                "is invalid. Attribute name can contain A-Z, a-z, 0-9, "
                                "underscore (_), hyphen (-), and period (.) characters.",
                                self.raw.send_message, QueueUrl=url, MessageBody="x",
                                MessageAttributes={name: {"DataType": "String",
                                                          "StringValue": "v"}})
        self.assert_refused("InvalidParameterValue", "Value SQS:CreateQueue for parameter "
                            "ActionName is invalid. Reason: Only the queue owner is allowed to "
                            "invoke this action.", self.raw.add_permission, QueueUrl=url,
                            Label="l", AWSAccountIds=["111122223333"], Actions=["CreateQueue"])
        self.assert_refused("InvalidParameterValue", "Value SQS:Fly for parameter ActionName is "
                            "invalid. Reason: Please refer to the appropriate WSDL for a list of "
                            "valid actions.", self.raw.add_permission, QueueUrl=url, Label="l",
                            AWSAccountIds=["111122223333"], Actions=["Fly"])
        e = self.assert_error("InvalidParameterValue", self.raw.add_permission, QueueUrl=url,
                              Label="l", AWSAccountIds=[], Actions=["SendMessage"])
        self.assertIn("PrincipalId", e.response["Error"]["Message"])
        self.sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(50)})
        self.assert_refused("InvalidParameterValue", f"Too many tags added for queue "
                            f"{self.name('texts')}.", self.raw.tag_queue, QueueUrl=url,
                            Tags={"one-more": "v"})
        for keys in ([], [""], ["k" * 129], ["k1", ""]):
            self.assert_refused("InvalidParameterValue", "Tag keys must be between 1 and 128 "
                                "characters in length.", self.raw.untag_queue, QueueUrl=url,
                                TagKeys=keys)
        self.assertEqual(len(self.sqs.list_queue_tags(QueueUrl=url)["Tags"]), 50)
        self.sqs.untag_queue(QueueUrl=url, TagKeys=["k" * 128, "k1"])
        self.assertEqual(len(self.sqs.list_queue_tags(QueueUrl=url)["Tags"]), 49)

    def test_fifo_batch_without_group_or_deduplication_id_is_refused_whole(self):
        url = self.create("fbatch", fifo=True)
        good = {"Id": "good", "MessageBody": "x", "MessageGroupId": "g",
                "MessageDeduplicationId": "d1"}
        self.assert_refused("MissingParameter",
                            "The request must contain the parameter MessageGroupId.",
                            self.sqs.send_message_batch, QueueUrl=url, Entries=[
                                good, {"Id": "nogroup", "MessageBody": "y",
                                       "MessageDeduplicationId": "d2"}])
        self.assert_refused("InvalidParameterValue",
                            "The queue should either have ContentBasedDeduplication enabled or "
                            "MessageDeduplicationId provided explicitly",
                            self.sqs.send_message_batch, QueueUrl=url, Entries=[
                                good, {"Id": "nodedup", "MessageBody": "y",
                                       "MessageGroupId": "g"}])
        self.assertEqual(self.counts(url), (0, 0, 0))

    def test_a_batch_entry_over_the_queues_size(self):
        url = self.create("entrysize", attributes={"MaximumMessageSize": "1024"})
        result = self.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "fits", "MessageBody": "a" * 1024}, {"Id": "over", "MessageBody": "a" * 1025}])
        self.assertEqual([s["Id"] for s in result["Successful"]], ["fits"])
        self.assertEqual([(f["Id"], f["Code"], f["Message"]) for f in result["Failed"]],
                         [("over", "InvalidParameterValue", "One or more parameters cannot be "
                           "validated. Reason: Message must be shorter than 1024 bytes.")])

    def test_one_mebibyte(self):
        url = self.create("mib")
        limit = self.MIB
        attributes = self.sqs.get_queue_attributes(QueueUrl=url,
                                                   AttributeNames=["MaximumMessageSize"])
        self.assertEqual(attributes["Attributes"]["MaximumMessageSize"], str(limit))
        # Exactly 1 MiB, of characters that the Query protocol percent-encodes to 3 bytes each.
        for body in ("x" * limit, "&" * limit, "\u20ac" * (limit // 3) + "a"):
            self.assertEqual(len(body.encode("utf-8")), limit)
            sent = self.sqs.send_message(QueueUrl=url, MessageBody=body)
            self.assertEqual(sent["MD5OfMessageBody"], md5_hex(body))
            [m] = self.receive(url, WaitTimeSeconds=5)
            self.assertEqual(m["Body"], body)
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        self.assert_refused("InvalidParameterValue", "One or more parameters are invalid. Reason: "
                            "Message must be shorter than 1048576 bytes.", self.sqs.send_message,
                            QueueUrl=url, MessageBody="x" * (limit + 1))
        # Attributes count by name, type and value; a binary value by its bytes, not its base64.
        binary = {"b": {"DataType": "Binary", "BinaryValue": b"\xfb\xef\xbe" * 1000}}
        body = "y" * (limit - len("b") - len("Binary") - 3000)
        self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=binary)
        self.assert_error("InvalidParameterValue", self.sqs.send_message, QueueUrl=url,
                          MessageBody=body + "y", MessageAttributes=binary)
        result = self.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "full", "MessageBody": body, "MessageAttributes": binary}])
        self.assertEqual([s["Id"] for s in result["Successful"]], ["full"])
        # The Query protocol's worst case: base64 of only '+' and '/', each percent-encoded.
        worst = {"w": {"DataType": "Binary",
                       "BinaryValue": b"\xfb\xef\xbe" * ((limit - 8) // 3)}}
        self.sqs.send_message(QueueUrl=url, MessageBody="x" * ((limit - 8) % 3 + 1),
                              MessageAttributes=worst)
        # A trace header (a system attribute) does not count.
        trace = {"AWSTraceHeader": {"DataType": "String",
                                    "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}
        self.sqs.send_message(QueueUrl=url, MessageBody="z" * limit,
                              MessageSystemAttributes=trace)
        result = self.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": "traced", "MessageBody": "z" * limit, "MessageSystemAttributes": trace}])
        self.assertEqual([s["Id"] for s in result["Successful"]], ["traced"])
        # A batch: 1 MiB in all is the limit.
        k = {"k": {"DataType": "String", "StringValue": "x"}}
        e = self.assert_refused(
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes.",
            self.sqs.send_message_batch, QueueUrl=url, Entries=[
                {"Id": "1", "MessageBody": "a" * (limit - 8), "MessageAttributes": k},
                {"Id": "2", "MessageBody": "a"}])
        self.assertIsNotNone(e)
        self.assertEqual(self.counts(url), (5, 0, 0))


@unittest.skipUnless(os.environ.get("TXMQ_SHARD_HOMES") and os.environ.get("TXMQ_SQS_TXMQ"),
                     "needs CTest's shard servers (TXMQ_SHARD_HOMES) and the txmq binary")
class ShardedTopicTest(SqsTestCase):
    """A queue whose topic is sharded over three servers (docs/shards.md)."""

    @staticmethod
    def txmq(*args, home=None):
        env = dict(os.environ)
        if home:
            env["TXMQ_HOME"] = home
        done = subprocess.run([os.environ["TXMQ_SQS_TXMQ"], *args], env=env,
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"txmq {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    @classmethod
    def dsn_of(cls, home=None):
        # The serve's own database: TXMQ_DSN when run.sh runs it on TXMQ_TEST_DSN (as
        # shards_test.cc names s1 on such a server), else the fixture's local server.
        if home is None and os.environ.get("TXMQ_DSN"):
            return os.environ["TXMQ_DSN"]
        for line in cls.txmq("local", "status", home=home).splitlines():
            if line.startswith("DSN: "):
                return line[5:]
        raise AssertionError(f"no DSN from txmq local status in {home}")

    def record_servers(self):
        homes = os.environ["TXMQ_SHARD_HOMES"].split(",")
        # The same names and DSNs as tests/integration/shards_test.cc: recording is idempotent.
        self.txmq("server", "add", "s1", self.dsn_of())
        self.txmq("server", "add", "s2", self.dsn_of(homes[0]))
        self.txmq("server", "add", "s3", self.dsn_of(homes[1]))
        return homes

    def test_send_receive_delete_and_delete_queue_across_servers(self):
        homes = self.record_servers()
        url = self.create("spread", attributes={"TxmqServers": "s1,s2,s3", "TxmqPartitions": "6"})
        a = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        self.assertEqual(a["TxmqServers"], "s1,s2,s3")
        self.assertEqual(a["TxmqPartitions"], "6")
        # The topic is spread: txmq topic list shows its servers, and each server has it. Its
        # name as server/sqs/queues.cc derives it (other tests shard topics over s1,s2,s3 too).
        name = self.name("spread")
        readable = "".join(c.lower() if c.isascii() and c.isalnum() else "_" for c in name[:30])
        topic = f"sqs_{readable}_{hashlib.sha256(name.encode()).hexdigest()[:12]}"
        spread = [line for line in self.txmq("topic", "list").splitlines()
                  if line.split()[:1] == [topic]]
        self.assertEqual(len(spread), 1, spread)
        self.assertIn("s1,s2,s3", spread[0])
        for home in homes:
            self.assertIn(topic, self.txmq("topic", "list", "--dsn", self.dsn_of(home)))
        ordered = sorted(f"m{i:02d}" for i in range(30))
        for i in range(0, 30, 10):
            r = self.sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(k), "MessageBody": b} for k, b in enumerate(ordered[i:i + 10])])
            self.assertEqual(len(r.get("Successful", [])), 10, r)
        self.assertEqual(self.counts(url)[0], 30)  # the servers' counts added up
        got = self.drain(url, 30)
        self.assertEqual(sorted(m["Body"] for m in got), ordered)
        self.assertEqual(self.counts(url), (0, 0, 0))
        # The attributes cannot change; the queue goes with its topic on every server.
        self.assert_error("InvalidAttributeName", self.sqs.set_queue_attributes, QueueUrl=url,
                          Attributes={"TxmqServers": "s1,s2"})
        self.sqs.delete_queue(QueueUrl=url)
        self.assertNotIn(topic, self.txmq("topic", "list"))
        for home in homes:
            self.assertNotIn(topic, self.txmq("topic", "list", "--dsn", self.dsn_of(home)))

    def test_refused_spread_settings(self):
        self.record_servers()
        for attributes, reason in (
                ({"TxmqServers": "s1,nosuch"}, "no server 'nosuch'"),
                ({"TxmqServers": "s1,s1"}, "twice"),
                ({"TxmqServers": "S1"}, "server names"),
                ({"TxmqServers": "s1,s2", "TxmqPartitions": "1"}, "at least as many"),
                ({"TxmqPartitions": "4"}, "goes with TxmqServers")):
            e = self.assert_error("InvalidAttributeValue", self.create, "refused",
                                  attributes=attributes)
            self.assertIn(reason, e.response["Error"]["Message"])
            self.assert_error("AWS.SimpleQueueService.NonExistentQueue", self.sqs.get_queue_url,
                              QueueName=self.name("refused"))



class FairQueueTest(SqsTestCase):
    """Standard queues are fair: MessageGroupId names a tenant (docs/sqs.md, "Fair queues")."""

    def test_a_quiet_tenant_is_not_held_behind_a_noisy_backlog(self):
        url = self.create("fair")
        for b in range(30):
            self.sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": f"n{i}", "MessageBody": f"noisy {b * 10 + i}", "MessageGroupId": "noisy"}
                for i in range(10)])
        self.sqs.send_message(QueueUrl=url, MessageBody="quiet", MessageGroupId="quiet")
        self.sqs.send_message(QueueUrl=url, MessageBody="no group")
        got = self.receive(url, MaxNumberOfMessages=10, AttributeNames=["All"])
        groups = {m["Body"]: m.get("Attributes", {}).get("MessageGroupId") for m in got}
        self.assertEqual(groups.get("quiet"), "quiet", "the quiet tenant waited behind the backlog")
        self.assertIn("no group", groups)
        self.assertIsNone(groups["no group"])
        self.assertEqual(groups.get("noisy 0"), "noisy")
        # Nothing is lost or held: the rest drains in the noisy tenant's order.
        rest = self.drain(url, 300 - sum(1 for b in groups if b.startswith("noisy")))
        bodies = [m["Body"] for m in rest]
        self.assertEqual(sorted(bodies, key=lambda b: int(b.split()[1])), bodies)
        self.assertEqual(len(bodies) + len(got), 302)


if __name__ == "__main__":
    unittest.main()
