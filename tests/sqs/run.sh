#!/bin/bash
# Runs one client suite of the SQS tests against a `txmq serve` of its own:
#   tests/sqs/run.sh TXMQ_BINARY BUILD_DIR query|cli|json|moves [ARGS for the suite's runner]
# (e.g. `... query ConsumerGroupQueuesTest` runs one class of test_query.py).
# The server runs on TXMQ_TEST_DSN when it is set (as the integration tests do: another server,
# such as a MySQL 9.7 of scripts/server; the suites' own txmq commands get it as TXMQ_DSN), else
# on the database the usual DSN resolution gives (TXMQ_DSN, else the embedded server of
# $TXMQ_HOME: CTest's txmq_server fixture), on a free loopback port, with a scratch
# credentials file. The suite gets the endpoint and the keys in its environment; the machine's
# AWS configuration is replaced by empty scratch files. The server is stopped with SIGTERM and
# must exit 0; on any failure it is killed by its pid.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 TXMQ_BINARY BUILD_DIR query|cli|json|moves [ARGS]" >&2
  exit 2
fi
TXMQ="$1"
SQS_BUILD="$(cd "$2" && pwd)"  # absolute: the JSON suite resolves its modules from it
SUITE="$3"
shift 3
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/stop_serve.sh"

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/txmq-sqs-$SUITE.XXXXXX")"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

if [ "$SUITE" = json ] || [ "$SUITE" = moves ]; then
  # shellcheck source=../../scripts/common.sh
  source "$HERE/../../scripts/common.sh"
  txmq_install_sqs_node "$SQS_BUILD/sqs-node"
fi

# Two keys: the suites sign with the first, and check that a wrong secret and an unknown key
# are refused.
ACCESS_KEY="AKIDTXMQ$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)"
SECRET_KEY="$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
{
  echo "# scratch keys of tests/sqs/run.sh"
  echo "$ACCESS_KEY $SECRET_KEY"
  echo "AKIDTXMQOTHER $(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
} >"$SCRATCH/credentials"
: >"$SCRATCH/aws-config"
: >"$SCRATCH/aws-credentials"

SERVE_DSN=()
if [ -n "${TXMQ_TEST_DSN:-}" ]; then
  SERVE_DSN=(--dsn "$TXMQ_TEST_DSN")
  export TXMQ_DSN="$TXMQ_TEST_DSN"  # the suites' own txmq commands (TXMQ_SQS_TXMQ)
fi

# TXMQ_SERVE_ARGS: more options for serve (CTest's shared/ runs: --queue-storage shared).
read -r -a SERVE_ARGS <<<"${TXMQ_SERVE_ARGS:-}"
"$TXMQ" "${SERVE_DSN[@]}" serve --listen 127.0.0.1:0 --credentials "$SCRATCH/credentials" \
  "${SERVE_ARGS[@]}" >"$SCRATCH/serve.out" 2>"$SCRATCH/serve.err" &
SERVER_PID=$!

ENDPOINT=""
for _ in $(seq 1 600); do
  ENDPOINT="$(sed -n 's/^txmq serve: listening on \(http:\/\/[^ ]*\).*/\1/p' "$SCRATCH/serve.out")"
  [ -n "$ENDPOINT" ] && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "run.sh: txmq serve exited before listening:" >&2
    cat "$SCRATCH/serve.out" "$SCRATCH/serve.err" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$ENDPOINT" ]; then
  echo "run.sh: txmq serve did not print its listening line within 60 s" >&2
  cat "$SCRATCH/serve.err" >&2
  exit 1
fi
echo "run.sh: txmq serve (pid $SERVER_PID) at $ENDPOINT; suite $SUITE${TXMQ_TEST_DSN:+ on TXMQ_TEST_DSN}"

export TXMQ_SQS_ENDPOINT="$ENDPOINT"
# Queue names of this run: unique, so that suites and runs may share a database.
export TXMQ_SQS_PREFIX="t$(date +%s | tail -c 6)$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
export AWS_ACCESS_KEY_ID="$ACCESS_KEY"
export AWS_SECRET_ACCESS_KEY="$SECRET_KEY"
export AWS_DEFAULT_REGION=us-east-1
export AWS_REGION=us-east-1
export AWS_CONFIG_FILE="$SCRATCH/aws-config"
export AWS_SHARED_CREDENTIALS_FILE="$SCRATCH/aws-credentials"
export AWS_PAGER=""
export AWS_MAX_ATTEMPTS=1
export AWS_RETRY_MODE=standard
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SQS AWS_CA_BUNDLE
export TXMQ_SQS_TXMQ="$TXMQ"  # for set-ups that only the CLI makes (a sharded topic)
export TXMQ_SQS_OTHER_KEY="AKIDTXMQOTHER"
export TXMQ_SQS_UNKNOWN_KEY="AKIDTXMQNOBODY"

status=0
case "$SUITE" in
  query) /usr/bin/python3 "$HERE/test_query.py" -v "$@" || status=$? ;;
  cli) bash "$HERE/test_cli.sh" || status=$? ;;
  json) TXMQ_SQS_NODE_DIR="$SQS_BUILD/sqs-node" node --test "$@" "$HERE/test_json.mjs" || status=$? ;;
  moves) TXMQ_SQS_NODE_DIR="$SQS_BUILD/sqs-node" node --test "$@" "$HERE/move_tasks.mjs" || status=$? ;;
  *) echo "run.sh: unknown suite '$SUITE'" >&2; status=2 ;;
esac

stop_serve || status=1
if [ "$status" -ne 0 ]; then
  echo "run.sh: the server's log (stderr), last 40 lines:" >&2
  tail -n 40 "$SCRATCH/serve.err" >&2
fi
exit "$status"
