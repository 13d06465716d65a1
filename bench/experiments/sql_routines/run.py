#!/usr/bin/python3
"""Issue 34 probes: stored routines vs client SQL for a send, on one server.

Usage: PYTHONPATH=<dir with pymysql> /usr/bin/python3 run.py SOCKET LABEL
The topic 'probe' must exist (txmq --dsn ... topic create probe). Prints a table of us per call.
"""
import os, statistics, sys, threading, time
import pymysql

SOCK, LABEL = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
N, TX, REPEATS = 2000, 100, 3
PAYLOAD = b"x" * 100


def connect(user="root", password=""):
    return pymysql.connect(unix_socket=SOCK, user=user, password=password, database="txmq",
                           autocommit=True)


def install(c):
    cur = c.cursor()
    for stmt in open(os.path.join(HERE, "routines.sql")).read().split("\n$$\n"):
        body = "\n".join(l for l in stmt.splitlines() if not l.startswith("--")).strip()
        if body:
            cur.execute(body)


def timed(c, one, in_tx):
    cur = c.cursor()
    best = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for i in range(N):
            if in_tx and i % TX == 0:
                cur.execute("BEGIN")
            one(cur)
            if in_tx and i % TX == TX - 1:
                cur.execute("COMMIT")
        best.append((time.perf_counter() - t0) / N * 1e6)
    return statistics.median(best)


def single(c):
    ins = ("INSERT INTO txmq_q_probe (visible_at, enqueued_at, msg_key, payload) "
           "VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, %s)")

    def client_insert(cur):
        cur.execute(ins, (PAYLOAD,))
        assert cur.lastrowid

    def client_lookup_insert(cur):  # what the library sends for one message
        cur.execute("SELECT layout FROM txmq_topics WHERE name = %s LOCK IN SHARE MODE", ("probe",))
        cur.fetchall()
        cur.execute(ins, (PAYLOAD,))

    def proc_out(cur):  # CALL + SELECT @id: two round trips
        cur.execute("CALL txmq_send_probe(%s, %s, @id)", ("probe", PAYLOAD))
        cur.execute("SELECT @id")
        assert cur.fetchone()[0]

    def proc_rs(cur):  # one round trip, the id as a result set
        cur.execute("CALL txmq_send_probe_rs(%s, %s)", ("probe", PAYLOAD))
        assert cur.fetchone()[0]

    def proc_lrs(cur):  # lookup, one round trip, the id as a result set
        cur.execute("CALL txmq_send_probe_lrs(%s, %s)", ("probe", PAYLOAD))
        assert cur.fetchone()[0]

    def func(cur):
        cur.execute("SELECT txmq_send_fn_probe(%s)", (PAYLOAD,))
        assert cur.fetchone()[0]

    rows = []
    for name, f in [("client INSERT", client_insert),
                    ("client lookup+INSERT (2 stmts)", client_lookup_insert),
                    ("CALL send_probe (lookup, OUT) + SELECT @id", proc_out),
                    ("CALL send_probe_lrs (lookup, result set)", proc_lrs),
                    ("CALL send_probe_rs (no lookup, result set)", proc_rs),
                    ("SELECT static per-topic function", func)]:
        rows.append((name, timed(c, f, False), timed(c, f, True)))
    print(f"\n[{LABEL}] one message of 100 bytes, {N} calls, median of {REPEATS}; us per call")
    print(f"{'form':46} {'autocommit':>10} {'tx of 100':>10}")
    for name, a, b in rows:
        print(f"{name:46} {a:10.1f} {b:10.1f}")


def batch(c, returning):
    import json
    cur = c.cursor()
    B, R = 1000, 20
    msgs = ["m%04d-" % i + "x" * 94 for i in range(B)]
    js = json.dumps(msgs)
    values = ("INSERT INTO txmq_q_probe (visible_at, enqueued_at, msg_key, payload) VALUES " +
              ",".join(["(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, %s)"] * B))

    def client_values(cur):
        cur.execute(values, msgs)
        assert cur.rowcount == B

    def client_values_ret(cur):
        cur.execute(values + " RETURNING id", msgs)
        assert len(cur.fetchall()) == B

    def proc_select(cur):
        cur.execute("CALL txmq_send_batch_select_probe(%s, %s, 0)", ("probe", js))
        assert cur.fetchone()[1] == B

    def proc_select_ret(cur):
        cur.execute("CALL txmq_send_batch_select_probe(%s, %s, 1)", ("probe", js))
        assert len(cur.fetchall()) == B

    def proc_values(cur):
        cur.execute("CALL txmq_send_batch_values_probe(%s, %s)", ("probe", js))
        assert cur.fetchone()[1] == B

    forms = [("client multi-row INSERT", client_values),
             ("CALL JSON_TABLE INSERT..SELECT", proc_select),
             ("CALL JSON_TABLE -> multi-row VALUES", proc_values)]
    if returning:
        forms[1:1] = [("client multi-row INSERT RETURNING", client_values_ret)]
        forms.append(("CALL JSON_TABLE INSERT..SELECT RETURNING", proc_select_ret))
    print(f"\n[{LABEL}] batch of {B} x 100 bytes in one transaction, median of {R}; ms per batch")
    for name, f in forms:
        ts = []
        for _ in range(R):
            t0 = time.perf_counter()
            cur.execute("BEGIN"); f(cur); cur.execute("COMMIT")
            ts.append((time.perf_counter() - t0) * 1e3)
        print(f"{name:46} {statistics.median(ts):8.2f} ms  ({statistics.median(ts)*1e3/B:.1f} us/msg)")


def batch_ids_concurrent(proc):
    """4 connections call a batch procedure at once; is first_id..first_id+n-1 all ours?"""
    import json
    bad, calls = [0], [0]
    lock = threading.Lock()

    def worker(t):
        c = connect(); cur = c.cursor()
        for k in range(25):
            tag = f"t{t}k{k}"
            js = json.dumps([f"{tag}-{i}" for i in range(1000)])
            cur.execute("BEGIN")
            cur.execute(f"CALL {proc}(%s, %s" + (", 0)" if "select" in proc else ")"), ("probe", js))
            first, n = cur.fetchone()
            cur.execute("COMMIT")
            cur.execute("SELECT COUNT(*) FROM txmq_q_probe WHERE id BETWEEN %s AND %s AND "
                        "payload LIKE %s", (first, first + n - 1, tag + "-%"))
            ours = cur.fetchone()[0]
            with lock:
                calls[0] += 1
                if ours != n: bad[0] += 1
        c.close()

    ths = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    [t.start() for t in ths]; [t.join() for t in ths]
    print(f"[{LABEL}] {proc}, 4 concurrent callers: {bad[0]} of {calls[0]} batches had ids "
          f"outside first_id..first_id+n-1")


def privileges(c):
    cur = c.cursor()
    cur.execute("DROP USER IF EXISTS 'txmq_app'@'localhost'")
    cur.execute("CREATE USER 'txmq_app'@'localhost' IDENTIFIED BY 'app-pw'")
    for r in ["PROCEDURE txmq.txmq_send_probe", "PROCEDURE txmq.txmq_send_batch_select_probe",
              "FUNCTION txmq.txmq_send_fn_probe"]:
        cur.execute(f"GRANT EXECUTE ON {r} TO 'txmq_app'@'localhost'")
    a = connect("txmq_app", "app-pw"); ac = a.cursor()
    ac.execute("SHOW GRANTS"); print(f"\n[{LABEL}] grants of txmq_app:", [g[0] for g in ac.fetchall()])
    ac.execute("BEGIN")
    ac.execute("CALL txmq_send_probe('probe', 'via-execute-only', @id)")
    ac.execute("SELECT @id"); pid = ac.fetchone()[0]
    ac.execute("SELECT txmq_send_fn_probe('via-function')"); fid = ac.fetchone()[0]
    ac.execute("COMMIT")
    print(f"[{LABEL}] EXECUTE-only user sent ids {pid} (procedure) and {fid} (function)")
    for sql in ["INSERT INTO txmq_q_probe (visible_at, enqueued_at, payload) VALUES (NOW(), NOW(), 'x')",
                "SELECT COUNT(*) FROM txmq_q_probe",
                "CALL txmq_send_probe('probe`; DROP TABLE x; --', 'x', @id)",
                "CALL txmq_send_probe('nosuch', 'x', @id)"]:
        try:
            ac.execute(sql); print(f"[{LABEL}] UNEXPECTED success: {sql}")
        except pymysql.MySQLError as e:
            print(f"[{LABEL}] refused as expected: {sql[:50]!r}: {e.args}")
    a.close()


def function_dynamic_sql(c):
    cur = c.cursor()
    try:
        cur.execute("CREATE FUNCTION txmq_fn_dyn_probe(t VARCHAR(64)) RETURNS INT MODIFIES SQL DATA "
                    "BEGIN SET @s = CONCAT('SELECT 1 FROM txmq_q_', t); PREPARE s FROM @s; "
                    "EXECUTE s; RETURN 1; END")
        print(f"[{LABEL}] UNEXPECTED: a function with PREPARE was created")
    except pymysql.MySQLError as e:
        print(f"\n[{LABEL}] function with PREPARE refused: {e.args}")


def main():
    c = connect()
    cur = c.cursor()
    cur.execute("SELECT VERSION(), @@innodb_autoinc_lock_mode, @@log_bin, @@innodb_flush_log_at_trx_commit")
    print(f"[{LABEL}] version, autoinc_lock_mode, log_bin, flush_log_at_trx_commit:", cur.fetchone())
    install(c)
    function_dynamic_sql(c)
    privileges(c)
    single(c)
    cur.execute("SELECT 1 FROM DUAL WHERE VERSION() LIKE '%MariaDB%'")
    maria = bool(cur.fetchall())
    batch(c, maria)
    batch_ids_concurrent("txmq_send_batch_select_probe")
    batch_ids_concurrent("txmq_send_batch_values_probe")


main()
