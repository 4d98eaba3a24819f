"""Fixtures that start throwaway MariaDB servers (never the machine's own server on 3306).

`mariadb` is one binlog-enabled server for the whole session (each test works in its own database);
`mariadb_factory(**options)` starts extra servers with other settings (no binlog, STATEMENT format).
Every server gets its own datadir, socket and free loopback port, and a `cdc` user with exactly the
privileges the source needs.
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
import pytest

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
CDC_GRANTS = "SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT"
BINLOG_OPTIONS = {
    "log-bin": "binlog", "binlog-format": "ROW", "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL", "server-id": "1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MariaDB:
    """A running mariadbd; `sql()` runs statements as root, `settings()` gives the cdc user's connection."""

    data_dir: Path
    port: int
    proc: subprocess.Popen
    log_path: Path
    user: str = "cdc"
    password: str = "cdc-secret"
    _dbs: itertools.count = field(default_factory=lambda: itertools.count(1))

    def connect(self, user: str = "root", password: str = "", db: str | None = None) -> pymysql.Connection:
        return pymysql.connect(host="127.0.0.1", port=self.port, user=user, password=password,
                               database=db, autocommit=True, charset="utf8mb4")

    def sql(self, *statements: str, db: str | None = None) -> list[tuple]:
        """Run statements as root; returns the rows of the last one."""
        with self.connect(db=db) as conn, conn.cursor() as cur:
            rows: list[tuple] = []
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall())
            return rows

    def new_database(self) -> str:
        name = f"t{next(self._dbs)}_{uuid.uuid4().hex[:6]}"
        self.sql(f"CREATE DATABASE `{name}`")
        return name

    def settings(self, **overrides) -> dict:
        """A source configuration for the cdc user; tests add name/server_id/filters."""
        base = {"host": "127.0.0.1", "port": self.port, "user": self.user, "password": self.password}
        return {**base, **overrides}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _initialize(data_dir: Path) -> None:
    result = subprocess.run(
        [INSTALL_DB, "--no-defaults", f"--datadir={data_dir}", "--auth-root-authentication-method=normal",
         "--user=root", "--skip-test-db"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")


def start_mariadb(base: Path, template: Path, options: dict[str, str]) -> MariaDB:
    data_dir = base / "data"
    shutil.copytree(template, data_dir)
    port = free_port()
    args = [MARIADBD, "--no-defaults", f"--datadir={data_dir}", f"--port={port}", "--bind-address=127.0.0.1",
            f"--socket={base / 'mysqld.sock'}", f"--pid-file={base / 'mysqld.pid'}", "--user=root",
            "--skip-name-resolve", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M",
            "--max-connections=60", "--performance-schema=OFF"]
    args += [f"--{key}={value}" if value is not None else f"--{key}" for key, value in options.items()]
    log_path = base / "mariadbd.log"
    proc = subprocess.Popen(args, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)
    server = MariaDB(data_dir=data_dir, port=port, proc=proc, log_path=log_path)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"mariadbd exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            server.sql("SELECT 1")
            break
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"mariadbd did not accept connections:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.1)
    server.sql(f"CREATE USER '{server.user}'@'%' IDENTIFIED BY '{server.password}'",
               f"GRANT {CDC_GRANTS} ON *.* TO '{server.user}'@'%'")
    return server


@pytest.fixture(scope="session")
def mariadb_template(tmp_path_factory) -> Path:
    if not Path(MARIADBD).exists():
        pytest.fail("mariadbd is not installed; run `make setup` (it installs the Debian package mariadb-server)")
    template = tmp_path_factory.mktemp("mariadb-template") / "data"
    _initialize(template)
    return template


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory, mariadb_template) -> MariaDB:
    server = start_mariadb(tmp_path_factory.mktemp("mariadb"), mariadb_template, BINLOG_OPTIONS)
    yield server
    server.stop()


@pytest.fixture
def mariadb_factory(tmp_path, mariadb_template):
    started: list[MariaDB] = []

    def make(**options: str | None) -> MariaDB:
        base = tmp_path / f"mariadb{len(started)}"
        base.mkdir()
        server = start_mariadb(base, mariadb_template, {k.replace("_", "-"): v for k, v in options.items()})
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def db(mariadb) -> str:
    """A fresh database on the shared server for one test."""
    return mariadb.new_database()


class Capture:
    """Runs the real source against a test server and decodes what it emits."""

    _server_ids = itertools.count(100)

    def __init__(self, server: MariaDB) -> None:
        self.server = server
        self.stores: dict[int, object] = {}     # schema history per source (server_id), kept across runs

    def config(self, db: str, **overrides) -> dict:
        base = self.server.settings(name="srv", server_id=next(self._server_ids), table_include=[rf"{db}\..*"],
                                    heartbeat_interval_s=0)
        return {**base, **overrides}

    def run(self, config: dict, offset: dict | None = None, store=None, limit: int | None = None, **kwargs):
        """Batches until the source has read everything the server has (or `limit` batches)."""
        from cdc.schema.history import MemoryHistoryStore
        from cdc.source import MySqlSource

        if store is None:
            store = self.stores.setdefault(config["server_id"], MemoryHistoryStore())
        source = MySqlSource(config, store, offset, follow=False, **kwargs)
        batches = []
        for batch in source.batches():
            batches.append(batch)
            if limit is not None and len(batches) >= limit:
                break
        return batches

    @staticmethod
    def records(batches) -> list[dict]:
        import json
        return [{"topic": r.topic, "key": json.loads(r.key) if r.key else None,
                 "value": json.loads(r.value) if r.value is not None else None, "partition": r.partition}
                for b in batches for r in b.records]

    @classmethod
    def changes(cls, batches, topic_suffix: str | None = None) -> list[dict]:
        """Debezium change values (no tombstones, no schema changes), optionally for one table topic."""
        return [r["value"] for r in cls.records(batches)
                if r["value"] is not None and "op" in r["value"]
                and (topic_suffix is None or r["topic"].endswith(topic_suffix))]


@pytest.fixture
def capture(mariadb) -> Capture:
    return Capture(mariadb)
