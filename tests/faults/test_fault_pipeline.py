"""The whole pipeline under faults (issue 34): a MariaDB workload through the mysql connector
(exactly_once delivery) into three brokers, each in a network namespace of its own, while seeded
fault cycles run (testkit/faults: a leader cut off from the brokers, from ZooKeeper or from both, a
follower or the controller cut off, a split, SIGSTOP past the session, SIGKILL and restart), with a
column added half-way; then, the cluster healed, the Spark sink into Delta Lake and PostgreSQL: both
equal MariaDB's tables row for row.

The connector, Spark and the test run in the root namespace, which reaches every broker; the cuts
are between brokers and between brokers and ZooKeeper. RF 3, min.insync.replicas=2.
    FAULT_SEEDS=1,2 FAULT_CYCLES=8 .venv/bin/pytest -m slow tests/faults/test_fault_pipeline.py
"""

from __future__ import annotations

import asyncio
import os
import threading
from types import SimpleNamespace

import pytest

from e2e_harness import ConnectorProcess, wait_until
from mysql_workload import snapshot_done
from sink_harness import Workload, assert_targets_equal_mysql, connector_config, run_sink, sink_config, wait_for_mark
from testkit.faults.nemesis import Nemesis
from testkit.faults.schedule import cycles, heal

SEEDS = [int(s) for s in os.environ.get("FAULT_SEEDS", "1").split(",")]
CYCLES = int(os.environ.get("FAULT_CYCLES", "8"))


@pytest.mark.slow
@pytest.mark.timeout(3600)  # (half an hour was too little on the shared 2-core machine at load 50: the sinks)
@pytest.mark.parametrize("seed", SEEDS)
def test_mysql_equals_delta_and_postgres_after_faults_under_the_whole_pipeline(
        fault_cluster, mariadb, spark, postgres, tmp_path, seed):
    cluster = fault_cluster(config={"min.insync.replicas": "2"})
    brokers = SimpleNamespace(address=cluster.bootstrap)  # (the harness's configs take a broker's address)
    db, name, fmt = mariadb.new_database(), "faults", "debezium"
    workload = Workload(mariadb, db, seed)
    workload.create()
    workload.run(40)  # before the connector starts: the snapshot reads these
    config = connector_config(tmp_path, name, brokers, mariadb, db, fmt, delivery="exactly_once",
                              restart={"initial_backoff_ms": 100, "max_backoff_ms": 2000})
    connector = ConnectorProcess(config, tmp_path / "connect.log").start()
    stop = threading.Event()
    writer = threading.Thread(target=workload.keep_running, args=(stop,), daemon=True)
    try:
        asyncio.run(wait_until(lambda: snapshot_done(brokers.address, name), 180, "the end of the snapshot"))
        writer.start()
        for i, _ in enumerate(cycles(Nemesis(cluster, f"{name}.{db}.types", seed), CYCLES)):
            if i == CYCLES // 2:  # DDL between two faults: the schema history goes through the cluster too
                mariadb.sql(f"ALTER TABLE {db}.orders ADD COLUMN note VARCHAR(20)",
                            f"UPDATE {db}.orders SET note = 'noted' WHERE id % 2 = 0")
        heal(cluster)
        stop.set()
        writer.join(60)
        asyncio.run(wait_for_mark(brokers.address, name, db, workload.mark(), timeout=180))
    finally:
        stop.set()
        connector.kill()
        print("--- the end of the connector's log ---", *connector.log().splitlines()[-40:], sep="\n")

    delta_root, schema = tmp_path / "delta", f"faults_{db}"
    for kind, target in {"delta": {"delta": {"path": str(delta_root)}},
                         "jdbc": {"jdbc": {"url": postgres.url, "user": "binlake", "schema": schema}}}.items():
        run_sink(spark, sink_config(name, brokers, db, fmt, tmp_path / f"ck-{kind}", target))
    assert_targets_equal_mysql(spark, postgres, mariadb, db, delta_root, schema,
                               f" after {CYCLES} fault cycles (seed {seed})")
