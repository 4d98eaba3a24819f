"""SQLAlchemy engines for the source's ordinary SQL (checks, locks, snapshot reads)."""

from __future__ import annotations

from sqlalchemy import URL, Connection, Engine, create_engine
from sqlalchemy.pool import NullPool

from cdc.config import SourceConfig


def make_engine(config: SourceConfig) -> Engine:
    url = URL.create("mysql+pymysql", username=config.user, password=config.password, host=config.host,
                     port=config.port, query={"charset": "utf8mb4"})
    return create_engine(url, poolclass=NullPool)


def raw_values(conn: Connection) -> Connection:
    """Make PyMySQL hand back the server's text (bytes for binary columns), unconverted: the snapshot maps
    values itself, exactly like the binlog decoder does."""
    conn.connection.dbapi_connection.decoders = {}
    return conn


def is_mariadb(version: str) -> bool:
    return "mariadb" in version.lower()
