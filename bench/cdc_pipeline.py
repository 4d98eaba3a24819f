"""MySQL → log end to end: the mysql connector (`binlake connect run`, exactly_once) against a real broker.

    .venv/bin/python bench/cdc_pipeline.py [--server mariadb|mysql|both] [--rows 200000] [--rate 5000]
                                           [--seconds 10] [--repeat 1] [--commit-interval-ms 0]
                                           [--only inserts mixed latency] [--profile DIR]

Starts a throwaway mariadbd and/or Oracle mysqld (sandbox.sql: MariaDB with full row metadata,
MySQL at its defaults plus GTIDs, so MINIMAL row metadata) and one `binlake broker` subprocess, with
one connector per server (named after it: topics mariadb.bench.t, mysql.bench.t). On MySQL every
measurement runs twice: plain, and with `binlog_transaction_compression=ON` in the writing session
(each transaction one zstd TRANSACTION_PAYLOAD event), so a run prints MariaDB, MySQL and MySQL
compressed side by side; with --repeat, rounds alternate the order. It measures:

  throughput   cdc_decode.py's two workloads (batch inserts; mixed insert/update/delete) are written to
               the binlog while the connector is stopped; then it starts and catches up. Rows/s = row
               changes / (last event readable - first event readable), where "readable" means below the
               last stable offset, i.e. what a read_committed consumer gets; everything is then read
               back with read_committed and counted. Beside it, pymysqlreplication's own read loop over
               the same binlog range (cdc_decode.raw_pymysqlreplication), the ceiling of a pure-Python
               binlog reader (it skips compressed transactions: not run on those).
  latency      transactions of --txn-rows rows committed at --rate rows/s while the connector follows
               the binlog; latency = when a read_committed consumer receives the row's event - when
               MySQL's COMMIT returned.

CPU seconds of the connector (its source process included) and broker processes are printed too
(2 shared cores: wall-clock rates move with the load; µs of connector CPU per change is steadier).
--profile DIR samples both with py-spy (collapsed stacks, see profile_summary.py).
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
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc_decode import SETUP, batch_inserts, compression, mixed, position, raw_pymysqlreplication, row_values  # noqa: E402
from produce_consume import BrokerUnderTest, process_cpu_seconds  # noqa: E402

import yaml  # noqa: E402
from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from sandbox.sql import SqlServer, start_server  # noqa: E402
from common.log_topics import LogTopics  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 6
OVERRIDES = ["transaction.state.log.num.partitions=5", "offsets.topic.num.partitions=5"]


def topic_of(name: str) -> str:
    """The change topic of bench.t for a connector (or Debezium topic.prefix) `name`."""
    return f"{name}.bench.t"


def write_config(path: Path, address: str, mysql_port: int, commit_interval_ms: int, name: str = "bench") -> Path:
    """The bench's connector `name`: table bench.t, streamed from where it first starts (snapshot no_data)."""
    path.write_text(yaml.safe_dump({
        "name": name, "connector": "mysql", "bootstrap_servers": address, "commit_interval_ms": commit_interval_ms,
        "database": {"host": "127.0.0.1", "port": mysql_port, "user": "root", "password": "", "server_id": 77},
        "tables": {"include": [r"bench\.t"]}, "snapshot": "no_data", "topic_partitions": PARTITIONS,
        "heartbeat_interval_ms": 1000}))
    return path


class Connector:
    """`binlake connect run` on a config file; started and stopped per measurement."""

    def __init__(self, config: Path, log_path: Path, name: str = "bench") -> None:
        self.config = config
        self.log_path = log_path
        self.name = name
        self.topic = topic_of(name)
        self.proc: subprocess.Popen | None = None
        self.profiler: subprocess.Popen | None = None

    def start(self, profile: str | None = None) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "connect", "run", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while f"{self.name}-0 started" not in self.log_path.read_text(errors="replace"):
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


async def stable_offsets(consumer: AIOKafkaConsumer, topic: str) -> int:
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return sum((await consumer.end_offsets(partitions)).values())


async def committed_position(address: str, name: str = "bench") -> tuple[str, int] | None:
    """The connector's committed binlog position, read from the offsets topic the way the runtime reads it."""
    found = None
    for key, value in await LogTopics(address).read("binlake-offsets"):
        if json.loads(key)[0] == name and value:
            offset = json.loads(value)
            found = (offset["file"], offset["pos"])
    return found


async def count_changes(address: str, topic: str) -> int:
    """Row-change events in the topic (tombstones and schema changes excluded), read with read_committed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20)  # 6 x 8 MiB fit
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
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
        base = await stable_offsets(consumer, connector.topic)
        connector.start(profile)
        cpu0 = connector.cpu_seconds()
        first = last = None
        value = base
        while True:
            now, lso = time.monotonic(), await stable_offsets(consumer, connector.topic)
            if lso != value:
                first = first or now
                value, last = lso, now
            elif (last is not None and now - last > 0.5
                  and (await committed_position(address, connector.name) or ("", 0)) >= end):
                break
            await asyncio.sleep(0.005)
        return last - first, connector.cpu_seconds() - cpu0
    finally:
        await consumer.stop()
        connector.stop()


# (--only key, name, writer, share of --rows): an update has two row images, so the mixed load writes
# half the rows for about the same binlog
WORKLOADS = (("inserts", "batch inserts", batch_inserts, 1), ("mixed", "mixed insert/update/delete", mixed, 2))


@dataclass
class Source:
    """One server and its connector (named after the server's kind)."""

    server: SqlServer
    connector: Connector


@dataclass
class Variant:
    """A server and how its workload's sessions write: plain, or MySQL's compressed transactions."""

    label: str
    source: Source
    compressed: bool = False
    figures: dict[str, list] = field(default_factory=dict)   # workload -> [(rows/s, µs CPU per change), ...]

    @property
    def slug(self) -> str:
        return self.label.lower().replace(" ", "-")


def throughput(name: str, write, rows: int, first_id: int, variant: Variant, broker: BrokerUnderTest,
               profile: str | None) -> None:
    server, connector = variant.source.server, variant.source.connector
    with server.connect(db="bench") as conn, conn.cursor() as cur:
        compression(cur, variant.compressed)
        start = position(cur)
        changes = write(cur, rows, first_id)
        end = position(cur)
    before = asyncio.run(count_changes(broker.address, connector.topic))
    broker_cpu = broker.cpu_seconds()
    wall, connector_cpu = asyncio.run(catch_up(broker.address, connector, (end.file, end.pos), profile))
    broker_cpu = broker.cpu_seconds() - broker_cpu
    landed = asyncio.run(count_changes(broker.address, connector.topic)) - before
    assert landed == changes, f"{name}, {variant.label}: {landed} row-change events read back, expected {changes}"
    raw = ""
    if not variant.compressed:      # (pymysqlreplication skips compressed transactions)
        settings = {"host": "127.0.0.1", "port": server.port, "user": "root", "password": ""}
        t0 = time.perf_counter()
        n = raw_pymysqlreplication(settings, start)
        raw = f"{n / (time.perf_counter() - t0):,.0f}"
    variant.figures.setdefault(name, []).append((changes / wall, connector_cpu / changes * 1e6))
    print(f"{name:<28} {variant.label:<17} {changes:>9,} {changes / wall:>9,.0f} {wall:>7.2f} {connector_cpu:>8.2f} "
          f"{connector_cpu / changes * 1e6:>6.1f} {broker_cpu:>7.2f} {raw:>10}", flush=True)


def latency(server: SqlServer, address: str, topic: str, rate: int, seconds: float, txn_rows: int,
            first_id: int, compressed: bool = False) -> tuple[float, float]:
    """Commit-to-readable latency of rows written at `rate` (read_committed on `topic`); prints the
    figures and returns (p50, p99) in ms."""
    commits: dict[int, float] = {}          # first id of a transaction -> when its COMMIT returned
    stop = threading.Event()

    def write() -> None:
        with server.connect(db="bench") as conn, conn.cursor() as cur:
            compression(cur, compressed)
            next_id, started = first_id, time.monotonic()
            while not stop.is_set():
                due = started + (next_id - first_id) / rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO bench.t {row_values(next_id, next_id + txn_rows - 1)}")
                cur.execute("COMMIT")
                commits[next_id] = time.time()
                next_id += txn_rows

    async def measure() -> list[float]:
        consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed",
                                    enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)
        # Warm up: the first event of a run pays for topic metadata and the producer's first partition adds
        # (and a restarted Debezium may first send again what it sent before its last stored offset).
        server.sql(f"INSERT INTO bench.t VALUES ({first_id - 1}, 0, 'warm-up', 0, NULL, 0)")
        deadline = time.monotonic() + 120
        while not any(m.value is not None and json.loads(m.key)["id"] == first_id - 1
                      for ms in (await consumer.getmany(timeout_ms=200)).values() for m in ms):
            if time.monotonic() > deadline:
                return []
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
        print("no events received (the warm-up row's took over 120 s, or none came in time)")
        return float("nan"), float("nan")
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"latency at {rate:,} rows/s ({txn_rows} rows per transaction): {len(latencies):,} rows, "
          f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms, "
          f"mean {statistics.fmean(latencies) * 1000:.1f} ms", flush=True)
    return p50 * 1000, p99 * 1000


def start_sources(kinds: list[str], base: Path, broker: BrokerUnderTest, commit_interval_ms: int,
                  sources: list[Source]) -> None:
    """Into `sources`: a server of each kind with bench.t, and its connector, which has recorded its
    start position (then stopped)."""
    for kind in kinds:
        server = start_server(kind, base / kind)
        sources.append(Source(server, Connector(write_config(base / f"{kind}.yaml", broker.address, server.port,
                                                             commit_interval_ms, kind), base / f"{kind}-connect.log",
                                                kind)))
        server.sql(*SETUP)
        asyncio.run(LogTopics(broker.address).ensure_topic(topic_of(kind), PARTITIONS))
    for source in sources:
        source.connector.start()                # records the table's structure; streams from here on
        while asyncio.run(committed_position(broker.address, source.connector.name)) is None:
            time.sleep(0.2)
        source.connector.stop()


def variants_of(sources: list[Source]) -> list[Variant]:
    variants = []
    for source in sources:
        variants.append(Variant(source.server.name, source))
        if source.server.kind == "mysql":
            variants.append(Variant(f"{source.server.name} compressed", source, compressed=True))
    return variants


def summary(variants: list[Variant], workloads: list[str]) -> None:
    """Best rows/s of each variant per workload, median µs of connector CPU per change, and the ratios
    to the first variant (MariaDB with --server both)."""
    print(f"\nsummary (best rows/s of {len(variants[0].figures.get(workloads[0], []))} run(s); "
          f"median connector CPU µs per change)")
    for workload in workloads:
        base = variants[0].figures.get(workload)
        for v in variants:
            runs = v.figures.get(workload)
            if not runs:
                continue
            best, cpu = max(r for r, _ in runs), statistics.median(c for _, c in runs)
            ratio = f"x{best / max(r for r, _ in base):.2f} rows/s, x{cpu / statistics.median(c for _, c in base):.2f} CPU"
            print(f"  {workload:<28} {v.label:<17} {best:>9,.0f} rows/s  {cpu:>5.1f} µs/change  {ratio} "
                  f"vs {variants[0].label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["mariadb", "mysql", "both"], default="both")
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
    (base / "broker").mkdir()
    broker = BrokerUnderTest(str(base / "broker" / "data"), OVERRIDES)
    sources: list[Source] = []
    try:
        kinds = ["mariadb", "mysql"] if args.server == "both" else [args.server]
        start_sources(kinds, base, broker, args.commit_interval_ms, sources)
        variants = variants_of(sources)
        print(f"mysql connector, exactly_once, commit_interval_ms={args.commit_interval_ms}, {PARTITIONS} partitions; "
              f"{os.cpu_count()} cores shared by the servers, the broker and the connector")
        print(f"{'workload':<28} {'server':<17} {'changes':>9} {'rows/s':>9} {'wall s':>7} {'conn cpu':>8} "
              f"{'µs/chg':>6} {'brk cpu':>7} {'pymysqlrepl. alone':>10}")
        first_id = 1
        only = args.only or ["inserts", "mixed", "latency"]
        for n in range(args.repeat):
            profile = (lambda name: os.path.join(args.profile, f"{name}-{n}.stacks")) if args.profile else (lambda _: None)
            if args.profile:
                os.makedirs(args.profile, exist_ok=True)
                broker.profile(profile("broker"))
            order = variants if n % 2 == 0 else variants[::-1]
            for key, workload, write, share in WORKLOADS:
                if key not in only:
                    continue
                for v in order:
                    rows = args.rows // share
                    throughput(workload, write, rows, first_id, v, broker, profile(f"{key}-{v.slug}"))
                    first_id += rows
            if "latency" in only:
                for v in order:
                    connector = v.source.connector
                    connector.start(profile(f"latency-{v.slug}"))
                    try:
                        print(f"{v.label:<17}", end=" ")
                        p50, p99 = latency(v.source.server, broker.address, connector.topic, args.rate, args.seconds,
                                           args.txn_rows, first_id + 1, v.compressed)
                        v.figures.setdefault("latency", []).append((p50, p99))
                    finally:
                        connector.stop()
                    first_id += int(args.rate * (args.seconds + 3)) + 1
            if broker.profiler is not None:
                broker.profiler.send_signal(signal.SIGINT)
                broker.profiler.wait(30)
                broker.profiler = None
        workloads = [workload for key, workload, _, _ in WORKLOADS if key in only]
        if workloads:
            summary(variants, workloads)
        if "latency" in only:
            for v in variants:
                runs = v.figures["latency"]
                print(f"  latency {v.label:<17} p50 {min(p for p, _ in runs):.1f} ms, "
                      f"p99 {min(p for _, p in runs):.1f}-{max(p for _, p in runs):.1f} ms")
    finally:
        broker.stop()
        for source in sources:
            source.server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
