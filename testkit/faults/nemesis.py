"""Seeded fault cycles over a `FaultCluster` while workloads run, then every checker.

A cycle: pick a fault (seeded), inflict it on the broker that has the role it targets *now* (the
leader of partition 0 of the queue topic, a follower of it, or the controller), wait, take a
snapshot of every broker's disk, heal, let the cluster recover. The snapshots feed the ack checker;
the acknowledgement times give the liveness figures (heal → first ack, longest gap).

    report = run(cluster, seed=7, cycles=12)
    assert report.anomalies == {}
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, NewTopic

from . import checkers
from .cluster import FaultCluster
from .logs import read_replica, values_on
from .workloads import QueueWorkload, TxnWorkload, read_all

FAULTS = ("leader-brokers", "leader-zookeeper", "leader-all", "follower-all", "controller-all", "split",
          "pause-leader", "kill-leader")
# Every anomaly class a Report can hold (checkers.py), the transactional workload's prefixed "txn ".
ANOMALY_CLASSES = ("lost", "duplicated", "inconsistent-offsets", "nonmonotonic-poll", "unseen",
                   *(f"txn {kind}" for kind in ("lost", "duplicated", "aborted-read", "torn-transaction",
                                                "uncommitted-read", "unknown-value", "inconsistent-offsets",
                                                "nonmonotonic-poll")),
                   "held-by-too-few", "diverged")


@dataclass
class Cycle:
    kind: str
    target: int
    start: float
    heal: float = 0.0
    end: float = 0.0
    heal_to_ack: float | None = None  # seconds from the heal to the next acknowledged write to partition 0
    longest_gap: float | None = None  # longest time without an acknowledged write to partition 0

    def line(self) -> str:
        ack = f"{self.heal_to_ack:.2f}" if self.heal_to_ack is not None else "none"
        gap = f"{self.longest_gap:.2f}" if self.longest_gap is not None else "-"
        return f"{self.kind:<17} broker {self.target}  heal→ack {ack:>5} s  longest gap {gap:>5} s"


@dataclass
class Report:
    seed: int
    cycles: list[Cycle] = field(default_factory=list)
    anomalies: dict[str, list[str]] = field(default_factory=dict)
    acked: int = 0
    sent: int = 0
    txns: dict[str, int] = field(default_factory=dict)
    producers_replaced: int = 0  # idempotent producers that failed fatally (workloads.QueueWorkload.errors)
    timed_out: int = 0  # writes the producer gave up on (delivery.timeout.ms): it no longer dedups after one

    def summary(self) -> str:
        lines = [f"seed {self.seed}: {self.acked} of {self.sent} writes acknowledged, transactions {self.txns}"
                 + (f", {self.producers_replaced} producer(s) replaced after a fatal error"
                    if self.producers_replaced else "")
                 + (f", {self.timed_out} write(s) timed out in the client" if self.timed_out else "")]
        lines += ["  " + c.line() for c in self.cycles]
        for kind, items in sorted(self.anomalies.items()):
            lines.append(f"  ANOMALY {kind}: {len(items)}, e.g. " + "; ".join(items[:3]))
        return "\n".join(lines)


class Nemesis:
    def __init__(self, cluster: FaultCluster, topic: str, seed: int, fault_s: float = 8.0, recover_s: float = 6.0,
                 kinds: tuple[str, ...] = FAULTS) -> None:
        self.cluster = cluster
        self.topic = topic
        self.random = random.Random(seed)
        self.fault_s, self.recover_s, self.kinds = fault_s, recover_s, kinds
        self.snapshots: list[tuple[str, float, dict[int, set[bytes]]]] = []
        self.partitions = 1

    def snapshot(self, label: str) -> None:
        taken = time.monotonic()
        disks = {b.broker_id: values_on(b.data_dir, self.topic, self.partitions) for b in self.cluster.brokers}
        self.snapshots.append((label, taken, disks))

    def _roles(self) -> tuple[int, list[int], int]:
        leader, _, isr = self.cluster.leader(self.topic, 0)
        followers = [b.broker_id for b in self.cluster.brokers if b.broker_id != leader]
        return leader, followers, self.cluster.controller()

    def cycle(self, kind: str | None = None) -> Cycle:
        kind = kind or self.random.choice(self.kinds)
        leader, followers, controller = self._roles()
        if leader < 0:  # (no leader: pick any broker)
            leader = self.random.choice([b.broker_id for b in self.cluster.brokers])
        c = self.cluster
        target = {"follower-all": self.random.choice(followers), "controller-all": controller}.get(kind, leader)
        cycle = Cycle(kind, target, time.monotonic())
        if kind.startswith(("leader-", "follower-", "controller-")):
            c.isolate(target, kind.split("-", 1)[1])
        elif kind == "split":
            others = [b for b in range(len(c.brokers)) if b != target]
            c.split([target], others, zk_side=self.random.choice([0, 1]))
        elif kind == "pause-leader":
            c.pause(target)
        elif kind == "kill-leader":
            c.kill(target)
        time.sleep(self.fault_s)
        self.snapshot(f"the heal of {kind} on broker {target}")
        if kind == "pause-leader":
            c.resume(target)
        elif kind == "kill-leader":
            c.restart(target)
        else:
            c.heal()
        cycle.heal = time.monotonic()
        time.sleep(self.recover_s)
        cycle.end = time.monotonic()
        return cycle


def create_topics(cluster: FaultCluster, topics: dict[str, int], min_isr: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 3, config={"min.insync.replicas": str(min_isr)})
                                   for t, n in topics.items()], operation_timeout=30)
    for future in futures.values():
        future.result(60)


def wait_whole(cluster: FaultCluster, topics: dict[str, int], timeout: float = 90) -> None:
    """Every broker up and in every ISR of `topics`."""
    for broker in cluster.brokers:
        if broker.paused:
            cluster.resume(broker.broker_id)
        if not broker.alive():
            broker.start()
    want = sorted(b.broker_id for b in cluster.brokers)
    deadline = time.monotonic() + timeout
    while True:
        states = {(t, p): cluster.leader(t, p) for t, n in topics.items() for p in range(n)}
        if all(sorted(isr) == want for _, _, isr in states.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the ISRs did not fill within {timeout} s: {states}")
        time.sleep(0.5)


def liveness(cycle: Cycle, ack_times: list[float]) -> None:
    after = [t for t in ack_times if t >= cycle.heal]
    cycle.heal_to_ack = after[0] - cycle.heal if after and after[0] <= cycle.end + 30 else None
    inside = [cycle.start] + [t for t in ack_times if cycle.start <= t <= cycle.end] + [cycle.end]
    cycle.longest_gap = max(b - a for a, b in zip(inside, inside[1:]))


def run(cluster: FaultCluster, seed: int, cycles: int, queue_partitions: int = 2, txn_partitions: int = 2,
        rate: float = 50.0, min_isr: int = 2, fault_s: float = 8.0, recover_s: float = 6.0,
        kinds: tuple[str, ...] = FAULTS, transactions: bool = True, in_order: bool = False, log=print) -> Report:
    """`in_order`: cycle i inflicts kinds[i % len(kinds)] (else a seeded choice each cycle)."""
    topics = {"queue": queue_partitions, **({"txn": txn_partitions} if transactions else {})}
    create_topics(cluster, topics, min_isr)
    wait_whole(cluster, topics)
    nemesis = Nemesis(cluster, "queue", seed, fault_s, recover_s, kinds)
    nemesis.partitions = queue_partitions
    queue = QueueWorkload(cluster.bootstrap, "queue", queue_partitions, rate)
    txn = TxnWorkload(cluster.bootstrap, "txn", txn_partitions, seed) if transactions else None
    queue.start()
    if txn:
        txn.start()
    report = Report(seed)
    time.sleep(2)
    for i in range(cycles):
        report.cycles.append(nemesis.cycle(kinds[i % len(kinds)] if in_order else None))
        log(f"cycle {i + 1}/{cycles}: {report.cycles[-1].kind} on broker {report.cycles[-1].target}")
    wait_whole(cluster, topics)
    time.sleep(2)
    queue.stopping.set()
    if txn:
        txn.stopping.set()
    queue.join(120)
    if txn:
        txn.join(120)
    nemesis.snapshot("the end")
    final = read_all(cluster.bootstrap, "queue", queue_partitions, read_committed=False)
    _catch_up(queue.poller, final)
    replicas = {(topic, p): _quiet_replicas(cluster, topic, p) for topic, n in topics.items() for p in range(n)}
    written = checkers.writers({p: next(iter(replicas["queue", p].values())) for p in range(queue_partitions)})
    anomalies = checkers.check_queue(queue.sends, queue.poller.polls, final, written)
    anomalies.update(checkers.check_acks(queue.sends, nemesis.snapshots, min_isr))
    if txn:
        final_txn = read_all(cluster.bootstrap, "txn", txn_partitions, read_committed=True)
        _catch_up(txn.poller, final_txn)
        for kind, items in checkers.check_txns(txn.txns, txn.poller.polls, final_txn).items():
            anomalies.setdefault(f"txn {kind}", []).extend(items)
        report.txns = {o: sum(t.outcome == o for t in txn.txns) for o in ("committed", "aborted", "indeterminate")}
    for (topic, p), of_partition in replicas.items():
        for kind, items in checkers.check_replicas(of_partition).items():
            anomalies.setdefault(kind, []).extend(f"{topic}-{p}: {item}" for item in items)
    ack_times = sorted(s.acked for s in queue.sends if s.acked is not None and s.partition == 0)
    for cycle in report.cycles:
        liveness(cycle, ack_times)
    report.anomalies = anomalies
    report.producers_replaced = len(queue.errors)
    report.timed_out = sum(1 for s in queue.sends if s.error and "_MSG_TIMED_OUT" in s.error)
    report.sent, report.acked = len(queue.sends), len(ack_times) + sum(
        1 for s in queue.sends if s.acked is not None and s.partition != 0)
    return report


def _catch_up(poller, final, timeout: float = 30) -> None:
    """Let the poller read up to the final ends, then stop it."""
    ends = {p: (records[-1][0] + 1 if records else 0) for p, records in final.items()}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(poller.positions.get(p, 0) < end for p, end in ends.items() if end):
        time.sleep(0.2)
    poller.stop()


def _quiet_replicas(cluster: FaultCluster, topic: str, partition: int, timeout: float = 30):
    """Each broker's replica once they stop changing and have the same length (or the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        replicas = {b.broker_id: read_replica(b.data_dir, topic, partition) for b in cluster.brokers}
        ends = {len(r) for r in replicas.values()}
        if len(ends) == 1 or time.monotonic() > deadline:
            return replicas
        time.sleep(0.5)
