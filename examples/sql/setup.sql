-- The examples' database and user (examples/sql/README.md). As an administrator, on the server
-- of txmq's database `txmq`, after `txmq topic create orders` (txmq's first command installs
-- its tables and routines):  mysql -u root < examples/sql/setup.sql
CREATE DATABASE shop;
CREATE TABLE shop.orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL,
                          amount INT NOT NULL);
CREATE TABLE shop.invoices (msg_id BIGINT UNSIGNED PRIMARY KEY, order_id BIGINT NOT NULL,
                            amount INT NOT NULL);
CREATE USER 'app'@'localhost' IDENTIFIED BY 'secret';
GRANT SELECT, INSERT, UPDATE, DELETE ON shop.* TO 'app'@'localhost';
-- txmq: the public calls only, nothing on its tables
GRANT EXECUTE ON PROCEDURE txmq.txmq_send TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE txmq.txmq_send_batch TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE txmq.txmq_take TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE txmq.txmq_take_wait TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE txmq.txmq_ack TO 'app'@'localhost';
GRANT EXECUTE ON PROCEDURE txmq.txmq_fail TO 'app'@'localhost';
