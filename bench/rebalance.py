"""Rebalance time of a consumer group, KIP-848's protocol beside the classic one, on logcore and on
Apache Kafka in the same run.

    .venv/bin/python bench/rebalance.py [--members 3] [--partitions 6] [--rounds 3] [--no-kafka]

A group of `members - 1` confluent-kafka consumers (one thread each) shares a topic while a producer
writes ~1,000 records/s to every partition; once it is settled, one more member joins. Measured, per
protocol and broker, the median over the rounds of:

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
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testkit.brokerproc import BrokerProcess  # noqa: E402
from testkit.reference import start_kafka  # noqa: E402

PROTOCOLS = {
    "classic": {"group.protocol": "classic"},
    "cooperative": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}


class Member(threading.Thread):
    def __init__(self, address: str, group: str, topic: str, config: dict) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": address, "group.id": group, "auto.offset.reset": "latest",
                                  "enable.auto.commit": False, **config})
        self.topic = topic
        self.owned: set[int] = set()
        self.received: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.subscribed_at = 0.0

    def run(self) -> None:
        self.subscribed_at = time.perf_counter()
        self.consumer.subscribe([self.topic])
        while not self.stopped.is_set():
            message = self.consumer.poll(0.01)
            if message is not None and not message.error():
                self.received.append((time.perf_counter(), message.partition()))
            self.owned = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()


def settled(members: list[Member], partitions: int) -> bool:
    shares = [m.owned for m in members]
    counts = [len(s) for s in shares]
    return sorted(p for s in shares for p in s) == list(range(partitions)) and max(counts) - min(counts) <= 1


def wait(condition, what: str, timeout: float = 120) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def one_join(address: str, topic: str, partitions: int, members: int, protocol: str) -> tuple[float, float]:
    group = f"{topic}-{protocol}-{time.monotonic_ns()}"
    old = [Member(address, group, topic, PROTOCOLS[protocol]) for _ in range(members - 1)]
    for m in old:
        m.start()
    wait(lambda: settled(old, partitions) and all(m.received for m in old), "the first members to settle")
    before = [set(m.owned) for m in old]
    new = Member(address, group, topic, PROTOCOLS[protocol])
    new.start()
    wait(lambda: new.subscribed_at > 0, "the new member to subscribe")
    everyone = [*old, new]
    wait(lambda: settled(everyone, partitions) and new.owned, "the group to settle with the new member")
    joined_s = time.perf_counter() - new.subscribed_at
    end = time.perf_counter()
    gap = 0.0
    for m, had in zip(old, before):
        kept = had & m.owned
        times = [new.subscribed_at] + [t for t, p in m.received if p in kept and new.subscribed_at <= t <= end] + [end]
        gap = max(gap, max(b - a for a, b in zip(times, times[1:])))
    for m in everyone:
        m.stopped.set()
    for m in everyone:
        m.join(30)
    return joined_s, gap


class Traffic(threading.Thread):
    def __init__(self, address: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": address, "linger.ms": 1})
        self.topic, self.partitions = topic, partitions
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            try:
                for p in range(self.partitions):
                    self.producer.produce(self.topic, b"x", partition=p)
            except BufferError:  # (librdkafka's queue is full: let deliveries drain, then go on)
                self.producer.poll(0.1)
            self.producer.poll(0)
            n += 1
            time.sleep(0.001)
        self.producer.flush(10)


def measure(name: str, address: str, args) -> dict[str, tuple[float, float]]:
    topic = "rebalance"
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    traffic = Traffic(address, topic, args.partitions)
    traffic.start()
    results = {}
    try:
        for protocol in PROTOCOLS:
            runs = [one_join(address, topic, args.partitions, args.members, protocol) for _ in range(args.rounds)]
            results[protocol] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
            print(f"{name:8} {protocol:12} join {results[protocol][0]:6.2f} s   others' longest gap "
                  f"{1000 * results[protocol][1]:7.0f} ms   (runs: "
                  f"{', '.join(f'{j:.2f}s/{1000 * g:.0f}ms' for j, g in runs)})", flush=True)
    finally:
        traffic.stopped.set()
        traffic.join(30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=3, help="members once the last has joined")
    parser.add_argument("--partitions", type=int, default=6)
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
