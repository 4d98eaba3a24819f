"""Fault tests (issue 34): brokers and ZooKeeper in network namespaces of their own, faults from
testkit/faults. They need root (namespaces, nftables, mounts); elsewhere they are skipped with the
reason. The whole-pipeline test takes MariaDB (tests/sql_fixtures.py) and the end-to-end harness
(tests/e2e: the connector process, the sink workload and comparisons)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # testkit/, a test-only package of this tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from sql_fixtures import mariadb, mariadb_template  # noqa: E402, F401 (fixtures)
from testkit.faults.cluster import FaultCluster  # noqa: E402
from testkit.faults.netns import available  # noqa: E402


def pytest_collection_modifyitems(items):
    if reason := available():
        for item in items:
            if str(item.fspath).startswith(str(Path(__file__).parent)):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def fault_cluster(tmp_path):
    """fault_cluster(brokers=3, config=None, before_start=None) -> a started FaultCluster, stopped
    (namespaces and all) at teardown; its brokers' logs are printed when the test fails."""
    started: list[FaultCluster] = []

    def make(brokers: int = 3, config: dict[str, str] | None = None, before_start=None) -> FaultCluster:
        cluster = FaultCluster(tmp_path / f"cluster-{len(started)}", brokers, config, before_start)
        started.append(cluster)
        return cluster.start()

    yield make
    for cluster in started:
        cluster.stop()
        for broker in cluster.brokers:
            print(f"--- the end of broker {broker.broker_id}'s log ({broker.log_path}) ---",
                  *broker.log().splitlines()[-40:], sep="\n")
