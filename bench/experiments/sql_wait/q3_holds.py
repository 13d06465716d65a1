#!/usr/bin/python3
"""Question 3: what a waiting take (take_wait.sql, installed by q2_take_wait.py) holds inside
the caller's transaction, and what waits for it.

    /usr/bin/python3 q3_holds.py SOCKET LABEL [TXMQ_BINARY DSN]

A consumer in READ COMMITTED runs START TRANSACTION, CALL wp_take_wait('wt', 10, 8000) on an
empty topic. While it waits, another session reports the consumer's InnoDB transaction (rows
locked, lock structs, whether it has a read view), its row locks and metadata locks (MySQL:
performance_schema; MariaDB: information_schema.METADATA_LOCK_INFO if the plugin loads), then
tries, each with lock_wait_timeout 3 s:
  - the topic's row FOR UPDATE (what a change of groups or partitions takes first);
  - a DDL on the topic's queue table (ALTER TABLE ... COMMENT), and while it waits, a send:
    does the pending DDL queue the send behind the waiting take?
  - with TXMQ_BINARY: `txmq group create wt g2` / `txmq group drop wt g2` (a real layout change).
Then the same after the take returned a message (a send committed), before the caller commits.
"""
import subprocess
import sys
import threading
import time

import pymysql

from common import Call, connect, is_mariadb, one, q

SOCK, LABEL = sys.argv[1], sys.argv[2]
TXMQ = sys.argv[3] if len(sys.argv) > 4 else None
DSN = sys.argv[4] if len(sys.argv) > 4 else None
admin = connect(SOCK)
MARIA = is_mariadb(admin)
MDL = None
if MARIA:
    try:
        q(admin, "INSTALL SONAME 'metadata_lock_info'")
    except pymysql.MySQLError as e:
        if e.args[0] != 1968:  # already installed
            print(f"[{LABEL}] metadata_lock_info: {e.args}")
    try:
        q(admin, "SELECT 1 FROM information_schema.METADATA_LOCK_INFO LIMIT 1")
        MDL = ("SELECT LOCK_MODE, LOCK_TYPE, TABLE_SCHEMA, TABLE_NAME FROM information_schema.METADATA_LOCK_INFO "
               "WHERE THREAD_ID = %s")
    except pymysql.MySQLError:
        pass
else:
    MDL = ("SELECT m.LOCK_TYPE, m.LOCK_DURATION, m.OBJECT_TYPE, m.OBJECT_SCHEMA, m.OBJECT_NAME "
           "FROM performance_schema.metadata_locks m JOIN performance_schema.threads t "
           "ON t.THREAD_ID = m.OWNER_THREAD_ID WHERE t.PROCESSLIST_ID = %s")


def read_view(cid):
    status = q(admin, "SHOW ENGINE INNODB STATUS")[0][0][2]
    # Each transaction's block starts with "---TRANSACTION"; one with a read view says so.
    for block in status.split("---TRANSACTION")[1:]:
        if f"thread id {cid}," in block or f"MySQL thread id {cid}," in block:
            return block.strip().replace("\n", " | ")[:400]
    return "not listed"


def report(cid, when):
    trx = q(admin, "SELECT trx_state, trx_isolation_level, trx_rows_locked, trx_lock_structs, trx_tables_locked "
                   "FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s", (cid,))[0]
    print(f"[{LABEL}] {when}: INNODB_TRX {trx}; {read_view(cid)}", flush=True)
    if not MARIA:
        locks = q(admin, "SELECT l.OBJECT_NAME, l.LOCK_TYPE, l.LOCK_MODE, l.LOCK_STATUS, l.LOCK_DATA "
                         "FROM performance_schema.data_locks l JOIN performance_schema.threads t "
                         "ON t.THREAD_ID = l.THREAD_ID WHERE t.PROCESSLIST_ID = %s", (cid,))[0]
        print(f"[{LABEL}]   row/table locks: {locks}", flush=True)
    if MDL:
        print(f"[{LABEL}]   metadata locks: {q(admin, MDL, (cid,))[0]}", flush=True)


def attempt(what, sql):
    c = connect(SOCK, autocommit=False)
    q(c, "SET SESSION lock_wait_timeout = 3, SESSION innodb_lock_wait_timeout = 3")
    t = time.perf_counter()
    try:
        q(c, sql)
        out = "ok"
    except pymysql.MySQLError as e:
        out = f"error {e.args[0]}"
    c.rollback()
    c.close()
    print(f"[{LABEL}]   {what}: {out} after {(time.perf_counter() - t) * 1e3:.0f} ms", flush=True)


def ddl_with_send():
    ddl = connect(SOCK)
    q(ddl, "SET SESSION lock_wait_timeout = 3")
    alter = Call(ddl, "ALTER TABLE txmq_q_wt COMMENT = 'probe'")
    alter.start()
    time.sleep(0.3)
    s = connect(SOCK)
    q(s, "SET SESSION lock_wait_timeout = 5")
    t = time.perf_counter()
    try:
        q(s, "CALL txmq_send('wt', 'behind the ddl', NULL)")
        out = "ok"
    except pymysql.MySQLError as e:
        out = f"error {e.args[0]}"
    send_ms = (time.perf_counter() - t) * 1e3
    alter.join()
    print(f"[{LABEL}]   ALTER TABLE txmq_q_wt: {alter.error or 'ok'} after {alter.elapsed * 1e3:.0f} ms; "
          f"a send (autocommit) started 0.3 s into it: {out} after {send_ms:.0f} ms", flush=True)


def txmq(*a):
    t = time.perf_counter()
    r = subprocess.run([TXMQ, "--dsn", DSN, *a], capture_output=True, text=True, timeout=60)
    return f"rc {r.returncode} after {(time.perf_counter() - t) * 1e3:.0f} ms: {(r.stdout + r.stderr).strip()[:120]}"


def main():
    q(admin, "DELETE FROM txmq_q_wt")
    print(f"# [{LABEL}] {one(admin, 'SELECT VERSION()')}")
    for iso in ("READ COMMITTED", "REPEATABLE READ"):
        c = connect(SOCK, autocommit=False)
        q(c, f"SET SESSION TRANSACTION ISOLATION LEVEL {iso}")
        cid = one(c, "SELECT CONNECTION_ID()")
        q(c, "START TRANSACTION")
        call = Call(c, "CALL wp_take_wait('wt', 10, 8000)")
        call.start()
        time.sleep(1.5)
        report(cid, f"{iso}: while the take waits")
        if iso == "READ COMMITTED":
            attempt("the topic's row FOR UPDATE", "SELECT * FROM txmq_topics WHERE name = 'wt' FOR UPDATE")
            ddl_with_send()
            if TXMQ:
                print(f"[{LABEL}]   txmq group create wt g2: {txmq('group', 'create', 'wt', 'g2')}", flush=True)
        # A send wakes it (in READ COMMITTED the send behind the DDL did); before the caller commits:
        if call.is_alive():
            w = connect(SOCK)
            q(w, "SET SESSION innodb_lock_wait_timeout = 3")
            t = time.perf_counter()
            try:
                q(w, "CALL txmq_send('wt', 'wake', NULL)")
                print(f"[{LABEL}]   a send (autocommit) to wake it: ok after {(time.perf_counter() - t) * 1e3:.0f} ms")
            except pymysql.MySQLError as e:
                print(f"[{LABEL}]   a send (autocommit) to wake it: error {e.args[0]} after "
                      f"{(time.perf_counter() - t) * 1e3:.0f} ms (blocked by the waiting take's locks)")
        call.join(10)
        print(f"[{LABEL}]   the take returned {call.result[-1] if call.result else call.error} "
              f"after {call.elapsed:.2f} s", flush=True)
        report(cid, f"{iso}: after the take returned, transaction open")
        if iso == "READ COMMITTED" and TXMQ:
            print(f"[{LABEL}]   txmq group drop wt g2: {txmq('group', 'drop', 'wt', 'g2')}", flush=True)
        c.rollback()
        c.close()
        q(admin, "DELETE FROM txmq_q_wt")


main()
