-- Run by mysqld at every start (--init-file): the users the compose demo needs, idempotently, with
-- MySQL's default authentication (caching_sha2_password).
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED WITH caching_sha2_password BY 'root-secret';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'cdc'@'%' IDENTIFIED WITH caching_sha2_password BY 'cdc-secret';
GRANT SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc'@'%';
