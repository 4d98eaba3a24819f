"""Throwaway MariaDB and Oracle MySQL servers with the binlog settings CDC needs, for the demo and the tests.

Each server has its own data directory (the socket and pid file live in it), a free loopback port
(never the machine's own server on 3306), row-based binlog with full row images, and a `cdc` user
holding the privileges the source needs. Root has no password on loopback.

    server = start_mariadb(Path("/tmp/x"))          # initializes /tmp/x/data, starts mariadbd
    server = start_mysql(Path("/tmp/y"))            # the same with Oracle MySQL
    server.sql("CREATE DATABASE shop")
    server.stop()

MariaDB is Debian 12's `mariadb-server`, with full row metadata. MySQL runs at its own defaults
(binlog on, ROW, full images, *minimal* row metadata, caching_sha2_password) plus GTIDs, the way it
is deployed. Debian 12 has no MySQL: `make mysql-root` (part of `make setup`) debootstraps a minimal
Debian sid root and installs sid's `mysql-server` (9.x) into it, in `.cache/mysql-root`
(BINLAKE_MYSQL_ROOT overrides). mysqld then runs from that root through the root's own dynamic
loader and libraries (`ROOT/lib64/ld-linux-x86-64.so.2 --library-path ...`): the same binary and
libraries as `chroot ROOT mysqld`, without mounting /proc and /dev into the cache, where a later
`rm -rf .cache` would reach through the mounts, and with data directories at the host's own paths.

Tests initialize one template data directory per server kind and copy it per server (`template=`):
copying is faster than initializing. By hand: `python -m sandbox.sql DIR [--mysql] [--port N]`
runs one in the foreground until Ctrl-C (docs/quickstart.md).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import click
import pymysql

from common.lifetime import die_with_parent

from .process import SandboxError, end_process, free_port, log_tail, run_in_foreground, wait_until_ready

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
MYSQL_ROOT = Path(os.environ.get("BINLAKE_MYSQL_ROOT", Path(__file__).resolve().parents[1] / ".cache" / "mysql-root"))
# REPLICATION SLAVE + REPLICATION CLIENT (BINLOG MONITOR on MariaDB) to follow the binlog, SELECT to
# snapshot, RELOAD or LOCK TABLES for the snapshot's brief lock (docs/cdc.md)
CDC_GRANTS = {"mariadb": "SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT",
              "mysql": "SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, REPLICATION CLIENT"}
BINLOG_OPTIONS: dict[str, str | None] = {
    "log-bin": "binlog", "binlog-format": "ROW", "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL", "server-id": "1",
}
# MySQL's defaults are already ROW, FULL images, binlog on (minimal row metadata); GTIDs as deployed.
MYSQL_OPTIONS: dict[str, str | None] = {
    "log-bin": "binlog", "server-id": "1", "gtid-mode": "ON", "enforce-gtid-consistency": "ON",
}
START_TIMEOUT_S = 60
NAMES = {"mariadb": "MariaDB", "mysql": "MySQL"}


def installed(kind: str = "mariadb") -> bool:
    if kind == "mysql":
        return (MYSQL_ROOT / "usr" / "sbin" / "mysqld").exists()
    return Path(MARIADBD).exists() and Path(INSTALL_DB).exists()


def _missing(kind: str) -> SandboxError:
    if kind == "mysql":
        return SandboxError(f"Oracle MySQL is not in {MYSQL_ROOT}; run `make setup` (its `mysql-root` step "
                            "debootstraps a Debian sid root holding mysql-server)")
    return SandboxError(f"{MARIADBD} is not installed; run `make setup` (it installs the Debian package "
                        "mariadb-server)")


@dataclass
class SqlServer:
    """A running mariadbd or mysqld (`kind`); `sql()` runs statements as root, `settings()` gives the
    cdc user's connection."""

    kind: str                   # "mariadb" or "mysql"
    data_dir: Path
    port: int
    proc: subprocess.Popen
    log_path: Path
    user: str = "cdc"
    password: str = "cdc-secret"
    _dbs: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def name(self) -> str:
        return NAMES[self.kind]

    @property
    def binlog_monitor(self) -> str:
        """The privilege to read binlog positions: BINLOG MONITOR on MariaDB, REPLICATION CLIENT on MySQL."""
        return "REPLICATION CLIENT" if self.kind == "mysql" else "BINLOG MONITOR"

    def binlog_end(self) -> tuple[str, int]:
        """The binlog file and position the server writes next (MySQL 8.4 renamed SHOW MASTER STATUS)."""
        status = "SHOW BINARY LOG STATUS" if self.kind == "mysql" else "SHOW MASTER STATUS"
        file, pos = self.sql(status)[0][:2]
        return str(file), int(pos)

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

    def describe(self) -> str:
        return (f"{self.name} on 127.0.0.1:{self.port} (socket {self.socket_path}), binlog ROW, full row images; "
                f"users root (no password) and {self.user} (password {self.password}); log {self.log_path}\n"
                f"  export MYSQL_PORT={self.port} MYSQL_PASSWORD={self.password}")

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM), or kill after 30 s."""
        end_process(self.proc, 30)


def _mysqld() -> list[str]:
    """mysqld from the sid root, through that root's loader and libraries (see the module doc)."""
    root = MYSQL_ROOT
    libraries = ":".join(str(root / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"))
    mysqld = str(root / "usr" / "sbin" / "mysqld")
    return [str(root / "lib64" / "ld-linux-x86-64.so.2"), "--library-path", libraries, "--argv0", mysqld, mysqld,
            "--no-defaults", f"--basedir={root / 'usr'}",
            f"--lc-messages-dir={root / 'usr' / 'share' / 'mysql'}",
            f"--character-sets-dir={root / 'usr' / 'share' / 'mysql' / 'charsets'}",
            f"--plugin-dir={root / 'usr' / 'lib' / 'mysql' / 'plugin'}"]


def _run_to_end(args: list[str], what: str) -> None:
    # own session: if we are interrupted, the command and what it starts die together
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise SandboxError(f"{what} failed:\n{output}")


def _tmpdir(data_dir: Path) -> str:
    """A temporary directory of the server's own beside its data: servers sharing /tmp collided on
    their internal temporary tables' names under load."""
    path = data_dir.with_name("tmp")
    path.mkdir(parents=True, exist_ok=True)
    return f"--tmpdir={path}"


def initialize_datadir(data_dir: Path, kind: str = "mariadb") -> None:
    if not installed(kind):
        raise _missing(kind)
    if kind == "mysql":
        _run_to_end([*_mysqld(), f"--datadir={data_dir}", _tmpdir(data_dir), "--initialize-insecure", "--user=root"],
                    "mysqld --initialize-insecure")
    else:
        _run_to_end([INSTALL_DB, "--no-defaults", f"--datadir={data_dir}", _tmpdir(data_dir),
                     "--auth-root-authentication-method=normal", "--user=root", "--skip-test-db"], "mariadb-install-db")


def _server_args(kind: str, data_dir: Path, port: int) -> list[str]:
    common = [f"--datadir={data_dir}", f"--port={port}", "--bind-address=127.0.0.1",
              f"--socket={data_dir / 'mysqld.sock'}", f"--pid-file={data_dir / 'mysqld.pid'}", "--user=root",
              "--innodb-buffer-pool-size=64M", "--max-connections=60", "--performance-schema=OFF", _tmpdir(data_dir)]
    if kind == "mysql":   # (names resolved: MySQL's initialized root is root@localhost only)
        return [*_mysqld(), *common, "--mysqlx=OFF", "--secure-file-priv=", "--innodb-redo-log-capacity=100M"]
    return [MARIADBD, "--no-defaults", *common, "--skip-name-resolve", "--innodb-log-file-size=48M"]


def start_server(kind: str, base: Path, template: Path | None = None, options: dict[str, str | None] | None = None,
                 port: int | None = None, tied: bool = False) -> SqlServer:
    """Start a `kind` server ("mariadb" or "mysql") on `base`/data (a copy of `template`, else freshly
    initialized) with `options` (`--key=value`, or `--key` for None; default BINLOG_OPTIONS or
    MYSQL_OPTIONS), on `port` (default: a free one); its log is `base`/<kind>d.log.

    The server runs in its own session, so a Ctrl-C meant for the caller does not reach it: the
    caller stops it (`stop()`), or leaves it running on purpose. `tied`: it dies with the calling
    process even when that is SIGKILLed (common.lifetime; call from the main thread).
    """
    if not installed(kind):
        raise _missing(kind)
    if options is None:
        options = MYSQL_OPTIONS if kind == "mysql" else BINLOG_OPTIONS
    data_dir = base / "data"
    if template is None:
        initialize_datadir(data_dir, kind)
    else:
        shutil.copytree(template, data_dir)
    port = port or free_port()
    args = _server_args(kind, data_dir, port)
    args += [f"--{key}={value}" if value is not None else f"--{key}" for key, value in options.items()]
    log_path = base / f"{kind}d.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                preexec_fn=partial(die_with_parent, os.getpid()) if tied else None)
    server = SqlServer(kind=kind, data_dir=data_dir, port=port, proc=proc, log_path=log_path)
    try:
        _wait_ready(server)
        server.sql(f"CREATE USER '{server.user}'@'%' IDENTIFIED BY '{server.password}'",
                   f"GRANT {CDC_GRANTS[kind]} ON *.* TO '{server.user}'@'%'")
    except BaseException:       # Ctrl-C included: never leave a server nobody will stop
        server.stop()
        raise
    return server


def start_mariadb(base: Path, template: Path | None = None, options: dict[str, str | None] = BINLOG_OPTIONS,
                  port: int | None = None, tied: bool = False) -> SqlServer:
    return start_server("mariadb", base, template, options, port, tied)


def start_mysql(base: Path, template: Path | None = None, options: dict[str, str | None] = MYSQL_OPTIONS,
                port: int | None = None, tied: bool = False) -> SqlServer:
    return start_server("mysql", base, template, options, port, tied)


def _wait_ready(server: SqlServer) -> None:
    def accepts() -> bool:
        try:
            server.sql("SELECT 1")
            return True
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (2003, 2013):   # anything but "not listening yet" will not go away
                raise SandboxError(f"{server.name} refused the connection: {exc}") from None
            return False
    wait_until_ready(server.proc, accepts, server.name, START_TIMEOUT_S, lambda: log_tail(server.log_path))


@click.command()
@click.argument("base", type=click.Path(file_okay=False, path_type=Path))
@click.option("--port", type=int, help="port on 127.0.0.1  [default: a free one]")
@click.option("--mysql", "kind", flag_value="mysql", help="Oracle MySQL (from `make setup`'s sid root)")
@click.option("--mariadb", "kind", flag_value="mariadb", default=True, help="MariaDB  [default]")
def main(base: Path, port: int | None, kind: str) -> None:
    """Run a throwaway MariaDB or MySQL in BASE (its data in BASE/data) until Ctrl-C, then stop it; BASE stays."""
    if (base / "data").exists():
        raise click.ClickException(f"{base / 'data'} exists already; remove it or choose another directory")
    base.mkdir(parents=True, exist_ok=True)
    run_in_foreground(lambda: start_server(kind, base, port=port))


if __name__ == "__main__":
    main()
