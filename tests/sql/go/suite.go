// The SQL interface through Go's database/sql and go-sql-driver/mysql (Debian's, GOPATH mode),
// as the least-privilege user. Built and run by tests/sql/run.sh go (TXMQ_SQL_* in the
// environment); `suite consume` is the exactly-once test's child process.
package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

var (
	prefix                      = os.Getenv("TXMQ_SQL_PREFIX")
	tx, batch, eo               = prefix + "_tx", prefix + "_batch", prefix + "_eo"
	orders, accounts, processed = "`" + prefix + "_orders`", "`" + prefix + "_accounts`", "`" + prefix + "_processed`"
)

type querier interface {
	Query(query string, args ...interface{}) (*sql.Rows, error)
}

type message struct {
	id         uint64
	payload    []byte
	key        []byte
	attempt    int
	attributes sql.NullString
}

func open() *sql.DB {
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@unix(%s)/%s", os.Getenv("TXMQ_SQL_USER"),
		os.Getenv("TXMQ_SQL_PASSWORD"), os.Getenv("TXMQ_SQL_SOCKET"), os.Getenv("TXMQ_SQL_DATABASE")))
	check(err)
	return db
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

func must(ok bool, format string, args ...interface{}) {
	if !ok {
		panic(fmt.Sprintf(format, args...))
	}
}

// ids reads a result set of ids (txmq_send, txmq_send_batch); rows.Close reads the CALL's OK.
func ids(q querier, query string, args ...interface{}) ([]uint64, error) {
	rows, err := q.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var id uint64
		check(rows.Scan(&id))
		out = append(out, id)
	}
	return out, rows.Err()
}

func send(q querier, topic string, payload []byte, options interface{}) uint64 {
	got, err := ids(q, "CALL txmq_send(?, ?, ?)", topic, payload, options)
	check(err)
	must(len(got) == 1, "txmq_send gave %d ids", len(got))
	return got[0]
}

func take(q querier, topic string, n int) ([]message, error) {
	rows, err := q.Query("CALL txmq_take(?, NULL, ?)", topic, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []message
	for rows.Next() {
		var m message
		var enqueued []byte
		check(rows.Scan(&m.id, &m.payload, &m.key, &m.attempt, &enqueued, &m.attributes))
		out = append(out, m)
	}
	return out, rows.Err()
}

func ack(q querier, topic string, idList []uint64) {
	text, _ := json.Marshal(idList)
	rows, err := q.Query("CALL txmq_ack(?, NULL, ?)", topic, string(text))
	check(err)
	check(rows.Close())
}

func nothingToTake(db *sql.DB, topic string) {
	t, err := db.Begin()
	check(err)
	got, err := take(t, topic, 1000)
	check(err)
	check(t.Rollback())
	must(len(got) == 0, "%d messages in %s", len(got), topic)
}

func count(db *sql.DB, query string, args ...interface{}) int {
	var n int
	check(db.QueryRow(query, args...).Scan(&n))
	return n
}

func consume() {
	db := open()
	db.SetMaxOpenConns(1)
	check(db.Ping())
	fmt.Println("ready")
	for {
		t, err := db.Begin()
		check(err)
		got, err := take(t, eo, 5)
		check(err)
		if len(got) == 0 {
			check(t.Rollback())
			return
		}
		var done []uint64
		for _, m := range got {
			amount, err := strconv.Atoi(string(m.payload))
			check(err)
			_, err = t.Exec("UPDATE "+accounts+" SET balance = balance + ? WHERE id = 1", amount)
			check(err)
			_, err = t.Exec("INSERT INTO "+processed+" (msg_id, amount) VALUES (?, ?)", m.id, amount)
			check(err)
			done = append(done, m.id)
		}
		ack(t, eo, done)
		check(t.Commit())
	}
}

func testRollback(db *sql.DB) {
	ref := fmt.Sprintf("go-%x", rand.Int63())
	t, err := db.Begin()
	check(err)
	_, err = t.Exec("INSERT INTO "+orders+" (ref, amount) VALUES (?, 5)", ref)
	check(err)
	must(send(t, tx, []byte("order "+ref), nil) > 0, "no id")
	check(t.Rollback())
	must(count(db, "SELECT COUNT(*) FROM "+orders+" WHERE ref = ?", ref) == 0, "the order is there")
	nothingToTake(db, tx)
}

func testCommit(db *sql.DB) {
	ref := fmt.Sprintf("go-%x", rand.Int63())
	payload := append([]byte{0, 255}, []byte(" binary "+ref)...)
	t, err := db.Begin()
	check(err)
	_, err = t.Exec("INSERT INTO "+orders+" (ref, amount) VALUES (?, 5)", ref)
	check(err)
	id := send(t, tx, payload, `{"key": "acct-1", "attributes": {"lang": "go"}}`)
	check(t.Commit())
	must(count(db, "SELECT COUNT(*) FROM "+orders+" WHERE ref = ?", ref) == 1, "no order")
	t, err = db.Begin()
	check(err)
	got, err := take(t, tx, 100)
	check(err)
	for _, m := range got {
		ack(t, tx, []uint64{m.id})
	}
	check(t.Commit())
	must(len(got) == 1, "took %d messages", len(got))
	m := got[0]
	must(m.id == id && bytes.Equal(m.payload, payload) && string(m.key) == "acct-1" && m.attempt == 1,
		"took %+v, sent %d", m, id)
	var attrs map[string]map[string]string
	check(json.Unmarshal([]byte(m.attributes.String), &attrs))
	must(attrs["lang"]["type"] == "String" && attrs["lang"]["value"] == "go", "attributes %s", m.attributes.String)
}

func testBatch(db *sql.DB) {
	messages := make([]map[string]string, 1000)
	for i := range messages {
		messages[i] = map[string]string{"payload": fmt.Sprintf("m%04d", i)}
	}
	text, _ := json.Marshal(messages)
	t, err := db.Begin()
	check(err)
	sent, err := ids(t, "CALL txmq_send_batch(?, ?)", batch, string(text))
	check(err)
	must(len(sent) == 1000, "%d ids", len(sent))
	check(t.Rollback())
	nothingToTake(db, batch)
	bad, _ := json.Marshal(append(messages[:999:999], map[string]string{"payload": strings.Repeat("x", 200)}))
	_, err = ids(db, "CALL txmq_send_batch(?, ?)", batch, string(bad))
	mustTxmqError(err, "")
	nothingToTake(db, batch)
	ref := fmt.Sprintf("go-%x", rand.Int63())
	t, err = db.Begin()
	check(err)
	_, err = t.Exec("INSERT INTO "+orders+" (ref, amount) VALUES (?, 1000)", ref)
	check(err)
	sent, err = ids(t, "CALL txmq_send_batch(?, ?)", batch, string(text))
	check(err)
	check(t.Commit())
	t, err = db.Begin()
	check(err)
	got, err := take(t, batch, 1000)
	check(err)
	ack(t, batch, sent)
	check(t.Commit())
	want := map[uint64]string{}
	for i, id := range sent {
		want[id] = messages[i]["payload"]
	}
	must(len(got) == 1000, "took %d of 1000", len(got))
	for _, m := range got {
		must(want[m.id] == string(m.payload), "message %d: %q", m.id, m.payload)
	}
	must(count(db, "SELECT COUNT(*) FROM "+orders+" WHERE ref = ?", ref) == 1, "no order")
	nothingToTake(db, batch)
}

func testExactlyOnce(db *sql.DB) {
	amounts := make([]string, 800)
	sum := 0
	for i := range amounts {
		a := 1 + rand.Intn(100)
		sum += a
		amounts[i] = strconv.Itoa(a)
	}
	text, _ := json.Marshal(amounts)
	t, err := db.Begin()
	check(err)
	sent, err := ids(t, "CALL txmq_send_batch(?, ?)", eo, string(text))
	check(err)
	check(t.Commit())
	total := func() int { return count(db, "SELECT COUNT(*) FROM "+processed) }
	kills, deadline := 0, time.Now().Add(45*time.Second)
	for {
		must(time.Now().Before(deadline), "not drained; %d kills", kills)
		child := exec.Command(os.Args[0], "consume")
		child.Stderr = os.Stderr
		out, err := child.StdoutPipe()
		check(err)
		check(child.Start())
		line, _ := bufio.NewReader(out).ReadString('\n')
		must(line == "ready\n", "child said %q", line)
		if kills < 6 && total() < len(sent) {
			time.Sleep(time.Duration(5+rand.Intn(55)) * time.Millisecond)
			child.Process.Kill() // SIGKILL, unless it has exited already
		}
		if err := child.Wait(); err != nil {
			var exit *exec.ExitError
			must(errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL,
				"child: %v", err)
			kills++
			continue
		}
		if total() == len(sent) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(kills >= 3, "%d kills", kills)
	rows, err := db.Query("SELECT msg_id, amount FROM " + processed)
	check(err)
	got := map[uint64]string{}
	for rows.Next() {
		var id uint64
		var amount string
		check(rows.Scan(&id, &amount))
		got[id] = amount
	}
	check(rows.Err())
	must(len(got) == len(sent), "%d processed of %d", len(got), len(sent))
	for i, id := range sent {
		must(got[id] == amounts[i], "message %d: amount %s, sent %s", id, got[id], amounts[i])
	}
	must(count(db, "SELECT balance FROM "+accounts+" WHERE id = 1") == sum, "balance")
	nothingToTake(db, eo)
	fmt.Printf("  exactly once: %d messages, %d kills\n", len(sent), kills)
}

func mustTxmqError(err error, says string) {
	var me *mysql.MySQLError
	must(errors.As(err, &me), "not a MySQL error: %v", err)
	must(me.Number == 1644 && strings.HasPrefix(me.Message, "txmq: ") && strings.Contains(me.Message, says),
		"error %d %q", me.Number, me.Message)
}

func testBadInput(db *sql.DB) {
	nosuch := fmt.Sprintf("nosuch_%x", rand.Int31())
	_, err := ids(db, "CALL txmq_send(?, 'x', NULL)", nosuch)
	mustTxmqError(err, nosuch)
	_, err = ids(db, "CALL txmq_send(?, 'x', NULL)", "x; DROP TABLE y")
	mustTxmqError(err, "invalid topic name")
	_, err = ids(db, "CALL txmq_send_batch(?, ?)", tx, `[{"payload": "a"},`)
	mustTxmqError(err, "")
	_, err = ids(db, "CALL txmq_send_batch(?, ?)", tx, `[]`)
	mustTxmqError(err, "")
	_, err = take(db, tx, 1) // the pool's connection: autocommit
	mustTxmqError(err, "transaction")
	t, err := db.Begin()
	check(err)
	_, err = take(t, nosuch, 1)
	mustTxmqError(err, "")
	check(t.Rollback())
	nothingToTake(db, tx)
}

func testPrivileges(db *sql.DB) {
	for _, q := range []string{"SELECT * FROM txmq_topics", "SELECT COUNT(*) FROM txmq_q_" + tx,
		"INSERT INTO txmq_q_" + tx + " (payload) VALUES ('forged')"} {
		_, err := db.Exec(q)
		var me *mysql.MySQLError
		must(errors.As(err, &me) && me.Number == 1142, "%s: %v", q, err)
	}
}

func main() {
	rand.Seed(time.Now().UnixNano())
	if len(os.Args) > 1 && os.Args[1] == "consume" {
		consume()
		return
	}
	db := open()
	defer db.Close()
	failed := 0
	tests := []struct {
		name string
		run  func(*sql.DB)
	}{
		{"send rolled back leaves neither", testRollback},
		{"send committed leaves both, and its id is the message's", testCommit},
		{"a batch of 1000 is all or none", testBatch},
		{"exactly once while the consumer is killed", testExactlyOnce},
		{"bad input is a txmq error and writes nothing", testBadInput},
		{"the app user cannot touch txmq's tables", testPrivileges},
	}
	for _, test := range tests {
		start := time.Now()
		func() {
			defer func() {
				if r := recover(); r != nil {
					failed++
					fmt.Printf("FAIL %s: %v\n", test.name, r)
				}
			}()
			test.run(db)
			fmt.Printf("ok %s (%d ms)\n", test.name, time.Since(start).Milliseconds())
		}()
	}
	fmt.Printf("%d passed, %d failed\n", len(tests)-failed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
