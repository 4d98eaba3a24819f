"""Share-group consume rate beside a classic group's, with the same client, against one real
`binlake broker` subprocess: the same pre-produced topic read to its end by a classic consumer
committing after each batch, and by a share consumer accepting each batch (implicit
acknowledgement: a poll accepts the previous poll's records), each in its own fresh group.

    .venv/bin/python bench/share_consume.py [--messages N] [--size BYTES] [--partitions P] [--rounds R]
                                            [--brokers B] [--clients confluent,java] [--kafka]

`--brokers 3` runs a ZooKeeper cluster of three brokers instead, the topic with three replicas (the
share-partitions then live at the partitions' leaders, their state at the share coordinators).
`--clients` names the client pairs, each round running every pair: `confluent` (confluent-kafka's
Consumer and ShareConsumer, librdkafka) and `java` (Kafka 4.1.1's own ConsumerPerformance and
ShareConsumerPerformance, kafka-consumer-perf-test and kafka-share-consumer-perf-test). `--kafka`
runs the same rounds against Apache Kafka 4.1.1 (KRaft, as many nodes as `--brokers`, share groups
on: share.version=1) once logcore's are done.

`s` is from the consumer's creation to its last record (join included, and the classic group's
`group.initial.rebalance.delay.ms`, 3 s on logcore, 0 on Kafka's test node); `steady msg/s` is the
rate from the first record to the last, which the join does not touch; `ratio` is share / classic
of the steady rates in the same round. Java's tools time themselves: the classic one's steady rate
is its fetch.nMsg.sec (after the join), the share one's its whole run (join included: it reports no
other, so its ratio leans against the share consumer). Each consumer must read every message (the
share consumer: each offset at least once; Java's: as many records); one that gets no record for
60 s is stopped and its row says how far it got.
"""

from __future__ import annotations

import argparse
import contextlib
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
from testkit.kraft import REPLICATED, KraftCluster, loopback  # noqa: E402
from testkit.reference import run_tool, start_kafka  # noqa: E402

TOPIC = "bench-share"
PERF_JVM = ["-Xmx512m"]
STALL_S = 60  # a consumer with no new record for this long stops, and its row says so (Java's tools: --timeout)


class Stalled(Exception):
    """A consumer got no new record for STALL_S: what it read."""


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
    seen, last = 0, started
    while seen < total:
        batch = [m for m in consumer.consume(10_000, 1.0) if m.error() is None]
        if batch:
            last = time.monotonic()
            first = first or last
            seen += len(batch)
            consumer.commit(asynchronous=True)
        check_stall(consumer, last, seen, total)
    ended = time.monotonic()
    consumer.close()
    return ended - started, ended - first


def check_stall(consumer, last: float, seen: int, total: int) -> None:
    """Stalled (the consumer closed) when no record came for STALL_S since `last`."""
    if time.monotonic() - last > STALL_S:
        consumer.close()
        raise Stalled(f"{seen:,} of {total:,} records, then none for {STALL_S} s")


def from_earliest(address: str, group: str) -> None:
    """The share group's `share.auto.offset.reset` set to earliest (a group config)."""
    admin = AdminClient({"bootstrap.servers": address})
    earliest = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([earliest]).values():
        future.result(30)


def share(address: str, group: str, total: int) -> tuple[float, float]:
    from_earliest(address, group)
    started = time.monotonic()
    first = None
    consumer = ShareConsumer({"bootstrap.servers": address, "group.id": group})
    consumer.subscribe([TOPIC])
    offsets: set[tuple[int, int]] = set()
    last = started
    while len(offsets) < total:
        got = [(m.partition(), m.offset()) for m in consumer.poll(1.0) if m.error() is None]
        if got:
            last = time.monotonic()
            first = first or last
            offsets.update(got)
        check_stall(consumer, last, len(offsets), total)
    ended = time.monotonic()
    consumer.close()
    return ended - started, ended - first


def java_tool(tool: str, address: str, group: str, total: int) -> dict[str, str]:
    """Run one of Kafka's consumer perf tools over the topic; its summary line by column name."""
    done = run_tool(tool, "--bootstrap-server", address, "--topic", TOPIC, "--messages", str(total), "--group", group,
                    "--timeout", str(STALL_S * 1000), timeout=1800, jvm=PERF_JVM)
    lines = [line for line in done.stdout.splitlines() if line.strip() and "for share consumer" not in line]
    if done.returncode != 0 or len(lines) < 2:
        raise SystemExit(f"{tool} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    summary = dict(zip((h.strip() for h in lines[-2].split(",")), (v.strip() for v in lines[-1].split(","))))
    if int(summary["data.consumed.in.nMsg"]) < total:
        raise Stalled(f"{int(summary['data.consumed.in.nMsg']):,} of {total:,} records, then none for {STALL_S} s")
    return summary


def java_classic(address: str, group: str, total: int) -> tuple[float, float]:
    summary = java_tool("kafka-consumer-perf-test", address, group, total)
    joined_and_read = (float(summary["rebalance.time.ms"]) + float(summary["fetch.time.ms"])) / 1000
    return joined_and_read, total / float(summary["fetch.nMsg.sec"])


def java_share(address: str, group: str, total: int) -> tuple[float, float]:
    from_earliest(address, group)
    summary = java_tool("kafka-share-consumer-perf-test", address, group, total)
    seconds = float(summary["fetch.time.ms"]) / 1000
    return seconds, seconds


CLIENTS = {"confluent": (classic, share), "java": (java_classic, java_share)}


def logcore(work: Path, brokers: int, stack: contextlib.ExitStack) -> str:
    if brokers > 1:
        cluster = LocalCluster(work / "logcore", brokers)
        stack.callback(cluster.stop)
        return cluster.start().bootstrap
    broker = BrokerProcess(work / "logcore")
    stack.callback(broker.stop)
    return broker.start().address


def kafka(work: Path, brokers: int, stack: contextlib.ExitStack) -> str:
    """Apache Kafka 4.1.1 with share groups on (share.version 1: a preview in 4.1)."""
    if brokers > 1:
        cluster = KraftCluster(work / "kafka", loopback(brokers), REPLICATED)
        stack.callback(cluster.stop)
        address = cluster.start().bootstrap
    else:
        node = start_kafka(work / "kafka")
        stack.callback(node.stop)
        address = node.address
    done = run_tool("kafka-features", "--bootstrap-server", address, "upgrade", "--feature", "share.version=1")
    if done.returncode != 0:
        raise SystemExit(f"cannot turn share groups on in Apache Kafka:\n{done.stdout}{done.stderr}")
    return address


def rounds(name: str, address: str, args, clients: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(TOPIC, args.partitions, min(args.brokers, 3))])[TOPIC].result(30)
    produce(address, args.messages, args.size)
    for r in range(1, args.rounds + 1):
        for client in clients:
            cells = pair(address, client, r, args.messages)
            print(f"| {name} | {client} | {r} | {cells} | {os.getloadavg()[0]:.1f} |", flush=True)


def pair(address: str, client: str, r: int, total: int) -> str:
    """The table's five cells of one round of a client pair (classic, then share), or how far it got."""
    read_classic, read_shared = CLIENTS[client]
    try:
        c, c_steady = read_classic(address, f"classic-{client}-{r}", total)
    except Stalled as exc:
        return f"classic stalled: {exc} | | | |"
    cells = f"{c:.2f} | {total / c_steady:,.0f}"
    try:
        s, s_steady = read_shared(address, f"share-{client}-{r}", total)
    except Stalled as exc:
        return f"{cells} | share stalled: {exc} | |"
    return f"{cells} | {s:.2f} | {total / s_steady:,.0f} | {c_steady / s_steady:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1, help="more than 1: a ZooKeeper cluster, RF up to 3")
    parser.add_argument("--clients", default="confluent", help="comma-separated: confluent, java")
    parser.add_argument("--kafka", action="store_true", help="the same rounds against Apache Kafka 4.1.1 after")
    args = parser.parse_args()
    clients = args.clients.split(",")
    if unknown := set(clients) - set(CLIENTS):
        parser.error(f"unknown client(s) {', '.join(sorted(unknown))}: choose among {', '.join(CLIENTS)}")
    print(f"# {args.messages} messages of {args.size} B in {args.partitions} partitions, "
          f"{args.brokers} broker(s), load {os.getloadavg()[0]:.1f}")
    print("| broker | client | round | classic s | classic steady msg/s | share s | share steady msg/s | ratio | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, start in (("logcore", logcore), *((("kafka", kafka),) if args.kafka else ())):
        with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp, contextlib.ExitStack() as stack:
            rounds(name, start(Path(tmp), args.brokers, stack), args, clients)


if __name__ == "__main__":
    main()
