// txmq's SQL interface from Go (database/sql, go-sql-driver/mysql): an order and its message in
// one transaction, and a consumer that turns each message into exactly one invoice.
// Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then
// (Debian: golang-github-go-sql-driver-mysql-dev, and GO111MODULE=off GOPATH=/usr/share/gocode):
//
//	APP_PASSWORD=secret go run examples/sql/shop.go send 3   # 3 orders, each with its message
//	APP_PASSWORD=secret go run examples/sql/shop.go consume  # one invoice per message, as they come
//
// Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC, WAIT_SECONDS (how
// long consume waits for a message before it exits; 5).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"

	"github.com/go-sql-driver/mysql"
)

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func main() {
	topic, q := env("TOPIC", "orders"), env("TXMQ_DB", "txmq")
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@unix(%s)/%s", env("APP_USER", "app"), env("APP_PASSWORD", ""),
		env("MYSQL_UNIX_PORT", "/run/mysqld/mysqld.sock"), env("APP_DB", "shop")))
	check(err)
	n, _ := strconv.Atoi(os.Args[len(os.Args)-1])
	for i := 0; os.Args[1] == "send" && i < n; i++ {
		tx, err := db.Begin() // the order and its message: both or neither
		check(err)
		res, err := tx.Exec("INSERT INTO orders (customer, amount) VALUES ('alice', ?)", 1+rand.Intn(100))
		check(err)
		order, _ := res.LastInsertId()
		var id uint64
		check(tx.QueryRow("CALL "+q+".txmq_send(?, ?, NULL)", topic, fmt.Sprintf(`{"order": %d}`, order)).Scan(&id))
		check(tx.Commit())
		fmt.Printf("order %d: message %d\n", order, id)
	}
	if os.Args[1] != "consume" {
		return
	}
	wait, err := strconv.ParseFloat(env("WAIT_SECONDS", "5"), 64)
	check(err)
	// One connection of the pool, its session in READ COMMITTED: txmq_take_wait refuses
	// REPEATABLE READ, and looks at the session's level (BeginTx's Isolation sets only the next
	// transaction's, which it does not see).
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	check(err)
	_, err = conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
	check(err)
	for {
		n, err := consume(ctx, conn, topic, q, wait)
		var e *mysql.MySQLError
		if errors.As(err, &e) && (e.Number == 1317 || e.Number == 1213) {
			continue // a wake-up ended the wait; a deadlock: rolled back, take again
		}
		check(err)
		if n == 0 {
			return // nothing arrived for WAIT_SECONDS (a service would simply take again)
		}
		fmt.Printf("invoiced %d orders\n", n)
	}
}

// consume takes up to 10 messages, waiting up to wait seconds for the first, and invoices them:
// the invoices and the acks commit together, or, on an error, neither.
func consume(ctx context.Context, conn *sql.Conn, topic, q string, wait float64) (int, error) {
	tx, err := conn.BeginTx(ctx, nil) // txmq_take_wait holds the messages until the transaction ends
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // unless committed: nothing invoiced, nothing acknowledged
	// returns at once when there are messages, else as soon as one is committed
	rows, err := tx.Query("CALL "+q+".txmq_take_wait(?, NULL, 10, ?)", topic, wait)
	if err != nil {
		return 0, err
	}
	ids, payloads := []uint64{}, [][]byte{}
	for rows.Next() {
		var id uint64
		var payload []byte
		var other sql.RawBytes // msg_key, attempt, enqueued_at, attributes
		if err := rows.Scan(&id, &payload, &other, &other, &other, &other); err != nil {
			rows.Close()
			return 0, err
		}
		ids, payloads = append(ids, id), append(payloads, payload)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return 0, err
	}
	if err := rows.Close(); err != nil || len(ids) == 0 {
		return 0, err
	}
	for i, id := range ids {
		var m struct{ Order int64 }
		check(json.Unmarshal(payloads[i], &m))
		if _, err := tx.Exec("INSERT INTO invoices (msg_id, order_id, amount) "+
			"SELECT ?, id, amount FROM orders WHERE id = ?", id, m.Order); err != nil {
			return 0, err
		}
	}
	list, _ := json.Marshal(ids)
	if _, err := tx.Exec("CALL "+q+".txmq_ack(?, NULL, ?)", topic, string(list)); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit() // the invoices and the acks together: a crash before it redoes both
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
