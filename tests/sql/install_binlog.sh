#!/bin/bash
# The SQL interface installs with binary logging on (MySQL's default) by a user without SUPER
# and with log_bin_trust_function_creators off, as on a managed server: the routines are
# procedures only (a function would need either). The user has the rights docs/sql.md lists for
# the definer; an application user with EXECUTE on the public procedures then sends and takes.
# A database that holds the functions of the earlier routines (schema 13 and 14) is upgraded by
# the same user: they are dropped, the procedures made. The server's default character set is
# latin1 (MariaDB's built-in one), and so is the database's: text sent as raw UTF-8 JSON and as
# \u escapes comes back byte for byte.
#   tests/sql/install_binlog.sh TXMQ_BINARY mysql-9.7|mariadb-11.8
# Starts a private server of scripts/server in a scratch folder and stops it (by its pid file)
# however the run ends.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
TXMQ="$1"
NAME="$2"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/txmq-binlog.XXXXXX")"
SERVER="$ROOT/scripts/server"
cleanup() {
  local status=$?
  "$SERVER" "$NAME" stop --home "$SCRATCH/server" >/dev/null 2>&1 || true
  rm -rf "$SCRATCH"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

"$SERVER" "$NAME" start --home "$SCRATCH/server" --binlog --latin1 >/dev/null
SOCKET="$SCRATCH/server/mysqld.sock"
sql() { "$SERVER" "$NAME" sql --home "$SCRATCH/server" -N -B "$@"; }
fail() { echo "install_binlog ($NAME): $*" >&2; exit 1; }

[ "$(sql -e 'SELECT @@log_bin, @@log_bin_trust_function_creators, @@character_set_server')" = \
  "$(printf '1\t0\tlatin1')" ] ||
  fail "the server does not log binary with log_bin_trust_function_creators off and latin1"

# The definer: docs/sql.md's rights on its database, nothing global.
sql <<'EOF'
CREATE DATABASE queue;
CREATE DATABASE shop;
CREATE USER 'installer'@'localhost' IDENTIFIED BY 'installer-pw';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE ROUTINE, ALTER ROUTINE,
      CREATE TEMPORARY TABLES, EXECUTE ON queue.* TO 'installer'@'localhost';
CREATE USER 'app'@'localhost' IDENTIFIED BY 'app-pw';
GRANT ALL ON shop.* TO 'app'@'localhost';
EOF
[ "$(sql -e "SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'queue'")" = latin1 ] ||
  fail "the database is not latin1"
sql -e "SHOW GRANTS FOR 'installer'@'localhost'" | grep -qi 'SUPER\|SET_USER_ID\|SYSTEM_USER' &&
  fail "the installer has a global privilege it should not"

# A database that a txmq of schema 14 made, with the installer as its routines' definer (root
# makes this one for it: under binary logging the installer could not): the functions of its
# routines are there. (One stands for all: the installer must drop what it cannot create.)
sql queue <<'EOF'
CREATE DEFINER = 'installer'@'localhost' FUNCTION txmq_i_channel(p_topic VARCHAR(48), p_group INT UNSIGNED) RETURNS VARCHAR(64)
  DETERMINISTIC NO SQL SQL SECURITY DEFINER
  RETURN IF(p_group = 0, p_topic, CONCAT(p_topic, '$', p_group));
EOF

DSN="mysql://installer:installer-pw@localhost/queue?socket=$SOCKET"
"$TXMQ" --dsn "$DSN" topic create orders >/dev/null
installed="$(sql queue -e "SELECT ROUTINE_TYPE, COUNT(*) FROM information_schema.ROUTINES
  WHERE ROUTINE_SCHEMA = 'queue' GROUP BY ROUTINE_TYPE ORDER BY ROUTINE_TYPE")"
case "$installed" in
  PROCEDURE*) ;;
  *) fail "after the installer's first client: routines by type: $installed" ;;
esac
# (txmq_i_routines_N names the text: one of them, the current one.)
[ "$(sql queue -e "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'queue' AND ROUTINE_NAME LIKE 'txmq\\_i\\_routines\\_%'")" = 1 ] ||
  fail "the routines were not installed: $installed"
# The topic's fast send, made by the installer with the topic (a procedure: no SUPER either).
[ "$(sql queue -e "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'queue' AND ROUTINE_NAME = 'txmq_send_to_orders'")" = 1 ] ||
  fail "the topic's fast send was not made: $installed"

# `txmq sql install` by the same user, again: works, as an upgrade does.
"$TXMQ" --dsn "$DSN" sql install >/dev/null

# The application: EXECUTE on the public procedures only, its connection in utf8mb4.
sql <<'EOF'
GRANT EXECUTE ON PROCEDURE queue.txmq_send TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE queue.txmq_send_batch TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE queue.txmq_take TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE queue.txmq_ack TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE queue.txmq_take_wait TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE queue.txmq_fail TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE queue.txmq_send_to_orders TO 'app'@'localhost';
EOF
app() {
  MYSQL_PWD=app-pw "$SERVER" "$NAME" sql --home "$SCRATCH/server" -N -B --user=app \
    --default-character-set=utf8mb4 shop "$@" 2>&1
}
# Raw UTF-8 JSON (JavaScript's JSON.stringify) and \u escapes (Python's json.dumps; in SQL's
# quotes a backslash is written twice).
cat >"$SCRATCH/send.sql" <<'EOF'
CALL queue.txmq_send('orders', 'żółty 🦀', '{"key": "klucz ż"}');
CALL queue.txmq_send_batch('orders', '["żółty 🦀", {"payload": "€ü"}]');
CALL queue.txmq_send_batch('orders', '["\\u017c\\u00f3\\u0142ty \\ud83e\\udd80"]');
CALL queue.txmq_send_to_orders('żółty 🦀', NULL);
EOF
# In a transaction too: with binary logging, MySQL's GTID consistency refuses the MEMORY table's
# count beside the InnoDB row (1785), which must not fail the send (the count waits).
cat >"$SCRATCH/send_tx.sql" <<'EOF'
START TRANSACTION;
CALL queue.txmq_send_to_orders('w transakcji', NULL);
COMMIT;
EOF
app <"$SCRATCH/send_tx.sql" >"$SCRATCH/sent_tx" || fail "the application could not send in a transaction: $(cat "$SCRATCH/sent_tx")"
app <"$SCRATCH/send.sql" >"$SCRATCH/sent" || fail "the application could not send: $(cat "$SCRATCH/sent")"
taken="$(app -e "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION;
  CALL queue.txmq_take('orders', NULL, 10); COMMIT")"
got="$(echo "$taken" | cut -f2,3 | sort)"
want="$(printf 'w transakcji\tNULL\nżółty 🦀\tNULL\nżółty 🦀\tNULL\nżółty 🦀\tNULL\nżółty 🦀\tklucz ż\n€ü\tNULL')"
[ "$got" = "$want" ] || fail "the application took:
$taken"
denied="$(app -e "SELECT COUNT(*) FROM queue.txmq_q_orders" || true)"
echo "$denied" | grep -q "1142" || fail "the application read txmq's table: $denied"
echo "install_binlog ($NAME): installed without SUPER with binary logging on; the function of schema 14 dropped; text kept on a latin1 server and database; sent and taken as an EXECUTE-only user"
