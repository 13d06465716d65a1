"""txmq serve's operability: --config FILE (its settings, the command line over it, its errors,
the DSN's order), --log-format json, the probes /healthz and /readyz, and GET /metrics with
`txmq metrics` (promtool's check, and values after known SQS calls).

    /usr/bin/python3 tests/sqs/ops.py TXMQ_BINARY

The servers of ConfigAndLogs run on the database of the usual DSN resolution (CTest's txmq_server
fixture: TXMQ_HOME). Readiness starts a private MariaDB of its own (txmq local start in a scratch
TXMQ_HOME), stops it under a running txmq serve and starts it again; everything is stopped by
pid, never by name.
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import boto3
import botocore.config
import botocore.exceptions

TXMQ = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else "build/txmq")
SCRATCH = tempfile.mkdtemp(prefix="txmq-ops-")
KEY, SECRET = "AKIDOPS", "ops-secret-" + os.urandom(8).hex()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(home=None, **extra):
    e = dict(os.environ)
    e.pop("TXMQ_DSN", None)
    if home:
        e["TXMQ_HOME"] = home
    e.update(extra)
    return e


def txmq(*args, home=None):
    return subprocess.run([TXMQ, *args], env=env(home), capture_output=True, text=True, timeout=120)


def local_dsn(home=None):
    out = txmq("local", "status", "--json", home=home)
    return json.loads(out.stdout)["dsn"]


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def get(url, method="GET", headers=None):
    """(status, body) of a plain request; HTTP errors are answers too."""
    try:
        request = urllib.request.Request(url, method=method, headers=headers or {})
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Serve:
    """A txmq serve started in `cwd` with ARGS; its listening line read from stdout."""

    def __init__(self, *args, cwd=SCRATCH, home=None, **extra_env):
        self.proc = subprocess.Popen([TXMQ, "serve", *args], cwd=cwd, env=env(home, **extra_env),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", self.line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"no listening line: {self.line!r} {self.proc.stderr.read()}")
        self.url, self.port = m.group(1), int(m.group(2))

    def client(self, region, key=KEY, secret=SECRET):
        return boto3.client("sqs", endpoint_url=self.url, region_name=region,
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            config=botocore.config.Config(retries={"max_attempts": 0}))

    def terminate(self):
        """SIGTERM; returns (exit status, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(30)
        log = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return status, log

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if not stream.closed:
                stream.close()


class ConfigAndLogs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(SCRATCH, "etc")
        os.mkdir(cls.dir)
        write(os.path.join(cls.dir, "keys"), f"# the test's key\n{KEY} {SECRET}\n")
        cls.port = free_port()
        # As packaged: /etc/txmq/serve.conf, credentials beside it, the DSN in the environment.
        cls.config = write(os.path.join(cls.dir, "serve.conf"), f"""# txmq serve --config
listen = "127.0.0.1:{cls.port}"
credentials = "keys"          # relative to this file's directory
region = "eu-west-3"
account-id = "123456789012"
workers = 3
log-format = "json"
""", 0o644)

    def test_the_files_settings_take_effect_and_logs_are_json(self):
        # Started elsewhere: the credentials path is the file's directory's, not the cwd's.
        s = Serve("--config", self.config, cwd="/")
        try:
            self.assertEqual(s.port, self.port)
            listening = json.loads(s.line)
            self.assertEqual(listening["level"], "info")
            self.assertRegex(listening["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertTrue(listening["msg"].startswith("listening on http://127.0.0.1:"))
            self.assertEqual((listening["region"], listening["account"], listening["workers"]),
                             ("eu-west-3", "123456789012", 3))
            self.assertEqual(listening["credentials"], os.path.join(self.dir, "keys"))
            sqs = s.client("eu-west-3")
            url = sqs.create_queue(QueueName=f"ops{os.getpid()}")["QueueUrl"]
            self.assertIn("/123456789012/", url)
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"]["QueueArn"]
            self.assertEqual(arn, f"arn:aws:sqs:eu-west-3:123456789012:ops{os.getpid()}")
            # The file's credentials are checked: a wrong secret is refused (and logged).
            with self.assertRaises(botocore.exceptions.ClientError) as e:
                s.client("eu-west-3", secret="wrong").list_queues()
            self.assertEqual(e.exception.response["Error"]["Code"], "SignatureDoesNotMatch")
            with self.assertRaises(botocore.exceptions.ClientError):
                sqs.get_queue_url(QueueName="ops-no-such-queue")
            for probe in ("/healthz", "/readyz"):
                self.assertEqual(get(s.url + probe), (200, "ok\n"))
                self.assertEqual(get(s.url + probe, "HEAD"), (200, ""))
            sqs.delete_queue(QueueUrl=url)
        finally:
            status, log = s.terminate()
            s.kill()
        self.assertEqual(status, 0, log)
        lines = [json.loads(line) for line in log.splitlines()]  # every line is one object
        for line in lines:
            self.assertEqual(set(line) & {"time", "level", "msg"}, {"time", "level", "msg"})
        failed = [x for x in lines if x.get("action") == "GetQueueUrl"]
        self.assertEqual(len(failed), 1, log)
        self.assertEqual((failed[0]["level"], failed[0]["status"], failed[0]["code"]),
                         ("warning", 400, "QueueDoesNotExist"))
        self.assertTrue(failed[0]["request_id"])
        self.assertTrue(any(x.get("code") == "SignatureDoesNotMatch" for x in lines), log)
        self.assertEqual(lines[-1]["msg"], "SIGTERM: stopping (answering the requests it holds)")
        self.assertEqual(lines[-1]["signal"], "SIGTERM")
        self.assertNotIn(SECRET, log)

    def test_the_command_line_wins_over_the_file(self):
        s = Serve("--config", self.config, "--listen", "127.0.0.1:0", "--region", "us-west-2",
                  "--log-format", "text", "--workers", "2")
        try:
            self.assertNotEqual(s.port, self.port)
            self.assertTrue(s.line.startswith("txmq serve: listening on http://127.0.0.1:"), s.line)
            self.assertIn("region us-west-2, account 123456789012", s.line)
            sqs = s.client("us-west-2")
            url = sqs.create_queue(QueueName=f"opscli{os.getpid()}")["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"]["QueueArn"]
            self.assertTrue(arn.startswith("arn:aws:sqs:us-west-2:123456789012:"), arn)
            sqs.delete_queue(QueueUrl=url)
        finally:
            status, log = s.terminate()
            s.kill()
        self.assertEqual(status, 0, log)
        self.assertTrue(log.startswith("txmq serve: SIGTERM"), log)

    def test_a_server_of_several_regions_answers_each_in_its_own(self):
        s = Serve("--config", self.config, "--listen", "127.0.0.1:0",
                  "--region", "us-east-1,eu-west-1", "--log-format", "text")
        try:
            self.assertIn("region us-east-1,eu-west-1, account 123456789012", s.line)
            east, west = s.client("us-east-1"), s.client("eu-west-1")
            name, dlq = f"opsregion{os.getpid()}", f"opsregiondlq{os.getpid()}"
            url = east.create_queue(QueueName=name)["QueueUrl"]
            dlq_url = east.create_queue(QueueName=dlq)["QueueUrl"]
            self.assertEqual(west.get_queue_url(QueueName=name)["QueueUrl"], url)

            def arn(client, queue_url):
                return client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
                    "Attributes"]["QueueArn"]

            self.assertEqual(arn(east, url), f"arn:aws:sqs:us-east-1:123456789012:{name}")
            self.assertEqual(arn(west, url), f"arn:aws:sqs:eu-west-1:123456789012:{name}")
            # A RedrivePolicy set in one region names the same queue in the other's ARN.
            west.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": arn(west, dlq_url), "maxReceiveCount": 2})})
            for client, region in ((east, "us-east-1"), (west, "eu-west-1")):
                policy = json.loads(client.get_queue_attributes(
                    QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"])
                self.assertEqual(policy["deadLetterTargetArn"],
                                 f"arn:aws:sqs:{region}:123456789012:{dlq}")
                self.assertEqual(client.list_dead_letter_source_queues(QueueUrl=dlq_url)[
                    "queueUrls"], [url])
            # The same policy asked again in the other region: the queue exists with it.
            self.assertEqual(east.create_queue(QueueName=name, Attributes={"RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": arn(east, dlq_url), "maxReceiveCount": 2})})["QueueUrl"], url)
            west.send_message(QueueUrl=url, MessageBody="from the west")
            got = east.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
            self.assertEqual(got[0]["Body"], "from the west")
            # A region the server does not answer: refused, saying which it answers.
            with self.assertRaises(botocore.exceptions.ClientError) as e:
                s.client("ap-south-1").list_queues()
            self.assertEqual(e.exception.response["Error"]["Code"], "SignatureDoesNotMatch")
            self.assertIn("'us-east-1,eu-west-1'", e.exception.response["Error"]["Message"])
            west.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
            for q in (url, dlq_url):
                east.delete_queue(QueueUrl=q)
        finally:
            status, log = s.terminate()
            s.kill()
        self.assertEqual(status, 0, log)
        # Any region: "*".
        s = Serve("--config", self.config, "--listen", "127.0.0.1:0", "--region", "*")
        try:
            self.assertIn("region *,", s.line)
            self.assertIsInstance(s.client("me-central-1").list_queues(), dict)
        finally:
            s.terminate()
            s.kill()
        for bad in ("us-east-1,,eu-west-1", "US-EAST-1", "eu-west-1,eu-west-1"):
            r = subprocess.run([TXMQ, "serve", "--listen", "127.0.0.1:0", "--region", bad],
                               env=env(), capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1, (bad, r.stderr))
            self.assertIn("--region", r.stderr)

    def test_the_dsn_order_is_dsn_option_then_TXMQ_DSN_then_the_file(self):
        real = local_dsn()
        nowhere = f"mysql://nobody@127.0.0.1:{free_port()}/txmq?connect_timeout=1"
        config = write(os.path.join(self.dir, "dsn.conf"),
                       f'listen = "127.0.0.1:0"\ndsn = "{nowhere}"\n')
        # The environment (a unit's EnvironmentFile) over the file.
        s = Serve("--config", config, TXMQ_DSN=real)
        try:
            self.assertIn("DSN from TXMQ_DSN", s.line)
            self.assertEqual(get(s.url + "/readyz"), (200, "ok\n"))
        finally:
            self.assertEqual(s.terminate()[0], 0)
            s.kill()
        # --dsn over both.
        s = Serve("--config", config, "--dsn", real, TXMQ_DSN=nowhere)
        try:
            self.assertIn("DSN from --dsn", s.line)
        finally:
            self.assertEqual(s.terminate()[0], 0)
            s.kill()
        # Else the file's: here nothing listens, so serve fails fast with the database's code.
        r = subprocess.run([TXMQ, "serve", "--config", config], env=env(), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("127.0.0.1", r.stderr)
        # A password in a file that every user may read gets a warning.
        write(config, f'listen = "127.0.0.1:0"\ndsn = "{real.replace("root@", "root:pw@")}"\n',
              0o644)
        r = subprocess.run([TXMQ, "serve", "--config", config], env=env(), capture_output=True,
                           text=True, timeout=60)
        self.assertIn("holds a DSN with a password and every user may read it", r.stderr)
        self.assertNotIn(":pw@", r.stderr)

    def test_bad_files_are_refused_with_file_and_line(self):
        cases = (('workers = 4\nworker = 3\n', ":2: unknown key 'worker' (did you mean 'workers'?)"),
                 ('\nworkers = "4"\n', ":2: workers must be an integer from 1 to 256, not a string"),
                 ('log-format = "xml"\n', ':1: log-format must be "text" or "json", not "xml"'),
                 ('region = "eu-west-3\n', ":1:"))
        for text, expect in cases:
            path = write(os.path.join(self.dir, "bad.conf"), text)
            r = subprocess.run([TXMQ, "serve", "--config", path], env=env(), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 1, (text, r.stderr))
            self.assertIn(path + expect, r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        missing = os.path.join(self.dir, "missing.conf")
        r = subprocess.run([TXMQ, "serve", "--config", missing], env=env(), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"cannot read the config file {missing}: No such file or directory", r.stderr)


def samples(text):
    """{'name{labels}': value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def promtool(text):
    """promtool check metrics's complaints ('' when none)."""
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    return "" if p.returncode == 0 else p.stdout + p.stderr


class Metrics(unittest.TestCase):
    def test_the_busiest_since_the_previous_scrape_have_series(self):
        # A database of the test's own, so that no other test's topic is busier.
        dsn = local_dsn()
        socket_path = re.search(r"socket=([^&]+)", dsn).group(1)
        database = f"txmq_ops_busiest_{os.getpid()}"
        sql = f"DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database}"
        out = subprocess.run(["mariadb", "-uroot", "-S", socket_path, "-e", sql],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        keys = write(os.path.join(SCRATCH, "busiest-keys"), f"{KEY} {SECRET}\n")
        s = Serve("--listen", "127.0.0.1:0", "--credentials", keys, "--metrics-busiest", "1",
                  TXMQ_DSN=re.sub(r"^(mysql://[^/]*/)[^?]*", r"\g<1>" + database, dsn))
        auth = {"Authorization": "Basic " + base64.b64encode(f"{KEY}:{SECRET}".encode()).decode()}

        def scrape_until(ready, what):
            deadline = time.monotonic() + 15  # clients add their totals about once a second
            while True:
                status, text = get(s.url + "/metrics", headers=auth)
                self.assertEqual(status, 200, text)
                m = samples(text)
                if ready(m):
                    return m
                self.assertLess(time.monotonic(), deadline, f"{what}:\n{text}")
                time.sleep(0.2)

        def exported(m, queue):
            return any(k.startswith(f'txmq_messages_ready{{topic="sqs_{queue}_') for k in m)

        try:
            sqs = s.client("us-east-1")
            hot = sqs.create_queue(QueueName="hot")["QueueUrl"]
            cold = sqs.create_queue(QueueName="cold")["QueueUrl"]
            for i in range(6):
                sqs.send_message(QueueUrl=hot, MessageBody=f"h{i}")
            sqs.send_message(QueueUrl=cold, MessageBody="c0")
            # Busiest over all time first: hot has series, cold counts only in "_all".
            m = scrape_until(lambda m: m.get('txmq_messages_sent_total{topic="_all"}') == 7 and
                             exported(m, "hot"), "hot exported, cold summed")
            self.assertFalse(exported(m, "cold"))
            self.assertEqual(m['txmq_metrics_topics{state="exported"}'], 1)
            self.assertEqual(m['txmq_metrics_topics{state="summed"}'], 1)
            self.assertEqual(promtool(get(s.url + "/metrics", headers=auth)[1]), "")
            # Three sends to cold since that scrape, none to hot: cold is now the busiest.
            for i in range(3):
                sqs.send_message(QueueUrl=cold, MessageBody=f"c{i + 1}")
            m = scrape_until(lambda m: exported(m, "cold"), "cold exported once busier")
            self.assertFalse(exported(m, "hot"))
            self.assertEqual(m['txmq_messages_sent_total{topic="_all"}'], 10)
            self.assertEqual(m['txmq_messages_ready{topic="' + next(
                k.split('"')[1] for k in m if k.startswith('txmq_messages_ready{topic="sqs_cold_'))
                + '",group="default"}'], 4)
        finally:
            status, log = s.terminate()
            s.kill()
            subprocess.run(["mariadb", "-uroot", "-S", socket_path, "-e",
                            f"DROP DATABASE IF EXISTS {database}"], capture_output=True, timeout=60)
        self.assertEqual(status, 0, log)

    def test_metrics_pass_promtool_and_count_known_calls(self):
        keys = write(os.path.join(SCRATCH, "metrics-keys"), f"{KEY} {SECRET}\n")
        name = f"metrics{os.getpid()}"
        # Named, so that its queue has series however many busier topics other tests leave.
        s = Serve("--listen", "127.0.0.1:0", "--credentials", keys,
                  "--metrics-topics", f"sqs_{name}_.*")
        try:
            sqs = s.client("us-east-1")
            url = sqs.create_queue(QueueName=name)["QueueUrl"]
            for i in range(3):
                sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
            with self.assertRaises(botocore.exceptions.ClientError):
                sqs.get_queue_url(QueueName=name + "-missing")

            # Protected as the dashboard: credentials as Basic auth.
            self.assertEqual(get(s.url + "/metrics")[0], 401)
            auth = {"Authorization": "Basic " + base64.b64encode(f"{KEY}:{SECRET}".encode()).decode()}
            self.assertEqual(get(s.url + "/metrics", headers={"Authorization": "Basic eDp5"})[0], 401)
            topic = None
            deadline = time.monotonic() + 15  # clients add their totals about once a second
            while True:
                status, text = get(s.url + "/metrics", headers=auth)
                self.assertEqual(status, 200, text)
                m = samples(text)
                topic = topic or next(k.split('"')[1] for k in m
                                      if k.startswith("txmq_messages_ready{") and name in k)
                tg = f'{{topic="{topic}",group="default"}}'
                if m.get(f'txmq_messages_acked_total{tg}') == 1 and \
                        m.get(f'txmq_messages_sent_total{{topic="{topic}"}}') == 3:
                    break
                self.assertLess(time.monotonic(), deadline, text)
                time.sleep(0.3)
            self.assertEqual(promtool(text), "")
            self.assertEqual(m[f"txmq_messages_ready{tg}"], 1)
            self.assertEqual(m[f"txmq_messages_in_flight{tg}"], 1)
            self.assertEqual(m[f"txmq_messages_received_total{tg}"], 2)
            self.assertEqual(m['txmq_sqs_requests_total{action="SendMessage",outcome="ok"}'], 3)
            self.assertEqual(m['txmq_sqs_requests_total{action="DeleteMessage",outcome="ok"}'], 1)
            self.assertEqual(
                m['txmq_sqs_requests_total{action="GetQueueUrl",outcome="QueueDoesNotExist"}'], 1)
            self.assertEqual(
                m['txmq_sqs_request_duration_seconds_count{action="SendMessage"}'], 3)
            self.assertGreaterEqual(m["txmq_http_connections"], 1)  # this scrape's own
            self.assertEqual(m["txmq_sqs_long_polls"], 0)
            self.assertEqual(m[f'txmq_stats_estimated{tg}'], 0)

            # txmq metrics prints the same gauges and totals, without the server's own figures.
            out = txmq("metrics", "--topics", f"sqs_{name}_.*")
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(promtool(out.stdout), "")
            c = samples(out.stdout)
            for family in ("txmq_messages_ready", "txmq_messages_in_flight",
                           "txmq_messages_received_total", "txmq_messages_acked_total"):
                self.assertEqual(c[family + tg], m[family + tg], family)
            self.assertFalse(any(k.startswith("txmq_sqs_") for k in c))
            sqs.delete_queue(QueueUrl=url)
        finally:
            status, log = s.terminate()
            s.kill()
        self.assertEqual(status, 0, log)


class Readiness(unittest.TestCase):
    """/readyz while txmq serve's own database stops and starts again."""

    def setUp(self):
        self.home = os.path.join(SCRATCH, "home")
        out = txmq("local", "start", home=self.home)
        self.assertEqual(out.returncode, 0, out.stderr)

    def tearDown(self):
        txmq("local", "stop", home=self.home)

    def test_readyz_turns_503_when_the_database_stops(self):
        config = write(os.path.join(SCRATCH, "ready.conf"),
                       'listen = "127.0.0.1:0"\nlog-format = "json"\n')
        s = Serve("--config", config, home=self.home)
        try:
            self.assertEqual(get(s.url + "/readyz"), (200, "ok\n"))
            self.assertEqual(txmq("local", "stop", home=self.home).returncode, 0)
            deadline = time.monotonic() + 15  # a result is reused for up to 1 s
            while True:
                status, body = get(s.url + "/readyz")
                if status == 503:
                    break
                self.assertLess(time.monotonic(), deadline, "still ready without a database")
                time.sleep(0.2)
            self.assertTrue(body.startswith("database "), body)
            self.assertEqual(body.count("\n"), 1, body)
            self.assertEqual(get(s.url + "/readyz", "HEAD"), (503, ""))
            self.assertEqual(get(s.url + "/healthz"), (200, "ok\n"))  # alive all the same
            self.assertEqual(txmq("local", "start", home=self.home).returncode, 0)
            deadline = time.monotonic() + 60
            while get(s.url + "/readyz") != (200, "ok\n"):
                self.assertLess(time.monotonic(), deadline, "not ready again")
                time.sleep(0.5)
        finally:
            status, log = s.terminate()
            s.kill()
        self.assertEqual(status, 0, log)
        lines = [json.loads(line) for line in log.splitlines()]
        msgs = [x["msg"] for x in lines]
        self.assertTrue(any(m.startswith("not ready: database ") for m in msgs), log)
        self.assertIn("ready: the database answers again", msgs)


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
