-- Probe routines for issue 34 (measurement only; not txmq's interface).
-- Installed by run.py through pymysql (statements separated by lines of "$$").
DROP PROCEDURE IF EXISTS txmq_send_probe
$$
-- One message: check the name, look the topic up (as a send does: its row, shared lock), then
-- a dynamic INSERT into txmq_q_<topic>; the id in OUT p_id.
CREATE PROCEDURE txmq_send_probe(IN p_topic VARCHAR(64), IN p_payload LONGBLOB,
                                 OUT p_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_layout BIGINT UNSIGNED DEFAULT NULL;
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: invalid topic name';
  END IF;
  SELECT layout INTO v_layout FROM txmq_topics WHERE name = p_topic LOCK IN SHARE MODE;
  IF v_layout IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: no such topic';
  END IF;
  SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', p_topic, '` (visible_at, enqueued_at, msg_key, ',
                         'payload) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)');
  SET @txmq_p = p_payload;
  PREPARE txmq_s FROM @txmq_sql;
  EXECUTE txmq_s USING @txmq_p;
  DEALLOCATE PREPARE txmq_s;
  SET @txmq_p = NULL;
  SET p_id = LAST_INSERT_ID();
END
$$
DROP PROCEDURE IF EXISTS txmq_send_probe_rs
$$
-- The same, minus the topic lookup, returning the id as a one-row result set (one round trip).
CREATE PROCEDURE txmq_send_probe_rs(IN p_topic VARCHAR(64), IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: invalid topic name';
  END IF;
  SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', p_topic, '` (visible_at, enqueued_at, msg_key, ',
                         'payload) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)');
  SET @txmq_p = p_payload;
  PREPARE txmq_s FROM @txmq_sql;
  EXECUTE txmq_s USING @txmq_p;
  DEALLOCATE PREPARE txmq_s;
  SELECT LAST_INSERT_ID() AS id;
END
$$
DROP PROCEDURE IF EXISTS txmq_send_probe_lrs
$$
-- As txmq_send_probe, the id as a one-row result set instead of OUT.
-- One message: check the name, look the topic up (as a send does: its row, shared lock), then
-- a dynamic INSERT into txmq_q_<topic>; the id in OUT p_id.
CREATE PROCEDURE txmq_send_probe_lrs(IN p_topic VARCHAR(64), IN p_payload LONGBLOB)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_layout BIGINT UNSIGNED DEFAULT NULL;
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: invalid topic name';
  END IF;
  SELECT layout INTO v_layout FROM txmq_topics WHERE name = p_topic LOCK IN SHARE MODE;
  IF v_layout IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: no such topic';
  END IF;
  SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', p_topic, '` (visible_at, enqueued_at, msg_key, ',
                         'payload) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)');
  SET @txmq_p = p_payload;
  PREPARE txmq_s FROM @txmq_sql;
  EXECUTE txmq_s USING @txmq_p;
  DEALLOCATE PREPARE txmq_s;
  SET @txmq_p = NULL;
  SELECT LAST_INSERT_ID() AS id;
END
$$
DROP FUNCTION IF EXISTS txmq_send_fn_probe
$$
-- A function with static SQL, one per topic (what a migration would have to generate at
-- topic creation): SELECT txmq_send_fn_probe(payload).
CREATE FUNCTION txmq_send_fn_probe(p_payload LONGBLOB) RETURNS BIGINT UNSIGNED
  MODIFIES SQL DATA NOT DETERMINISTIC SQL SECURITY DEFINER
BEGIN
  INSERT INTO txmq_q_probe (visible_at, enqueued_at, msg_key, payload)
    VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, p_payload);
  RETURN LAST_INSERT_ID();
END
$$
DROP PROCEDURE IF EXISTS txmq_send_batch_select_probe
$$
-- A JSON array of strings: INSERT ... SELECT FROM JSON_TABLE. Returns the ids: RETURNING on
-- MariaDB (p_returning = 1); else LAST_INSERT_ID() and ROW_COUNT() only.
CREATE PROCEDURE txmq_send_batch_select_probe(IN p_topic VARCHAR(64), IN p_json LONGTEXT,
                                              IN p_returning TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: invalid topic name';
  END IF;
  IF p_json IS NULL OR NOT JSON_VALID(p_json) OR JSON_TYPE(p_json) <> 'ARRAY' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: the batch must be a JSON array';
  END IF;
  SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', p_topic, '` (visible_at, enqueued_at, msg_key, ',
    'payload) SELECT UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, j.p FROM JSON_TABLE(?, ''$[*]'' ',
    'COLUMNS (n FOR ORDINALITY, p LONGTEXT PATH ''$'')) AS j ORDER BY j.n',
    IF(p_returning = 1, ' RETURNING id', ''));
  SET @txmq_p = p_json;
  PREPARE txmq_s FROM @txmq_sql;
  EXECUTE txmq_s USING @txmq_p;
  SET @txmq_n = ROW_COUNT();
  DEALLOCATE PREPARE txmq_s;
  SET @txmq_p = NULL;
  IF p_returning = 0 THEN
    SELECT LAST_INSERT_ID() AS first_id, @txmq_n AS n;
  END IF;
END
$$
DROP PROCEDURE IF EXISTS txmq_send_batch_values_probe
$$
-- The same array turned into one multi-row VALUES statement (a "simple insert": consecutive
-- ids under every innodb_autoinc_lock_mode, so first id + row count gives them all).
CREATE PROCEDURE txmq_send_batch_values_probe(IN p_topic VARCHAR(64), IN p_json LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_gcl BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: invalid topic name';
  END IF;
  IF p_json IS NULL OR NOT JSON_VALID(p_json) OR JSON_TYPE(p_json) <> 'ARRAY' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txmq: the batch must be a JSON array';
  END IF;
  SET SESSION group_concat_max_len = 1073741824;
  SELECT GROUP_CONCAT('(UTC_TIMESTAMP(6),UTC_TIMESTAMP(6),NULL,', QUOTE(j.p), ')'
                      ORDER BY j.n SEPARATOR ',')
    INTO @txmq_rows
    FROM JSON_TABLE(p_json, '$[*]' COLUMNS (n FOR ORDINALITY, p LONGTEXT PATH '$')) AS j;
  SET SESSION group_concat_max_len = v_gcl;
  SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', p_topic, '` (visible_at, enqueued_at, msg_key, ',
                         'payload) VALUES ', @txmq_rows);
  SET @txmq_rows = NULL;
  PREPARE txmq_s FROM @txmq_sql;
  EXECUTE txmq_s;
  SET @txmq_n = ROW_COUNT();
  DEALLOCATE PREPARE txmq_s;
  SET @txmq_sql = NULL;
  SELECT LAST_INSERT_ID() AS first_id, @txmq_n AS n;
END
