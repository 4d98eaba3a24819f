"""How the source reaches the server: PyMySQL's connection settings (TLS included), shared by the
SQLAlchemy engine for its ordinary SQL (checks, locks, snapshot reads) and the binlog stream."""

from __future__ import annotations

import ssl

from sqlalchemy import URL, Connection, Engine, create_engine
from sqlalchemy.pool import NullPool

from cdc.config import SourceConfig


def tls_settings(config: SourceConfig) -> dict:
    """PyMySQL's TLS arguments for the config's ssl_mode (PyMySQL 1.2+ prefers TLS by itself)."""
    if config.ssl_mode == "disabled":
        return {"ssl_disabled": True}
    if config.ssl_mode == "preferred":
        return {}
    settings: dict = {"check_hostname": config.ssl_mode == "verify_identity",
                      "verify_mode": ssl.CERT_NONE if config.ssl_mode == "required" else ssl.CERT_REQUIRED}
    if config.ssl_ca:
        settings["ca"] = config.ssl_ca
    if config.ssl_cert:
        settings["cert"], settings["key"] = config.ssl_cert, config.ssl_key
    return {"ssl": settings}


def connection_settings(config: SourceConfig) -> dict:
    """PyMySQL connect() arguments for the source's user."""
    return {"host": config.host, "port": config.port, "user": config.user, "password": config.password,
            **tls_settings(config)}


def make_engine(config: SourceConfig) -> Engine:
    url = URL.create("mysql+pymysql", username=config.user, password=config.password, host=config.host,
                     port=config.port, query={"charset": "utf8mb4"})
    return create_engine(url, poolclass=NullPool, connect_args=tls_settings(config))


def raw_values(conn: Connection) -> Connection:
    """Make PyMySQL hand back the server's text (bytes for binary columns), unconverted: the snapshot maps
    values itself, exactly like the binlog decoder does."""
    conn.connection.dbapi_connection.decoders = {}
    return conn


def is_mariadb(version: str) -> bool:
    return "mariadb" in version.lower()
