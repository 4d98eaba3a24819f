"""Share-group consume rate beside a classic group's, with the same client (confluent-kafka), against
one real `binlake broker` subprocess: the same pre-produced topic read to its end by a classic
consumer committing after each batch, and by a share consumer accepting each batch (implicit
acknowledgement: a poll accepts the previous poll's records), each in its own fresh group.

    .venv/bin/python bench/share_consume.py [--messages N] [--size BYTES] [--partitions P] [--rounds R]
                                            [--brokers B]

`--brokers 3` runs a ZooKeeper cluster of three brokers instead, the topic with three replicas (the
share-partitions then live at the partitions' leaders, their state at the share coordinators).

`s` is from the consumer's creation to its last record (join included, and the classic group's
`group.initial.rebalance.delay.ms`, 3 s); `steady msg/s` is the rate from the first record to the
last, which the join does not touch; `ratio` is share / classic of the steady rates in the same
round. Each consumer must read every message (the share consumer: each offset at least once).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testkit.brokerproc import BrokerProcess  # noqa: E402
from testkit.clusterproc import LocalCluster  # noqa: E402

TOPIC = "bench-share"


def produce(address: str, total: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for i in range(total):
        while True:
            try:
                producer.produce(TOPIC, value=value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def classic(address: str, group: str, total: int) -> tuple[float, float]:
    """(seconds from creation to the last record, seconds from the first record to the last)"""
    started = time.monotonic()
    first = None
    consumer = Consumer({"bootstrap.servers": address, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen = 0
    while seen < total:
        batch = [m for m in consumer.consume(10_000, 1.0) if m.error() is None]
        if batch:
            first = first or time.monotonic()
            seen += len(batch)
            consumer.commit(asynchronous=True)
    ended = time.monotonic()
    consumer.close()
    return ended - started, ended - first


def share(address: str, group: str, total: int) -> tuple[float, float]:
    admin = AdminClient({"bootstrap.servers": address})
    earliest = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([earliest]).values():
        future.result(30)
    started = time.monotonic()
    first = None
    consumer = ShareConsumer({"bootstrap.servers": address, "group.id": group})
    consumer.subscribe([TOPIC])
    offsets: set[tuple[int, int]] = set()
    while len(offsets) < total:
        got = [(m.partition(), m.offset()) for m in consumer.poll(1.0) if m.error() is None]
        if got:
            first = first or time.monotonic()
            offsets.update(got)
    ended = time.monotonic()
    consumer.close()
    return ended - started, ended - first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1, help="more than 1: a ZooKeeper cluster, RF up to 3")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp:
        if args.brokers > 1:
            broker = LocalCluster(Path(tmp) / "cluster", args.brokers).start()
            address = broker.bootstrap
        else:
            broker = BrokerProcess(Path(tmp) / "broker").start()
            address = broker.address
        try:
            admin = AdminClient({"bootstrap.servers": address})
            admin.create_topics([NewTopic(TOPIC, args.partitions, min(args.brokers, 3))])[TOPIC].result(30)
            produce(address, args.messages, args.size)
            print(f"# {args.messages} messages of {args.size} B in {args.partitions} partitions, "
                  f"{args.brokers} broker(s), load {os.getloadavg()[0]:.1f}")
            print("| round | classic s | classic steady msg/s | share s | share steady msg/s | ratio |")
            print("|---:|---:|---:|---:|---:|---:|")
            for r in range(1, args.rounds + 1):
                c, c_steady = classic(address, f"classic-{r}", args.messages)
                s, s_steady = share(address, f"share-{r}", args.messages)
                print(f"| {r} | {c:.2f} | {args.messages / c_steady:,.0f} | {s:.2f} | {args.messages / s_steady:,.0f} | "
                      f"{c_steady / s_steady:.2f} |", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
