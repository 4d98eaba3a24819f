"""What replication costs: produce throughput to one broker alone (replication factor 1) and to a
three-broker cluster on ZooKeeper (replication factor 3), with acks=1 and acks=all, in one run so
the ratios hold on a shared machine.

    .venv/bin/python bench/replication.py [--messages 3000000] [--size 100] [--repeat 3]
                                          [--partitions 1] [--rate 10000] [--seconds 10]

For each row: messages per second (best of --repeat) and the CPU seconds all brokers spent per
million messages (in a cluster also split between the partition's leader and its followers). A
run needs millions of messages: with 4 MB batches, a few hundred thousand are a handful of batches,
and acks=all then measures filling and draining the pipeline. Every broker and the client share the machine's cores, so the cluster rows pay
for three brokers' work on the same CPUs: a ceiling of this machine, not of the design. Then the
latency of acks=all at a steady --rate: each message's time from produce() to its acknowledgement
(librdkafka's own measure), p50 / p99 / max, with linger.ms=1.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import THROUGHPUT_PRODUCER  # bench/ is on sys.path when run as a script

from testkit.brokerproc import BrokerProcess
from testkit.clusterproc import LocalCluster


def produce(bootstrap: str, topic: str, messages: int, size: int, acks: str) -> float:
    """Seconds to write `messages` and have every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **THROUGHPUT_PRODUCER})
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise RuntimeError("messages left unacknowledged after 300 s")
    return time.perf_counter() - started


def paced_latencies(bootstrap: str, topic: str, rate: int, seconds: float, size: int) -> list[float]:
    """acks=all at `rate` messages per second for `seconds`: each message's latency in seconds."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    latencies: list[float] = []

    def delivered(err, msg) -> None:
        if err is not None:
            raise RuntimeError(f"a message failed: {err}")
        latencies.append(msg.latency())

    payload = b"x" * size
    producer.produce(topic, payload)  # (a new topic's followers start fetching first: not what is measured)
    producer.flush(30)
    started = time.perf_counter()
    sent = 0
    while (elapsed := time.perf_counter() - started) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            producer.produce(topic, payload, on_delivery=delivered)
            sent += 1
        producer.poll(0.001)
    if producer.flush(60):
        raise RuntimeError("messages left unacknowledged after 60 s")
    return latencies


def leader_of(admin: AdminClient, topic: str) -> int:
    """The leader of the topic's partition 0, once the new topic has one."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        if 0 in partitions and partitions[0].leader >= 0:
            return partitions[0].leader
        time.sleep(0.1)
    raise RuntimeError(f"{topic} has no leader after 30 s")


def measure(name: str, brokers: list[BrokerProcess], bootstrap: str, replication_factor: int, args) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for acks in ("1", "all"):
        best = None
        for attempt in range(args.repeat):
            topic = f"bench-{acks}-{attempt}"
            admin.create_topics([NewTopic(topic, args.partitions, replication_factor)])[topic].result(30)
            leader = leader_of(admin, topic)
            cpu_before = [b.cpu_seconds() for b in brokers]
            seconds = produce(bootstrap, topic, args.messages, args.size, acks)
            cpu = [b.cpu_seconds() - before for b, before in zip(brokers, cpu_before)]
            if best is None or seconds < best[0]:
                best = (seconds, cpu, leader)
        seconds, cpu, leader = best
        per_million = [c / args.messages * 1e6 for c in cpu]
        split = ""
        if len(brokers) > 1:  # (one partition: one broker leads, the others follow)
            followers = [c for i, c in enumerate(per_million) if i != leader]
            split = f" (leader {per_million[leader]:.2f}, each follower {sum(followers) / len(followers):.2f})"
        print(f"{name:<28} acks={acks:<4} {args.messages / seconds:>10,.0f} msg/s   "
              f"broker CPU {sum(per_million):6.2f} s per million{split}", flush=True)
    topic = "bench-latency"
    admin.create_topics([NewTopic(topic, args.partitions, replication_factor)])[topic].result(30)
    admin.list_topics(topic, timeout=30)
    latencies = sorted(paced_latencies(bootstrap, topic, args.rate, args.seconds, args.size))
    p99 = latencies[int(len(latencies) * 0.99)]
    print(f"{name:<28} acks=all at {args.rate:,} msg/s: latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1, help="partitions of each topic")
    parser.add_argument("--rate", type=int, default=10_000, help="messages per second in the latency run")
    parser.add_argument("--seconds", type=float, default=10, help="length of the latency run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as base:
        alone = BrokerProcess(Path(base) / "alone").start()
        try:
            measure("one broker, RF 1", [alone], alone.address, 1, args)
        finally:
            alone.stop()
        cluster = LocalCluster(Path(base) / "cluster", 3).start()
        try:
            measure("three brokers on ZK, RF 3", cluster.brokers, cluster.bootstrap, 3, args)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
