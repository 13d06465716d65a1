-- txmq's SQL interface: stored procedures that applications call inside their own transactions
-- (docs/sql.md; the calls' contract in docs/design/sql-calls.md). Installed by the schema's
-- migrations (catalog/routines.cc): each statement below is separated by a line holding only
-- "$$", and every CREATE is preceded by its DROP ... IF EXISTS. A database gets them once, with
-- its schema version: a change to this file after a release is a new schema version whose
-- migration installs them again (`txmq sql install` does it by hand).
--
-- Rules that every routine follows:
--  - SQL SECURITY DEFINER: an application needs EXECUTE on the public routines, nothing on
--    txmq's tables. So every input is checked before it reaches dynamic SQL: a topic name by the
--    same rule as names.cc, numbers as numbers; values travel as parameters of prepared
--    statements (EXECUTE ... USING), never inside the statement's text, except numbers and the
--    payloads of a batch as hex literals (X'..').
--  - Session variables (@txmq_*) are how EXECUTE takes parameters; a caller can set them too, so
--    they are always assigned before they are read, and cleared before returning.
--  - Times are UTC_TIMESTAMP(6): the caller's session has its own time zone.
--  - Nothing is half-written: a routine that fails rolls back to a savepoint it set on entry
--    (inside the caller's transaction) or rolls back its own transaction (autocommit), then
--    re-raises. Errors of txmq's own are SQLSTATE 45000 with a message that starts "txmq: ".
--  - The statements mirror the library's (engine/send.cc, catalog/keys.cc, engine/settle.cc):
--    tests/integration/sql_routines_test.cc sends random sequences through both and compares
--    the rows.

DROP PROCEDURE IF EXISTS txmq_i_raise
$$
CREATE PROCEDURE txmq_i_raise(IN p_message VARCHAR(512) CHARACTER SET utf8mb4)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_text VARCHAR(128) CHARACTER SET utf8mb4 DEFAULT LEFT(CONCAT('txmq: ', p_message), 128);
  SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_text;
END
$$
-- Whether the session is inside a transaction that its caller will end: autocommit off (every
-- statement belongs to one), or one begun by START TRANSACTION (which refuses to change its
-- characteristics: error 1568). Outside, SET TRANSACTION READ WRITE only says what the next
-- transaction is by default.
DROP PROCEDURE IF EXISTS txmq_i_in_transaction
$$
CREATE PROCEDURE txmq_i_in_transaction(OUT p_in TINYINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE CONTINUE HANDLER FOR 1568 SET p_in = 1;
  SET p_in = 0;
  IF @@autocommit = 0 THEN
    SET p_in = 1;
  ELSE
    SET TRANSACTION READ WRITE;
  END IF;
END
$$
-- Ends a failed call: back to its savepoint inside the caller's transaction, or its own
-- transaction rolled back. A deadlock has rolled the whole transaction back already (the
-- savepoint is gone): nothing more to undo then. Its warnings are dropped: MariaDB warns that
-- the call's temporary tables "couldn't be rolled back" (1196, SQLSTATE HY000), which would
-- come first in the caller's diagnostics, before the error the call re-raises (GET DIAGNOSTICS
-- CONDITION 1 read HY000 where the error is 45000).
DROP PROCEDURE IF EXISTS txmq_i_undo
$$
CREATE PROCEDURE txmq_i_undo(IN p_own TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
  DECLARE CONTINUE HANDLER FOR SQLWARNING BEGIN END;
  IF p_own = 1 THEN
    ROLLBACK;
  ELSE
    ROLLBACK TO SAVEPOINT txmq_call;
  END IF;
  SET @txmq_sql = NULL, @txmq_a = NULL, @txmq_b = NULL, @txmq_c = NULL, @txmq_d = NULL;
END
$$
DROP PROCEDURE IF EXISTS txmq_i_exec
$$
-- Runs @txmq_sql with up to four parameters (@txmq_a .. @txmq_d, as many as it has "?").
CREATE PROCEDURE txmq_i_exec(IN p_params TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  PREPARE txmq_statement FROM @txmq_sql;
  CASE p_params
    WHEN 0 THEN EXECUTE txmq_statement;
    WHEN 1 THEN EXECUTE txmq_statement USING @txmq_a;
    WHEN 2 THEN EXECUTE txmq_statement USING @txmq_a, @txmq_b;
    WHEN 3 THEN EXECUTE txmq_statement USING @txmq_a, @txmq_b, @txmq_c;
    ELSE EXECUTE txmq_statement USING @txmq_a, @txmq_b, @txmq_c, @txmq_d;
  END CASE;
  DEALLOCATE PREPARE txmq_statement;
END
$$
-- A topic name, checked as names.cc checks it (REGEXP under a binary collation: the default one
-- ignores case).
DROP PROCEDURE IF EXISTS txmq_i_check_name
$$
CREATE PROCEDURE txmq_i_check_name(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4)
  NO SQL SQL SECURITY DEFINER
BEGIN
  IF p_topic IS NULL OR NOT (CONVERT(p_topic USING utf8mb4) COLLATE utf8mb4_bin
                             REGEXP '^[a-z][a-z0-9_]{0,47}$') THEN
    CALL txmq_i_raise('invalid topic name (names are 1 to 48 characters of a-z 0-9 _, starting with a letter)');
  END IF;
END
$$
-- Tables are named in the statements themselves: `txmq_<kind>_NAME` for group 0's partition 0,
-- else with the suffix $g_p (names.cc, topic_tables); a group's channel (waiters.cc) is the
-- topic's name for group 0, else NAME$g. No helper is a function: on MySQL with binary logging on
-- (its default), creating a function needs SUPER or log_bin_trust_function_creators, which
-- managed servers grant no application. These drops remove the functions of schema 13 and 14.
DROP FUNCTION IF EXISTS txmq_i_table
$$
DROP FUNCTION IF EXISTS txmq_i_channel
$$
DROP FUNCTION IF EXISTS txmq_i_add64
$$
DROP FUNCTION IF EXISTS txmq_i_mul64
$$
DROP FUNCTION IF EXISTS txmq_i_key_partition
$$
DROP FUNCTION IF EXISTS txmq_i_varint
$$
DROP FUNCTION IF EXISTS txmq_i_decode_attributes
$$
DROP FUNCTION IF EXISTS txmq_i_unkeyed_partition
$$
-- In a routine's handler, before RESIGNAL: on "Table ... doesn't exist" (1146) for a topic whose
-- tables come at its first use (TableCreation::kAtFirstUse, txmq serve --tables-at-first-use)
-- and have not come yet, raises txmq's error saying so. Such a topic is in the catalog and lacks
-- the table that the library makes last, its allocating group's first queue table (catalog
-- has_tables), also after a make cut short. The calls make no
-- tables: DDL would commit the caller's transaction. Any other error: nothing, and the caller
-- re-raises it.
DROP PROCEDURE IF EXISTS txmq_i_raise_if_no_tables
$$
CREATE PROCEDURE txmq_i_raise_if_no_tables(IN p_errno INT, IN p_topic VARCHAR(255) CHARACTER SET utf8mb4)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_allocator INT UNSIGNED DEFAULT NULL;
  DECLARE v_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  IF p_errno = 1146 THEN
    -- A 1146 comes after the name's check: the name is ASCII.
    SET v_topic = CONVERT(LEFT(p_topic, 64) USING ascii);
    CALL txmq_i_not_shared(v_topic, (SELECT storage FROM txmq_topics WHERE name = v_topic));
    SELECT MIN(number) INTO v_allocator FROM txmq_groups WHERE topic = v_topic;
    IF v_allocator IS NOT NULL AND NOT EXISTS (
         SELECT 1 FROM information_schema.TABLES
          WHERE TABLE_SCHEMA = DATABASE()
            AND TABLE_NAME = CONCAT('txmq_q_', v_topic,
                                    IF(v_allocator = 0, '', CONCAT('$', v_allocator, '_0')))) THEN
      CALL txmq_i_raise(CONCAT('topic ''', p_topic,
                               ''' has no tables until its first use by serve or the library'));
    END IF;
  END IF;
END
$$
-- A key's partition: FNV-1a (64 bits) of its bytes, then the jump consistent hash, in doubles
-- as partition_of_key (send.cc) computes it. BIGINT UNSIGNED arithmetic refuses to overflow, so
-- products mod 2^64 are made of 32-bit halves: (a * b) mod 2^64 is lo(a)lo(b) plus lo(a)hi(b) +
-- hi(a)lo(b) shifted 32 bits, whose carries past bit 63 fall away (FNV's prime: hi 256, lo
-- 435; the jump hash's multiplier: hi 666578662, lo 2276503805).
DROP PROCEDURE IF EXISTS txmq_i_key_partition
$$
CREATE PROCEDURE txmq_i_key_partition(IN p_key VARBINARY(255), IN p_partitions INT UNSIGNED,
                                      OUT p_partition INT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_hash BIGINT UNSIGNED DEFAULT 14695981039346656037;
  DECLARE v_x BIGINT UNSIGNED;
  DECLARE v_low BIGINT UNSIGNED;
  DECLARE v_length INT DEFAULT LENGTH(p_key);
  DECLARE i INT DEFAULT 1;
  DECLARE b BIGINT DEFAULT -1;
  DECLARE j BIGINT DEFAULT 0;
  IF p_partitions <= 1 THEN
    SET p_partition = 0;
  ELSE
    WHILE i <= v_length DO
      SET v_x = v_hash ^ ASCII(SUBSTRING(p_key, i, 1));
      SET v_low = (v_x & 4294967295) * 435;
      SET v_hash = ((((v_low >> 32) + (((v_x >> 32) * 435) & 4294967295)
                      + (((v_x & 4294967295) * 256) & 4294967295)) & 4294967295) << 32)
                   | (v_low & 4294967295);
      SET i = i + 1;
    END WHILE;
    WHILE j < p_partitions DO
      SET b = j;
      SET v_low = (v_hash & 4294967295) * 2276503805 + 1;
      SET v_hash = ((((v_low >> 32) + (((v_hash >> 32) * 2276503805) & 4294967295)
                      + (((v_hash & 4294967295) * 666578662) & 4294967295)) & 4294967295) << 32)
                   | (v_low & 4294967295);
      SET j = FLOOR((b + 1) * (2147483648e0 / ((v_hash >> 33) + 1e0)));
    END WHILE;
    SET p_partition = b;
  END IF;
END
$$
-- A varint length prefix (attributes.cc, put): 7 bits a byte, low bits first.
DROP PROCEDURE IF EXISTS txmq_i_varint
$$
CREATE PROCEDURE txmq_i_varint(IN p_n BIGINT UNSIGNED, OUT p_out VARBINARY(10))
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_byte INT;
  SET p_out = '';
  REPEAT
    SET v_byte = p_n & 127;
    SET p_n = p_n >> 7;
    IF p_n <> 0 THEN
      SET v_byte = v_byte | 128;
    END IF;
    SET p_out = CONCAT(p_out, CHAR(v_byte USING binary));
  UNTIL p_n = 0 END REPEAT;
END
$$
-- Attributes given as JSON ({"name": "value"} or {"name": {"type": "Number", "value": "12"}})
-- encoded as the library stores them (attributes.cc, version 1: in name order, name, type and
-- value each with its varint length), with their size as SQS counts it (names, types and
-- values). NULL for none. Checked as check_attributes checks them.
DROP PROCEDURE IF EXISTS txmq_i_encode_attributes
$$
CREATE PROCEDURE txmq_i_encode_attributes(IN p_json LONGTEXT CHARACTER SET utf8mb4, IN p_where VARCHAR(64) CHARACTER SET utf8mb4,
                                          OUT p_blob LONGBLOB, OUT p_size BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_count INT DEFAULT 0;
  DECLARE v_name VARBINARY(1024);
  DECLARE v_entry LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_type VARBINARY(1024);
  DECLARE v_value LONGBLOB;
  DECLARE v_name_length VARBINARY(10);
  DECLARE v_type_length VARBINARY(10);
  DECLARE v_value_length VARBINARY(10);
  DECLARE names CURSOR FOR
    SELECT CAST(j.name AS BINARY) FROM JSON_TABLE(JSON_KEYS(p_json), '$[*]'
      COLUMNS (name VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j
    ORDER BY CAST(j.name AS BINARY);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  SET p_blob = NULL, p_size = 0;
  IF p_json IS NULL OR JSON_TYPE(p_json) = 'NULL' THEN
    SET v_done = 2;
  ELSEIF JSON_TYPE(p_json) <> 'OBJECT' THEN
    CALL txmq_i_raise(CONCAT(p_where, 'attributes must be a JSON object'));
  ELSEIF JSON_LENGTH(p_json) > 64 THEN
    CALL txmq_i_raise(CONCAT(p_where, JSON_LENGTH(p_json), ' attributes are over the limit of 64'));
  END IF;
  IF v_done = 0 AND JSON_LENGTH(p_json) > 0 THEN
    SET p_blob = UNHEX('01');
    OPEN names;
    read_names: LOOP
      FETCH names INTO v_name;
      IF v_done = 1 THEN
        LEAVE read_names;
      END IF;
      SET v_entry = JSON_EXTRACT(p_json, CONCAT('$.', JSON_QUOTE(CONVERT(v_name USING utf8mb4))));
      IF JSON_TYPE(v_entry) = 'OBJECT' THEN
        SET v_type = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_entry, '$.type')) AS BINARY);
        SET v_value = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_entry, '$.value')) AS BINARY);
        IF JSON_TYPE(JSON_EXTRACT(v_entry, '$.value')) NOT IN ('STRING', 'INTEGER', 'DOUBLE', 'DECIMAL', 'UNSIGNED INTEGER') THEN
          SET v_value = NULL;
        END IF;
      ELSEIF JSON_TYPE(v_entry) = 'STRING' THEN
        SET v_type = 'String';
        SET v_value = CAST(JSON_UNQUOTE(v_entry) AS BINARY);
      ELSE
        SET v_type = NULL, v_value = NULL;
      END IF;
      IF v_value IS NULL THEN
        CALL txmq_i_raise(CONCAT(p_where, 'attribute ''', LEFT(CONVERT(v_name USING utf8mb4), 64),
                                 ''' needs a string value, or {"type": ..., "value": ...}'));
      END IF;
      IF NOT (CONVERT(v_name USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_.-]{1,256}$') OR LENGTH(v_name) > 256 THEN
        CALL txmq_i_raise(CONCAT(p_where, 'attribute names are 1 to 256 characters of A-Z a-z 0-9 _ - . (got ''',
                                 LEFT(CONVERT(v_name USING utf8mb4), 40), ''')'));
      END IF;
      IF v_type IS NULL OR NOT (CONVERT(v_type USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_.-]{1,256}$') OR LENGTH(v_type) > 256 THEN
        CALL txmq_i_raise(CONCAT(p_where, 'attribute ''', CONVERT(v_name USING utf8mb4),
                                 ''': types are 1 to 256 characters of A-Z a-z 0-9 _ - .'));
      END IF;
      CALL txmq_i_varint(LENGTH(v_name), v_name_length);
      CALL txmq_i_varint(LENGTH(v_type), v_type_length);
      CALL txmq_i_varint(LENGTH(v_value), v_value_length);
      SET p_blob = CONCAT(p_blob, v_name_length, v_name, v_type_length, v_type, v_value_length,
                          v_value);
      SET p_size = p_size + LENGTH(v_name) + LENGTH(v_type) + LENGTH(v_value);
    END LOOP;
    CLOSE names;
  END IF;
END
$$
-- The library's encoding back to JSON ({"name": {"type": ..., "value": ...}}), for txmq_take.
-- The origin entry of a dead letter (its name starts with the byte 1) is left out, as
-- decode_attributes leaves it out of a message's attributes.
DROP PROCEDURE IF EXISTS txmq_i_decode_attributes
$$
CREATE PROCEDURE txmq_i_decode_attributes(IN p_blob LONGBLOB,
                                          OUT p_out LONGTEXT CHARACTER SET utf8mb4)
  NO SQL SQL SECURITY DEFINER
decode: BEGIN
  DECLARE v_at BIGINT DEFAULT 2;
  DECLARE v_field INT;
  DECLARE v_len BIGINT;
  DECLARE v_shift INT;
  DECLARE v_byte INT;
  DECLARE v_name VARBINARY(1024);
  DECLARE v_type VARBINARY(1024);
  DECLARE v_value LONGBLOB;
  SET p_out = NULL;
  IF p_blob IS NULL OR LENGTH(p_blob) = 0 THEN
    LEAVE decode;
  END IF;
  SET p_out = '{}';
  WHILE v_at <= LENGTH(p_blob) DO
    SET v_field = 0;
    WHILE v_field < 3 DO
      SET v_len = 0, v_shift = 0;
      REPEAT
        SET v_byte = ASCII(SUBSTRING(p_blob, v_at, 1));
        SET v_len = v_len | ((v_byte & 127) << v_shift);
        SET v_shift = v_shift + 7, v_at = v_at + 1;
      UNTIL (v_byte & 128) = 0 OR v_at > LENGTH(p_blob) END REPEAT;
      CASE v_field
        WHEN 0 THEN SET v_name = SUBSTRING(p_blob, v_at, v_len);
        WHEN 1 THEN SET v_type = SUBSTRING(p_blob, v_at, v_len);
        ELSE SET v_value = SUBSTRING(p_blob, v_at, v_len);
      END CASE;
      SET v_at = v_at + v_len, v_field = v_field + 1;
    END WHILE;
    IF ASCII(v_name) <> 1 THEN
      SET p_out = JSON_SET(p_out, CONCAT('$.', JSON_QUOTE(CONVERT(v_name USING utf8mb4))),
                           JSON_OBJECT('type', CONVERT(v_type USING utf8mb4),
                                       'value', CONVERT(v_value USING utf8mb4)));
    END IF;
  END WHILE;
END
$$
-- Wakes up to p_count consumers waiting on a channel (waiters.cc, the watches registered in
-- txmq_waiters, and txmq_take_wait's registrations): KILL QUERY of their waiting statements, as
-- a sender does after its commit. A routine runs before its caller commits, so the woken watch
-- or take finds the messages not yet committed and waits for them on their row locks (the
-- fences). Takes the watches' registrations from nobody (no write inside the caller's
-- transaction); a take's, which it drops itself when woken, it drops too (best effort: a take
-- whose CALL a KILL ended leaves its own). Errors are ignored: a watch that has gone (1094), or a
-- definer without the right to end other users' statements (1095).
DROP PROCEDURE IF EXISTS txmq_i_wake
$$
CREATE PROCEDURE txmq_i_wake(IN p_channel VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_count INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE v_take TINYINT;
  DECLARE watches CURSOR FOR
    SELECT connection_id, registered_at = '1000-01-01 00:00:00' FROM txmq_waiters
     WHERE topic = p_channel ORDER BY registered_at LIMIT p_count;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  IF p_count > 0 THEN
    OPEN watches;
    wake: LOOP
      FETCH watches INTO v_id, v_take;
      IF v_done = 1 THEN
        LEAVE wake;
      END IF;
      BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
        SET @txmq_sql = CONCAT('KILL QUERY ', v_id);
        PREPARE txmq_kill FROM @txmq_sql;
        EXECUTE txmq_kill;
        DEALLOCATE PREPARE txmq_kill;
        IF v_take = 1 THEN
          DELETE FROM txmq_waiters WHERE connection_id = v_id AND topic = p_channel;
        END IF;
      END;
    END LOOP;
    CLOSE watches;
    SET @txmq_sql = NULL;
  END IF;
END
$$
-- A topic in shared storage (TableCreation::kShared) is not served here yet: a clear error
-- instead of one about a table that does not exist.
DROP PROCEDURE IF EXISTS txmq_i_not_shared
$$
CREATE PROCEDURE txmq_i_not_shared(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_storage TINYINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  IF IFNULL(p_storage, 0) <> 0 THEN
    CALL txmq_i_raise(CONCAT('topic ''', p_topic, ''' is in shared storage, which the SQL ',
                             'interface does not serve yet: use the library, txmq serve or the ',
                             'command line, or a topic with tables of its own'));
  END IF;
END
$$
-- The topic's settings as a send reads them: its row under a shared lock held until the
-- transaction ends, which fences the send against a change of its groups or partitions
-- (the catalog: with_topic_fenced takes the row for update).
DROP PROCEDURE IF EXISTS txmq_i_topic
$$
CREATE PROCEDURE txmq_i_topic(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, OUT p_max_payload BIGINT UNSIGNED,
                              OUT p_dedup_window BIGINT UNSIGNED, OUT p_partitions INT UNSIGNED,
                              OUT p_placed BIGINT UNSIGNED, OUT p_groups INT,
                              OUT p_allocator INT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_found TINYINT DEFAULT 0;
  DECLARE v_storage TINYINT DEFAULT 0;
  CALL txmq_i_check_name(p_topic);
  SELECT 1, max_payload_bytes, dedup_window_us, partitions, placed, storage
    INTO v_found, p_max_payload, p_dedup_window, p_partitions, p_placed, v_storage
    FROM txmq_topics WHERE name = p_topic LOCK IN SHARE MODE;
  IF v_found = 0 THEN
    CALL txmq_i_raise(CONCAT('no such topic ''', p_topic, ''''));
  END IF;
  CALL txmq_i_not_shared(p_topic, v_storage);
  SELECT COUNT(*), MIN(number) INTO p_groups, p_allocator FROM txmq_groups WHERE topic = p_topic;
END
$$
-- An unkeyed send's partition: one of those placed on this server, at random (the library
-- takes them in turn).
DROP PROCEDURE IF EXISTS txmq_i_unkeyed_partition
$$
CREATE PROCEDURE txmq_i_unkeyed_partition(IN p_partitions INT UNSIGNED, IN p_placed BIGINT UNSIGNED,
                                          OUT p_partition INT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_here INT DEFAULT 0;
  DECLARE v_pick INT;
  DECLARE p INT DEFAULT 0;
  SET p_partition = -1;
  IF p_placed IS NULL THEN
    SET p_partition = FLOOR(RAND() * p_partitions);
  ELSE
    WHILE p < p_partitions DO
      IF (p_placed >> p) & 1 = 1 THEN
        SET v_here = v_here + 1;
      END IF;
      SET p = p + 1;
    END WHILE;
    SET v_pick = FLOOR(RAND() * v_here), p = 0;
    WHILE p < p_partitions AND p_partition < 0 DO
      IF (p_placed >> p) & 1 = 1 THEN
        IF v_pick = 0 THEN
          SET p_partition = p;
        END IF;
        SET v_pick = v_pick - 1;
      END IF;
      SET p = p + 1;
    END WHILE;
  END IF;
END
$$
DROP PROCEDURE IF EXISTS txmq_i_not_placed
$$
CREATE PROCEDURE txmq_i_not_placed(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_partition INT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  CALL txmq_i_raise(CONCAT('partition ', GREATEST(p_partition, 0), ' of topic ''', p_topic,
                           ''' is not on this server (send through the server that holds it)'));
END
$$
-- The messages of one call, staged in a temporary table of the session: `n` their order,
-- `p` their partition, `k` their row in the partition's INSERT, `id` their message id.
DROP PROCEDURE IF EXISTS txmq_i_stage
$$
CREATE PROCEDURE txmq_i_stage()
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_staged (
    n BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    p INT NOT NULL DEFAULT 0,
    k INT UNSIGNED NULL,
    payload LONGBLOB NULL,
    msg_key VARBINARY(1024) NULL,
    dedup_key VARBINARY(1024) NULL,
    delay_us BIGINT NOT NULL DEFAULT 0,
    options LONGTEXT CHARACTER SET utf8mb4 NULL,
    attributes_json LONGTEXT CHARACTER SET utf8mb4 NULL,
    attributes LONGBLOB NULL,
    attributes_size BIGINT UNSIGNED NOT NULL DEFAULT 0,
    tenant VARBINARY(1024) NULL,
    fair_seq BIGINT UNSIGNED NOT NULL DEFAULT 0,
    fresh TINYINT NOT NULL DEFAULT 1,
    chunk INT UNSIGNED NULL,
    id BIGINT UNSIGNED NULL,
    KEY (p, k)) ENGINE=InnoDB;
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_order (
    n BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    k INT UNSIGNED NOT NULL,
    chunk INT UNSIGNED NOT NULL) ENGINE=InnoDB;
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_keys (
    msg_key VARBINARY(255) NOT NULL PRIMARY KEY,
    cnt INT UNSIGNED NOT NULL,
    first_id BIGINT UNSIGNED NOT NULL,
    was_new TINYINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
  DELETE FROM txmq_i_staged;
  DELETE FROM txmq_i_keys;
  DELETE FROM txmq_i_order;
END
$$
-- Checks the staged messages against the topic (check_message in send.cc) and encodes their
-- attributes; raises before anything is written.
DROP PROCEDURE IF EXISTS txmq_i_check_staged
$$
CREATE PROCEDURE txmq_i_check_staged(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_max_payload BIGINT UNSIGNED,
                                     IN p_batch TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_n INT UNSIGNED;
  DECLARE v_json LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_blob LONGBLOB;
  DECLARE v_size BIGINT UNSIGNED;
  DECLARE v_where VARCHAR(64) CHARACTER SET utf8mb4;
  DECLARE v_bad INT UNSIGNED;
  DECLARE v_bad_size BIGINT UNSIGNED;
  DECLARE with_attributes CURSOR FOR
    SELECT n, attributes_json FROM txmq_i_staged WHERE attributes_json IS NOT NULL ORDER BY n;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  OPEN with_attributes;
  encode: LOOP
    FETCH with_attributes INTO v_n, v_json;
    IF v_done = 1 THEN
      LEAVE encode;
    END IF;
    SET v_where = IF(p_batch = 1, CONCAT('message ', v_n, ' of the batch: '), '');
    CALL txmq_i_encode_attributes(v_json, v_where, v_blob, v_size);
    UPDATE txmq_i_staged SET attributes = v_blob, attributes_size = v_size WHERE n = v_n;
  END LOOP;
  CLOSE with_attributes;
  SET v_done = 0;
  SET v_bad = NULL;
  SELECT n INTO v_bad FROM txmq_i_staged WHERE payload IS NULL ORDER BY n LIMIT 1;
  IF v_bad IS NOT NULL THEN
    CALL txmq_i_raise(CONCAT(IF(p_batch = 1, CONCAT('message ', v_bad, ' of the batch: '), ''),
                             'needs a payload (a string, or an object with "payload" or "payload_base64")'));
  END IF;
  SELECT n, LENGTH(payload) + attributes_size INTO v_bad, v_bad_size FROM txmq_i_staged
    WHERE LENGTH(payload) + attributes_size > p_max_payload ORDER BY n LIMIT 1;
  IF v_bad IS NOT NULL THEN
    CALL txmq_i_raise(CONCAT(IF(p_batch = 1, CONCAT('message ', v_bad, ' of the batch: '), ''),
                             'payload of ', v_bad_size, ' bytes is over topic ''', p_topic,
                             '''''s limit of ', p_max_payload, ' bytes'));
  END IF;
  SELECT n INTO v_bad FROM txmq_i_staged WHERE LENGTH(msg_key) > 255 ORDER BY n LIMIT 1;
  IF v_bad IS NOT NULL THEN
    CALL txmq_i_raise(CONCAT(IF(p_batch = 1, CONCAT('message ', v_bad, ' of the batch: '), ''),
                             'key is over the limit of 255 bytes'));
  END IF;
  SELECT n INTO v_bad FROM txmq_i_staged
    WHERE dedup_key IS NOT NULL AND (LENGTH(dedup_key) = 0 OR LENGTH(dedup_key) > 255) ORDER BY n LIMIT 1;
  IF v_bad IS NOT NULL THEN
    CALL txmq_i_raise(CONCAT(IF(p_batch = 1, CONCAT('message ', v_bad, ' of the batch: '), ''),
                             'dedup key must be 1 to 255 bytes'));
  END IF;
  SELECT n INTO v_bad FROM txmq_i_staged
    WHERE delay_us < 0 OR delay_us > 31622400000000 ORDER BY n LIMIT 1;
  IF v_bad IS NOT NULL THEN
    CALL txmq_i_raise(CONCAT(IF(p_batch = 1, CONCAT('message ', v_bad, ' of the batch: '), ''),
                             'delay must be from 0 to 366 days'));
  END IF;
END
$$
-- Refuses a field an options object (or a batch's message object) does not have: a misspelt
-- "dedup_key" must not send a message without one.
DROP PROCEDURE IF EXISTS txmq_i_check_fields
$$
CREATE PROCEDURE txmq_i_check_fields(IN p_object LONGTEXT CHARACTER SET utf8mb4, IN p_where VARCHAR(64) CHARACTER SET utf8mb4, IN p_message TINYINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_field VARCHAR(64) CHARACTER SET utf8mb4 DEFAULT NULL;
  -- Compared as bytes: "Key" is not "key" (JSON_EXTRACT would not find it).
  SELECT LEFT(j.name, 64) INTO v_field
    FROM JSON_TABLE(JSON_KEYS(p_object), '$[*]'
                    COLUMNS (name VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j
    WHERE BINARY j.name NOT IN ('key', 'dedup_key', 'delay_ms', 'attributes')
      AND (p_message = 0 OR BINARY j.name NOT IN ('payload', 'payload_base64'))
    LIMIT 1;
  IF v_field IS NOT NULL THEN
    CALL txmq_i_raise(CONCAT(p_where, 'unknown field "', v_field, '" (', IF(p_message = 1,
      'a message has payload or payload_base64, key, dedup_key, delay_ms, attributes',
      'options are key, dedup_key, delay_ms, attributes'), ')'));
  END IF;
END
$$
-- Parses one message's options (a JSON object or NULL) into the staged row n.
DROP PROCEDURE IF EXISTS txmq_i_stage_options
$$
CREATE PROCEDURE txmq_i_stage_options(IN p_n INT UNSIGNED, IN p_options LONGTEXT CHARACTER SET utf8mb4,
                                      IN p_where VARCHAR(64) CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_delay LONGTEXT CHARACTER SET utf8mb4;
  IF p_options IS NOT NULL AND COALESCE(JSON_TYPE(p_options), 'NULL') <> 'NULL' THEN
    IF JSON_TYPE(p_options) <> 'OBJECT' THEN
      CALL txmq_i_raise(CONCAT(p_where, 'options must be a JSON object or NULL'));
    END IF;
    CALL txmq_i_check_fields(p_options, p_where, p_where <> '');
    SET v_delay = JSON_EXTRACT(p_options, '$.delay_ms');
    IF COALESCE(JSON_TYPE(v_delay), 'NULL') NOT IN ('INTEGER', 'UNSIGNED INTEGER', 'NULL') THEN
      CALL txmq_i_raise(CONCAT(p_where, 'delay_ms must be a whole number of milliseconds'));
    END IF;
    IF COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.key')), 'NULL') NOT IN ('STRING', 'NULL')
       OR COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.dedup_key')), 'NULL') NOT IN ('STRING', 'NULL') THEN
      CALL txmq_i_raise(CONCAT(p_where, 'key and dedup_key must be strings'));
    END IF;
    UPDATE txmq_i_staged SET
      msg_key = IF(JSON_TYPE(JSON_EXTRACT(p_options, '$.key')) = 'STRING',
                   CAST(JSON_UNQUOTE(JSON_EXTRACT(p_options, '$.key')) AS BINARY), NULL),
      dedup_key = IF(JSON_TYPE(JSON_EXTRACT(p_options, '$.dedup_key')) = 'STRING',
                     CAST(JSON_UNQUOTE(JSON_EXTRACT(p_options, '$.dedup_key')) AS BINARY), NULL),
      delay_us = IF(COALESCE(JSON_TYPE(v_delay), 'NULL') = 'NULL', 0,
                    IF(CAST(v_delay AS DECIMAL(30, 0)) > 31622400000 OR CAST(v_delay AS DECIMAL(30, 0)) < 0,
                       -1, CAST(v_delay AS SIGNED) * 1000)),
      attributes_json = IF(COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.attributes')), 'NULL') = 'NULL',
                           NULL, JSON_EXTRACT(p_options, '$.attributes'))
    WHERE n = p_n;
  END IF;
END
$$
-- The partitions of the staged messages' keys (txmq_i_key_partition), once for each key.
DROP PROCEDURE IF EXISTS txmq_i_place_keys
$$
CREATE PROCEDURE txmq_i_place_keys(IN p_partitions INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_key VARBINARY(255);
  DECLARE v_p INT;
  DECLARE each_key CURSOR FOR
    SELECT DISTINCT msg_key FROM txmq_i_staged WHERE msg_key IS NOT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_key_places (
    msg_key VARBINARY(255) NOT NULL PRIMARY KEY,
    p INT NOT NULL) ENGINE=InnoDB;
  DELETE FROM txmq_i_key_places;
  OPEN each_key;
  place: LOOP
    FETCH each_key INTO v_key;
    IF v_done = 1 THEN
      LEAVE place;
    END IF;
    CALL txmq_i_key_partition(v_key, p_partitions, v_p);
    INSERT INTO txmq_i_key_places (msg_key, p) VALUES (v_key, v_p);
  END LOOP;
  CLOSE each_key;
  UPDATE txmq_i_staged AS m JOIN txmq_i_key_places AS k ON k.msg_key = m.msg_key SET m.p = k.p;
END
$$
-- Writes the staged, checked messages (send.cc: insert_messages): per partition, dedup keys
-- first (insert_deduplicated), then one multi-row INSERT into the allocating group's queue
-- table (ids in one block, first + i * auto_increment_increment, on MariaDB and MySQL alike:
-- a multi-row VALUES is a "simple insert"), copies into every other group's table, keyed FIFO
-- per group (order_keyed). Fills txmq_i_staged.id.
-- A fair topic's places (send.cc, fair_places: start-time fair queueing, the head of the line
-- as its virtual time) for the staged messages of partition p_partition that have a tenant: the
-- later of the tenant's last place in the table (or among those staged before it) plus one and
-- the lowest place taken there. One statement per such message: only txmq_sqs_send stages
-- tenants, one message a call.
DROP PROCEDURE IF EXISTS txmq_i_fair_places
$$
CREATE PROCEDURE txmq_i_fair_places(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                                    IN p_allocator INT UNSIGNED, IN p_partition INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_n BIGINT UNSIGNED;
  DECLARE v_tenant VARBINARY(1024);
  DECLARE v_staged BIGINT UNSIGNED;
  DECLARE tenants CURSOR FOR
    SELECT n, tenant FROM txmq_i_staged WHERE p = p_partition AND fresh = 1 AND tenant IS NOT NULL ORDER BY n;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  OPEN tenants;
  each_message: LOOP
    FETCH tenants INTO v_n, v_tenant;
    IF v_done = 1 THEN
      LEAVE each_message;
    END IF;
    SET @txmq_sql = CONCAT('SELECT GREATEST(IFNULL((SELECT MIN(fair_seq) FROM ',
      CONCAT('`txmq_q_', p_topic, IF(p_allocator = 0 AND p_partition = 0, '', CONCAT('$', p_allocator, '_', p_partition)), '`'),
      ' WHERE fair_seq > 0), 1), IFNULL((SELECT MAX(fair_seq) + 1 FROM ',
      CONCAT('`txmq_q_', p_topic, IF(p_allocator = 0 AND p_partition = 0, '', CONCAT('$', p_allocator, '_', p_partition)), '`'),
      ' WHERE tenant = ?), 0)) INTO @txmq_r');
    SET @txmq_a = v_tenant;
    CALL txmq_i_exec(1);
    SET v_staged = NULL;
    SELECT MAX(fair_seq) + 1 INTO v_staged FROM txmq_i_staged
      WHERE p = p_partition AND tenant = v_tenant AND fair_seq > 0;
    UPDATE txmq_i_staged SET fair_seq = GREATEST(@txmq_r, IFNULL(v_staged, 0)) WHERE n = v_n;
  END LOOP;
  CLOSE tenants;
  SET @txmq_r = NULL, @txmq_a = NULL;
END
$$
DROP PROCEDURE IF EXISTS txmq_i_write_staged
$$
CREATE PROCEDURE txmq_i_write_staged(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_partitions INT UNSIGNED,
                                     IN p_placed BIGINT UNSIGNED, IN p_dedup_window BIGINT UNSIGNED,
                                     IN p_allocator INT UNSIGNED, IN p_groups INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_spread INT DEFAULT -1;
  DECLARE v_p INT;
  DECLARE v_bad INT;
  DECLARE v_rows INT;
  DECLARE v_first BIGINT UNSIGNED;
  DECLARE v_step BIGINT UNSIGNED DEFAULT @@SESSION.auto_increment_increment;
  DECLARE v_values LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_gcl BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  DECLARE v_dedup TINYINT DEFAULT 0;
  DECLARE v_chunk BIGINT;
  DECLARE v_next BIGINT;
  DECLARE v_k0 INT UNSIGNED;
  DECLARE v_fair TINYINT DEFAULT 0;
  DECLARE partitions_used CURSOR FOR SELECT DISTINCT p FROM txmq_i_staged ORDER BY p;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

  -- Keyed messages go to their key's partition, the others of the call to one partition.
  IF p_partitions > 1 AND EXISTS (SELECT 1 FROM txmq_i_staged WHERE msg_key IS NOT NULL) THEN
    CALL txmq_i_place_keys(p_partitions);
  END IF;
  IF EXISTS (SELECT 1 FROM txmq_i_staged WHERE msg_key IS NULL) THEN
    CALL txmq_i_unkeyed_partition(p_partitions, p_placed, v_spread);
    IF v_spread < 0 THEN
      CALL txmq_i_not_placed(p_topic, 0);
    END IF;
    UPDATE txmq_i_staged SET p = v_spread WHERE msg_key IS NULL;
  END IF;
  IF p_placed IS NOT NULL THEN
    SET v_bad = NULL;
    SELECT p INTO v_bad FROM txmq_i_staged WHERE (p_placed >> p) & 1 = 0 ORDER BY n LIMIT 1;
    IF v_bad IS NOT NULL THEN
      CALL txmq_i_not_placed(p_topic, v_bad);
    END IF;
  END IF;

  SET SESSION group_concat_max_len = 1073741824;
  SET v_dedup = EXISTS (SELECT 1 FROM txmq_i_staged WHERE dedup_key IS NOT NULL);
  OPEN partitions_used;
  each_partition: LOOP
    FETCH partitions_used INTO v_p;
    IF v_done = 1 THEN
      LEAVE each_partition;
    END IF;
    IF v_dedup = 1 AND EXISTS (SELECT 1 FROM txmq_i_staged WHERE p = v_p AND dedup_key IS NOT NULL) THEN
      -- 1. every distinct key of the partition in key order: new, renewed past its window
      --    (message_id 0), or kept as it is; the upsert locks the key's row.
      SET @txmq_sql = CONCAT('INSERT INTO `txmq_dd_', p_topic, '` (dedup_key, message_id, expires_at) ',
        'SELECT DISTINCT dedup_key, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND FROM txmq_i_staged ',
        'WHERE p = ? AND dedup_key IS NOT NULL ORDER BY dedup_key ',
        'ON DUPLICATE KEY UPDATE message_id = IF(expires_at <= UTC_TIMESTAMP(6), 0, message_id), ',
        'expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)');
      SET @txmq_a = p_dedup_window, @txmq_b = v_p;
      CALL txmq_i_exec(2);
      -- 2. keys that have a message: its id, not sent again; 3. of a new key, the first message
      --    is sent, the later ones get its id (below).
      SET @txmq_sql = CONCAT('UPDATE txmq_i_staged AS b JOIN `txmq_dd_', p_topic, '` AS d ',
        'ON d.dedup_key = b.dedup_key SET b.fresh = 0, b.id = d.message_id ',
        'WHERE b.p = ? AND d.message_id <> 0');
      SET @txmq_a = v_p;
      CALL txmq_i_exec(1);
      -- (the later messages of a new key: marked one by one, as a statement may not read a
      -- temporary table twice)
      CALL txmq_i_mark_repeats(v_p);
    END IF;

    -- A fair queue's tenants (txmq_sqs_send: MessageGroupId on a standard queue): their places.
    SET v_fair = EXISTS (SELECT 1 FROM txmq_i_staged WHERE p = v_p AND fresh = 1 AND tenant IS NOT NULL);
    IF v_fair = 1 THEN
      CALL txmq_i_fair_places(p_topic, p_allocator, v_p);
    END IF;
    -- The partition's fresh messages, numbered in send order (k), cut into statements of at
    -- most a quarter of max_allowed_packet (payloads travel in hex: twice their size).
    DELETE FROM txmq_i_order;
    INSERT INTO txmq_i_order (n, k, chunk)
      SELECT n, ROW_NUMBER() OVER (ORDER BY n),
             FLOOR((SUM(LENGTH(payload) + IFNULL(LENGTH(attributes), 0) + IFNULL(LENGTH(msg_key), 0) + 64)
                    OVER (ORDER BY n) - 1) / GREATEST(@@max_allowed_packet DIV 4 - 1024, 65536))
      FROM txmq_i_staged WHERE p = v_p AND fresh = 1;
    UPDATE txmq_i_staged AS b JOIN txmq_i_order AS o ON o.n = b.n SET b.k = o.k, b.chunk = o.chunk;
    SET v_chunk = -1;
    each_chunk: LOOP
      SET v_next = NULL;
      SELECT MIN(chunk) INTO v_next FROM txmq_i_order WHERE chunk > v_chunk;
      IF v_next IS NULL THEN
        LEAVE each_chunk;
      END IF;
      SET v_chunk = v_next;
      SELECT COUNT(*), MIN(k) INTO v_rows, v_k0 FROM txmq_i_order WHERE chunk = v_chunk;
      SELECT GROUP_CONCAT('(UTC_TIMESTAMP(6)',
                          IF(delay_us = 0, '', CONCAT(' + INTERVAL ', delay_us, ' MICROSECOND')),
                          ', UTC_TIMESTAMP(6), ', IF(msg_key IS NULL, 'NULL', CONCAT('X''', HEX(msg_key), '''')),
                          ', X''', HEX(payload), ''', ',
                          IF(attributes IS NULL, 'NULL', CONCAT('X''', HEX(attributes), '''')),
                          IF(v_fair = 0, '', CONCAT(', ', IF(tenant IS NULL, 'NULL', CONCAT('X''', HEX(tenant), '''')),
                                                    ', ', fair_seq)), ')'
                          ORDER BY k SEPARATOR ',')
        INTO v_values FROM txmq_i_staged WHERE p = v_p AND fresh = 1 AND chunk = v_chunk;
      SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_q_', p_topic, IF(p_allocator = 0 AND v_p = 0, '', CONCAT('$', p_allocator, '_', v_p)), '`'),
                             ' (visible_at, enqueued_at, msg_key, payload, attributes',
                             IF(v_fair = 1, ', tenant, fair_seq', ''), ') VALUES ', v_values);
      SET v_values = NULL;
      IF @txmq_sql IS NULL THEN
        CALL txmq_i_raise('a message is too large for the server''s max_allowed_packet');
      END IF;
      CALL txmq_i_exec(0);
      SET v_first = LAST_INSERT_ID();
      UPDATE txmq_i_staged SET id = v_first + (k - v_k0) * v_step
        WHERE p = v_p AND fresh = 1 AND chunk = v_chunk;
      -- Copies for the other groups.
      IF p_groups > 1 THEN
        CALL txmq_i_copy_to_groups(p_topic, p_allocator, v_p, v_first, v_first + (v_rows - 1) * v_step, v_step, v_fair);
      END IF;
    END LOOP;
    -- Keyed FIFO in each group.
    IF EXISTS (SELECT 1 FROM txmq_i_staged WHERE p = v_p AND fresh = 1 AND msg_key IS NOT NULL) THEN
      CALL txmq_i_order_keyed(p_topic, v_p);
    END IF;
    IF v_dedup = 1 AND EXISTS (SELECT 1 FROM txmq_i_staged WHERE p = v_p AND dedup_key IS NOT NULL) THEN
      -- 4. the new messages' ids into their keys; then every message with a key has its id.
      SET @txmq_sql = CONCAT('INSERT INTO `txmq_dd_', p_topic, '` (dedup_key, message_id, expires_at) ',
        'SELECT dedup_key, id, UTC_TIMESTAMP(6) FROM txmq_i_staged WHERE p = ? AND fresh = 1 ',
        'AND dedup_key IS NOT NULL ORDER BY dedup_key ',
        'ON DUPLICATE KEY UPDATE message_id = VALUES(message_id)');
      SET @txmq_a = v_p;
      CALL txmq_i_exec(1);
      SET @txmq_sql = CONCAT('UPDATE txmq_i_staged AS b JOIN `txmq_dd_', p_topic, '` AS d ',
        'ON d.dedup_key = b.dedup_key SET b.id = d.message_id WHERE b.p = ? AND b.id IS NULL');
      SET @txmq_a = v_p;
      CALL txmq_i_exec(1);
    END IF;
  END LOOP;
  CLOSE partitions_used;
  SET SESSION group_concat_max_len = v_gcl;
  SET @txmq_sql = NULL, @txmq_a = NULL, @txmq_b = NULL;
END
$$
-- The later messages of a dedup key that is new in this call: not sent, they get the id of the
-- first one (set from the key's row after the insert).
DROP PROCEDURE IF EXISTS txmq_i_mark_repeats
$$
CREATE PROCEDURE txmq_i_mark_repeats(IN p_partition INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_n INT UNSIGNED;
  DECLARE v_key VARBINARY(1024);
  DECLARE v_last VARBINARY(1024) DEFAULT NULL;
  DECLARE keyed CURSOR FOR
    SELECT n, dedup_key FROM txmq_i_staged WHERE p = p_partition AND fresh = 1
      AND dedup_key IS NOT NULL ORDER BY dedup_key, n;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  OPEN keyed;
  mark: LOOP
    FETCH keyed INTO v_n, v_key;
    IF v_done = 1 THEN
      LEAVE mark;
    END IF;
    IF v_last IS NOT NULL AND v_key = v_last THEN
      UPDATE txmq_i_staged SET fresh = 0 WHERE n = v_n;
    END IF;
    SET v_last = v_key;
  END LOOP;
  CLOSE keyed;
END
$$
-- Copies the messages just inserted into the allocating group's partition table (ids first to
-- last, every step) into every other group's (copy_to_group).
DROP PROCEDURE IF EXISTS txmq_i_copy_to_groups
$$
CREATE PROCEDURE txmq_i_copy_to_groups(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_allocator INT UNSIGNED,
                                       IN p_partition INT, IN p_first BIGINT UNSIGNED,
                                       IN p_last BIGINT UNSIGNED, IN p_step BIGINT UNSIGNED,
                                       IN p_fair TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE other_groups CURSOR FOR
    SELECT number FROM txmq_groups WHERE topic = p_topic AND number <> p_allocator ORDER BY number;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  OPEN other_groups;
  copy: LOOP
    FETCH other_groups INTO v_group;
    IF v_done = 1 THEN
      LEAVE copy;
    END IF;
    SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_q_', p_topic, IF(v_group = 0 AND p_partition = 0, '', CONCAT('$', v_group, '_', p_partition)), '`'),
      ' (id, visible_at, enqueued_at, msg_key, payload, attributes', IF(p_fair = 1, ', tenant, fair_seq', ''),
      ') SELECT id, visible_at, enqueued_at, msg_key, payload, attributes', IF(p_fair = 1, ', tenant, fair_seq', ''),
      ' FROM ', CONCAT('`txmq_q_', p_topic, IF(p_allocator = 0 AND p_partition = 0, '', CONCAT('$', p_allocator, '_', p_partition)), '`'),
      ' WHERE id BETWEEN ? AND ? AND (id - ?) MOD ? = 0 ORDER BY id');
    SET @txmq_a = p_first, @txmq_b = p_last, @txmq_c = p_first, @txmq_d = p_step;
    CALL txmq_i_exec(4);
  END LOOP;
  CLOSE other_groups;
END
$$
-- Keyed FIFO for the fresh keyed messages of a partition, in every group (keys.cc,
-- order_keyed): a new key row takes the first message as its head, an existing one parks them
-- all; parked in id order.
DROP PROCEDURE IF EXISTS txmq_i_order_keyed
$$
CREATE PROCEDURE txmq_i_order_keyed(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_partition INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE v_ids LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_gcl BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  DECLARE each_group CURSOR FOR
    SELECT number FROM txmq_groups WHERE topic = p_topic ORDER BY number;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DELETE FROM txmq_i_keys;
  INSERT INTO txmq_i_keys (msg_key, cnt, first_id)
    SELECT msg_key, COUNT(*), MIN(id) FROM txmq_i_staged
    WHERE p = p_partition AND fresh = 1 AND msg_key IS NOT NULL GROUP BY msg_key;
  SET SESSION group_concat_max_len = 1073741824;
  OPEN each_group;
  order_group: LOOP
    FETCH each_group INTO v_group;
    IF v_done = 1 THEN
      LEAVE order_group;
    END IF;
    SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_k_', p_topic, IF(v_group = 0 AND p_partition = 0, '', CONCAT('$', v_group, '_', p_partition)), '`'),
      ' (msg_key, heads, parked) SELECT msg_key, 1, cnt - 1 FROM txmq_i_keys ORDER BY msg_key ',
      'ON DUPLICATE KEY UPDATE parked = parked + VALUES(heads) + VALUES(parked)');
    CALL txmq_i_exec(0);
    -- A row that was new has exactly cnt - 1 parked (an existing one at least cnt).
    SET @txmq_sql = CONCAT('UPDATE txmq_i_keys AS t JOIN ', CONCAT('`txmq_k_', p_topic, IF(v_group = 0 AND p_partition = 0, '', CONCAT('$', v_group, '_', p_partition)), '`'),
      ' AS k ON k.msg_key = t.msg_key SET t.was_new = (k.parked = t.cnt - 1)');
    CALL txmq_i_exec(0);
    SELECT GROUP_CONCAT(b.id ORDER BY b.id) INTO v_ids
      FROM txmq_i_staged AS b JOIN txmq_i_keys AS t ON t.msg_key = b.msg_key
      WHERE b.p = p_partition AND b.fresh = 1 AND NOT (t.was_new = 1 AND b.id = t.first_id);
    IF v_ids IS NOT NULL THEN
      SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_kp_', p_topic, IF(v_group = 0 AND p_partition = 0, '', CONCAT('$', v_group, '_', p_partition)), '`'),
        ' (msg_key, id, visible_at, enqueued_at, payload, attributes) SELECT msg_key, id, visible_at, ',
        'enqueued_at, payload, attributes FROM ', CONCAT('`txmq_q_', p_topic, IF(v_group = 0 AND p_partition = 0, '', CONCAT('$', v_group, '_', p_partition)), '`'),
        ' WHERE id IN (', v_ids, ') ORDER BY id');
      CALL txmq_i_exec(0);
      SET @txmq_sql = CONCAT('DELETE FROM ', CONCAT('`txmq_q_', p_topic, IF(v_group = 0 AND p_partition = 0, '', CONCAT('$', v_group, '_', p_partition)), '`'),
                             ' WHERE id IN (', v_ids, ')');
      CALL txmq_i_exec(0);
    END IF;
  END LOOP;
  CLOSE each_group;
  SET SESSION group_concat_max_len = v_gcl;
END
$$
-- Writes what txmq_i_staged holds into the topic inside the transaction open, and wakes the
-- topic's waiting consumers (no result set). p_check = 0 for dead letters moved into a
-- dead-letter topic (move_to_dead_letters: not checked against the target's limits).
DROP PROCEDURE IF EXISTS txmq_i_send_core
$$
CREATE PROCEDURE txmq_i_send_core(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_batch TINYINT, IN p_check TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_max_payload BIGINT UNSIGNED;
  DECLARE v_dedup_window BIGINT UNSIGNED;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_placed BIGINT UNSIGNED;
  DECLARE v_groups INT;
  DECLARE v_allocator INT UNSIGNED;
  DECLARE v_claimable INT;
  CALL txmq_i_topic(p_topic, v_max_payload, v_dedup_window, v_partitions, v_placed, v_groups,
                    v_allocator);
  IF p_check = 1 THEN
    CALL txmq_i_check_staged(p_topic, v_max_payload, p_batch);
  END IF;
  CALL txmq_i_write_staged(p_topic, v_partitions, v_placed, v_dedup_window, v_allocator, v_groups);
  SELECT COUNT(*) INTO v_claimable FROM txmq_i_staged WHERE delay_us = 0;
  CALL txmq_i_wake_groups(p_topic, v_claimable);
END
$$
-- txmq_i_send_core in the caller's transaction (to a savepoint) or in one of its own, then the
-- ids as a result set.
DROP PROCEDURE IF EXISTS txmq_i_send_staged
$$
CREATE PROCEDURE txmq_i_send_staged(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_batch TINYINT,
                                    IN p_result TINYINT, IN p_md5_attributes VARCHAR(32) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_own TINYINT DEFAULT 0;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    CALL txmq_i_undo(v_own);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  CALL txmq_i_in_transaction(v_in);
  IF v_in = 1 THEN
    SAVEPOINT txmq_call;
  ELSE
    SET v_own = 1;
    START TRANSACTION;
  END IF;
  CALL txmq_i_send_core(p_topic, p_batch, 1);
  CALL txmq_i_count(p_topic, '', 'sent', (SELECT COUNT(*) FROM txmq_i_staged));
  IF v_own = 1 THEN
    -- Expired dedup keys, as the library's sends purge them (send.cc, purge_dedup): only in a
    -- transaction of the call's own (the library: not on an application's connection, whose
    -- REPEATABLE READ would gap-lock the end of the expiry index until it commits), now and
    -- then (a tenth of such calls here, where the library counts 10 s a topic).
    IF RAND() < 0.1 AND EXISTS (SELECT 1 FROM txmq_i_staged WHERE dedup_key IS NOT NULL) THEN
      SET @txmq_sql = CONCAT('DELETE FROM `txmq_dd_', p_topic, '` WHERE expires_at < ',
        'UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE ORDER BY expires_at LIMIT 500');
      CALL txmq_i_exec(0);
      SET @txmq_sql = NULL;
    END IF;
    COMMIT;
  END IF;
  IF p_result = 0 THEN
    SELECT id FROM txmq_i_staged ORDER BY n;
  ELSE
    -- txmq_sqs_send's: what SendMessage answers (send_actions.cc), MessageId as messages.cc
    -- names it; p_result 2: a FIFO queue's, with its SequenceNumber.
    SELECT id, CONCAT_WS('-', SUBSTRING(h, 1, 8), SUBSTRING(h, 9, 4), SUBSTRING(h, 13, 4),
                         SUBSTRING(h, 17, 4), SUBSTRING(h, 21, 12)) AS MessageId,
           IF(p_result = 2, LPAD(id, 20, '0'), NULL) AS SequenceNumber,
           MD5(payload) AS MD5OfMessageBody, p_md5_attributes AS MD5OfMessageAttributes
      FROM (SELECT id, payload, SHA2(CONCAT(p_topic, '/', id), 256) AS h FROM txmq_i_staged) AS m;
  END IF;
END
$$
DROP PROCEDURE IF EXISTS txmq_i_wake_groups
$$
CREATE PROCEDURE txmq_i_wake_groups(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_count INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE v_channel VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE each_group CURSOR FOR SELECT number FROM txmq_groups WHERE topic = p_topic ORDER BY number;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  -- Looked up by channel (txmq_waiters' hash index on topic): a scan of the MEMORY table reads
  -- every row it ever had since the server started (deleted ones stay as slots), a thousand
  -- after a burst of waiters.
  IF p_count > 0 THEN
    OPEN each_group;
    wake: LOOP
      FETCH each_group INTO v_group;
      IF v_done = 1 THEN
        LEAVE wake;
      END IF;
      SET v_channel = IF(v_group = 0, p_topic, CONCAT(p_topic, '$', v_group));
      IF EXISTS (SELECT 1 FROM txmq_waiters WHERE topic = v_channel) THEN
        CALL txmq_i_wake(v_channel, p_count);
      END IF;
    END LOOP;
    CLOSE each_group;
  END IF;
END
$$
-- ---------------------------------------------------------------------------------------------
-- Public: sends.
-- ---------------------------------------------------------------------------------------------
-- One message; options NULL or {"key", "dedup_key", "delay_ms", "attributes"}. One row: id.
-- A message without key or dedup key to a topic with one group takes one INSERT (the library's
-- single send, in the caller's transaction); the others the batch's path.
DROP PROCEDURE IF EXISTS txmq_send
$$
CREATE PROCEDURE txmq_send(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4, IN p_payload LONGBLOB, IN p_options LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_own TINYINT DEFAULT 0;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_max_payload BIGINT UNSIGNED;
  DECLARE v_dedup_window BIGINT UNSIGNED;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_placed BIGINT UNSIGNED;
  DECLARE v_groups INT;
  DECLARE v_allocator INT UNSIGNED;
  DECLARE v_p INT;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE v_channel VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    CALL txmq_i_undo(v_own);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  IF p_options IS NOT NULL AND NOT JSON_VALID(p_options) THEN
    CALL txmq_i_raise('options must be a JSON object or NULL (malformed JSON)');
  END IF;
  IF p_payload IS NULL THEN
    CALL txmq_i_raise('payload must not be NULL');
  END IF;
  IF JSON_TYPE(p_options) = 'OBJECT' THEN
    CALL txmq_i_check_fields(p_options, '', 0);
  END IF;
  IF p_options IS NULL OR (JSON_TYPE(p_options) = 'OBJECT'
                           AND JSON_EXTRACT(p_options, '$.key') IS NULL
                           AND JSON_EXTRACT(p_options, '$.dedup_key') IS NULL
                           AND JSON_EXTRACT(p_options, '$.delay_ms') IS NULL
                           AND JSON_EXTRACT(p_options, '$.attributes') IS NULL) THEN
    -- The library's single send, inlined (every nested CALL costs the server 10-20 us):
    -- inside the caller's transaction or one of its own, the topic's row in share mode (the
    -- fence against group changes) with its group count in the same statement, and the
    -- INSERT built from the name as stored, so that the name needs no check of its own unless
    -- no topic has it.
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
      SET v_own = 1;
      START TRANSACTION;
    END IF;
    SELECT name, max_payload_bytes, partitions, placed,
           (SELECT COUNT(*) FROM txmq_groups WHERE topic = t.name),
           (SELECT MIN(number) FROM txmq_groups WHERE topic = t.name)
      INTO v_name, v_max_payload, v_partitions, v_placed, v_groups, v_allocator
      FROM txmq_topics AS t
     WHERE t.name = IF(CHAR_LENGTH(p_topic) = LENGTH(p_topic) AND CHAR_LENGTH(p_topic) <= 64,
                       CONVERT(p_topic USING ascii), '?') COLLATE ascii_bin
      LOCK IN SHARE MODE;
    IF v_name IS NULL OR BINARY v_name <> BINARY p_topic THEN
      CALL txmq_i_check_name(p_topic);
      CALL txmq_i_raise(CONCAT('no such topic ''', p_topic, ''''));
    END IF;
    IF v_groups = 1 THEN
      IF LENGTH(p_payload) > v_max_payload THEN
        CALL txmq_i_raise(CONCAT('payload of ', LENGTH(p_payload), ' bytes is over topic ''',
                                 v_name, '''''s limit of ', v_max_payload, ' bytes'));
      END IF;
      IF v_partitions = 1 AND v_placed IS NULL THEN
        SET v_p = 0;
      ELSE
        CALL txmq_i_unkeyed_partition(v_partitions, v_placed, v_p);
        IF v_p < 0 THEN
          CALL txmq_i_not_placed(v_name, 0);
        END IF;
      END IF;
      SET @txmq_sql = CONCAT('INSERT INTO `txmq_q_', v_name,
        IF(v_allocator = 0 AND v_p = 0, '', CONCAT('$', v_allocator, '_', v_p)),
        '` (visible_at, enqueued_at, msg_key, payload) VALUES (UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?)');
      SET @txmq_a = p_payload;
      PREPARE txmq_statement FROM @txmq_sql;
      EXECUTE txmq_statement USING @txmq_a;
      DEALLOCATE PREPARE txmq_statement;
      SET v_id = LAST_INSERT_ID(), @txmq_a = NULL, @txmq_sql = NULL;
      INSERT INTO txmq_sql_counts (topic, grp, metric, conn, value)
        VALUES (v_name, '', 'sent', CONNECTION_ID(), 1) ON DUPLICATE KEY UPDATE value = value + 1;
      -- The one group's channel, by txmq_waiters' index (txmq_i_wake_groups says why).
      SET v_channel = IF(v_allocator = 0, v_name, CONCAT(v_name, '$', v_allocator));
      IF EXISTS (SELECT 1 FROM txmq_waiters WHERE topic = v_channel) THEN
        CALL txmq_i_wake(v_channel, 1);
      END IF;
      IF v_own = 1 THEN
        COMMIT;
      END IF;
      SELECT v_id AS id;
    ELSE
      IF v_own = 1 THEN
        COMMIT;
      ELSE
        RELEASE SAVEPOINT txmq_call;
      END IF;
      SET v_own = 0;
      CALL txmq_i_stage();
      INSERT INTO txmq_i_staged (n, payload) VALUES (1, p_payload);
      CALL txmq_i_send_staged(p_topic, 0, 0, NULL);
    END IF;
  ELSE
    CALL txmq_i_check_name(p_topic);
    CALL txmq_i_stage();
    INSERT INTO txmq_i_staged (n, payload) VALUES (1, p_payload);
    CALL txmq_i_stage_options(1, p_options, '');
    CALL txmq_i_send_staged(p_topic, 0, 0, NULL);
  END IF;
END
$$
-- A batch of plain strings to a topic with one group, the common case: one multi-row INSERT
-- made straight from the JSON, without staging (which took most of a batch's time). p_sent = 0
-- (nothing written, nothing returned) when the batch does not qualify: objects, several groups,
-- or more bytes than one statement takes; txmq_send_batch then stages it.
DROP PROCEDURE IF EXISTS txmq_i_send_strings
$$
CREATE PROCEDURE txmq_i_send_strings(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_messages LONGTEXT CHARACTER SET utf8mb4,
                                     OUT p_sent TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_own TINYINT DEFAULT 0;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_dedup_window BIGINT UNSIGNED;
  DECLARE v_max_payload BIGINT UNSIGNED;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_placed BIGINT UNSIGNED;
  DECLARE v_groups INT;
  DECLARE v_allocator INT UNSIGNED;
  DECLARE v_p INT;
  DECLARE v_count INT;
  DECLARE v_others INT;
  DECLARE v_largest BIGINT;
  DECLARE v_total BIGINT;
  DECLARE v_bad INT;
  DECLARE v_first BIGINT UNSIGNED;
  DECLARE v_step BIGINT UNSIGNED DEFAULT @@SESSION.auto_increment_increment;
  DECLARE v_gcl BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  DECLARE v_channel VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_values LONGTEXT CHARACTER SET utf8mb4;
  -- 1 on MariaDB (routines.cc sets it): INSERT ... RETURNING answers the ids itself.
  DECLARE v_returning TINYINT DEFAULT 0;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    SET SESSION group_concat_max_len = v_gcl;
    CALL txmq_i_undo(v_own);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  SET p_sent = 0;
  SELECT COUNT(*), SUM(JSON_TYPE(j.v) <> 'STRING'), MAX(LENGTH(j.s)), SUM(LENGTH(j.s))
    INTO v_count, v_others, v_largest, v_total
    FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (v JSON PATH '$', s LONGTEXT CHARACTER SET utf8mb4 PATH '$')) AS j;
  proc: BEGIN
    IF v_others > 0 OR 2 * v_total + 64 * v_count > @@max_allowed_packet DIV 4 THEN
      LEAVE proc;
    END IF;
    -- The shared helpers, not txmq_send's inlined copies: a nested CALL's 10-20 us are nothing
    -- beside a batch.
    CALL txmq_i_in_transaction(v_in);
    IF v_in = 1 THEN
      SAVEPOINT txmq_call;
    ELSE
      SET v_own = 1;
      START TRANSACTION;
    END IF;
    CALL txmq_i_topic(p_topic, v_max_payload, v_dedup_window, v_partitions, v_placed, v_groups,
                      v_allocator);
    IF v_groups <> 1 THEN
      IF v_own = 1 THEN
        COMMIT;
      END IF;
      LEAVE proc;
    END IF;
    IF v_largest > v_max_payload THEN
      SELECT j.n INTO v_bad
        FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY, s LONGTEXT CHARACTER SET utf8mb4 PATH '$')) AS j
        WHERE LENGTH(j.s) > v_max_payload ORDER BY j.n LIMIT 1;
      CALL txmq_i_raise(CONCAT('message ', v_bad, ' of the batch: payload of ', v_largest,
                               ' bytes is over topic ''', p_topic, '''''s limit of ', v_max_payload,
                               ' bytes'));
    END IF;
    IF v_partitions = 1 AND v_placed IS NULL THEN
      SET v_p = 0;
    ELSE
      CALL txmq_i_unkeyed_partition(v_partitions, v_placed, v_p);
      IF v_p < 0 THEN
        CALL txmq_i_not_placed(p_topic, 0);
      END IF;
    END IF;
    -- RETURNING (MariaDB) only inside the caller's transaction: the ids reach the client as the
    -- rows are written, which in a transaction of the call's own would be before its COMMIT.
    SET v_returning = v_returning AND v_in = 1;
    IF v_returning = 1 OR @@innodb_autoinc_lock_mode <= 1 THEN
      -- INSERT ... SELECT straight from the JSON (about half the time of the VALUES below).
      -- With RETURNING its ids are answered in the ORDER BY's order, right under any lock mode
      -- (Galera's 2 too), since no id is computed. Without: under lock modes 0 and 1 a statement
      -- of unknown row count holds the table's AUTO-INC lock to its end, so its ids are one
      -- block, in the ORDER BY's order; mode 2 (MySQL's default, Galera's) interleaves them with
      -- other inserts': there the VALUES.
      SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_q_', p_topic, IF(v_allocator = 0 AND v_p = 0, '', CONCAT('$', v_allocator, '_', v_p)), '`'),
        ' (visible_at, enqueued_at, msg_key, payload) SELECT UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ',
        'NULL, CAST(j.s AS BINARY) FROM JSON_TABLE(?, ''$[*]'' COLUMNS (n FOR ORDINALITY, ',
        's LONGTEXT CHARACTER SET utf8mb4 PATH ''$'')) AS j ORDER BY j.n',
        IF(v_returning = 1, ' RETURNING id', ''));
      SET @txmq_a = p_messages;
      PREPARE txmq_statement FROM @txmq_sql;
      EXECUTE txmq_statement USING @txmq_a;
      DEALLOCATE PREPARE txmq_statement;
      SET @txmq_a = NULL;
    ELSE
      SET SESSION group_concat_max_len = 1073741824;
      SELECT GROUP_CONCAT('(UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, X''', HEX(j.s), ''')'
                          ORDER BY j.n SEPARATOR ',')
        INTO v_values
        FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY, s LONGTEXT CHARACTER SET utf8mb4 PATH '$')) AS j;
      SET SESSION group_concat_max_len = v_gcl;
      -- One multi-row VALUES: its ids are one block, first + i * auto_increment_increment.
      SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_q_', p_topic, IF(v_allocator = 0 AND v_p = 0, '', CONCAT('$', v_allocator, '_', v_p)), '`'),
        ' (visible_at, enqueued_at, msg_key, payload) VALUES ', v_values);
      SET v_values = NULL;
      PREPARE txmq_statement FROM @txmq_sql;
      EXECUTE txmq_statement;
      DEALLOCATE PREPARE txmq_statement;
    END IF;
    SET v_first = LAST_INSERT_ID(), @txmq_sql = NULL;
    CALL txmq_i_count(p_topic, '', 'sent', v_count);
    SET v_channel = IF(v_allocator = 0, p_topic, CONCAT(p_topic, '$', v_allocator));
    IF EXISTS (SELECT 1 FROM txmq_waiters WHERE topic = v_channel) THEN
      CALL txmq_i_wake(v_channel, v_count);
    END IF;
    IF v_own = 1 THEN
      COMMIT;
    END IF;
    SET p_sent = 1;
    IF v_returning = 0 THEN
      SELECT v_first + (j.n - 1) * v_step AS id
        FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY)) AS j ORDER BY j.n;
    END IF;
  END;
END
$$
-- A JSON array of 1 to 10,000 messages: each a string (the payload) or an object with
-- "payload" or "payload_base64" and the options' fields. All or none; one row per message: id.
DROP PROCEDURE IF EXISTS txmq_send_batch
$$
CREATE PROCEDURE txmq_send_batch(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4, IN p_messages LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_n INT UNSIGNED;
  DECLARE v_options LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_sent TINYINT DEFAULT 0;
  DECLARE with_options CURSOR FOR
    SELECT n, options FROM txmq_i_staged WHERE options IS NOT NULL ORDER BY n;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  CALL txmq_i_check_name(p_topic);
  IF p_messages IS NULL OR NOT JSON_VALID(p_messages) OR JSON_TYPE(p_messages) <> 'ARRAY'
     OR JSON_LENGTH(p_messages) NOT BETWEEN 1 AND 10000 THEN
    CALL txmq_i_raise('messages must be a JSON array of 1 to 10000 messages');
  END IF;
  CALL txmq_i_send_strings(p_topic, p_messages, v_sent);
  IF v_sent = 0 THEN
  CALL txmq_i_stage();
  -- Strings are payloads; an object's options are parsed next, one by one.
  INSERT INTO txmq_i_staged (n, payload, options)
    SELECT j.n,
           CASE JSON_TYPE(j.v)
             WHEN 'STRING' THEN CAST(JSON_UNQUOTE(j.v) AS BINARY)
             WHEN 'OBJECT' THEN
               IF(JSON_TYPE(JSON_EXTRACT(j.v, '$.payload_base64')) = 'STRING',
                  FROM_BASE64(JSON_UNQUOTE(JSON_EXTRACT(j.v, '$.payload_base64'))),
                  IF(JSON_TYPE(JSON_EXTRACT(j.v, '$.payload')) = 'STRING',
                     CAST(JSON_UNQUOTE(JSON_EXTRACT(j.v, '$.payload')) AS BINARY), NULL))
             ELSE NULL END,
           IF(JSON_TYPE(j.v) = 'OBJECT', j.v, NULL)
    FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (n FOR ORDINALITY, v JSON PATH '$')) AS j;
  OPEN with_options;
  parse: LOOP
    FETCH with_options INTO v_n, v_options;
    IF v_done = 1 THEN
      LEAVE parse;
    END IF;
    CALL txmq_i_stage_options(v_n, v_options, CONCAT('message ', v_n, ' of the batch: '));
  END LOOP;
  CLOSE with_options;
  CALL txmq_i_send_staged(p_topic, 1, 0, NULL);
  END IF;
END
$$
-- ---------------------------------------------------------------------------------------------
-- Consumption, exactly once: take, the caller's work, ack, one transaction.
-- ---------------------------------------------------------------------------------------------
-- What the calls did, for txmq's metrics (sent, received, acked, dead_lettered; metrics.cc adds
-- them to txmq_metrics and deletes them): a row per connection, written in the caller's
-- transaction, so that it counts only what commits and concurrent callers share no row.
CREATE TABLE IF NOT EXISTS txmq_sql_counts (
  topic VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  grp VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  metric VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  conn BIGINT UNSIGNED NOT NULL,
  value BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (topic, grp, metric, conn)) ENGINE=InnoDB
$$
DROP PROCEDURE IF EXISTS txmq_i_count
$$
CREATE PROCEDURE txmq_i_count(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_group VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_metric VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_n BIGINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  IF p_n > 0 THEN
    INSERT INTO txmq_sql_counts (topic, grp, metric, conn, value)
      VALUES (p_topic, p_group, p_metric, CONNECTION_ID(), p_n)
      ON DUPLICATE KEY UPDATE value = value + VALUES(value);
  END IF;
END
$$
-- Deliveries that did not end in an acknowledgement (the caller rolled back, or died with its
-- transaction open) are counted here, outside the transaction: the count must survive the
-- rollback, or a message that always fails would be taken for ever. MEMORY: lost with a server
-- restart, which grants such a message its attempts again. A take counts, an ack or a
-- dead-lettering forgets, txmq_fail moves the count into the message's attempts.
CREATE TABLE IF NOT EXISTS txmq_takes (
  queue VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  takes INT UNSIGNED NOT NULL,
  taken_at DATETIME(6) NOT NULL,
  PRIMARY KEY (queue, id)) ENGINE=MEMORY
$$
-- The ids of an ack or fail: one id, or a JSON array of ids, into txmq_i_ids.
DROP PROCEDURE IF EXISTS txmq_i_parse_ids
$$
CREATE PROCEDURE txmq_i_parse_ids(IN p_ids LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_ids (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    msg_key VARBINARY(255) NULL,
    found TINYINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
  DELETE FROM txmq_i_ids;
  IF p_ids IS NOT NULL AND TRIM(p_ids) REGEXP '^[0-9]{1,20}$' THEN
    INSERT INTO txmq_i_ids (id) VALUES (CAST(TRIM(p_ids) AS UNSIGNED));
  ELSEIF p_ids IS NOT NULL AND JSON_VALID(p_ids) AND JSON_TYPE(p_ids) = 'ARRAY'
         AND JSON_LENGTH(p_ids) <= 10000 THEN
    -- One pass over the array; anything but a whole number becomes id 0, which no message has.
    INSERT IGNORE INTO txmq_i_ids (id)
      SELECT IF(j.v REGEXP '^[0-9]{1,20}$', CAST(j.v AS UNSIGNED), 0)
      FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (v VARCHAR(64) CHARACTER SET utf8mb4 PATH '$')) AS j;
    IF EXISTS (SELECT 1 FROM txmq_i_ids WHERE id = 0) THEN
      CALL txmq_i_raise('ids must be a message id or a JSON array of message ids');
    END IF;
  ELSE
    CALL txmq_i_raise('ids must be a message id or a JSON array of up to 10000 message ids');
  END IF;
END
$$
-- The group's number, or an error.
DROP PROCEDURE IF EXISTS txmq_i_group
$$
CREATE PROCEDURE txmq_i_group(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_group VARCHAR(255) CHARACTER SET utf8mb4,
                              OUT p_number INT UNSIGNED,
                              OUT p_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  -- Compared as the column's type (its index). A name that is not ASCII (each character one
  -- byte), or longer than any, becomes '?', which no group's name is; converting it would fail.
  DECLARE v_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin
    DEFAULT IF(CHAR_LENGTH(IFNULL(p_group, 'default')) = LENGTH(IFNULL(p_group, 'default'))
                 AND CHAR_LENGTH(IFNULL(p_group, 'default')) <= 64,
               CONVERT(IFNULL(p_group, 'default') USING ascii), '?');
  DECLARE v_storage TINYINT DEFAULT 0;
  SET p_number = NULL, p_name = v_name;
  SELECT number INTO p_number FROM txmq_groups WHERE topic = p_topic AND name = v_name;
  SELECT storage INTO v_storage FROM txmq_topics WHERE name = p_topic;
  CALL txmq_i_not_shared(p_topic, v_storage);
  IF p_number IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM txmq_topics WHERE name = p_topic) THEN
      CALL txmq_i_raise(CONCAT('no such topic ''', p_topic, ''''));
    END IF;
    CALL txmq_i_raise(CONCAT('topic ''', p_topic, ''' has no group ''',
                             LEFT(IFNULL(p_group, 'default'), 48), ''''));
  END IF;
END
$$
-- Keyed FIFO when messages finish (keys.cc, finish_keyed): for each key in txmq_i_fin (with how
-- many of its heads finished), in key order: fewer heads, or the next parked message moved in,
-- or the key's row deleted. Adds the messages moved in to p_promoted.
DROP PROCEDURE IF EXISTS txmq_i_finish_keyed
$$
CREATE PROCEDURE txmq_i_finish_keyed(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_group INT UNSIGNED,
                                     IN p_partition INT, INOUT p_promoted INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_key VARBINARY(255);
  DECLARE v_count INT UNSIGNED;
  DECLARE v_k VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin DEFAULT CONCAT('`txmq_k_', p_topic, IF(p_group = 0 AND p_partition = 0, '', CONCAT('$', p_group, '_', p_partition)), '`');
  DECLARE v_kp VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin DEFAULT CONCAT('`txmq_kp_', p_topic, IF(p_group = 0 AND p_partition = 0, '', CONCAT('$', p_group, '_', p_partition)), '`');
  DECLARE v_q VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin DEFAULT CONCAT('`txmq_q_', p_topic, IF(p_group = 0 AND p_partition = 0, '', CONCAT('$', p_group, '_', p_partition)), '`');
  DECLARE finished CURSOR FOR SELECT msg_key, cnt FROM txmq_i_fin ORDER BY msg_key;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  OPEN finished;
  each_key: LOOP
    FETCH finished INTO v_key, v_count;
    IF v_done = 1 THEN
      LEAVE each_key;
    END IF;
    SET @txmq_h = NULL, @txmq_pk = NULL, @txmq_park = NULL;
    SET @txmq_sql = CONCAT('SELECT heads, parked INTO @txmq_h, @txmq_pk FROM ', v_k,
                           ' WHERE msg_key = ? FOR UPDATE');
    SET @txmq_a = v_key;
    CALL txmq_i_exec(1);
    IF @txmq_h IS NOT NULL THEN
      IF @txmq_h > v_count THEN
        SET @txmq_sql = CONCAT('UPDATE ', v_k, ' SET heads = ? WHERE msg_key = ?');
        SET @txmq_a = @txmq_h - v_count, @txmq_b = v_key;
        CALL txmq_i_exec(2);
      ELSEIF @txmq_pk > 0 THEN
        SET @txmq_sql = CONCAT('SELECT MIN(park_id) INTO @txmq_park FROM ', v_kp, ' WHERE msg_key = ?');
        SET @txmq_a = v_key;
        CALL txmq_i_exec(1);
        IF @txmq_park IS NOT NULL THEN
          SET @txmq_sql = CONCAT('INSERT INTO ', v_q, ' (id, visible_at, attempts, enqueued_at, msg_key, ',
            'payload, attributes) SELECT id, visible_at, 0, enqueued_at, msg_key, payload, attributes FROM ',
            v_kp, ' WHERE park_id = ?');
          SET @txmq_a = @txmq_park;
          CALL txmq_i_exec(1);
          SET @txmq_sql = CONCAT('DELETE FROM ', v_kp, ' WHERE park_id = ?');
          CALL txmq_i_exec(1);
          SET @txmq_sql = CONCAT('UPDATE ', v_k, ' SET heads = 1, parked = parked - 1 WHERE msg_key = ?');
          SET @txmq_a = v_key;
          CALL txmq_i_exec(1);
          SET p_promoted = p_promoted + 1;
        ELSE
          SET @txmq_sql = CONCAT('UPDATE ', v_k, ' SET heads = 0 WHERE msg_key = ?');
          SET @txmq_a = v_key;
          CALL txmq_i_exec(1);
        END IF;
      ELSE
        SET @txmq_sql = CONCAT('DELETE FROM ', v_k, ' WHERE msg_key = ?');
        SET @txmq_a = v_key;
        CALL txmq_i_exec(1);
      END IF;
    END IF;
  END LOOP;
  CLOSE finished;
  SET @txmq_h = NULL, @txmq_pk = NULL, @txmq_park = NULL, @txmq_sql = NULL, @txmq_a = NULL, @txmq_b = NULL;
END
$$
-- Forgets the counted takes of the ids in txmq_i_ids (of one queue table). A server that
-- refuses non-transactional writes inside a transaction (MySQL with enforce_gtid_consistency)
-- has no counts to forget.
DROP PROCEDURE IF EXISTS txmq_i_forget_takes
$$
CREATE PROCEDURE txmq_i_forget_takes(IN p_queue VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
  DELETE FROM txmq_takes WHERE queue = p_queue AND id IN (SELECT id FROM txmq_i_ids WHERE found = 1);
END
$$
-- Deletes the messages of txmq_i_ids found in one partition's queue table (found = 1, locked
-- by this transaction), archiving them when the topic keeps acknowledged messages, and moves
-- their keys on. p_dead: into the dead-letter table (or the dead-letter topic) instead.
DROP PROCEDURE IF EXISTS txmq_i_finish
$$
CREATE PROCEDURE txmq_i_finish(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN p_group INT UNSIGNED, IN p_partition INT,
                               IN p_dead TINYINT, INOUT p_promoted INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_q VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin DEFAULT CONCAT('`txmq_q_', p_topic, IF(p_group = 0 AND p_partition = 0, '', CONCAT('$', p_group, '_', p_partition)), '`');
  DECLARE v_ids LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_archive BIGINT UNSIGNED;
  DECLARE v_dlt VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_gcl BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  IF EXISTS (SELECT 1 FROM txmq_i_ids WHERE found = 1) THEN
    SELECT archive_us, dead_letter_topic INTO v_archive, v_dlt FROM txmq_topics WHERE name = p_topic;
    IF p_dead = 1 OR v_archive > 0 THEN
      SET SESSION group_concat_max_len = 1073741824;
      SELECT GROUP_CONCAT(id ORDER BY id) INTO v_ids FROM txmq_i_ids WHERE found = 1;
      SET SESSION group_concat_max_len = v_gcl;
    END IF;
    IF p_dead = 1 AND v_dlt IS NOT NULL THEN
      -- Sent into the dead-letter topic in this transaction, with its origin ("TOPIC ID") unless
      -- it has one from an earlier dead-lettering (move_to_dead_letters).
      CALL txmq_i_stage();
      SET @txmq_sql = CONCAT('INSERT INTO txmq_i_staged (n, msg_key, payload, attributes) ',
        'SELECT id, msg_key, payload, IF(attributes IS NOT NULL AND SUBSTRING(attributes, 2, 8) = ',
        'UNHEX(''07016F726967696E''), attributes, CONCAT(UNHEX(''01''), UNHEX(''07''), UNHEX(''016F726967696E''), ',
        'UNHEX(''06''), ''origin'', CHAR(LENGTH(CONCAT(?, '' '', id)) USING binary), CONCAT(?, '' '', id), ',
        'IFNULL(SUBSTRING(attributes, 2), ''''))) FROM ', v_q, ' WHERE id IN (', v_ids, ') ORDER BY id');
      SET @txmq_a = p_topic, @txmq_b = p_topic;
      CALL txmq_i_exec(2);
      CALL txmq_i_send_core(v_dlt, 1, 0);
    ELSEIF p_dead = 1 THEN
      SET @txmq_sql = CONCAT('INSERT INTO ', CONCAT('`txmq_dlq_', p_topic, IF(p_group = 0 AND p_partition = 0, '', CONCAT('$', p_group, '_', p_partition)), '`'),
        ' (id, attempts, last_owner, enqueued_at, died_at, msg_key, payload, attributes) ',
        'SELECT q.id, q.attempts + GREATEST(IFNULL(t.takes, 1), 1) - 1, ?, q.enqueued_at, UTC_TIMESTAMP(6), ',
        'q.msg_key, q.payload, q.attributes FROM ', v_q, ' AS q LEFT JOIN txmq_takes AS t ',
        'ON t.queue = ? AND t.id = q.id WHERE q.id IN (', v_ids, ')');
      SET @txmq_a = LEFT(CONCAT('sql:', USER()), 255), @txmq_b = v_q;
      CALL txmq_i_exec(2);
    ELSEIF v_archive > 0 THEN
      SET @txmq_sql = CONCAT('INSERT INTO `txmq_a_', p_topic, '` (id, enqueued_at, acked_at, msg_key, ',
        'payload, attributes) SELECT id, enqueued_at, UTC_TIMESTAMP(6), msg_key, payload, attributes FROM ',
        v_q, ' WHERE id IN (', v_ids, ') ON DUPLICATE KEY UPDATE acked_at = VALUES(acked_at)');
      CALL txmq_i_exec(0);
    END IF;
    -- Driven by the ids (STRAIGHT_JOIN: their rows by the primary key): a plan that scanned the
    -- queue table would wait for rows other transactions hold, and deadlock with them.
    SET @txmq_sql = CONCAT('DELETE q FROM txmq_i_ids AS i STRAIGHT_JOIN ', v_q,
                           ' AS q ON q.id = i.id WHERE i.found = 1');
    CALL txmq_i_exec(0);
    CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_fin (
      msg_key VARBINARY(255) NOT NULL PRIMARY KEY,
      cnt INT UNSIGNED NOT NULL) ENGINE=InnoDB;
    DELETE FROM txmq_i_fin;
    INSERT INTO txmq_i_fin (msg_key, cnt)
      SELECT msg_key, COUNT(*) FROM txmq_i_ids WHERE found = 1 AND msg_key IS NOT NULL GROUP BY msg_key;
    IF EXISTS (SELECT 1 FROM txmq_i_fin) THEN
      CALL txmq_i_finish_keyed(p_topic, p_group, p_partition, p_promoted);
    END IF;
    -- A dead letter keeps its count: if the caller rolls back, the next take moves it again.
    IF p_dead = 0 THEN
      CALL txmq_i_forget_takes(v_q);
    END IF;
    SET @txmq_sql = NULL, @txmq_a = NULL, @txmq_b = NULL;
  END IF;
END
$$
-- The attributes of the messages txmq_take returns, as JSON (txmq_i_decode_attributes).
DROP PROCEDURE IF EXISTS txmq_i_decode_delivered
$$
CREATE PROCEDURE txmq_i_decode_delivered()
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE v_blob LONGBLOB;
  DECLARE v_json LONGTEXT CHARACTER SET utf8mb4;
  DECLARE with_attributes CURSOR FOR
    SELECT id, attributes FROM txmq_i_delivered WHERE fate = 0 AND attributes IS NOT NULL ORDER BY id;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  OPEN with_attributes;
  decode: LOOP
    FETCH with_attributes INTO v_id, v_blob;
    IF v_done = 1 THEN
      LEAVE decode;
    END IF;
    CALL txmq_i_decode_attributes(v_blob, v_json);
    UPDATE txmq_i_delivered SET attributes_json = v_json WHERE id = v_id;
  END LOOP;
  CLOSE with_attributes;
END
$$
-- One claim of txmq_i_take: up to p_max messages of one partition of the group into
-- txmq_i_delivered (fate 0), held by the caller's transaction (FOR UPDATE SKIP LOCKED: peers skip
-- them). From one partition, the first in turn (from a random one) that has some. Messages past
-- the topic's retention are deleted, and those taken more than max_attempts times without an
-- ack are dead-lettered, in the caller's transaction (fates 1 and 2). p_live: how many are left
-- to return.
DROP PROCEDURE IF EXISTS txmq_i_claim
$$
CREATE PROCEDURE txmq_i_claim(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_group INT UNSIGNED, IN p_max INT, IN p_partitions INT UNSIGNED,
                              IN p_placed BIGINT UNSIGNED, IN p_max_attempts INT UNSIGNED,
                              IN p_retention BIGINT UNSIGNED, INOUT p_promoted INT,
                              INOUT p_dead INT, OUT p_live INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_first INT;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_p INT;
  DECLARE v_q VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
  SET p_live = 0;
  DELETE FROM txmq_i_delivered;
  SET v_first = FLOOR(RAND() * p_partitions);
  each_partition: WHILE v_i < p_partitions DO
    SET v_p = (v_first + v_i) % p_partitions, v_i = v_i + 1;
    IF p_placed IS NULL OR (p_placed >> v_p) & 1 = 1 THEN
      SET v_q = CONCAT('`txmq_q_', p_topic, IF(p_group = 0 AND v_p = 0, '', CONCAT('$', p_group, '_', v_p)), '`');
      -- FORCE INDEX (PRIMARY): rows are locked only as they are taken (select_claimable).
      SET @txmq_sql = CONCAT('INSERT INTO txmq_i_delivered (id, attempts, enqueued_at, msg_key, payload, ',
        'attributes) SELECT id, attempts, enqueued_at, msg_key, payload, attributes FROM ', v_q,
        ' FORCE INDEX (PRIMARY) WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED');
      SET @txmq_a = p_max;
      CALL txmq_i_exec(1);
      IF EXISTS (SELECT 1 FROM txmq_i_delivered) THEN
        IF p_retention > 0 THEN
          UPDATE txmq_i_delivered SET fate = 1
            WHERE enqueued_at < UTC_TIMESTAMP(6) - INTERVAL p_retention MICROSECOND;
        END IF;
        BEGIN
          DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;  -- no counts (txmq_i_forget_takes)
          INSERT INTO txmq_takes (queue, id, takes, taken_at)
            SELECT v_q, id, 1, UTC_TIMESTAMP(6) FROM txmq_i_delivered WHERE fate = 0
            ON DUPLICATE KEY UPDATE txmq_takes.takes = txmq_takes.takes + 1, taken_at = VALUES(taken_at);
          UPDATE txmq_i_delivered AS t JOIN txmq_takes AS m ON m.queue = v_q AND m.id = t.id
            SET t.takes = GREATEST(m.takes, 1);
          -- Counts of messages that went for good without an ack (dead letters, or an ack that
          -- rolled back after forgetting) are dropped after an hour without a take.
          IF RAND() < 0.001 THEN
            DELETE FROM txmq_takes WHERE taken_at < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR;
          END IF;
        END;
        IF p_max_attempts > 0 THEN
          UPDATE txmq_i_delivered SET fate = 2 WHERE fate = 0 AND attempts + takes - 1 >= p_max_attempts;
        END IF;
        IF EXISTS (SELECT 1 FROM txmq_i_delivered WHERE fate <> 0) THEN
          SELECT p_dead + COUNT(*) INTO p_dead FROM txmq_i_delivered WHERE fate = 2;
          CALL txmq_i_parse_ids('[]');
          INSERT INTO txmq_i_ids (id, msg_key, found) SELECT id, msg_key, 1 FROM txmq_i_delivered WHERE fate = 1;
          CALL txmq_i_finish(p_topic, p_group, v_p, 0, p_promoted);
          DELETE FROM txmq_i_ids;
          INSERT INTO txmq_i_ids (id, msg_key, found) SELECT id, msg_key, 1 FROM txmq_i_delivered WHERE fate = 2;
          CALL txmq_i_finish(p_topic, p_group, v_p, 1, p_promoted);
        END IF;
        SELECT COUNT(*) INTO p_live FROM txmq_i_delivered WHERE fate = 0;
        IF p_live > 0 THEN
          LEAVE each_partition;
        END IF;
        DELETE FROM txmq_i_delivered;
      END IF;
    END IF;
  END WHILE;
  SET @txmq_sql = NULL, @txmq_a = NULL;
END
$$
-- After a wake-up: waits until the sends that woke this take have ended (waiters.cc's fence). A
-- send through txmq_send wakes before its caller commits: the message is not committed yet. For
-- each of the group's partition tables, the first row above the highest committed id is read
-- with a shared lock, which waits on an uncommitted message's row lock until its transaction
-- ends (at most innodb_lock_wait_timeout, which the waiting take sets to 1 s). Two statements:
-- as one (MAX in a subquery), MariaDB 11.8 fails it with 1020 at the sender's COMMIT.
DROP PROCEDURE IF EXISTS txmq_i_fence
$$
CREATE PROCEDURE txmq_i_fence(IN p_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_group INT UNSIGNED, IN p_partitions INT UNSIGNED,
                              IN p_placed BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_p INT DEFAULT 0;
  DECLARE v_q VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
  DECLARE CONTINUE HANDLER FOR 1205 BEGIN END;  -- the sender is still open after a second
  DECLARE CONTINUE HANDLER FOR 1020 BEGIN END;  -- MariaDB 11.6+: the row changed at its COMMIT
  WHILE v_p < p_partitions DO
    IF p_placed IS NULL OR (p_placed >> v_p) & 1 = 1 THEN
      SET v_q = CONCAT('`txmq_q_', p_topic, IF(p_group = 0 AND v_p = 0, '', CONCAT('$', p_group, '_', v_p)), '`');
      SET @txmq_f = NULL;
      SET @txmq_sql = CONCAT('SELECT COALESCE(MAX(id), 0) INTO @txmq_f FROM ', v_q);
      CALL txmq_i_exec(0);
      SET @txmq_sql = CONCAT('SELECT id INTO @txmq_g FROM ', v_q,
                             ' WHERE id > ? ORDER BY id LIMIT 1 LOCK IN SHARE MODE');
      SET @txmq_a = @txmq_f;
      CALL txmq_i_exec(1);
    END IF;
    SET v_p = v_p + 1;
  END WHILE;
  SET @txmq_sql = NULL, @txmq_a = NULL, @txmq_f = NULL, @txmq_g = NULL;
END
$$
-- txmq_take and txmq_take_wait: up to p_max messages of a topic's group, held by the caller's
-- transaction until it ends: acknowledged with txmq_ack in it, or claimable again at once after a
-- rollback; as a result set: id, payload, msg_key, attempt, enqueued_at, attributes.
--
-- With p_wait > 0 seconds (at most 20, as SQS's long poll) and nothing to take, it waits for a
-- message, woken as the library's receivers are (waiters.cc): it registers its connection in
-- txmq_waiters for the group's channel, with registered_at at 1000-01-01 (the mark of a SQL
-- take: woken before the library's watches, and never put back by a sender that woke it), and
-- waits a second at a time in a statement that a sender's KILL QUERY ends early: MASTER_GTID_WAIT
-- for a GTID that never comes on MariaDB (its SLEEP is not safe to KILL, waiters.cc), SLEEP on
-- MySQL (install_routines writes the server's). Woken, it drops its registration, fences
-- (txmq_i_fence) and claims; else it claims after each second. A KILL that lands between two
-- statements ends the whole CALL with 1317 on both servers, which the caller runs again (the
-- registration is then dropped by the next sender that finds it, or the next take).
-- READ COMMITTED only: a claim of an empty queue under REPEATABLE READ keeps a next-key lock at
-- the end of its table, which every send to it would wait on for the whole wait.
DROP PROCEDURE IF EXISTS txmq_i_take
$$
CREATE PROCEDURE txmq_i_take(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4,
                             IN p_group VARCHAR(255) CHARACTER SET utf8mb4, IN p_max INT,
                             IN p_wait DOUBLE)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE v_group_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_placed BIGINT UNSIGNED;
  DECLARE v_max_attempts INT UNSIGNED;
  DECLARE v_retention BIGINT UNSIGNED;
  DECLARE v_live INT DEFAULT 0;
  DECLARE v_promoted INT DEFAULT 0;
  DECLARE v_dead INT DEFAULT 0;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE v_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_channel VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL;
  DECLARE v_deadline DATETIME(6);
  DECLARE v_slice DOUBLE;
  DECLARE v_r BIGINT;
  DECLARE v_woken TINYINT DEFAULT 0;
  DECLARE v_registered TINYINT DEFAULT 0;
  DECLARE v_hot TINYINT DEFAULT 0;
  DECLARE v_fresh TINYINT DEFAULT 0;
  DECLARE v_p INT;
  DECLARE v_lock_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    IF v_channel IS NOT NULL THEN
      BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
        DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
      END;
      SET SESSION innodb_lock_wait_timeout = v_lock_wait;
      BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
        DEALLOCATE PREPARE txmq_look;
      END;
    END IF;
    CALL txmq_i_undo(0);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  CALL txmq_i_check_name(p_topic);
  SET v_topic = p_topic;  -- checked: ASCII, and the type of txmq's name columns (their index)
  CALL txmq_i_in_transaction(v_in);
  IF v_in = 0 THEN
    CALL txmq_i_raise(CONCAT(IF(p_wait > 0, 'txmq_take_wait', 'txmq_take'),
      ' needs a transaction (START TRANSACTION first): the messages are held by it until it ends'));
  END IF;
  IF p_max IS NULL OR p_max < 1 OR p_max > 1000 THEN
    CALL txmq_i_raise('max_messages must be from 1 to 1000');
  END IF;
  IF p_wait IS NULL OR NOT (p_wait BETWEEN 0 AND 20) THEN
    CALL txmq_i_raise('wait_seconds must be from 0 to 20');
  END IF;
  IF p_wait > 0 AND @@SESSION.transaction_isolation NOT IN ('READ-COMMITTED', 'READ-UNCOMMITTED') THEN
    CALL txmq_i_raise('txmq_take_wait needs READ COMMITTED (SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED)');
  END IF;
  SAVEPOINT txmq_call;
  CALL txmq_i_group(v_topic, p_group, v_group, v_group_name);
  SELECT partitions, placed, max_attempts, retention_us
    INTO v_partitions, v_placed, v_max_attempts, v_retention
    FROM txmq_topics WHERE name = v_topic;
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_delivered (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    attempts INT UNSIGNED NOT NULL,
    enqueued_at DATETIME(6) NOT NULL,
    msg_key VARBINARY(255) NULL,
    payload LONGBLOB NOT NULL,
    attributes LONGBLOB NULL,
    attributes_json LONGTEXT CHARACTER SET utf8mb4 NULL,
    takes INT UNSIGNED NOT NULL DEFAULT 1,
    fate TINYINT NOT NULL DEFAULT 0) ENGINE=InnoDB;  -- 0 live, 1 past retention, 2 dead letter
  CALL txmq_i_claim(v_topic, v_group, p_max, v_partitions, v_placed, v_max_attempts, v_retention,
                    v_promoted, v_dead, v_live);
  IF v_live = 0 AND p_wait > 0 THEN
    SET v_channel = IF(v_group = 0, v_topic, CONCAT(v_topic, '$', v_group));
    SET v_deadline = UTC_TIMESTAMP(6) + INTERVAL ROUND(p_wait * 1000000) MICROSECOND;
    SET SESSION innodb_lock_wait_timeout = 1;
    -- The look: is anything claimable in the group's tables here (prepared once for the wait).
    SET v_p = 0, @txmq_sql = NULL;
    WHILE v_p < v_partitions DO
      IF v_placed IS NULL OR (v_placed >> v_p) & 1 = 1 THEN
        SET @txmq_sql = CONCAT(IFNULL(CONCAT(@txmq_sql, ' OR '), ''), 'EXISTS (SELECT 1 FROM `txmq_q_',
          v_topic, IF(v_group = 0 AND v_p = 0, '', CONCAT('$', v_group, '_', v_p)),
          '` WHERE visible_at <= UTC_TIMESTAMP(6))');
      END IF;
      SET v_p = v_p + 1;
    END WHILE;
    SET @txmq_sql = CONCAT('SELECT ', @txmq_sql, ' INTO @txmq_look');
    PREPARE txmq_look FROM @txmq_sql;
    BEGIN
      -- A registration a CALL ended by a KILL left behind.
      DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
      DELETE FROM txmq_waiters
       WHERE connection_id = CONNECTION_ID() AND registered_at = '1000-01-01 00:00:00';
    END;
    wait: BEGIN
      -- A sender's wake-up: a KILL QUERY that ends the statement running.
      DECLARE CONTINUE HANDLER FOR 1317 SET v_woken = 1;
      -- Registered, it looks, then waits; woken, or seeing a message, it leaves the registry
      -- and claims. So a sender's KILL finds it in the look or the wait (a KILL between two
      -- statements ends the CALL), and a send that commits after the look wakes it.
      wait_loop: LOOP
        IF v_registered = 0 THEN
          BEGIN
            -- MySQL with enforce_gtid_consistency refuses a MEMORY table's write inside a
            -- transaction: then no wake-ups, a look each second.
            DECLARE CONTINUE HANDLER FOR SQLEXCEPTION SET v_registered = 2;
            SET v_registered = 1, v_fresh = 1;
            INSERT IGNORE INTO txmq_waiters (connection_id, topic, registered_at)
              VALUES (CONNECTION_ID(), v_channel, '1000-01-01 00:00:00');
          END;
        END IF;
        SET @txmq_look = 0;
        IF v_woken = 0 AND v_hot = 0 THEN
          -- Anything claimable (one that fell due, or that no send announced)?
          EXECUTE txmq_look;
        END IF;
        IF v_woken = 0 AND IFNULL(@txmq_look, 0) = 0 THEN
          -- After a look that saw only messages others hold (a claim got none), a quarter of a
          -- second before the next, as the library's watches treat such hot channels. Just
          -- registered, a tenth: a KILL that lands between two statements is lost (or ends the
          -- CALL), and a sender that finds the new registration kills at once.
          SET v_slice = LEAST(IF(v_hot = 1, 0.25, IF(v_fresh = 1, 0.1, 1.0)),
                              TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_deadline) / 1e6);
          SET v_fresh = 0;
          IF v_slice <= 0 THEN
            LEAVE wait_loop;
          END IF;
          SET v_r = NULL;
          SELECT SLEEP(v_slice) INTO v_r;
          IF v_r = 1 THEN
            SET v_woken = 1;
          END IF;
          SET v_hot = 0;
          IF v_woken = 0 THEN
            ITERATE wait_loop;
          END IF;
        END IF;
        DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
        SET v_registered = 0;
        IF v_woken = 1 THEN
          SET v_woken = 0;
          CALL txmq_i_fence(v_topic, v_group, v_partitions, v_placed);
        END IF;
        SET v_live = 0;
        CALL txmq_i_claim(v_topic, v_group, p_max, v_partitions, v_placed, v_max_attempts,
                          v_retention, v_promoted, v_dead, v_live);
        IF v_live > 0 THEN
          LEAVE wait_loop;
        END IF;
        SET v_hot = IF(@txmq_look = 1, 1, 0);
        IF UTC_TIMESTAMP(6) >= v_deadline THEN
          LEAVE wait_loop;
        END IF;
      END LOOP;
      DELETE FROM txmq_waiters WHERE connection_id = CONNECTION_ID() AND topic = v_channel;
    END;
    DEALLOCATE PREPARE txmq_look;
    SET @txmq_look = NULL, @txmq_sql = NULL;
    SET SESSION innodb_lock_wait_timeout = v_lock_wait;
  END IF;
  IF v_promoted > 0 THEN
    CALL txmq_i_wake(IF(v_group = 0, v_topic, CONCAT(v_topic, '$', v_group)), v_promoted);
  END IF;
  CALL txmq_i_count(v_topic, v_group_name, 'received', v_live);
  CALL txmq_i_count(v_topic, v_group_name, 'dead_lettered', v_dead);
  IF v_live > 0 AND EXISTS (SELECT 1 FROM txmq_i_delivered WHERE fate = 0 AND attributes IS NOT NULL) THEN
    CALL txmq_i_decode_delivered();
  END IF;
  SELECT id, payload, msg_key, attempts + takes AS attempt, enqueued_at, attributes_json AS attributes
    FROM txmq_i_delivered WHERE fate = 0 ORDER BY id;
END
$$
-- Up to p_max messages of a topic's group, at once (none when there are none): txmq_i_take.
DROP PROCEDURE IF EXISTS txmq_take
$$
CREATE PROCEDURE txmq_take(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4,
                           IN p_group VARCHAR(255) CHARACTER SET utf8mb4, IN p_max INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CALL txmq_i_take(p_topic, p_group, p_max, 0);
END
$$
-- The same, waiting up to p_wait_seconds (0 to 20) for a message when there is none, as SQS's
-- long poll: it returns as soon as one is committed (txmq_i_take).
DROP PROCEDURE IF EXISTS txmq_take_wait
$$
CREATE PROCEDURE txmq_take_wait(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4,
                                IN p_group VARCHAR(255) CHARACTER SET utf8mb4, IN p_max INT,
                                IN p_wait_seconds DOUBLE)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CALL txmq_i_take(p_topic, p_group, p_max, IFNULL(p_wait_seconds, -1));
END
$$
-- Acknowledges messages taken in this transaction: deleted (archived when the topic keeps
-- acknowledged messages, their keys' next messages moved in) when it commits, with the caller's
-- work. A message not held by this transaction is refused: one that another transaction holds
-- (taken there), or that is leased, acknowledged or gone.
DROP PROCEDURE IF EXISTS txmq_ack
$$
CREATE PROCEDURE txmq_ack(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4, IN p_group VARCHAR(255) CHARACTER SET utf8mb4, IN p_ids LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE v_group_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_p INT;
  DECLARE v_next INT;
  DECLARE v_missing BIGINT UNSIGNED;
  DECLARE v_promoted INT DEFAULT 0;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE v_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    CALL txmq_i_undo(0);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  CALL txmq_i_check_name(p_topic);
  SET v_topic = p_topic;  -- checked: ASCII, and the type of txmq's name columns (their index)
  CALL txmq_i_in_transaction(v_in);
  IF v_in = 0 THEN
    CALL txmq_i_raise('txmq_ack needs the transaction that took the messages');
  END IF;
  SAVEPOINT txmq_call;
  CALL txmq_i_group(v_topic, p_group, v_group, v_group_name);
  SELECT partitions INTO v_partitions FROM txmq_topics WHERE name = v_topic;
  CALL txmq_i_parse_ids(p_ids);
  -- An id names its partition (id >> 48).
  SET v_p = -1;
  each_partition: LOOP
    SET v_next = NULL;
    SELECT MIN(id >> 48) INTO v_next FROM txmq_i_ids WHERE (id >> 48) > v_p;
    IF v_next IS NULL THEN
      LEAVE each_partition;
    END IF;
    SET v_p = v_next;
    IF v_p >= v_partitions THEN
      SELECT MIN(id) INTO v_missing FROM txmq_i_ids WHERE (id >> 48) = v_p;
      CALL txmq_i_raise(CONCAT('message ', v_missing, ' is not a message of topic ''', v_topic, ''''));
    END IF;
    -- Held by this transaction: its own locks are no obstacle to SKIP LOCKED, another
    -- transaction's rows (taken there) are skipped, and so refused below.
    CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_held (
      id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
      msg_key VARBINARY(255) NULL) ENGINE=InnoDB;
    DELETE FROM txmq_i_held;
    SET @txmq_sql = CONCAT('INSERT INTO txmq_i_held (id, msg_key) SELECT q.id, q.msg_key FROM ',
      'txmq_i_ids AS i STRAIGHT_JOIN ', CONCAT('`txmq_q_', v_topic, IF(v_group = 0 AND v_p = 0, '', CONCAT('$', v_group, '_', v_p)), '`'), ' AS q ON q.id = i.id ',
      'WHERE (i.id >> 48) = ? AND q.visible_at <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED');
    SET @txmq_a = v_p;
    CALL txmq_i_exec(1);
    UPDATE txmq_i_ids AS i JOIN txmq_i_held AS h ON h.id = i.id SET i.found = 1, i.msg_key = h.msg_key;
    SET v_missing = NULL;
    SELECT MIN(id) INTO v_missing FROM txmq_i_ids WHERE (id >> 48) = v_p AND found = 0;
    IF v_missing IS NOT NULL THEN
      CALL txmq_i_raise(CONCAT('message ', v_missing, ' is not held by this transaction (not taken here, or leased, acknowledged or gone)'));
    END IF;
    CALL txmq_i_finish(v_topic, v_group, v_p, 0, v_promoted);
    UPDATE txmq_i_ids SET found = 2 WHERE found = 1;
  END LOOP;
  CALL txmq_i_count(v_topic, v_group_name, 'acked', (SELECT COUNT(*) FROM txmq_i_ids WHERE found = 2));
  IF v_promoted > 0 THEN
    CALL txmq_i_wake(IF(v_group = 0, v_topic, CONCAT(v_topic, '$', v_group)), v_promoted);
  END IF;
END
$$
-- After the work failed and its transaction rolled back: counts the delivery as failed (with
-- the takes that ended in no ack) and makes the messages claimable again after the topic's
-- retry delay, as a failed handler's messages are (exactly_once.cc, count_failed_attempt).
DROP PROCEDURE IF EXISTS txmq_fail
$$
CREATE PROCEDURE txmq_fail(IN p_topic VARCHAR(255) CHARACTER SET utf8mb4, IN p_group VARCHAR(255) CHARACTER SET utf8mb4, IN p_ids LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_own TINYINT DEFAULT 0;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE v_group INT UNSIGNED;
  DECLARE v_group_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_partitions INT UNSIGNED;
  DECLARE v_p INT;
  DECLARE v_next INT;
  DECLARE v_q VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_initial DOUBLE;
  DECLARE v_multiplier DOUBLE;
  DECLARE v_max DOUBLE;
  DECLARE v_jitter DOUBLE;
  DECLARE v_errno INT DEFAULT 0;
  DECLARE v_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
    CALL txmq_i_undo(v_own);
    CALL txmq_i_raise_if_no_tables(v_errno, p_topic);
    RESIGNAL;
  END;
  CALL txmq_i_check_name(p_topic);
  SET v_topic = p_topic;  -- checked: ASCII, and the type of txmq's name columns (their index)
  CALL txmq_i_in_transaction(v_in);
  IF v_in = 1 THEN
    SAVEPOINT txmq_call;
  ELSE
    SET v_own = 1;
    START TRANSACTION;
  END IF;
  CALL txmq_i_group(v_topic, p_group, v_group, v_group_name);
  SELECT partitions, retry_initial_us, retry_multiplier, retry_max_us, retry_jitter
    INTO v_partitions, v_initial, v_multiplier, v_max, v_jitter
    FROM txmq_topics WHERE name = v_topic;
  CALL txmq_i_parse_ids(p_ids);
  UPDATE txmq_i_ids SET found = 1;
  SET v_p = -1;
  each_partition: LOOP
    SET v_next = NULL;
    SELECT MIN(id >> 48) INTO v_next FROM txmq_i_ids WHERE (id >> 48) > v_p AND (id >> 48) < v_partitions;
    IF v_next IS NULL THEN
      LEAVE each_partition;
    END IF;
    SET v_p = v_next;
    SET v_q = CONCAT('`txmq_q_', v_topic, IF(v_group = 0 AND v_p = 0, '', CONCAT('$', v_group, '_', v_p)), '`');
    -- visible_at first: it reads attempts before the increment (retry.cc's delay).
    SET @txmq_sql = CONCAT('UPDATE txmq_i_ids AS i STRAIGHT_JOIN ', v_q, ' AS q ON q.id = i.id ',
      'LEFT JOIN txmq_takes AS t ON t.queue = ? AND t.id = q.id ',
      'SET q.visible_at = UTC_TIMESTAMP(6) + INTERVAL CAST(LEAST(?, ? * POW(?, LEAST(q.attempts, 64))) * ',
      '(1 - RAND() * ?) AS SIGNED) MICROSECOND, q.attempts = q.attempts + GREATEST(IFNULL(t.takes, 1), 1) ',
      'WHERE (i.id >> 48) = ', v_p, ' AND q.visible_at <= UTC_TIMESTAMP(6)');
    SET @txmq_a = v_q, @txmq_b = v_max, @txmq_c = v_initial, @txmq_d = v_multiplier, @txmq_e = v_jitter;
    PREPARE txmq_statement FROM @txmq_sql;
    EXECUTE txmq_statement USING @txmq_a, @txmq_b, @txmq_c, @txmq_d, @txmq_e;
    DEALLOCATE PREPARE txmq_statement;
    SET @txmq_b = NULL, @txmq_c = NULL, @txmq_d = NULL, @txmq_e = NULL;
    CALL txmq_i_forget_takes(v_q);
  END LOOP;
  SET @txmq_sql = NULL, @txmq_a = NULL;
  IF v_own = 1 THEN
    COMMIT;
  END IF;
END

$$
-- ---------------------------------------------------------------------------------------------
-- Sending to an SQS queue of txmq serve by its name (docs/sqs.md, "Sending from SQL"): the
-- queue's settings and SQS's rules as SendMessage applies them (server/sqs/send_actions.cc,
-- messages.cc), the library's rows as serve writes them. serve stores nothing else for a
-- message: MessageId, MD5s, SentTimestamp and SequenceNumber are derived when it is received.
-- ---------------------------------------------------------------------------------------------
-- One message attribute in SQS's shape, checked as check_attribute checks it, into
-- txmq_i_sqs_attributes (user = 1); p_size: its bytes as SQS counts them.
DROP PROCEDURE IF EXISTS txmq_i_sqs_attribute
$$
CREATE PROCEDURE txmq_i_sqs_attribute(IN p_name VARBINARY(1024), IN p_value LONGTEXT CHARACTER SET utf8mb4,
                                      OUT p_size BIGINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_name VARCHAR(1024) CHARACTER SET utf8mb4 DEFAULT CONVERT(p_name USING utf8mb4);
  DECLARE v_type VARBINARY(1024);
  DECLARE v_base VARBINARY(1024);
  DECLARE v_text LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_bytes LONGBLOB;
  IF NOT (v_name COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_.-]{1,256}$') OR LEFT(v_name, 1) = '.'
     OR RIGHT(v_name, 1) = '.' OR LOCATE('..', v_name) > 0 THEN
    CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' is invalid: names are 1 to 256 of A-Z a-z 0-9 _ - .'));
  END IF;
  IF LOWER(v_name) LIKE 'aws.%' OR LOWER(v_name) LIKE 'amazon.%' THEN
    CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' is invalid: AWS. and Amazon. are reserved'));
  END IF;
  IF JSON_TYPE(p_value) <> 'OBJECT' OR JSON_TYPE(JSON_EXTRACT(p_value, '$.DataType')) IS NULL
     OR JSON_TYPE(JSON_EXTRACT(p_value, '$.DataType')) <> 'STRING' THEN
    CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' is invalid: it needs a DataType'));
  END IF;
  SET v_type = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_value, '$.DataType')) AS BINARY);
  SET v_base = SUBSTRING_INDEX(v_type, '.', 1);
  IF v_base NOT IN ('String', 'Number', 'Binary') OR LENGTH(v_type) > 256
     OR NOT (CONVERT(v_type USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_.-]{1,256}$') THEN
    CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''': DataType is String, Number or Binary, and a .suffix of A-Z a-z 0-9 _ - .'));
  END IF;
  IF v_base = 'Binary' THEN
    SET v_text = JSON_UNQUOTE(JSON_EXTRACT(p_value, '$.BinaryValue'));
    -- Strict base64, as util's decoder (FROM_BASE64 passes spaces over).
    IF JSON_TYPE(JSON_EXTRACT(p_value, '$.BinaryValue')) IS NULL
       OR JSON_TYPE(JSON_EXTRACT(p_value, '$.BinaryValue')) <> 'STRING'
       OR LENGTH(v_text) % 4 <> 0 OR NOT (v_text COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9+/]*={0,2}$') THEN
      CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' is invalid: BinaryValue must be base64 text'));
    END IF;
    SET v_bytes = FROM_BASE64(v_text);
  ELSE
    IF JSON_TYPE(JSON_EXTRACT(p_value, '$.StringValue')) IS NULL
       OR JSON_TYPE(JSON_EXTRACT(p_value, '$.StringValue')) <> 'STRING' THEN
      CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' must contain a non-empty StringValue'));
    END IF;
    SET v_text = JSON_UNQUOTE(JSON_EXTRACT(p_value, '$.StringValue'));
    SET v_bytes = CAST(v_text AS BINARY);
    IF v_base = 'Number' AND NOT (v_text COLLATE utf8mb4_bin REGEXP '^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]*)?$') THEN
      CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' is invalid: a Number''s StringValue must be a number'));
    END IF;
  END IF;
  IF v_bytes IS NULL OR LENGTH(v_bytes) = 0 THEN
    CALL txmq_i_raise(CONCAT('message attribute ''', LEFT(v_name, 40), ''' must contain a non-empty value'));
  END IF;
  INSERT INTO txmq_i_sqs_attributes (name, type, value, user) VALUES (p_name, v_type, v_bytes, 1);
  SET p_size = LENGTH(p_name) + LENGTH(v_type) + LENGTH(v_bytes);
END
$$
-- One message to the SQS queue p_queue (its name, or its QueueUrl), in the caller's transaction
-- or one of its own, as SendMessage sends it. p_options: NULL or an object of SendMessage's
-- members: DelaySeconds, MessageGroupId, MessageDeduplicationId, MessageAttributes ({"name":
-- {"DataType": ..., "StringValue" | "BinaryValue": ...}}), MessageSystemAttributes
-- ({"AWSTraceHeader": {...}}). One row: id, MessageId, SequenceNumber (FIFO), MD5OfMessageBody,
-- MD5OfMessageAttributes.
DROP PROCEDURE IF EXISTS txmq_sqs_send
$$
CREATE PROCEDURE txmq_sqs_send(IN p_queue VARCHAR(1024) CHARACTER SET utf8mb4, IN p_body LONGBLOB,
                               IN p_options LONGTEXT CHARACTER SET utf8mb4)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_done TINYINT DEFAULT 0;
  DECLARE v_name VARCHAR(1024) CHARACTER SET utf8mb4;
  DECLARE v_topic VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL;
  DECLARE v_group_queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_fifo TINYINT;
  DECLARE v_settings LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_delay BIGINT;
  DECLARE v_max_size BIGINT;
  DECLARE v_size BIGINT DEFAULT 0;
  DECLARE v_one BIGINT;
  DECLARE v_group VARBINARY(1024) DEFAULT NULL;
  DECLARE v_dedup VARBINARY(1024) DEFAULT NULL;
  DECLARE v_trace VARBINARY(2048) DEFAULT NULL;
  DECLARE v_attribute VARBINARY(1024);
  DECLARE v_blob LONGBLOB DEFAULT NULL;
  DECLARE v_md5_attributes VARCHAR(32) CHARACTER SET ascii DEFAULT NULL;
  DECLARE v_gcl BIGINT UNSIGNED DEFAULT @@SESSION.group_concat_max_len;
  DECLARE v_attribute_name VARBINARY(1024);
  DECLARE v_attribute_type VARBINARY(1024);
  DECLARE v_attribute_value LONGBLOB;
  DECLARE v_l1 VARBINARY(10);
  DECLARE v_l2 VARBINARY(10);
  DECLARE v_l3 VARBINARY(10);
  DECLARE names CURSOR FOR
    SELECT CAST(j.name AS BINARY) FROM JSON_TABLE(JSON_KEYS(JSON_EXTRACT(p_options, '$.MessageAttributes')), '$[*]'
      COLUMNS (name VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j;
  DECLARE entries CURSOR FOR SELECT name, type, value FROM txmq_i_sqs_attributes ORDER BY name;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  -- The queue: the name is the QueueUrl's last path segment (inputs.cc).
  SET v_name = SUBSTRING_INDEX(IFNULL(p_queue, ''), '/', -1);
  IF NOT (v_name COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_-]{1,80}$'
          OR v_name COLLATE utf8mb4_bin REGEXP '^[A-Za-z0-9_-]{1,75}[.]fifo$') THEN
    CALL txmq_i_raise('invalid SQS queue name (1 to 80 characters of A-Z a-z 0-9 _ -, a FIFO queue''s ending .fifo)');
  END IF;
  BEGIN
    DECLARE CONTINUE HANDLER FOR 1146 SET v_topic = NULL;  -- txmq serve never ran here
    SELECT topic, consumer_group, fifo, attributes INTO v_topic, v_group_queue, v_fifo, v_settings
      FROM txmq_sqs_queues WHERE name = CAST(v_name AS BINARY);
  END;
  SET v_done = 0;
  IF v_topic IS NULL THEN
    CALL txmq_i_raise(CONCAT('no SQS queue ''', v_name, ''''));
  END IF;
  IF v_group_queue <> '' THEN
    CALL txmq_i_raise(CONCAT('SQS queue ''', v_name, ''' is a consumer-group queue: send to the queue it reads'));
  END IF;
  SET v_max_size = IFNULL(CAST(JSON_UNQUOTE(JSON_EXTRACT(v_settings, '$.MaximumMessageSize')) AS SIGNED), 1048576);
  SET v_delay = IFNULL(CAST(JSON_UNQUOTE(JSON_EXTRACT(v_settings, '$.DelaySeconds')) AS SIGNED), 0);
  -- The body: text SQS allows (UTF-8 of #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF;
  -- through UTF-16 and back, surrogates and malformed bytes do not come back the same).
  IF p_body IS NULL OR LENGTH(p_body) = 0 THEN
    CALL txmq_i_raise('MessageBody must not be empty');
  END IF;
  IF NOT (CAST(CONVERT(CONVERT(CONVERT(p_body USING utf8mb4) USING utf16) USING utf8mb4) AS BINARY) <=> p_body)
     OR CONVERT(p_body USING utf8mb4) COLLATE utf8mb4_bin REGEXP '[\\x{0}-\\x{8}\\x{B}\\x{C}\\x{E}-\\x{1F}\\x{FFFE}\\x{FFFF}]' THEN
    CALL txmq_i_raise('MessageBody must be UTF-8 of #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF');
  END IF;
  IF p_options IS NOT NULL AND NOT JSON_VALID(p_options) THEN
    CALL txmq_i_raise('options must be a JSON object or NULL (malformed JSON)');
  END IF;
  CREATE TEMPORARY TABLE IF NOT EXISTS txmq_i_sqs_attributes (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    type VARBINARY(1024) NOT NULL,
    value LONGBLOB NOT NULL,
    user TINYINT NOT NULL) ENGINE=InnoDB;
  DELETE FROM txmq_i_sqs_attributes;
  IF p_options IS NOT NULL AND JSON_TYPE(p_options) <> 'NULL' THEN
    IF JSON_TYPE(p_options) <> 'OBJECT' THEN
      CALL txmq_i_raise('options must be a JSON object or NULL');
    END IF;
    SET v_attribute = NULL;
    SELECT CAST(LEFT(j.name, 64) AS BINARY) INTO v_attribute
      FROM JSON_TABLE(JSON_KEYS(p_options), '$[*]' COLUMNS (name VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j
     WHERE BINARY j.name NOT IN ('DelaySeconds', 'MessageGroupId', 'MessageDeduplicationId',
                                 'MessageAttributes', 'MessageSystemAttributes')
     LIMIT 1;
    SET v_done = 0;
    IF v_attribute IS NOT NULL THEN
      CALL txmq_i_raise(CONCAT('unknown field "', CONVERT(v_attribute USING utf8mb4), '" (see docs/sqs.md, Sending from SQL)'));
    END IF;
    -- DelaySeconds: a FIFO queue takes 0 only (its queue's DelaySeconds applies).
    IF COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.DelaySeconds')), 'NULL') <> 'NULL' THEN
      IF JSON_TYPE(JSON_EXTRACT(p_options, '$.DelaySeconds')) NOT IN ('INTEGER', 'UNSIGNED INTEGER')
         OR CAST(JSON_EXTRACT(p_options, '$.DelaySeconds') AS DECIMAL(30, 0)) NOT BETWEEN 0 AND 31622400 THEN
        CALL txmq_i_raise('DelaySeconds must be a whole number from 0 to 31622400');
      END IF;
      SET v_one = CAST(JSON_EXTRACT(p_options, '$.DelaySeconds') AS SIGNED);
      IF v_fifo = 1 AND v_one <> 0 THEN
        CALL txmq_i_raise('a FIFO queue takes DelaySeconds 0 only (its queue''s DelaySeconds applies)');
      ELSEIF v_fifo = 0 THEN
        SET v_delay = v_one;
      END IF;
    END IF;
    -- MessageGroupId, MessageDeduplicationId: 1 to 128 of ASCII alphanumerics and punctuation.
    IF COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageGroupId')), 'NULL') <> 'NULL' THEN
      SET v_group = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_options, '$.MessageGroupId')) AS BINARY);
      IF JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageGroupId')) <> 'STRING'
         OR NOT (CONVERT(v_group USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^[!-~]{1,128}$') THEN
        CALL txmq_i_raise('MessageGroupId must be 1 to 128 characters of ASCII alphanumerics and punctuation');
      END IF;
    END IF;
    IF COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageDeduplicationId')), 'NULL') <> 'NULL' THEN
      SET v_dedup = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_options, '$.MessageDeduplicationId')) AS BINARY);
      IF JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageDeduplicationId')) <> 'STRING'
         OR NOT (CONVERT(v_dedup USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^[!-~]{1,128}$') THEN
        CALL txmq_i_raise('MessageDeduplicationId must be 1 to 128 characters of ASCII alphanumerics and punctuation');
      END IF;
    END IF;
    -- MessageAttributes: at most 10.
    IF COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageAttributes')), 'NULL') <> 'NULL' THEN
      IF JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageAttributes')) <> 'OBJECT' THEN
        CALL txmq_i_raise('MessageAttributes must be an object');
      END IF;
      IF JSON_LENGTH(JSON_EXTRACT(p_options, '$.MessageAttributes')) > 10 THEN
        CALL txmq_i_raise(CONCAT(JSON_LENGTH(JSON_EXTRACT(p_options, '$.MessageAttributes')),
                                 ' message attributes are over the limit of 10'));
      END IF;
      OPEN names;
      each_name: LOOP
        FETCH names INTO v_attribute;
        IF v_done = 1 THEN
          LEAVE each_name;
        END IF;
        CALL txmq_i_sqs_attribute(v_attribute, JSON_EXTRACT(p_options, CONCAT('$.MessageAttributes.',
          JSON_QUOTE(CONVERT(v_attribute USING utf8mb4)))), v_one);
        SET v_size = v_size + v_one;
      END LOOP;
      CLOSE names;
      SET v_done = 0;
    END IF;
    -- MessageSystemAttributes: AWSTraceHeader only.
    IF COALESCE(JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageSystemAttributes')), 'NULL') <> 'NULL' THEN
      IF JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageSystemAttributes')) <> 'OBJECT'
         OR JSON_LENGTH(JSON_EXTRACT(p_options, '$.MessageSystemAttributes')) <> 1
         OR JSON_EXTRACT(p_options, '$.MessageSystemAttributes.AWSTraceHeader') IS NULL
         OR JSON_UNQUOTE(JSON_EXTRACT(p_options, '$.MessageSystemAttributes.AWSTraceHeader.DataType')) <> 'String'
         OR JSON_TYPE(JSON_EXTRACT(p_options, '$.MessageSystemAttributes.AWSTraceHeader.StringValue')) <> 'STRING' THEN
        CALL txmq_i_raise('MessageSystemAttributes takes AWSTraceHeader, with DataType String and a StringValue');
      END IF;
      SET v_trace = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_options, '$.MessageSystemAttributes.AWSTraceHeader.StringValue')) AS BINARY);
      IF NOT (CONVERT(v_trace USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^[ -~]{1,1024}$') THEN
        CALL txmq_i_raise('AWSTraceHeader must be 1 to 1024 printable ASCII characters');
      END IF;
    END IF;
  END IF;
  IF LENGTH(p_body) + v_size > v_max_size THEN
    CALL txmq_i_raise(CONCAT('message of ', LENGTH(p_body) + v_size, ' bytes is over SQS queue ''',
                             v_name, '''''s MaximumMessageSize of ', v_max_size));
  END IF;
  -- SQS's MD5 of the user's attributes, in name order (digests.cc), before the system's join.
  IF v_size > 0 THEN
    SET SESSION group_concat_max_len = 1073741824;
    SELECT MD5(GROUP_CONCAT(CONCAT(UNHEX(LPAD(HEX(LENGTH(name)), 8, '0')), name,
                                   UNHEX(LPAD(HEX(LENGTH(type)), 8, '0')), type,
                                   IF(type LIKE 'Binary%', UNHEX('02'), UNHEX('01')),
                                   UNHEX(LPAD(HEX(LENGTH(value)), 8, '0')), value)
                            ORDER BY name SEPARATOR ''))
      INTO v_md5_attributes FROM txmq_i_sqs_attributes WHERE user = 1;
    SET SESSION group_concat_max_len = v_gcl;
  END IF;
  IF v_fifo = 1 THEN
    IF v_group IS NULL THEN
      CALL txmq_i_raise('a FIFO queue needs MessageGroupId');
    END IF;
    IF v_dedup IS NULL THEN
      IF IFNULL(JSON_UNQUOTE(JSON_EXTRACT(v_settings, '$.ContentBasedDeduplication')), '') <> 'true' THEN
        CALL txmq_i_raise(CONCAT('FIFO queue ''', v_name, ''' needs MessageDeduplicationId (ContentBasedDeduplication is off)'));
      END IF;
      SET v_dedup = CAST(SHA2(p_body, 256) AS BINARY);
    END IF;
    INSERT INTO txmq_i_sqs_attributes (name, type, value, user)
      VALUES ('AWS.SQS.MessageDeduplicationId', 'String', v_dedup, 0);
    IF IFNULL(JSON_UNQUOTE(JSON_EXTRACT(v_settings, '$.DeduplicationScope')), '') = 'messageGroup' THEN
      SET v_dedup = CONCAT(v_group, UNHEX('0A'), v_dedup);
      IF LENGTH(v_dedup) > 255 THEN
        CALL txmq_i_raise('MessageGroupId and MessageDeduplicationId together are over 254 bytes');
      END IF;
    END IF;
  ELSE
    IF v_dedup IS NOT NULL THEN
      CALL txmq_i_raise('a standard queue takes no MessageDeduplicationId');
    END IF;
    -- A fair queue's tenant. A queue becomes fair with its first MessageGroupId through SQS
    -- (an online change of its tables): here, in the caller's transaction, no DDL may run.
    IF v_group IS NOT NULL AND NOT EXISTS (SELECT 1 FROM txmq_topics WHERE name = v_topic AND fair = 1) THEN
      CALL txmq_i_raise(CONCAT('queue ', v_name, ' is not fair yet: send its first MessageGroupId through SQS, or run txmq topic set ', v_topic, ' --fair'));
    END IF;
  END IF;
  IF v_trace IS NOT NULL THEN
    INSERT INTO txmq_i_sqs_attributes (name, type, value, user)
      VALUES ('AWS.SQS.AWSTraceHeader', 'String', v_trace, 0);
  END IF;
  -- The library's encoding (attributes.cc): version 1, in name order, varint lengths.
  IF EXISTS (SELECT 1 FROM txmq_i_sqs_attributes) THEN
    SET v_blob = UNHEX('01');
    OPEN entries;
    each_entry: LOOP
      FETCH entries INTO v_attribute_name, v_attribute_type, v_attribute_value;
      IF v_done = 1 THEN
        LEAVE each_entry;
      END IF;
      CALL txmq_i_varint(LENGTH(v_attribute_name), v_l1);
      CALL txmq_i_varint(LENGTH(v_attribute_type), v_l2);
      CALL txmq_i_varint(LENGTH(v_attribute_value), v_l3);
      SET v_blob = CONCAT(v_blob, v_l1, v_attribute_name, v_l2, v_attribute_type, v_l3, v_attribute_value);
    END LOOP;
    CLOSE entries;
  END IF;
  CALL txmq_i_stage();
  INSERT INTO txmq_i_staged (n, payload, msg_key, dedup_key, delay_us, attributes, attributes_size, tenant)
    VALUES (1, p_body, IF(v_fifo = 1, v_group, NULL), IF(v_fifo = 1, v_dedup, NULL),
            v_delay * 1000000, v_blob, v_size, IF(v_fifo = 1, NULL, v_group));
  CALL txmq_i_send_staged(v_topic, 0, IF(v_fifo = 1, 2, 1), v_md5_attributes);
END
$$
-- Made last: its name says which text of this file a database holds (routines_installed). A
-- change to the routines renames it (txmq_i_routines_N), so that clients install the new text
-- into a database whose schema version stays.
DROP PROCEDURE IF EXISTS txmq_i_routines_2
$$
DROP PROCEDURE IF EXISTS txmq_i_routines_3
$$
DROP PROCEDURE IF EXISTS txmq_i_routines_4
$$
CREATE PROCEDURE txmq_i_routines_4()
  NO SQL SQL SECURITY DEFINER
BEGIN
END
