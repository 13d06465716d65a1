<?php
// txmq's SQL interface from PHP (PDO): an order and its message in one transaction, and a
// consumer that turns each message into exactly one invoice.
// Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then:
//   APP_PASSWORD=secret php examples/sql/shop.php send 3    # 3 orders, each with its message
//   APP_PASSWORD=secret php examples/sql/shop.php consume   # one invoice per message, as they come
// Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC, WAIT_SECONDS (how
// long consume waits for a message before it exits; 5).
$env = fn($name, $default) => getenv($name) === false ? $default : getenv($name);
$topic = $env('TOPIC', 'orders');
$q = $env('TXMQ_DB', 'txmq');
$wait = (float) $env('WAIT_SECONDS', '5');
$pdo = new PDO('mysql:unix_socket=' . $env('MYSQL_UNIX_PORT', '/run/mysqld/mysqld.sock') . ';dbname=' . $env('APP_DB', 'shop'),
    $env('APP_USER', 'app'), $env('APP_PASSWORD', ''), [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
$pdo->exec('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');  // txmq_take_wait's

// A CALL's rows (then its other results: the CALL's own OK).
function call(PDO $pdo, string $sql, array $args): array {
    $st = $pdo->prepare($sql);
    $st->execute($args);
    $rows = $st->columnCount() ? $st->fetchAll(PDO::FETCH_ASSOC) : [];
    while ($st->nextRowset());
    return $rows;
}

if ($argv[1] === 'send') {
    for ($i = 0; $i < (int) $argv[2]; $i++) {
        $pdo->beginTransaction();  // the order and its message: both or neither
        $pdo->prepare("INSERT INTO orders (customer, amount) VALUES ('alice', ?)")->execute([random_int(1, 100)]);
        $order = (int) $pdo->lastInsertId();
        [['id' => $id]] = call($pdo, "CALL $q.txmq_send(?, ?, NULL)", [$topic, json_encode(['order' => $order])]);
        $pdo->commit();
        echo "order $order: message $id\n";
    }
    exit(0);
}
$invoice = $pdo->prepare('INSERT INTO invoices (msg_id, order_id, amount) SELECT ?, id, amount FROM orders WHERE id = ?');
for (;;) {
    $pdo->beginTransaction();  // txmq_take_wait holds the messages until the transaction ends
    try {
        // returns at once when there are messages, else as soon as one is committed
        $rows = call($pdo, "CALL $q.txmq_take_wait(?, NULL, 10, ?)", [$topic, $wait]);
        if (!$rows) {
            $pdo->rollBack();
            exit(0);  // nothing arrived for WAIT_SECONDS (a service would simply take again)
        }
        foreach ($rows as $m) {
            $invoice->execute([$m['id'], json_decode($m['payload'])->order]);
        }
        call($pdo, "CALL $q.txmq_ack(?, NULL, ?)", [$topic, json_encode(array_map('intval', array_column($rows, 'id')))]);
        $pdo->commit();  // the invoices and the acks together: a crash before it redoes both
    } catch (PDOException $e) {
        $pdo->rollBack();  // nothing invoiced, nothing acknowledged
        if (in_array($e->errorInfo[1] ?? null, [1317, 1213])) {
            continue;  // a wake-up ended the wait; a deadlock: take again
        }
        throw $e;
    }
    echo 'invoiced ' . count($rows) . " orders\n";
}
