"""What replication costs: produce throughput to one broker alone (replication factor 1) and to a
three-broker cluster on ZooKeeper (replication factor 3), with acks=1 and acks=all, in one run so
the ratios hold on a shared machine.

    .venv/bin/python bench/replication.py [--messages 300000] [--size 100] [--repeat 3]

For each row: messages per second (best of --repeat) and the CPU seconds all brokers spent per
million messages. Every broker and the client share the machine's cores, so the cluster rows pay
for three brokers' work on the same CPUs: a ceiling of this machine, not of the design.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import THROUGHPUT_PRODUCER  # bench/ is on sys.path when run as a script

from binlake.brokerproc import BrokerProcess
from binlake.clusterproc import LocalCluster


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


def measure(name: str, brokers: list[BrokerProcess], bootstrap: str, replication_factor: int, args) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for acks in ("1", "all"):
        best = None
        for attempt in range(args.repeat):
            topic = f"bench-{acks}-{attempt}"
            admin.create_topics([NewTopic(topic, 1, replication_factor)])[topic].result(30)
            admin.list_topics(topic, timeout=30)
            cpu_before = sum(b.cpu_seconds() for b in brokers)
            seconds = produce(bootstrap, topic, args.messages, args.size, acks)
            cpu = sum(b.cpu_seconds() for b in brokers) - cpu_before
            if best is None or seconds < best[0]:
                best = (seconds, cpu)
        seconds, cpu = best
        print(f"{name:<28} acks={acks:<4} {args.messages / seconds:>10,.0f} msg/s   "
              f"broker CPU {cpu / args.messages * 1e6:6.2f} s per million", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
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
