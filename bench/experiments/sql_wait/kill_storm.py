#!/usr/bin/python3
"""Is a wait primitive safe to KILL? (waiters.cc: on MariaDB a KILL QUERY that lands as a SLEEP
times out can stall 2 s, and with it every SLEEP of the server.)

    /usr/bin/python3 kill_storm.py SOCKET LABEL [SECONDS_PER_PRIMITIVE] [PRIMITIVES]

W sessions loop a short wait (10 ms, so that timeouts are frequent: the race's worst case)
while K killer sessions KILL QUERY random waiters as fast as they can. Reports per primitive:
KILLs done, how many took >= 100 ms / >= 1 s, the longest, and the waiters' longest statement.
Primitives: sleep (SELECT SLEEP(0.01)), get_lock (DO GET_LOCK of a lock a holder keeps, 0.01 s),
gtid_wait (MariaDB: SELECT MASTER_GTID_WAIT of a GTID that never comes, 0.01 s).
"""
import random
import sys
import threading
import time

import pymysql

from common import connect, is_mariadb, one, q

SOCK, LABEL = sys.argv[1], sys.argv[2]
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 20
admin = connect(SOCK)
MARIA = is_mariadb(admin)
ALL = ["sleep", "get_lock"] + (["gtid_wait"] if MARIA else [])
PRIMS = sys.argv[4].split(",") if len(sys.argv) > 4 else ALL
W, K = 8, 2
STATEMENT = {
    "sleep": "SELECT SLEEP(0.01)",
    "get_lock": "DO GET_LOCK('ks_held', 0.01)",
    "gtid_wait": "SELECT MASTER_GTID_WAIT('4294967295-1-18446744073709551615', 0.01)",
}


def storm(prim):
    holder = connect(SOCK)
    q(holder, "DO GET_LOCK('ks_held', 0)")
    stop = threading.Event()
    waiters = [connect(SOCK) for _ in range(W)]
    ids = [one(c, "SELECT CONNECTION_ID()") for c in waiters]
    longest_wait = [0.0] * W
    errors = {}

    def wait_loop(i):
        c = waiters[i]
        while not stop.is_set():
            t = time.perf_counter()
            try:
                q(c, STATEMENT[prim])
            except pymysql.MySQLError as e:
                errors[e.args[0]] = errors.get(e.args[0], 0) + 1
            longest_wait[i] = max(longest_wait[i], time.perf_counter() - t)

    kills = []

    def kill_loop():
        c = connect(SOCK)
        while not stop.is_set():
            victim = random.choice(ids)
            t = time.perf_counter()
            q(c, f"KILL QUERY {victim}")
            kills.append(time.perf_counter() - t)

    threads = [threading.Thread(target=wait_loop, args=(i,)) for i in range(W)]
    threads += [threading.Thread(target=kill_loop) for _ in range(K)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    holder.close()
    for c in waiters:
        c.close()
    slow = sum(k >= 0.1 for k in kills)
    stalls = sum(k >= 1.0 for k in kills)
    print(f"[{LABEL}] {prim:9} {len(kills)} KILLs in {SECONDS:.0f} s: >=100 ms {slow}, >=1 s {stalls}, "
          f"longest KILL {max(kills) * 1e3:.0f} ms; waiters' longest statement "
          f"{max(longest_wait) * 1e3:.0f} ms; waiters' errors {errors}", flush=True)


print(f"# [{LABEL}] {one(admin, 'SELECT VERSION()')}: {W} waiters, {K} killers")
for p in PRIMS:
    storm(p)
