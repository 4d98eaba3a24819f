"""Fixtures that start throwaway MariaDB servers (binlake.sandbox; never the machine's own server on 3306).

`mariadb` is one binlog-enabled server for the whole session (each test works in its own database);
`mariadb_factory(**options)` starts extra servers with other settings (no binlog, STATEMENT format).
Every server gets its own datadir, socket and free loopback port, and a `cdc` user with exactly the
privileges the source needs. Test directories import these into their conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.sandbox import BINLOG_OPTIONS, MARIADBD, MariaDB, initialize_datadir, start_mariadb


@pytest.fixture(scope="session")
def mariadb_template(tmp_path_factory) -> Path:
    if not Path(MARIADBD).exists():
        pytest.fail("mariadbd is not installed; run `make setup` (it installs the Debian package mariadb-server)")
    template = tmp_path_factory.mktemp("mariadb-template") / "data"
    initialize_datadir(template)
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
