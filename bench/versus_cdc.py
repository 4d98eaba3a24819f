"""binlake's mysql connector beside Debezium's, on the same MariaDB binlog, in one run.

    .venv/bin/python bench/versus_cdc.py [--rows 1000000] [--rate 5000] [--seconds 10]

binlake: `binlake connect run` (exactly_once, as shipped) writing to a logcore broker. Debezium:
Debezium 3.4's MariaDB connector on a Kafka Connect 4.1 standalone worker (its defaults; JSON without
schemas, tombstones off so both write one event per row change) writing to Apache Kafka 4.1. Both
record their start position first (snapshot `no_data`), are stopped, and then catch up with the same
backlog written meanwhile: --rows rows of batch inserts, then --rows/2 rows of mixed
insert/update/delete (bench/cdc_decode.py's workloads). Rows/s = row changes / (last event
readable − first event readable) in the target topic (6 partitions on both brokers). Then each
follows the binlog while transactions of 50 rows commit at --rate rows/s: commit-to-readable latency
per row, as bench/cdc_pipeline.py measures it. CPU seconds of each connector process are printed.
Apache Kafka's and Debezium's jars come from `make reference`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc_decode import TABLE, batch_inserts, mixed, position  # noqa: E402
from cdc_pipeline import (OVERRIDES, PARTITIONS, TOPIC, Connector, catch_up, committed_position,  # noqa: E402
                          latency, write_config)
from produce_consume import BrokerUnderTest, process_cpu_seconds  # noqa: E402

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from binlake.reference import ConnectWorker, start_connect, start_kafka  # noqa: E402
from binlake.sandbox import start_mariadb  # noqa: E402



class Debezium:
    """Debezium's connector on a standalone worker whose offsets file outlives each stop."""

    def __init__(self, base: Path, kafka_address: str, mariadb_port: int) -> None:
        self.base, self.address = base, kafka_address
        self.properties = {
            "name": "bench", "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": "127.0.0.1", "database.port": str(mariadb_port), "database.user": "root",
            "database.password": "", "database.server.id": "78", "topic.prefix": "bench",
            "table.include.list": r"bench\.t", "snapshot.mode": "no_data", "tombstones.on.delete": "false",
            "heartbeat.interval.ms": "1000",  # commits its position with no change to write (as binlake's does)
            "schema.history.internal.kafka.bootstrap.servers": kafka_address,
            "schema.history.internal.kafka.topic": "bench-history",
        }
        self.worker: ConnectWorker | None = None

    def start(self) -> None:
        self.worker = start_connect(self.base, self.address, connectors=[self.properties])
        deadline = time.monotonic() + 120
        while self.worker.task_states("bench") != ["RUNNING"]:
            if time.monotonic() > deadline:
                raise SystemExit(f"Debezium's task did not start: {self.worker.rest('GET', '/connectors/bench/status')}")
            time.sleep(0.1)

    def record_position(self) -> None:
        """Start, wait until the worker has stored the connector's position, stop."""
        self.start()
        deadline = time.monotonic() + 120
        while not (self.base / "offsets").exists() or not (self.base / "offsets").stat().st_size:
            if time.monotonic() > deadline:
                raise SystemExit("Debezium stored no offset within 120 s")
            time.sleep(0.1)
        self.stop()

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.worker.proc.pid)

    def stop(self) -> None:
        self.worker.stop(remove=False)  # SIGTERM: the worker commits its offsets to the file


async def end_offsets(consumer: AIOKafkaConsumer) -> int:
    return sum((await consumer.end_offsets([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])).values())


async def debezium_catch_up(debezium: Debezium, expected: int) -> tuple[float, float]:
    """Start Debezium; (seconds from the first to the last of `expected` events readable, its CPU s)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=debezium.address)
    await consumer.start()
    try:
        base = await end_offsets(consumer)
        debezium.start()
        cpu0 = debezium.cpu_seconds()
        first = last = None
        seen = base
        deadline = time.monotonic() + 600
        while seen - base < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"Debezium wrote {seen - base:,} of {expected:,} events within 600 s")
            now, end = time.monotonic(), await end_offsets(consumer)
            if end != seen:
                first = first or now
                seen, last = end, now
            await asyncio.sleep(0.005)
        return last - first, debezium.cpu_seconds() - cpu0
    finally:
        await consumer.stop()
        debezium.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="versus-cdc-"))
    server = start_mariadb(base / "mariadb")
    (base / "logcore").mkdir()
    logcore = BrokerUnderTest(str(base / "logcore" / "data"), OVERRIDES)
    kafka = start_kafka(base / "kafka")
    try:
        server.sql("CREATE DATABASE bench", TABLE)
        for address in (logcore.address, kafka.address):
            admin = AdminClient({"bootstrap.servers": address})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        binlake = Connector(write_config(base / "bench.yaml", logcore.address, server.port, commit_interval_ms=0),
                            base / "connect.log")
        binlake.start()                          # both record the table and their start position, then stop
        while asyncio.run(committed_position(logcore.address)) is None:
            time.sleep(0.2)
        binlake.stop()
        debezium = Debezium(base / "debezium", kafka.address, server.port)
        debezium.record_position()

        print(f"machine: {os.cpu_count()} cores; MariaDB, both brokers and both connectors on it")
        print(f"{'workload':<28} {'changes':>9} {'binlake rows/s':>15} {'Debezium rows/s':>16} {'ratio':>6} "
              f"{'CPU s (binlake / Debezium)':>27}")
        first_id = 1
        for name, write, rows in (("batch inserts", batch_inserts, args.rows),
                                  ("mixed insert/update/delete", mixed, args.rows // 2)):
            with server.connect(db="bench") as conn, conn.cursor() as cur:
                changes = write(cur, rows, first_id)
                end = position(cur)
            first_id += rows
            ours, our_cpu = asyncio.run(catch_up(logcore.address, binlake, (end.file, end.pos), None))
            theirs, their_cpu = asyncio.run(debezium_catch_up(debezium, changes))
            print(f"{name:<28} {changes:>9,} {changes / ours:>15,.0f} {changes / theirs:>16,.0f} "
                  f"{theirs / ours:>6.2f} {our_cpu:>13.1f} / {their_cpu:<11.1f}", flush=True)

        print(f"commit-to-readable latency at {args.rate:,} rows/s (transactions of 50 rows):")
        for name, target, connector in (("binlake", logcore, binlake), ("Debezium", kafka, debezium)):
            connector.start()
            try:
                print(f"  {name:9}", end=" ")
                latency(server, target, connector, args.rate, args.seconds, 50, first_id + 1)
            finally:
                connector.stop()
            first_id += int(args.rate * (args.seconds + 3)) + 1
    finally:
        logcore.stop()
        kafka.stop()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
