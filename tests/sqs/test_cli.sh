#!/bin/bash
# The newcomer's path through Debian's AWS CLI 2.9 (/usr/bin/aws, Query protocol) against
# txmq serve. Run by tests/sqs/run.sh, which sets TXMQ_SQS_ENDPOINT, TXMQ_SQS_PREFIX, the keys
# and scratch AWS config files.
set -euo pipefail

AWS=/usr/bin/aws
PY=/usr/bin/python3
: "${TXMQ_SQS_ENDPOINT:?run me through tests/sqs/run.sh}"
QUEUE="orders-$TXMQ_SQS_PREFIX"
failures=0

sqs() { "$AWS" --endpoint-url "$TXMQ_SQS_ENDPOINT" --output json sqs "$@"; }
# A field of the JSON on stdin, by a Python expression over `d`.
field() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then
    echo "ok: $1"
  else
    echo "FAILED: $1: expected [$2], got [$3]" >&2
    failures=$((failures + 1))
  fi
}

out="$(sqs create-queue --queue-name "$QUEUE")"
url="$(field 'd["QueueUrl"]' <<<"$out")"
check "create-queue gives the queue's URL" "$TXMQ_SQS_ENDPOINT/000000000000/$QUEUE" "$url"
trap 'sqs delete-queue --queue-url "$url" >/dev/null 2>&1 || true' EXIT

# Again with the same (no) attributes: the same URL.
check "create-queue again" "$url" "$(sqs create-queue --queue-name "$QUEUE" | field 'd["QueueUrl"]')"
check "get-queue-url" "$url" "$(sqs get-queue-url --queue-name "$QUEUE" | field 'd["QueueUrl"]')"

body='order #1: 2 × widget & "gadget" <fast>'
out="$(sqs send-message --queue-url "$url" --message-body "$body")"
md5="$(printf '%s' "$body" | md5sum | cut -d' ' -f1)"
check "send-message's MD5OfMessageBody" "$md5" "$(field 'd["MD5OfMessageBody"]' <<<"$out")"
message_id="$(field 'd["MessageId"]' <<<"$out")"

out="$(sqs send-message --queue-url "$url" --message-body "with attributes" \
  --message-attributes '{"priority":{"DataType":"Number","StringValue":"5"}}')"
check "send-message with attributes digests them" "true" \
  "$(field '"true" if len(d.get("MD5OfMessageAttributes","")) == 32 else d' <<<"$out")"

out="$(sqs get-queue-attributes --queue-url "$url" --attribute-names All)"
check "get-queue-attributes: 2 messages" "2" "$(field 'd["Attributes"]["ApproximateNumberOfMessages"]' <<<"$out")"
check "get-queue-attributes: QueueArn" "arn:aws:sqs:us-east-1:000000000000:$QUEUE" \
  "$(field 'd["Attributes"]["QueueArn"]' <<<"$out")"
check "get-queue-attributes: VisibilityTimeout" "30" "$(field 'd["Attributes"]["VisibilityTimeout"]' <<<"$out")"

sqs set-queue-attributes --queue-url "$url" --attributes VisibilityTimeout=60 >/dev/null
check "set-queue-attributes" "60" "$(sqs get-queue-attributes --queue-url "$url" \
  --attribute-names VisibilityTimeout | field 'd["Attributes"]["VisibilityTimeout"]')"

out="$(sqs receive-message --queue-url "$url" --wait-time-seconds 5 --attribute-names All \
  --message-attribute-names All --max-number-of-messages 1)"
check "receive-message: the first body" "$body" "$(field 'd["Messages"][0]["Body"]' <<<"$out")"
check "receive-message: its id" "$message_id" "$(field 'd["Messages"][0]["MessageId"]' <<<"$out")"
check "receive-message: receive count" "1" \
  "$(field 'd["Messages"][0]["Attributes"]["ApproximateReceiveCount"]' <<<"$out")"
receipt="$(field 'd["Messages"][0]["ReceiptHandle"]' <<<"$out")"
sqs delete-message --queue-url "$url" --receipt-handle "$receipt"

out="$(sqs receive-message --queue-url "$url" --wait-time-seconds 5 --message-attribute-names All)"
check "receive-message: the second body" "with attributes" "$(field 'd["Messages"][0]["Body"]' <<<"$out")"
check "receive-message: its attribute" "5" \
  "$(field 'd["Messages"][0]["MessageAttributes"]["priority"]["StringValue"]' <<<"$out")"
sqs delete-message --queue-url "$url" --receipt-handle "$(field 'd["Messages"][0]["ReceiptHandle"]' <<<"$out")"

check "nothing left" "" "$(sqs receive-message --queue-url "$url" --wait-time-seconds 1)"

# MessageAttributeNames: a prefix followed by .* asks for the names that start with it.
sqs send-message --queue-url "$url" --message-body "prefixed" --message-attributes \
  '{"priority":{"DataType":"Number","StringValue":"7"},"prio.x":{"DataType":"String","StringValue":"y"},"other":{"DataType":"String","StringValue":"z"}}' >/dev/null
out="$(sqs receive-message --queue-url "$url" --wait-time-seconds 5 --message-attribute-names 'prio.*')"
check "receive-message --message-attribute-names 'prio.*'" "prio.x priority" \
  "$(field '" ".join(sorted(d["Messages"][0]["MessageAttributes"]))' <<<"$out")"
sqs delete-message --queue-url "$url" --receipt-handle "$(field 'd["Messages"][0]["ReceiptHandle"]' <<<"$out")"

# A standard queue has no FifoQueue attribute, not even false (SQS's InvalidAttributeName).
set +e
err="$(sqs create-queue --queue-name "std-$TXMQ_SQS_PREFIX" --attributes FifoQueue=false 2>&1 >/dev/null)"
status=$?
set -e
check "create-queue FifoQueue=false: exit status" "254" "$status"
check "create-queue FifoQueue=false: InvalidAttributeName" "yes" \
  "$(grep -q 'InvalidAttributeName.*Unknown Attribute FifoQueue\.' <<<"$err" && echo yes || echo "no: $err")"

# A consumer-group queue (txmq's own attribute): it receives every message sent to its source.
audit_url="$(sqs create-queue --queue-name "audit-$TXMQ_SQS_PREFIX" \
  --attributes TxmqSourceQueue="$QUEUE" | field 'd["QueueUrl"]')"
sqs send-message --queue-url "$url" --message-body "fan-out" >/dev/null
check "a consumer-group queue receives its source's message" "fan-out" \
  "$(sqs receive-message --queue-url "$audit_url" --wait-time-seconds 5 | field 'd["Messages"][0]["Body"]')"
check "and so does its source" "fan-out" \
  "$(sqs receive-message --queue-url "$url" --wait-time-seconds 5 | field 'd["Messages"][0]["Body"]')"
sqs delete-queue --queue-url "$audit_url"
sqs purge-queue --queue-url "$url"

check "list-queues with the prefix" "$url" \
  "$(sqs list-queues --queue-name-prefix "$QUEUE" | field '" ".join(d["QueueUrls"])')"

sqs delete-queue --queue-url "$url"
check "list-queues after delete-queue" "" "$(sqs list-queues --queue-name-prefix "$QUEUE")"

# Errors: the CLI exits 254 for a service error and names SQS's error code.
set +e
err="$(sqs get-queue-url --queue-name "$QUEUE" 2>&1 >/dev/null)"
status=$?
set -e
check "get-queue-url of a missing queue: exit status" "254" "$status"
check "get-queue-url of a missing queue: error code" "yes" \
  "$(grep -q 'AWS.SimpleQueueService.NonExistentQueue' <<<"$err" && echo yes || echo "no: $err")"
check "get-queue-url of a missing queue: message" "yes" \
  "$(grep -q 'The specified queue does not exist for this wsdl version\.' <<<"$err" && echo yes || echo "no: $err")"

set +e
err="$(sqs send-message --queue-url "$url" --message-body x 2>&1 >/dev/null)"
status=$?
set -e
check "send-message to a deleted queue: exit status" "254" "$status"
check "send-message to a deleted queue: error code" "yes" \
  "$(grep -q 'AWS.SimpleQueueService.NonExistentQueue' <<<"$err" && echo yes || echo "no: $err")"

set +e
err="$(AWS_SECRET_ACCESS_KEY=wrong-secret sqs list-queues 2>&1 >/dev/null)"
status=$?
set -e
check "a wrong secret: exit status" "254" "$status"
check "a wrong secret: SignatureDoesNotMatch" "yes" \
  "$(grep -q 'SignatureDoesNotMatch' <<<"$err" && echo yes || echo "no: $err")"

if [ "$failures" -ne 0 ]; then
  echo "test_cli.sh: $failures checks failed" >&2
  exit 1
fi
echo "test_cli.sh: all checks passed"
