"""binlake's mysql connector beside Debezium's, on the same MariaDB and MySQL binlogs, in one run.

    .venv/bin/python bench/versus_cdc.py [--server mariadb|mysql|both] [--rows 1000000] [--rate 5000]
                                         [--seconds 10] [--repeat 1]

binlake: `binlake connect run` (exactly_once, as shipped) writing to a logcore broker. Debezium:
Debezium 3.4's MariaDB connector (io.debezium.connector.mariadb.MariaDbConnector) or MySQL connector
(io.debezium.connector.mysql.MySqlConnector) on a Kafka Connect 4.1 standalone worker (its defaults;
JSON without schemas, tombstones off so both write one event per row change) writing to Apache Kafka
4.1. The servers are sandbox.sql's: MariaDB with full row metadata, Oracle MySQL at its defaults
plus GTIDs (so MINIMAL row metadata; both connectors name the columns from their schema history).
Both connectors record their start position first (snapshot `no_data`), are stopped, and then catch
up with the same backlog written meanwhile: --rows rows of batch inserts, then --rows/2 rows of mixed
insert/update/delete (bench/cdc_decode.py's workloads); on MySQL each workload once more with
`binlog_transaction_compression=ON` in the writing session (zstd TRANSACTION_PAYLOAD events, which
both decode). Rows/s = row changes / (last event readable − first event readable) in the target
topic (6 partitions on both brokers). Then each follows the binlog while transactions of 50 rows
commit at --rate rows/s: commit-to-readable latency per row, as bench/cdc_pipeline.py measures it.
CPU seconds of each connector process (children included) are printed. With --repeat, rounds
alternate which connector reads first. Apache Kafka's and Debezium's jars come from `make reference`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc_decode import SETUP, compression, position  # noqa: E402
from cdc_pipeline import (OVERRIDES, PARTITIONS, WORKLOADS, Connector, catch_up, committed_position,  # noqa: E402
                          latency, topic_of, write_config)
from produce_consume import BrokerUnderTest, process_cpu_seconds  # noqa: E402

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from sandbox.sql import SqlServer, start_server  # noqa: E402
from testkit.reference import ConnectWorker, start_connect, start_kafka  # noqa: E402

CONNECTOR_CLASS = {"mariadb": "io.debezium.connector.mariadb.MariaDbConnector",
                   "mysql": "io.debezium.connector.mysql.MySqlConnector"}


class Debezium:
    """Debezium's connector on a standalone worker whose offsets file outlives each stop."""

    def __init__(self, base: Path, kafka_address: str, server: SqlServer) -> None:
        self.base, self.address = base, kafka_address
        self.topic = topic_of(server.kind)
        self.properties = {
            "name": "bench", "connector.class": CONNECTOR_CLASS[server.kind],
            "database.hostname": "127.0.0.1", "database.port": str(server.port), "database.user": "root",
            "database.password": "", "database.server.id": "78", "topic.prefix": server.kind,
            "table.include.list": r"bench\.t", "snapshot.mode": "no_data", "tombstones.on.delete": "false",
            "heartbeat.interval.ms": "1000",  # commits its position with no change to write (as binlake's does)
            "schema.history.internal.kafka.bootstrap.servers": kafka_address,
            "schema.history.internal.kafka.topic": f"{server.kind}-history",
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


async def end_offsets(consumer: AIOKafkaConsumer, topic: str) -> int:
    return sum((await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])).values())


async def debezium_catch_up(debezium: Debezium, expected: int) -> tuple[float, float]:
    """Start Debezium; (seconds from the first to the last of `expected` events readable, its CPU s)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=debezium.address)
    await consumer.start()
    try:
        base = await end_offsets(consumer, debezium.topic)
        debezium.start()
        cpu0 = debezium.cpu_seconds()
        first = last = None
        seen = base
        deadline = time.monotonic() + 600
        while seen - base < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"Debezium wrote {seen - base:,} of {expected:,} events within 600 s")
            now, end = time.monotonic(), await end_offsets(consumer, debezium.topic)
            if end != seen:
                first = first or now
                seen, last = end, now
            await asyncio.sleep(0.005)
        return last - first, debezium.cpu_seconds() - cpu0
    finally:
        await consumer.stop()
        debezium.stop()


def catch_up_both(binlake: Connector, debezium: Debezium, logcore: BrokerUnderTest, end, changes: int,
                  debezium_first: bool) -> tuple[float, float, float, float]:
    """Both connectors read the same backlog, one after the other: (binlake rows/s, its CPU s,
    Debezium rows/s, its CPU s)."""
    figures = {}
    for who in ("debezium", "binlake") if debezium_first else ("binlake", "debezium"):
        if who == "binlake":
            figures[who] = asyncio.run(catch_up(logcore.address, binlake, (end.file, end.pos), None))
        else:
            figures[who] = asyncio.run(debezium_catch_up(debezium, changes))
    (ours, our_cpu), (theirs, their_cpu) = figures["binlake"], figures["debezium"]
    return changes / ours, our_cpu, changes / theirs, their_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["mariadb", "mysql", "both"], default="both")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=["inserts", "mixed", "latency"])
    args = parser.parse_args()
    only = args.only or ["inserts", "mixed", "latency"]
    base = Path(tempfile.mkdtemp(prefix="versus-cdc-"))
    (base / "logcore").mkdir()
    logcore = BrokerUnderTest(str(base / "logcore" / "data"), OVERRIDES)
    kafka = start_kafka(base / "kafka")
    servers: list[SqlServer] = []
    try:
        # (label, server, compressed, binlake's connector, Debezium)
        variants: list[tuple[str, SqlServer, bool, Connector, Debezium]] = []
        for kind in ["mariadb", "mysql"] if args.server == "both" else [args.server]:
            server = start_server(kind, base / kind)
            servers.append(server)
            server.sql(*SETUP)
            for address in (logcore.address, kafka.address):
                admin = AdminClient({"bootstrap.servers": address})
                admin.create_topics([NewTopic(topic_of(kind), PARTITIONS, 1)])[topic_of(kind)].result(30)
            binlake = Connector(write_config(base / f"{kind}.yaml", logcore.address, server.port, 0, kind),
                                base / f"{kind}-connect.log", kind)
            binlake.start()                      # both record the table and their start position, then stop
            while asyncio.run(committed_position(logcore.address, kind)) is None:
                time.sleep(0.2)
            binlake.stop()
            debezium = Debezium(base / f"debezium-{kind}", kafka.address, server)
            debezium.record_position()
            variants.append((server.name, server, False, binlake, debezium))
            if kind == "mysql":
                variants.append((f"{server.name} compressed", server, True, binlake, debezium))

        print(f"machine: {os.cpu_count()} cores; the servers, both brokers and both connectors on it")
        print(f"{'workload':<28} {'server':<17} {'changes':>9} {'binlake rows/s':>15} {'Debezium rows/s':>16} "
              f"{'ratio':>6} {'CPU s (binlake / Debezium)':>27}")
        ratios: dict[tuple[str, str], list[float]] = {}
        first_id = 1
        for n in range(args.repeat):
            for key, name, write, share in WORKLOADS:
                if key not in only:
                    continue
                for label, server, compressed, binlake, debezium in variants:
                    rows = args.rows // share
                    with server.connect(db="bench") as conn, conn.cursor() as cur:
                        compression(cur, compressed)
                        changes = write(cur, rows, first_id)
                        end = position(cur)
                    first_id += rows
                    ours, our_cpu, theirs, their_cpu = catch_up_both(binlake, debezium, logcore, end, changes,
                                                                     debezium_first=n % 2 == 1)
                    ratios.setdefault((name, label), []).append(ours / theirs)
                    print(f"{name:<28} {label:<17} {changes:>9,} {ours:>15,.0f} {theirs:>16,.0f} "
                          f"{ours / theirs:>6.2f} {our_cpu:>13.1f} / {their_cpu:<11.1f}", flush=True)
        if args.repeat > 1:
            for (name, label), runs in ratios.items():
                print(f"  {name:<28} {label:<17} ratio median {statistics.median(runs):.2f} "
                      f"(runs {', '.join(f'{r:.2f}' for r in runs)})")

        if "latency" in only:
            print(f"commit-to-readable latency at {args.rate:,} rows/s (transactions of 50 rows):")
            for label, server, compressed, binlake, debezium in variants:
                for name, address, connector in (("binlake", logcore.address, binlake),
                                                 ("Debezium", kafka.address, debezium)):
                    connector.start()
                    try:
                        print(f"  {label:<17} {name:9}", end=" ")
                        latency(server, address, connector.topic, args.rate, args.seconds, 50, first_id + 1,
                                compressed)
                    finally:
                        connector.stop()
                    first_id += int(args.rate * (args.seconds + 3)) + 1
    finally:
        logcore.stop()
        kafka.stop()
        for server in servers:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
