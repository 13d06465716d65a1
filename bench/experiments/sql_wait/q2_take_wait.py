#!/usr/bin/python3
"""Question 2: a waiting take (take_wait.sql) woken by the library's mechanism.

    /usr/bin/python3 q2_take_wait.py SOCKET LABEL [WAIT_KIND] [SCENARIOS]

WAIT_KIND: sleep (SELECT SLEEP INTO: MySQL's), gtid (MariaDB's MASTER_GTID_WAIT), default by
server. Needs a topic `wt` with one group and one partition (txmq topic create wt).
Scenarios (default all):
  idle      one take waits 20 s with nobody sending: its length, what it returned, and the
            server's statement counters over it (SHOW GLOBAL STATUS deltas: statements per second).
  sql       senders CALL txmq_send inside a transaction (it KILLs the waiting take before the
            commit; the take fences on the uncommitted row), then COMMIT after WORK ms.
  lib       senders do what the library does: INSERT, COMMIT, then take the oldest registration
            (MariaDB: DELETE ... RETURNING; MySQL: SELECT then DELETE), KILL QUERY it and put it
            back (INSERT IGNORE ... NOW(6)), as Waiters::wake_waiters.
  mixed     2 senders (one of each) every 5-15 ms, 2 waiting takes: wake-ups that land outside
            the wait (in the fence, a claim, between statements).
Each reports COMMIT-to-return latency (from the client's COMMIT to the CALL's return, per
message), the takes' errors, and registrations left behind by takes that had returned
(stale: a later send would KILL whatever that connection then runs).
"""
import os
import random
import sys
import threading
import time

import pymysql

from common import connect, is_mariadb, one, q, summary

SOCK, LABEL = sys.argv[1], sys.argv[2]
admin = connect(SOCK)
MARIA = is_mariadb(admin)
KIND = sys.argv[3] if len(sys.argv) > 3 else ("gtid" if MARIA else "sleep")
SCEN = sys.argv[4].split(",") if len(sys.argv) > 4 else ["idle", "sql", "lib", "mixed"]
SENDS = int(os.environ.get("SENDS", "200"))
WAIT = {
    "sleep": "SELECT SLEEP(v_slice) INTO v_r;",
    "gtid": "SELECT MASTER_GTID_WAIT('4294967295-1-18446744073709551615', v_slice) INTO v_r;",
    # Needs a lock that another connection holds: this probe's holder (a stand-in for a
    # long-lived txmq process). MariaDB: a KILL makes it return NULL, no error; MySQL: 1317.
    "get_lock": "SELECT GET_LOCK('wp_held', v_slice) INTO v_r; "
                "IF v_r = 1 THEN DO RELEASE_LOCK('wp_held'); END IF;",
}[KIND]
KILL_MS = []
if KIND == "get_lock":
    holder = connect(SOCK)
    q(holder, "DO GET_LOCK('wp_held', 0)")
HERE = os.path.dirname(os.path.abspath(__file__))


def install():
    text = open(os.path.join(HERE, "take_wait.sql")).read().replace("@WAIT@", WAIT)
    for stmt in text.split("\n$$\n"):
        body = "\n".join(l for l in stmt.splitlines() if not l.startswith("--")).strip()
        if body:
            q(admin, body)


def consumer_conn():
    c = connect(SOCK, autocommit=False)
    q(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return c


class Consumer(threading.Thread):
    def __init__(self, stop, returned, wait_ms=20000):
        super().__init__(daemon=True)
        self.c = consumer_conn()
        self.monitor = connect(SOCK)  # pymysql connections are not for two threads
        self.cid = one(self.c, "SELECT CONNECTION_ID()")
        self.stop, self.returned, self.wait_ms = stop, returned, wait_ms
        self.errors, self.calls, self.stale_seen = {}, 0, 0

    def run(self):
        while not self.stop.is_set():
            q(self.c, "START TRANSACTION")
            try:
                sets = q(self.c, "CALL wp_take_wait('wt', 10, %s)", (self.wait_ms,))
            except pymysql.MySQLError as e:
                t = time.perf_counter()
                self.errors[e.args[0]] = self.errors.get(e.args[0], 0) + 1
                self.c.rollback()
                continue
            t = time.perf_counter()
            self.calls += 1
            ids = [r[0] for r in sets[-1]] if sets else []
            for i in ids:
                self.returned[i] = t
            if ids:
                q(self.c, "DELETE FROM txmq_q_wt WHERE id IN (%s)" % ",".join(map(str, ids)))
            try:
                self.c.commit()
            except pymysql.MySQLError as e:
                self.errors[("commit", e.args[0])] = self.errors.get(("commit", e.args[0]), 0) + 1
            # Its registration is gone once the CALL returned, unless a sender put it back.
            self.stale_seen += one(self.monitor, "SELECT COUNT(*) FROM txmq_waiters WHERE connection_id = %s",
                                   (self.cid,)) or 0


def sql_send(s, payload, work_ms):
    s.begin()
    mid = q(s, "CALL txmq_send('wt', %s, NULL)", (payload,))[0][0][0]
    if work_ms:
        time.sleep(work_ms / 1000)
    t = time.perf_counter()
    s.commit()
    return mid, t


def lib_send(s, payload, work_ms):
    s.begin()
    with s.cursor() as c:
        c.execute("INSERT INTO txmq_q_wt (visible_at, enqueued_at, msg_key, payload) "
                  "VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, %s)", (payload,))
        mid = c.lastrowid
    if work_ms:
        time.sleep(work_ms / 1000)
    t = time.perf_counter()
    s.commit()
    # Waiters::wake_waiters (autocommit statements on the sender's pooled connection).
    if MARIA:
        sets = q(s, "DELETE FROM txmq_waiters WHERE topic = 'wt' ORDER BY registered_at "
                    "LIMIT 1 RETURNING connection_id")
        ids = [r[0] for r in sets[0]] if sets else []
    else:
        ids = [r[0] for r in q(s, "SELECT connection_id FROM txmq_waiters WHERE topic = 'wt' "
                                  "ORDER BY registered_at LIMIT 1")[0]]
        if ids:
            q(s, "DELETE FROM txmq_waiters WHERE topic = 'wt' AND connection_id IN (%s)" %
              ",".join(map(str, ids)))
    s.commit()
    woken = []
    for cid in ids:
        try:
            t0 = time.perf_counter()
            q(s, f"KILL QUERY {cid}")
            KILL_MS.append((time.perf_counter() - t0) * 1e3)
            woken.append(cid)
        except pymysql.MySQLError:
            pass
    if woken:
        q(s, "INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at) VALUES " +
          ",".join(f"({cid}, 'wt', NOW(6))" for cid in woken))
        s.commit()
    return mid, t


def run(name, senders, consumers, gap_ms, work_ms):
    KILL_MS.clear()
    q(admin, "DELETE FROM txmq_q_wt")
    q(admin, "DELETE FROM txmq_waiters WHERE topic = 'wt'")
    stop = threading.Event()
    returned, committed = {}, {}
    cons = [Consumer(stop, returned) for _ in range(consumers)]
    for c in cons:
        c.start()
    time.sleep(0.5)
    per = SENDS // len(senders)

    def sender(kind):
        s = connect(SOCK, autocommit=False)
        fn = sql_send if kind == "sql" else lib_send
        for i in range(per):
            time.sleep(random.uniform(*gap_ms) / 1000)
            mid, t = fn(s, b"m", work_ms)
            committed[mid] = t

    ts = [threading.Thread(target=sender, args=(k,)) for k in senders]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    time.sleep(1.5)
    stop.set()
    s = connect(SOCK, autocommit=False)
    for _ in cons:  # one message each ends their waits
        sql_send(s, b"stop", 0)
    for c in cons:
        c.join(25)
    lat = [(returned[m] - committed[m]) * 1e3 for m in committed if m in returned]
    missing = [m for m in committed if m not in returned]
    time.sleep(0.2)
    left = one(admin, "SELECT COUNT(*) FROM txmq_waiters WHERE connection_id IN (%s)" %
               ",".join(str(c.cid) for c in cons))
    errors = {}
    for c in cons:
        for k, v in c.errors.items():
            errors[k] = errors.get(k, 0) + v
    print(f"[{LABEL}/{KIND}] {name}: {len(committed)} sends in {elapsed:.1f} s by {senders}, "
          f"{consumers} waiting take(s), work {work_ms} ms before COMMIT; COMMIT->return {summary(lat)}; "
          f"not returned {len(missing)}; calls {sum(c.calls for c in cons)}, errors {errors}; "
          f"stale registrations seen between calls {sum(c.stale_seen for c in cons)}, left at the end {left}"
          + (f"; library-like KILLs: longest {max(KILL_MS):.1f} ms, >= 20 ms: {sum(k >= 20 for k in KILL_MS)} of {len(KILL_MS)}" if KILL_MS else ""),
          flush=True)
    for c in cons:
        c.c.close()
        c.monitor.close()


def counters():
    rows = q(admin, "SHOW GLOBAL STATUS WHERE Variable_name LIKE 'Com\\_%' OR Variable_name IN "
                    "('Questions', 'Queries', 'Handler_read_key', 'Handler_write', 'Handler_delete')")[0]
    return {k: int(v) for k, v in rows}


def idle():
    q(admin, "DELETE FROM txmq_q_wt")
    c = consumer_conn()
    before = counters()
    q(c, "START TRANSACTION")
    t = time.perf_counter()
    sets = q(c, "CALL wp_take_wait('wt', 10, 20000)")
    took = time.perf_counter() - t
    after = counters()
    c.commit()
    delta = {k: after[k] - before[k] for k in after if after[k] - before[k]}
    stmts = sum(v for k, v in delta.items() if k.startswith("Com_"))
    print(f"[{LABEL}/{KIND}] idle: a 20 s wait returned after {took:.2f} s with {len(sets[-1]) if sets else 0} rows; "
          f"Com_* total {stmts} ({stmts / took:.1f}/s, of which 2 are this probe's SHOW STATUS); deltas {delta}",
          flush=True)
    c.close()


install()
print(f"# [{LABEL}] {one(admin, 'SELECT VERSION()')}: wait = {WAIT}")
for sc in SCEN:
    if sc == "idle":
        idle()
    elif sc == "sql":
        run("sql sender, commit at once", ["sql"], 1, (20, 60), 0)
        run("sql sender, 20 ms of work before COMMIT", ["sql"], 1, (20, 60), 20)
    elif sc == "lib":
        run("library-like sender", ["lib"], 1, (20, 60), 0)
    elif sc == "mixed":
        run("mixed senders, 2 takes", ["sql", "lib"], 2, (5, 15), 0)
