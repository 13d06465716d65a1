#!/bin/bash
# The dashboard of txmq serve in headless Chromium (docs/dashboard.md):
#   tests/dashboard/run.sh TXMQ_BINARY BUILD_DIR
# Starts its own `txmq serve` with a scratch --credentials file on a free loopback port, on the
# database the usual DSN resolution gives (CTest's txmq_server fixture), makes a topic with ready,
# in-flight and dead messages with the txmq command, checks the HTTP protection with curl-less
# requests from node (401 without Basic auth, 403 for changes without X-Txmq-Dashboard), then
# drives the page with playwright-core on Debian's /usr/bin/chromium (dashboard.mjs). Screenshots
# go to BUILD_DIR/dashboard-test/. Installs chromium (apt-get) and playwright-core (npm, into
# BUILD_DIR/dashboard-node) when missing.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 TXMQ_BINARY BUILD_DIR" >&2
  exit 2
fi
TXMQ="$1"
BUILD="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../sqs/stop_serve.sh"
NODE_DIR="$BUILD/dashboard-node"
OUT="$BUILD/dashboard-test"

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
apt_install() {
  echo "run.sh: installing $* with apt-get" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
[ -x /usr/bin/chromium ] || apt_install chromium
command -v npm >/dev/null || apt_install nodejs npm
if [ ! -f "$NODE_DIR/node_modules/playwright-core/package.json" ]; then
  echo "run.sh: installing playwright-core into $NODE_DIR" >&2
  mkdir -p "$NODE_DIR"
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error playwright-core@1 >/dev/null
fi

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/txmq-dashboard.XXXXXX")"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

ACCESS_KEY="AKIDDASH$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)"
SECRET_KEY="$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
echo "$ACCESS_KEY $SECRET_KEY" >"$SCRATCH/credentials"

"$TXMQ" serve --listen 127.0.0.1:0 --credentials "$SCRATCH/credentials" \
  >"$SCRATCH/serve.out" 2>"$SCRATCH/serve.err" &
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
[ -n "$ENDPOINT" ] || { echo "run.sh: txmq serve did not listen within 60 s" >&2; exit 1; }
echo "run.sh: txmq serve (pid $SERVER_PID) at $ENDPOINT"

# A topic of this run: 2 dead letters (one with markup in its payload), then 5 messages, one of
# them received (in flight, lease 10 minutes).
TOPIC="dash_$(date +%s | tail -c 6)$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
"$TXMQ" topic create "$TOPIC" --max-attempts 1 >/dev/null
"$TXMQ" send "$TOPIC" --key order-7 '{"order": 7, "note": "<img src=x onerror=window.__xss=1>"}' >/dev/null
"$TXMQ" send "$TOPIC" 'poison pill' >/dev/null
"$TXMQ" --json receive "$TOPIC" --max 2 | sed -n 's/.*"receipt": *"\([^"]*\)".*/\1/p' >"$SCRATCH/receipts"
[ "$(wc -l <"$SCRATCH/receipts")" -eq 2 ] || { echo "run.sh: expected 2 receipts" >&2; exit 1; }
while read -r receipt; do "$TXMQ" nack "$TOPIC" "$receipt" --delay 0 >/dev/null; done <"$SCRATCH/receipts"
for i in 1 2 3 4 5; do "$TXMQ" send "$TOPIC" "message $i" >/dev/null; done
"$TXMQ" receive "$TOPIC" --lease 600 >/dev/null
# Two more whose names contain the first's, for the overview's search and pages.
"$TXMQ" topic create "${TOPIC}_p1" >/dev/null
"$TXMQ" topic create "${TOPIC}_p2" >/dev/null

mkdir -p "$OUT"
status=0
TXMQ_DASHBOARD_URL="$ENDPOINT" TXMQ_DASHBOARD_USER="$ACCESS_KEY" TXMQ_DASHBOARD_SECRET="$SECRET_KEY" \
  TXMQ_DASHBOARD_TOPIC="$TOPIC" TXMQ_DASHBOARD_NODE_DIR="$NODE_DIR" TXMQ_DASHBOARD_OUT="$OUT" \
  TXMQ_BINARY="$TXMQ" node "$HERE/dashboard.mjs" || status=$?

for t in "$TOPIC" "${TOPIC}_p1" "${TOPIC}_p2"; do "$TXMQ" topic drop "$t" >/dev/null 2>&1 || true; done
stop_serve || status=1
if grep -q "$SECRET_KEY" "$SCRATCH/serve.out" "$SCRATCH/serve.err"; then
  echo "run.sh: the secret appears in the server's output" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "run.sh: the server's log (stderr), last 40 lines:" >&2
  tail -n 40 "$SCRATCH/serve.err" >&2
else
  echo "run.sh: passed; screenshots in $OUT"
fi
exit "$status"
