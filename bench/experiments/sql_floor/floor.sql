-- Probe procedures for bench/experiments/sql_floor (docs/design/sql-speed.md). Topic `floor`
-- (made with `txmq topic create floor`: table txmq_q_floor, one group, one partition, with its
-- send fence). Statements are separated by lines holding only "$$"; `sql_floor SOCKET 0 setup
-- DIR` runs them after replacing @MAX_PAYLOAD@ (the topic's max_payload_bytes), @NOT_IN_TX@
-- (@@in_transaction = 0 on MariaDB; FALSE on MySQL, which lacks it: no check there),
-- @OF_Q@ (MySQL's FOR UPDATE OF q), @DISPATCH_999@ and @DISPATCH_TREE@ (generated branches).

-- (c) the floor: one static INSERT, nothing else (no result set).
DROP PROCEDURE IF EXISTS floor_static
$$
CREATE PROCEDURE floor_static(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload)
$$
-- (c') the same, the id as a one-row result set.
DROP PROCEDURE IF EXISTS floor_static_rs
$$
CREATE PROCEDURE floor_static_rs(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SELECT LAST_INSERT_ID() AS id;
END
$$
-- (d) plus the topic row read in share mode (the library's fence in a transaction), id result
-- set. In autocommit each statement of a procedure is its own transaction, so here the lock
-- is only held by the SELECT: (d2) below holds it to the end as txmq_send does.
DROP PROCEDURE IF EXISTS floor_fence_rs
$$
CREATE PROCEDURE floor_fence_rs(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_layout BIGINT UNSIGNED;
  SELECT layout INTO v_layout FROM txmq_topics WHERE name = 'floor' LOCK IN SHARE MODE;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SELECT LAST_INSERT_ID() AS id;
END
$$
-- (d2) (d) with txmq_send's transaction handling: inside the caller's transaction or one of its
-- own (so that the share lock is held until the INSERT commits), and a savepoint.
DROP PROCEDURE IF EXISTS floor_fence_tx
$$
CREATE PROCEDURE floor_fence_tx(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_layout BIGINT UNSIGNED;
  DECLARE v_id BIGINT UNSIGNED;
  BEGIN
    DECLARE CONTINUE HANDLER FOR 1568 SET v_in = 1;
    IF @@autocommit = 0 THEN
      SET v_in = 1;
    ELSE
      SET TRANSACTION READ WRITE;
    END IF;
  END;
  IF v_in = 1 THEN
    SAVEPOINT txmq_call;
  ELSE
    START TRANSACTION;
  END IF;
  SELECT layout INTO v_layout FROM txmq_topics WHERE name = 'floor' LOCK IN SHARE MODE;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SET v_id = LAST_INSERT_ID();
  IF v_in = 0 THEN
    COMMIT;
  END IF;
  SELECT v_id AS id;
END
$$
-- (e) a generated per-topic send, as txmq would write it for topic `floor` (one group, one
-- partition, allocator 0): static SQL, the topic's limit baked in, the send fence named in the
-- INSERT (the layout guard: a change of groups or shard map drops the column first, and this
-- statement then fails with 1054 and takes the generic path, which reads the catalog), the
-- wake-up of waiting consumers, the id as a one-row result set. One write statement: atomic
-- by itself, so no savepoint and no transaction of its own.
DROP PROCEDURE IF EXISTS txmq_send_floor
$$
CREATE PROCEDURE txmq_send_floor(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
      CALL txmq_send('floor', p_payload, NULL);
    INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
      VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
    SET v_id = LAST_INSERT_ID();
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
  SELECT v_id AS id;
END
$$
-- (e+count) (e) and a per-connection counter row (for metrics), InnoDB: in autocommit a
-- second statement, so a second commit.
DROP PROCEDURE IF EXISTS txmq_send_floor_cnt
$$
CREATE PROCEDURE txmq_send_floor_cnt(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
      CALL txmq_send('floor', p_payload, NULL);
    INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
      VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
    SET v_id = LAST_INSERT_ID();
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  INSERT INTO floor_counts (topic, conn, sent) VALUES ('floor', CONNECTION_ID(), 1)
    ON DUPLICATE KEY UPDATE sent = sent + 1;
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
  SELECT v_id AS id;
END
$$
-- (e+count, one commit) the counter and the message in one transaction: the caller's, or in
-- autocommit one of the procedure's own (which needs the transaction test of txmq_send).
DROP PROCEDURE IF EXISTS txmq_send_floor_cnt1
$$
CREATE PROCEDURE txmq_send_floor_cnt1(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_in TINYINT DEFAULT 0;
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE CONTINUE HANDLER FOR 1568 SET v_in = 1;
    IF @@autocommit = 0 THEN
      SET v_in = 1;
    ELSE
      SET TRANSACTION READ WRITE;
    END IF;
  END;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
    BEGIN
      IF v_in = 0 THEN
        ROLLBACK;
      END IF;
      CALL txmq_send('floor', p_payload, NULL);
    END;
    IF v_in = 0 THEN
      START TRANSACTION;
    END IF;
    INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
      VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
    SET v_id = LAST_INSERT_ID();
    INSERT INTO floor_counts (topic, conn, sent) VALUES ('floor', CONNECTION_ID(), 1)
      ON DUPLICATE KEY UPDATE sent = sent + 1;
    IF v_in = 0 THEN
      COMMIT;
    END IF;
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
  SELECT v_id AS id;
END
$$
-- (e+count, MEMORY) the counter in a MEMORY table: no second commit, but counts sends that
-- roll back, and forgets at a restart.
DROP PROCEDURE IF EXISTS txmq_send_floor_mem
$$
CREATE PROCEDURE txmq_send_floor_mem(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
      CALL txmq_send('floor', p_payload, NULL);
    INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
      VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
    SET v_id = LAST_INSERT_ID();
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  INSERT INTO floor_counts_mem (topic, conn, sent) VALUES ('floor', CONNECTION_ID(), 1)
    ON DUPLICATE KEY UPDATE sent = sent + 1;
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
  SELECT v_id AS id;
END
$$
-- Batch of strings, per topic, static: INSERT ... SELECT FROM JSON_TABLE; a payload over the
-- limit becomes NULL, which the NOT NULL column refuses (strict mode, the routine's own
-- sql_mode): the limit costs no pass of its own. Ids from LAST_INSERT_ID (consecutive under
-- innodb_autoinc_lock_mode 0 and 1: MariaDB's default, not MySQL's).
DROP PROCEDURE IF EXISTS txmq_send_batch_floor
$$
CREATE PROCEDURE txmq_send_batch_floor(IN p_messages LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_first BIGINT UNSIGNED;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
    SELECT UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL,
           IF(LENGTH(j.s) > @MAX_PAYLOAD@, NULL, CAST(j.s AS BINARY)), NULL
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY, s LONGTEXT PATH '$')) AS j
     ORDER BY j.n;
  SET v_first = LAST_INSERT_ID();
  SELECT v_first + (j.n - 1) * @@auto_increment_increment AS id
    FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY)) AS j ORDER BY j.n;
END
$$
-- Exactly-once drain, per topic, static: take = lock up to p_max claimable rows (their ids into
-- a variable), count the take in txmq_takes (MEMORY, as txmq_take does: the count must survive
-- a rollback), fall back to the generic txmq_take when one is due for the dead letters, then
-- return the rows. No temporary table, no PREPARE, no nested CALL on the fast path.
DROP PROCEDURE IF EXISTS txmq_take_floor
$$
CREATE PROCEDURE txmq_take_floor(IN p_max INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_ids LONGTEXT;
  DECLARE v_due INT;
  IF @NOT_IN_TX@ THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: txmq_take needs a transaction';
  END IF;
  IF p_max IS NULL OR p_max < 1 OR p_max > 1000 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: max_messages must be from 1 to 1000';
  END IF;
  SELECT CONCAT('[', GROUP_CONCAT(id ORDER BY id), ']') INTO v_ids
    FROM (SELECT id FROM txmq_q_floor FORCE INDEX (PRIMARY)
           WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT p_max
           FOR UPDATE SKIP LOCKED) AS t;
  IF v_ids IS NULL THEN
    SELECT id, payload, msg_key, attempts AS attempt, enqueued_at, attributes
      FROM txmq_q_floor WHERE FALSE;
    LEAVE proc;
  END IF;
  INSERT INTO txmq_takes (queue, id, takes, taken_at)
    SELECT '`txmq_q_floor`', i.id, 1, UTC_TIMESTAMP(6)
      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    ON DUPLICATE KEY UPDATE takes = takes + 1, taken_at = VALUES(taken_at);
  SELECT COUNT(*) INTO v_due
    FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id
    JOIN txmq_takes AS t ON t.queue = '`txmq_q_floor`' AND t.id = i.id
   WHERE q.attempts + t.takes - 1 >= 5;
  IF v_due > 0 THEN
    -- the generic take dead-letters them (counting the takes once more: a probe, not exact)
    CALL txmq_take('floor', NULL, p_max);
    LEAVE proc;
  END IF;
  SELECT q.id, q.payload, q.msg_key, q.attempts + t.takes AS attempt, q.enqueued_at,
         IF(q.attributes IS NULL, NULL, txmq_i_decode_attributes(q.attributes)) AS attributes
    FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id
    JOIN txmq_takes AS t ON t.queue = '`txmq_q_floor`' AND t.id = i.id
   ORDER BY q.id;
END
$$
-- txmq_take_floor with a per-connection scan hint in a session variable (a caller that sets
-- it can only hide messages from itself).
DROP PROCEDURE IF EXISTS txmq_take_floor_h
$$
CREATE PROCEDURE txmq_take_floor_h(IN p_max INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_ids LONGTEXT;
  DECLARE v_due INT;
  DECLARE v_from BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_last BIGINT UNSIGNED;
  IF @NOT_IN_TX@ THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: txmq_take needs a transaction';
  END IF;
  IF p_max IS NULL OR p_max < 1 OR p_max > 1000 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: max_messages must be from 1 to 1000';
  END IF;
  -- The connection's scan hint (the library's ScanHints): from past its last take, with a
  -- sweep from the start one take in 20 and whenever the hinted scan finds nothing.
  IF @txmq_hint_floor IS NOT NULL AND RAND() >= 0.05 THEN
    SET v_from = @txmq_hint_floor;
  END IF;
  SELECT CONCAT('[', GROUP_CONCAT(id ORDER BY id), ']'), MAX(id) INTO v_ids, v_last
    FROM (SELECT id FROM txmq_q_floor FORCE INDEX (PRIMARY)
           WHERE id >= v_from AND visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT p_max
           FOR UPDATE SKIP LOCKED) AS t;
  IF v_ids IS NULL AND v_from > 0 THEN
    SELECT CONCAT('[', GROUP_CONCAT(id ORDER BY id), ']'), MAX(id) INTO v_ids, v_last
      FROM (SELECT id FROM txmq_q_floor FORCE INDEX (PRIMARY)
             WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT p_max
             FOR UPDATE SKIP LOCKED) AS t;
  END IF;
  SET @txmq_hint_floor = v_last + 1;
  IF v_ids IS NULL THEN
    SELECT id, payload, msg_key, attempts AS attempt, enqueued_at, attributes
      FROM txmq_q_floor WHERE FALSE;
    LEAVE proc;
  END IF;
  INSERT INTO txmq_takes (queue, id, takes, taken_at)
    SELECT '`txmq_q_floor`', i.id, 1, UTC_TIMESTAMP(6)
      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    ON DUPLICATE KEY UPDATE takes = takes + 1, taken_at = VALUES(taken_at);
  SELECT COUNT(*) INTO v_due
    FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id
    JOIN txmq_takes AS t ON t.queue = '`txmq_q_floor`' AND t.id = i.id
   WHERE q.attempts + t.takes - 1 >= 5;
  IF v_due > 0 THEN
    -- the generic take dead-letters them (counting the takes once more: a probe, not exact)
    CALL txmq_take('floor', NULL, p_max);
    LEAVE proc;
  END IF;
  SELECT q.id, q.payload, q.msg_key, q.attempts + t.takes AS attempt, q.enqueued_at,
         IF(q.attributes IS NULL, NULL, txmq_i_decode_attributes(q.attributes)) AS attributes
    FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id
    JOIN txmq_takes AS t ON t.queue = '`txmq_q_floor`' AND t.id = i.id
   ORDER BY q.id;
END
$$
-- ack = check every id is held by this transaction (a locking read that skips others' locks)
-- and unkeyed (keyed ones take the generic path), then one DELETE and the takes forgotten.
DROP PROCEDURE IF EXISTS txmq_ack_floor
$$
CREATE PROCEDURE txmq_ack_floor(IN p_ids LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_n INT;
  DECLARE v_held INT;
  DECLARE v_keyed INT;
  IF @NOT_IN_TX@ THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: txmq_ack needs the transaction that took the messages';
  END IF;
  IF NOT JSON_VALID(p_ids) OR JSON_TYPE(p_ids) <> 'ARRAY' THEN
    CALL txmq_ack('floor', NULL, p_ids);
    LEAVE proc;
  END IF;
  SET v_n = JSON_LENGTH(p_ids);
  SELECT COUNT(*), SUM(h.msg_key IS NOT NULL) INTO v_held, v_keyed
    FROM (SELECT q.id, q.msg_key
            FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
            STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id
           WHERE q.visible_at <= UTC_TIMESTAMP(6) FOR UPDATE @OF_Q@SKIP LOCKED) AS h;
  IF v_held <> v_n OR v_keyed > 0 THEN
    CALL txmq_ack('floor', NULL, p_ids);  -- its error names the id, or it moves the keys on
    LEAVE proc;
  END IF;
  DELETE q FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id;
  DELETE t FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_takes AS t ON t.queue = '`txmq_q_floor`' AND t.id = i.id;
END
$$
CREATE TABLE IF NOT EXISTS floor_counts (
  topic VARCHAR(48) NOT NULL, conn BIGINT UNSIGNED NOT NULL, sent BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (topic, conn)) ENGINE=InnoDB
$$
CREATE TABLE IF NOT EXISTS floor_counts_mem (
  topic VARCHAR(48) NOT NULL, conn BIGINT UNSIGNED NOT NULL, sent BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (topic, conn)) ENGINE=MEMORY
$$
CREATE TABLE IF NOT EXISTS floor_business (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, payload VARBINARY(1024) NOT NULL) ENGINE=InnoDB
$$
CREATE TABLE IF NOT EXISTS floor_work (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, msg_id BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB
$$
-- Pieces of (e), to see what each costs: (e) without the wake-up check; without the EXIT
-- handler (and its fallback); the least: the fenced INSERT and SELECT LAST_INSERT_ID().
DROP PROCEDURE IF EXISTS txmq_send_floor_nowake
$$
CREATE PROCEDURE txmq_send_floor_nowake(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
      CALL txmq_send('floor', p_payload, NULL);
    INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
      VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
    SET v_id = LAST_INSERT_ID();
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  SELECT v_id AS id;
END
$$
DROP PROCEDURE IF EXISTS txmq_send_floor_nohandler
$$
CREATE PROCEDURE txmq_send_floor_nohandler(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
  SELECT LAST_INSERT_ID() AS id;
END
$$
DROP PROCEDURE IF EXISTS txmq_send_floor_min
$$
CREATE PROCEDURE txmq_send_floor_min(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
  SELECT LAST_INSERT_ID() AS id;
END
$$
-- An empty procedure: the price of a CALL itself (no statement inside).
DROP PROCEDURE IF EXISTS floor_empty
$$
CREATE PROCEDURE floor_empty(IN p_payload LONGBLOB)
  NO SQL SQL SECURITY DEFINER
BEGIN
END
$$
-- A generic entry that dispatches to per-topic procedures: a generated CASE over the names of
-- the topics that have one (static CALLs, no PREPARE), the generic procedure for the others.
-- txmq_send_d1: one topic in the CASE; txmq_send_d1000: `floor` after 999 others (the setup
-- writes @DISPATCH_999@ as 999 WHEN branches for made-up topics).
DROP PROCEDURE IF EXISTS txmq_send_d1
$$
CREATE PROCEDURE txmq_send_d1(IN p_topic VARCHAR(255), IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
  CASE p_topic
    WHEN 'floor' THEN CALL txmq_send_floor(p_payload, p_options);
    ELSE CALL txmq_send(p_topic, p_payload, p_options);
  END CASE
$$
DROP PROCEDURE IF EXISTS txmq_send_d1000
$$
CREATE PROCEDURE txmq_send_d1000(IN p_topic VARCHAR(255), IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
  CASE p_topic
@DISPATCH_999@
    WHEN 'floor' THEN CALL txmq_send_floor(p_payload, p_options);
    ELSE CALL txmq_send(p_topic, p_payload, p_options);
  END CASE
$$
-- The same 1,000 names as a generated binary tree of IFs (10 comparisons): @DISPATCH_TREE@.
DROP PROCEDURE IF EXISTS txmq_send_dtree
$$
CREATE PROCEDURE txmq_send_dtree(IN p_topic VARCHAR(255), IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_t VARBINARY(255) DEFAULT CAST(p_topic AS BINARY);
@DISPATCH_TREE@
END
$$
-- SQL SECURITY INVOKER: the price of the definer's security context on an empty CALL.
DROP PROCEDURE IF EXISTS floor_empty_invoker
$$
CREATE PROCEDURE floor_empty_invoker(IN p_payload LONGBLOB)
  NO SQL SQL SECURITY INVOKER
BEGIN
END
$$
-- What txmq_send's fast path adds to (c'), one piece at a time:
-- the INSERT through PREPARE / EXECUTE / DEALLOCATE of its text (the table name is dynamic);
DROP PROCEDURE IF EXISTS floor_dyn_rs
$$
CREATE PROCEDURE floor_dyn_rs(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', 'floor', '` (visible_at, enqueued_at, msg_key, payload) ',
                         'VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)');
  SET @txmq_a = p_payload;
  PREPARE txmq_statement FROM @txmq_sql;
  EXECUTE txmq_statement USING @txmq_a;
  DEALLOCATE PREPARE txmq_statement;
  SET @txmq_a = NULL, @txmq_sql = NULL;
  SELECT LAST_INSERT_ID() AS id;
END
$$
-- the transaction test, and a savepoint (in a transaction) or a transaction of its own;
DROP PROCEDURE IF EXISTS floor_txtest_rs
$$
CREATE PROCEDURE floor_txtest_rs(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_id BIGINT UNSIGNED;
  BEGIN
    DECLARE CONTINUE HANDLER FOR 1568 SET v_in = 1;
    IF @@autocommit = 0 THEN
      SET v_in = 1;
    ELSE
      SET TRANSACTION READ WRITE;
    END IF;
  END;
  IF v_in = 1 THEN
    SAVEPOINT txmq_call;
  ELSE
    START TRANSACTION;
  END IF;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SET v_id = LAST_INSERT_ID();
  IF v_in = 0 THEN
    COMMIT;
  END IF;
  SELECT v_id AS id;
END
$$
-- txmq_send's catalog read (the topic's row in share mode, its groups counted in subqueries);
DROP PROCEDURE IF EXISTS floor_topic_rs
$$
CREATE PROCEDURE floor_topic_rs(IN p_topic VARCHAR(255), IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_name VARCHAR(48);
  DECLARE v_max_payload BIGINT UNSIGNED;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_placed BIGINT UNSIGNED;
  DECLARE v_groups INT;
  DECLARE v_allocator INT UNSIGNED;
  SELECT name, max_payload_bytes, partitions, placed,
         (SELECT COUNT(*) FROM txmq_groups WHERE topic = t.name),
         (SELECT MIN(number) FROM txmq_groups WHERE topic = t.name)
    INTO v_name, v_max_payload, v_partitions, v_placed, v_groups, v_allocator
    FROM txmq_topics AS t WHERE t.name = p_topic LOCK IN SHARE MODE;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SELECT LAST_INSERT_ID() AS id;
END
$$
-- the name check (txmq_i_check_name: a nested CALL and a REGEXP);
DROP PROCEDURE IF EXISTS floor_check_rs
$$
CREATE PROCEDURE floor_check_rs(IN p_topic VARCHAR(255), IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CALL txmq_i_check_name(p_topic);
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  SELECT LAST_INSERT_ID() AS id;
END
$$
-- and (c') reached through one nested CALL.
DROP PROCEDURE IF EXISTS floor_nested_rs
$$
CREATE PROCEDURE floor_nested_rs(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
  CALL floor_static_rs(p_payload)
$$
-- A generic entry that needs no regeneration: the name checked inline, then the topic's own
-- procedure reached through PREPARE of a CALL (a topic without one: 1305, the generic path).
DROP PROCEDURE IF EXISTS txmq_send_ddyn
$$
CREATE PROCEDURE txmq_send_ddyn(IN p_topic VARCHAR(255), IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE EXIT HANDLER FOR 1305
  BEGIN
    SET @txmq_a = NULL, @txmq_b = NULL;
    CALL txmq_send(p_topic, p_payload, p_options);
  END;
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    CALL txmq_send(p_topic, p_payload, p_options);
    LEAVE proc;
  END IF;
  SET @txmq_sql = CONCAT('CALL txmq_send_', p_topic, '(?, ?)'), @txmq_a = p_payload, @txmq_b = p_options;
  PREPARE txmq_dispatch FROM @txmq_sql;
  EXECUTE txmq_dispatch USING @txmq_a, @txmq_b;
  DEALLOCATE PREPARE txmq_dispatch;
  SET @txmq_sql = NULL, @txmq_a = NULL, @txmq_b = NULL;
END
$$
-- The drain without counting takes (no txmq_takes, so no dead-lettering of a message whose
-- consumer always crashes): take = the locking SELECT as the result set; ack = the check that
-- this transaction holds every id, then the DELETE. What the count costs.
DROP PROCEDURE IF EXISTS txmq_take_floor_nc
$$
CREATE PROCEDURE txmq_take_floor_nc(IN p_max INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  IF @NOT_IN_TX@ THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: txmq_take needs a transaction';
  END IF;
  IF p_max IS NULL OR p_max < 1 OR p_max > 1000 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: max_messages must be from 1 to 1000';
  END IF;
  SELECT id, payload, msg_key, attempts + 1 AS attempt, enqueued_at,
         IF(attributes IS NULL, NULL, txmq_i_decode_attributes(attributes)) AS attributes
    FROM txmq_q_floor FORCE INDEX (PRIMARY)
   WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT p_max FOR UPDATE SKIP LOCKED;
END
$$
DROP PROCEDURE IF EXISTS txmq_ack_floor_nc
$$
CREATE PROCEDURE txmq_ack_floor_nc(IN p_ids LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_n INT;
  DECLARE v_held INT;
  DECLARE v_keyed INT;
  IF @NOT_IN_TX@ THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: txmq_ack needs the transaction that took the messages';
  END IF;
  IF NOT JSON_VALID(p_ids) OR JSON_TYPE(p_ids) <> 'ARRAY' THEN
    CALL txmq_ack('floor', NULL, p_ids);
    LEAVE proc;
  END IF;
  SET v_n = JSON_LENGTH(p_ids);
  SELECT COUNT(*), SUM(h.msg_key IS NOT NULL) INTO v_held, v_keyed
    FROM (SELECT q.id, q.msg_key
            FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
            STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id
           WHERE q.visible_at <= UTC_TIMESTAMP(6) FOR UPDATE @OF_Q@SKIP LOCKED) AS h;
  IF v_held <> v_n OR v_keyed > 0 THEN
    CALL txmq_ack('floor', NULL, p_ids);
    LEAVE proc;
  END IF;
  DELETE q FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) AS i
    STRAIGHT_JOIN txmq_q_floor AS q ON q.id = i.id;
END
$$
-- A generic send that needs no generated code: the send fence replaces the catalog's locking
-- read and the transaction of its own. The topic's row read without a lock (its name matched
-- under ascii_bin is a valid name: it may go into the statement's text); a topic with one
-- partition, not sharded, within its limit: the fenced INSERT into `txmq_q_<topic>` through
-- PREPARE (1054: no fence, the layout is not "one group, number 0"; 1146: no such table:
-- txmq_send's full path). Everything else: txmq_send.
DROP PROCEDURE IF EXISTS txmq_send_gfence
$$
CREATE PROCEDURE txmq_send_gfence(IN p_topic VARCHAR(255), IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_max BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_placed BIGINT UNSIGNED;
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  IF p_options IS NULL AND p_payload IS NOT NULL THEN
    SELECT max_payload_bytes, partitions, placed INTO v_max, v_partitions, v_placed
      FROM txmq_topics WHERE name = p_topic;
  END IF;
  IF v_max IS NULL OR v_partitions <> 1 OR v_placed IS NOT NULL OR LENGTH(p_payload) > v_max THEN
    CALL txmq_send(p_topic, p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
    BEGIN
      SET @txmq_a = NULL, @txmq_sql = NULL;
      CALL txmq_send(p_topic, p_payload, NULL);
    END;
    SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', p_topic, '` (visible_at, enqueued_at, msg_key, ',
                           'payload, send_fence) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?, NULL)'),
        @txmq_a = p_payload;
    PREPARE txmq_statement FROM @txmq_sql;
    EXECUTE txmq_statement USING @txmq_a;
    DEALLOCATE PREPARE txmq_statement;
    SET v_id = LAST_INSERT_ID(), @txmq_a = NULL, @txmq_sql = NULL;
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups(p_topic, 1);
  END IF;
  SELECT v_id AS id;
END
$$
-- (e) with the wake-up test as a function instead of a table read: IS_USED_LOCK of a user lock
-- that waiting watches would hold (a protocol change in waiters.cc, measured here only).
DROP PROCEDURE IF EXISTS txmq_send_floor_lw
$$
CREATE PROCEDURE txmq_send_floor_lw(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  BEGIN
    DECLARE EXIT HANDLER FOR 1054, 1146
      CALL txmq_send('floor', p_payload, NULL);
    INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
      VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL);
    SET v_id = LAST_INSERT_ID();
  END;
  IF v_id IS NULL THEN
    LEAVE proc;
  END IF;
  IF IS_USED_LOCK('txmq_watch_floor') IS NOT NULL THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
  SELECT v_id AS id;
END
$$
