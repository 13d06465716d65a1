#!/usr/bin/python3
"""boto3 clients through a txmq serve whose DSN lists every node of a Galera cluster.

    tests/sqs/cluster_load.py TXMQ_BINARY DSN [--seconds N] [--database DB] [--dir DIR]

DSN is the cluster's multi-host DSN (`scripts/galera dsn`: mysql://root@h1:p1,h2:p2,h3:p3/txmq);
its database is replaced by --database (txmq_sqs), which is created through the first node that
answers. Starts its own `txmq serve` on it (loopback, port 0, scratch credentials), then for N
seconds 2 producers send unique bodies (SendMessage, every fifth call a SendMessageBatch of 5)
and 2 consumers receive (WaitTimeSeconds) and delete (DeleteMessage, DeleteMessageBatch), at
about 20 messages/s: modest, so that it can run beside the cluster fault run (scripts/fault
--cluster), whose node kills, pauses and freezes are the point. Debian's boto3 (Query protocol),
standard retry mode, 5 attempts; every attempt's error is recorded through botocore's
needs-retry event. Then the queue is drained and checked:
  - lost = 0: every acknowledged send's MessageId was received;
  - unexpected = 0: nothing received that no send call carried (a send that failed may or
    may not arrive); a second copy (another MessageId) of a message whose send was acknowledged
    at its first attempt is reported, and fails the run with --strict-copies;
  - every error an attempt got is one that the SDK's standard mode retries (5xx, throttling,
    connection errors, timeouts), and every exception that reached the code here is one too
    (its retries ran out); batch entries in Failed must not blame the sender;
  - no stall longer than --max-stall (45 s) without an acknowledged send or without a receive
    that returned messages.
Exits 1 when a check fails, 2 on wrong usage. Stops its serve with SIGTERM (it must exit 0),
kills it by pid on any failure. The scratch folder (serve's log) is kept when a check failed.
"""
import argparse
import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.retries import standard as retry_standard

REGION = "us-east-1"
PRODUCERS = 2
CONSUMERS = 2
BATCH_EVERY = 5          # every fifth producer call is a SendMessageBatch
BATCH_SIZE = 5
PRODUCER_PAUSE = 0.1     # between a producer's calls: about 10 messages/s per producer
WAIT_SECONDS = 2         # ReceiveMessage's WaitTimeSeconds
VISIBILITY = 30          # longer than an outage (at most ~11 s per node fault), so that a
                         # slow delete does not make a redelivery
ATTEMPTS = 5             # the SDK's total attempts per call
SLOW_CALL = 3.0          # a call slower than this (beyond its long poll) goes on the timeline

# How txmq serve logs a request it answered with an error: "ACTION REQUEST_ID: STATUS CODE: ...".
FAILED_REQUEST = re.compile(r": [45][0-9][0-9] [A-Za-z.]+: ")

# What the SDK's standard mode retries (its own checkers, without the attempt limit).
SDK_RETRIES = retry_standard.OrRetryChecker([
    retry_standard.TransientRetryableChecker(),
    retry_standard.ThrottledRetryableChecker(),
    retry_standard.ModeledRetryableChecker(),
])


def say(text):
    print(f"cluster_load: {text}", flush=True)


def parse_dsn(dsn):
    """mysql://USER[:PASSWORD]@H1:P1,H2:P2/DB[?OPTIONS] -> parts; the hosts as (host, port)."""
    parts = urllib.parse.urlsplit(dsn)
    if parts.scheme not in ("mysql", "mariadb") or "@" not in parts.netloc:
        raise ValueError(f"not a DSN with a user and hosts: {dsn}")
    userinfo, hostlist = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    hosts = []
    for h in hostlist.split(","):
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            host, port = h, "3306"
        hosts.append((host, int(port)))
    return {"scheme": parts.scheme, "userinfo": userinfo, "user": urllib.parse.unquote(user),
            "password": urllib.parse.unquote(password), "hosts": hosts,
            "hostlist": hostlist, "query": parts.query}


def dsn_with_database(dsn, database):
    p = parse_dsn(dsn)
    query = f"?{p['query']}" if p["query"] else ""
    return f"{p['scheme']}://{p['userinfo']}@{p['hostlist']}/{database}{query}"


def mariadb(host, port, dsn_parts, sql, timeout):
    """The mariadb client on one node over TCP; (returncode, stdout, stderr)."""
    env = dict(os.environ)
    if dsn_parts["password"]:
        env["MYSQL_PWD"] = dsn_parts["password"]  # not on the command line
    try:
        done = subprocess.run(
            ["mariadb", "--no-defaults", f"--host={host}", f"--port={port}",
             f"--user={dsn_parts['user']}", "--connect-timeout=3", "--batch",
             "--skip-column-names", "-e", sql],
            env=env, capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        return 124, "", "timed out"


class Record:
    """What every thread saw; one lock guards it all."""

    def __init__(self, started):
        self.lock = threading.Lock()
        self.started = started
        self.started_wall = time.time()
        self.acked = {}                  # body -> (MessageId, attempts the send call took)
        self.unanswered = set()          # bodies of send calls or entries that failed
        self.sent_at = {}                # body -> when its send call was acknowledged
        self.send_calls_failed = 0
        self.received = collections.defaultdict(list)   # body -> [MessageId, ...]
        self.receives = 0
        self.attempt_errors = collections.Counter()     # (operation, status, code, retried)
        self.call_errors = collections.Counter()        # (operation, code, retryable)
        self.entry_failures = collections.Counter()     # (operation, code, sender fault)
        self.problems = []
        self.timeline = []               # (seconds since start, text)
        self.send_oks = []               # when each acknowledged send call returned
        self.receive_oks = []            # when each receive that returned messages returned
        self.slowest = collections.defaultdict(float)   # operation -> seconds
        self.last_message_at = time.monotonic()

    def now(self):
        return time.monotonic() - self.started

    def event(self, text):
        with self.lock:
            self.timeline.append((self.now(), text))


def classify_exception(client, operation, error):
    """(code, retryable by the SDK's standard mode) for an exception that reached us."""
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = error.response.get("Error", {}).get("Code", "?")
        http = type("Status", (), {"status_code": status})() if status else None
        context = retry_standard.RetryContext(
            attempt_number=1, operation_model=client.meta.service_model.operation_model(operation),
            parsed_response=error.response, http_response=http)
        return f"{status} {code}", SDK_RETRIES.is_retryable(context)
    context = retry_standard.RetryContext(attempt_number=1, caught_exception=error)
    return type(error).__name__, SDK_RETRIES.is_retryable(context)


class Load:
    def __init__(self, args):
        self.args = args
        self.txmq = os.path.abspath(args.txmq)
        self.dsn = dsn_with_database(args.dsn, args.database)
        self.dsn_parts = parse_dsn(args.dsn)
        self.scratch = args.dir or tempfile.mkdtemp(prefix="txmq-cluster-load-")
        os.makedirs(self.scratch, exist_ok=True)
        self.key = "AKIDLOAD" + "".join(random.choice("0123456789ABCDEF") for _ in range(12))
        self.secret = "".join(random.choice("0123456789abcdef") for _ in range(40))
        self.serve = None
        self.endpoint = None
        self.run_id = f"{int(time.time()) % 100000:05d}{random.randrange(16 ** 4):04x}"
        self.record = None
        self.admin = None
        self.stop_producers = threading.Event()
        self.stop_consumers = threading.Event()
        self.stop_monitor = threading.Event()

    # --- the database and txmq serve ----------------------------------------------------------
    def create_database(self):
        sql = f"CREATE DATABASE IF NOT EXISTS `{self.args.database}`"
        errors = []
        for host, port in self.dsn_parts["hosts"]:
            code, _, err = mariadb(host, port, self.dsn_parts, sql, timeout=20)
            if code == 0:
                return
            errors.append(f"{host}:{port}: {err.strip() or f'exit {code}'}")
        raise RuntimeError("no node created the database: " + "; ".join(errors))

    def start_serve(self):
        credentials = os.path.join(self.scratch, "credentials")
        with open(credentials, "w") as f:
            f.write(f"# scratch keys of tests/sqs/cluster_load.py\n{self.key} {self.secret}\n")
        out_path = os.path.join(self.scratch, "serve.out")
        with open(out_path, "w") as out:
            env = dict(os.environ)
            env.pop("TXMQ_DSN", None)
            self.serve = subprocess.Popen(
                [self.txmq, "serve", "--dsn", self.dsn, "--listen", "127.0.0.1:0",
                 "--credentials", credentials], stdout=out, stderr=subprocess.PIPE, env=env,
                stdin=subprocess.DEVNULL, text=True)
        threading.Thread(target=self.read_serve_log, daemon=True).start()
        prefix = "txmq serve: listening on "
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(out_path) as f:
                for line in f:
                    if line.startswith(prefix):
                        self.endpoint = line[len(prefix):].split()[0]
                        say(f"txmq serve (pid {self.serve.pid}) at {self.endpoint} on "
                            f"{self.dsn}")
                        return
            if self.serve.poll() is not None:
                raise RuntimeError(f"txmq serve exited {self.serve.returncode} before listening: "
                                   f"{self.serve_log_tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"txmq serve did not listen within 60 s: {self.serve_log_tail()}")

    def serve_log_tail(self, lines=40):
        try:
            with open(os.path.join(self.scratch, "serve.err")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def read_serve_log(self):
        """serve's stderr into serve.err, and onto the timeline once the load runs (its lines
        carry no time of their own)."""
        with open(os.path.join(self.scratch, "serve.err"), "w") as f:
            for line in self.serve.stderr:
                f.write(line)
                f.flush()
                if self.record is not None:
                    self.record.event(f"serve: {line.strip()}")

    def serve_log(self):
        try:
            with open(os.path.join(self.scratch, "serve.err")) as f:
                return [line.rstrip() for line in f]
        except OSError:
            return []

    def stop_serve(self):
        """SIGTERM; it must exit 0 within 30 s. Returns a problem or None."""
        self.serve.send_signal(signal.SIGTERM)
        try:
            status = self.serve.wait(30)
        except subprocess.TimeoutExpired:
            self.serve.kill()
            self.serve.wait()
            return "txmq serve did not exit within 30 s of SIGTERM (killed)"
        if status != 0:
            return f"txmq serve exited {status} after SIGTERM (expected 0)"
        return None

    def kill_serve(self):
        if self.serve is not None and self.serve.poll() is None:
            self.serve.kill()
            self.serve.wait()

    # --- SDK clients ----------------------------------------------------------------------------
    def client(self):
        # read_timeout above the library's own ride-out of an outage (40 s): a writer kill is
        # meant to look like a slow call, not like a timeout and a resend.
        config = Config(retries={"mode": "standard", "total_max_attempts": ATTEMPTS},
                        connect_timeout=5, read_timeout=60)
        client = boto3.session.Session().client(
            "sqs", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.key,
            aws_secret_access_key=self.secret, config=config)
        client.meta.events.register("needs-retry.sqs", self.on_attempt)
        return client

    def on_attempt(self, response=None, caught_exception=None, attempts=None, operation=None,
                   request_dict=None, **_):
        """Every attempt of every call: record the errors (returns None: decides nothing)."""
        r = self.record
        if caught_exception is not None:
            context = retry_standard.RetryContext(attempt_number=attempts,
                                                  caught_exception=caught_exception)
            what = (operation.name, "-", type(caught_exception).__name__,
                    SDK_RETRIES.is_retryable(context))
        else:
            http_response, parsed = response
            if http_response.status_code < 300:
                return None
            context = retry_standard.RetryContext(
                attempt_number=attempts, operation_model=operation, parsed_response=parsed,
                http_response=http_response)
            code = (parsed or {}).get("Error", {}).get("Code", "?")
            what = (operation.name, str(http_response.status_code), code,
                    SDK_RETRIES.is_retryable(context))
        with r.lock:
            r.attempt_errors[what] += 1
            r.timeline.append((r.now(), f"attempt {attempts} of {what[0]}: {what[1]} {what[2]}"
                                        f"{'' if what[3] else ' (NOT retryable)'}"))
        return None

    def call(self, client, operation, method, **params):
        """One SDK call; (response or None, seconds). Exceptions are recorded, not raised."""
        r = self.record
        t0 = time.monotonic()
        try:
            response = getattr(client, method)(**params)
        except Exception as e:  # what reached the application, after the SDK's retries
            code, retryable = classify_exception(client, operation, e)
            with r.lock:
                r.call_errors[(operation, code, retryable)] += 1
                r.timeline.append((r.now(), f"{operation} failed after the SDK's retries: {code}"
                                            f"{'' if retryable else ' (NOT retryable)'}: {e}"))
            return None, time.monotonic() - t0
        elapsed = time.monotonic() - t0
        with r.lock:
            r.slowest[operation] = max(r.slowest[operation], elapsed)
            extra = WAIT_SECONDS if operation == "ReceiveMessage" else 0
            if elapsed > SLOW_CALL + extra:
                attempts = response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
                r.timeline.append((r.now() - elapsed, f"{operation} took {elapsed:.1f} s "
                                                      f"({attempts + 1} attempt(s))"))
        return response, elapsed

    def entry_failures(self, operation, failed):
        r = self.record
        with r.lock:
            for f in failed:
                sender = bool(f.get("SenderFault"))
                r.entry_failures[(operation, f.get("Code", "?"), sender)] += 1
                r.timeline.append((r.now(), f"{operation} entry failed: {f.get('Code')} "
                                            f"(SenderFault {sender}): {f.get('Message', '')}"))

    # --- producers and consumers ----------------------------------------------------------------
    def producer(self, index, url):
        client = self.client()
        try:
            self.produce(client, index, url)
        finally:
            client.close()

    def produce(self, client, index, url):
        r = self.record
        sequence = 0
        calls = 0
        while not self.stop_producers.is_set():
            calls += 1
            if calls % BATCH_EVERY == 0:
                bodies = {str(k): f"{self.run_id}-p{index}-{sequence + k}" for k in range(BATCH_SIZE)}
                sequence += BATCH_SIZE
                response, _ = self.call(client, "SendMessageBatch", "send_message_batch",
                                        QueueUrl=url, Entries=[
                                            {"Id": k, "MessageBody": b} for k, b in bodies.items()])
                self.sent_batch(bodies, response)
            else:
                body = f"{self.run_id}-p{index}-{sequence}"
                sequence += 1
                response, _ = self.call(client, "SendMessage", "send_message", QueueUrl=url,
                                        MessageBody=body)
                with r.lock:
                    if response is None:
                        r.send_calls_failed += 1
                        r.unanswered.add(body)
                    else:
                        attempts = response["ResponseMetadata"].get("RetryAttempts", 0) + 1
                        r.acked[body] = (response["MessageId"], attempts)
                        r.sent_at[body] = r.now()
                        r.send_oks.append(time.monotonic())
            time.sleep(PRODUCER_PAUSE)

    def sent_batch(self, bodies, response):
        r = self.record
        if response is None:
            with r.lock:
                r.send_calls_failed += 1
                r.unanswered.update(bodies.values())
            return
        self.entry_failures("SendMessageBatch", response.get("Failed", []))
        attempts = response["ResponseMetadata"].get("RetryAttempts", 0) + 1
        with r.lock:
            answered = set()
            for s in response.get("Successful", []):
                r.acked[bodies[s["Id"]]] = (s["MessageId"], attempts)
                r.sent_at[bodies[s["Id"]]] = r.now()
                answered.add(s["Id"])
            for f in response.get("Failed", []):
                r.unanswered.add(bodies[f["Id"]])
                answered.add(f["Id"])
            missing = set(bodies) - answered
            if missing:
                r.problems.append(f"SendMessageBatch answered neither Successful nor Failed for "
                                  f"entries {sorted(missing)}")
                r.unanswered.update(bodies[k] for k in missing)
            if response.get("Successful"):
                r.send_oks.append(time.monotonic())

    def consumer(self, index, url):
        client = self.client()
        try:
            self.consume(client, index, url)
        finally:
            client.close()

    def consume(self, client, index, url):
        r = self.record
        batch_delete = index % 2 == 0
        while not self.stop_consumers.is_set():
            response, _ = self.call(client, "ReceiveMessage", "receive_message", QueueUrl=url,
                                    MaxNumberOfMessages=10, WaitTimeSeconds=WAIT_SECONDS,
                                    VisibilityTimeout=VISIBILITY)
            if response is None:
                time.sleep(0.5)
                continue
            messages = response.get("Messages", [])
            with r.lock:
                r.receives += 1
                if messages:
                    r.last_message_at = time.monotonic()
                    r.receive_oks.append(time.monotonic())
                for m in messages:
                    r.received[m["Body"]].append(m["MessageId"])
            if not messages:
                continue
            # One consumer deletes in batches, the other one message at a time.
            if batch_delete:
                result, _ = self.call(client, "DeleteMessageBatch", "delete_message_batch",
                                      QueueUrl=url, Entries=[
                                          {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                                          for n, m in enumerate(messages)])
                if result is not None:
                    self.entry_failures("DeleteMessageBatch", result.get("Failed", []))
            else:
                for m in messages:
                    self.call(client, "DeleteMessage", "delete_message", QueueUrl=url,
                              ReceiptHandle=m["ReceiptHandle"])

    # --- which node is the writer ---------------------------------------------------------------
    def monitor(self):
        """Every 2 s: which node the writer row of the database names, and which nodes answer;
        changes go on the timeline (the faults, as the clients' side sees them)."""
        hosts = self.dsn_parts["hosts"]
        sql = ("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE "
               "VARIABLE_NAME = 'WSREP_GCOMM_UUID'; SELECT node_uuid FROM "
               f"`{self.args.database}`.txmq_cluster_writer WHERE singleton = 1")
        last_answering, last_writer = None, None
        while not self.stop_monitor.wait(2.0):
            results = [None] * len(hosts)

            def ask(i):
                code, out, _ = mariadb(hosts[i][0], hosts[i][1], self.dsn_parts, sql, timeout=5)
                results[i] = (code, out.split())

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(hosts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            answering = tuple(i + 1 for i, (code, out) in enumerate(results) if out)
            own = {i + 1: out[0] for i, (code, out) in enumerate(results) if out}
            named = collections.Counter(out[1] for code, out in results if len(out) > 1)
            writer = None
            if named:
                uuid = named.most_common(1)[0][0]
                writer = next((f"node {n}" for n, u in own.items() if u == uuid),
                              "a node that does not answer")
            if answering != last_answering:
                self.record.event(f"nodes answering: {', '.join(map(str, answering)) or 'none'}")
                last_answering = answering
            if writer is not None and writer != last_writer:
                self.record.event(f"writer row of {self.args.database}: {writer}")
                last_writer = writer

    # --- the run ----------------------------------------------------------------------------------
    def run(self):
        self.create_database()
        self.start_serve()
        self.record = Record(time.monotonic())
        r = self.record
        queue = f"load-{self.run_id}"
        self.admin = self.client()  # CreateQueue, GetQueueAttributes, DeleteQueue
        url = self.call(self.admin, "CreateQueue", "create_queue", QueueName=queue)[0]
        if url is None:
            raise RuntimeError(f"CreateQueue {queue} failed: {r.timeline[-1:]}")
        url = url["QueueUrl"]
        say(f"queue {queue}; {PRODUCERS} producers and {CONSUMERS} consumers for "
            f"{self.args.seconds} s (started {time.strftime('%H:%M:%S')})")
        monitor = threading.Thread(target=self.monitor, daemon=True)
        monitor.start()
        producers = [threading.Thread(target=self.producer, args=(i, url), daemon=True)
                     for i in range(PRODUCERS)]
        consumers = [threading.Thread(target=self.consumer, args=(i, url), daemon=True)
                     for i in range(CONSUMERS)]
        for t in producers + consumers:
            t.start()
        load_end = time.monotonic() + self.args.seconds
        while time.monotonic() < load_end:
            time.sleep(min(10.0, max(0.0, load_end - time.monotonic())))
            with r.lock:
                say(f"t={r.now():.0f} s: {len(r.acked)} acknowledged, {len(r.received)} received")
        self.stop_producers.set()
        for t in producers:
            t.join(120)
            if t.is_alive():
                r.problems.append("a producer did not stop within 120 s")
        load_seconds = r.now()

        # Drain: until every acknowledged message came and the queue stayed empty for a while,
        # at most --drain seconds (longer than the visibility timeout, so that a message whose
        # receive's answer was lost comes back in time).
        drain_start = time.monotonic()
        drained = False
        while time.monotonic() - drain_start < self.args.drain:
            with r.lock:
                missing = any(mid not in r.received.get(b, ()) for b, (mid, _) in r.acked.items())
                quiet = time.monotonic() - r.last_message_at
            if not missing and quiet >= self.args.quiet:
                drained = True
                break
            time.sleep(0.5)
        self.stop_consumers.set()
        for t in consumers:
            t.join(120)
            if t.is_alive():
                r.problems.append("a consumer did not stop within 120 s")
        self.stop_monitor.set()
        monitor.join(30)
        left = self.call(self.admin, "GetQueueAttributes", "get_queue_attributes", QueueUrl=url,
                         AttributeNames=["ApproximateNumberOfMessages",
                                         "ApproximateNumberOfMessagesNotVisible"])[0]
        return self.report(load_seconds, time.monotonic() - drain_start, drained, left, url)

    def report(self, load_seconds, drain_seconds, drained, left, url):
        r = self.record
        acked, received = r.acked, r.received
        lost = sorted(b for b, (mid, _) in acked.items() if mid not in received.get(b, ()))
        unexpected = sorted(b for b in received if b not in acked and b not in r.unanswered)
        # A second MessageId for a body: a send that the SDK retried after it had committed. One
        # acknowledged at its first attempt should not have one: a copy made inside txmq (a
        # commit retried that had in fact committed). SQS's standard queues allow duplicates, so
        # it is reported, and fails the run only with --strict-copies.
        resent = sorted(b for b, ids in received.items() if len(set(ids)) > 1)
        copied = [b for b in resent if b in acked and acked[b][1] == 1]
        redelivered = sum(len(ids) - len(set(ids)) for ids in received.values())
        deliveries = sum(len(ids) for ids in received.values())

        def longest_gap(stamps, end):
            points = [r.started] + sorted(stamps) + [end]
            gap, at = max((b - a, a) for a, b in zip(points, points[1:]))
            return gap, at - r.started

        load_end = r.started + load_seconds
        send_gap = longest_gap([t for t in r.send_oks if t <= load_end], load_end)
        receive_gap = longest_gap([t for t in r.receive_oks if t <= load_end], load_end)

        print()
        say(f"{load_seconds:.0f} s of load, drain {drain_seconds:.0f} s "
            f"({'empty' if drained else 'NOT drained'})")
        print("  timeline (seconds since the load began, and the wall clock):")
        for t, text in sorted(r.timeline):
            wall = time.strftime("%H:%M:%S", time.localtime(r.started_wall + t))
            print(f"  {t:7.1f} {wall}  {text}")
        rows = [
            ("sends acknowledged (messages)", len(acked)),
            ("send calls failed after the SDK's retries", r.send_calls_failed),
            ("bodies whose send failed (may or may not arrive)", len(r.unanswered)),
            ("received (deliveries)", deliveries),
            ("received (distinct bodies)", len(received)),
            ("redelivered (same MessageId again)", redelivered),
            ("sent twice (SDK resend of a committed send)", len(resent)),
            ("lost (acknowledged, never received)", len(lost)),
            ("unexpected", len(unexpected)),
            ("second copy although acknowledged at the first attempt", len(copied)),
            ("receive calls", r.receives),
            ("longest time without an acknowledged send (s)", f"{send_gap[0]:.1f} at t={send_gap[1]:.1f}"),
            ("longest time without a receive with messages (s)",
             f"{receive_gap[0]:.1f} at t={receive_gap[1]:.1f}"),
            ("slowest call (s)", ", ".join(f"{op} {s:.1f}" for op, s in sorted(r.slowest.items()))),
        ]
        if left is not None:
            attrs = left.get("Attributes", {})
            rows.append(("left in the queue (visible / in flight)",
                         f"{attrs.get('ApproximateNumberOfMessages')} / "
                         f"{attrs.get('ApproximateNumberOfMessagesNotVisible')}"))
        width = max(len(k) for k, _ in rows)
        print()
        for k, v in rows:
            print(f"  {k:<{width}}  {v}")
        print("\n  errors that attempts got (operation, HTTP status, code: count; the SDK retries "
              "them unless marked):")
        for (op, status, code, retried), n in sorted(r.attempt_errors.items()):
            print(f"    {op} {status} {code}: {n}{'' if retried else '  NOT RETRYABLE'}")
        if not r.attempt_errors:
            print("    none")
        print("  exceptions that reached the application (after the SDK's retries):")
        for (op, code, retryable), n in sorted(r.call_errors.items()):
            print(f"    {op} {code}: {n}{'' if retryable else '  NOT RETRYABLE'}")
        if not r.call_errors:
            print("    none")
        print("  batch entries in Failed:")
        for (op, code, sender), n in sorted(r.entry_failures.items()):
            print(f"    {op} {code} (SenderFault {sender}): {n}")
        if not r.entry_failures:
            print("    none")
        log = self.serve_log()
        failed_requests = [line for line in log if FAILED_REQUEST.search(line)]
        print(f"  txmq serve's log: {len(log)} line(s), {len(failed_requests)} of failed requests; "
              f"the first 20:")
        for line in log[:20]:
            print(f"    {line}")

        if lost or unexpected or copied:
            print("  the bodies in question (acknowledged at t, MessageId, attempts; received):")
        for b in (lost + unexpected + copied)[:20]:
            mid, attempts = acked.get(b, ("-", "-"))
            at = r.sent_at.get(b)
            print(f"    {b}: acknowledged at {'-' if at is None else f'{at:.1f}'} {mid} "
                  f"({attempts} attempt(s)); received {received.get(b, [])}")

        failures = list(r.problems)
        # A serve that stops answering would only make failed calls, which the SDK retries: the
        # longest stall bounds that (an outage of the cluster's lasts 6-12 s here).
        for what, (gap, at) in (("an acknowledged send", send_gap),
                                ("a receive that returned messages", receive_gap)):
            if gap > self.args.max_stall:
                failures.append(f"{gap:.1f} s without {what} (from t={at:.1f}; --max-stall "
                                f"{self.args.max_stall:.0f})")
        if copied and self.args.strict_copies:
            failures.append(f"{len(copied)} messages were received twice, with two MessageIds, "
                            f"although their send was acknowledged at its first attempt")
        if lost:
            failures.append(f"{len(lost)} acknowledged sends never received: {lost[:10]}")
        if unexpected:
            failures.append(f"{len(unexpected)} unexpected bodies: {unexpected[:10]}")
        if not acked:
            failures.append("no send was acknowledged")
        bad_attempts = sum(n for (_, _, _, retried), n in r.attempt_errors.items() if not retried)
        if bad_attempts:
            failures.append(f"{bad_attempts} attempt(s) got an error the SDK does not retry")
        bad_calls = sum(n for (_, _, retryable), n in r.call_errors.items() if not retryable)
        if bad_calls:
            failures.append(f"{bad_calls} exception(s) that the SDK does not retry reached the "
                            f"application")
        blamed = sum(n for (_, _, sender), n in r.entry_failures.items() if sender)
        if blamed:
            failures.append(f"{blamed} batch entries failed with SenderFault true")
        if not failures:
            # A tidy database for the next run; a failed run keeps the queue to look at.
            self.call(self.admin, "DeleteQueue", "delete_queue", QueueUrl=url)
        self.admin.close()
        return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("txmq", help="the txmq binary")
    parser.add_argument("dsn", help="the cluster's multi-host DSN (scripts/galera dsn)")
    parser.add_argument("--seconds", type=float, default=150, help="load time (150)")
    parser.add_argument("--database", default="txmq_sqs", help="the serve's database (txmq_sqs)")
    parser.add_argument("--drain", type=float, default=90,
                        help="patience of the drain in seconds (90)")
    parser.add_argument("--quiet", type=float, default=6,
                        help="seconds the queue must stay empty to count as drained (6)")
    parser.add_argument("--dir", help="scratch folder (default: a new one in /tmp)")
    parser.add_argument("--max-stall", type=float, default=45,
                        help="longest time without an acknowledged send, or a receive with "
                             "messages, that passes (45 s)")
    parser.add_argument("--strict-copies", action="store_true",
                        help="fail on a second copy of a message whose send was acknowledged at "
                             "its first attempt (default: reported)")
    args = parser.parse_args()
    if not args.database.replace("_", "").isalnum():
        parser.error(f"--database: letters, digits and _ only: {args.database}")

    # SIGTERM (scripts/fault's trap) ends the run like a failure: serve is killed, by pid.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load = Load(args)
    failures = []
    try:
        failures = load.run()
        problem = load.stop_serve()
        if problem:
            failures.append(problem)
    except Exception as e:
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        load.kill_serve()
    if failures:
        print(f"\ncluster_load: txmq serve's log (stderr), last 40 lines:\n{load.serve_log_tail()}")
        for f in failures:
            print(f"FAILED: {f}", flush=True)
        say(f"scratch folder kept: {load.scratch}")
        return 1
    if not args.dir:
        shutil.rmtree(load.scratch, ignore_errors=True)
    say("PASS: every acknowledged send was received, nothing unexpected, every error one the SDK "
        "retries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
