#!/usr/bin/python3
"""MariaDB 11.6+ (innodb_snapshot_isolation): after a fence (a shared-lock read that waited
on an uncommitted row) ends with ER_CHECKREAD (1020) at the sender's COMMIT inside a CALL,
what do the CALL's next statements see? /usr/bin/python3 q4_checkread.py SOCKET LABEL"""
import time
from common import Call, args, connect, one, q

SOCK, LABEL = args()
a = connect(SOCK)
q(a, "DROP TABLE IF EXISTS wp_cr")
q(a, "CREATE TABLE wp_cr (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
q(a, "INSERT INTO wp_cr VALUES (1, 0)")
q(a, "DROP PROCEDURE IF EXISTS wp_cr_probe")
q(a, """CREATE PROCEDURE wp_cr_probe()
BEGIN
  DECLARE e INT DEFAULT 0;
  DECLARE r TEXT DEFAULT '';
  DECLARE x INT;
  DECLARE CONTINUE HANDLER FOR SQLEXCEPTION GET DIAGNOSTICS CONDITION 1 e = MYSQL_ERRNO;
  SELECT COUNT(*) INTO x FROM wp_cr;                                  -- a consistent read first
  SET e = 0; SELECT id INTO x FROM wp_cr WHERE id > 1 ORDER BY id LIMIT 1 LOCK IN SHARE MODE;
  SET r = CONCAT('fence: errno ', e);
  SET e = 0, x = NULL; SELECT COUNT(*) INTO x FROM wp_cr WHERE id = 2;
  SET r = CONCAT(r, '; consistent read of the new row: ', IFNULL(x, 'NULL'), ' errno ', e);
  SET e = 0, x = NULL; SELECT id INTO x FROM wp_cr WHERE id = 2 FOR UPDATE SKIP LOCKED;
  SET r = CONCAT(r, '; FOR UPDATE SKIP LOCKED: ', IFNULL(x, 'NULL'), ' errno ', e);
  SET e = 0, x = NULL; SELECT id INTO x FROM wp_cr WHERE id = 2 FOR UPDATE;
  SET r = CONCAT(r, '; FOR UPDATE: ', IFNULL(x, 'NULL'), ' errno ', e);
  SELECT r;
END""")
for iso in ("READ COMMITTED", "REPEATABLE READ"):
    q(a, "DELETE FROM wp_cr WHERE id > 1")
    c = connect(SOCK, autocommit=False)
    q(c, f"SET SESSION TRANSACTION ISOLATION LEVEL {iso}")
    s = connect(SOCK, autocommit=False)
    s.begin(); q(s, "INSERT INTO wp_cr VALUES (2, 0)")
    q(c, "START TRANSACTION")
    call = Call(c, "CALL wp_cr_probe()")
    call.start(); time.sleep(0.3); s.commit(); call.join()
    print(f"[{LABEL}] {iso}: {call.result or call.error}")
    q(c, "START TRANSACTION") if False else None
    c.rollback()
    # The same after the CALL, as a statement of its own in the same transaction:
    print(f"[{LABEL}] {iso}: snapshot_isolation={one(a, 'SELECT @@innodb_snapshot_isolation') if 'Maria' in one(a,'SELECT VERSION()') and one(a, 'SELECT VERSION()') >= '11.6' else 'n/a'}")
