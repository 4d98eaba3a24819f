"""Rebalance time of a consumer group, KIP-848's protocol beside the classic one, on logcore and on
Apache Kafka in the same run. bench/versus.py's `rebalance` rows run the same measure (`form_and_join`)
on both brokers side by side; this script adds the `cooperative` protocol and runs one broker after
the other.

    .venv/bin/python bench/rebalance.py [--members 3] [--partitions 6] [--rate 1000] [--rounds 3] [--no-kafka]

A group of `members - 1` confluent-kafka consumers (one thread each, in this process) forms on a topic
while a producer writes --rate records/s to every partition; once it is stable, one more member
joins. Measured, per protocol and broker, the median over the rounds of:

- `join s`: from the new member's subscribe() until every member holds its final share (all
  partitions assigned exactly once, counts at most one apart);
- `gap ms`: the longest time one of the old members went without a record from a partition it
  kept, from the join until the group settled (its fetching paused by the rebalance).

Protocols: `classic` (librdkafka's default eager `range,roundrobin`), `cooperative` (classic with
`cooperative-sticky`: only moved partitions are revoked), `consumer` (KIP-848, server-side
`uniform`). Heartbeat intervals are the defaults of each side: 3 s for the classic client, 5 s
(`group.consumer.heartbeat.interval.ms`) from the broker for KIP-848; that interval bounds how soon
old members hear of the join in both. Apache Kafka's jars come from `make reference`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testkit.brokerproc import BrokerProcess  # noqa: E402
from testkit.reference import start_kafka  # noqa: E402

PROTOCOLS = {
    "classic": {"group.protocol": "classic"},
    "cooperative": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}
EAGER = {"classic"}  # protocols whose callbacks hand over (and take back) a member's whole assignment
SETTLE_TIMEOUT_S = 120
QUIET_S = 2.0  # how long the stable group is watched before the join, for `quiet_gap_s`
# When the new member joins, after the group formed: JOIN_AFTER_S, plus a share (`join_phase`) of
# CYCLE_S, which holds whole numbers of both heartbeat intervals (the classic client's 3 s, KIP-848's
# 5 s). The old members hear of the join at their next heartbeat, so its phase is part of the join's
# time: rounds spread it over both cycles, rather than all catching one moment of them.
JOIN_AFTER_S, CYCLE_S = 2.5, 15.0


class Member(threading.Thread):
    """One group member: a confluent-kafka consumer polled by its own thread. `owned` is its assignment,
    kept from the rebalance callbacks (the client calls them inside poll, as the assignment changes)
    with the time of its last change; `received` the (time, partition) of every record it got."""

    def __init__(self, address: str, group: str, topic: str, protocol: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": address, "group.id": group, "auto.offset.reset": "latest",
                                  "enable.auto.commit": False, **PROTOCOLS[protocol]})
        self.topic, self.eager = topic, protocol in EAGER
        self.owned: frozenset[int] = frozenset()
        self.changed_at = 0.0
        self.received: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.subscribed_at = 0.0

    def _own(self, partitions: frozenset[int]) -> None:
        self.owned, self.changed_at = partitions, time.perf_counter()

    def _assigned(self, _consumer, partitions) -> None:
        given = frozenset(tp.partition for tp in partitions)
        self._own(given if self.eager else self.owned | given)

    def _revoked(self, _consumer, partitions) -> None:
        self._own(frozenset() if self.eager else self.owned - {tp.partition for tp in partitions})

    def run(self) -> None:
        self.subscribed_at = time.perf_counter()
        self.consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)
        while not self.stopped.is_set():
            for message in self.consumer.consume(100, 0.1):
                if not message.error():
                    self.received.append((time.perf_counter(), message.partition()))
        self.consumer.close()

    def longest_gap(self, partitions: frozenset[int], start: float, end: float) -> float:
        """The longest stretch of [start, end] in which no record of `partitions` came."""
        times = [start, *(t for t, p in self.received if p in partitions and start <= t <= end), end]
        return max(b - a for a, b in zip(times, times[1:]))


class Traffic(threading.Thread):
    """A producer writing `rate` records/s to every partition of `topic` until stopped."""

    def __init__(self, address: str, topic: str, partitions: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
        self.topic, self.partitions, self.tick = topic, partitions, 1 / rate
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.tick):
            try:
                for p in range(self.partitions):
                    self.producer.produce(self.topic, b"x", partition=p)
            except BufferError:  # (librdkafka's queue is full: let deliveries drain, then go on)
                self.producer.poll(0.1)
            self.producer.poll(0)
        self.producer.flush(10)


@dataclass
class Rebalance:
    """One group's figures, in seconds. `gap_s` is None when no old member kept a partition."""

    form_s: float      # from the first member's subscribe() until the group settled
    join_s: float      # from one more member's subscribe() until the group settled again
    gap_s: float | None  # the old members' longest stretch without a record from a partition they kept, meanwhile
    quiet_gap_s: float   # the old members' longest stretch without a record, over QUIET_S before the join

    def row(self) -> str:
        gap = "-" if self.gap_s is None else f"{1000 * self.gap_s:.0f} ms"
        return (f"formed in {self.form_s:.2f} s, one more joined in {self.join_s:.2f} s, kept partitions' longest "
                f"gap {gap} (stable: {1000 * self.quiet_gap_s:.0f} ms)")


def settled(members: list[Member], partitions: int) -> bool:
    """Every partition owned by exactly one member, and the shares at most one apart."""
    shares = [m.owned for m in members]
    counts = [len(s) for s in shares]
    return sorted(p for s in shares for p in s) == list(range(partitions)) and max(counts) - min(counts) <= 1


def wait_settled(members: list[Member], partitions: int, what: str) -> float:
    """Wait until `members` have settled; returns when (the last change of an assignment)."""
    deadline = time.perf_counter() + SETTLE_TIMEOUT_S
    while not settled(members, partitions):
        if time.perf_counter() > deadline:
            counts = sorted(len(m.owned) for m in members)
            raise SystemExit(f"{what}: not settled within {SETTLE_TIMEOUT_S} s (shares {counts})")
        time.sleep(0.005)
    return max(m.changed_at for m in members)


def coordinator_ready(address: str, group: str, topic: str) -> None:
    """Wait until the group's coordinator answers an OffsetFetch: the first time on a broker,
    __consumer_offsets is created and loaded meanwhile (Apache Kafka answers NOT_COORDINATOR until it
    is), which the clock is not to count."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": group})
    deadline = time.perf_counter() + SETTLE_TIMEOUT_S
    try:
        while True:
            try:
                consumer.committed([TopicPartition(topic, 0)], timeout=10)
                return
            except KafkaException as failure:
                if time.perf_counter() > deadline:
                    raise SystemExit(f"the coordinator of group {group}: {failure}") from None
                time.sleep(0.2)
    finally:
        consumer.close()


def join_phase(round: int) -> float:
    """Round `round`'s share of the cycle, in [0, 1): 0, 1/2, 1/4, 3/4, 1/8, ... (van der Corput's
    sequence: any number of rounds spreads evenly, over 15 s and so over 3 s and 5 s too)."""
    share, weight = 0.0, 0.5
    while round:
        share, round, weight = share + weight * (round & 1), round >> 1, weight / 2
    return share


def form_and_join(address: str, topic: str, partitions: int, members: int, protocol: str,
                  rate: float, phase: float) -> Rebalance:
    """A group of `members` forms on `topic` (which exists, with `partitions`) while `rate` records/s go
    to each partition; JOIN_AFTER_S + `phase` * CYCLE_S after it formed (and at least QUIET_S after
    every member had a record), one more member joins."""
    group = f"{topic}-{protocol}-{time.monotonic_ns()}"
    coordinator_ready(address, group, topic)
    traffic = Traffic(address, topic, partitions, rate)
    old = [Member(address, group, topic, protocol) for _ in range(members)]  # (created before the clock starts)
    new = Member(address, group, topic, protocol)
    everyone = [*old, new]
    traffic.start()
    try:
        for m in old:
            m.start()
        formed_at = wait_settled(old, partitions, f"a group of {members} ({protocol})")
        form_s = formed_at - min(m.subscribed_at for m in old)
        deadline = time.perf_counter() + SETTLE_TIMEOUT_S
        while not all(m.received for m in old):
            if time.perf_counter() > deadline:
                raise SystemExit(f"a group of {members} ({protocol}): not every member fetched within "
                                 f"{SETTLE_TIMEOUT_S} s")
            time.sleep(0.005)
        join_at = max(formed_at + JOIN_AFTER_S + phase * CYCLE_S, time.perf_counter() + QUIET_S)
        quiet = (join_at - QUIET_S, join_at)
        time.sleep(join_at - time.perf_counter())  # (a moment chosen, not a wait for a condition)
        before = [m.owned for m in old]
        new.start()
        settled_at = wait_settled(everyone, partitions, f"member {members + 1} joining ({protocol})")
        join_s = settled_at - new.subscribed_at
        kept = [(m, had & m.owned) for m, had in zip(old, before) if had & m.owned]
        gap_s = max((m.longest_gap(k, new.subscribed_at, settled_at) for m, k in kept), default=None)
        quiet_gap_s = max(m.longest_gap(had, *quiet) for m, had in zip(old, before))
        return Rebalance(form_s, join_s, gap_s, quiet_gap_s)
    finally:
        for m in [traffic, *everyone]:
            m.stopped.set()
        for m in [traffic, *everyone]:
            if m.is_alive():
                m.join(60)


def measure(name: str, address: str, args) -> dict[str, tuple[float, float]]:
    topic = "rebalance"
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    results = {}
    for protocol in PROTOCOLS:
        runs = [form_and_join(address, topic, args.partitions, args.members - 1, protocol, args.rate, join_phase(k))
                for k in range(args.rounds)]
        results[protocol] = (statistics.median(r.join_s for r in runs), statistics.median(r.gap_s or 0 for r in runs))
        print(f"{name:8} {protocol:12} join {results[protocol][0]:6.2f} s   others' longest gap "
              f"{1000 * results[protocol][1]:7.0f} ms   (runs: "
              f"{', '.join(f'{r.join_s:.2f}s/{1000 * (r.gap_s or 0):.0f}ms' for r in runs)})", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=3, help="members once the last has joined")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=1000, help="records/s to each partition")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-kafka", action="store_true", help="logcore only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rebalance-") as work, contextlib.ExitStack() as stack:
        # Both brokers at Kafka's defaults, but no initial delay (it only delays an empty group's first generation).
        logcore = BrokerProcess(Path(work) / "logcore", config={"group.initial.rebalance.delay.ms": "0"}).start()
        stack.callback(logcore.kill)
        rows = {"logcore": measure("logcore", logcore.address, args)}
        if not args.no_kafka:
            kafka = start_kafka(Path(work) / "kafka", config={"group.initial.rebalance.delay.ms": "0"})
            stack.callback(kafka.stop)
            rows["kafka"] = measure("kafka", kafka.address, args)
    print(f"\n{args.members} members, {args.partitions} partitions, median of {args.rounds}")
    print(f"{'protocol':12} {'logcore join s':>15} {'gap ms':>8}" + (f" {'Kafka join s':>13} {'gap ms':>8} "
                                                                      f"{'ratio':>6}" if "kafka" in rows else ""))
    for protocol in PROTOCOLS:
        join, gap = rows["logcore"][protocol]
        line = f"{protocol:12} {join:>15.2f} {1000 * gap:>8.0f}"
        if "kafka" in rows:
            kjoin, kgap = rows["kafka"][protocol]
            line += f" {kjoin:>13.2f} {1000 * kgap:>8.0f} {join / kjoin:>6.2f}"
        print(line)


if __name__ == "__main__":
    main()
