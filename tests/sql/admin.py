#!/usr/bin/python3
"""The administrator's side of tests/sql/run.sh, as the DSN's (privileged) user.

  admin.py setup       business tables, the least-privilege user and its grants
  admin.py teardown    drop them again (what exists of them)
  admin.py check-empty TXMQ TOPIC...   every topic: nothing ready, in flight, delayed, waiting
                                       or dead for the default group (`txmq --json stats`)
  admin.py example-setup SETUP_SQL     examples/sql/setup.sql for this run: its database
                                       PREFIX_shop, the grants to this run's user
  admin.py example-check N             the example's N orders have one invoice each

Reads TXMQ_SQL_ADMIN_DSN (mysql://user[:password]@host/db?socket=PATH), TXMQ_SQL_PREFIX (names
of this run) and TXMQ_SQL_PASSWORD (the application user's).
"""
import json
import os
import subprocess
import sys
import urllib.parse

import pymysql

ROUTINES = ("txmq_send", "txmq_send_batch", "txmq_take", "txmq_take_wait", "txmq_ack", "txmq_fail",
            "txmq_sqs_send")


def admin_params():
    dsn = urllib.parse.urlsplit(os.environ["TXMQ_SQL_ADMIN_DSN"])
    query = urllib.parse.parse_qs(dsn.query)
    params = dict(user=urllib.parse.unquote(dsn.username or "root"),
                  password=urllib.parse.unquote(dsn.password or ""),
                  database=dsn.path.lstrip("/") or "txmq", autocommit=True)
    if "socket" in query:
        params["unix_socket"] = query["socket"][0]
    else:
        params.update(host=dsn.hostname or "localhost", port=dsn.port or 3306)
    return params


def names():
    prefix = os.environ["TXMQ_SQL_PREFIX"]
    return prefix, "app_" + prefix, [f"{prefix}_{t}" for t in ("orders", "accounts", "processed")]


def setup():
    params = admin_params()
    prefix, user, (orders, accounts, processed) = names()
    db = params["database"]
    conn = pymysql.connect(**params)
    cur = conn.cursor()
    cur.execute("SELECT ROUTINE_NAME FROM information_schema.ROUTINES "
                "WHERE ROUTINE_SCHEMA = %s AND ROUTINE_TYPE = 'PROCEDURE'", (db,))
    have = {r[0] for r in cur.fetchall()}
    missing = [r for r in ROUTINES if r not in have]
    if missing:
        sys.exit(f"admin.py: the database {db} has no procedure {', '.join(missing)}: "
                 "txmq's SQL routines (schema version 13) are not installed")
    cur.execute(f"CREATE TABLE `{orders}` (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                "ref VARCHAR(64) NOT NULL, amount INT NOT NULL) ENGINE=InnoDB")
    cur.execute(f"CREATE TABLE `{accounts}` (id INT PRIMARY KEY, balance BIGINT NOT NULL) "
                "ENGINE=InnoDB")
    cur.execute(f"INSERT INTO `{accounts}` VALUES (1, 0)")
    cur.execute(f"CREATE TABLE `{processed}` (msg_id BIGINT UNSIGNED NOT NULL, "
                "amount INT NOT NULL, UNIQUE KEY (msg_id)) ENGINE=InnoDB")
    password = os.environ["TXMQ_SQL_PASSWORD"]
    cur.execute(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY %s", (password,))
    for routine in ROUTINES:
        cur.execute(f"GRANT EXECUTE ON PROCEDURE `{db}`.`{routine}` TO '{user}'@'localhost'")
    for table in (orders, accounts, processed):
        cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`{table}` "
                    f"TO '{user}'@'localhost'")
    conn.close()
    # One connection as the user with a client that does caching_sha2_password's full
    # authentication over the socket (MySQL 8+): the server caches the password, and the
    # drivers that only do its fast (scramble) path log in from now on.
    app = dict(params, user=user, password=password)
    if "unix_socket" not in app:
        sys.exit("admin.py: the suites connect over a socket: give the DSN a ?socket=PATH")
    pymysql.connect(**app).close()


def example_setup(path):
    """setup.sql with this run's names: `shop` -> PREFIX_shop, 'app' -> this run's user (made by
    setup: CREATE USER is left out), txmq -> the DSN's database."""
    params = admin_params()
    prefix, user, _ = names()
    text = "\n".join(l for l in open(path).read().splitlines() if not l.startswith("--"))
    text = (text.replace("DATABASE shop;", f"DATABASE `{prefix}_shop`;")
                .replace("shop.", f"`{prefix}_shop`.")
                .replace("'app'@'localhost'", f"'{user}'@'localhost'")
                .replace("txmq.txmq_", f"`{params['database']}`.txmq_"))
    conn = pymysql.connect(**params)
    cur = conn.cursor()
    for statement in text.split(";"):
        if statement.strip() and not statement.strip().startswith("CREATE USER"):
            cur.execute(statement)
    conn.close()


def example_check(n):
    prefix, _, _ = names()
    conn = pymysql.connect(**dict(admin_params(), database=f"{prefix}_shop"))
    cur = conn.cursor()
    cur.execute("SELECT o.id, o.amount, COUNT(i.msg_id), MIN(i.amount) FROM orders o "
                "LEFT JOIN invoices i ON i.order_id = o.id GROUP BY o.id, o.amount")
    rows = cur.fetchall()
    cur.execute("SELECT COUNT(*) FROM invoices")
    invoices = cur.fetchone()[0]
    conn.close()
    bad = [r for r in rows if r[2] != 1 or r[3] != r[1]]
    if len(rows) != n or invoices != n or bad:
        sys.exit(f"admin.py: the example made {len(rows)} orders and {invoices} invoices "
                 f"(expected {n} of each, one invoice per order); orders without exactly one "
                 f"matching invoice: {bad}")


def teardown():
    params = admin_params()
    prefix, user, tables = names()
    conn = pymysql.connect(**params)
    cur = conn.cursor()
    cur.execute(f"DROP USER IF EXISTS '{user}'@'localhost'")
    cur.execute(f"DROP DATABASE IF EXISTS `{prefix}_shop`")
    for table in tables:
        cur.execute(f"DROP TABLE IF EXISTS `{table}`")
    conn.close()


def check_empty(txmq, topics):
    bad = []
    for topic in topics:
        out = subprocess.run([txmq, "--json", "stats", topic], check=True, capture_output=True,
                             text=True).stdout
        stats = json.loads(out)
        left = {k: stats[k] for k in ("ready", "in_flight", "delayed", "waiting_on_key", "dead")
                if stats.get(k)}
        if left:
            bad.append(f"{topic}: {left}")
    if bad:
        sys.exit("admin.py: messages left after the suite: " + "; ".join(bad))


if __name__ == "__main__":
    if sys.argv[1:2] == ["setup"]:
        setup()
    elif sys.argv[1:2] == ["teardown"]:
        teardown()
    elif sys.argv[1:2] == ["check-empty"]:
        check_empty(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["example-setup"]:
        example_setup(sys.argv[2])
    elif sys.argv[1:2] == ["example-check"]:
        example_check(int(sys.argv[2]))
    else:
        sys.exit(__doc__)
