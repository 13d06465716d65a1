#!/usr/bin/python3
"""txmq's SQL interface from Python (PyMySQL): an order and its message in one transaction, and
a consumer that turns each message into exactly one invoice.

Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then:
  APP_PASSWORD=secret python3 examples/sql/shop.py send 3    # 3 orders, each with its message
  APP_PASSWORD=secret python3 examples/sql/shop.py consume   # invoices, one per message; exits when drained
Environment: MYSQL_UNIX_PORT (socket), APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB (the queue's
database), TOPIC.
"""
import json
import os
import random
import sys

import pymysql

E = os.environ.get
TOPIC, Q = E("TOPIC", "orders"), E("TXMQ_DB", "txmq")
conn = pymysql.connect(unix_socket=E("MYSQL_UNIX_PORT", "/run/mysqld/mysqld.sock"),
                       user=E("APP_USER", "app"), password=E("APP_PASSWORD", ""),
                       database=E("APP_DB", "shop"), autocommit=True)
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
        conn.begin()  # txmq_take needs a transaction: it holds the messages until it ends
        cur.execute(f"CALL {Q}.txmq_take(%s, NULL, 10)", (TOPIC,))
        rows = cur.fetchall()
        if not rows:
            conn.rollback()
            return  # drained (a service would wait a little and take again)
        for msg_id, payload, *_ in rows:
            cur.execute("INSERT INTO invoices (msg_id, order_id, amount) "
                        "SELECT %s, id, amount FROM orders WHERE id = %s",
                        (msg_id, json.loads(payload)["order"]))
        cur.execute(f"CALL {Q}.txmq_ack(%s, NULL, %s)", (TOPIC, json.dumps([r[0] for r in rows])))
        conn.commit()  # the invoices and the acks together: a crash before it redoes both
        print(f"invoiced {len(rows)} orders")


if __name__ == "__main__":
    send(int(sys.argv[2])) if sys.argv[1] == "send" else consume()
