"""A throwaway MariaDB server with the binlog settings CDC needs, for the demo and the tests.

Each server has its own data directory (the socket and pid file live in it), a free loopback port
(never the machine's own server on 3306), row-based binlog with full row images and full metadata,
and a `cdc` user holding the privileges the source needs. Root has no password on loopback.

    server = start_mariadb(Path("/tmp/x"))          # initializes /tmp/x/data, starts mariadbd
    server.sql("CREATE DATABASE shop")
    server.stop()

Tests initialize one template data directory and copy it per server (`template=`): copying is
faster than `mariadb-install-db`. By hand: `python -m binlake.sandbox DIR [--port N]` runs one in the
foreground until Ctrl-C (docs/quickstart.md).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import click
import pymysql

from .lifetime import die_with_parent

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
# REPLICATION SLAVE + REPLICATION CLIENT (BINLOG MONITOR on MariaDB) to follow the binlog, SELECT to
# snapshot, RELOAD or LOCK TABLES for the snapshot's brief lock (docs/cdc.md)
CDC_GRANTS = "SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT"
BINLOG_OPTIONS: dict[str, str | None] = {
    "log-bin": "binlog", "binlog-format": "ROW", "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL", "server-id": "1",
}
START_TIMEOUT_S = 60


class SandboxError(RuntimeError):
    """The throwaway server could not be set up; the message carries the server's own output."""


def run_in_foreground(start, describe) -> None:
    """The `python -m binlake.<sandbox>` commands: start a server (`start()`), say how to reach it
    (`describe(server)`), and stop it on Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the server like Ctrl-C
    try:
        server = start()
    except SandboxError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{describe(server)}\nCtrl-C stops it.")
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def end_process(proc: subprocess.Popen | None, grace_s: float | None = None) -> None:
    """SIGTERM and up to `grace_s` for the process to finish its shutdown, then SIGKILL; SIGKILL at
    once without `grace_s`. Returns once it has exited."""
    if proc is None:
        return
    if proc.poll() is None and grace_s is not None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def installed() -> bool:
    return Path(MARIADBD).exists() and Path(INSTALL_DB).exists()


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

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "mysqld.sock"

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
        """Create a database with a name no other caller gets, e.g. one per test."""
        name = f"t{next(self._dbs)}_{uuid.uuid4().hex[:6]}"
        self.sql(f"CREATE DATABASE `{name}`")
        return name

    def settings(self, **overrides) -> dict:
        """The cdc user's connection (host, port, user, password), plus `overrides`."""
        base = {"host": "127.0.0.1", "port": self.port, "user": self.user, "password": self.password}
        return {**base, **overrides}

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM), or kill after 30 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def initialize_datadir(data_dir: Path) -> None:
    # own session: if we are interrupted, the script and the bootstrap mariadbd it runs die together
    proc = subprocess.Popen(
        [INSTALL_DB, "--no-defaults", f"--datadir={data_dir}", "--auth-root-authentication-method=normal",
         "--user=root", "--skip-test-db"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        output, _ = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise SandboxError(f"mariadb-install-db failed:\n{output}")


def start_mariadb(base: Path, template: Path | None = None, options: dict[str, str | None] = BINLOG_OPTIONS,
                  port: int | None = None, tied: bool = False) -> MariaDB:
    """Start mariadbd on `base`/data (a copy of `template`, else freshly initialized) with `options`
    (`--key=value`, or `--key` for None), on `port` (default: a free one); its log is `base`/mariadbd.log.

    The server runs in its own session, so a Ctrl-C meant for the caller does not reach it: the
    caller stops it (`stop()`), or leaves it running on purpose. `tied`: it dies with the calling
    process even when that is SIGKILLed (binlake.lifetime; call from the main thread).
    """
    if not installed():
        raise SandboxError(f"{MARIADBD} is not installed; run `make setup` (it installs the Debian package "
                           "mariadb-server)")
    data_dir = base / "data"
    if template is None:
        initialize_datadir(data_dir)
    else:
        shutil.copytree(template, data_dir)
    port = port or free_port()
    args = [MARIADBD, "--no-defaults", f"--datadir={data_dir}", f"--port={port}", "--bind-address=127.0.0.1",
            f"--socket={data_dir / 'mysqld.sock'}", f"--pid-file={data_dir / 'mysqld.pid'}", "--user=root",
            "--skip-name-resolve", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M",
            "--max-connections=60", "--performance-schema=OFF"]
    args += [f"--{key}={value}" if value is not None else f"--{key}" for key, value in options.items()]
    log_path = base / "mariadbd.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=die_with_parent() if tied else None)
    server = MariaDB(data_dir=data_dir, port=port, proc=proc, log_path=log_path)
    try:
        _wait_ready(server)
        server.sql(f"CREATE USER '{server.user}'@'%' IDENTIFIED BY '{server.password}'",
                   f"GRANT {CDC_GRANTS} ON *.* TO '{server.user}'@'%'")
    except BaseException:       # Ctrl-C included: never leave a server nobody will stop
        server.stop()
        raise
    return server


def _wait_ready(server: MariaDB) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.proc.poll() is not None:
            raise SandboxError(f"mariadbd exited with {server.proc.returncode}:\n"
                               f"{server.log_path.read_text(errors='replace')}")
        try:
            server.sql("SELECT 1")
            return
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise SandboxError(f"mariadbd did not accept connections within {START_TIMEOUT_S} s:\n"
                                   f"{server.log_path.read_text(errors='replace')}") from None
            time.sleep(0.1)


@click.command()
@click.argument("base", type=click.Path(file_okay=False, path_type=Path))
@click.option("--port", type=int, help="port on 127.0.0.1  [default: a free one]")
def main(base: Path, port: int | None) -> None:
    """Run a throwaway MariaDB in BASE (its data in BASE/data) until Ctrl-C, then stop it; BASE stays."""
    if (base / "data").exists():
        raise click.ClickException(f"{base / 'data'} exists already; remove it or choose another directory")
    base.mkdir(parents=True, exist_ok=True)
    run_in_foreground(lambda: start_mariadb(base, port=port), lambda server: (
        f"MariaDB on 127.0.0.1:{server.port} (socket {server.socket_path}), binlog ROW/FULL/FULL; "
        f"users root (no password) and {server.user} (password {server.password}); log {server.log_path}\n"
        f"  export MYSQL_PORT={server.port} MYSQL_PASSWORD={server.password}"))


if __name__ == "__main__":
    main()
