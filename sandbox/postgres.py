"""A throwaway PostgreSQL server, for the Spark sink's tests, the demo and the benchmarks.

Like `sandbox.sql` for MariaDB: its own data directory, a free loopback port, never the
machine's own server. Debian's `postgresql` package provides the binaries; PostgreSQL refuses to
run as root, so as root the server runs as the package's `postgres` user. The superuser `binlake`
needs no password on loopback (trust), which is fine for a server that lives as long as a test.

    server = start_postgres(Path("/tmp/pg"))
    server.sql("CREATE SCHEMA shop")
    server.stop()

By hand: `python -m sandbox.postgres DIR [--port N]` runs one in the foreground until Ctrl-C.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from common.lifetime import die_with_parent

from .process import SandboxError, foreground_command, free_port, log_tail, wait_until_ready

USER = "binlake"
DATABASE = "warehouse"
START_TIMEOUT_S = 60


def bin_dir() -> Path:
    """The newest installed PostgreSQL's binaries."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise SandboxError("PostgreSQL is not installed; run `make setup` (it installs the Debian package postgresql)")
    return Path(found[-1]).parent


@dataclass
class PostgreSQL:
    data_dir: Path
    port: int
    proc: subprocess.Popen
    log_path: Path
    scratch_dir: Path  # what `stop` removes: the data directory, or as root the directory made to hold it

    @property
    def url(self) -> str:
        """JDBC URL of the warehouse database."""
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{DATABASE}"

    @property
    def dsn(self) -> str:
        """libpq connection string (psycopg)."""
        return f"host=127.0.0.1 port={self.port} user={USER} dbname={DATABASE}"

    def connect(self):
        import psycopg
        return psycopg.connect(self.dsn, autocommit=True)

    def sql(self, *statements: str) -> list[tuple]:
        """Run statements; the rows of the last one (empty when it returns none)."""
        with self.connect() as conn:
            rows: list[tuple] = []
            for statement in statements:
                cur = conn.execute(statement)
                rows = cur.fetchall() if cur.description else []
            return rows

    def describe(self) -> str:
        return (f"PostgreSQL on 127.0.0.1:{self.port}, database {DATABASE}, user {USER} (no password); "
                f"log {self.log_path}\n  psql '{self.dsn}'")

    def stop(self, remove: bool = True) -> None:
        """Fast shutdown (SIGINT), or kill after 30 s; then remove the data directory unless told not to."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if remove:
            shutil.rmtree(self.scratch_dir, ignore_errors=True)



def _as_owner() -> dict:
    """Popen's arguments that run a program as the package's `postgres` user when we are root
    (PostgreSQL will not run as root)."""
    return {"user": "postgres", "group": "postgres", "extra_groups": []} if os.geteuid() == 0 else {}


def _new_data_dir(base: Path) -> tuple[Path, Path]:
    """The data directory to create, and what `stop` removes. Normally both are `base`/data; as
    root the data directory must be one the `postgres` user can reach (a test's tmp directory is
    private to root), so it goes in a directory of its own under the system's temp directory, and
    `stop` removes that whole."""
    if os.geteuid() != 0:
        return base / "data", base / "data"
    scratch = Path(tempfile.mkdtemp(prefix="binlake-pg-"))
    entry = pwd.getpwnam("postgres")
    os.chmod(scratch, 0o711)
    os.chown(scratch, entry.pw_uid, entry.pw_gid)
    return scratch / "data", scratch


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        for root, dirs, files in os.walk(path):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, entry.pw_uid, entry.pw_gid)


def start_postgres(base: Path, port: int | None = None, tied: bool = False) -> PostgreSQL:
    """Start a server on a new data directory, on `port` (default: a free one), with database
    `warehouse`; its log is `base`/postgres.log. `tied`: it dies with the calling process even
    when that is SIGKILLed (common.lifetime)."""
    binaries = bin_dir()
    base.mkdir(parents=True, exist_ok=True)
    data_dir, scratch_dir = _new_data_dir(base)
    data_dir.mkdir()
    _own(data_dir)
    done = subprocess.run([str(binaries / "initdb"), "-D", str(data_dir), "-U", USER, "--auth=trust",
                           "--encoding=UTF8", "--locale=C.UTF-8"], capture_output=True, text=True, **_as_owner())
    if done.returncode != 0:
        raise SandboxError(f"initdb failed:\n{done.stdout}{done.stderr}")
    port = port or free_port()
    log_path = base / "postgres.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(binaries / "postgres"), "-D", str(data_dir), "-p", str(port), "-k", str(data_dir),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=50"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, **_as_owner(),
            preexec_fn=partial(die_with_parent, os.getpid()) if tied else None)  # (after the user change, which would clear it)
    server = PostgreSQL(data_dir, port, proc, log_path, scratch_dir)
    _wait_ready(server)
    return server


def _wait_ready(server: PostgreSQL) -> None:
    import psycopg

    def accepts() -> bool:  # (and has the warehouse database, made by the first connection)
        try:
            with psycopg.connect(f"host=127.0.0.1 port={server.port} user={USER} dbname=postgres",
                                 autocommit=True) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
                    conn.execute(f"CREATE DATABASE {DATABASE}")
            return True
        except psycopg.OperationalError:
            return False
    wait_until_ready(server.proc, accepts, "postgres", START_TIMEOUT_S, lambda: log_tail(server.log_path),
                     stop=server.stop)


main = foreground_command(start_postgres, "Run a throwaway PostgreSQL (its log in BASE) until Ctrl-C, then stop it and "
                                          "remove its data.")


if __name__ == "__main__":
    main()
