"""Shared helpers of the sql_wait probes (issue 50 item 2: a waiting txmq_take).

Connections are root on a server's socket, database txmq (made by `txmq local` and by
scripts/server). Run with Debian's python3 and pymysql: /usr/bin/python3 PROBE.py SOCKET LABEL.
"""
import statistics
import sys
import threading
import time

import pymysql


def args():
    if len(sys.argv) < 3:
        sys.exit(f"usage: /usr/bin/python3 {sys.argv[0]} SOCKET LABEL")
    return sys.argv[1], sys.argv[2]


def connect(sock, autocommit=True, db="txmq", **kw):
    return pymysql.connect(unix_socket=sock, user="root", database=db, autocommit=autocommit,
                           client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS, **kw)


def q(conn, sql, params=None):
    """Runs one statement; every result set's rows (a CALL answers with several)."""
    with conn.cursor() as c:
        c.execute(sql, params)
        sets = [list(c.fetchall())] if c.description else []
        while c.nextset():
            if c.description:
                sets.append(list(c.fetchall()))
    return sets


def one(conn, sql, params=None):
    sets = q(conn, sql, params)
    return sets[0][0][0] if sets and sets[0] else None


def is_mariadb(conn):
    return "mariadb" in one(conn, "SELECT VERSION()").lower()


def status(conn, names=("Questions", "Com_select", "Com_call_procedure", "Com_kill",
                        "Com_insert", "Com_delete", "Com_do", "Com_set_option")):
    rows = q(conn, "SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" %
             ",".join("'%s'" % n for n in names))[0]
    return {k: int(v) for k, v in rows}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))]


def summary(xs):
    if not xs:
        return "none"
    return (f"n {len(xs)} p50 {pct(xs, 50):.2f} p90 {pct(xs, 90):.2f} p99 {pct(xs, 99):.2f} "
            f"max {max(xs):.2f} mean {statistics.mean(xs):.2f} ms")


class Call(threading.Thread):
    """Runs one statement on conn in a thread; .result / .error / .elapsed when joined."""

    def __init__(self, conn, sql, params=None):
        super().__init__(daemon=True)
        self.conn, self.sql, self.params = conn, sql, params
        self.result = self.error = None
        self.elapsed = None
        self.done_at = None

    def run(self):
        t = time.perf_counter()
        try:
            self.result = q(self.conn, self.sql, self.params)
        except pymysql.MySQLError as e:
            self.error = (e.args[0], str(e.args[1])[:90]) if e.args else (None, str(e))
        self.done_at = time.perf_counter()
        self.elapsed = self.done_at - t
