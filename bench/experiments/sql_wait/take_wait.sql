-- A waiting take, prototype for issue 50 item 2 (bench/experiments/sql_wait/README.md).
-- Statements separated by lines holding only "$$", as in src/catalog/routines.sql.
-- Simplified claim: group 0, partition 0 of a one-partition topic, ids and payloads only; the
-- real procedure keeps txmq_take's claim (attempt counts, dead letters, keys) and calls it where
-- this one EXECUTEs wp_claim. @WAIT@ is replaced by the server's wait statement (see q2_take_wait.py):
--   MySQL:   SELECT SLEEP(v_slice) INTO v_r;                 -- KILL: returns 1, no error
--   MariaDB: SELECT MASTER_GTID_WAIT('4294967295-1-18446744073709551615', v_slice) INTO v_r;
--            -- KILL: error 1317, caught below; timeout: -1. (SLEEP is not safe to KILL there.)
-- The caller's session: READ COMMITTED, inside a transaction (as txmq_take).
DROP PROCEDURE IF EXISTS wp_take_wait
$$
CREATE PROCEDURE wp_take_wait(IN p_topic VARCHAR(48), IN p_max INT, IN p_wait_ms INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_channel VARCHAR(64) DEFAULT p_topic;          -- txmq_i_channel(topic, 0)
  DECLARE v_q VARCHAR(96) DEFAULT CONCAT('`txmq_q_', p_topic, '`');
  DECLARE v_deadline DATETIME(6);
  DECLARE v_live INT DEFAULT 0;
  DECLARE v_woken TINYINT DEFAULT 0;
  DECLARE v_registered TINYINT DEFAULT 0;
  DECLARE v_r BIGINT;
  DECLARE v_slice DOUBLE;
  DECLARE v_lwt BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  -- A sender's KILL QUERY: in the wait (MariaDB's MASTER_GTID_WAIT), or in any statement of
  -- the loop (the registration, the fence, a claim: that statement is undone, the loop claims
  -- again). A KILL that lands between two statements is not caught: the CALL ends with 1317.
  DECLARE CONTINUE HANDLER FOR 1317 SET v_woken = 1;
  -- The fence waited its second on a sender still open: claim, and wait again.
  DECLARE CONTINUE HANDLER FOR 1205 SET v_r = NULL;
  -- MariaDB 11.6+ (innodb_snapshot_isolation, its default) ends a fence that waited for a
  -- sender with ER_CHECKREAD at the sender's COMMIT, where older servers return the row: the
  -- message is committed, claim it. Without this handler the CALL fails (measured: 155 of 200).
  DECLARE CONTINUE HANDLER FOR 1020 SET v_r = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
    RESIGNAL;
  END;
  CREATE TEMPORARY TABLE IF NOT EXISTS wp_taken (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY, payload LONGBLOB NOT NULL) ENGINE=InnoDB;
  DELETE FROM wp_taken;
  SET @wp_sql = CONCAT('INSERT INTO wp_taken (id, payload) SELECT id, payload FROM ', v_q,
    ' FORCE INDEX (PRIMARY) WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT ? ',
    'FOR UPDATE SKIP LOCKED');
  PREPARE wp_claim FROM @wp_sql;
  -- The fence (waiters.cc, pending()): the first row above the highest committed id, read
  -- with a shared lock: waits on a message inserted but not committed, returns at its COMMIT.
  -- Two statements, not a subquery: on MariaDB 11.6+ a locking read in a statement that also
  -- made a read view (the MAX) ends with 1020 at the sender's COMMIT (measured: then the
  -- take's next claims missed the message for up to 15 s).
  SET @wp_sql = CONCAT('SELECT COALESCE(MAX(id), 0) INTO @wp_committed FROM ', v_q);
  PREPARE wp_committed FROM @wp_sql;
  SET @wp_sql = CONCAT('SELECT id INTO @wp_fenced FROM ', v_q,
    ' WHERE id > ? ORDER BY id LIMIT 1 LOCK IN SHARE MODE');
  PREPARE wp_fence FROM @wp_sql;
  SET @wp_sql = NULL, @wp_max = p_max;
  EXECUTE wp_claim USING @wp_max;
  SET v_live = ROW_COUNT();
  IF v_live <= 0 AND p_wait_ms > 0 THEN
    SET v_deadline = NOW(6) + INTERVAL LEAST(p_wait_ms, 20000) * 1000 MICROSECOND;
    SET SESSION innodb_lock_wait_timeout = 1;
    wait_loop: LOOP
      IF v_registered = 0 THEN
        -- Registered before the claim that follows: a send that commits after that claim
        -- finds the registration (the library's, after its COMMIT) or KILLs the wait (the
        -- routine's, before its COMMIT).
        INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at)
          VALUES (CONNECTION_ID(), v_channel, NOW(6));
        SET v_registered = 1;
        EXECUTE wp_claim USING @wp_max;
        SET v_live = ROW_COUNT();
        IF v_live > 0 THEN
          LEAVE wait_loop;
        END IF;
      END IF;
      SET v_slice = LEAST(1.0, TIMESTAMPDIFF(MICROSECOND, NOW(6), v_deadline) / 1e6);
      IF v_slice <= 0 THEN
        LEAVE wait_loop;
      END IF;
      -- v_woken already 1: a KILL landed in a statement below (the fence, a claim) and was
      -- caught there; fence again rather than wait.
      IF v_woken = 0 THEN
        SET v_r = NULL;
        @WAIT@
        -- Interrupted: SLEEP returns 1 (MySQL), GET_LOCK NULL (MariaDB); MASTER_GTID_WAIT's
        -- 1317 left v_r NULL. Timed out: 0 (SLEEP, GET_LOCK), -1 (MASTER_GTID_WAIT).
        IF v_r IS NULL OR v_r = 1 THEN
          SET v_woken = 1;
        END IF;
      END IF;
      IF v_woken = 1 THEN
        SET v_woken = 0;
        -- Out of the registrations while it fences and claims: senders wake someone else.
        DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
        SET v_registered = 0;
        EXECUTE wp_committed;
        EXECUTE wp_fence USING @wp_committed;
      END IF;
      -- Every second anyway: delayed messages falling due, sends nobody announced.
      EXECUTE wp_claim USING @wp_max;
      SET v_live = ROW_COUNT();
      IF v_live > 0 THEN
        LEAVE wait_loop;
      END IF;
    END LOOP;
    DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
  END IF;
  DEALLOCATE PREPARE wp_claim;
  DEALLOCATE PREPARE wp_fence;
  DEALLOCATE PREPARE wp_committed;
  SET @wp_max = NULL, @wp_fenced = NULL, @wp_committed = NULL;
  SELECT id, payload FROM wp_taken ORDER BY id;
END
