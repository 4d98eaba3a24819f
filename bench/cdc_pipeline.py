"""MySQL → log end to end: the mysql connector (`binlake connect run`, exactly_once) against a real broker.

    .venv/bin/python bench/cdc_pipeline.py [--rows 200000] [--rate 5000] [--seconds 10] [--repeat 1]
                                           [--commit-interval-ms 0] [--profile DIR]

Starts a throwaway mariadbd (binlake.sandbox) and a `binlake broker` subprocess, and measures:

  throughput   cdc_decode.py's two workloads (batch inserts; mixed insert/update/delete) are written to
               the binlog while the connector is stopped; then it starts and catches up. Rows/s = row
               changes / (last event readable - first event readable), where "readable" means below the
               last stable offset, i.e. what a read_committed consumer gets; everything is then read
               back with read_committed and counted. Beside it, pymysqlreplication's own read loop over
               the same binlog range (cdc_decode.raw_pymysqlreplication), the ceiling of a pure-Python
               binlog reader.
  latency      transactions of --txn-rows rows committed at --rate rows/s while the connector follows
               the binlog; latency = when a read_committed consumer receives the row's event - when
               MySQL's COMMIT returned.

CPU seconds of the connector and broker processes are printed too (2 shared cores: wall-clock rates
move with the load). --profile DIR samples both with py-spy (collapsed stacks, see profile_summary.py).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc_decode import TABLE, batch_inserts, mixed, position, raw_pymysqlreplication  # noqa: E402
from produce_consume import BrokerUnderTest, process_cpu_seconds  # noqa: E402

import yaml  # noqa: E402
from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from binlake.sandbox import start_mariadb  # noqa: E402
from connect.topics import LogTopics  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 6
TOPIC = "bench.bench.t"
OVERRIDES = ["transaction.state.log.num.partitions=5", "offsets.topic.num.partitions=5"]


def write_config(path: Path, address: str, mysql_port: int, commit_interval_ms: int) -> Path:
    """The bench's connector: table bench.t, streamed from where it first starts (snapshot no_data)."""
    path.write_text(yaml.safe_dump({
        "name": "bench", "connector": "mysql", "bootstrap_servers": address, "commit_interval_ms": commit_interval_ms,
        "database": {"host": "127.0.0.1", "port": mysql_port, "user": "root", "password": "", "server_id": 77},
        "tables": {"include": [r"bench\.t"]}, "snapshot": "no_data", "topic_partitions": PARTITIONS,
        "heartbeat_interval_ms": 1000}))
    return path


class Connector:
    """`binlake connect run` on a config file; started and stopped per measurement."""

    def __init__(self, config: Path, log_path: Path) -> None:
        self.config = config
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.profiler: subprocess.Popen | None = None

    def start(self, profile: str | None = None) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "connect", "run", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while "bench-0 started" not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the connector did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        if profile:
            self.profiler = subprocess.Popen(
                [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--pid", str(self.proc.pid),
                 "--rate", "250", "--format", "raw", "--threads", "--output", profile, "--nonblocking", "--subprocesses"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.profiler is not None:
            self.profiler.send_signal(signal.SIGINT)
            self.profiler.wait(30)
            self.profiler = None
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(60) != 0:
            raise SystemExit(f"the connector failed:\n{self.log_path.read_text()[-3000:]}")


async def stable_offsets(consumer: AIOKafkaConsumer) -> int:
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    return sum((await consumer.end_offsets(partitions)).values())


async def committed_position(address: str) -> tuple[str, int] | None:
    """The connector's committed binlog position, read from the offsets topic the way the runtime reads it."""
    found = None
    for key, value in await LogTopics(address).read("binlake-offsets"):
        if json.loads(key)[0] == "bench" and value:
            offset = json.loads(value)
            found = (offset["file"], offset["pos"])
    return found


async def count_changes(address: str) -> int:
    """Row-change events in the topic (tombstones and schema changes excluded), read with read_committed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20)  # 6 x 8 MiB fit
    await consumer.start()
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        end = await consumer.end_offsets(partitions)
        n = 0
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            for messages in (await consumer.getmany(timeout_ms=500, max_records=100_000)).values():
                n += sum(1 for m in messages if m.value is not None)
        return n
    finally:
        await consumer.stop()


async def catch_up(address: str, connector: Connector, end: tuple[str, int], profile: str | None) -> tuple[float, float]:
    """Start the connector; (seconds from the first to the last event readable, connector CPU seconds)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed")
    await consumer.start()
    try:
        base = await stable_offsets(consumer)
        connector.start(profile)
        cpu0 = connector.cpu_seconds()
        first = last = None
        value = base
        while True:
            now, lso = time.monotonic(), await stable_offsets(consumer)
            if lso != value:
                first = first or now
                value, last = lso, now
            elif last is not None and now - last > 0.5 and (await committed_position(address) or ("", 0)) >= end:
                break
            await asyncio.sleep(0.005)
        return last - first, connector.cpu_seconds() - cpu0
    finally:
        await consumer.stop()
        connector.stop()


def throughput(name: str, write, rows: int, first_id: int, server, broker: BrokerUnderTest, connector: Connector,
               profile: str | None) -> None:
    with server.connect(db="bench") as conn, conn.cursor() as cur:
        start = position(cur)
        changes = write(cur, rows, first_id)
        end = position(cur)
    before = asyncio.run(count_changes(broker.address))
    broker_cpu = broker.cpu_seconds()
    wall, connector_cpu = asyncio.run(catch_up(broker.address, connector, (end.file, end.pos), profile))
    broker_cpu = broker.cpu_seconds() - broker_cpu
    landed = asyncio.run(count_changes(broker.address)) - before
    assert landed == changes, f"{name}: {landed} row-change events read back, expected {changes}"
    settings = {"host": "127.0.0.1", "port": server.port, "user": "root", "password": ""}
    t0 = time.perf_counter()
    raw = raw_pymysqlreplication(settings, start)
    raw_wall = time.perf_counter() - t0
    print(f"{name:<28} {changes:>9,} {changes / wall:>12,.0f} {wall:>7.2f} {connector_cpu:>8.2f} {broker_cpu:>7.2f}"
          f"   pymysqlreplication alone: {raw / raw_wall:,.0f} rows/s")


def latency(server, broker: BrokerUnderTest, connector: Connector, rate: int, seconds: float, txn_rows: int,
            first_id: int) -> None:
    commits: dict[int, float] = {}          # first id of a transaction -> when its COMMIT returned
    stop = threading.Event()

    def write() -> None:
        with server.connect(db="bench") as conn, conn.cursor() as cur:
            next_id, started = first_id, time.monotonic()
            while not stop.is_set():
                due = started + (next_id - first_id) / rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                cur.execute("BEGIN")
                cur.execute("INSERT INTO bench.t SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 7, "
                            f"'2024-01-01' + INTERVAL seq SECOND, seq / 100 FROM seq_{next_id}_to_{next_id + txn_rows - 1}")
                cur.execute("COMMIT")
                commits[next_id] = time.time()
                next_id += txn_rows

    async def measure() -> list[float]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.address, isolation_level="read_committed",
                                    enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)
        # Warm up: the first event of a run pays for topic metadata and the producer's first partition adds.
        server.sql(f"INSERT INTO bench.t VALUES ({first_id - 1}, 0, 'warm-up', 0, NULL, 0)")
        while not any(m.value is not None for ms in (await consumer.getmany(timeout_ms=200)).values() for m in ms):
            pass
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        received: list[tuple[int, float]] = []
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline + 2:
                if time.monotonic() > deadline:
                    stop.set()
                for messages in (await consumer.getmany(timeout_ms=100)).values():
                    now = time.time()
                    received += [(json.loads(m.key)["id"], now) for m in messages if m.value is not None]
        finally:
            stop.set()
            writer.join()
            await consumer.stop()
        firsts = sorted(commits)
        return [now - commits[firsts[bisect.bisect_right(firsts, i) - 1]] for i, now in received
                if i >= first_id and firsts and bisect.bisect_right(firsts, i)]

    latencies = sorted(asyncio.run(measure()))
    if not latencies:
        raise SystemExit("no events received")
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"latency at {rate:,} rows/s ({txn_rows} rows per transaction): {len(latencies):,} rows, "
          f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms, "
          f"mean {statistics.fmean(latencies) * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--txn-rows", type=int, default=50)
    parser.add_argument("--commit-interval-ms", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=["inserts", "mixed", "latency"])
    parser.add_argument("--profile", metavar="DIR", help="py-spy collapsed stacks of connector and broker per run")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdc-pipeline-"))
    server = start_mariadb(base / "mariadb")
    (base / "broker").mkdir()
    broker = BrokerUnderTest(str(base / "broker" / "data"), OVERRIDES)
    try:
        server.sql("CREATE DATABASE bench", TABLE)
        config = write_config(base / "bench.yaml", broker.address, server.port, args.commit_interval_ms)
        asyncio.run(LogTopics(broker.address).ensure_topic(TOPIC, PARTITIONS))
        connector = Connector(config, base / "connect.log")
        connector.start()                       # records the table's structure; streams from here on
        while asyncio.run(committed_position(broker.address)) is None:
            time.sleep(0.2)
        connector.stop()
        print(f"mysql connector, exactly_once, commit_interval_ms={args.commit_interval_ms}, {PARTITIONS} partitions")
        print(f"{'workload':<28} {'changes':>9} {'rows/s':>12} {'wall s':>7} {'conn cpu':>8} {'brk cpu':>7}")
        first_id = 1
        only = args.only or ["inserts", "mixed", "latency"]
        for n in range(args.repeat):
            profile = (lambda name: os.path.join(args.profile, f"{name}-{n}.stacks")) if args.profile else (lambda _: None)
            if args.profile:
                os.makedirs(args.profile, exist_ok=True)
                broker.profile(profile("broker"))
            if "inserts" in only:
                throughput("batch inserts", batch_inserts, args.rows, first_id, server, broker, connector,
                           profile("inserts"))
                first_id += args.rows
            if "mixed" in only:
                throughput("mixed insert/update/delete", mixed, args.rows // 2, first_id, server, broker, connector,
                           profile("mixed"))
                first_id += args.rows // 2
            if "latency" in only:
                connector.start(profile("latency"))
                try:
                    latency(server, broker, connector, args.rate, args.seconds, args.txn_rows, first_id + 1)
                finally:
                    connector.stop()
                first_id += int(args.rate * (args.seconds + 3)) + 1
            if broker.profiler is not None:
                broker.profiler.send_signal(signal.SIGINT)
                broker.profiler.wait(30)
                broker.profiler = None
    finally:
        broker.stop()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
