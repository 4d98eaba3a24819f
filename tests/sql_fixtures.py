"""Fixtures that start throwaway MariaDB and Oracle MySQL servers (sandbox.sql; never the
machine's own server on 3306).

`server` is the binlog-enabled server of the session for the test's parameter: every test that takes
it runs against MariaDB (full row metadata) and against MySQL (its defaults: minimal row metadata,
GTIDs on); each test works in its own database. `mariadb` and `mysql` name one of them.
`server_factory(**options)` starts extra servers of the same kind with other settings (no binlog,
STATEMENT format): `options` are the server's whole option set (`--key=value`, None for `--key`).
Every server gets its own datadir, socket and free loopback port, and a `cdc` user with exactly the
privileges the source needs. Test directories import these into their conftest.py.
"""

from __future__ import annotations

import pytest

from sandbox.process import SandboxError
from sandbox.sql import SqlServer, initialize_datadir, start_server

KINDS = ("mariadb", "mysql")


def by_default_on(kind: str):
    """Run a heavy end-to-end test on `kind` in the default suite and on the other server with `-m slow`:
    for suite time, where the behaviour tested is past the source (the cdc tests run on both by default)."""
    other = next(k for k in KINDS if k != kind)
    return pytest.mark.parametrize("server_kind", [kind, pytest.param(other, marks=pytest.mark.slow)], indirect=True)


def _template(tmp_path_factory, kind: str):
    template = tmp_path_factory.mktemp(f"{kind}-template") / "data"
    try:
        initialize_datadir(template, kind)
    except SandboxError as exc:
        pytest.fail(str(exc))
    return template


@pytest.fixture(scope="session")
def mariadb_template(tmp_path_factory):
    return _template(tmp_path_factory, "mariadb")


@pytest.fixture(scope="session")
def mysql_template(tmp_path_factory):
    return _template(tmp_path_factory, "mysql")


def _session_server(request, tmp_path_factory, kind: str) -> SqlServer:
    template = request.getfixturevalue(f"{kind}_template")
    server = start_server(kind, tmp_path_factory.mktemp(kind), template)
    request.addfinalizer(server.stop)
    return server


@pytest.fixture(scope="session")
def mariadb(request, tmp_path_factory) -> SqlServer:
    return _session_server(request, tmp_path_factory, "mariadb")


@pytest.fixture(scope="session")
def mysql(request, tmp_path_factory) -> SqlServer:
    return _session_server(request, tmp_path_factory, "mysql")


@pytest.fixture(scope="module", params=KINDS)
def server_kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def server(request, server_kind) -> SqlServer:
    return request.getfixturevalue(server_kind)


def _factory(request, tmp_path, kind: str):
    started: list[SqlServer] = []
    template = request.getfixturevalue(f"{kind}_template")

    def make(**options: str | None) -> SqlServer:
        base = tmp_path / f"{kind}{len(started)}"
        base.mkdir()
        server = start_server(kind, base, template, {k.replace("_", "-"): v for k, v in options.items()})
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def server_factory(request, tmp_path, server_kind):
    yield from _factory(request, tmp_path, server_kind)


@pytest.fixture
def mariadb_factory(request, tmp_path):
    yield from _factory(request, tmp_path, "mariadb")


@pytest.fixture
def mysql_factory(request, tmp_path):
    yield from _factory(request, tmp_path, "mysql")
