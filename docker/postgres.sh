#!/bin/sh
# PostgreSQL, the warehouse the sink merges into: user binlake, database warehouse, trust inside the
# compose network only (a demo; nothing is published to the host).
set -e
BIN=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
DATA=/var/lib/binlake/postgres
if [ ! -s "$DATA/PG_VERSION" ]; then
  "$BIN/initdb" -D "$DATA" -U binlake --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null  # (as sandbox.postgres: psycopg reads SQL_ASCII text as bytes)
  echo "host all all 0.0.0.0/0 trust" >> "$DATA/pg_hba.conf"
  "$BIN/pg_ctl" -D "$DATA" -o "-c listen_addresses='' -k /tmp" -w start >/dev/null
  "$BIN/psql" -h /tmp -U binlake -d postgres -qc "CREATE DATABASE warehouse"
  "$BIN/pg_ctl" -D "$DATA" -w stop >/dev/null
fi
exec "$BIN/postgres" -D "$DATA" -c listen_addresses='*' -k /tmp
