"""Binlog decoding throughput: pymysqlreplication's own row decoding beside binlake's, on the same binlog.

    .venv/bin/python bench/cdc_decode.py [--rows 200000] [--server mariadb|mysql|both] [--port PORT]

Starts a throwaway mariadbd and/or Oracle mysqld (sandbox.sql; MySQL at its defaults plus GTIDs,
so MINIMAL row metadata: binlake takes the column names from a schema history seeded with the table's
DDL, as the connector does), unless --port names a binlog-enabled server (user root without
password). Writes two workloads into a 6-column table, and reads each back three ways from the same
positions:

  pymysqlreplication   BinLogStreamReader, touching every row's values (its `.rows`)
  binlake decode       the same replication stream, bodies decoded by cdc.rowdecoder's compiled decoders
  binlake records      the whole source (decode, Debezium JSON, key, murmur2 partition, batches + offsets)

Workloads: batch inserts (multi-row INSERTs, 1,000 rows per statement, 10 statements per transaction)
and mixed (per transaction: insert 1,000 rows, update 1,000, delete 500). Rows/s counts row changes.
On MySQL both are also written with `binlog_transaction_compression=ON` in the writing session
(TRANSACTION_PAYLOAD events, zstd), which pymysqlreplication does not read (its row is left out).
Last, the snapshot of the resulting table is timed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import pymysql  # noqa: E402
from pymysqlreplication import BinLogStreamReader  # noqa: E402
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: E402

from sandbox.sql import start_server  # noqa: E402
from cdc.binlog import PyMySqlReplicationClient, Rows, TableMap  # noqa: E402
from cdc.config import SourceConfig  # noqa: E402
from cdc.connection import make_engine  # noqa: E402
from cdc.dispatcher import Dispatcher  # noqa: E402
from cdc.emitter import Emitter  # noqa: E402
from cdc.offsets import BinlogPosition, Offset  # noqa: E402
from cdc.rowdecoder import compile_rows_decoder  # noqa: E402
from cdc.schema.columns import describe_columns  # noqa: E402
from cdc.schema.history import MemoryHistoryStore, SchemaHistory  # noqa: E402
from cdc.snapshot import SnapshotSource  # noqa: E402
from cdc.streaming import StreamingSource  # noqa: E402

TABLE = ("CREATE TABLE bench.t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32), c DOUBLE, "
         "d DATETIME, e DECIMAL(10,2))")
# The workloads' rows come from a table of the numbers 0..999 (MariaDB's sequence engine, seq_1_to_N,
# has no MySQL equivalent); it is written once, before any measured position.
SETUP = ["CREATE DATABASE bench", TABLE, "CREATE TABLE bench.n (n INT PRIMARY KEY)",
         "INSERT INTO bench.n VALUES " + ",".join(f"({n})" for n in range(1000))]


def seq(first: int, last: int) -> str:
    """A FROM clause of the rows first..last (at most 1,000) as the column `seq`."""
    return f"(SELECT {first} + n AS seq FROM bench.n WHERE n <= {last - first}) AS s"


def row_values(first: int, last: int) -> str:
    """The SELECT of rows first..last of bench.t (every workload's inserts)."""
    return ("SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 7, '2024-01-01' + INTERVAL seq SECOND, seq / 100 "
            f"FROM {seq(first, last)}")


def is_mysql(cur) -> bool:
    return "mariadb" not in cur.connection.get_server_info().lower()


def position(cur) -> BinlogPosition:
    """Where the server writes next (MySQL 8.4 renamed SHOW MASTER STATUS)."""
    cur.execute("SHOW BINARY LOG STATUS" if is_mysql(cur) else "SHOW MASTER STATUS")
    file, pos = cur.fetchone()[:2]
    return BinlogPosition(file, pos)


def compression(cur, on: bool) -> None:
    """MySQL's binlog_transaction_compression for this session's transactions (zstd TRANSACTION_PAYLOAD)."""
    if on or is_mysql(cur):
        cur.execute(f"SET SESSION binlog_transaction_compression = {'ON' if on else 'OFF'}")


def seeded_history() -> SchemaHistory:
    """A schema history holding bench.t, as the connector's would after its snapshot: with MINIMAL row
    metadata (MySQL's default) it is what names the columns."""
    history = SchemaHistory(MemoryHistoryStore())
    history.record(BinlogPosition("", 0), "", "CREATE DATABASE bench", "utf8mb4")
    history.record(BinlogPosition("", 0), "bench", TABLE)
    return history


def batch_inserts(cur, rows: int, first: int) -> int:
    statements = 0
    for start in range(first, first + rows, 1000):
        if statements % 10 == 0:
            cur.execute("BEGIN")
        cur.execute(f"INSERT INTO bench.t {row_values(start, start + 999)}")
        statements += 1
        if statements % 10 == 0:
            cur.execute("COMMIT")
    cur.execute("COMMIT")
    return rows


def mixed(cur, rows: int, first: int) -> int:
    changes = 0
    for start in range(first, first + rows, 1000):
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO bench.t {row_values(start, start + 999)}")
        cur.execute(f"UPDATE bench.t SET a = a + 1, b = CONCAT(b, '!') WHERE id BETWEEN {start} AND {start + 999}")
        cur.execute(f"DELETE FROM bench.t WHERE id BETWEEN {start} AND {start + 499}")
        cur.execute("COMMIT")
        changes += 2500
    return changes


def raw_pymysqlreplication(settings: dict, start: BinlogPosition) -> int:
    reader = BinLogStreamReader(settings, server_id=901,
                                log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                enable_logging=False)
    count = 0
    for event in reader:
        count += len(event.rows)
    reader.close()
    return count


def binlake_decode(settings: dict, start: BinlogPosition) -> int:
    client = PyMySqlReplicationClient(settings, 902, start, blocking=False)
    schema = seeded_history().schema
    decoders: dict[int, object] = {}
    count = 0
    for event in client.events():
        if type(event) is Rows:
            rows = decoders[event.table_id](event.data, event.begin, event.stop)
            count += len(rows) // 2 if event.kind == "u" else len(rows)
        elif type(event) is TableMap:
            columns, _ = describe_columns(event, schema.get(event.db, event.table))
            decoders[event.table_id] = compile_rows_decoder(columns)
    client.close()
    return count


def binlake_records(settings: dict, start: BinlogPosition) -> int:
    config = SourceConfig(name="bench", server_id=903, topic_partitions=6, max_batch_records=10_000,
                          heartbeat_interval_s=0, **settings)
    history = seeded_history()
    streaming = StreamingSource(config, Dispatcher(config, Emitter(config, lambda t: 6)), history, lambda t: 6)
    client = PyMySqlReplicationClient(settings, 903, start, blocking=False)
    count = 0
    for batch in streaming.run(client, Offset(start)):
        count += sum(1 for r in batch.records if r.value is not None)
    return count


def snapshot(settings: dict) -> None:
    """The initial snapshot of the table as it is now (SELECT in primary-key chunks, values mapped)."""
    config = SourceConfig(name="bench", server_id=904, topic_partitions=6, table_include=[r"bench\.t"],
                          heartbeat_interval_s=0, **settings)
    source = SnapshotSource(config, make_engine(config), SchemaHistory(MemoryHistoryStore()),
                            Dispatcher(config, Emitter(config, lambda t: 6)), lambda t: 6)
    t0, c0 = time.perf_counter(), time.process_time()
    n = sum(1 for batch in source.run(None, record_schema=True) for r in batch.records if r.topic == "bench.bench.t")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nsnapshot of the table: {n:,} rows, {wall:.2f} s, {n / wall:,.0f} rows/s, {n / cpu:,.0f} rows/cpu-s")


def measure(name: str, settings: dict, start: BinlogPosition, expected: int,
            plain: dict[str, float] | None = None) -> dict[str, float]:
    """Wall-clock rows/s, and rows per CPU-second of this process (stable when the machine is shared),
    per reader. `plain`: the same workload's figures uncompressed; given, the workload is compressed,
    pymysqlreplication (which skips compressed events) is left out and each reader is compared with
    its own uncompressed figure."""
    print(f"\n{name}: {expected:,} row changes")
    print(f"  {'reader':<22}{'rows':>10}{'wall s':>9}{'rows/s':>10}{'cpu s':>8}{'rows/cpu-s':>12}")
    readers = (("pymysqlreplication", raw_pymysqlreplication), ("binlake decode", binlake_decode),
               ("binlake records", binlake_records))
    figures: dict[str, float] = {}
    for label, fn in readers[1:] if plain else readers:
        t0, c0 = time.perf_counter(), time.process_time()
        n = fn(dict(settings), start)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        figures[label] = n / cpu
        assert n >= expected, (label, n, expected)
        versus = (f"x{n / cpu / plain[label]:.2f} of uncompressed" if plain else
                  f"x{n / cpu / figures['pymysqlreplication']:.1f}")
        print(f"  {label:<22}{n:>10,}{wall:>9.2f}{n / wall:>10,.0f}{cpu:>8.2f}{n / cpu:>12,.0f}   {versus}")
    return figures


def run(port: int, rows: int, label: str) -> None:
    settings = {"host": "127.0.0.1", "port": port, "user": "root", "password": ""}
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
    cur = conn.cursor()
    cur.execute("DROP DATABASE IF EXISTS bench")
    for statement in SETUP:
        cur.execute(statement)
    first = 1
    plain: dict[str, dict[str, float]] = {}
    for compressed in (False, True) if is_mysql(cur) else (False,):
        compression(cur, compressed)
        for workload, write, n in (("batch inserts", batch_inserts, rows), ("mixed insert/update/delete", mixed, rows // 2)):
            start = position(cur)
            changes = write(cur, n, first)
            first += n
            name = f"{label}{', compressed' if compressed else ''}: {workload}"
            plain[workload] = measure(name, settings, start, changes, plain[workload] if compressed else None)
    compression(cur, False)
    conn.close()
    snapshot(settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--server", choices=["mariadb", "mysql", "both"], default="both")
    parser.add_argument("--port", type=int, help="an existing binlog-enabled server (root, no password)")
    args = parser.parse_args()
    if args.port is not None:
        run(args.port, args.rows, f"127.0.0.1:{args.port}")
        return
    for kind in ("mariadb", "mysql") if args.server == "both" else (args.server,):
        base = Path(tempfile.mkdtemp(prefix="cdc-bench-"))
        server = start_server(kind, base)
        try:
            run(server.port, args.rows, server.name)
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
