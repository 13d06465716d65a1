# Sourced by tests/sqs/run.sh and tests/dashboard/run.sh: stops the txmq serve they started.
# stop_serve: SIGTERM to $SERVER_PID, which answers the requests it holds and exits 0; waits up
# to 30 s. Returns 1 (saying why on stderr) when it had died already, did not exit, or exited
# with another status; clears SERVER_PID once it is gone.
stop_serve() {
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "run.sh: txmq serve died during the test" >&2
    wait "$SERVER_PID" || echo "run.sh: its exit status: $?" >&2
    SERVER_PID=""
    return 1
  fi
  kill -TERM "$SERVER_PID"
  for _ in $(seq 1 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "run.sh: txmq serve did not exit within 30 s of SIGTERM" >&2
    return 1
  fi
  local serve_status=0
  wait "$SERVER_PID" || serve_status=$?
  SERVER_PID=""
  if [ "$serve_status" -ne 0 ]; then
    echo "run.sh: txmq serve exited $serve_status after SIGTERM (expected 0)" >&2
    return 1
  fi
}
