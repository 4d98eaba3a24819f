"""Fixtures of the reference tests: Apache Kafka's own Java tools (testkit.reference), run against a
logcore broker, and a `binlake schema-registry` on it for Apicurio's serdes. `make test` fetches their jars
(`make reference`)."""

from __future__ import annotations

import pytest

from testkit.reference import MissingReference, apicurio_classpath, classpath
from testkit.registryproc import RegistryProcess
from java_tools import KafkaTools
from sql_fixtures import mariadb, mariadb_template, mysql, mysql_template, server, server_kind  # noqa: F401


@pytest.fixture
def reference_jars() -> None:
    try:
        classpath()
    except MissingReference as exc:
        pytest.fail(str(exc))


@pytest.fixture
def apicurio_jars() -> str:
    """The reference classpath with Apicurio Registry's serdes and Connect converter."""
    try:
        return apicurio_classpath()
    except MissingReference as exc:
        pytest.fail(str(exc))


@pytest.fixture
def kafka_tools(reference_jars, broker) -> KafkaTools:
    return KafkaTools(broker.address)


@pytest.fixture
def registry(broker, tmp_path):
    """`binlake schema-registry` on the test's broker."""
    process = RegistryProcess(broker.address, tmp_path / "registry.log").start()
    yield process
    process.kill()
