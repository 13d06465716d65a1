// The experiment behind "MySQL 9.7 beside MariaDB 10.11" in docs/benchmarks.md: what an
// acknowledgement's statements cost on one connection, in the two shapes txmq uses.
//   A  one autocommit DELETE ... WHERE id = ? (with RETURNING id, payload where the server has
//      it): MariaDB's ack of a message without a key (src/db/sql.cc, delete_returning)
//   B  autocommit off; SELECT id, payload ... WHERE id IN (?) FOR UPDATE; DELETE ... WHERE id IN
//      (?); COMMIT: the same ack on MySQL, which has no DELETE ... RETURNING
// One row per ack from a prefilled table (100-byte payloads), ROUNDS alternating rounds of
// PER_ROUND acks of A then B; prints microseconds per ack of each. Not part of the build:
//   gcc -O2 -o /tmp/ack_shapes bench/experiments/ack_shapes.c $(pkg-config --cflags --libs libmariadb)
//   /tmp/ack_shapes SOCKET RETURNING(1|0) PER_ROUND ROUNDS    # root on the socket, database txmq
//   e.g. /tmp/ack_shapes /tmp/home/mysqld.sock 1 500 4 (MariaDB), ... 0 500 4 (MySQL)
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void q(MYSQL *m, const char *s) {
  if (mysql_query(m, s)) {
    fprintf(stderr, "%s: %s\n", s, mysql_error(m));
    exit(1);
  }
  MYSQL_RES *r = mysql_store_result(m);
  if (r) mysql_free_result(r);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s SOCKET RETURNING(1|0) PER_ROUND ROUNDS\n", argv[0]);
    return 2;
  }
  const char *sock = argv[1];
  const int returning = atoi(argv[2]);
  const int per_round = atoi(argv[3]);
  const int rounds = atoi(argv[4]);
  MYSQL *m = mysql_init(NULL);
  if (!mysql_real_connect(m, NULL, "root", "", "txmq", 0, sock, 0)) {
    fprintf(stderr, "%s\n", mysql_error(m));
    return 1;
  }
  q(m, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");  // as txmq's sessions
  q(m, "DROP TABLE IF EXISTS ack_shapes");
  q(m, "CREATE TABLE ack_shapes (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
       "payload VARBINARY(200)) ENGINE=InnoDB");
  static char sql[1 << 16];
  for (int done = 0; done < per_round * rounds * 2; done += 500) {
    strcpy(sql, "INSERT INTO ack_shapes (payload) VALUES ");
    for (int i = 0; i < 500; ++i) strcat(sql, i ? ",(REPEAT('x',100))" : "(REPEAT('x',100))");
    q(m, sql);
  }
  unsigned long long id = 1;
  double ta = 0, tb = 0;
  for (int r = 0; r < rounds; ++r) {
    q(m, "SET autocommit = 1");
    double s = now();
    for (int i = 0; i < per_round; ++i, ++id) {
      snprintf(sql, sizeof sql, "DELETE FROM ack_shapes WHERE id = %llu%s", id,
               returning ? " RETURNING id, payload" : "");
      q(m, sql);
    }
    ta += now() - s;
    s = now();
    q(m, "SET autocommit = 0");
    for (int i = 0; i < per_round; ++i, ++id) {
      snprintf(sql, sizeof sql, "SELECT id, payload FROM ack_shapes WHERE id IN (%llu) FOR UPDATE", id);
      q(m, sql);
      snprintf(sql, sizeof sql, "DELETE FROM ack_shapes WHERE id IN (%llu)", id);
      q(m, sql);
      if (mysql_commit(m)) {
        fprintf(stderr, "COMMIT: %s\n", mysql_error(m));
        return 1;
      }
    }
    tb += now() - s;
  }
  const int n = per_round * rounds;
  printf("%s: A one autocommit DELETE%s: %.0f us/ack; B SELECT ... FOR UPDATE + DELETE + COMMIT: "
         "%.0f us/ack; B/A %.2f\n",
         mysql_get_server_info(m), returning ? " ... RETURNING" : "", ta / n * 1e6, tb / n * 1e6,
         tb / ta);
  q(m, "SET autocommit = 1");
  q(m, "DROP TABLE ack_shapes");
  mysql_close(m);
  return 0;
}
