#!/usr/bin/python3
"""The SQL interface through PyMySQL (Debian's python3-pymysql), as the least-privilege user.

Run by tests/sql/run.sh python, which sets TXMQ_SQL_* (socket, database, user, password, the
prefix of this run's topics and tables). `test_pymysql.py consume` is the child process of the
exactly-once test: take -> business update -> ack -> commit until the topic is empty.
"""
import json
import os
import random
import subprocess
import sys
import time
import unittest

import pymysql

ENV = os.environ
PREFIX = ENV["TXMQ_SQL_PREFIX"]
TX, BATCH, EO = PREFIX + "_tx", PREFIX + "_batch", PREFIX + "_eo"
ORDERS, ACCOUNTS, PROCESSED = PREFIX + "_orders", PREFIX + "_accounts", PREFIX + "_processed"


def connect():
    return pymysql.connect(unix_socket=ENV["TXMQ_SQL_SOCKET"], user=ENV["TXMQ_SQL_USER"],
                           password=ENV["TXMQ_SQL_PASSWORD"], database=ENV["TXMQ_SQL_DATABASE"],
                           autocommit=True)


def call(cur, sql, args=()):
    """A CALL's rows; the rest of its results (the CALL's own OK) read too."""
    cur.execute(sql, args)
    rows = list(cur.fetchall())
    while cur.nextset():
        pass
    return rows


def send(cur, topic, payload, options=None):
    (msg_id,), = call(cur, "CALL txmq_send(%s, %s, %s)", (topic, payload, options))
    return msg_id


def send_batch(cur, topic, messages):
    return [r[0] for r in call(cur, "CALL txmq_send_batch(%s, %s)", (topic, json.dumps(messages)))]


def take(cur, topic, n):
    return call(cur, "CALL txmq_take(%s, NULL, %s)", (topic, n))


def ack(cur, topic, ids):
    call(cur, "CALL txmq_ack(%s, NULL, %s)", (topic, json.dumps(ids)))


def consume():
    """The child: drains EO in transactions of up to 5 messages; exits 0 when it finds none."""
    conn = connect()
    cur = conn.cursor()
    print("ready", flush=True)
    while True:
        conn.begin()
        rows = take(cur, EO, 5)
        if not rows:
            conn.rollback()
            return 0
        for msg_id, payload, *_ in rows:
            amount = int(payload)
            cur.execute(f"UPDATE `{ACCOUNTS}` SET balance = balance + %s WHERE id = 1", (amount,))
            cur.execute(f"INSERT INTO `{PROCESSED}` (msg_id, amount) VALUES (%s, %s)",
                        (msg_id, amount))
        ack(cur, EO, [r[0] for r in rows])
        conn.commit()


class SqlInterface(unittest.TestCase):
    def setUp(self):
        self.conn = connect()
        self.cur = self.conn.cursor()
        self.ref = f"py-{random.getrandbits(40):x}"

    def tearDown(self):
        self.conn.close()

    def nothing_to_take(self, topic):
        self.conn.begin()
        rows = take(self.cur, topic, 1000)
        self.conn.rollback()
        self.assertEqual(rows, [], f"messages in {topic}")

    def orders(self, ref):
        self.cur.execute(f"SELECT COUNT(*) FROM `{ORDERS}` WHERE ref = %s", (ref,))
        return self.cur.fetchone()[0]

    def test_send_rolled_back_leaves_neither(self):
        self.conn.begin()
        self.cur.execute(f"INSERT INTO `{ORDERS}` (ref, amount) VALUES (%s, 5)", (self.ref,))
        msg_id = send(self.cur, TX, b"order " + self.ref.encode())
        self.assertGreater(msg_id, 0)
        self.conn.rollback()
        self.assertEqual(self.orders(self.ref), 0)
        self.nothing_to_take(TX)

    def test_send_committed_leaves_both_and_its_id_is_the_messages(self):
        payload = b"\x00\xff binary " + self.ref.encode()
        self.conn.begin()
        self.cur.execute(f"INSERT INTO `{ORDERS}` (ref, amount) VALUES (%s, 5)", (self.ref,))
        msg_id = send(self.cur, TX, payload, json.dumps({"attributes": {"lang": "python"}}))
        self.conn.commit()
        self.assertEqual(self.orders(self.ref), 1)
        self.conn.begin()
        rows = take(self.cur, TX, 100)
        ack(self.cur, TX, [r[0] for r in rows])
        self.conn.commit()
        self.assertEqual(len(rows), 1)
        got_id, got_payload, key, attempt, enqueued_at, attributes = rows[0]
        self.assertEqual((got_id, bytes(got_payload), key, attempt), (msg_id, payload, None, 1))
        self.assertEqual(json.loads(attributes)["lang"], {"type": "String", "value": "python"})
        self.nothing_to_take(TX)

    def test_send_committed_is_received_by_the_cli_with_that_id(self):
        self.conn.begin()
        self.cur.execute(f"INSERT INTO `{ORDERS}` (ref, amount) VALUES (%s, 7)", (self.ref,))
        msg_id = send(self.cur, TX, "for the cli " + self.ref, '{"key": "k1"}')
        self.conn.commit()
        out = subprocess.run([ENV["TXMQ_SQL_TXMQ"], "--json", "receive", TX], check=True,
                             capture_output=True, text=True).stdout
        got = json.loads(out)
        self.assertEqual((got["id"], got["payload"], got["key"]),
                         (msg_id, "for the cli " + self.ref, "k1"))
        subprocess.run([ENV["TXMQ_SQL_TXMQ"], "ack", TX, got["receipt"]], check=True,
                       capture_output=True)
        self.nothing_to_take(TX)

    def test_take_in_the_implicit_transaction_of_autocommit_off(self):
        # PyMySQL's default and JDBC's setAutoCommit(false): no START TRANSACTION
        msg_id = send(self.cur, TX, "implicit")
        conn = pymysql.connect(unix_socket=ENV["TXMQ_SQL_SOCKET"], user=ENV["TXMQ_SQL_USER"],
                               password=ENV["TXMQ_SQL_PASSWORD"],
                               database=ENV["TXMQ_SQL_DATABASE"], autocommit=False)
        cur = conn.cursor()
        rows = take(cur, TX, 10)
        ack(cur, TX, [r[0] for r in rows])
        conn.commit()
        conn.close()
        self.assertEqual([r[0] for r in rows], [msg_id])
        self.nothing_to_take(TX)

    def test_fail_counts_the_delivery_and_applies_the_retry_delay(self):
        msg_id = send(self.cur, TX, "to fail")  # autocommit: a transaction of its own
        self.conn.begin()
        (row,) = take(self.cur, TX, 10)
        self.assertEqual((row[0], row[3]), (msg_id, 1))
        self.conn.rollback()  # the work failed
        call(self.cur, "CALL txmq_fail(%s, NULL, %s)", (TX, str(msg_id)))
        self.nothing_to_take(TX)  # the topic's retry delay: 1 s
        time.sleep(1.3)
        self.conn.begin()
        (row,) = take(self.cur, TX, 10)
        self.assertEqual(row[0], msg_id)
        self.assertGreaterEqual(row[3], 2)
        ack(self.cur, TX, [msg_id])
        self.conn.commit()

    def test_batch_of_1000_is_all_or_none(self):
        messages = [{"payload": f"m{i:04d}"} for i in range(1000)]
        self.conn.begin()
        ids = send_batch(self.cur, BATCH, messages)
        self.assertEqual(len(set(ids)), 1000)
        self.conn.rollback()
        self.nothing_to_take(BATCH)
        # one message over the topic's 100 bytes: the call fails, and writes nothing
        with self.assertRaises(pymysql.MySQLError) as failed:
            send_batch(self.cur, BATCH, messages[:999] + [{"payload": "x" * 200}])
        self.assertEqual(failed.exception.args[0], 1644)
        self.assertTrue(failed.exception.args[1].startswith("txmq: "), failed.exception.args)
        self.nothing_to_take(BATCH)
        self.conn.begin()
        self.cur.execute(f"INSERT INTO `{ORDERS}` (ref, amount) VALUES (%s, 1000)", (self.ref,))
        ids = send_batch(self.cur, BATCH, messages)
        self.conn.commit()
        self.assertEqual(self.orders(self.ref), 1)
        self.conn.begin()
        rows = take(self.cur, BATCH, 1000)
        self.assertEqual(sorted((r[0], bytes(r[1]).decode()) for r in rows),
                         sorted(zip(ids, (m["payload"] for m in messages))))
        ack(self.cur, BATCH, ids)
        self.conn.commit()
        self.nothing_to_take(BATCH)

    def test_exactly_once_while_the_consumer_is_killed(self):
        amounts = [random.randint(1, 100) for _ in range(800)]
        self.conn.begin()
        ids = send_batch(self.cur, EO, [str(a) for a in amounts])
        self.conn.commit()
        expected = dict(zip(ids, amounts))
        kills, deadline = 0, time.monotonic() + 45

        def processed():
            self.cur.execute(f"SELECT COUNT(*) FROM `{PROCESSED}`")
            return self.cur.fetchone()[0]

        while True:
            self.assertLess(time.monotonic(), deadline, f"not drained; {kills} kills")
            child = subprocess.Popen([sys.executable, __file__, "consume"],
                                     stdout=subprocess.PIPE, text=True)
            self.assertEqual(child.stdout.readline().strip(), "ready")
            if kills < 6 and processed() < len(ids):
                time.sleep(random.uniform(0.005, 0.06))
                if child.poll() is None:
                    child.kill()  # SIGKILL, in the middle of whatever it does
                    child.wait()
                    child.stdout.close()
                    kills += 1
                    continue
            self.assertEqual(child.wait(timeout=30), 0)
            child.stdout.close()
            if processed() == len(ids):
                break
            time.sleep(0.05)  # a killed child's locks are being released
        self.assertGreaterEqual(kills, 3)
        self.cur.execute(f"SELECT msg_id, amount FROM `{PROCESSED}`")
        self.assertEqual(dict(self.cur.fetchall()), expected)
        self.cur.execute(f"SELECT balance FROM `{ACCOUNTS}` WHERE id = 1")
        self.assertEqual(self.cur.fetchone()[0], sum(amounts))
        self.nothing_to_take(EO)
        print(f"\n  exactly once: {len(ids)} messages, {kills} kills", file=sys.stderr)

    def assert_txmq_error(self, sql, args=(), *, in_transaction=False, says=""):
        if in_transaction:
            self.conn.begin()
        with self.assertRaises(pymysql.MySQLError) as failed:
            call(self.cur, sql, args)
        if in_transaction:
            self.conn.rollback()
        code, message = failed.exception.args[:2]
        self.assertEqual(code, 1644, message)
        self.assertTrue(message.startswith("txmq: "), message)
        self.assertIn(says, message)

    def test_bad_input_is_a_txmq_error_and_writes_nothing(self):
        nosuch = f"nosuch_{random.getrandbits(32):x}"
        self.assert_txmq_error("CALL txmq_send(%s, 'x', NULL)", (nosuch,), says=nosuch)
        self.assert_txmq_error("CALL txmq_send(%s, 'x', NULL)", ("x; DROP TABLE y",),
                               says="invalid topic name")
        self.assert_txmq_error("CALL txmq_send(%s, 'x', 'not json')", (TX,))
        self.assert_txmq_error("CALL txmq_send_batch(%s, %s)", (TX, '[{"payload": "a"},'))
        self.assert_txmq_error("CALL txmq_send_batch(%s, %s)", (TX, "[]"))
        self.assert_txmq_error("CALL txmq_send_batch(%s, %s)", (TX, '{"payload": "a"}'))
        self.assert_txmq_error("CALL txmq_take(%s, NULL, 1)", (TX,), says="transaction")
        self.assert_txmq_error("CALL txmq_take(%s, NULL, 1)", (nosuch,), in_transaction=True)
        self.assert_txmq_error("CALL txmq_take(%s, NULL, 0)", (TX,), in_transaction=True)
        self.assert_txmq_error("CALL txmq_take(%s, NULL, 1001)", (TX,), in_transaction=True)
        self.assert_txmq_error("CALL txmq_ack(%s, NULL, '[999999999]')", (TX,),
                               in_transaction=True)
        self.nothing_to_take(TX)
        self.cur.execute(f"SELECT COUNT(*) FROM `{ORDERS}`")  # still there

    def test_the_app_user_cannot_touch_txmqs_tables(self):
        for sql in ("SELECT * FROM txmq_topics",
                    f"SELECT COUNT(*) FROM txmq_q_{TX}",
                    f"INSERT INTO txmq_q_{TX} (payload) VALUES ('forged')",
                    f"DELETE FROM txmq_q_{TX}",
                    "UPDATE txmq_topics SET max_attempts = 1"):
            with self.subTest(sql=sql), self.assertRaises(pymysql.MySQLError) as denied:
                self.cur.execute(sql)
            self.assertEqual(denied.exception.args[0], 1142, denied.exception.args)


if __name__ == "__main__":
    if sys.argv[1:] == ["consume"]:
        sys.exit(consume())
    unittest.main(verbosity=2)
