#!/bin/sh
# Oracle MySQL as sandbox.sql runs it: at MySQL's own defaults (binlog on, ROW, full row images,
# minimal row metadata, caching_sha2_password) plus GTIDs; the data directory is a named volume,
# initialized on first start (root@localhost without a password, through the socket only).
set -e
DATA=/var/lib/binlake/mysql
if [ ! -d "$DATA/mysql" ]; then
  mysqld --no-defaults --initialize-insecure --datadir="$DATA"
fi
exec mysqld --no-defaults --datadir="$DATA" --bind-address=0.0.0.0 --port=3306 --socket=/run/mysqld/mysqld.sock \
  --pid-file=/run/mysqld/mysqld.pid --mysqlx=OFF --log-bin=binlog --server-id=1 --gtid-mode=ON \
  --enforce-gtid-consistency=ON --skip-name-resolve --init-file=/opt/binlake/docker/mysql-init.sql
