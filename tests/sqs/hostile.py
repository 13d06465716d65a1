"""txmq serve against hostile requests: form and JSON bodies that nest without end, requests a
browser on another site (or a rebound DNS name) would send to a server without --credentials,
an unsigned X-Amz-Target riding on a signed request, '+' in a signed query string, inputs that
used to grow memory without bound, a frozen database, a malformed ReceiveMessage, mistyped
attributes, forged receipts, /readyz naming its DSN, and newlines forged into the log.

    /usr/bin/python3 tests/sqs/hostile.py TXMQ_BINARY

The hostile requests are written as raw HTTP (botocore signs or presigns them; the bytes sent are
the test's); boto3 only sets up and checks. Starts a private MariaDB of its own (txmq local start
in a scratch TXMQ_HOME) and its own txmq serve processes, and stops everything it started, by pid.
"""
import collections
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config
import botocore.credentials
import botocore.exceptions

TXMQ = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build/txmq")
SCRATCH = tempfile.mkdtemp(prefix="txmq-hostile-")
HOME = os.path.join(SCRATCH, "home")
KEY, SECRET = "AKIDTEST", "SECRETTEST"
REGION = "us-east-1"
MIB = 1 << 20


def env(**extra):
    e = dict(os.environ, TXMQ_HOME=HOME)
    e.pop("TXMQ_DSN", None)
    e.update(extra)
    return e


def txmq(*args):
    return subprocess.run([TXMQ, *args], env=env(), capture_output=True, text=True, timeout=120)


def local_status():
    return json.loads(txmq("local", "status", "--json").stdout)


def amz_now():
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def encode(value):
    """RFC 3986 percent-encoding, as SigV4 wants it."""
    return urllib.parse.quote(value, safe="-_.~")


def form(params):
    return "&".join(f"{encode(k)}={encode(v)}" for k, v in params.items())


class Serve:
    """txmq serve --listen 127.0.0.1:0 ARGS; its log (stderr) goes to a file."""

    count = 0

    def __init__(self, *args, **extra_env):
        Serve.count += 1
        self.log_path = os.path.join(SCRATCH, f"serve-{Serve.count}.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([TXMQ, "serve", "--listen", "127.0.0.1:0", *args],
                                     env=env(**extra_env), stdout=subprocess.PIPE,
                                     stderr=self.log_file, text=True)
        self.line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", self.line)
        if not m:
            self.stop()
            raise AssertionError(f"no listening line: {self.line!r} {self.log()}")
        self.url, self.port = m.group(1), int(m.group(2))

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def client(self, key=KEY, secret=SECRET):
        return boto3.client("sqs", endpoint_url=self.url, region_name=REGION,
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            config=botocore.config.Config(retries={"max_attempts": 0},
                                                          read_timeout=60, connect_timeout=30))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log_file.close()


Answer = collections.namedtuple("Answer", "status headers body seconds")


def code_of(a):
    """The error code of an answer, from a JSON __type or a Query <Code>."""
    text = a.body.decode("utf-8", "replace")
    try:
        return json.loads(text).get("__type", "").rsplit("#", 1)[-1]
    except ValueError:
        m = re.search(r"<Code>([^<]*)</Code>", text)
        return m.group(1) if m else ""


def raw(port, method, target, headers=None, body=b"", timeout=60):
    """Sends exactly this request (Host 127.0.0.1:PORT unless given) on a new connection."""
    if isinstance(body, str):
        body = body.encode()
    headers = list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
    names = {k.lower() for k, _ in headers}
    if "host" not in names:
        headers.insert(0, ("Host", f"127.0.0.1:{port}"))
    if body or method == "POST":
        headers.append(("Content-Length", str(len(body))))
    headers.append(("Connection", "close"))
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode("latin-1") + b"\r\n" + body)
        r = http.client.HTTPResponse(s)
        r.begin()
        out = r.read()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, out,
                      time.monotonic() - start)


def signed_headers(method, url, headers=None, body=b"", key=KEY, secret=SECRET):
    """botocore's SigV4 headers for the request (the Host signed is the URL's)."""
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body,
                                             headers=dict(headers or {}))
    botocore.auth.SigV4Auth(botocore.credentials.Credentials(key, secret), "sqs",
                            REGION).add_auth(request)
    return dict(request.headers.items())


def presigned_target(method, url, params, key=KEY, secret=SECRET, expires=300):
    """The path and query of URL presigned by botocore (SignedHeaders=host) with PARAMS."""
    request = botocore.awsrequest.AWSRequest(method=method, url=url, params=dict(params))
    botocore.auth.SigV4QueryAuth(botocore.credentials.Credentials(key, secret), "sqs", REGION,
                                 expires=expires).add_auth(request)
    parts = urllib.parse.urlsplit(request.url)
    return parts.path + "?" + parts.query


def json_call(serve, action, payload, host=None, key=KEY, secret=SECRET, timeout=60):
    """A JSON-protocol call signed by botocore; Host is 127.0.0.1:PORT unless given."""
    body = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    if isinstance(body, str):
        body = body.encode()
    host = host or f"127.0.0.1:{serve.port}"
    headers = signed_headers("POST", f"http://{host}/",
                             {"X-Amz-Target": f"AmazonSQS.{action}",
                              "Content-Type": "application/x-amz-json-1.0"}, body, key, secret)
    headers["Host"] = host
    return raw(serve.port, "POST", "/", headers, body, timeout)


def query_call(serve, params, host=None, key=KEY, secret=SECRET, body=None, timeout=60):
    """A Query-protocol form POST signed by botocore."""
    body = (form(params) if body is None else body).encode()
    host = host or f"127.0.0.1:{serve.port}"
    headers = signed_headers("POST", f"http://{host}/",
                             {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
                             body, key, secret)
    headers["Host"] = host
    return raw(serve.port, "POST", "/", headers, body, timeout)


def counts(sqs, url):
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return tuple(int(a[n]) for n in ("ApproximateNumberOfMessages",
                                     "ApproximateNumberOfMessagesNotVisible",
                                     "ApproximateNumberOfMessagesDelayed"))


def queue_exists(sqs, name):
    return any(u.endswith("/" + name)
               for u in sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", []))


def setUpModule():
    out = txmq("local", "start")
    assert out.returncode == 0, out.stderr


def tearDownModule():
    txmq("local", "stop")
    shutil.rmtree(SCRATCH, ignore_errors=True)


class ServeCase(unittest.TestCase):
    """A txmq serve of the class's own (ARGS), started once for its tests."""

    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.serve = Serve(*cls.ARGS)
        cls.sqs = cls.serve.client()

    @classmethod
    def tearDownClass(cls):
        cls.serve.stop()

    def assertAlive(self, serve):
        self.assertTrue(serve.alive(), f"serve died (exit {serve.proc.returncode}):\n"
                                       f"{serve.log()[-2000:]}")


class NestedBodies(unittest.TestCase):
    """Finding 1: form names and JSON bodies that nest (or spread) without end."""

    def setUp(self):
        self.serve = Serve()

    def tearDown(self):
        self.serve.stop()

    def no_answer(self, e):
        try:
            self.serve.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.fail(f"no answer ({e!r}); serve's exit status {self.serve.proc.poll()}")

    def survives(self, body):
        try:
            a = query_call(self.serve, None, body=body, timeout=120)
        except (ConnectionError, http.client.HTTPException, socket.timeout) as e:
            self.no_answer(e)
        self.assertLess(a.status, 500, a.body[:300])
        self.assertTrue(self.serve.alive(), f"serve died (exit {self.serve.proc.returncode})")
        ok = self.serve.client().list_queues()
        self.assertEqual(ok["ResponseMetadata"]["HTTPStatusCode"], 200)
        self.assertTrue(self.serve.alive())

    def test_100000_form_params_and_a_name_of_300000_dots_leave_serve_answering(self):
        self.survives("Action=ListQueues&" + "&".join(f"x{i}=1" for i in range(100000)))
        self.survives("Action=ListQueues&" + "a." * 300000 + "=1")

    def test_a_json_body_of_a_million_brackets_is_a_quick_serialization_exception(self):
        self.serve.client().list_queues()  # warm
        before = self.serve.rss_mib()
        # Three times: one such body grew serve's RSS by 60-75 MiB, and kept it.
        for _ in range(3):
            try:
                a = json_call(self.serve, "ListQueues", b"[" * 1000000, timeout=120)
            except (ConnectionError, http.client.HTTPException, socket.timeout) as e:
                self.no_answer(e)
            self.assertEqual(a.status, 400, a.body[:300])
            self.assertTrue(json.loads(a.body)["__type"].endswith("SerializationException"),
                            a.body)
            self.assertLess(a.seconds, 2.0)
            self.assertTrue(self.serve.alive())
        grew = self.serve.rss_mib() - before
        self.assertLess(grew, 100, f"RSS grew by {grew:.0f} MiB after three such bodies")


class GuardsReached(unittest.TestCase):
    """The hostile cases reach the guard they are named for, not one before it: a JSON body
    just under the body limit (4 MiB - 1 of '[') reaches the depth guard (a body of 8 MiB would
    be refused as too large first), and a pre-authentication body that carries a well-formed
    Authorization header of a known key (one without it is refused on its header alone)."""

    def setUp(self):
        path = os.path.join(SCRATCH, "credentials-guards")
        with open(path, "w") as f:
            f.write(f"{KEY} {SECRET}\n")
        self.serve = Serve("--credentials", path)

    def tearDown(self):
        self.serve.stop()

    def test_four_mebibytes_less_one_of_brackets_reach_the_depth_guard(self):
        a = json_call(self.serve, "ListQueues", b"[" * (4 * MIB - 1), timeout=120)
        self.assertEqual(a.status, 400, a.body[:300])
        self.assertEqual(code_of(a), "SerializationException", a.body[:300])
        self.assertIn(b"nests deeper than", a.body)
        # One byte more than the limit: refused as too large before any of it is read.
        a = json_call(self.serve, "ListQueues", b"[" * (4 * MIB + 1), timeout=120)
        self.assertEqual(a.status, 413, a.body[:300])

    def test_a_signed_looking_body_is_read_then_refused_by_its_signature(self):
        # A known key, a date of now, a signature of the wrong secret: every check a header
        # allows passes, so the body is read (up to its limit) and only then refused.
        body = json.dumps({"QueueName": "guards-" + "x" * 70}).encode() + b" " * MIB
        a = json_call(self.serve, "CreateQueue", body, secret="not-the-secret")
        self.assertEqual((a.status, code_of(a)), (403, "SignatureDoesNotMatch"), a.body[:300])
        # Without the header: refused from the header alone, before the body.
        a = raw(self.serve.port, "POST", "/", {"X-Amz-Target": "AmazonSQS.CreateQueue",
                                               "Content-Type": "application/x-amz-json-1.0"},
                body)
        self.assertEqual(a.status, 403, a.body[:300])
        self.assertIn(code_of(a), ("MissingAuthenticationToken", "AccessDenied",
                                   "IncompleteSignature", "InvalidClientTokenId"), a.body[:300])
        self.assertFalse(queue_exists(self.serve.client(), "guards-"))


class CrossSiteWithoutCredentials(ServeCase):
    """Finding 4: without --credentials, what only a browser on another site (or a DNS name
    rebound to 127.0.0.1) would send is refused with 403 and changes nothing."""

    def fake_authorization(self):
        date = amz_now()
        return date, (f"AWS4-HMAC-SHA256 Credential=AKID/{date[:8]}/{REGION}/sqs/aws4_request, "
                      f"SignedHeaders=host;x-amz-date, Signature={'ab' * 32}")

    def test_a_fake_presigned_query_cannot_purge_a_queue(self):
        url = self.sqs.create_queue(QueueName="hostile-purge")["QueueUrl"]
        for i in range(3):
            self.sqs.send_message(QueueUrl=url, MessageBody=f"keep {i}")
        date = amz_now()
        target = ("/?Action=PurgeQueue&QueueUrl=" + encode(url) +
                  "&X-Amz-Algorithm=AWS4-HMAC-SHA256"
                  f"&X-Amz-Credential=AKID%2F{date[:8]}%2F{REGION}%2Fsqs%2Faws4_request"
                  f"&X-Amz-Date={date}&X-Amz-Expires=300&X-Amz-SignedHeaders=host"
                  "&X-Amz-Signature=" + "0" * 64)
        a = raw(self.serve.port, "GET", target)
        self.assertEqual(a.status, 403, a.body)
        self.assertIn(code_of(a), ("AccessDenied", "MissingAuthenticationToken"), a.body)
        self.assertEqual(counts(self.sqs, url)[0], 3, "the fake presigned URL purged the queue")

    def test_cross_site_form_posts_are_refused_and_create_no_queue(self):
        port = self.serve.port
        base = {"Content-Type": "application/x-www-form-urlencoded"}
        date, authorization = self.fake_authorization()
        cases = {
            "hostile-xsite-plain": {**base, "Origin": "http://evil.example"},
            "hostile-xsite-authorized": {**base, "Origin": "http://evil.example",
                                         "X-Amz-Date": date, "Authorization": authorization},
            "hostile-xsite-fetch": {**base, "Sec-Fetch-Site": "cross-site", "X-Amz-Date": date,
                                    "Authorization": authorization},
        }
        for name, headers in cases.items():
            with self.subTest(name):
                a = raw(port, "POST", "/", headers, f"Action=CreateQueue&QueueName={name}")
                self.assertEqual(a.status, 403, a.body)
                self.assertFalse(queue_exists(self.sqs, name), f"{name} was created")

    def test_a_foreign_host_is_refused_while_the_sdk_path_works(self):
        url = self.sqs.create_queue(QueueName="hostile-rebind")["QueueUrl"]
        port = self.serve.port
        # The SDK's path: boto3 (Query), and JSON signed by botocore, to 127.0.0.1 and localhost.
        self.assertEqual(self.sqs.list_queues()["ResponseMetadata"]["HTTPStatusCode"], 200)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            a = json_call(self.serve, "ListQueues", {}, host=host)
            self.assertEqual(a.status, 200, (host, a.body))
            a = query_call(self.serve, {"Action": "ListQueues"}, host=host)
            self.assertEqual(a.status, 200, (host, a.body))
        evil = f"rebind.evil.example:{port}"
        a = query_call(self.serve, {"Action": "ListQueues"}, host=evil)
        self.assertEqual(a.status, 403, a.body)
        a = json_call(self.serve, "ListQueues", {}, host=evil)
        self.assertEqual(a.status, 403, a.body)
        a = query_call(self.serve, {"Action": "DeleteQueue", "QueueUrl": url}, host=evil)
        self.assertEqual(a.status, 403, a.body)
        a = json_call(self.serve, "DeleteQueue", {"QueueUrl": url}, host=evil)
        self.assertEqual(a.status, 403, a.body)
        self.assertTrue(queue_exists(self.sqs, "hostile-rebind"), "the rebound DeleteQueue ran")


class DashboardQueryEscapes(ServeCase):
    """The dashboard's API reads its query string with the shared percent decoding: a bad escape
    is a 400, not an exception that ends the process."""

    def test_a_bad_escape_in_a_dashboard_query_is_400_and_serve_goes_on(self):
        port = self.serve.port
        for target in ("/ui/api/history?topic=%zz", "/ui/api/dead?topic=a%2", "/ui/api/overview?%"):
            a = raw(port, "GET", target)
            self.assertEqual(a.status, 400, (target, a.body))
            self.assertAlive(self.serve)
        # More pairs than the page ever sends: refused, not split into thousands of strings.
        a = raw(port, "GET", "/ui/api/overview?" + "a=1&" * 10000)
        self.assertEqual(a.status, 400, a.body)
        self.assertIn(b"more than 64 parameters", a.body)
        a = raw(port, "GET", "/ui/api/overview")
        self.assertEqual(a.status, 200, a.body)
        self.assertEqual(self.sqs.list_queues()["ResponseMetadata"]["HTTPStatusCode"], 200)


class SignatureCoversTheAction(ServeCase):
    """Finding 5: with --credentials, the action, protocol and queue come only from what the
    signature covers: an unsigned X-Amz-Target turns no signed request into another action."""

    @classmethod
    def setUpClass(cls):
        path = os.path.join(SCRATCH, "credentials")
        with open(path, "w") as f:
            f.write(f"{KEY} {SECRET}\n")
        cls.ARGS = ("--credentials", path)
        super().setUpClass()

    def deletes_refused(self, name, attempts):
        """Sends each attempt (a function returning an Answer); each must be refused."""
        for label, attempt in attempts:
            with self.subTest(label):
                a = attempt()
                self.assertIn(a.status, (400, 403), a.body)
                self.assertTrue(queue_exists(self.sqs, name), f"{label}: the queue was deleted")

    def test_an_unsigned_x_amz_target_cannot_turn_a_presigned_read_into_a_delete(self):
        name = "hostile-presigned"
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        port = self.serve.port
        params = {"Action": "GetQueueAttributes", "QueueUrl": url,
                  "AttributeName.1": "QueueArn"}
        get = presigned_target("GET", self.serve.url + "/", params)
        post_root = presigned_target("POST", self.serve.url + "/", params)
        post_queue = presigned_target("POST", url, params)  # to the queue's own URL
        for target, method in ((get, "GET"), (post_root, "POST"), (post_queue, "POST")):
            a = raw(port, method, target)
            self.assertEqual(a.status, 200, (method, target, a.body))  # as signed: fine
        hijack = {"X-Amz-Target": "AmazonSQS.DeleteQueue",
                  "Content-Type": "application/x-amz-json-1.0"}
        body = json.dumps({"QueueUrl": url})
        self.deletes_refused(name, [
            ("GET with a body", lambda: raw(port, "GET", get, hijack, body)),
            ("POST / with a body", lambda: raw(port, "POST", post_root, hijack, body)),
            ("POST / without a body", lambda: raw(port, "POST", post_root, hijack)),
            ("POST to the queue URL with a body",
             lambda: raw(port, "POST", post_queue, hijack, body)),
            ("POST to the queue URL without a body",
             lambda: raw(port, "POST", post_queue, hijack)),
        ])

    def test_an_x_amz_target_added_after_header_signing_is_refused(self):
        name = "hostile-header-signed"
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        port = self.serve.port
        content_type = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
        body = form({"Action": "GetQueueAttributes", "QueueUrl": url}).encode()
        with_body = signed_headers("POST", self.serve.url + "/", content_type, body)
        path = urllib.parse.urlsplit(url).path
        query_url = url + "?" + form({"Action": "GetQueueAttributes", "QueueUrl": url})
        target = path + "?" + form({"Action": "GetQueueAttributes", "QueueUrl": url})
        in_query = signed_headers("POST", query_url, content_type, b"")
        a = raw(port, "POST", "/", with_body, body)
        self.assertEqual(a.status, 200, a.body)  # as signed: fine
        a = raw(port, "POST", target, in_query)
        self.assertEqual(a.status, 200, a.body)
        target_header = {"X-Amz-Target": "AmazonSQS.DeleteQueue"}
        self.deletes_refused(name, [
            ("form body", lambda: raw(port, "POST", "/", {**with_body, **target_header}, body)),
            ("parameters in the query, to the queue URL",
             lambda: raw(port, "POST", target, {**in_query, **target_header})),
        ])


class PlusInASignedQuery(ServeCase):
    """Finding 6: one decoding of a query string for the signature and for the stored value:
    a raw '+' is a space for both."""

    @classmethod
    def setUpClass(cls):
        path = os.path.join(SCRATCH, "credentials-plus")
        with open(path, "w") as f:
            f.write(f"{KEY} {SECRET}\n")
        cls.ARGS = ("--credentials", path)
        super().setUpClass()

    def presigned_send(self, url, body):
        return presigned_target("GET", self.serve.url + "/",
                                {"Action": "SendMessage", "QueueUrl": url, "MessageBody": body})

    def bodies(self, url):
        got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        return [m["Body"] for m in got.get("Messages", [])]

    def test_a_raw_plus_signed_as_a_space_is_accepted_and_stored_as_a_space(self):
        url = self.sqs.create_queue(QueueName="hostile-plus-space")["QueueUrl"]
        target = self.presigned_send(url, "1 1=2")
        self.assertIn("MessageBody=1%201%3D2&", target)
        a = raw(self.serve.port, "GET", target.replace("MessageBody=1%201%3D2&",
                                                       "MessageBody=1+1=2&"))
        self.assertEqual(a.status, 200, a.body)
        self.assertEqual(self.bodies(url), ["1 1=2"])
        # %2B, signed as a plus, is a plus.
        target = self.presigned_send(url, "1+1=2")
        self.assertIn("MessageBody=1%2B1%3D2&", target)
        a = raw(self.serve.port, "GET", target)
        self.assertEqual(a.status, 200, a.body)
        self.assertEqual(self.bodies(url), ["1+1=2"])

    def test_a_raw_plus_signed_as_a_plus_does_not_match_and_stores_nothing(self):
        url = self.sqs.create_queue(QueueName="hostile-plus-literal")["QueueUrl"]
        target = self.presigned_send(url, "1+1=2")
        self.assertIn("MessageBody=1%2B1%3D2&", target)
        a = raw(self.serve.port, "GET", target.replace("MessageBody=1%2B1%3D2&",
                                                       "MessageBody=1+1=2&"))
        self.assertEqual((a.status, code_of(a)), (403, "SignatureDoesNotMatch"), a.body)
        self.assertEqual(counts(self.sqs, url), (0, 0, 0))


class UnboundedGrowth(ServeCase):
    """Finding 7: what a client sends is not kept for ever, nor let past SQS's limits."""

    def test_a_hundred_queue_names_of_a_mebibyte_are_refused_and_not_kept(self):
        serve = Serve()  # its own, for its memory
        try:
            serve.client().list_queues()
            # The allocator keeps some of what requests of 1 MiB use (35-65 MiB here): first as
            # many names of 1 MiB that are refused before any lookup (GetQueueUrl checks them).
            for i in range(100):
                a = json_call(serve, "GetQueueUrl", {"QueueName": f"{i:03d}" + "w" * (MIB - 3)})
                self.assertEqual(a.status, 400, a.body[:300])
            before = serve.rss_mib()
            account_url = f"http://127.0.0.1:{serve.port}/000000000000/"
            for i in range(100):
                name = f"{i:03d}" + "n" * (MIB - 3)
                a = json_call(serve, "GetQueueAttributes", {"QueueUrl": account_url + name})
                self.assertIn((a.status, code_of(a)), ((400, "InvalidParameterValueException"),
                                                       (400, "QueueDoesNotExist"),
                                                       (404, "InvalidAddress")), a.body[:300])
            grew = serve.rss_mib() - before
            self.assertTrue(serve.alive())
            self.assertLess(grew, 50, f"RSS grew by {grew:.0f} MiB after 100 names of 1 MiB")
        finally:
            serve.stop()

    def test_a_receive_request_attempt_id_of_129_characters_is_refused(self):
        url = self.sqs.create_queue(QueueName="hostile-attempt.fifo",
                                    Attributes={"FifoQueue": "true"})["QueueUrl"]
        a = json_call(self.serve, "ReceiveMessage",
                      {"QueueUrl": url, "ReceiveRequestAttemptId": "a" * 128})
        self.assertEqual(a.status, 200, a.body)
        a = json_call(self.serve, "ReceiveMessage",
                      {"QueueUrl": url, "ReceiveRequestAttemptId": "b" * 129})
        self.assertEqual((a.status, code_of(a)), (400, "InvalidParameterValueException"), a.body)

    def test_a_batch_over_a_mebibyte_with_its_attributes_is_batch_request_too_long(self):
        url = self.sqs.create_queue(QueueName="hostile-batch-size")["QueueUrl"]
        entries = [{"Id": f"e{i}", "MessageBody": "0123456789",
                    "MessageAttributes": {"big": {"DataType": "String",
                                                  "StringValue": "x" * 150000}}}
                   for i in range(10)]
        a = json_call(self.serve, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
        self.assertEqual((a.status, code_of(a)), (400, "BatchRequestTooLong"), a.body[:500])
        self.assertEqual(counts(self.sqs, url), (0, 0, 0))

    def test_the_redrive_permission_and_region_inputs_are_bounded(self):
        # A TaskHandle of a mebibyte: refused as unknown (404, as the JSON model gives it),
        # nothing decoded beyond the bound.
        a = json_call(self.serve, "CancelMessageMoveTask", {"TaskHandle": "QQ" * (MIB // 2)})
        self.assertEqual((a.status, code_of(a)), (404, "ResourceNotFoundException"), a.body[:300])
        # 100,000 principals, and 100,000 actions: OverLimit, and no Policy written.
        url = self.sqs.create_queue(QueueName="hostile-permissions")["QueueUrl"]
        for accounts, actions in ((["111122223333"] * 100000, ["SendMessage"]),
                                  (["111122223333"], ["SendMessage"] * 100000)):
            a = json_call(self.serve, "AddPermission", {"QueueUrl": url, "Label": "flood",
                                                        "AWSAccountIds": accounts,
                                                        "Actions": actions})
            self.assertEqual((a.status, code_of(a)), (403, "OverLimit"), a.body[:300])
            self.assertLess(len(a.body), 2000)
        self.assertNotIn("Policy", self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {}))
        # A Policy of 400 KB nested 200,000 deep, set and given to CreateQueue: refused from its
        # size (SQS's quota is 8,192 bytes) before any parse, and nothing stored; one of the
        # quota's size is kept.
        deep = "[" * 200000 + "]" * 200000
        started = time.monotonic()
        a = json_call(self.serve, "SetQueueAttributes", {"QueueUrl": url,
                                                         "Attributes": {"Policy": deep}})
        self.assertEqual((a.status, code_of(a)), (400, "InvalidAttributeValue"), a.body[:300])
        self.assertIn("maximum allowed is 8192", a.body.decode())
        self.assertLess(len(a.body), 2000)
        a = json_call(self.serve, "CreateQueue", {"QueueName": "hostile-deep-policy",
                                                  "Attributes": {"Policy": deep}})
        self.assertEqual((a.status, code_of(a)), (400, "InvalidAttributeValue"), a.body[:300])
        self.assertLess(time.monotonic() - started, 5)
        self.assertNotIn("hostile-deep-policy",
                         " ".join(self.sqs.list_queues().get("QueueUrls", [])))
        self.assertNotIn("Policy", self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {}))
        prefix, suffix = '{"Version":"2012-10-17","Statement":[],"Id":"', '"}'
        full = prefix + "x" * (8192 - len(prefix) - len(suffix)) + suffix
        self.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": full})
        self.assertEqual(self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"], full)
        # A credential scope whose region is 20,000 characters: refused from the header, the
        # answer naming only its first 40.
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        region = "r" * 20000
        a = raw(self.serve.port, "POST", "/", {
            "X-Amz-Target": "AmazonSQS.ListQueues", "X-Amz-Date": date,
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": f"AWS4-HMAC-SHA256 Credential={KEY}/{date[:8]}/{region}/sqs/"
                             "aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, "
                             "Signature=" + "0" * 64}, b"{}")
        self.assertEqual((a.status, code_of(a)), (403, "SignatureDoesNotMatch"), a.body[:300])
        self.assertIn("r" * 40, a.body.decode())
        self.assertNotIn("r" * 41, a.body.decode())


class FrozenDatabase(unittest.TestCase):
    """Finding 8: a database that stops answering (SIGSTOP) gets 503 ServiceUnavailable within
    12 s (the server's bound is 10 s), and nothing acknowledged before is lost."""

    def test_a_frozen_database_answers_503_within_12_s_and_loses_nothing(self):
        serve = Serve()
        stopped_pid = None
        try:
            sqs = serve.client()
            url = sqs.create_queue(QueueName="hostile-frozen")["QueueUrl"]
            sent = {f"acked {i}" for i in range(20)}
            for body in sorted(sent):
                sqs.send_message(QueueUrl=url, MessageBody=body)
            pid = local_status()["pid"]
            self.assertIsInstance(pid, int)
            calls = {
                "SendMessage": {"QueueUrl": url, "MessageBody": "while frozen"},
                "GetQueueAttributes": {"QueueUrl": url, "AttributeNames": ["All"]},
                # A short visibility: a claim the database might still make after SIGCONT
                # gives its messages back at once.
                "ReceiveMessage": {"QueueUrl": url, "WaitTimeSeconds": 0, "VisibilityTimeout": 1,
                                   "MaxNumberOfMessages": 10},
            }
            answers = {}

            def call(action):
                start = time.monotonic()
                try:
                    answers[action] = json_call(serve, action, calls[action], timeout=14)
                except (OSError, http.client.HTTPException) as e:
                    answers[action] = e
                answers[action + " seconds"] = time.monotonic() - start

            os.kill(pid, signal.SIGSTOP)
            stopped_pid = pid
            threads = [threading.Thread(target=call, args=(a,)) for a in calls]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            os.kill(pid, signal.SIGCONT)
            stopped_pid = None
            took = {a: round(answers[a + " seconds"], 1) for a in calls}
            print(f"\n  frozen database, seconds to answer: {took}", file=sys.stderr)
            for action in calls:
                with self.subTest(action):
                    a = answers[action]
                    self.assertIsInstance(a, Answer, f"{action}: no answer in {took[action]} s "
                                                     f"({a!r})")
                    self.assertEqual((a.status, code_of(a)), (503, "ServiceUnavailable"), a.body)
                    self.assertLess(a.seconds, 12)
            # Every acknowledged message is still there.
            got = set()
            deadline = time.monotonic() + 30
            while not sent <= got and time.monotonic() < deadline:
                try:
                    out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                              VisibilityTimeout=120, WaitTimeSeconds=2)
                    got |= {m["Body"] for m in out.get("Messages", [])}
                except botocore.exceptions.BotoCoreError:
                    time.sleep(0.5)
                except botocore.exceptions.ClientError:
                    time.sleep(0.5)
            self.assertEqual(sent - got, set(), "acknowledged messages lost")
        finally:
            if stopped_pid is not None:
                os.kill(stopped_pid, signal.SIGCONT)
            serve.stop()


class ManyLongPolls(ServeCase):
    """Finding 11: long polls on many queues cost serve a bounded number of threads and database
    connections, not one each (500 queues polled took 525 threads and 517 connections), and are
    still woken at once."""

    QUEUES = 200

    def threads(self):
        with open(f"/proc/{self.serve.proc.pid}/status") as f:
            return int(re.search(r"Threads:\s+(\d+)", f.read()).group(1))

    def database_connections(self):
        out = subprocess.run(["mariadb", "--socket", local_status()["socket"], "-uroot", "-N", "-e",
                              "SHOW GLOBAL STATUS LIKE 'Threads_connected'"],
                             capture_output=True, text=True, timeout=60)
        return int(out.stdout.split()[1])

    def test_long_polls_on_many_queues_hold_no_thread_or_connection_each(self):
        urls = [self.sqs.create_queue(QueueName=f"hostile-poll-{i:03d}")["QueueUrl"]
                for i in range(self.QUEUES)]
        # A first poll (one queue) sets the server's baseline: its pools and one watch.
        base_answer = {}
        first = threading.Thread(target=lambda: base_answer.update(r=json_call(
            self.serve, "ReceiveMessage", {"QueueUrl": urls[0], "WaitTimeSeconds": 20},
            timeout=60)))
        first.start()
        time.sleep(2)
        threads_one, connections_one = self.threads(), self.database_connections()
        answers = {}

        def poll(url):
            answers[url] = json_call(self.serve, "ReceiveMessage",
                                     {"QueueUrl": url, "WaitTimeSeconds": 20}, timeout=60)
            answers[url + " at"] = time.monotonic()

        pollers = [threading.Thread(target=poll, args=(u,)) for u in urls[1:]]
        for p in pollers:
            p.start()
        time.sleep(6)
        threads_all, connections_all = self.threads(), self.database_connections()
        print(f"\n  long polls on 1 queue: {threads_one} threads, {connections_one} database "
              f"connections; on {self.QUEUES}: {threads_all} threads, {connections_all} database "
              f"connections", file=sys.stderr)
        # A send to a polled queue answers its poll within a second.
        woken = urls[-10:]
        late = []
        for url in woken:
            self.sqs.send_message(QueueUrl=url, MessageBody="wake")
            sent_at = time.monotonic()
            while url + " at" not in answers and time.monotonic() - sent_at < 5:
                time.sleep(0.001)
            late.append(answers.get(url + " at", float("inf")) - sent_at)
        for p in pollers:
            p.join(40)
        first.join(40)
        self.assertLess(threads_all - threads_one, 20, "threads grow with the queues polled")
        # Bounded, not one per queue: the pool (workers + 8) and at most 4 watches, each with
        # its holder connection on MariaDB (src/wait/waiters.cc).
        self.assertLess(connections_all - connections_one, 30,
                        "database connections grow with the queues polled")
        self.assertLess(max(late), 1.0, f"wake-ups took {sorted(late)} s")
        for url in woken:
            self.assertEqual(answers[url].status, 200)
            self.assertEqual(len(json.loads(answers[url].body)["Messages"]), 1)


class MalformedReceive(ServeCase):
    """Finding 9: a ReceiveMessage refused for its input has received nothing."""

    def test_a_malformed_receive_consumes_nothing(self):
        dlq = self.sqs.create_queue(QueueName="hostile-malformed-dlq")["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]
        url = self.sqs.create_queue(QueueName="hostile-malformed", Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})})[
            "QueueUrl"]
        self.sqs.send_message(QueueUrl=url, MessageBody="only one")
        for bad in ({"MessageAttributeNames": "All"}, {"AttributeNames": 5}):
            with self.subTest(bad):
                a = json_call(self.serve, "ReceiveMessage", {"QueueUrl": url, **bad})
                self.assertEqual(a.status, 400, a.body)
        got = self.sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"],
                                       WaitTimeSeconds=5).get("Messages", [])
        self.assertEqual([m["Body"] for m in got], ["only one"], "the message was consumed")
        self.assertEqual(got[0]["Attributes"]["ApproximateReceiveCount"], "1")
        self.assertEqual(counts(self.sqs, dlq), (0, 0, 0))


def forged(receipt):
    """RECEIPT with one character in its middle changed to another of its kind."""
    for i in list(range(len(receipt) // 2, len(receipt))) + list(range(len(receipt) // 2)):
        c = receipt[i]
        for alphabet in ("0123456789", "abcdef", "ABCDEF", "abcdefghijklmnopqrstuvwxyz",
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
            if c in alphabet:
                return receipt[:i] + alphabet[(alphabet.index(c) + 1) % len(alphabet)] + \
                    receipt[i + 1:]
    raise AssertionError(f"cannot forge {receipt!r}")


class InputsAndOutputs(ServeCase):
    """Finding 10: mistyped attributes, forged receipts, /readyz's body, log lines."""

    def test_mistyped_message_and_system_attributes_are_400_not_500(self):
        url = self.sqs.create_queue(QueueName="hostile-attributes")["QueueUrl"]
        cases = {
            "DataType a number": {"MessageAttributes": {"a": {"DataType": 5,
                                                              "StringValue": "x"}}},
            "AWSTraceHeader's StringValue a number": {"MessageSystemAttributes": {
                "AWSTraceHeader": {"DataType": "String", "StringValue": 7}}},
            "AWSTraceHeader with a control character": {"MessageSystemAttributes": {
                "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc\x01"}}},
        }
        for label, extra in cases.items():
            with self.subTest(label):
                a = json_call(self.serve, "SendMessage",
                              {"QueueUrl": url, "MessageBody": "body", **extra})
                self.assertEqual(a.status, 400, a.body)
        self.assertEqual(counts(self.sqs, url), (0, 0, 0))

    def receive_one(self, url):
        got = self.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5).get("Messages", [])
        self.assertEqual(len(got), 1)
        return got[0]["ReceiptHandle"]

    def assertInvalidReceipt(self, a):
        # 400 in both protocols, as SQS answers (the JSON model's trait says 404).
        self.assertEqual(a.status, 400, a.body)
        self.assertEqual(code_of(a), "ReceiptHandleIsInvalid", a.body)

    def test_a_forged_receipt_on_a_standard_queue_is_invalid_and_deletes_nothing(self):
        url = self.sqs.create_queue(QueueName="hostile-forged")["QueueUrl"]
        self.sqs.send_message(QueueUrl=url, MessageBody="stays")
        receipt = self.receive_one(url)
        fake = forged(receipt)
        self.assertNotEqual(fake, receipt)
        a = json_call(self.serve, "DeleteMessage", {"QueueUrl": url, "ReceiptHandle": fake})
        self.assertInvalidReceipt(a)
        self.assertEqual(counts(self.sqs, url), (0, 1, 0), "the message is gone")
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)  # the real one deletes
        self.assertEqual(counts(self.sqs, url), (0, 0, 0))

    def test_a_receipt_of_another_queue_is_invalid(self):
        a_url = self.sqs.create_queue(QueueName="hostile-receipt-a")["QueueUrl"]
        b_url = self.sqs.create_queue(QueueName="hostile-receipt-b")["QueueUrl"]
        self.sqs.send_message(QueueUrl=a_url, MessageBody="of a")
        self.sqs.send_message(QueueUrl=b_url, MessageBody="of b")
        receipt = self.receive_one(a_url)
        self.receive_one(b_url)
        a = json_call(self.serve, "DeleteMessage", {"QueueUrl": b_url, "ReceiptHandle": receipt})
        self.assertInvalidReceipt(a)
        self.assertEqual(counts(self.sqs, a_url), (0, 1, 0))
        self.assertEqual(counts(self.sqs, b_url), (0, 1, 0))

    def test_readyz_without_a_database_names_no_user_host_or_database(self):
        # A user and a database of the test's own names, on the private MariaDB, stopped under
        # a serve that uses them.
        socket_path = local_status()["socket"]
        sql = ("CREATE DATABASE IF NOT EXISTS hostiledb; "
               "CREATE USER IF NOT EXISTS 'hostileuser'@'localhost' IDENTIFIED BY 'hostilepw'; "
               "GRANT ALL ON hostiledb.* TO 'hostileuser'@'localhost'")
        out = subprocess.run(["mariadb", "-uroot", "-S", socket_path, "-e", sql],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        serve = Serve(TXMQ_DSN=f"mysql://hostileuser:hostilepw@localhost/hostiledb"
                               f"?socket={socket_path}")
        try:
            a = raw(serve.port, "GET", "/readyz")
            self.assertEqual(a.status, 200, a.body)
            self.assertEqual(txmq("local", "stop").returncode, 0)
            deadline = time.monotonic() + 30
            while True:
                a = raw(serve.port, "GET", "/readyz")
                if a.status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            self.assertEqual(a.status, 503, a.body)
            body = a.body.decode("utf-8", "replace")
            self.assertEqual(body.count("\n"), 1, body)  # one line
            for secret in ("hostileuser", "hostilepw", "hostiledb", socket_path, SCRATCH,
                           "mysqld.sock"):
                self.assertNotIn(secret, body)
        finally:
            serve.stop()
            self.assertEqual(txmq("local", "start").returncode, 0)

    def test_newlines_in_a_request_forge_no_line_of_the_text_log(self):
        path = os.path.join(SCRATCH, "credentials-log")
        with open(path, "w") as f:
            f.write(f"{KEY} {SECRET}\n")
        serve = Serve("--credentials", path, "--log-format", "text")
        try:
            port = serve.port
            date = amz_now()
            url = serve.client().create_queue(QueueName="hostile-log")["QueueUrl"]

            def presigned_by_hand(credential):
                return ("/?Action=ListQueues&X-Amz-Algorithm=AWS4-HMAC-SHA256"
                        f"&X-Amz-Credential={credential}&X-Amz-Date={date}&X-Amz-Expires=300"
                        "&X-Amz-SignedHeaders=host&X-Amz-Signature=" + "0" * 64)

            attempts = [
                # The brief's case: a newline in the access key of a presigned request.
                raw(port, "GET", presigned_by_hand(
                    f"AKID%0AFORGED-LINE%2F{date[:8]}%2F{REGION}%2Fsqs%2Faws4_request")),
                # The same in the credential's region and date.
                raw(port, "GET", presigned_by_hand(
                    f"{KEY}%2F{date[:8]}%2F{REGION}%0AFORGED-LINE%2Fsqs%2Faws4_request")),
                raw(port, "GET", presigned_by_hand(
                    f"{KEY}%2F%0AFORGED-LINE%2F{REGION}%2Fsqs%2Faws4_request")),
                # A signed request whose Action, and whose queue, has one.
                raw(port, "GET", presigned_target("GET", serve.url + "/",
                                                  {"Action": "ListQueues\nFORGED-LINE"})),
                raw(port, "GET", presigned_target("GET", serve.url + "/", {
                    "Action": "GetQueueAttributes", "QueueUrl": url + "\nFORGED-LINE"})),
                raw(port, "GET", presigned_target("GET", serve.url + "/", {
                    "Action": "SendMessage", "QueueUrl": url,
                    "MessageBody": "x", "DelaySeconds": "1\nFORGED-LINE"})),
            ]
            for a in attempts:
                self.assertGreaterEqual(a.status, 400, a.body)
                self.assertLess(a.status, 500, a.body)
        finally:
            serve.stop()
        log = serve.log()
        forged_lines = [line for line in log.splitlines() if line.startswith("FORGED-LINE")]
        self.assertEqual(forged_lines, [], log[-3000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
