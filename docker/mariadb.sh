#!/bin/sh
# MariaDB with the binlog the connector reads (the settings sandbox.sql uses); the data directory
# is a named volume, initialized on first start.
set -e
DATA=/var/lib/binlake/mysql
if [ ! -d "$DATA/mysql" ]; then
  mariadb-install-db --user=mysql --datadir="$DATA" --auth-root-authentication-method=normal --skip-test-db >/dev/null
fi
exec mariadbd --user=mysql --datadir="$DATA" --bind-address=0.0.0.0 --port=3306 --socket=/run/mysqld/mysqld.sock \
  --log-bin=binlog --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL --server-id=1 \
  --skip-name-resolve --init-file=/opt/binlake/docker/mariadb-init.sql
