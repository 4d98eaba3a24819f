"""The Spark sink end to end: a MySQL or MariaDB workload, the mysql connector, a broker, and the sink into
Delta and PostgreSQL; then each target compared with MySQL row for row and value for value."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pymysql

from e2e_harness import Message, mysql_config, read_committed, write_config
from testkit.brokerproc import ROOT

from binlake.demo import warehouse

from spark_sink.config import validate
from spark_sink.job import SinkJob

TABLES = {
    "types": """CREATE TABLE {db}.types (id INT PRIMARY KEY, d DECIMAL(20,6), dt DATETIME(6), j JSON,
                e ENUM('x','y','z'), b BLOB, u BIGINT UNSIGNED, s VARCHAR(40) CHARACTER SET utf8mb4, ts TIMESTAMP(6) NULL,
                dbl DOUBLE, n INT, day DATE)""",
    "orders": "CREATE TABLE {db}.orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(10,2), status VARCHAR(10))",
    "pairs": "CREATE TABLE {db}.pairs (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))",
}
MARKER = "CREATE TABLE {db}.marker (id INT PRIMARY KEY)"
ER_LOCK_DEADLOCK = 1213


class Workload:
    """Random inserts, updates, deletes and primary-key changes, several per transaction."""

    def __init__(self, server, db: str, seed: int) -> None:
        self.server, self.db = server, db
        self.rng = random.Random(seed)
        self.next_id = {t: 1 for t in TABLES}
        self.marks = 0

    def create(self) -> None:
        self.server.sql(*(sql.format(db=self.db) for sql in [*TABLES.values(), MARKER]))

    def row(self, table: str, id_: int) -> dict:
        r = self.rng
        if table == "types":
            return {"id": id_, "d": decimal.Decimal(r.randint(-10**12, 10**12)) / 10**6,
                    "dt": datetime.datetime(2020, 1, 1) + datetime.timedelta(microseconds=r.randint(0, 10**14)),
                    "j": json.dumps({"k": r.randint(0, 9), "l": [1, "ü"]}), "e": r.choice("xyz"),
                    "b": r.randbytes(r.randint(0, 20)), "u": r.choice([0, 2**64 - 1, r.randint(0, 2**63)]),
                    "s": r.choice(["", "héllo wörld", "日本語", "emoji 🎉", None]),
                    "ts": datetime.datetime(2030, 1, 1, 12, 0, 0, r.randint(0, 999999)),
                    "dbl": r.choice([0.1, -1e300, 3.141592653589793, None]), "n": r.choice([None, r.randint(-2**31, 2**31 - 1)]),
                    "day": datetime.date(2000, 1, 1) + datetime.timedelta(days=r.randint(0, 9000))}
        if table == "orders":
            return {"id": id_, "customer": r.randint(1, 50), "amount": decimal.Decimal(r.randint(0, 10**6)) / 100,
                    "status": r.choice(["new", "paid", "sent"])}
        return {"a": id_, "b": r.choice(["p", "q", "ß"]), "v": r.randint(0, 100)}

    def run(self, transactions: int) -> None:
        with self.server.connect(db=self.db) as conn, conn.cursor() as cur:
            conn.autocommit(False)
            for _ in range(transactions):
                for _ in range(self.rng.randint(1, 4)):
                    self._one(cur, self.rng.choice(list(TABLES)))
                conn.commit()

    def keep_running(self, stop) -> None:
        """Small transactions until `stop` (a threading.Event) is set: for a writer thread. A deadlock
        with another writer (the test's own DDL and updates) rolls one transaction back: go on."""
        while not stop.is_set():
            try:
                self.run(5)
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != ER_LOCK_DEADLOCK:
                    raise
            stop.wait(0.2)

    def _one(self, cur, table: str) -> None:
        key = "a" if table == "pairs" else "id"
        cur.execute(f"SELECT {key} FROM {table}")
        existing = [r[0] for r in cur.fetchall()]
        action = self.rng.random() if existing else 0
        if action < 0.45:
            self.next_id[table] += 1
            row = self.row(table, self.next_id[table] * 7)
            cur.execute(f"INSERT IGNORE INTO {table} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
                        list(row.values()))
        elif action < 0.75:
            row = self.row(table, 0)
            row.pop(key)
            if table == "pairs":
                row.pop("b")
            assignments = ", ".join(f"{c} = %s" for c in row)
            cur.execute(f"UPDATE {table} SET {assignments} WHERE {key} = %s", [*row.values(), self.rng.choice(existing)])
        elif action < 0.9:
            cur.execute(f"DELETE FROM {table} WHERE {key} = %s", [self.rng.choice(existing)])
        else:  # a primary-key change: delete of the old key + create of the new one downstream
            self.next_id[table] += 1
            cur.execute(f"UPDATE IGNORE {table} SET {key} = %s WHERE {key} = %s",
                        [self.next_id[table] * 7, self.rng.choice(existing)])

    def mark(self) -> int:
        """Insert a marker row: once its event is on the log, so is everything before it."""
        self.marks += 1
        self.server.sql(f"INSERT INTO {self.db}.marker VALUES ({self.marks})")
        return self.marks


async def wait_for_mark(address: str, name: str, db: str, mark: int, timeout: float = 60,
                        value: Callable[[Message], dict] = lambda m: m.data) -> None:
    """Until marker `mark` is on the log; `value`: a record's value decoded (JSON by default)."""
    topic = f"{name}.{db}.marker"
    deadline = time.monotonic() + timeout
    while True:
        try:
            messages = await read_committed(address, [topic])
        except AssertionError:
            messages = []
        rows = [(value(m).get("after") or (value(m).get("data") or [{}])[0]) for m in messages if m.value]
        if any(str((row or {}).get("id")) == str(mark) for row in rows):
            return
        assert time.monotonic() < deadline, f"the connector never wrote marker {mark} to {topic}"
        await asyncio.sleep(0.3)


def connector_config(tmp_path: Path, name: str, broker, server, db: str, fmt: str, **keys) -> Path:
    return write_config(tmp_path / f"{name}.yaml", **mysql_config(name, broker, server, [rf"{db}\..*"], format=fmt,
                                                                   topic_partitions=3, **keys))


def sink_config(name: str, broker, db: str, fmt: str, checkpoint: Path, target: dict, **extra) -> dict:
    return {"bootstrap_servers": broker.address, "topics": [f"{name}.{db}.{t}" for t in TABLES], "format": fmt,
            "schema_topic": name, "checkpoint": str(checkpoint), "trigger": "available_now", "target": target, **extra}


def run_sink(spark, raw: dict) -> None:
    """The sink in this process, until it has merged everything committed when it started."""
    SinkJob(spark, validate(raw)).start().awaitTermination()


def run_sinks(spark, *raws: dict) -> None:
    """Several sinks in this process at once (queries of one session), each until it has merged everything
    committed when it started."""
    queries = [SinkJob(spark, validate(raw)).start(f"binlake-sink-{i}") for i, raw in enumerate(raws)]
    try:
        for query in queries:
            query.awaitTermination()
    finally:
        for query in queries:
            query.stop()


class SinkProcess:
    """`binlake sink run CONFIG...` in its own process (its own JVM), so the test can SIGKILL it; `configs`
    by name run as the queries of one Spark application (`NAME.yaml` beside `path`, the query
    binlake-sink-NAME), on `master`; the output goes to `path`.log."""

    def __init__(self, configs: dict[str, dict], path: Path, master: str = "local[1]") -> None:
        self.paths = [path.with_name(f"{name}.yaml") for name in configs]
        for file, config in zip(self.paths, configs.values()):
            file.write_text(json.dumps(config))
        self.log_path = path.with_suffix(".log")
        self.master = master
        self.proc: subprocess.Popen | None = None

    def start(self) -> "SinkProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "sink", "run", *map(str, self.paths),
                                          "--master", self.master], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def batches(self) -> int:
        return len(re.findall(r"INFO spark_sink\.job: \S+ batch \d+: ", self.log()))

    def wait_batches(self, count: int, timeout: float = 300) -> None:
        # A sink's first batch creates its Delta tables and merges on one core: over 100 s when the
        # disk is cold and the machine shared (seen on a 2-core CI VM), a few seconds otherwise.
        deadline = time.monotonic() + timeout
        while self.batches() < count:
            assert self.proc.poll() is None, f"the sink exited:\n{self.log()[-3000:]}"
            assert time.monotonic() < deadline, f"no batch within {timeout} s:\n{self.log()[-3000:]}"
            time.sleep(0.2)


# -- comparing: MySQL, Delta and PostgreSQL tables as binlake.demo.warehouse reads them ------------

JSON_COLUMNS = frozenset({"j"})


def mysql_table(server, db: str, table: str):
    return warehouse.mysql_table(server, db, table, JSON_COLUMNS)


def delta_table(spark, path: str, key: tuple[str, ...], columns: list[str]):
    """The table as Spark reads it, once delta-rs (`deltalake`) has read the same: a table only Spark
    can open is not a warehouse table (issue 39)."""
    rows = warehouse.delta_table(spark, path, key, columns, JSON_COLUMNS)
    assert_same(rows, warehouse.delta_rs_table(path, key, columns, JSON_COLUMNS), f"{path} read by delta-rs")
    return rows


def postgres_table(postgres, schema: str, table: str, key: tuple[str, ...], columns: list[str]):
    return warehouse.postgres_table(postgres, schema, table, key, columns, JSON_COLUMNS)


def delta_rs_reads_the_same(path: str, spark_records: list[dict], live_only: bool) -> None:
    """delta-rs (`deltalake`) opens the table at `path` and reads the records Spark read (in any order;
    values compared as warehouse.normalized makes them, e.g. Spark's UTC times naive, arrow's aware)."""
    import deltalake

    def canonical(records):
        return sorted(repr(sorted((k, warehouse.normalized(v)) for k, v in r.items())) for r in records)

    records = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    assert canonical(r for r in records if not (live_only and r["__deleted"])) == canonical(spark_records), \
        f"{path}: delta-rs reads other records than Spark"


def assert_same(expected: dict, actual: dict, where: str) -> None:
    difference = warehouse.differences(expected, actual)
    assert not difference, f"{where}: {difference}"


def assert_targets_equal_mysql(spark, postgres, server, db: str, delta_root, schema: str, when: str = "") -> None:
    """Every table of the workload: Delta's and PostgreSQL's equal MySQL's, row for row."""
    for table in TABLES:
        columns, key, expected = mysql_table(server, db, table)
        assert_same(expected, delta_table(spark, f"{delta_root}/{db}/{table}", key, columns), f"Delta {db}.{table}{when}")
        assert_same(expected, postgres_table(postgres, schema, table, key, columns),
                    f"PostgreSQL {schema}.{table}{when}")
