"""Fixtures of the end-to-end tests: MariaDB servers (tests/mariadb_fixtures.py) beside the real broker
(tests/conftest.py), and `binlake connect run` processes stopped at the end of each test."""

from __future__ import annotations

import pytest

from e2e_harness import ConnectorProcess
from mariadb_fixtures import mariadb, mariadb_factory, mariadb_template  # noqa: F401  (fixtures)


@pytest.fixture
def connector(tmp_path):
    """connector(config_path, env=None) -> a started ConnectorProcess; every one is killed at teardown."""
    started: list[ConnectorProcess] = []

    def start(config, env: dict[str, str] | None = None) -> ConnectorProcess:
        process = ConnectorProcess(config, tmp_path / f"connect-{len(started)}.log", env).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
