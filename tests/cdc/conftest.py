"""Fixtures of the cdc tests: the MariaDB servers (tests/mariadb_fixtures.py), a fresh database per test,
and a capture harness that runs the real source."""

from __future__ import annotations

import pytest

from cdc_harness import Capture
from mariadb_fixtures import mariadb, mariadb_factory, mariadb_template  # noqa: F401  (fixtures)


@pytest.fixture
def db(mariadb) -> str:
    """A fresh database on the shared server for one test."""
    return mariadb.new_database()


@pytest.fixture
def capture(mariadb) -> Capture:
    return Capture(mariadb)
