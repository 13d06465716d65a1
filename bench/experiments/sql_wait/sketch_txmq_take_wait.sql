-- Sketch, to adapt into src/catalog/routines.sql (not installed by anything; untested as
-- written: take_wait.sql is the measured prototype, and this is its loop around the real claim).
-- Assumes txmq_take's body is split into txmq_i_claim(topic, group number, max, OUT live),
-- which fills txmq_i_taken as today without the final SELECT, and that txmq_take(t, g, max)
-- becomes CALL txmq_take_wait(t, g, max, 0). @TXMQ_WAIT@ is chosen when installing:
--   MySQL:   SELECT SLEEP(v_slice) INTO v_r;
--   MariaDB: SELECT MASTER_GTID_WAIT('4294967295-1-18446744073709551615', v_slice) INTO v_r;
-- Never SET v = SLEEP()/GET_LOCK(): a KILL then ends the CALL on both servers.
DROP PROCEDURE IF EXISTS txmq_take_wait
$$
CREATE PROCEDURE txmq_take_wait(IN p_topic VARCHAR(255), IN p_group VARCHAR(255), IN p_max INT,
                                IN p_wait_ms INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE v_channel VARCHAR(64);
  DECLARE v_live INT DEFAULT 0;
  DECLARE v_deadline DATETIME(6);
  DECLARE v_slice DOUBLE;
  DECLARE v_r BIGINT;
  DECLARE v_woken TINYINT DEFAULT 0;
  DECLARE v_registered TINYINT DEFAULT 0;
  DECLARE v_lwt BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE CONTINUE HANDLER FOR 1317 SET v_woken = 1;   -- a sender's KILL QUERY
  DECLARE CONTINUE HANDLER FOR 1205 SET v_r = NULL;    -- the fence's sender still open after 1 s
  DECLARE CONTINUE HANDLER FOR 1020 SET v_r = NULL;    -- MariaDB 11.6+: fence ended at the COMMIT
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
    CALL txmq_i_undo(0);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  CALL txmq_i_check_name(p_topic);
  CALL txmq_i_in_transaction(v_in);
  IF v_in = 0 THEN
    CALL txmq_i_raise('txmq_take needs a transaction (START TRANSACTION first): the messages are held by it until it ends');
  END IF;
  IF p_wait_ms IS NULL OR p_wait_ms < 0 OR p_wait_ms > 20000 THEN
    CALL txmq_i_raise('wait_ms must be from 0 to 20000');
  END IF;
  -- A waiting take in REPEATABLE READ holds a next-key lock on the queue's supremum for the whole
  -- wait: every send to the topic blocks behind it (measured: the waking send failed, 1205).
  IF p_wait_ms > 0 AND @@SESSION.transaction_isolation NOT IN ('READ-COMMITTED', 'READ-UNCOMMITTED') THEN
    CALL txmq_i_raise('a waiting txmq_take needs READ COMMITTED (SET TRANSACTION ISOLATION LEVEL READ COMMITTED before START TRANSACTION)');
  END IF;
  SAVEPOINT txmq_call;
  CALL txmq_i_group(p_topic, p_group, v_group);
  SET v_channel = txmq_i_channel(p_topic, v_group);
  CALL txmq_i_claim(p_topic, v_group, p_max, v_live);
  IF v_live = 0 AND p_wait_ms > 0 THEN
    SET v_deadline = NOW(6) + INTERVAL p_wait_ms * 1000 MICROSECOND;
    SET SESSION innodb_lock_wait_timeout = 1;
    wait_loop: LOOP
      IF v_registered = 0 THEN
        BEGIN
          -- MySQL with enforce_gtid_consistency refuses MEMORY writes in a transaction: poll.
          DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
          INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at)
            VALUES (CONNECTION_ID(), v_channel, NOW(6));
        END;
        SET v_registered = 1;
        CALL txmq_i_claim(p_topic, v_group, p_max, v_live);
        IF v_live > 0 THEN LEAVE wait_loop; END IF;
      END IF;
      SET v_slice = LEAST(1.0, TIMESTAMPDIFF(MICROSECOND, NOW(6), v_deadline) / 1e6);
      IF v_slice <= 0 THEN LEAVE wait_loop; END IF;
      IF v_woken = 0 THEN
        SET v_r = NULL;
        @TXMQ_WAIT@
        IF v_r IS NULL OR v_r = 1 THEN SET v_woken = 1; END IF;
      END IF;
      IF v_woken = 1 THEN
        SET v_woken = 0, v_registered = 0;
        DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
        -- The fence, per partition table of the group (waiters.cc pending()), as TWO statements:
        --   SELECT COALESCE(MAX(id), 0) INTO @txmq_a FROM <q>;
        --   SELECT id INTO @txmq_b FROM <q> WHERE id > @txmq_a ORDER BY id LIMIT 1 LOCK IN SHARE MODE;
        CALL txmq_i_fence(p_topic, v_group);
      END IF;
      CALL txmq_i_claim(p_topic, v_group, p_max, v_live);
      IF v_live > 0 THEN LEAVE wait_loop; END IF;
    END LOOP;
    DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
    SET SESSION innodb_lock_wait_timeout = v_lwt;
  END IF;
  SELECT id, payload, msg_key, attempts + takes AS attempt, enqueued_at,
         IF(attributes IS NULL, NULL, txmq_i_decode_attributes(attributes)) AS attributes
    FROM txmq_i_taken WHERE fate = 0 ORDER BY id;
END
