<?php
// The SQL interface through PHP's PDO (pdo_mysql, Debian's php-mysql), as the least-privilege
// user. Run by tests/sql/run.sh php (TXMQ_SQL_* in the environment);
// `php suite.php consume` is the exactly-once test's child process.
declare(strict_types=1);

$P = getenv('TXMQ_SQL_PREFIX');
define('TX', "{$P}_tx");
define('BATCH', "{$P}_batch");
define('EO', "{$P}_eo");
define('ORDERS', "`{$P}_orders`");
define('ACCOUNTS', "`{$P}_accounts`");
define('PROCESSED', "`{$P}_processed`");

function connect(): PDO {
    return new PDO('mysql:unix_socket=' . getenv('TXMQ_SQL_SOCKET') . ';dbname=' . getenv('TXMQ_SQL_DATABASE'),
        getenv('TXMQ_SQL_USER'), getenv('TXMQ_SQL_PASSWORD'), [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
}

function check(bool $ok, string $what): void {
    if (!$ok) throw new Exception($what);
}

// A CALL's rows; the rest of its results (the CALL's own OK) read too.
function call(PDO $pdo, string $sql, array $args): array {
    $st = $pdo->prepare($sql);
    foreach ($args as $i => $v) {
        $st->bindValue($i + 1, $v, $v === null ? PDO::PARAM_NULL : (is_int($v) ? PDO::PARAM_INT : PDO::PARAM_LOB));
    }
    $st->execute();
    $rows = $st->columnCount() > 0 ? $st->fetchAll(PDO::FETCH_ASSOC) : [];
    while ($st->nextRowset()) {
    }
    $st->closeCursor();
    return $rows;
}

function send(PDO $pdo, string $topic, string $payload, ?string $options = null): int {
    $rows = call($pdo, 'CALL txmq_send(?, ?, ?)', [$topic, $payload, $options]);
    check(count($rows) === 1, 'txmq_send gave ' . count($rows) . ' rows');
    return (int) $rows[0]['id'];
}

function send_batch(PDO $pdo, string $topic, array $messages): array {
    return array_map(fn($r) => (int) $r['id'], call($pdo, 'CALL txmq_send_batch(?, ?)', [$topic, json_encode($messages)]));
}

function take(PDO $pdo, string $topic, int $n): array {
    return call($pdo, 'CALL txmq_take(?, NULL, ?)', [$topic, $n]);
}

function ack(PDO $pdo, string $topic, array $ids): void {
    call($pdo, 'CALL txmq_ack(?, NULL, ?)', [$topic, json_encode(array_map('intval', $ids))]);
}

function nothing_to_take(PDO $pdo, string $topic): void {
    $pdo->beginTransaction();
    $rows = take($pdo, $topic, 1000);
    $pdo->rollBack();
    check($rows === [], count($rows) . " messages in $topic");
}

function scalar(PDO $pdo, string $sql, array $args = []) {
    $st = $pdo->prepare($sql);
    $st->execute($args);
    return $st->fetchColumn();
}

function consume(): int {
    $pdo = connect();
    echo "ready\n";
    fflush(STDOUT);
    $update = $pdo->prepare('UPDATE ' . ACCOUNTS . ' SET balance = balance + ? WHERE id = 1');
    $insert = $pdo->prepare('INSERT INTO ' . PROCESSED . ' (msg_id, amount) VALUES (?, ?)');
    for (;;) {
        $pdo->beginTransaction();
        $rows = take($pdo, EO, 5);
        if (!$rows) {
            $pdo->rollBack();
            return 0;
        }
        foreach ($rows as $r) {
            $update->execute([(int) $r['payload']]);
            $insert->execute([$r['id'], (int) $r['payload']]);
        }
        ack($pdo, EO, array_column($rows, 'id'));
        $pdo->commit();
    }
}

function test_rollback(PDO $pdo): void {
    $ref = 'php-' . bin2hex(random_bytes(5));
    $pdo->beginTransaction();
    $pdo->prepare('INSERT INTO ' . ORDERS . ' (ref, amount) VALUES (?, 5)')->execute([$ref]);
    check(send($pdo, TX, "order $ref") > 0, 'no id');
    $pdo->rollBack();
    check((int) scalar($pdo, 'SELECT COUNT(*) FROM ' . ORDERS . ' WHERE ref = ?', [$ref]) === 0, 'the order is there');
    nothing_to_take($pdo, TX);
}

function test_commit(PDO $pdo): void {
    $ref = 'php-' . bin2hex(random_bytes(5));
    $payload = "\x00\xff binary $ref";
    $pdo->beginTransaction();
    $pdo->prepare('INSERT INTO ' . ORDERS . ' (ref, amount) VALUES (?, 5)')->execute([$ref]);
    $id = send($pdo, TX, $payload, json_encode(['key' => 'acct-1', 'attributes' => ['lang' => 'php']]));
    $pdo->commit();
    check((int) scalar($pdo, 'SELECT COUNT(*) FROM ' . ORDERS . ' WHERE ref = ?', [$ref]) === 1, 'no order');
    $pdo->beginTransaction();
    $rows = take($pdo, TX, 100);
    ack($pdo, TX, array_column($rows, 'id'));
    $pdo->commit();
    check(count($rows) === 1, 'took ' . count($rows));
    $m = $rows[0];
    check((int) $m['id'] === $id && $m['payload'] === $payload && $m['msg_key'] === 'acct-1'
          && (int) $m['attempt'] === 1, "took " . json_encode(array_map('bin2hex', $m)) . ", sent $id");
    $attrs = json_decode($m['attributes'], true);
    check($attrs['lang'] == ['type' => 'String', 'value' => 'php'], 'attributes ' . $m['attributes']);
}

function test_batch(PDO $pdo): void {
    $messages = [];
    for ($i = 0; $i < 1000; $i++) $messages[] = ['payload' => sprintf('m%04d', $i)];
    $pdo->beginTransaction();
    $ids = send_batch($pdo, BATCH, $messages);
    check(count(array_unique($ids)) === 1000, count($ids) . ' ids');
    $pdo->rollBack();
    nothing_to_take($pdo, BATCH);
    $bad = array_slice($messages, 0, 999);
    $bad[] = ['payload' => str_repeat('x', 200)];  // over the topic's 100 bytes
    expect_txmq_error(fn() => send_batch($pdo, BATCH, $bad), '');
    nothing_to_take($pdo, BATCH);
    $ref = 'php-' . bin2hex(random_bytes(5));
    $pdo->beginTransaction();
    $pdo->prepare('INSERT INTO ' . ORDERS . ' (ref, amount) VALUES (?, 1000)')->execute([$ref]);
    $ids = send_batch($pdo, BATCH, $messages);
    $pdo->commit();
    $pdo->beginTransaction();
    $rows = take($pdo, BATCH, 1000);
    ack($pdo, BATCH, $ids);
    $pdo->commit();
    $want = array_combine($ids, array_column($messages, 'payload'));
    $have = array_column($rows, 'payload', 'id');
    ksort($want);
    ksort($have);
    check($want == $have, 'took ' . count($rows) . ' of 1000, or other payloads');
    check((int) scalar($pdo, 'SELECT COUNT(*) FROM ' . ORDERS . ' WHERE ref = ?', [$ref]) === 1, 'no order');
    nothing_to_take($pdo, BATCH);
}

function test_exactly_once(PDO $pdo): void {
    $amounts = [];
    for ($i = 0; $i < 800; $i++) $amounts[] = (string) random_int(1, 100);
    $pdo->beginTransaction();
    $ids = send_batch($pdo, EO, $amounts);
    $pdo->commit();
    $processed = fn() => (int) scalar($pdo, 'SELECT COUNT(*) FROM ' . PROCESSED);
    $kills = 0;
    $deadline = microtime(true) + 45;
    for (;;) {
        check(microtime(true) < $deadline, "not drained; $kills kills");
        $child = proc_open([PHP_BINARY, __FILE__, 'consume'], [1 => ['pipe', 'w'], 2 => STDERR], $pipes);
        $line = fgets($pipes[1]);
        check($line === "ready\n", "child said $line");
        if ($kills < 6 && $processed() < count($ids)) {
            usleep(random_int(5000, 60000));
            proc_terminate($child, 9);  // SIGKILL, unless it has exited already
        }
        while (($status = proc_get_status($child))['running']) usleep(5000);
        fclose($pipes[1]);
        proc_close($child);
        if ($status['signaled']) {
            check($status['termsig'] === 9, 'child: signal ' . $status['termsig']);
            $kills++;
            continue;
        }
        check($status['exitcode'] === 0, 'child exited ' . $status['exitcode']);
        if ($processed() === count($ids)) break;
        usleep(50000);
    }
    check($kills >= 3, "$kills kills");
    $have = $pdo->query('SELECT msg_id, amount FROM ' . PROCESSED)->fetchAll(PDO::FETCH_KEY_PAIR);
    $want = array_combine($ids, array_map('intval', $amounts));
    ksort($have);
    ksort($want);
    check($have == $want, 'processed ' . count($have) . ' of ' . count($want) . ', or other amounts');
    check((int) scalar($pdo, 'SELECT balance FROM ' . ACCOUNTS . ' WHERE id = 1') === array_sum($want), 'balance');
    nothing_to_take($pdo, EO);
    echo '  exactly once: ' . count($ids) . " messages, $kills kills\n";
}

function expect_txmq_error(callable $f, string $says): void {
    try {
        $f();
    } catch (PDOException $e) {
        [, $code, $message] = $e->errorInfo;
        check($code === 1644 && str_starts_with($message, 'txmq: ') && str_contains($message, $says),
              "error $code $message");
        return;
    }
    throw new Exception('no error');
}

function test_bad_input(PDO $pdo): void {
    $nosuch = 'nosuch_' . bin2hex(random_bytes(4));
    expect_txmq_error(fn() => send($pdo, $nosuch, 'x'), $nosuch);
    expect_txmq_error(fn() => send($pdo, 'x; DROP TABLE y', 'x'), 'invalid topic name');
    expect_txmq_error(fn() => call($pdo, 'CALL txmq_send_batch(?, ?)', [TX, '[{"payload": "a"},']), '');
    expect_txmq_error(fn() => call($pdo, 'CALL txmq_send_batch(?, ?)', [TX, '[]']), '');
    expect_txmq_error(fn() => take($pdo, TX, 1), 'transaction');
    $pdo->beginTransaction();
    expect_txmq_error(fn() => take($pdo, $nosuch, 1), '');
    $pdo->rollBack();
    nothing_to_take($pdo, TX);
}

function test_privileges(PDO $pdo): void {
    foreach (['SELECT * FROM txmq_topics', 'SELECT COUNT(*) FROM txmq_q_' . TX,
              'INSERT INTO txmq_q_' . TX . " (payload) VALUES ('forged')"] as $sql) {
        try {
            $pdo->query($sql);
            throw new Exception("allowed: $sql");
        } catch (PDOException $e) {
            check($e->errorInfo[1] === 1142, "$sql: " . $e->getMessage());
        }
    }
}

if (($argv[1] ?? '') === 'consume') exit(consume());

$tests = [
    'send rolled back leaves neither' => 'test_rollback',
    "send committed leaves both, and its id is the message's" => 'test_commit',
    'a batch of 1000 is all or none' => 'test_batch',
    'exactly once while the consumer is killed' => 'test_exactly_once',
    'bad input is a txmq error and writes nothing' => 'test_bad_input',
    "the app user cannot touch txmq's tables" => 'test_privileges',
];
$failed = 0;
foreach ($tests as $name => $test) {
    $start = microtime(true);
    try {
        $test(connect());
        printf("ok %s (%d ms)\n", $name, (microtime(true) - $start) * 1000);
    } catch (Throwable $e) {
        $failed++;
        echo "FAIL $name: $e\n";
    }
}
printf("%d passed, %d failed\n", count($tests) - $failed, $failed);
exit($failed ? 1 : 0);
