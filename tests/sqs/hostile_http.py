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
    """txmq serve --listen 127.0.0.1:0 ARGS, its log in a file; stopped by its pid."""

    def __init__(self, *args, nofile=None):
        e = dict(os.environ)
        e.pop("TXMQ_DSN", None)
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

    def connect(self, timeout=10):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def healthz(self, timeout):
        """(status or None, seconds) of GET /healthz on a new connection."""
        start = time.monotonic()
        try:
            with self.connect(timeout) as c:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: txmq\r\nConnection: close\r\n\r\n")
                status = status_of(read_head(c, timeout))
        except OSError:
            status = None
        return status, time.monotonic() - start


def read_head(sock, timeout):
    """The bytes of an answer up to its blank line (less if the connection ends first)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
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


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
