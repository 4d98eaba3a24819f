"""Seeded fault cycles on a three-broker cluster (RF 3, min.insync.replicas=2, unclean election off)
with the queue and transactional workloads running, then every checker (testkit/faults): no
anomaly of any class, and no acknowledged write held by fewer than two brokers at any heal.

The default suite runs one cycle of the fault issue 34 found (a leader cut off from the other
brokers, ZooKeeper still reachable, acknowledged writes only it held); the schedules are `slow`:
    FAULT_SEEDS=1,2,3 FAULT_CYCLES=12 .venv/bin/pytest -m slow tests/faults/test_fault_schedule.py
"""

from __future__ import annotations

import os

import pytest

from testkit.faults import nemesis

SEEDS = [int(s) for s in os.environ.get("FAULT_SEEDS", "1,2,3").split(",")]
CYCLES = int(os.environ.get("FAULT_CYCLES", "12"))


def test_a_leader_cut_off_from_the_other_brokers_acknowledges_nothing_only_it_holds(fault_cluster):
    cluster = fault_cluster()
    report = nemesis.run(cluster, seed=34, cycles=1, kinds=("leader-brokers",))
    print(report.summary())
    assert report.anomalies == {}
    assert report.acked > 0.9 * report.sent
    assert report.txns["committed"] > 0 and report.txns["aborted"] > 0
    cycle = report.cycles[0]
    assert cycle.heal_to_ack is not None and cycle.heal_to_ack < 15


@pytest.mark.slow
def test_a_leader_cut_off_for_longer_than_a_minute_leaves_no_duplicate(fault_cluster):
    """Seed 14 of the first 20 x 12 run: 47 values written twice, by one producer under two epochs.
    At load 50 some writes waited past the producer's delivery timeout (then 60 s): librdkafka gave
    them up, bumped its epoch and sent the writes queued behind them, which the isolated leader had
    already appended, again under new sequence numbers. The workload's producer now waits as long
    as librdkafka's default (5 minutes): no write times out, none is duplicated."""
    cluster = fault_cluster()
    report = nemesis.run(cluster, seed=14, cycles=1, kinds=("leader-brokers",), fault_s=70, transactions=False)
    print(report.summary())
    assert report.anomalies == {}
    assert report.timed_out == 0 and report.producers_replaced == 0


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_fault_cycles_leave_no_anomaly(fault_cluster, seed):
    cluster = fault_cluster()
    report = nemesis.run(cluster, seed=seed, cycles=CYCLES)
    print(report.summary())
    assert report.anomalies == {}
    assert all(c.heal_to_ack is not None for c in report.cycles), "a partition stayed unavailable after a heal"
