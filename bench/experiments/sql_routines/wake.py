#!/usr/bin/python3
"""Wake-up probe: a send procedure KILLs a waiting watcher's SLEEP inside the sender's transaction;
the watcher then blocks in a locking read on the uncommitted row, which returns at the sender's
COMMIT. Prints COMMIT-to-return latencies. Usage: run.py's environment; wake.py SOCKET LABEL"""
import statistics, sys, threading, time
import pymysql

SOCK, LABEL = sys.argv[1], sys.argv[2]
conn = lambda: pymysql.connect(unix_socket=SOCK, user="root", database="txmq", autocommit=True)
setup = conn().cursor()
setup.execute("DROP PROCEDURE IF EXISTS txmq_send_wake_probe")
setup.execute("""CREATE PROCEDURE txmq_send_wake_probe(IN p_payload LONGBLOB, IN p_watch BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  INSERT INTO txmq_q_probe (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SET @txmq_k = CONCAT('KILL QUERY ', p_watch);
  PREPARE txmq_k FROM @txmq_k; EXECUTE txmq_k; DEALLOCATE PREPARE txmq_k;
END""")
w = conn(); wc = w.cursor()
wc.execute("SELECT CONNECTION_ID()"); wid = wc.fetchone()[0]
wc.execute("SET SESSION innodb_lock_wait_timeout = 5")
wc.execute("SELECT COALESCE(MAX(id), 0) FROM txmq_q_probe"); last = [wc.fetchone()[0]]
done, lat, commit_at = threading.Event(), [], [0.0]

def watcher():
    while not done.is_set():
        try:
            wc.execute("SELECT SLEEP(30)")  # woken by KILL QUERY: returns 1, or error 1317
        except pymysql.MySQLError:
            pass
        if done.is_set(): break
        wc.execute("SELECT id FROM txmq_q_probe WHERE id > %s ORDER BY id LIMIT 1 LOCK IN SHARE MODE",
                   (last[0],))
        r = wc.fetchone()
        t = time.perf_counter()
        if r:
            last[0] = r[0]; lat.append((t - commit_at[0]) * 1e3)

th = threading.Thread(target=watcher); th.start()
s = conn(); sc = s.cursor()
for i in range(50):
    time.sleep(0.05)
    sc.execute("BEGIN")
    sc.execute("CALL txmq_send_wake_probe(%s, %s)", (b"wake", wid))
    time.sleep(0.1)  # the caller's work after the send: the watcher must not see it yet
    commit_at[0] = time.perf_counter(); sc.execute("COMMIT")
time.sleep(0.3); done.set(); conn().cursor().execute(f"KILL QUERY {wid}"); th.join()
lat.sort()
print(f"[{LABEL}] {len(lat)} of 50 sends seen; COMMIT->watcher return ms: p50 {lat[len(lat)//2]:.2f} "
      f"p99 {lat[int(len(lat)*0.99)-1]:.2f} max {lat[-1]:.2f}; none early: {min(lat) > 0}")
