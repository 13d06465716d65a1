#!/usr/bin/python3
"""The SQL interface through SQLAlchemy (Debian's python3-sqlalchemy, ORM session, the calls as
text()), on PyMySQL, as the least-privilege user.

Run by tests/sql/run.sh sqlalchemy (TXMQ_SQL_* in the environment).
`test_sqlalchemy.py consume` is the exactly-once test's child process.
"""
import json
import os
import random
import subprocess
import sys
import time
import unittest

from sqlalchemy import BigInteger, Column, Integer, String, create_engine, exc, func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session, declarative_base

ENV = os.environ
PREFIX = ENV["TXMQ_SQL_PREFIX"]
TX, BATCH, EO = PREFIX + "_tx", PREFIX + "_batch", PREFIX + "_eo"
Base = declarative_base()


class Order(Base):
    __tablename__ = PREFIX + "_orders"
    id = Column(BigInteger, primary_key=True)
    ref = Column(String(64), nullable=False)
    amount = Column(Integer, nullable=False)


class Account(Base):
    __tablename__ = PREFIX + "_accounts"
    id = Column(Integer, primary_key=True)
    balance = Column(BigInteger, nullable=False)


class Processed(Base):
    __tablename__ = PREFIX + "_processed"
    msg_id = Column(BigInteger, primary_key=True)
    amount = Column(Integer, nullable=False)


ENGINE = create_engine(URL.create(
    "mysql+pymysql", username=ENV["TXMQ_SQL_USER"], password=ENV["TXMQ_SQL_PASSWORD"],
    database=ENV["TXMQ_SQL_DATABASE"], query={"unix_socket": ENV["TXMQ_SQL_SOCKET"]}), future=True)

SEND = text("CALL txmq_send(:topic, :payload, :options)")
SEND_BATCH = text("CALL txmq_send_batch(:topic, :messages)")
TAKE = text("CALL txmq_take(:topic, NULL, :n)")
ACK = text("CALL txmq_ack(:topic, NULL, :ids)")


def consume():
    """The child: take -> ORM update of the account and a Processed row -> ack -> commit."""
    with ENGINE.connect():
        pass  # a connection in the pool: now it may be killed
    print("ready", flush=True)
    with Session(ENGINE) as session:
        while True:
            with session.begin():
                rows = session.execute(TAKE, {"topic": EO, "n": 5}).all()
                if not rows:
                    return 0
                account = session.get(Account, 1, with_for_update=True)
                for row in rows:
                    account.balance += int(row.payload)
                    session.add(Processed(msg_id=row.id, amount=int(row.payload)))
                session.flush()
                session.execute(ACK, {"topic": EO, "ids": json.dumps([r.id for r in rows])})


class SqlAlchemyInterface(unittest.TestCase):
    def setUp(self):
        self.ref = f"sa-{random.getrandbits(40):x}"

    def taken(self, topic):
        with Session(ENGINE) as session, session.begin():
            return session.execute(TAKE, {"topic": topic, "n": 1000}).all()

    def orders(self, ref):
        with Session(ENGINE) as session:
            return session.scalar(select(func.count()).select_from(Order).where(Order.ref == ref))

    def test_send_rolled_back_leaves_neither(self):
        with Session(ENGINE) as session:
            session.begin()
            session.add(Order(ref=self.ref, amount=5))
            session.flush()
            msg_id = session.execute(SEND, {"topic": TX, "payload": b"order",
                                            "options": None}).scalar_one()
            self.assertGreater(msg_id, 0)
            session.rollback()
        self.assertEqual(self.orders(self.ref), 0)
        self.assertEqual(self.taken(TX), [])

    def test_send_committed_leaves_both_and_its_id_is_the_messages(self):
        payload = b"\x00\xff binary " + self.ref.encode()
        with Session(ENGINE) as session, session.begin():
            session.add(Order(ref=self.ref, amount=5))
            msg_id = session.execute(SEND, {"topic": TX, "payload": payload, "options": json.dumps(
                {"key": "acct-1", "attributes": {"lang": "sqlalchemy"}})}).scalar_one()
        self.assertEqual(self.orders(self.ref), 1)
        with Session(ENGINE) as session, session.begin():
            rows = session.execute(TAKE, {"topic": TX, "n": 10}).all()
            session.execute(ACK, {"topic": TX, "ids": str(msg_id)})
        (row,) = rows
        self.assertEqual((row.id, bytes(row.payload), row.msg_key, row.attempt),
                         (msg_id, payload, b"acct-1", 1))
        self.assertEqual(json.loads(row.attributes)["lang"],
                         {"type": "String", "value": "sqlalchemy"})
        self.assertEqual(self.taken(TX), [])

    def test_batch_of_1000_is_all_or_none(self):
        messages = json.dumps([f"m{i:04d}" for i in range(1000)])
        with Session(ENGINE) as session:
            session.begin()
            ids = session.execute(SEND_BATCH, {"topic": BATCH, "messages": messages}).scalars().all()
            self.assertEqual(len(set(ids)), 1000)
            session.rollback()
        self.assertEqual(self.taken(BATCH), [])
        with Session(ENGINE) as session, session.begin():
            session.add(Order(ref=self.ref, amount=1000))
            ids = session.execute(SEND_BATCH, {"topic": BATCH, "messages": messages}).scalars().all()
        with Session(ENGINE) as session, session.begin():
            rows = session.execute(TAKE, {"topic": BATCH, "n": 1000}).all()
            self.assertEqual(sorted((r.id, bytes(r.payload).decode()) for r in rows),
                             sorted(zip(ids, json.loads(messages))))
            session.execute(ACK, {"topic": BATCH, "ids": json.dumps(ids)})
        self.assertEqual(self.orders(self.ref), 1)
        self.assertEqual(self.taken(BATCH), [])

    def test_exactly_once_while_the_consumer_is_killed(self):
        amounts = [random.randint(1, 100) for _ in range(600)]
        with Session(ENGINE) as session, session.begin():
            ids = session.execute(SEND_BATCH, {"topic": EO, "messages": json.dumps(
                [str(a) for a in amounts])}).scalars().all()

        def processed():
            with Session(ENGINE) as session:
                return session.scalar(select(func.count()).select_from(Processed))

        kills, deadline = 0, time.monotonic() + 45
        while True:
            self.assertLess(time.monotonic(), deadline, f"not drained; {kills} kills")
            child = subprocess.Popen([sys.executable, __file__, "consume"],
                                     stdout=subprocess.PIPE, text=True)
            self.assertEqual(child.stdout.readline().strip(), "ready")
            if kills < 6 and processed() < len(ids):
                time.sleep(random.uniform(0.005, 0.06))
                if child.poll() is None:
                    child.kill()
                    child.wait()
                    child.stdout.close()
                    kills += 1
                    continue
            self.assertEqual(child.wait(timeout=30), 0)
            child.stdout.close()
            if processed() == len(ids):
                break
            time.sleep(0.05)
        self.assertGreaterEqual(kills, 3)
        with Session(ENGINE) as session:
            got = {p.msg_id: p.amount for p in session.scalars(select(Processed))}
            self.assertEqual(got, dict(zip(ids, amounts)))
            self.assertEqual(session.get(Account, 1).balance, sum(amounts))
        self.assertEqual(self.taken(EO), [])
        print(f"\n  exactly once: {len(ids)} messages, {kills} kills", file=sys.stderr)

    def assert_txmq_error(self, statement, params, *, autocommit=False, says=""):
        with ENGINE.connect() as conn:
            if autocommit:  # SQLAlchemy otherwise begins a transaction itself
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            with self.assertRaises(exc.DBAPIError) as failed:
                conn.execute(statement, params).all()
            conn.rollback()
        code, message = failed.exception.orig.args[:2]
        self.assertEqual(code, 1644, message)
        self.assertTrue(message.startswith("txmq: "), message)
        self.assertIn(says, message)

    def test_bad_input_is_a_txmq_error_and_writes_nothing(self):
        nosuch = f"nosuch_{random.getrandbits(32):x}"
        self.assert_txmq_error(SEND, {"topic": nosuch, "payload": "x", "options": None}, says=nosuch)
        self.assert_txmq_error(SEND, {"topic": "x; DROP TABLE y", "payload": "x", "options": None},
                               says="invalid topic name")
        self.assert_txmq_error(SEND_BATCH, {"topic": TX, "messages": '[{"payload": "a"},'})
        self.assert_txmq_error(SEND_BATCH, {"topic": TX, "messages": "[]"})
        self.assert_txmq_error(TAKE, {"topic": TX, "n": 1}, autocommit=True, says="transaction")
        self.assertEqual(self.taken(TX), [])

    def test_the_app_user_cannot_touch_txmqs_tables(self):
        for sql in ("SELECT * FROM txmq_topics", f"SELECT COUNT(*) FROM txmq_q_{TX}",
                    f"INSERT INTO txmq_q_{TX} (payload) VALUES ('forged')"):
            with self.subTest(sql=sql), ENGINE.connect() as conn:
                with self.assertRaises(exc.DBAPIError) as denied:
                    conn.execute(text(sql))
                self.assertEqual(denied.exception.orig.args[0], 1142)


if __name__ == "__main__":
    if sys.argv[1:] == ["consume"]:
        sys.exit(consume())
    unittest.main(verbosity=2)
