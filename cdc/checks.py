"""Startup checks against the server, each failing with what to change; binlog position queries."""

from __future__ import annotations

import re

from sqlalchemy import Connection

from cdc.connection import is_mariadb
from cdc.errors import ConfigurationError
from cdc.offsets import BinlogPosition

# Wanted values; None: any value, but the variable must exist (it marks MySQL 8.0.1+ / MariaDB 10.5+).
# Any binlog_row_metadata will do (FULL, MINIMAL, MariaDB's NO_LOG): below FULL, column names, signedness,
# charsets, ENUM/SET members and primary keys come from the schema history (cdc.schema.columns).
_REQUIRED = {"binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": None}


def _variables(conn: Connection) -> dict[str, str]:
    rows = conn.exec_driver_sql(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'log_bin', 'binlog_format', 'binlog_row_image',"
        " 'binlog_row_metadata')").fetchall()
    return {str(name).lower(): str(value) for name, value in rows}


def check_server(conn: Connection) -> str:
    """Binlog settings the source depends on. Returns the server version string."""
    v = _variables(conn)
    version = v.get("version", "")
    if v.get("log_bin", "OFF").upper() not in ("ON", "1"):
        raise ConfigurationError("binary logging is off on the server: start it with --log-bin "
                                 "(log_bin=ON) and --server-id, then restart the source")
    problems = []
    for name, wanted in _REQUIRED.items():
        have = v.get(name)
        if have is None:
            problems.append(f"the server has no {name} variable (version {version}): binlake needs "
                            "MySQL 8.0.1+ or MariaDB 10.5+")
        elif wanted is not None and have.upper() != wanted:
            problems.append(f"{name} is {have}: set {name}={wanted} (SET GLOBAL {name}='{wanted}' and in the "
                            "server config), then restart the source")
    if problems:
        raise ConfigurationError("; ".join(problems))
    return version


def check_gtids(conn: Connection, why: str) -> None:
    """GTIDs on: MySQL's gtid_mode=ON (MariaDB always writes GTIDs). `why`: what needs them."""
    version = str(conn.exec_driver_sql("SELECT VERSION()").scalar())
    if is_mariadb(version):
        return
    mode = str(conn.exec_driver_sql("SELECT @@GLOBAL.gtid_mode").scalar()).upper()
    if mode != "ON":
        raise ConfigurationError(f"{why} needs GTIDs, and gtid_mode is {mode} on the server: set gtid_mode=ON and "
                                 "enforce_gtid_consistency=ON (in the server config, or step by step with SET "
                                 "GLOBAL: OFF_PERMISSIVE, ON_PERMISSIVE, ON), then restart the source")


_GRANT = re.compile(r"^GRANT (.+?) ON (\S+) TO ", re.I)


def check_privileges(conn: Connection) -> None:
    """REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR on MariaDB) and SELECT."""
    global_privs: set[str] = set()
    has_db_select = False
    for (grant,) in conn.exec_driver_sql("SHOW GRANTS FOR CURRENT_USER()").fetchall():
        m = _GRANT.match(str(grant))
        if not m:
            continue
        privs = {p.strip().upper() for p in m.group(1).split(",")}
        if m.group(2) == "*.*":
            global_privs |= privs
        elif "SELECT" in privs or "ALL PRIVILEGES" in privs:
            has_db_select = True
    if "ALL PRIVILEGES" in global_privs:
        return
    missing = []
    if not global_privs & {"REPLICATION SLAVE", "REPLICATION REPLICA"}:   # (MySQL 8.4+ accepts both names)
        missing.append("REPLICATION SLAVE")
    if not global_privs & {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}:
        missing.append("REPLICATION CLIENT")
    if "SELECT" not in global_privs and not has_db_select:
        missing.append("SELECT")
    if missing:
        user = conn.exec_driver_sql("SELECT CURRENT_USER()").scalar()
        who = "'{}'@'{}'".format(*str(user).rsplit("@", 1))
        raise ConfigurationError(f"user {who} lacks {', '.join(missing)}: run GRANT {', '.join(missing)} ON *.* "
                                 f"TO {who} (SELECT may be granted per database instead)")


def binlog_files(conn: Connection) -> dict[str, int]:
    return {str(row[0]): int(row[1]) for row in conn.exec_driver_sql("SHOW BINARY LOGS").fetchall()}


def position_available(conn: Connection, position: BinlogPosition) -> bool:
    size = binlog_files(conn).get(position.file)
    return size is not None and position.pos <= size


def _binlog_status_statement(version: str) -> str:
    """MySQL 8.2 renamed SHOW MASTER STATUS, and 8.4 removed the old name; MariaDB keeps it."""
    if is_mariadb(version):
        return "SHOW MASTER STATUS"
    major, minor = (int(n) for n in re.match(r"(\d+)\.(\d+)", version).groups())
    return "SHOW BINARY LOG STATUS" if (major, minor) >= (8, 2) else "SHOW MASTER STATUS"


def current_position(conn: Connection, version: str) -> tuple[BinlogPosition, str]:
    """The server's binlog end and its executed GTIDs."""
    mariadb = is_mariadb(version)
    row = conn.exec_driver_sql(_binlog_status_statement(version)).fetchone()
    if row is None:
        raise ConfigurationError("binary logging is off on the server: start it with --log-bin")
    gtids = conn.exec_driver_sql("SELECT @@gtid_binlog_pos" if mariadb else "SELECT @@gtid_executed").scalar()
    return BinlogPosition(str(row[0]), int(row[1])), str(gtids or "").replace("\n", "")
