"""The incremental snapshot's rows/s beside the initial snapshot's, on the same table (issue 35).

    .venv/bin/python bench/incremental_snapshot.py [--server mariadb|mysql] [--rows 200000] [--chunk 10000]
                                                   [--rate 500] [--rounds 3]

Starts a throwaway server (sandbox.sql) and one `binlake broker`, fills bench.t with --rows rows, then:

  initial       a connector (exactly_once) with `snapshot: initial` reads the table under its brief lock;
  incremental   another one, started with `snapshot: no_data`, is asked by a row in the signal table for
                an incremental snapshot of the same table, while a workload updates --rate rows/s of it
                (single-row updates, deletes and inserts in a 10:1:1 mix): DBLog chunks of --chunk rows
                between watermarks.

Rows/s = snapshot reads / (the last read's log timestamp - the first read's), both read back with a
read_committed consumer, so connector start-up is not counted. On 2 shared cores wall-clock rates move
with the load, so the two alternate for --rounds rounds (new connectors each time, on the same table) and
each round prints its ratio; the summary is the median ratio. Beside rows/s, rows per CPU second of the
connector's processes (testkit.cpu; from the start of the reading to its end) compares what each costs,
which the other tenants of a loaded machine move much less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import BrokerUnderTest  # noqa: E402

import yaml  # noqa: E402
from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from common.log_topics import LogTopics  # noqa: E402
from sandbox.sql import start_server  # noqa: E402
from testkit.cpu import tree_cpu_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 3


def config(path: Path, name: str, address: str, port: int, **keys) -> Path:
    path.write_text(yaml.safe_dump({
        "name": name, "connector": "mysql", "bootstrap_servers": address, "commit_interval_ms": 100,
        "database": {"host": "127.0.0.1", "port": port, "user": "root", "password": "", "server_id": 77},
        "tables": {"include": [r"bench\.t"]}, "topic_partitions": PARTITIONS, "heartbeat_interval_ms": 1000,
        **keys}))
    return path


def start_connector(config_path: Path, log_path: Path, name: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "connect", "run", str(config_path)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while f"{name}-0 started" not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the connector did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.05)
    return proc


async def offset(address: str, name: str) -> dict | None:
    """The connector's last committed source offset (read once the connector created the offsets topic)."""
    found = None
    for key, value in await LogTopics(address).read("binlake-offsets"):
        if value is not None and json.loads(key)[0] == name:
            found = json.loads(value)
    return found


async def reads(address: str, topic: str) -> tuple[int, float]:
    """(snapshot reads, seconds from the first read's log timestamp to the last's)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        end = await consumer.end_offsets(partitions)
        count, first, last = 0, float("inf"), 0.0
        while pending := [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            for messages in (await consumer.getmany(*pending, timeout_ms=500, max_records=10_000)).values():
                for m in messages:
                    if m.value is not None and b'"op":"r"' in m.value:
                        count += 1
                        first, last = min(first, m.timestamp), max(last, m.timestamp)
        return count, (last - first) / 1000
    finally:
        await consumer.stop()


def wait_for(predicate, what: str, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def workload(server, rows: int, rate: int, stop: threading.Event, done: list[int]) -> None:
    rng = random.Random(7)
    with server.connect(db="bench") as conn, conn.cursor() as cur:
        cur.execute("SELECT MAX(id) FROM t")
        (next_id,) = cur.fetchone()            # (past the rows an earlier round inserted)
        conn.commit()
        started = time.monotonic()
        while not stop.is_set():
            r = rng.random()
            if r < 10 / 12:
                cur.execute(f"UPDATE t SET v = v + 1 WHERE id = {rng.randrange(1, rows + 1)}")
            elif r < 11 / 12:
                cur.execute(f"DELETE FROM t WHERE id = {rng.randrange(1, rows + 1)}")
            else:
                next_id += 1
                cur.execute(f"INSERT INTO t VALUES ({next_id}, 1, 'new', REPEAT('n', 80))")
            conn.commit()
            done[0] += 1
            ahead = done[0] / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


def initial_snapshot(base: Path, broker, server, args, name: str) -> tuple[float, float]:
    """(rows/s, rows per CPU second) of `snapshot: initial` on bench.t, alone."""
    proc = start_connector(config(base / f"{name}.yaml", name, broker.address, server.port,
                                  snapshot="initial", snapshot_chunk_rows=args.chunk), base / f"{name}.log", name)
    cpu = tree_cpu_seconds(proc.pid)        # (from "started": the snapshot begins)
    wait_for(lambda: (o := asyncio.run(offset(broker.address, name))) is not None and "snapshot" not in o,
             "the initial snapshot")
    cpu = tree_cpu_seconds(proc.pid) - cpu
    proc.terminate()
    proc.wait(60)
    n, seconds = asyncio.run(reads(broker.address, f"{name}.bench.t"))
    print(f"initial snapshot:     {n:,} rows in {seconds:.2f} s = {n / seconds:,.0f} rows/s; "
          f"{cpu:.1f} CPU s = {n / cpu:,.0f} rows/CPU s", flush=True)
    return n / seconds, n / cpu


def incremental_snapshot(base: Path, broker, server, args, name: str) -> tuple[float, float]:
    """(rows/s, rows per CPU second) of an incremental snapshot of bench.t on a signal, under the workload."""
    proc = start_connector(config(base / f"{name}.yaml", name, broker.address, server.port, snapshot="no_data",
                                  snapshot_chunk_rows=args.chunk, signals={"table": "bench.binlake_signal"}),
                           base / f"{name}.log", name)
    wait_for(lambda: asyncio.run(offset(broker.address, name)) is not None, "the connector's first commit")
    stop, done = threading.Event(), [0]
    writer = threading.Thread(target=workload, args=(server, args.rows, args.rate, stop, done), daemon=True)
    if args.rate:
        writer.start()
        time.sleep(1)
    started, cpu = time.monotonic(), tree_cpu_seconds(proc.pid)
    server.sql("INSERT INTO bench.binlake_signal VALUES ('" + name + "', 'execute-snapshot', "
               "'{\"data-collections\": [\"bench.t\"], \"type\": \"incremental\"}')")
    wait_for(lambda: "incremental snapshot done" in (base / f"{name}.log").read_text(errors="replace"),
             "the incremental snapshot")
    elapsed, cpu = time.monotonic() - started, tree_cpu_seconds(proc.pid) - cpu
    stop.set()
    if args.rate:
        writer.join()
    proc.terminate()
    proc.wait(60)
    n, seconds = asyncio.run(reads(broker.address, f"{name}.bench.t"))
    print(f"incremental snapshot: {n:,} rows in {seconds:.2f} s = {n / seconds:,.0f} rows/s; {cpu:.1f} CPU s = "
          f"{n / cpu:,.0f} rows/CPU s (signal to done {elapsed:.1f} s; workload "
          f"{done[0] / max(elapsed, 1e-3):,.0f} changes/s)", flush=True)
    return n / seconds, n / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["mariadb", "mysql"], default="mariadb")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=500, help="workload row changes per second (0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="initial and incremental snapshots, alternating")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-incsnap-"))
    (base / "broker").mkdir()
    broker = BrokerUnderTest(str(base / "broker" / "data"), ["transaction.state.log.num.partitions=5",
                                                             "offsets.topic.num.partitions=5"])
    server = start_server(args.server, base / args.server)
    try:
        server.sql("CREATE DATABASE bench",
                   "CREATE TABLE bench.t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40), pad VARCHAR(100))",
                   "CREATE TABLE bench.binlake_signal (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32), data TEXT)")
        for start in range(1, args.rows + 1, 10_000):
            server.sql("INSERT INTO bench.t VALUES " + ", ".join(
                f"({i}, {i % 97}, 's{i}', REPEAT('p', 80))" for i in range(start, min(args.rows, start + 9_999) + 1)))
        print(f"{args.server}: bench.t holds {args.rows:,} rows; snapshot_chunk_rows {args.chunk:,}", flush=True)

        ratios, cpu_ratios = [], []
        for round_ in range(1, args.rounds + 1):
            initial, initial_cpu = initial_snapshot(base, broker, server, args, f"initial{round_}")
            incremental, incremental_cpu = incremental_snapshot(base, broker, server, args, f"incr{round_}")
            ratios.append(incremental / initial)
            cpu_ratios.append(incremental_cpu / initial_cpu)
            print(f"round {round_}: incremental / initial = {ratios[-1]:.2f}x rows/s, {cpu_ratios[-1]:.2f}x rows/CPU s",
                  flush=True)
        print(f"median of {len(ratios)} rounds: {statistics.median(ratios):.2f}x rows/s "
              f"({', '.join(f'{r:.2f}' for r in ratios)}), {statistics.median(cpu_ratios):.2f}x rows/CPU s "
              f"({', '.join(f'{r:.2f}' for r in cpu_ratios)})", flush=True)
    finally:
        broker.stop()
        server.stop()


if __name__ == "__main__":
    main()
