"""Throwaway MariaDB servers and a harness that runs the real source against them (tests, bench)."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

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


def initialize_datadir(data_dir: Path) -> None:
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
        return [{"topic": r.topic, "key": json.loads(r.key) if r.key else None,
                 "value": json.loads(r.value) if r.value is not None else None, "partition": r.partition}
                for b in batches for r in b.records]

    @classmethod
    def changes(cls, batches, topic_suffix: str | None = None) -> list[dict]:
        """Debezium change values (no tombstones, no schema changes), optionally for one table topic."""
        return [r["value"] for r in cls.records(batches)
                if r["value"] is not None and "op" in r["value"]
                and (topic_suffix is None or r["topic"].endswith(topic_suffix))]
