// txmq's SQL interface from Go (database/sql, go-sql-driver/mysql): an order and its message in
// one transaction, and a consumer that turns each message into exactly one invoice.
// Set up once (examples/sql/README.md): topic 'orders', database 'shop', user 'app'. Then
// (Debian: golang-github-go-sql-driver-mysql-dev, and GO111MODULE=off GOPATH=/usr/share/gocode):
//
//	APP_PASSWORD=secret go run examples/sql/shop.go send 3   # 3 orders, each with its message
//	APP_PASSWORD=secret go run examples/sql/shop.go consume  # one invoice per message; exits when drained
//
// Environment: MYSQL_UNIX_PORT, APP_USER, APP_PASSWORD, APP_DB, TXMQ_DB, TOPIC.
package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"

	_ "github.com/go-sql-driver/mysql"
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
	for os.Args[1] == "consume" {
		tx, err := db.Begin() // txmq_take holds the messages until the transaction ends
		check(err)
		rows, err := tx.Query("CALL "+q+".txmq_take(?, NULL, 10)", topic)
		check(err)
		ids, payloads := []uint64{}, [][]byte{}
		for rows.Next() {
			var id uint64
			var payload []byte
			var other sql.RawBytes // msg_key, attempt, enqueued_at, attributes
			check(rows.Scan(&id, &payload, &other, &other, &other, &other))
			ids, payloads = append(ids, id), append(payloads, payload)
		}
		check(rows.Close())
		if len(ids) == 0 {
			check(tx.Rollback())
			return // drained (a service would wait a little and take again)
		}
		for i, id := range ids {
			var m struct{ Order int64 }
			check(json.Unmarshal(payloads[i], &m))
			_, err = tx.Exec("INSERT INTO invoices (msg_id, order_id, amount) "+
				"SELECT ?, id, amount FROM orders WHERE id = ?", id, m.Order)
			check(err)
		}
		list, _ := json.Marshal(ids)
		_, err = tx.Exec("CALL "+q+".txmq_ack(?, NULL, ?)", topic, string(list))
		check(err)
		check(tx.Commit()) // the invoices and the acks together: a crash before it redoes both
		fmt.Printf("invoiced %d orders\n", len(ids))
	}
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
