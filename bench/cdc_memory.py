"""Memory of one huge MySQL transaction: the mysql connector's peak resident memory while it streams a
single UPDATE of every row of a large table (the issue's 2 GB transaction: 5 million rows).

    .venv/bin/python bench/cdc_memory.py [--server mariadb|mysql] [--rows 5000000] [--width 150 (characters)]
                                         [--compressed] [--max-batch-bytes 8388608] [--max-queue-bytes 67108864]

Starts a throwaway server (sandbox.sql) and one `binlake broker`, fills bench.t (id, v, pad of --width
characters) with --rows rows, starts `binlake connect run` (exactly-once, snapshot: no_data), then runs
`UPDATE t SET v = v + 1` as one transaction and samples the resident memory of the connector and its
processes (its source process and fork server: testkit.memory) until the committed offset has passed the
transaction. Prints the transaction's binlog bytes, the time the connector took and the RSS peak, per
process and in all, and whether the transaction stayed atomic: a read_committed reader's end of the topic
(its last stable offset, sampled every second) showed either none of its changes or all of them, and
ends at the row count plus one commit marker (one Kafka transaction, none aborted and retried). --compressed (MySQL): the UPDATE runs with binlog_transaction_compression=ON, one
zstd TRANSACTION_PAYLOAD event that the connector decompresses as a stream.

The Kafka transaction stays open while the MySQL transaction's slices are written: the bench raises
producer.transaction_timeout_ms and the broker's transaction.max.timeout.ms to --transaction-timeout-s
(default 1 h: on a shared 2-core machine 5 million rows take longer than Kafka's 15-minute limit), as a
deployment expecting such transactions must (docs/cdc.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc_pipeline import committed_position  # noqa: E402
from produce_consume import BrokerUnderTest  # noqa: E402

import yaml  # noqa: E402
from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from sandbox.sql import start_server  # noqa: E402
from testkit.memory import PeakRss, rss_by_process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def fill(server, rows: int, width: int) -> None:
    server.sql("CREATE DATABASE bench",
               f"CREATE TABLE bench.t (id BIGINT PRIMARY KEY, v INT NOT NULL, pad VARCHAR({max(width, 1)}))")
    seed = min(rows, 10_000)
    server.sql("INSERT INTO bench.t VALUES " + ", ".join(f"({i}, 0, REPEAT('p', {width}))" for i in range(1, seed + 1)))
    have = seed
    while have < rows:     # doubling, each step one INSERT ... SELECT
        step = min(have, rows - have)
        server.sql(f"INSERT INTO bench.t SELECT id + {have}, v, pad FROM bench.t WHERE id <= {step}")
        have += step


async def stable_end(address: str, topic: str) -> int:
    """The end of partition 0 of `topic` as a read_committed consumer sees it (its last stable offset)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        return (await consumer.end_offsets([partition]))[partition]
    except Exception:      # (the topic is created with the transaction's first slice)
        return 0
    finally:
        await consumer.stop()


def binlog_bytes(server) -> int:
    return sum(int(row[1]) for row in server.sql("SHOW BINARY LOGS"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["mariadb", "mysql"], default="mariadb")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--width", type=int, default=150)
    parser.add_argument("--compressed", action="store_true")
    parser.add_argument("--max-batch-bytes", type=int, default=8 * MiB)
    parser.add_argument("--max-queue-bytes", type=int, default=64 * MiB)
    parser.add_argument("--transaction-timeout-s", type=int, default=3600)
    args = parser.parse_args()
    if args.compressed and args.server != "mysql":
        parser.error("--compressed is MySQL's binlog_transaction_compression")
    timeout_ms = args.transaction_timeout_s * 1000
    base = Path(tempfile.mkdtemp(prefix="binlake-cdc-memory-"))
    print(f"work directory {base}")
    (base / "broker").mkdir()
    broker = BrokerUnderTest(str(base / "broker" / "data"), ["transaction.state.log.num.partitions=5",
                                                              "offsets.topic.num.partitions=5",
                                                              f"transaction.max.timeout.ms={timeout_ms}"])
    options = {"max-binlog-size": "1G", "innodb-buffer-pool-size": "512M"}
    server = start_server(args.server, base / args.server, options={   # (after the broker, which may fail to start)
        **({"log-bin": "binlog", "server-id": "1", "gtid-mode": "ON", "enforce-gtid-consistency": "ON"}
           if args.server == "mysql" else {"log-bin": "binlog", "binlog-format": "ROW", "binlog-row-image": "FULL",
                                           "binlog-row-metadata": "FULL", "server-id": "1"}), **options})
    connect = None
    try:
        started = time.monotonic()
        fill(server, args.rows, args.width)
        print(f"filled bench.t with {args.rows:,} rows in {time.monotonic() - started:.0f} s")
        config = base / "memory.yaml"
        config.write_text(yaml.safe_dump({
            "name": "memory", "connector": "mysql", "bootstrap_servers": broker.address,
            "database": {"host": "127.0.0.1", "port": server.port, "user": "root", "password": "", "server_id": 77},
            "tables": {"include": [r"bench\.t"]}, "snapshot": "no_data", "heartbeat_interval_ms": 1000,
            "max_batch_bytes": args.max_batch_bytes, "max_queue_bytes": args.max_queue_bytes,
            "producer": {"transaction_timeout_ms": timeout_ms}}))
        log = open(base / "connect.log", "ab")
        connect = subprocess.Popen([sys.executable, "-m", "binlake.cli", "connect", "run", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        # (the offsets topic is read only once the connector has created it, compacted)
        while "memory-0 started" not in (base / "connect.log").read_text(errors="replace") or asyncio.run(
                committed_position(broker.address, "memory")) is None:              # started, first heartbeat
            if connect.poll() is not None:
                raise SystemExit((base / "connect.log").read_text()[-3000:])
            time.sleep(0.5)
        before = rss_by_process(connect.pid)
        sampler = PeakRss(connect.pid, every_s=0.1).start()
        binlog0 = binlog_bytes(server)
        started = time.monotonic()
        session = ["SET SESSION binlog_transaction_compression = ON"] if args.compressed else []
        server.sql(*session, "UPDATE bench.t SET v = v + 1")
        written = time.monotonic() - started
        size = binlog_bytes(server) - binlog0
        print(f"the UPDATE of {args.rows:,} rows: {size / MiB:,.0f} MiB of binlog, {written:.0f} s in the server")
        # Until a read_committed reader sees the transaction (with the offset past it, in the same Kafka
        # transaction; the committed binlog position is no test: a transaction larger than max-binlog-size
        # rotates the binlog, and the offset stays at the new file's start while the server's end moves on).
        seen = set()        # the read_committed ends sampled while the transaction was written
        while (final := asyncio.run(stable_end(broker.address, "memory.bench.t"))) < args.rows:
            if connect.poll() is not None:
                raise SystemExit((base / "connect.log").read_text()[-3000:])
            seen.add(final)
            time.sleep(1)
        took = time.monotonic() - started
        peak = sampler.stop()
        print(f"connector: committed after {took:.0f} s ({args.rows / took:,.0f} rows/s from the UPDATE's start)")
        print(f"RSS before {sum(before.values()) / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB "
              f"(per process, peak: {', '.join(f'{p}: {r / MiB:.0f} MiB' for p, r in sampler.peaks.items())})")
        partial = sorted(n for n in seen if 0 < n < args.rows)
        print(f"atomic: {'yes' if not partial and final == args.rows + 1 else 'NO'} (read_committed end sampled "
              f"{len(seen)} distinct values, partial ones: {partial[:5]}; at the end {final:,} = {args.rows:,} changes "
              f"+ {final - args.rows} commit marker)")
    finally:
        if connect is not None:
            connect.terminate()
            connect.wait(60)
        broker.proc.terminate()
        broker.proc.wait(60)
        server.stop()


if __name__ == "__main__":
    main()
