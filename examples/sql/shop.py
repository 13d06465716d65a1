#!/usr/bin/python3
"""txmq's SQL interface from Python (PyMySQL): an order and its message in one transaction, and
a consumer that turns each message into exactly one invoice.

Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then:
  APP_PASSWORD=secret python3 examples/sql/shop.py send 3    # 3 orders, each with its message
  APP_PASSWORD=secret python3 examples/sql/shop.py consume   # invoices, one per message, as they come
Environment: MYSQL_UNIX_PORT (socket), APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB (the queue's
database), TOPIC, WAIT_SECONDS (how long consume waits for a message before it exits; 5).
"""
import json
import os
import random
import sys

import pymysql

E = os.environ.get
TOPIC, Q, WAIT = E("TOPIC", "orders"), E("TXMQ_DB", "txmq"), float(E("WAIT_SECONDS", "5"))
conn = pymysql.connect(unix_socket=E("MYSQL_UNIX_PORT", "/run/mysqld/mysqld.sock"),
                       user=E("APP_USER", "app"), password=E("APP_PASSWORD", ""),
                       database=E("APP_DB", "shop"), autocommit=True,
                       init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
cur = conn.cursor()


def send(n):
    for _ in range(n):
        conn.begin()  # the order and its message: both or neither
        cur.execute("INSERT INTO orders (customer, amount) VALUES (%s, %s)",
                    ("alice", random.randint(1, 100)))
        order_id = cur.lastrowid
        cur.execute(f"CALL {Q}.txmq_send(%s, %s, NULL)", (TOPIC, json.dumps({"order": order_id})))
        (msg_id,), = cur.fetchall()
        conn.commit()
        print(f"order {order_id}: message {msg_id}")


def consume():
    while True:
        conn.begin()  # txmq_take_wait needs a transaction: it holds the messages until it ends
        try:
            # returns at once when there are messages, else as soon as one is committed
            cur.execute(f"CALL {Q}.txmq_take_wait(%s, NULL, 10, %s)", (TOPIC, WAIT))
            rows = cur.fetchall()
            if not rows:
                conn.rollback()
                return  # nothing arrived for WAIT seconds (a service would simply take again)
            for msg_id, payload, *_ in rows:
                cur.execute("INSERT INTO invoices (msg_id, order_id, amount) "
                            "SELECT %s, id, amount FROM orders WHERE id = %s",
                            (msg_id, json.loads(payload)["order"]))
            cur.execute(f"CALL {Q}.txmq_ack(%s, NULL, %s)", (TOPIC, json.dumps([r[0] for r in rows])))
            conn.commit()  # the invoices and the acks together: a crash before it redoes both
        except pymysql.err.OperationalError as e:
            conn.rollback()  # nothing invoiced, nothing acknowledged
            if e.args[0] in (1317, 1213):  # a wake-up ended the wait; a deadlock
                continue  # take again
            raise
        print(f"invoiced {len(rows)} orders")


if __name__ == "__main__":
    send(int(sys.argv[2])) if sys.argv[1] == "send" else consume()
