#!/usr/bin/python3
"""Question 1: what a wait inside a stored procedure does when another session runs KILL QUERY
on the connection running the CALL.

    /usr/bin/python3 q1_primitives.py SOCKET LABEL

For each wait primitive x handler x mode (autocommit / inside START TRANSACTION with a row
written before the CALL) it starts the CALL, KILLs it after 0.4 s and reports: the CALL's error
(or none), the result sets it answered, how long it ran, what the procedure logged after the
wait (a MEMORY table, so that a rollback cannot hide it), whether the caller's transaction is
still open after the CALL and whether its earlier row commits.
Works in the database txmq, in tables and procedures named wp_* (dropped and made again).
"""
import os
import time

from common import Call, args, connect, is_mariadb, one, q

SOCK, LABEL = args()
admin = connect(SOCK)
MARIA = is_mariadb(admin)

WAITS = {
    "do_sleep": "DO SLEEP(p);",
    "select_sleep_into": "SELECT SLEEP(p) INTO v;",
    "set_sleep": "SET v = SLEEP(p);",
    "do_get_lock": "DO GET_LOCK('wp_held', p);",
    "select_get_lock_into": "SELECT GET_LOCK('wp_held', p) INTO v;",
    "set_get_lock": "SET v = GET_LOCK('wp_held', p);",
    "row_lock_for_update": "SELECT id INTO v FROM wp_rows WHERE id = 1 FOR UPDATE;",
    "row_lock_share": "SELECT id INTO v FROM wp_rows WHERE id = 1 LOCK IN SHARE MODE;",
    # No wait: short statements for p seconds; the KILL lands in one of them or between two.
    "busy_statements": "BEGIN DECLARE t DOUBLE DEFAULT UNIX_TIMESTAMP(NOW(6)) + p; "
                       "WHILE UNIX_TIMESTAMP(NOW(6)) < t DO SELECT COUNT(*) INTO v FROM wp_rows; END WHILE; END;",
}
if MARIA:
    # Waits for a GTID that never comes (no replication): returns -1 at the timeout.
    WAITS["select_master_gtid_wait_into"] = "SELECT MASTER_GTID_WAIT('0-999-999999999', p) INTO v;"
HANDLERS = {
    "none": "",
    "continue_1317": "DECLARE CONTINUE HANDLER FOR 1317 SET h = 1317;",
    "continue_sqlexception": "DECLARE CONTINUE HANDLER FOR SQLEXCEPTION "
                             "GET DIAGNOSTICS CONDITION 1 h = MYSQL_ERRNO;",
    "exit_sqlexception": "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN "
                         "GET DIAGNOSTICS CONDITION 1 h = MYSQL_ERRNO; "
                         "INSERT INTO wp_log (conn, note) VALUES (CONNECTION_ID(), CONCAT('in exit handler h=', h)); "
                         "SELECT 'exit-handler' AS marker, h AS handled, (SELECT COUNT(*) FROM wp_rows) AS table_rows; END;",
}


ONLY = os.environ.get("ONLY", "")  # e.g. ONLY=busy_statements,do_sleep: just these waits
if ONLY:
    WAITS = {k: v for k, v in WAITS.items() if k in ONLY.split(",")}


def setup():
    for stmt in [
        "DROP TABLE IF EXISTS wp_rows", "DROP TABLE IF EXISTS wp_log", "DROP TABLE IF EXISTS wp_marks",
        "CREATE TABLE wp_rows (id INT PRIMARY KEY) ENGINE=InnoDB",
        "INSERT INTO wp_rows VALUES (1), (2), (3)",
        "CREATE TABLE wp_log (n INT AUTO_INCREMENT PRIMARY KEY, conn BIGINT, note VARCHAR(200)) ENGINE=MEMORY",
        "CREATE TABLE wp_marks (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(100)) ENGINE=InnoDB",
    ]:
        q(admin, stmt)
    for w, wsql in WAITS.items():
        for h, hsql in HANDLERS.items():
            name = f"wp_{w}__{h}"
            q(admin, f"DROP PROCEDURE IF EXISTS {name}")
            q(admin, f"""CREATE PROCEDURE {name}(IN p INT)
BEGIN
  DECLARE v BIGINT DEFAULT -1;
  DECLARE h INT DEFAULT 0;
  {hsql}
  INSERT INTO wp_log (conn, note) VALUES (CONNECTION_ID(), 'before wait');
  {wsql}
  INSERT INTO wp_log (conn, note) VALUES (CONNECTION_ID(), CONCAT('after wait v=', IFNULL(v, 'NULL'), ' h=', h));
  SELECT 'after' AS marker, v AS waited, h AS handled, (SELECT COUNT(*) FROM wp_rows) AS table_rows;
  INSERT INTO wp_log (conn, note) VALUES (CONNECTION_ID(), 'end of procedure');
END""")


def in_trx(conn_id):
    return one(admin, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s",
               (conn_id,))


def trial(wait, handler, mode, kill_after=0.4):
    name = f"wp_{wait}__{handler}"
    holder = connect(SOCK, autocommit=False)
    q(holder, "SELECT GET_LOCK('wp_held', 0)")
    q(holder, "START TRANSACTION")
    q(holder, "SELECT id FROM wp_rows WHERE id = 1 FOR UPDATE")
    c = connect(SOCK)
    cid = one(c, "SELECT CONNECTION_ID()")
    q(c, "SET SESSION innodb_lock_wait_timeout = 10")
    q(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    q(admin, "DELETE FROM wp_log")
    if mode == "trx":
        q(c, "START TRANSACTION")
        q(c, "INSERT INTO wp_marks (note) VALUES (%s)", (name,))
    call = Call(c, f"CALL {name}(10)")
    call.start()
    time.sleep(kill_after)
    t = time.perf_counter()
    q(admin, f"KILL QUERY {cid}")
    kill_ms = (time.perf_counter() - t) * 1e3
    call.join(15)
    log = [r[0] for r in q(admin, "SELECT note FROM wp_log WHERE conn = %s ORDER BY n", (cid,))[0]]
    open_after = in_trx(cid)
    committed = None
    after_stmt = None
    if call.is_alive():
        after_stmt = "CALL STILL RUNNING"
    else:
        try:
            after_stmt = one(c, "SELECT 'next statement ok'")
        except Exception as e:  # noqa
            after_stmt = f"next statement: {e}"
        if mode == "trx":
            q(c, "COMMIT")
            committed = one(admin, "SELECT COUNT(*) FROM wp_marks WHERE note = %s", (name,))
    holder.rollback()
    q(holder, "DO RELEASE_LOCK('wp_held')")
    holder.close()
    c.close()
    sets = [[tuple(r) for r in s] for s in (call.result or [])]
    return dict(error=call.error, sets=sets, ms=(call.elapsed or -1) * 1e3, kill_ms=kill_ms,
                log=log, open_after=open_after, committed=committed, next=after_stmt)


def main():
    setup()
    print(f"# [{LABEL}] {one(admin, 'SELECT VERSION()')}: KILL QUERY 0.4 s into a 10 s wait inside a CALL")
    for mode in ("autocommit", "trx"):
        for wait in WAITS:
            for handler in HANDLERS:
                r = trial(wait, handler, mode)
                print(f"[{LABEL}] {mode:10} {wait:21} {handler:22} call {r['ms']:7.0f} ms "
                      f"error={r['error']} sets={r['sets']} log={r['log']} "
                      + (f"trx_open_after={r['open_after']} marker_committed={r['committed']} " if mode == 'trx' else "")
                      + f"next={r['next']!r} kill_ms={r['kill_ms']:.1f}", flush=True)


main()
