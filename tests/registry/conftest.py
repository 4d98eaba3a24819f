"""A real broker and real `binlake schema-registry` subprocesses for tests/registry.

One broker and one registry serve a module's tests (each test uses subjects of its own); tests that
restart or add instances start their own on that broker, with a topic and group of their own.
"""

from __future__ import annotations

import itertools

import pytest

from brokerproc import NO_REBALANCE_DELAY, BrokerProcess
from testkit.registryproc import RegistryProcess

@pytest.fixture(scope="module")
def sr_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", config=NO_REBALANCE_DELAY).start()
    yield broker
    broker.kill()


@pytest.fixture(scope="module")
def registry(sr_broker, tmp_path_factory):
    process = RegistryProcess(sr_broker.address, tmp_path_factory.mktemp("registry") / "registry.log").start()
    yield process
    process.kill()


_isolated = itertools.count()


@pytest.fixture
def registry_factory(sr_broker, tmp_path):
    """make(name, *args) starts an instance on `sr_broker`; `topic` and `group` are this test's own."""
    started: list[RegistryProcess] = []
    n = next(_isolated)
    scope = ["--topic", f"_schemas_{n}", "--group-id", f"schema-registry-{n}"]

    def make(name: str, *args: str) -> RegistryProcess:
        started.append(RegistryProcess(sr_broker.address, tmp_path / f"{name}.log", None, *scope, *args).start())
        return started[-1]

    yield make
    for process in started:
        process.kill()
