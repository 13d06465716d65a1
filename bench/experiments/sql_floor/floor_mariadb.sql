-- MariaDB only: a batch whose ids are the INSERT's own RETURNING result set (any lock mode).
DROP PROCEDURE IF EXISTS txmq_send_batch_floor_ret
$$
CREATE PROCEDURE txmq_send_batch_floor_ret(IN p_messages LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
    SELECT UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL,
           IF(LENGTH(j.s) > @MAX_PAYLOAD@, NULL, CAST(j.s AS BINARY)), NULL
      FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY, s LONGTEXT PATH '$')) AS j
     ORDER BY j.n
  RETURNING id
$$
-- The id as the INSERT's own result set (RETURNING) instead of a SELECT after it.
DROP PROCEDURE IF EXISTS floor_static_ret
$$
CREATE PROCEDURE floor_static_ret(IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL) RETURNING id
$$
-- (e) with the id from RETURNING: the checks, the fence's fallback and the wake-up (after the
-- INSERT, so that a woken watch finds the row's lock) as in (e).
DROP PROCEDURE IF EXISTS txmq_send_floor_ret
$$
CREATE PROCEDURE txmq_send_floor_ret(IN p_payload LONGBLOB, IN p_options LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE EXIT HANDLER FOR 1054, 1146
    CALL txmq_send('floor', p_payload, NULL);
  IF p_options IS NOT NULL OR p_payload IS NULL OR LENGTH(p_payload) > @MAX_PAYLOAD@ THEN
    CALL txmq_send('floor', p_payload, p_options);
    LEAVE proc;
  END IF;
  INSERT INTO txmq_q_floor (visible_at, enqueued_at, msg_key, payload, send_fence)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload, NULL) RETURNING id;
  IF EXISTS (SELECT 1 FROM txmq_waiters) THEN
    CALL txmq_i_wake_groups('floor', 1);
  END IF;
END
$$
