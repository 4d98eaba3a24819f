"""Fixtures of the reference tests: Apache Kafka's own Java tools (testkit.reference), run against a
logcore broker. `make test` fetches their jars (`make reference`)."""

from __future__ import annotations

import pytest

from testkit.reference import MissingReference, classpath
from java_tools import KafkaTools
from sql_fixtures import mariadb, mariadb_template  # noqa: F401  (fixtures)


@pytest.fixture
def reference_jars() -> None:
    try:
        classpath()
    except MissingReference as exc:
        pytest.fail(str(exc))


@pytest.fixture
def kafka_tools(reference_jars, broker) -> KafkaTools:
    return KafkaTools(broker.address)
