"""Fixtures of the end-to-end tests: MariaDB and MySQL servers (tests/sql_fixtures.py) beside the real broker
(tests/conftest.py) or a three-broker cluster standing in for it, `binlake connect run` processes
stopped at the end of each test, and a schema registry."""

from __future__ import annotations

import pytest

from brokerproc import NO_REBALANCE_DELAY
from testkit.clusterproc import LocalCluster
from testkit.registryproc import RegistryProcess
from e2e_harness import CONNECT_RUN, ConnectorProcess
from sql_fixtures import (mariadb, mariadb_factory, mariadb_template, mysql, mysql_factory,  # noqa: F401
                          mysql_template, server, server_factory, server_kind)  # (fixtures)


@pytest.fixture
def connector(tmp_path):
    """connector(config_path, env=None, args=()) -> a started ConnectorProcess (`connect run CONFIG ARGS`);
    every one is killed at teardown."""
    started: list[ConnectorProcess] = []

    def start(config, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> ConnectorProcess:
        command = [*CONNECT_RUN, str(config), *args] if args else None
        process = ConnectorProcess(config, tmp_path / f"connect-{len(started)}.log", env, command).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def broker(broker_factory):
    """tests/conftest.py's broker, with no initial rebalance delay: a group here (the registry's election) has one
    member."""
    return broker_factory(NO_REBALANCE_DELAY)


@pytest.fixture
def registry(broker, tmp_path):
    """`binlake schema-registry` on `broker`, as a subprocess, for one test."""
    process = RegistryProcess(broker.address, tmp_path / "registry.log").start()
    yield process
    process.kill()


class ClusterAsBroker:
    """Three brokers on a throwaway ZooKeeper where a test takes one broker: `address` is the
    bootstrap list, and `kill` / `start` SIGKILL and restart one of them (broker 0, the first to
    start and so the first controller)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.victim = cluster.brokers[0]

    @property
    def address(self) -> str:
        return self.cluster.bootstrap

    def kill(self) -> None:
        self.victim.kill()

    def start(self) -> None:
        self.victim.start(timeout=60)  # (it waits out its killed session's registration first)


@pytest.fixture
def cluster_broker(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster", 3, {"zookeeper.session.timeout.ms": "6000"}).start()
    yield ClusterAsBroker(cluster)
    cluster.stop()
