"""A MySQL workload and the checks of "exactly once per MySQL transaction", shared by the crash tests
(test_mysql_crash.py: the connector and the broker killed) and the failover tests (test_connect_failover.py:
distributed workers killed). What the checks demand is in test_mysql_crash.py's docstring.

On Oracle MySQL the workload also writes what only MySQL writes (`mysql_features`): a table `j` with JSON and
VECTOR columns, and, switched per session from one transaction to the next, compressed transactions
(binlog_transaction_compression, TRANSACTION_PAYLOAD events), partial JSON updates
(binlog_row_value_options=PARTIAL_JSON, PARTIAL_UPDATE_ROWS events) and tagged GTIDs (gtid_next='AUTOMATIC:tag');
on request (`big_requested`) it writes one compressed transaction of `big_compressed` rows."""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import random
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pymysql.converters import escape_string

from e2e_harness import mysql_rows, partition_counts, replay, same_rows

TABLES = {"a": ("id",), "b": ("id",), "c": ("x", "y")}
MYSQL_TABLES = {**TABLES, "j": ("id",)}
MAX_BATCH_RECORDS = 50
J_COLUMNS = "(id, k, doc, vec, note)"
# (MySQL folds a tag to lower case; the GTIDs the workload reads back and the offsets carry it so)
GTID_NEXT = ("AUTOMATIC", "AUTOMATIC:batch", "AUTOMATIC:Ops_2")
BINLOG_EVENTS = {"Transaction_payload", "Update_rows_partial", "Gtid_tagged_log_event"}  # what mysql_features writes


def _values(rows) -> str:
    return ", ".join(f"({', '.join(row)})" for row in rows)


@dataclass
class Workload:
    """Random transactions against `db`; `committed` maps each transaction's GTID to the rows it changed."""

    server: object
    db: str
    rng: random.Random
    committed: dict[str, int] = field(default_factory=dict)
    next_id: int = 1_000_000
    altered: bool = False
    big_compressed: int = 0            # rows of the one big compressed transaction (MySQL), written once
    big_requested: threading.Event = field(default_factory=threading.Event)   # ... when this is set
    big_written: threading.Event = field(default_factory=threading.Event)     # ... and committed
    j_ids: list[int] = field(default_factory=list)
    _executed: str = ""                # MySQL: gtid_executed after the last transaction read back

    @property
    def mysql_features(self) -> bool:
        return self.server.kind == "mysql"

    @property
    def tables(self) -> dict[str, tuple[str, ...]]:
        return MYSQL_TABLES if self.mysql_features else TABLES

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def prepare(self) -> None:
        self.server.sql("CREATE TABLE a (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40))",
                        "CREATE TABLE b (id INT PRIMARY KEY, k INT, note VARCHAR(40))",
                        "CREATE TABLE c (x INT, y VARCHAR(8), payload VARCHAR(64), PRIMARY KEY (x, y))",
                        "INSERT INTO a VALUES " + _values((str(i), str(i % 97), f"'a{i}'") for i in range(1, 1501)),
                        "INSERT INTO b VALUES " + _values((str(i), str(i % 13), "NULL") for i in range(1, 601)),
                        "INSERT INTO c VALUES " + _values((str(i), "'y'", f"'p{i}'") for i in range(1, 401)),
                        db=self.db)
        if self.mysql_features:
            self.j_ids = list(range(1, 301))
            self.server.sql("CREATE TABLE j (id INT PRIMARY KEY, k INT NOT NULL, doc JSON, vec VECTOR(3), "
                            "note VARCHAR(40))",
                            "INSERT INTO j VALUES " + _values(self.j_row(i) for i in self.j_ids), db=self.db)

    # --- table j (MySQL): JSON and VECTOR ----------------------------------------------------------
    def doc(self, large: bool = True) -> str:
        """A JSON document as an SQL literal; now and then NULL, or over 64 KiB (MySQL's large format)."""
        r = self.rng
        if r.random() < 0.05:
            return "NULL"
        text = "é" + "x" * (70_000 if large and r.random() < 0.01 else r.randrange(0, 30))
        value = {"n": r.randrange(1000), "s": text, "l": [r.randrange(9) for _ in range(r.randrange(4))],
                 "o": {"t": r.random() < 0.5, "z": None, "f": r.choice([2.5, -1e-7, 1e300, 3])}}
        return f"'{escape_string(json.dumps(value))}'"

    def vec(self) -> str:
        if self.rng.random() < 0.05:
            return "NULL"
        return f"STRING_TO_VECTOR('[{', '.join(str(round(self.rng.uniform(-10, 10), 3)) for _ in range(3))}]')"

    def j_row(self, id_: int, large: bool = True) -> tuple[str, ...]:
        return str(id_), str(self.rng.randrange(100)), self.doc(large), self.vec(), f"'j{self.rng.randrange(999)}'"

    def j_statement(self) -> str:
        r, rng = self.rng.random(), self.rng
        where = f"WHERE id = {rng.choice(self.j_ids)}"
        if r < 0.2:
            self.j_ids.append(self.fresh())
            return f"INSERT INTO j {J_COLUMNS} VALUES ({', '.join(self.j_row(self.next_id))})"
        if r < 0.35:                                   # partial JSON updates (under PARTIAL_JSON)
            n, v = rng.randrange(10**6), rng.randrange(99)
            return f"UPDATE j SET doc = JSON_SET(doc, '$.n', {n}, '$.o.new', 'v{v}') {where}"
        if r < 0.45:
            return f"UPDATE j SET doc = JSON_REPLACE(doc, '$.s', '{'y' * rng.randrange(40)}'), k = k + 1 {where}"
        if r < 0.55:
            return f"UPDATE j SET doc = JSON_REMOVE(doc, '$.l[0]', '$.o.z') {where}"
        if r < 0.62:
            at, m = rng.randrange(6), rng.randrange(9)
            return f"UPDATE j SET doc = JSON_SET(doc, '$.l[{at}]', JSON_OBJECT('m', {m})) {where}"
        if r < 0.7:
            return f"UPDATE j SET doc = {self.doc()} {where}"
        if r < 0.8:
            tag = f", tag = 't{rng.randrange(99)}'" if self.altered else ""
            return f"UPDATE j SET vec = {self.vec()}, note = 'w{self.fresh()}'{tag} {where}"
        if r < 0.9:                                    # primary-key change
            self.j_ids.append(self.fresh())
            return f"UPDATE j SET id = {self.next_id} {where}"
        return f"DELETE FROM j {where}"

    def switch_session(self, cur) -> None:
        """Between two transactions: compression, partial JSON and the GTID tag, each sometimes switched."""
        rng = self.rng
        if rng.random() < 0.3:
            cur.execute(f"SET SESSION binlog_transaction_compression = {rng.choice(['ON', 'OFF'])}")
        if rng.random() < 0.3:
            cur.execute(f"SET SESSION binlog_row_value_options = '{rng.choice(['PARTIAL_JSON', ''])}'")
        if rng.random() < 0.3:
            cur.execute(f"SET gtid_next = '{rng.choice(GTID_NEXT)}'")

    def big_compressed_transaction(self) -> list[str]:
        first = self.next_id + 1
        self.next_id += self.big_compressed
        self.j_ids += range(first, self.next_id + 1)
        rows = _values(self.j_row(i, large=False) for i in range(first, self.next_id + 1))
        return [f"INSERT INTO j {J_COLUMNS} VALUES {rows}"]

    # --- every table ---------------------------------------------------------------------------------
    def statement(self) -> str:
        r, rng = self.rng.random(), self.rng
        if self.mysql_features and rng.random() < 0.35:
            return self.j_statement()
        if r < 0.25:
            rows = ", ".join(f"({self.fresh()}, {rng.randrange(100)}, 'n{rng.randrange(1000)}')"
                             for _ in range(rng.randint(1, 4)))
            return f"INSERT INTO a VALUES {rows}"
        if r < 0.35:
            extra = f", {rng.randrange(9)}" if self.altered else ""
            return f"INSERT INTO b VALUES ({self.fresh()}, {rng.randrange(50)}, 'b{rng.randrange(99)}'{extra})"
        if r < 0.45:
            return f"INSERT INTO c VALUES ({self.fresh()}, '{rng.choice('pqr')}', 'p{self.fresh()}')"
        if r < 0.6:
            low = rng.randrange(1, self.next_id - 1_000_000 + 1500)
            return f"UPDATE a SET v = v + 1, s = 'u{self.fresh()}' WHERE id BETWEEN {low} AND {low + rng.randint(0, 5)}"
        if r < 0.68:
            return f"UPDATE b SET note = 'n{self.fresh()}' WHERE id = {rng.randrange(1, 700)}"
        if r < 0.76:
            return f"UPDATE c SET payload = 'q{self.fresh()}' WHERE x = {rng.randrange(1, 400)}"
        if r < 0.84:
            return f"DELETE FROM {rng.choice('ab')} WHERE id = {rng.randrange(1, 1600)}"
        if r < 0.88:
            return f"DELETE FROM c WHERE x = {rng.randrange(1, 400)}"
        if r < 0.96:                                   # primary-key change: delete + create of the new key
            return f"UPDATE a SET id = {self.fresh()} WHERE id = {rng.randrange(1, 1600)}"
        return f"UPDATE c SET y = '{rng.choice('stu')}' WHERE x = {rng.randrange(1, 400)} AND y = 'y'"

    def big(self) -> list[str]:
        """More row changes than the source puts in one batch: the transaction spans several."""
        first = self.next_id + 1
        self.next_id += self.rng.randint(60, 220)
        rows = _values((str(i), str(i % 7), "'big'") for i in range(first, self.next_id + 1))
        return [f"INSERT INTO a VALUES {rows}",
                f"UPDATE a SET v = v + 1 WHERE id BETWEEN {first} AND {first + 40}",
                f"DELETE FROM a WHERE id BETWEEN {first + 41} AND {first + 50}"]

    def last_gtid(self, cur) -> str:
        """The GTID of the session's last transaction. MySQL has no @@last_gtid: what its commit added to
        gtid_executed (the workload is the only writer of its server while it runs)."""
        if not self.mysql_features:
            cur.execute("SELECT @@last_gtid")
            return cur.fetchone()[0]
        cur.execute("SELECT GTID_SUBTRACT(@@global.gtid_executed, %s), @@global.gtid_executed", (self._executed,))
        gtid, self._executed = cur.fetchone()
        assert gtid and "," not in gtid and "-" not in gtid.rsplit(":", 1)[1], f"not one GTID: {gtid!r}"
        return gtid

    def run(self, stop: threading.Event, alter_after: float) -> None:
        started = time.monotonic()
        with self.server.connect(db=self.db) as conn, conn.cursor() as cur:
            if self.mysql_features:
                cur.execute("SELECT @@global.gtid_executed")
                self._executed = cur.fetchone()[0]
            while not stop.is_set():
                if not self.altered and time.monotonic() - started > alter_after:
                    cur.execute("ALTER TABLE b ADD COLUMN extra INT")
                    if self.mysql_features:   # a column in the middle: below FULL metadata, names shift
                        self.last_gtid(cur)
                        cur.execute("ALTER TABLE j ADD COLUMN tag VARCHAR(20) AFTER k")
                        self.last_gtid(cur)   # (DDL: no row changes to expect)
                    self.altered = True
                if self.mysql_features:
                    self.switch_session(cur)
                big = self.big_requested.is_set() and not self.big_written.is_set()
                if big:
                    cur.execute("SET SESSION binlog_transaction_compression = ON")
                    statements = self.big_compressed_transaction()
                else:
                    statements = self.big() if self.rng.random() < 0.08 else [
                        self.statement() for _ in range(self.rng.randint(1, 6))]
                cur.execute("BEGIN")
                changed = 0
                for statement in statements:
                    changed += cur.execute(statement)
                cur.execute("COMMIT")
                if changed:
                    self.committed[self.last_gtid(cur)] = changed
                if big:
                    self.big_written.set()
                time.sleep(self.rng.uniform(0, 0.02))


def seeded_workload(server, big_compressed: int = 0) -> tuple[int, random.Random, str, Workload]:
    """A fresh database with the workload's tables filled, and the run's seed (E2E_SEED replays one)."""
    seed = int(os.environ.get("E2E_SEED", random.randrange(1 << 30)))
    print(f"E2E_SEED={seed}")
    db = server.new_database()
    workload = Workload(server, db, random.Random(seed + 1), big_compressed=big_compressed)
    workload.prepare()
    return seed, random.Random(seed), db, workload


async def committed_offset(address: str, name: str) -> dict | None:
    """The last offset connector `name` committed (None before its first). A test that polls it often keeps a
    CommittedOffsets open instead."""
    async with CommittedOffsets(address) as offsets:
        return await offsets.get(name)


class CommittedOffsets:
    """The connectors' committed offsets, read with one read_committed consumer of the offsets topic kept open:
    each call reads only what was committed since the last (the topic grows with every commit)."""

    TOPIC = "binlake-offsets"

    def __init__(self, address: str) -> None:
        self.address = address
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._last: dict[str, dict] = {}

    async def __aenter__(self) -> "CommittedOffsets":
        return self

    async def __aexit__(self, *exc) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def get(self, name: str) -> dict | None:
        """The last offset connector `name` committed (None before its first, or before the topic exists)."""
        if self._consumer is None:
            try:
                counts = await partition_counts(self.address, [self.TOPIC])
            except AssertionError:
                return None
            self._consumer = AIOKafkaConsumer(bootstrap_servers=self.address, isolation_level="read_committed",
                                              enable_auto_commit=False, auto_offset_reset="earliest")
            await self._consumer.start()
            self._partitions = [TopicPartition(self.TOPIC, p) for p in range(counts[self.TOPIC])]
            self._consumer.assign(self._partitions)
            await self._consumer.seek_to_beginning(*self._partitions)
        consumer = self._consumer
        end = await consumer.end_offsets(self._partitions)
        async with asyncio.timeout(60):
            while pending := [tp for tp in self._partitions if await consumer.position(tp) < end[tp]]:
                for messages in (await consumer.getmany(*pending, timeout_ms=500)).values():
                    for m in messages:
                        if m.value is not None:
                            self._last[json.loads(m.key)[0]] = json.loads(m.value)
        return self._last.get(name)


async def sample_stable_offsets(address: str, topics: list[str], stop: threading.Event) -> set[tuple]:
    """What read_committed consumers could read while the workload ran: (topic, partition, LSO) samples."""
    samples: set[tuple] = set()
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed")
    await consumer.start()
    try:
        partitions = [TopicPartition(t, p) for t in topics for p in range(3)]
        while not stop.is_set():
            try:
                ends = await consumer.end_offsets(partitions)
            except KafkaError:                       # the broker is down for a moment
                await asyncio.sleep(0.2)
                continue
            samples |= {(tp.topic, tp.partition, end) for tp, end in ends.items()}
            await asyncio.sleep(0.01)
    finally:
        await consumer.stop()
    return samples


def check_stable_offsets(events, samples: set[tuple], seed: int) -> None:
    """No read_committed view of a partition ever ended inside a MySQL transaction: the committed records just
    before and just after every sampled last stable offset belong to different transactions."""
    by_tp = defaultdict(list)
    for m in events:
        if m.value is not None and m.data["op"] != "r":
            by_tp[(m.topic, m.partition)].append((m.offset, m.data["transaction"]["id"]))
    split = []
    for topic, partition, lso in samples:
        records = by_tp[(topic, partition)]
        at = bisect.bisect_left(records, (lso, ""))
        if 0 < at < len(records) and records[at - 1][1] == records[at][1]:
            split.append((topic, partition, lso, records[at][1]))
    assert len(samples) > 100, f"too few samples of the stable offsets: {len(samples)}"
    assert not split, f"read_committed consumers could see part of a transaction (E2E_SEED={seed}): {split[:5]}"


async def open_records(address: str, topics: list[str]) -> int:
    """Records written to `topics` in transactions not yet committed: high watermarks minus last stable offsets."""
    counts = await partition_counts(address, topics)
    partitions = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
    ends = {}
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level=isolation)
        await consumer.start()
        try:
            ends[isolation] = sum((await consumer.end_offsets(partitions)).values())
        finally:
            await consumer.stop()
    return ends["read_uncommitted"] - ends["read_committed"]


async def snapshot_done(address: str, name: str) -> bool:
    offset = await committed_offset(address, name)
    return offset is not None and "snapshot" not in offset


def stored_rows(table: str, rows: dict[tuple, dict]) -> dict[tuple, dict]:
    """Replayed rows as MySQL stores them: a VECTOR (a list of float32 values in the events) as its bytes."""
    if table != "j":
        return rows
    return {key: {**row, "vec": None if row.get("vec") is None else struct.pack(f"<{len(row['vec'])}f", *row["vec"])}
            for key, row in rows.items()}


def check(events, workload: Workload, server, db: str, seed: int) -> None:
    where = f"(E2E_SEED={seed})"
    # 1. The replayed tables are MySQL's tables.
    for table, key in workload.tables.items():
        mine = stored_rows(table, replay([m for m in events if m.topic.endswith(f".{table}")]))
        theirs = mysql_rows(server, f"`{db}`.{table}", key, _select_list(server, db, table))
        assert same_rows(mine, theirs), f"table {table} differs {where}: " + _diff(mine, theirs)

    changes = [m for m in events if m.value is not None]
    # 2. Snapshot reads: each key once, however often the snapshot was interrupted.
    reads = [(m.topic, m.key) for m in changes if m.data["op"] == "r"]
    assert len(reads) == len(set(reads)), f"a snapshot read was written twice {where}"

    streamed = [m for m in changes if m.data["op"] != "r"]
    # 3. No source position twice; a primary-key change is the one delete + create pair sharing one.
    by_position = defaultdict(list)
    for m in streamed:
        source = m.data["source"]
        by_position[(source["file"], source["pos"], source["row"])].append(m.data["op"])
    repeated = {p: ops for p, ops in by_position.items() if len(ops) > 1 and sorted(ops) != ["c", "d"]}
    assert not repeated, f"source positions written more than once {where}: {list(repeated.items())[:5]}"

    # 4. Every transaction whole: total_order 1..n, n = the rows the transaction changed in MySQL.
    orders = defaultdict(list)
    for m in streamed:
        orders[m.data["transaction"]["id"]].append(m.data["transaction"]["total_order"])
    assert orders.keys() == workload.committed.keys(), (
        f"transactions missing {sorted(workload.committed.keys() - orders.keys())[:5]}, unexpected "
        f"{sorted(orders.keys() - workload.committed.keys())[:5]} {where}")
    for gtid, seen in orders.items():
        assert sorted(set(seen)) == list(range(1, workload.committed[gtid] + 1)), (
            f"transaction {gtid} changed {workload.committed[gtid]} rows, events carry total_order "
            f"{sorted(seen)} {where}")

    # 5. In every partition each transaction is one contiguous run, and transactions follow binlog order (the
    # position of their events: GTIDs with different tags are numbered apart).
    runs = defaultdict(list)
    for m in streamed:
        txid, source = m.data["transaction"]["id"], m.data["source"]
        run = runs[(m.topic, m.partition)]
        if not run or run[-1][0] != txid:
            run.append((txid, (source["file"], source["pos"])))
    for tp, run in runs.items():
        assert len(run) == len({txid for txid, _ in run}), f"a transaction is split into several runs in {tp} {where}"
        positions = [position for _, position in run]
        assert positions == sorted(positions), f"transactions out of binlog order in {tp} {where}"


def _select_list(server, db: str, table: str) -> str:
    """Every column, a VECTOR as its bytes (PyMySQL cannot read the VECTOR result type)."""
    columns = server.sql(f"SHOW COLUMNS FROM `{db}`.`{table}`")
    return ", ".join(f"CAST(`{c[0]}` AS BINARY) AS `{c[0]}`" if str(c[1]).startswith("vector") else f"`{c[0]}`"
                     for c in columns)


def binlog_event_types(server, since: tuple[str, int]) -> set[str]:
    """The types of the events the server logged from `since` (file, position) on."""
    files = [str(row[0]) for row in server.sql("SHOW BINARY LOGS") if str(row[0]) >= since[0]]
    types = set()
    for file in files:
        start = f" FROM {since[1]}" if file == since[0] else ""
        types |= {str(row[2]) for row in server.sql(f"SHOW BINLOG EVENTS IN '{file}'{start}")}
    return types


def _diff(mine: dict, theirs: dict) -> str:
    missing = sorted(theirs.keys() - mine.keys())[:3]
    extra = sorted(mine.keys() - theirs.keys())[:3]
    changed = [k for k in theirs.keys() & mine.keys() if {**dict.fromkeys(theirs[k]), **mine[k]} != theirs[k]][:3]
    return f"missing {missing}, extra {extra}, different {[(mine[k], theirs[k]) for k in changed]}"


