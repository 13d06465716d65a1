"""txmq serve against hostile HTTP clients, with raw sockets, no SDK: an oversized
body is refused from its header, sixteen 60 MiB uploads cannot exhaust memory, bodies past the
memory budget are answered 503, a flood of idle connections cannot keep /healthz out, a low
RLIMIT_NOFILE (at start, or lowered under a running server until accept meets EMFILE) neither
spins the accept loop nor silences /healthz, silent and slow-header connections are not kept,
and the systemd unit raises LimitNOFILE.

    /usr/bin/python3 tests/sqs/hostile_http.py TXMQ_BINARY

Each test starts its own txmq serve on the database of the usual DSN resolution (CTest's
txmq_server fixture: TXMQ_HOME) and stops it by its pid.
"""
import base64
import collections
import http.client
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

TXMQ = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build/txmq")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRATCH = tempfile.mkdtemp(prefix="txmq-hostile-")
MiB = 1 << 20
# Signed-looking, not signed: the server must bound what it reads before it can tell.
def fake_auth():
    """A well-formed signature of now (without --credentials any such one passes the checks
    made from the header: the body is then read, up to its limit)."""
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return date, (f"AWS4-HMAC-SHA256 Credential=AKIDHOSTILE/{date[:8]}/us-east-1/sqs/aws4_request, "
                  "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "0" * 64)

# Hundreds of sockets on this side too.
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(_hard, 8192) if _hard > 0 else 8192, _hard))


class Serve:
    """txmq serve --listen 127.0.0.1:0 ARGS, its log in a file; stopped by its pid. `exact_rss`:
    without AddressSanitizer's quarantine of freed memory (which counts in RSS), for the tests
    that measure memory."""

    def __init__(self, *args, nofile=None, exact_rss=False):
        e = dict(os.environ)
        e.pop("TXMQ_DSN", None)
        if exact_rss:
            e["ASAN_OPTIONS"] = (e.get("ASAN_OPTIONS", "") +
                                 ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0").lstrip(":")
        self.log_path = os.path.join(SCRATCH, f"serve-{time.monotonic_ns()}.log")
        self.log = open(self.log_path, "w")

        def limit():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen([TXMQ, "serve", "--listen", "127.0.0.1:0", *args], env=e,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     preexec_fn=limit)
        self.line = self.proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.line)
        if not m:
            self.stop()
            raise AssertionError(f"no listening line: {self.line!r} {self.stderr()}")
        self.port = int(m.group(1))
        self.pid = self.proc.pid

    def stderr(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()

    def rss_mib(self):
        with open(f"/proc/{self.pid}/status") as f:
            kib = int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))
        return kib / 1024

    def cpu_seconds(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def connect(self, timeout=10, source=None):
        """A connection, from the loopback address SOURCE (127.0.0.2, ...) when given."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout,
                                        source_address=(source, 0) if source else None)

    def healthz(self, timeout, path="/healthz", source=None):
        """(status or None, seconds) of GET PATH on a new connection (from SOURCE's address)."""
        start = time.monotonic()
        try:
            with self.connect(timeout, source) as c:
                c.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: txmq\r\n"
                          b"Connection: close\r\n\r\n")
                status = status_of(read_head(c, timeout))
        except OSError:
            status = None
        return status, time.monotonic() - start

    def readyz(self, timeout=5):
        """(status, body) of GET /readyz."""
        with self.connect(timeout) as c:
            c.sendall(b"GET /readyz HTTP/1.1\r\nHost: txmq\r\nConnection: close\r\n\r\n")
            data = b""
            c.settimeout(timeout)
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        return status_of(data), data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")

    def settled_rss(self):
        """VmRSS in MiB once it answers /healthz and has settled: the baseline of a memory test."""
        assert self.healthz(5)[0] == 200
        time.sleep(0.5)
        return self.vm("VmRSS")

    def vm(self, field):
        """A VmXXX field of /proc/PID/status, in MiB."""
        with open(f"/proc/{self.pid}/status") as f:
            return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1)) / 1024


def read_head(sock, timeout):
    """The bytes of an answer up to its blank line (less if the connection ends first)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def status_of(head):
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", head)
    return int(m.group(1)) if m else None


def post_head(length, signed=False, extra=""):
    lines = ["POST / HTTP/1.1", "Host: 127.0.0.1", "X-Amz-Target: AmazonSQS.SendMessage",
             "Content-Type: application/x-amz-json-1.0", f"Content-Length: {length}"]
    if signed:
        date, auth = fake_auth()
        lines += [f"Authorization: {auth}", f"X-Amz-Date: {date}"]
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def closed_or_refused(sock):
    """True when the server closed this connection or answered it 503."""
    sock.setblocking(False)
    try:
        data = sock.recv(4096)
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True
    return data == b"" or status_of(data) == 503


class HostileHttp(unittest.TestCase):
    def test_a_an_oversized_declared_body_is_refused_from_its_header(self):
        s = Serve()
        try:
            with s.connect() as c:
                # 60 MiB declared, 1 MiB sent: the answer comes without the rest.
                c.sendall(post_head(60 * MiB, signed=True) + b"A" * MiB)
                head = read_head(c, 5)
                self.assertEqual(status_of(head), 413, head)
                self.assertIn(b"Connection: close", head)
            with s.connect() as c:
                # Unsigned: refused from the header alone, whatever its size.
                c.sendall(post_head(60 * MiB) + b"A" * MiB)
                head = read_head(c, 5)
                self.assertEqual(status_of(head), 403, head)
            # Chunked: refused once past the limit (4 MiB), not read to its end.
            with s.connect() as c:
                date, auth = fake_auth()
                c.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                          b"Content-Type: application/x-amz-json-1.0\r\n"
                          b"X-Amz-Target: AmazonSQS.SendMessage\r\n"
                          + f"X-Amz-Date: {date}\r\nAuthorization: {auth}\r\n\r\n".encode())
                chunk = b"%x\r\n" % MiB + b"B" * MiB + b"\r\n"
                sent = 0
                try:
                    while sent < 60:  # 60 MiB unless the server stops it
                        c.sendall(chunk)
                        sent += 1
                except OSError:
                    pass
                head = read_head(c, 5)
                self.assertEqual(status_of(head), 413, head)
                self.assertLess(sent, 60)
        finally:
            s.stop()

    def test_a_expect_100_continue_is_answered_only_after_admission(self):
        s = Serve()
        try:
            with s.connect() as c:
                c.sendall(post_head(60 * MiB, signed=True, extra="Expect: 100-continue\r\n"))
                self.assertEqual(status_of(read_head(c, 5)), 413)
            with s.connect() as c:
                body = b'{"QueueUrl": "nowhere"}'
                c.sendall(post_head(len(body), signed=True, extra="Expect: 100-continue\r\n"))
                self.assertEqual(read_head(c, 5), b"HTTP/1.1 100 Continue\r\n\r\n")
                c.sendall(body)
                self.assertIsNotNone(status_of(read_head(c, 10)))  # answered (unsigned: 4xx)
        finally:
            s.stop()

    def test_b_sixteen_60_mib_uploads_hold_little_memory_and_healthz_answers(self):
        s = Serve()
        try:
            self.assertEqual(s.healthz(5)[0], 200)
            time.sleep(0.5)
            idle = s.rss_mib()
            answers = []

            def upload(i):
                status = None
                try:
                    with s.connect(30) as c:
                        c.sendall(post_head(60 * MiB, signed=bool(i % 2)))
                        block = b"C" * MiB
                        for _ in range(60):
                            c.sendall(block)
                        status = status_of(read_head(c, 30))
                except OSError:
                    status = "closed"  # refused, then closed while it still sent
                answers.append(status)

            threads = [threading.Thread(target=upload, args=(i,)) for i in range(16)]
            for t in threads:
                t.start()
            peak, probes, next_probe = idle, [], 0.0
            deadline = time.monotonic() + 90
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                peak = max(peak, s.rss_mib())
                if time.monotonic() >= next_probe:
                    probes.append(s.healthz(2))
                    next_probe = time.monotonic() + 0.5
                time.sleep(0.05)
            for t in threads:
                t.join(30)
            peak = max(peak, s.rss_mib())
            print(f"\n  RSS idle {idle:.0f} MiB, peak {peak:.0f} MiB under 16 x 60 MiB uploads; "
                  f"answers {sorted(map(str, answers))}; /healthz {probes[:3]}...",
                  file=sys.stderr)
            self.assertLess(peak - idle, 150, f"RSS {idle:.0f} -> {peak:.0f} MiB")
            self.assertTrue(probes)
            for status, seconds in probes:
                self.assertEqual(status, 200, probes)
            self.assertEqual(s.healthz(2)[0], 200)
        finally:
            s.stop()

    def test_c_idle_connections_over_the_cap_cannot_keep_healthz_out(self):
        s = Serve("--max-connections", "64")
        idle = []
        try:
            for _ in range(200):
                idle.append(s.connect())
            time.sleep(0.5)
            status, seconds = s.healthz(1)
            self.assertEqual(status, 200)
            self.assertLess(seconds, 1)
            deadline = time.monotonic() + 5
            while True:
                gone = sum(closed_or_refused(c) for c in idle)
                if gone >= 200 - 64 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertGreaterEqual(gone, 200 - 64)
        finally:
            for c in idle:
                c.close()
            s.stop()

    def test_d_a_full_descriptor_table_neither_spins_nor_silences_healthz(self):
        s = Serve(nofile=128)
        held = []
        try:
            for _ in range(300):
                held.append(s.connect())
            time.sleep(1)
            before = s.cpu_seconds()
            time.sleep(3)
            spent = s.cpu_seconds() - before
            status, seconds = s.healthz(3)
            print(f"\n  under RLIMIT_NOFILE 128 with 300 connections: {spent:.2f} s of CPU in 3 s; "
                  f"/healthz {status} in {seconds:.2f} s", file=sys.stderr)
            self.assertLess(spent, 0.3)
            self.assertEqual(status, 200)
        finally:
            for c in held:
                c.close()
            s.stop()

    def test_h_declared_bodies_that_never_come_hold_only_a_step_of_the_budget(self):
        # Eight connections declare 4 MiB each (32 MiB against a 4 MiB budget) and send nothing:
        # the budget is held as bytes arrive, so a real request still gets through, and the
        # silent ones are cut off a step's time after the header timeout.
        s = Serve("--max-body-memory", "4")
        silent = []
        try:
            for _ in range(8):
                c = s.connect()
                c.sendall(post_head(4 * MiB, signed=True))
                silent.append(c)
            time.sleep(0.5)
            body = b'{"QueueUrl": "http://127.0.0.1/000000000000/nowhere", "MessageBody": "x"}'
            with s.connect() as c:
                c.sendall(post_head(len(body), signed=True) + body)
                status = status_of(read_head(c, 10))
            self.assertIsNotNone(status)
            self.assertNotEqual(status, 503, "a small request refused: the budget is held by "
                                             "bodies that never came")
        finally:
            for c in silent:
                c.close()
            s.stop()

    def test_g_bodies_past_the_memory_budget_are_answered_503_and_the_budget_comes_back(self):
        s = Serve("--max-body-memory", "4")
        chunk = b"%x\r\n" % (256 << 10) + b"D" * (256 << 10) + b"\r\n"
        date, auth = fake_auth()
        head = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                b"Content-Type: application/x-amz-json-1.0\r\n"
                b"X-Amz-Target: AmazonSQS.SendMessage\r\n"
                + f"X-Amz-Date: {date}\r\nAuthorization: {auth}\r\n\r\n".encode())
        uploads = []
        try:
            # Eight chunked bodies of 1.5 MiB each, held open: 12 MiB against a 4 MiB budget.
            for _ in range(8):
                c = s.connect()
                uploads.append(c)
                try:
                    c.sendall(head + chunk * 6)
                except OSError:
                    pass
            time.sleep(0.5)
            refused = []
            for c in uploads:
                c.settimeout(0.5)
                try:
                    answer = c.recv(4096)
                except (socket.timeout, OSError):
                    continue
                if status_of(answer) == 503:
                    refused.append(answer)
            self.assertTrue(refused, "no 503 past the budget")
            self.assertIn(b"Retry-After: 1", refused[0])
            for c in uploads:
                c.close()
            # Once they are gone, their share of the budget is back: a 3 MiB body is read whole.
            time.sleep(0.5)
            with s.connect() as c:
                c.sendall(head + chunk * 12 + b"0\r\n\r\n")
                status = status_of(read_head(c, 10))
            self.assertIsNotNone(status)
            self.assertNotIn(status, (413, 503))
        finally:
            for c in uploads:
                c.close()
            s.stop()

    def test_d_emfile_itself_neither_spins_nor_silences_healthz(self):
        # The limit lowered under a running server, below its connection cap: accept meets
        # EMFILE, which the cap otherwise prevents.
        s = Serve()
        held = []
        try:
            open_now = len(os.listdir(f"/proc/{s.pid}/fd"))
            resource.prlimit(s.pid, resource.RLIMIT_NOFILE, (open_now + 40, open_now + 40))
            for _ in range(100):
                held.append(s.connect())
            time.sleep(1)
            before = s.cpu_seconds()
            time.sleep(3)
            spent = s.cpu_seconds() - before
            probes = [s.healthz(3) for _ in range(3)]
            print(f"\n  EMFILE with 100 connections: {spent:.2f} s of CPU in 3 s; /healthz {probes}",
                  file=sys.stderr)
            self.assertLess(spent, 0.3)
            for status, seconds in probes:
                self.assertEqual(status, 200)
            self.assertIn("accepting a connection failed", s.stderr())
        finally:
            for c in held:
                c.close()
            s.stop()

    def test_e_the_unit_raises_the_descriptor_limit(self):
        with open(os.path.join(ROOT, "packaging", "txmq-serve.service.in")) as f:
            unit = f.read()
        m = re.search(r"^LimitNOFILE=(\d+)$", unit, re.M)
        self.assertIsNotNone(m, "no LimitNOFILE= in packaging/txmq-serve.service.in")
        self.assertGreaterEqual(int(m.group(1)), 4096 + 1024)  # the default cap and the rest

    def test_f_silent_and_slow_header_connections_are_not_kept(self):
        s = Serve()
        try:
            silent = s.connect()
            slow = s.connect()
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: tx")  # and never the rest
            start = time.monotonic()
            open_ = {"silent": silent, "slow": slow}
            closed_after = {}
            while open_ and time.monotonic() - start < 25:
                for name, c in list(open_.items()):
                    if closed_or_refused(c):
                        closed_after[name] = time.monotonic() - start
                        del open_[name]
                time.sleep(0.25)
            for c in (silent, slow):
                c.close()
            self.assertEqual(sorted(closed_after), ["silent", "slow"], closed_after)
            for seconds in closed_after.values():
                self.assertLess(seconds, 20)
            self.assertEqual(s.healthz(2)[0], 200)
        finally:
            s.stop()


KEY, SECRET = "AKIDROUNDTWO", "SECRETROUNDTWO"


def credentials_file():
    path = os.path.join(SCRATCH, "credentials")
    with open(path, "w") as f:
        f.write(f"{KEY} {SECRET}\n")
    return path


def signed_request(port, body, headers, key=KEY, secret=SECRET, region="us-east-1",
                   content_length=None):
    """The header bytes and body of a POST signed by botocore for REGION (a wrong signature
    when `secret` is not the key's), its Content-Length CONTENT_LENGTH when given (else the
    body's)."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    if isinstance(body, str):
        body = body.encode()
    request = botocore.awsrequest.AWSRequest(
        method="POST", url=f"http://127.0.0.1:{port}/", data=body, headers=headers)
    botocore.auth.SigV4Auth(botocore.credentials.Credentials(key, secret), "sqs",
                            region).add_auth(request)
    lines = ["POST / HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{k}: {v}" for k, v in request.headers.items() if k.lower() != "host"]
    lines.append(f"Content-Length: {len(body) if content_length is None else content_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), body


def signed_call(port, action, body, key=KEY, secret=SECRET, content_length=None):
    """The bytes of a JSON-protocol call, as signed_request."""
    return signed_request(port, body, {"X-Amz-Target": f"AmazonSQS.{action}",
                                       "Content-Type": "application/x-amz-json-1.0"},
                          key=key, secret=secret, content_length=content_length)


def answer(port, data, timeout=30):
    """(status, body bytes) of DATA sent on a new connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(data)
        r = http.client.HTTPResponse(c)
        r.begin()
        return r.status, r.read()


def call(port, action, payload, timeout=30):
    """(status, JSON answer) of a signed JSON-protocol call on a new connection."""
    head, body = signed_call(port, action, json.dumps(payload))
    status, data = answer(port, head + body, timeout)
    try:
        return status, json.loads(data or b"{}")
    except ValueError:
        return status, {"text": data.decode(errors="replace")}


def push(c, data, timeout=5):
    """Sends what the server takes within TIMEOUT; a server that refuses and closes is fine."""
    c.settimeout(timeout)
    try:
        c.sendall(data)
    except OSError:
        pass


def basic_auth():
    return "Basic " + base64.b64encode(f"{KEY}:{SECRET}".encode()).decode()


class RoundTwo(unittest.TestCase):
    """The second review's attacks on memory and admission before authentication (issue 51)."""

    def test_r1_a_header_of_too_many_fields_is_refused_before_it_is_parsed(self):
        s = Serve()
        try:
            def head(fields):
                return (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                        b"".join(b"a%d: b\r\n" % i for i in range(fields - 1)) + b"\r\n")
            with s.connect() as c:
                c.sendall(head(100))
                self.assertEqual(status_of(read_head(c, 5)), 200)
            with s.connect() as c:
                c.sendall(head(101))
                answer = read_head(c, 5)
                self.assertEqual(status_of(answer), 431, answer)
            # The same behind a request in the same packet (pipelined): answered in turn, and
            # the server goes on answering (its refusal once deadlocked an I/O thread).
            for _ in range(4):
                with s.connect() as c:
                    c.sendall(head(1) + b"GET /h HTTP/1.1\r\n" + b"a:\r\n" * 120 + b"\r\n")
                    c.settimeout(5)
                    data = b""
                    while data.count(b"HTTP/1.1 ") < 2 or not data.endswith(b"\n"):
                        try:
                            chunk = c.recv(65536)
                        except (socket.timeout, ConnectionResetError):
                            break
                        if not chunk:
                            break
                        data += chunk
                    self.assertEqual(re.findall(rb"HTTP/1\.1 (\d{3})", data), [b"200", b"431"], data)
                self.assertEqual(s.healthz(3)[0], 200)
            # 300 at once of 6,000 fields (54 KB, under the 64 KiB header limit): each would
            # cost about 470 KiB parsed; all are refused from their bytes.
            statuses = []

            def attack():
                try:
                    with s.connect(30) as c:
                        c.sendall(head(6000))
                        statuses.append(status_of(read_head(c, 30)))
                except OSError:
                    statuses.append("closed")
            threads = [threading.Thread(target=attack) for _ in range(300)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(set(statuses), {431}, collections.Counter(statuses))
            self.assertEqual(s.healthz(2)[0], 200)
        finally:
            s.stop()

    def test_r1_unfinished_headers_are_held_within_the_memory_budget(self):
        # 3,000 connections (from three addresses, under the per-client cap) each send 60 header
        # lines of 1 KiB and never the blank line. Past the first 8 KiB a header's bytes count
        # in the budget's uncredentialed share (12 MiB of 16): the rest are answered 503.
        s = Serve("--max-body-memory", "16", exact_rss=True)
        held = []
        try:
            idle = s.settled_rss()
            line = b"x-pad: " + b"p" * 1017 + b"\r\n"
            for i in range(3000):
                try:
                    c = s.connect(10, f"127.0.0.{2 + i % 3}")
                    push(c, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + line * 60)
                    held.append(c)
                except OSError:
                    pass
            time.sleep(2)
            peak = s.vm("VmHWM")
            probes = [s.healthz(3) for _ in range(4)]
            print(f"\n  3,000 unfinished 60 KiB headers: RSS {idle:.0f} -> peak {peak:.0f} MiB; "
                  f"/healthz {probes}", file=sys.stderr)
            self.assertLess(peak - idle, 100, f"RSS {idle:.0f} -> {peak:.0f} MiB")
            for status, _ in probes:
                self.assertEqual(status, 200, probes)
        finally:
            for c in held:
                c.close()
            s.stop()

    def test_r2_the_dashboard_metrics_and_probes_refuse_a_body_before_reading_it(self):
        s = Serve("--credentials", credentials_file())
        try:
            for head, want in (
                    (b"POST /ui/api/dead/requeue HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n", 401),
                    (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 65536\r\n\r\n",
                     401),
                    (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 65536\r\n"
                     b"Authorization: " + basic_auth().encode() + b"\r\n\r\n", 413),
                    (b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 65536\r\n\r\n",
                     413),
                    (b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n", 413)):
                with s.connect() as c:
                    c.sendall(head)  # and no body: the answer must not wait for it
                    answer = read_head(c, 3)
                    self.assertEqual(status_of(answer), want, (head[:40], answer))
        finally:
            s.stop()

    def test_r2_bodies_without_a_key_leave_a_share_of_the_budget_to_signed_requests(self):
        # 16 dashboard uploads (Basic auth, 1 MiB declared, 900 KiB sent and held) against an
        # 8 MiB budget: they stop at its uncredentialed 6 MiB; a signed call still gets in, and
        # /readyz stays ready. Then signed bodies fill it all: /readyz says busy, until they go.
        s = Serve("--credentials", credentials_file(), "--max-body-memory", "8")
        uploads = []
        try:
            for _ in range(16):
                c = s.connect()
                push(c, b"POST /ui/api/dead/requeue HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Authorization: " + basic_auth().encode() + b"\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n" +
                        b" " * (900 << 10))
                uploads.append(c)
            time.sleep(1)
            status, answer = call(s.port, "GetQueueUrl", {"QueueName": "nowhere-round-two"})
            self.assertNotEqual(status, 503, answer)
            self.assertIn("QueueDoesNotExist", json.dumps(answer))
            self.assertEqual(s.readyz()[0], 200)
            # Signed (a key of the file, a signature of now: all a header can show) bodies of
            # 3.5 MiB held open: the whole budget fills, and a 503 makes /readyz busy.
            for _ in range(4):
                head, _ = signed_call(s.port, "SendMessage", b"", content_length=4 << 20)
                c = s.connect()
                push(c, head + b"{" + b" " * (3500 << 10))
                uploads.append(c)
            time.sleep(1)
            busy = s.readyz()
            self.assertEqual(busy[0], 503, busy)
            self.assertIn("busy", busy[1])
            for c in uploads:
                c.close()
            uploads = []
            time.sleep(3)
            self.assertEqual(s.readyz(), (200, "ok\n"))
        finally:
            for c in uploads:
                c.close()
            s.stop()

    def test_r3_slow_headers_cannot_hold_the_connection_cap(self):
        s = Serve("--max-connections", "100")
        slow = []
        try:
            for _ in range(200):
                c = s.connect()
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: txmq\r\n")  # and never the rest
                slow.append(c)
            time.sleep(0.5)
            probes = [s.healthz(3) for _ in range(8)]
            for status, _ in probes:
                self.assertEqual(status, 200, probes)
        finally:
            for c in slow:
                c.close()
            s.stop()

    def test_r3_one_address_holds_at_most_its_cap(self):
        s = Serve("--max-connections-per-client", "20")
        many, few = [], []
        try:
            for _ in range(60):
                c = s.connect(10, "127.0.0.2")
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: txmq\r\n")
                many.append(c)
            for _ in range(5):
                c = s.connect(10, "127.0.0.3")
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: txmq\r\n")
                few.append(c)
            time.sleep(1)
            closed_many = sum(closed_or_refused(c) for c in many)
            closed_few = sum(closed_or_refused(c) for c in few)
            self.assertGreaterEqual(closed_many, 40)
            self.assertEqual(closed_few, 0)
            self.assertEqual(s.healthz(3, source="127.0.0.2")[0], 200)
            self.assertIn("--max-connections-per-client 20", s.stderr())
        finally:
            for c in many + few:
                c.close()
            s.stop()

    def test_r4_answers_nobody_reads_are_held_within_their_budget_and_lose_nothing(self):
        s = Serve("--max-answer-memory", "16")
        readers = []
        try:
            status, answer = call(s.port, "CreateQueue", {"QueueName": "unread-answers"})
            self.assertEqual(status, 200, answer)
            url = answer["QueueUrl"]
            body = '"' * (200 << 10)  # each quote escaped in JSON: 400 KiB a message
            for i in range(120):
                status, answer = call(s.port, "SendMessage", {"QueueUrl": url,
                                                              "MessageBody": body + str(i)})
                self.assertEqual(status, 200, answer)
            # Twelve receives of ten messages (4 MiB answers) whose clients never read.
            for _ in range(12):
                c = socket.socket()
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                c.connect(("127.0.0.1", s.port))
                head, payload = signed_call(s.port, "ReceiveMessage", json.dumps(
                    {"QueueUrl": url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 2}))
                c.sendall(head + payload)
                readers.append(c)
            deadline = time.monotonic() + 10
            while "--max-answer-memory" not in s.stderr() and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertIn("--max-answer-memory", s.stderr())
            for c in readers:
                c.close()
            readers = []
            # Nothing lost: every message is received (those of dropped answers once their
            # visibility timeout ends).
            seen = set()
            deadline = time.monotonic() + 60
            while len(seen) < 120 and time.monotonic() < deadline:
                status, answer = call(s.port, "ReceiveMessage", {
                    "QueueUrl": url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1})
                self.assertEqual(status, 200, answer)
                for m in answer.get("Messages", []):
                    seen.add(m["Body"][len(body):])
                    call(s.port, "DeleteMessage", {"QueueUrl": url,
                                                   "ReceiptHandle": m["ReceiptHandle"]})
            self.assertEqual(len(seen), 120)
        finally:
            for c in readers:
                c.close()
            s.stop()

    def test_r6_a_transfer_encoding_other_than_chunked_alone_is_refused(self):
        s = Serve()
        try:
            date, auth = fake_auth()
            # (Beast refuses "gzip, chunked" beside a Content-Length itself: 400 too.)
            for coding, want in (("chunked, chunked", 400), ("gzip, chunked", (400, 501)),
                                 ("xchunked", 400), ("chunked , gzip", 400),
                                 ("\r\nTransfer-Encoding: gzip", 400), ("", 400)):
                with s.connect() as c:
                    c.sendall(f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              f"X-Amz-Target: AmazonSQS.ListQueues\r\n"
                              f"Content-Type: application/x-amz-json-1.0\r\n"
                              f"X-Amz-Date: {date}\r\nAuthorization: {auth}\r\n"
                              f"Transfer-Encoding: {coding}\r\nContent-Length: 4\r\n\r\n"
                              f"abcdGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                    c.settimeout(5)
                    data = b""
                    while True:
                        try:
                            chunk = c.recv(65536)
                        except (socket.timeout, ConnectionResetError):
                            break
                        if not chunk:
                            break
                        data += chunk
                    self.assertIn(status_of(data), want if isinstance(want, tuple) else (want,),
                                  (coding, data))
                    self.assertEqual(data.count(b"HTTP/1.1 "), 1, (coding, data))
        finally:
            s.stop()

    def test_r7_a_body_refused_for_the_budget_is_freed_when_refused(self):
        # A holds 8 MiB of a 64 MiB budget; B sends 57 MiB and pauses: refused at about 56 MiB,
        # its share of the budget given back at once, so its bytes must go at once too (not
        # after its 2 s linger, while others reuse the share: that passed the budget).
        s = Serve("--max-body-memory", "64", exact_rss=True)
        conns = []
        try:
            idle = s.settled_rss()

            def upload(declared, sent):
                c = s.connect(30)
                conns.append(c)
                head = post_head(declared, signed=True).replace(b"AmazonSQS.SendMessage",
                                                                b"Txmq.SendMessageBatch")
                push(c, head + b"{" + b" " * (sent - 1), timeout=10)
                return c
            upload(16 * MiB, 8 * MiB)
            b = upload(60 * MiB, 57 * MiB)
            self.assertEqual(status_of(read_head(b, 10)), 503)
            held = 0
            for _ in range(5):  # within B's linger
                held = max(held, s.vm("VmRSS") - idle)
                time.sleep(0.1)
            print(f"\n  56 MiB refused beside 8 MiB held: {held:.0f} MiB over idle during its linger",
                  file=sys.stderr)
            self.assertLess(held, 8 + 24)
        finally:
            for c in conns:
                c.close()
            s.stop()

    def test_r7_refused_bodies_are_freed_when_refused(self):
        # 16 Txmq.SendMessageBatch bodies of 60 MiB signed by a key of the file with a wrong
        # secret (each passes every check a header allows) against the 256 MiB budget.
        s = Serve("--credentials", credentials_file(), exact_rss=True)
        try:
            idle = s.settled_rss()

            def upload():
                head, _ = signed_call(s.port, "SendMessage", b"", secret="wrong",
                                      content_length=60 * MiB)
                head = head.replace(b"AmazonSQS.SendMessage", b"Txmq.SendMessageBatch")
                try:
                    with s.connect(60) as c:
                        c.sendall(head)
                        block = b"[" + b" " * (MiB - 1)
                        for _ in range(60):
                            c.sendall(block)
                            block = b" " * MiB
                            time.sleep(0.05)  # paced: all sixteen grow together
                        read_head(c, 30)
                except OSError:
                    pass
            threads = [threading.Thread(target=upload) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            peak = s.vm("VmHWM")
            print(f"\n  16 x 60 MiB wrongly signed: RSS {idle:.0f} -> peak {peak:.0f} MiB",
                  file=sys.stderr)
            self.assertLess(peak - idle, 256 + 32, f"RSS {idle:.0f} -> {peak:.0f} MiB")
            self.assertEqual(s.healthz(2)[0], 200)
        finally:
            s.stop()


def signed_query(port, body, region="us-east-1", key=KEY, secret=SECRET):
    """The bytes of a Query-protocol POST, as signed_request."""
    head, data = signed_request(
        port, body, {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        key=key, secret=secret, region=region)
    return head + data


class RefusedSignatures(unittest.TestCase):
    """Issue 54, item 4: a refused signature or key leaves a log line, in both protocols, and a
    flood of them leaves a bounded number of lines that count the rest."""

    def test_each_refusal_is_logged_and_a_flood_is_counted(self):
        s = Serve("--credentials", credentials_file())
        try:
            def lines():
                return [l for l in s.stderr().splitlines() if " 403 " in l or " 400 " in l]

            head, body = signed_call(s.port, "ListQueues", "{}", secret="not-the-secret")
            self.assertEqual(answer(s.port, head + body)[0], 403)
            head, body = signed_call(s.port, "ListQueues", "{}", key="AKIDUNKNOWN")
            self.assertEqual(answer(s.port, head + body)[0], 403)
            query = "Action=ListQueues&Version=2012-11-05"
            status, text = answer(s.port, signed_query(s.port, query, region="eu-west-1"))
            self.assertEqual(status, 403, text)
            status, text = answer(s.port, signed_query(s.port, query, secret="wrong"))
            self.assertEqual(status, 403, text)
            status, text = answer(s.port, signed_query(s.port, query))
            self.assertEqual(status, 200, text)
            logged = lines()
            for code in ("SignatureDoesNotMatch", "InvalidClientTokenId", "eu-west-1"):
                self.assertTrue(any(code in l for l in logged), (code, logged))
            self.assertEqual(len(logged), 4, logged)
            # A flood: 300 more, as fast as they come.
            for i in range(300):
                head, body = signed_call(s.port, "ListQueues", "{}",
                                         secret="wrong" if i % 2 else SECRET,
                                         key=KEY if i % 2 else "AKIDUNKNOWN")
                self.assertEqual(answer(s.port, head + body)[0], 403)
            flood = lines()[4:]
            self.assertLessEqual(len(flood), 30, flood[-5:])
            time.sleep(10.5)  # the throttle's window passes: the next refusal counts the rest
            head, body = signed_call(s.port, "ListQueues", "{}", secret="wrong")
            self.assertEqual(answer(s.port, head + body)[0], 403)
            deadline = time.monotonic() + 5
            while not any("not logged" in l for l in lines()) and time.monotonic() < deadline:
                time.sleep(0.1)
            counted = [l for l in lines() if "more refused requests not logged" in l]
            self.assertTrue(counted, lines()[-3:])
            held = sum(int(re.search(r"\((\d+) more refused", l).group(1)) for l in counted)
            self.assertEqual(held + len(lines()) - 4, 301, lines()[-3:])
        finally:
            s.stop()


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
