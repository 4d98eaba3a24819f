-- Run by mariadbd at every start (--init-file): the users the compose demo needs, idempotently.
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY 'root-secret';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'cdc'@'%' IDENTIFIED BY 'cdc-secret';
GRANT SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT ON *.* TO 'cdc'@'%';
