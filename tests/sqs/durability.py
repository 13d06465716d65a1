#!/usr/bin/python3
"""Messages that SendMessage acknowledged survive kill -9 of txmq serve and of MariaDB.

    tests/sqs/durability.py TXMQ_BINARY

Starts a private MariaDB (txmq local start in a scratch TXMQ_HOME) and txmq serve on it; 8
threads send 2,000 messages with SendMessage through boto3 (Debian's, Query protocol), each
retried until acknowledged, recording every acknowledged MessageId. Meanwhile txmq serve is
killed with SIGKILL and restarted, then the MariaDB server is (by the pid txmq local status
gives), restarted with txmq local start, and serve restarted. Then everything is received and
deleted: every acknowledged message must come back; a body may come twice only when one of its
sends went unanswered (and was retried). Stops everything it started, by pid.
"""
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import boto3
from botocore.config import Config

THREADS = 8
PER_THREAD = 250
REGION = "us-east-1"


class Harness:
    def __init__(self, txmq):
        self.txmq = txmq
        self.scratch = tempfile.mkdtemp(prefix="txmq-durability-")
        self.home = os.path.join(self.scratch, "home")
        self.env = dict(os.environ, TXMQ_HOME=self.home)
        self.env.pop("TXMQ_DSN", None)
        self.key = "AKIDDURABLE" + "".join(random.choice("0123456789ABCDEF") for _ in range(8))
        self.secret = "".join(random.choice("0123456789abcdef") for _ in range(40))
        self.credentials = os.path.join(self.scratch, "credentials")
        with open(self.credentials, "w") as f:
            f.write(f"{self.key} {self.secret}\n")
        self.serve = None
        self.serve_log = None
        self.endpoint = None
        self.generation = 0  # bumped when the endpoint changes
        self.problems = []
        self.dsn = None

    # --- the MariaDB server -------------------------------------------------------------------
    def local(self, command):
        out = subprocess.run([self.txmq, "--json", "local", command], env=self.env, check=True,
                             capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout) if out.stdout.strip() else {}

    def start_database(self):
        started = time.monotonic()
        self.local("start")
        status = self.local("status")
        if not status.get("running"):
            raise RuntimeError(f"txmq local start: not running: {status}")
        self.dsn = status["dsn"]
        print(f"durability: MariaDB pid {status['pid']} ready in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        return status["pid"]

    # --- txmq serve ---------------------------------------------------------------------------
    def start_serve(self):
        self.serve_log = open(os.path.join(self.scratch, "serve.err"), "a")
        self.serve = subprocess.Popen(
            [self.txmq, "serve", "--dsn", self.dsn, "--listen", "127.0.0.1:0",
             "--credentials", self.credentials],
            stdout=subprocess.PIPE, stderr=self.serve_log, env=self.env, text=True)
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.serve.stdout], [], [], 0.5)
            if ready:
                line = self.serve.stdout.readline()
                break
            if self.serve.poll() is not None:
                break
        prefix = "txmq serve: listening on "
        if not line.startswith(prefix):
            raise RuntimeError(f"txmq serve did not start: {line!r}, exit {self.serve.poll()}; "
                               f"log: {self.tail_log()}")
        self.endpoint = line[len(prefix):].split()[0]
        self.generation += 1
        print(f"durability: txmq serve pid {self.serve.pid} at {self.endpoint}", flush=True)

    def kill_serve(self):
        self.serve.kill()
        self.serve.wait()
        print(f"durability: killed txmq serve (pid {self.serve.pid}) with SIGKILL", flush=True)

    def stop_serve(self, why):
        self.serve.send_signal(signal.SIGTERM)
        try:
            status = self.serve.wait(30)
        except subprocess.TimeoutExpired:
            self.problems.append(f"txmq serve did not exit within 30 s of SIGTERM ({why})")
            # Where it hangs: every thread's stack, for the log.
            if shutil.which("gdb"):
                stacks = subprocess.run(["gdb", "-p", str(self.serve.pid), "-batch", "-ex",
                                         "thread apply all bt"], capture_output=True, text=True,
                                        timeout=120)
                print(stacks.stdout[-20000:], flush=True)
            self.serve.kill()
            self.serve.wait()
            return
        if status != 0:
            self.problems.append(f"txmq serve exited {status} after SIGTERM ({why}); log: "
                                 f"{self.tail_log()}")

    def tail_log(self):
        try:
            with open(os.path.join(self.scratch, "serve.err")) as f:
                return "".join(f.readlines()[-10:])
        except OSError:
            return ""

    def client(self, endpoint):
        config = Config(retries={"mode": "standard", "total_max_attempts": 1},
                        connect_timeout=2, read_timeout=15)
        return boto3.session.Session().client(
            "sqs", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=self.key,
            aws_secret_access_key=self.secret, config=config)

    def cleanup(self):
        if self.serve is not None and self.serve.poll() is None:
            self.serve.kill()
            self.serve.wait()
        try:
            status = self.local("status")
            self.local("stop")
            if status.get("pid"):
                try:  # stop waits for it; a server that would not stop is killed
                    os.kill(status["pid"], 0)
                    os.kill(status["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        except Exception as e:  # reported, cleanup goes on
            print(f"durability: stopping MariaDB: {e}", file=sys.stderr)
        shutil.rmtree(self.scratch, ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    h = Harness(sys.argv[1])
    try:
        return run(h)
    finally:
        h.cleanup()


def run(h):
    mariadb_pid = h.start_database()
    h.start_serve()
    queue = f"durable-{random.randrange(16 ** 8):08x}"
    url_path = h.client(h.endpoint).create_queue(QueueName=queue)["QueueUrl"]
    path = url_path[url_path.index("/", len("http://")):]  # /ACCOUNT/QUEUE, on any endpoint

    lock = threading.Lock()
    acked = {}            # body -> MessageId of the acknowledged send
    unanswered = set()    # bodies with a send that failed or got no answer
    stop_at = time.monotonic() + 150

    def sender(t):
        client, generation = None, None
        for i in range(PER_THREAD):
            body = f"m-{t}-{i}"
            while time.monotonic() < stop_at:
                if generation != h.generation:
                    generation, endpoint = h.generation, h.endpoint
                    client = h.client(endpoint)
                try:
                    r = client.send_message(QueueUrl=endpoint + path, MessageBody=body)
                    with lock:
                        acked[body] = r["MessageId"]
                    break
                except Exception:  # no answer, or an error: it may or may not have committed
                    with lock:
                        unanswered.add(body)
                    time.sleep(0.2)
            time.sleep(0.04)  # spread the sends over the kills

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()

    def wait_for(count):
        while len(acked) < count and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        return len(acked)

    print(f"durability: {wait_for(400)} acknowledged; killing txmq serve", flush=True)
    h.kill_serve()
    time.sleep(0.5)
    h.start_serve()

    print(f"durability: {wait_for(1000)} acknowledged; killing MariaDB (pid {mariadb_pid})",
          flush=True)
    os.kill(mariadb_pid, signal.SIGKILL)
    time.sleep(1.0)
    h.start_database()
    h.stop_serve("after the database was killed and restarted")
    h.start_serve()

    for t in threads:
        t.join()
    total = THREADS * PER_THREAD
    print(f"durability: {len(acked)} of {total} acknowledged; {len(unanswered)} bodies had a "
          f"send without an answer", flush=True)

    client = h.client(h.endpoint)
    url = h.endpoint + path
    received = {}  # body -> [MessageId, ...]
    empty = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (len(received) < len(acked) or empty < 2):
        messages = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                          WaitTimeSeconds=1, VisibilityTimeout=120).get(
                                              "Messages", [])
        empty = 0 if messages else empty + 1
        for m in messages:
            received.setdefault(m["Body"], []).append(m["MessageId"])
        if messages:
            result = client.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                for n, m in enumerate(messages)])
            if result.get("Failed"):
                h.problems.append(f"delete_message_batch failed: {result['Failed']}")
    h.stop_serve("at the end")

    lost = sorted(set(acked) - set(received))
    unexpected = sorted(set(received) - set(acked) - unanswered)
    duplicated = sorted(b for b, ids in received.items() if len(ids) > 1 and b not in unanswered)
    wrong_id = sorted(b for b, mid in acked.items()
                      if b in received and b not in unanswered and received[b] != [mid])
    print(f"durability: received {sum(map(len, received.values()))} messages, "
          f"{len(received)} distinct bodies", flush=True)
    failed = False
    if len(acked) != total:
        print(f"FAILED: only {len(acked)} of {total} sends were acknowledged before the "
              f"deadline", file=sys.stderr)
        failed = True
    for what, items in (("acknowledged but never received (lost)", lost),
                        ("received but never sent", unexpected),
                        ("received twice although every send was answered", duplicated),
                        ("received with another MessageId than acknowledged", wrong_id)):
        if items:
            print(f"FAILED: {len(items)} {what}: {items[:10]}", file=sys.stderr)
            failed = True
    for p in h.problems:
        print(f"FAILED: {p}", file=sys.stderr)
        failed = True
    if failed:
        return 1
    print("durability: every acknowledged message was received")
    return 0


if __name__ == "__main__":
    sys.exit(main())
