"""A MySQL workload and the checks of "exactly once per MySQL transaction", shared by the crash tests
(test_mysql_crash.py: the connector and the broker killed) and the failover tests (test_connect_failover.py:
distributed workers killed). What the checks demand is in test_mysql_crash.py's docstring."""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from e2e_harness import mysql_rows, read_committed, replay, same_rows

TABLES = {"a": ("id",), "b": ("id",), "c": ("x", "y")}
MAX_BATCH_RECORDS = 50


@dataclass
class Workload:
    """Random transactions against `db`; `committed` maps each transaction's GTID to the rows it changed."""

    server: object
    db: str
    rng: random.Random
    committed: dict[str, int] = field(default_factory=dict)
    next_id: int = 1_000_000
    altered: bool = False

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def prepare(self) -> None:
        self.server.sql("CREATE TABLE a (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40))",
                        "CREATE TABLE b (id INT PRIMARY KEY, k INT, note VARCHAR(40))",
                        "CREATE TABLE c (x INT, y VARCHAR(8), payload VARCHAR(64), PRIMARY KEY (x, y))",
                        "INSERT INTO a SELECT seq, seq % 97, CONCAT('a', seq) FROM seq_1_to_1500",
                        "INSERT INTO b SELECT seq, seq % 13, NULL FROM seq_1_to_600",
                        "INSERT INTO c SELECT seq, 'y', CONCAT('p', seq) FROM seq_1_to_400", db=self.db)

    def statement(self) -> str:
        r, rng = self.rng.random(), self.rng
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
        return [f"INSERT INTO a SELECT seq, seq % 7, 'big' FROM seq_{first}_to_{self.next_id}",
                f"UPDATE a SET v = v + 1 WHERE id BETWEEN {first} AND {first + 40}",
                f"DELETE FROM a WHERE id BETWEEN {first + 41} AND {first + 50}"]

    def run(self, stop: threading.Event, alter_after: float) -> None:
        started = time.monotonic()
        with self.server.connect(db=self.db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                if not self.altered and time.monotonic() - started > alter_after:
                    cur.execute("ALTER TABLE b ADD COLUMN extra INT")
                    self.altered = True
                statements = self.big() if self.rng.random() < 0.08 else [
                    self.statement() for _ in range(self.rng.randint(1, 6))]
                cur.execute("BEGIN")
                changed = 0
                for statement in statements:
                    changed += cur.execute(statement)
                cur.execute("COMMIT")
                if changed:
                    cur.execute("SELECT @@last_gtid")
                    self.committed[cur.fetchone()[0]] = changed
                time.sleep(self.rng.uniform(0, 0.02))


def seeded_workload(server) -> tuple[int, random.Random, str, Workload]:
    """A fresh database with the workload's tables filled, and the run's seed (E2E_SEED replays one)."""
    seed = int(os.environ.get("E2E_SEED", random.randrange(1 << 30)))
    print(f"E2E_SEED={seed}")
    db = server.new_database()
    workload = Workload(server, db, random.Random(seed + 1))
    workload.prepare()
    return seed, random.Random(seed), db, workload


async def committed_offset(address: str, name: str) -> dict | None:
    try:
        stored = [json.loads(m.value) for m in await read_committed(address, ["binlake-offsets"])
                  if json.loads(m.key)[0] == name and m.value is not None]
    except AssertionError:
        return None
    return stored[-1] if stored else None


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
    assert len(samples) > 100, "too few samples of the stable offsets"
    assert not split, f"read_committed consumers could see part of a transaction (E2E_SEED={seed}): {split[:5]}"


async def snapshot_done(address: str, name: str) -> bool:
    offset = await committed_offset(address, name)
    return offset is not None and "snapshot" not in offset


def check(events, workload: Workload, server, db: str, seed: int) -> None:
    where = f"(E2E_SEED={seed})"
    # 1. The replayed tables are MySQL's tables.
    for table, key in TABLES.items():
        mine = replay([m for m in events if m.topic.endswith(f".{table}")])
        theirs = mysql_rows(server, f"`{db}`.{table}", key)
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

    # 5. In every partition each transaction is one contiguous run, and transactions follow binlog order.
    runs = defaultdict(list)
    for m in streamed:
        txid = m.data["transaction"]["id"]
        run = runs[(m.topic, m.partition)]
        if not run or run[-1] != txid:
            run.append(txid)
    for tp, run in runs.items():
        assert len(run) == len(set(run)), f"a transaction is split into several runs in {tp} {where}"
        sequence = [int(txid.rsplit("-", 1)[1]) for txid in run]
        assert sequence == sorted(sequence), f"transactions out of binlog order in {tp} {where}"


def _diff(mine: dict, theirs: dict) -> str:
    missing = sorted(theirs.keys() - mine.keys())[:3]
    extra = sorted(mine.keys() - theirs.keys())[:3]
    changed = [k for k in theirs.keys() & mine.keys() if {**dict.fromkeys(theirs[k]), **mine[k]} != theirs[k]][:3]
    return f"missing {missing}, extra {extra}, different {[(mine[k], theirs[k]) for k in changed]}"


