"""Fixtures of the cdc tests: the MariaDB and MySQL servers (tests/sql_fixtures.py), a fresh database per test,
and a capture harness that runs the real source."""

from __future__ import annotations

import pytest

from cdc_harness import Capture
from sql_fixtures import (mariadb, mariadb_factory, mariadb_template, mysql, mysql_factory,  # noqa: F401
                          mysql_template, server, server_factory, server_kind)  # (fixtures)


@pytest.fixture
def db(server) -> str:
    """A fresh database on the shared server for one test."""
    return server.new_database()


@pytest.fixture
def capture(server) -> Capture:
    return Capture(server)
