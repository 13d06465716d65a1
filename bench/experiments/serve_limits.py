"""What txmq serve holds under hostile or heavy load: a program that prints figures.

    /usr/bin/python3 bench/experiments/serve_limits.py TXMQ_BINARY [--queues N] [--skip-uploads]

Starts a private MariaDB (txmq local start in a scratch TXMQ_HOME) and a txmq serve without
--credentials on it, then measures:
  1. serve's RSS idle, with 2,000 idle connections open, and while 16 connections each send a
     60 MiB body (half of them with a well-formed signature header, half without);
  2. long polls on N queues (default 1,000): serve's threads and its database connections while
     one ReceiveMessage (WaitTimeSeconds 20) waits on each queue, against the same with one
     queue polled; then the wake-up latency of 100 single sends to random polled queues (from
     SendMessage's answer to the waiting ReceiveMessage's answer).
Stops everything it started, by pid.
"""
import json
import os
import random
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

TXMQ = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/txmq"
QUEUES = int(sys.argv[sys.argv.index("--queues") + 1]) if "--queues" in sys.argv else 1000
SKIP_UPLOADS = "--skip-uploads" in sys.argv
MiB = 1 << 20
SCRATCH = tempfile.mkdtemp(prefix="txmq-serve-limits-")
ENV = dict(os.environ, TXMQ_HOME=os.path.join(SCRATCH, "home"))
ENV.pop("TXMQ_DSN", None)

_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(_hard, 65536), _hard))


def txmq(*args):
    return subprocess.run([TXMQ, *args], env=ENV, capture_output=True, text=True, timeout=120)


def fake_auth():
    # Without --credentials any well-formed signature of now passes.
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return date, (f"AWS4-HMAC-SHA256 Credential=AKIDLIMITS/{date[:8]}/us-east-1/sqs/aws4_request, "
                  "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "0" * 64)


def request(port, action, body, timeout=30):
    """One JSON-protocol call on a fresh connection: (status, parsed body)."""
    data = json.dumps(body).encode()
    date, auth = fake_auth()
    head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.{action}\r\n"
            f"X-Amz-Date: {date}\r\nAuthorization: {auth}\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + data)
        chunks = []
        while True:
            got = s.recv(65536)
            if not got:
                break
            chunks.append(got)
    raw = b"".join(chunks)
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(payload) if payload else {}


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"Threads:\s+(\d+)", f.read()).group(1))


def db_connections(socket_path):
    out = subprocess.run(["mariadb", "--socket", socket_path, "-uroot", "-N", "-e",
                          "SHOW GLOBAL STATUS LIKE 'Threads_connected'"],
                         capture_output=True, text=True, timeout=30)
    return int(out.stdout.split()[1])


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    assert txmq("local", "start").returncode == 0
    status = json.loads(txmq("local", "status", "--json").stdout)
    serve = subprocess.Popen([TXMQ, "serve", "--listen", "127.0.0.1:0"], env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r"127\.0\.0\.1:(\d+)", serve.stdout.readline()).group(1))
        time.sleep(1)
        pid = serve.pid
        print(f"serve: RSS idle {rss_mib(pid):.0f} MiB, {threads_of(pid)} threads, "
              f"database connections (server-wide) {db_connections(status['socket'])}")

        # 1. Idle connections, then uploads.
        idle = []
        for _ in range(2000):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(2)
        print(f"serve: RSS with 2,000 idle connections {rss_mib(pid):.0f} MiB")
        for s in idle:
            s.close()
        time.sleep(1)
        if not SKIP_UPLOADS:
            base = rss_mib(pid)
            peak = [base]
            answers = []

            def upload(i):
                date, auth = fake_auth()
                head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        "Content-Type: application/x-amz-json-1.0\r\n"
                        "X-Amz-Target: AmazonSQS.SendMessage\r\n"
                        f"Content-Length: {60 * MiB}\r\n")
                if i % 2:
                    head += f"X-Amz-Date: {date}\r\nAuthorization: {auth}\r\n"
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                        s.sendall((head + "\r\n").encode())
                        for _ in range(60):
                            s.sendall(b"x" * MiB)
                        answers.append(s.recv(64).split(b"\r\n")[0].decode())
                except OSError as e:
                    answers.append(f"closed ({type(e).__name__})")

            workers = [threading.Thread(target=upload, args=(i,)) for i in range(16)]
            for w in workers:
                w.start()
            while any(w.is_alive() for w in workers):
                peak.append(rss_mib(pid))
                time.sleep(0.05)
            print(f"serve: RSS while 16 connections each send a 60 MiB body: from {base:.0f} to "
                  f"at most {max(peak):.0f} MiB; answers: "
                  f"{sorted(set(answers))}")

        # 2. Long polls on many queues.
        names = [f"poll{i:05d}" for i in range(QUEUES)]
        urls = []
        for n in names:
            code, out = request(port, "CreateQueue", {"QueueName": n})
            assert code == 200, out
            urls.append(out["QueueUrl"])
        received = {}

        def poll(url):
            start = time.monotonic()
            code, out = request(port, "ReceiveMessage",
                                {"QueueUrl": url, "WaitTimeSeconds": 20}, timeout=40)
            received[url] = (time.monotonic(), code, out.get("Messages", []), start)

        for label, polled in (("1 queue", urls[:1]), (f"{QUEUES} queues", urls)):
            received.clear()
            pollers = [threading.Thread(target=poll, args=(u,)) for u in polled]
            for p in pollers:
                p.start()
            time.sleep(max(4, len(polled) / 200))
            print(f"long polls on {label}: serve has {threads_of(pid)} threads, the database "
                  f"{db_connections(status['socket'])} connections (server-wide)")
            if len(polled) > 1:
                woken = random.sample(polled, min(100, len(polled)))
                latencies = []
                for url in woken:
                    code, _ = request(port, "SendMessage", {"QueueUrl": url, "MessageBody": "hi"})
                    sent_at = time.monotonic()
                    assert code == 200
                    while url not in received and time.monotonic() - sent_at < 5:
                        time.sleep(0.0005)
                    if url in received:
                        latencies.append((received[url][0] - sent_at) * 1000)
                print(f"wake-up of {len(latencies)} of {len(woken)} polls within 5 s: "
                      f"p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} "
                      f"ms, max {max(latencies):.1f} ms")
            for p in pollers:
                p.join(30)
    finally:
        serve.terminate()
        try:
            serve.wait(20)
        except subprocess.TimeoutExpired:
            serve.kill()
        txmq("local", "stop")
        shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
