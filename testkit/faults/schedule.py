"""Seeded fault cycles around a workload of the caller's own (the whole pipeline: MySQL → connector
→ cluster, each in its threads or processes), and the heal that follows them:

    for i, cycle in enumerate(cycles(Nemesis(cluster, "shop.db.orders", seed=3), 8)):
        ...                            # after each cycle: DDL half-way, say
    heal(cluster)                      # every broker up, every partition of every topic whole

Run them from the main thread: a broker the nemesis restarts is a child of the thread that starts it,
and dies with that thread (PR_SET_PDEATHSIG, common/lifetime.py). `nemesis.run` is the same loop
around the queue and transactional workloads of workloads.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from .cluster import FaultCluster
from .nemesis import Cycle, Nemesis, wait_whole


def cycles(nemesis: Nemesis, count: int, log=print) -> Iterator[Cycle]:
    for i in range(count):
        cycle = nemesis.cycle()
        log(f"cycle {i + 1}/{count}: {cycle.kind} on broker {cycle.target}")
        yield cycle


def topics(cluster: FaultCluster) -> dict[str, int]:
    """Every topic in ZooKeeper and its partition count."""
    from common.zk_client import stop_client
    client = cluster.zk()
    try:
        return {t: len(client.get_children(f"/brokers/topics/{t}/partitions"))
                for t in client.get_children("/brokers/topics")}
    finally:
        stop_client(client)


def heal(cluster: FaultCluster, timeout: float = 120) -> None:
    """Lift every cut, start or resume every broker, and wait until every partition of every topic
    (the internal ones too) has all the brokers in its ISR."""
    cluster.heal()
    wait_whole(cluster, topics(cluster), timeout)
