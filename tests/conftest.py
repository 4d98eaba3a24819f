"""Fixtures that start real servers: a `binlake broker` subprocess on a free loopback port."""

from __future__ import annotations

import os

import pytest

from brokerproc import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(config: dict[str, str] | None = None, name: str = "broker") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, config=config)
        started.append(b.start())
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture
def kcat() -> str:
    path = "/usr/bin/kcat"
    if not os.path.exists(path):
        pytest.fail("kcat is not installed; run `make setup` (it installs the Debian package kcat)")
    return path
