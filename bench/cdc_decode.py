"""Binlog decoding throughput: pymysqlreplication's own row decoding beside binlake's, on the same binlog.

    .venv/bin/python bench/cdc_decode.py [--rows 200000] [--port PORT]

Starts a throwaway mariadbd (unless --port names a binlog-enabled server, user root without password),
writes two workloads into a 6-column table, and reads each back three ways from the same positions:

  pymysqlreplication   BinLogStreamReader, touching every row's values (its `.rows`)
  binlake decode       the same replication stream, bodies decoded by cdc.rowdecoder's compiled decoders
  binlake records      the whole source (decode, Debezium JSON, key, murmur2 partition, batches + offsets)

Workloads: batch inserts (multi-row INSERTs, 1,000 rows per statement, 10 statements per transaction)
and mixed (per transaction: insert 1,000 rows, update 1,000, delete 500). Rows/s counts row changes.
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

from binlake.sandbox import BINLOG_OPTIONS, initialize_datadir, start_mariadb  # noqa: E402
from cdc.binlog import PyMySqlReplicationClient, Rows, TableMap  # noqa: E402
from cdc.config import SourceConfig  # noqa: E402
from cdc.connection import make_engine  # noqa: E402
from cdc.dispatcher import Dispatcher  # noqa: E402
from cdc.emitter import Emitter  # noqa: E402
from cdc.offsets import BinlogPosition, Offset  # noqa: E402
from cdc.rowdecoder import compile_rows_decoder  # noqa: E402
from cdc.schema.history import MemoryHistoryStore, SchemaHistory  # noqa: E402
from cdc.snapshot import SnapshotSource  # noqa: E402
from cdc.streaming import StreamingSource  # noqa: E402

TABLE = ("CREATE TABLE bench.t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32), c DOUBLE, "
         "d DATETIME, e DECIMAL(10,2))")


def position(cur) -> BinlogPosition:
    cur.execute("SHOW MASTER STATUS")
    file, pos = cur.fetchone()[:2]
    return BinlogPosition(file, pos)


def batch_inserts(cur, rows: int, first: int) -> int:
    statements = 0
    for start in range(first, first + rows, 1000):
        if statements % 10 == 0:
            cur.execute("BEGIN")
        cur.execute("INSERT INTO bench.t SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 7, "
                    f"'2024-01-01' + INTERVAL seq SECOND, seq / 100 FROM seq_{start}_to_{start + 999}")
        statements += 1
        if statements % 10 == 0:
            cur.execute("COMMIT")
    cur.execute("COMMIT")
    return rows


def mixed(cur, rows: int, first: int) -> int:
    changes = 0
    for start in range(first, first + rows, 1000):
        cur.execute("BEGIN")
        cur.execute("INSERT INTO bench.t SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 7, "
                    f"'2024-01-01' + INTERVAL seq SECOND, seq / 100 FROM seq_{start}_to_{start + 999}")
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
    decoders: dict[int, object] = {}
    count = 0
    for event in client.events():
        if type(event) is Rows:
            rows = decoders[event.table_id](event.data, event.begin, event.stop)
            count += len(rows) // 2 if event.kind == "u" else len(rows)
        elif type(event) is TableMap:
            decoders[event.table_id] = compile_rows_decoder(event.columns)
    client.close()
    return count


def binlake_records(settings: dict, start: BinlogPosition) -> int:
    config = SourceConfig(name="bench", server_id=903, topic_partitions=6, max_batch_records=10_000,
                          heartbeat_interval_s=0, **settings)
    history = SchemaHistory(MemoryHistoryStore())
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


def measure(name: str, settings: dict, start: BinlogPosition, expected: int) -> None:
    """Wall-clock rows/s, and rows per CPU-second of this process (stable when the machine is shared)."""
    print(f"\n{name}: {expected:,} row changes")
    print(f"  {'reader':<22}{'rows':>10}{'wall s':>9}{'rows/s':>10}{'cpu s':>8}{'rows/cpu-s':>12}")
    baseline = None
    for label, fn in (("pymysqlreplication", raw_pymysqlreplication), ("binlake decode", binlake_decode),
                      ("binlake records", binlake_records)):
        t0, c0 = time.perf_counter(), time.process_time()
        n = fn(dict(settings), start)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        baseline = baseline or n / cpu
        assert n >= expected, (label, n, expected)
        print(f"  {label:<22}{n:>10,}{wall:>9.2f}{n / wall:>10,.0f}{cpu:>8.2f}{n / cpu:>12,.0f}"
              f"   x{n / cpu / baseline:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--port", type=int, help="an existing binlog-enabled server (root, no password)")
    args = parser.parse_args()
    server = base = None
    if args.port is None:
        base = Path(tempfile.mkdtemp(prefix="cdc-bench-"))
        initialize_datadir(base / "template")
        server = start_mariadb(base, base / "template", BINLOG_OPTIONS)
        port = server.port
    else:
        port = args.port
    settings = {"host": "127.0.0.1", "port": port, "user": "root", "password": ""}
    try:
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
        cur = conn.cursor()
        cur.execute("DROP DATABASE IF EXISTS bench")
        cur.execute("CREATE DATABASE bench")
        cur.execute("USE bench")
        cur.execute(TABLE)
        start = position(cur)
        n = batch_inserts(cur, args.rows, 1)
        measure("batch inserts", settings, start, n)
        start = position(cur)
        n = mixed(cur, args.rows // 2, args.rows + 1)
        measure("mixed insert/update/delete", settings, start, n)
        snapshot(settings)
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
