#!/bin/bash
# Runs one language's suite of the SQL interface (docs/design/sql-calls.md: CALL txmq_send, ...)
# as an application would, through that language's usual driver:
#   tests/sql/run.sh [TXMQ_BINARY BUILD_DIR] python|sqlalchemy|node|java|go|php
# (TXMQ_BINARY and BUILD_DIR default to build/txmq and build/ of this tree).
# The database: TXMQ_TEST_DSN when it is set (as the integration tests do for MySQL 9.7), else
# the embedded server of $TXMQ_HOME (`txmq local status`: CTest's txmq_server fixture). As the
# DSN's user it makes this run's topics (`txmq topic create`), business tables and a
# least-privilege user (EXECUTE on the five public procedures, rights on its own tables only;
# names with a random suffix, so that runs may share a server), then runs the suite as that user
# over the socket, then the language's program of examples/sql (5 orders sent, drained, one
# invoice each), checks with `txmq stats` that nothing was left behind, and drops what it made. Drivers: Debian's PyMySQL, SQLAlchemy, go-sql-driver (GOPATH mode, no network),
# MariaDB Connector/J, PHP's PDO; npm's mysql2 (into BUILD_DIR/sql-node on first use). The
# python suite also runs test_sqs_bridge.py (a SQL send received through `txmq serve` by boto3,
# SQS's Query protocol), the node suite sqs_bridge.mjs (by @aws-sdk/client-sqs, its JSON one).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
if [ $# -eq 1 ]; then
  set -- "$ROOT/build/txmq" "$ROOT/build" "$1"
fi
if [ $# -ne 3 ]; then
  echo "usage: $0 [TXMQ_BINARY BUILD_DIR] python|sqlalchemy|node|java|go|php" >&2
  exit 2
fi
TXMQ="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
BUILD="$(cd "$2" && pwd)"
LANG_NAME="$3"
case "$LANG_NAME" in
  python) short=py ;; sqlalchemy) short=sa ;; node) short=js ;; java) short=jv ;;
  go) short=go ;; php) short=php ;;
  *) echo "run.sh: unknown language '$LANG_NAME'" >&2; exit 2 ;;
esac
PY=/usr/bin/python3  # Debian's, with python3-pymysql (pyenv's shims would hide it)

if [ -n "${TXMQ_TEST_DSN:-}" ]; then
  ADMIN_DSN="$TXMQ_TEST_DSN"
else
  "$TXMQ" local start >/dev/null  # nothing when it runs already (the fixture's)
  ADMIN_DSN="$("$TXMQ" --json local status | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["dsn"])')"
fi
export TXMQ_DSN="$ADMIN_DSN"  # this script's txmq commands
SOCKET="$("$PY" -c 'import sys, urllib.parse as u; print(u.parse_qs(u.urlsplit(sys.argv[1]).query).get("socket", [""])[0])' "$ADMIN_DSN")"
DATABASE="$("$PY" -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).path.lstrip("/") or "txmq")' "$ADMIN_DSN")"
if [ -z "$SOCKET" ]; then
  echo "run.sh: the suites connect over a socket; the DSN has none: $ADMIN_DSN" >&2
  exit 2
fi

PREFIX="sql${short}_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
TOPICS=("${PREFIX}_tx" "${PREFIX}_batch" "${PREFIX}_eo" "${PREFIX}_shop")
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/txmq-sql-$LANG_NAME.XXXXXX")"
export TXMQ_SQL_ADMIN_DSN="$ADMIN_DSN"
export TXMQ_SQL_PREFIX="$PREFIX"
export TXMQ_SQL_SOCKET="$SOCKET"
export TXMQ_SQL_DATABASE="$DATABASE"
export TXMQ_SQL_USER="app_$PREFIX"
export TXMQ_SQL_PASSWORD="pw-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export TXMQ_SQL_TXMQ="$TXMQ"

cleanup() {
  local status=$?
  for topic in "${TOPICS[@]}"; do
    "$TXMQ" topic drop "$topic" >/dev/null 2>&1 || true
  done
  "$PY" "$HERE/admin.py" teardown || status=1
  rm -rf "$SCRATCH"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # CTest's timeout: still clean up

# The topics: _tx (single sends; a retry delay of exactly 1 s for txmq_fail), _batch (1,000 at a
# time; payloads up to 100 bytes, so that one long message fails a batch), _eo (the consumer that
# is killed: never dead-lettered, however often a kill rolls back its take).
"$TXMQ" topic create "${PREFIX}_tx" --retry-initial 1 --retry-jitter 0 >/dev/null
"$TXMQ" topic create "${PREFIX}_batch" --max-payload 100 >/dev/null
"$TXMQ" topic create "${PREFIX}_eo" --max-attempts 0 >/dev/null
"$TXMQ" topic create "${PREFIX}_shop" >/dev/null  # examples/sql's 'orders'
"$PY" "$HERE/admin.py" setup

echo "run.sh: $LANG_NAME suite as ${TXMQ_SQL_USER}@localhost on $ADMIN_DSN (prefix $PREFIX)"
start=$(date +%s%N)
status=0
case "$LANG_NAME" in
  python)
    "$PY" "$HERE/python/test_pymysql.py" || status=$?
    "$PY" "$HERE/python/test_sqs_bridge.py" "$TXMQ" || status=$?
    ;;
  sqlalchemy)
    "$PY" "$HERE/python/test_sqlalchemy.py" || status=$?
    ;;
  node)
    # shellcheck source=../../scripts/common.sh
    source "$ROOT/scripts/common.sh"
    txmq_install_sql_node "$BUILD/sql-node"
    txmq_install_sqs_node "$BUILD/sqs-node"
    TXMQ_SQL_NODE_DIR="$BUILD/sql-node" node "$HERE/node/suite.mjs" || status=$?
    TXMQ_SQL_NODE_DIR="$BUILD/sql-node" TXMQ_SQS_NODE_DIR="$BUILD/sqs-node" \
      node "$HERE/node/sqs_bridge.mjs" || status=$?
    ;;
  java)
    CP="/usr/share/java/mariadb-java-client.jar:/usr/share/java/jna.jar"
    javac -d "$SCRATCH/classes" -cp "$CP" "$HERE/java/SqlSuite.java"
    java -cp "$SCRATCH/classes:$CP" SqlSuite || status=$?
    ;;
  go)
    # Debian's go-sql-driver in /usr/share/gocode, GOPATH mode: nothing fetched.
    GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="$BUILD/sql-go-cache" \
      go build -o "$SCRATCH/suite" "$HERE/go/suite.go"
    "$SCRATCH/suite" || status=$?
    ;;
  php)
    php "$HERE/php/suite.php" || status=$?
    ;;
esac
# Then the language's program of examples/sql, as its README says, on this run's names: 5 orders
# sent, the consumer drains them, one invoice per order.
run_example() {
  local ex="$ROOT/examples/sql"
  case "$LANG_NAME" in
    python) "$PY" "$ex/shop.py" "$@" ;;
    sqlalchemy) "$PY" "$ex/shop_sqlalchemy.py" "$@" ;;
    node)  # resolves mysql2 from the script's folder: a copy beside build/sql-node's modules
      cp "$ex/shop.mjs" "$SCRATCH/shop.mjs"
      ln -sfn "$BUILD/sql-node/node_modules" "$SCRATCH/node_modules"
      node "$SCRATCH/shop.mjs" "$@" ;;
    java) java -cp "$CP" "$ex/Shop.java" "$@" ;;
    go)
      [ -x "$SCRATCH/shop" ] || GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= \
        GOCACHE="$BUILD/sql-go-cache" go build -o "$SCRATCH/shop" "$ex/shop.go"
      "$SCRATCH/shop" "$@" ;;
    php) php "$ex/shop.php" "$@" ;;
  esac
}
if [ "$status" -eq 0 ]; then
  "$PY" "$HERE/admin.py" example-setup "$ROOT/examples/sql/setup.sql"
  export MYSQL_UNIX_PORT="$SOCKET" APP_USER="$TXMQ_SQL_USER" APP_PASSWORD="$TXMQ_SQL_PASSWORD" \
         APP_DB="${PREFIX}_shop" TXMQ_DB="$DATABASE" TOPIC="${PREFIX}_shop"
  # consume exits after a wait of WAIT_SECONDS with nothing: 1 s, not the programs' 5
  { run_example send 5 && WAIT_SECONDS=1 run_example consume && "$PY" "$HERE/admin.py" example-check 5; } \
    >"$SCRATCH/example.out" 2>&1 || status=$?
  sed 's/^/example: /' "$SCRATCH/example.out"
fi
if [ "$status" -eq 0 ]; then
  "$PY" "$HERE/admin.py" check-empty "$TXMQ" "${TOPICS[@]}" || status=$?
fi
tenths=$(( ($(date +%s%N) - start) / 100000000 ))
echo "run.sh: $LANG_NAME suite $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((tenths / 10)).$((tenths % 10)) s"
exit "$status"
