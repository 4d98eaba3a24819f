"""The seeded fault schedule of test_fault_schedule.py against Apache Kafka 4.1 in KRaft mode: three
nodes, each a broker and a controller voter, each in a network namespace of its own
(testkit/faults/kraft.py), RF 3, min.insync.replicas=2, unclean election off, the same workloads
and checkers, so that logcore's results have the real thing's beside them (bench/faults_versus.py
prints both, seed by seed). Needs root and `make reference`; all `slow` (a KRaft cluster takes
30-40 s to start here):

    FAULT_SEEDS=1,2,3 FAULT_CYCLES=12 .venv/bin/pytest -m slow tests/faults/test_fault_schedule_kafka.py
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import KafkaError, Producer

from testkit import reference
from testkit.faults import nemesis
from testkit.faults.kraft import KraftFaultCluster

SEEDS = [int(s) for s in os.environ.get("FAULT_SEEDS", "1,2,3").split(",")]
CYCLES = int(os.environ.get("FAULT_CYCLES", "12"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not reference.available(), reason="Apache Kafka's jars: run `make reference`")]


@pytest.fixture
def kraft_cluster(tmp_path):
    cluster = KraftFaultCluster(tmp_path / "kraft").start()
    yield cluster
    cluster.stop()
    for broker in cluster.brokers:
        print(f"--- the end of node {broker.broker_id}'s log ({broker.log_path}) ---",
              *broker.log().splitlines()[-40:], sep="\n")


def produce_one(bootstrap: str, topic: str) -> int | None:
    """One acks=all write, no retries: its error code, or None once acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                         "message.timeout.ms": 10000})
    outcome = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    return outcome[0].code() if outcome and outcome[0] else None


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.5)


def test_a_leader_cut_off_from_the_brokers_keeps_its_quorum_and_refuses_writes_it_alone_holds(kraft_cluster):
    """The port cuts do what the nemesis means: cut from the other brokers (port 9092) the leader
    still heartbeats to the quorum, so it keeps its leadership and shrinks its ISR to itself, and
    acks=all writes are refused; cut from the controllers (9093) instead, it is fenced and another
    node leads."""
    c = kraft_cluster
    nemesis.create_topics(c, {"cut": 1})
    nemesis.wait_whole(c, {"cut": 1})
    leader = c.leader("cut", 0)[0]
    c.isolate(leader, "brokers")
    wait_for(lambda: c.leader("cut", 0) == (leader, -1, [leader]), "the ISR shrinking to the leader alone")
    assert produce_one(c.bootstrap, "cut") in (KafkaError.NOT_ENOUGH_REPLICAS,
                                               KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    c.heal()
    nemesis.wait_whole(c, {"cut": 1})
    assert produce_one(c.bootstrap, "cut") is None

    c.isolate(leader, "zookeeper")
    wait_for(lambda: c.leader("cut", 0)[0] not in (leader, -1), "another node taking the leadership")
    # (asked through the others: the cut-off node still answers Metadata as the leader it was, and
    # holds acks=all writes it can no longer complete until they time out)
    assert produce_one(",".join(b.address for b in c.brokers if b.broker_id != leader), "cut") is None
    c.heal()
    nemesis.wait_whole(c, {"cut": 1})


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_fault_cycles_on_apache_kafka(kraft_cluster, seed):
    report = nemesis.run(kraft_cluster, seed=seed, cycles=CYCLES)
    print(report.summary())
    assert report.anomalies == {}
    assert all(c.heal_to_ack is not None for c in report.cycles), "a partition stayed unavailable after a heal"
