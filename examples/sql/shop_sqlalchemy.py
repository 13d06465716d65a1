#!/usr/bin/python3
"""txmq's SQL interface from SQLAlchemy (ORM session, the calls as text()): an order and its
message in one transaction, and a consumer that turns each message into exactly one invoice.

Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then:
  APP_PASSWORD=secret python3 examples/sql/shop_sqlalchemy.py send 3
  APP_PASSWORD=secret python3 examples/sql/shop_sqlalchemy.py consume
Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC, WAIT_SECONDS (how
long consume waits for a message before it exits; 5).
"""
import json
import os
import random
import sys

from sqlalchemy import BigInteger, Column, Integer, String, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, declarative_base

E = os.environ.get
TOPIC, Q, WAIT = E("TOPIC", "orders"), E("TXMQ_DB", "txmq"), float(E("WAIT_SECONDS", "5"))
engine = create_engine(URL.create(
    "mysql+pymysql", username=E("APP_USER", "app"), password=E("APP_PASSWORD", ""),
    database=E("APP_DB", "shop"), query={"unix_socket": E("MYSQL_UNIX_PORT", "/run/mysqld/mysqld.sock")}),
    isolation_level="READ COMMITTED", future=True)  # txmq_take_wait refuses REPEATABLE READ
Base = declarative_base()


class Order(Base):
    __tablename__ = "orders"
    id = Column(BigInteger, primary_key=True)
    customer = Column(String(64))
    amount = Column(Integer)


class Invoice(Base):
    __tablename__ = "invoices"
    msg_id = Column(BigInteger, primary_key=True)
    order_id = Column(BigInteger)
    amount = Column(Integer)


def send(n):
    for _ in range(n):
        with Session(engine) as session, session.begin():  # commits at the end of the block
            order = Order(customer="alice", amount=random.randint(1, 100))
            session.add(order)
            session.flush()  # order.id
            order_id = order.id
            msg_id = session.execute(text(f"CALL {Q}.txmq_send(:t, :p, NULL)"), {
                "t": TOPIC, "p": json.dumps({"order": order_id})}).scalar_one()
        print(f"order {order_id}: message {msg_id}")


def consume():
    with Session(engine) as session:
        while True:
            try:
                with session.begin():  # the invoices and the acks: together or not at all
                    # returns at once when there are messages, else as soon as one is committed
                    rows = session.execute(text(f"CALL {Q}.txmq_take_wait(:t, NULL, 10, :w)"),
                                           {"t": TOPIC, "w": WAIT}).all()
                    if not rows:
                        return  # nothing arrived for WAIT seconds (a service would simply take again)
                    for row in rows:
                        order = session.get(Order, json.loads(row.payload)["order"])
                        session.add(Invoice(msg_id=row.id, order_id=order.id, amount=order.amount))
                    session.flush()
                    session.execute(text(f"CALL {Q}.txmq_ack(:t, NULL, :ids)"),
                                    {"t": TOPIC, "ids": json.dumps([r.id for r in rows])})
            except OperationalError as e:  # the block rolled back: nothing invoiced or acknowledged
                if e.orig.args[0] in (1317, 1213):  # a wake-up ended the wait; a deadlock
                    continue  # take again
                raise
            print(f"invoiced {len(rows)} orders")


if __name__ == "__main__":
    send(int(sys.argv[2])) if sys.argv[1] == "send" else consume()
