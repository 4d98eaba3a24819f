"""Following a primary failover (cdc/failover.py), with real servers in GTID replication: MySQL (primary →
replica, SOURCE_AUTO_POSITION=1) and MariaDB (MASTER_USE_GTID=slave_pos, log_slave_updates).

The connector (`binlake connect run`, database.hosts = [primary, replica], restart_by: gtid, exactly-once)
streams a workload of small and sliced transactions from the primary; the primary is SIGKILLed while the
workload holds a transaction open, the replica is promoted (STOP REPLICA; RESET REPLICA ALL; read_only off)
and the workload goes on there. The connector resumes on the replica by GTID set, and the log read
read_committed must replay into exactly the promoted server's table, every transaction whole and once.

Then the other outcome: a replica stopped early lacks transactions the connector has already published;
promoted, it must not be followed: the connector stops with the missing GTID set.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import threading
from collections import defaultdict
from pathlib import Path

import pymysql
import pytest

from cdc.offsets import GtidSet
from sandbox.sql import BINLOG_OPTIONS, MYSQL_OPTIONS, SqlServer, start_server
from e2e_harness import mysql_rows, read_committed, replay, same_rows, wait_for_log, wait_until, write_config
from mysql_workload import committed_offset, snapshot_done

ROWS = 600
BATCH = 50   # max_batch_records: the workload's UPDATE of every row is sliced into several batches


def executed(server: SqlServer) -> str:
    """What the server's binlog holds (MariaDB needs log_slave_updates for a replica's to hold the primary's)."""
    query = "SELECT @@gtid_executed" if server.kind == "mysql" else "SELECT @@gtid_binlog_pos"
    return str(server.sql(query)[0][0] or "").replace("\n", "")


def start_pair(kind: str, template: Path, tmp_path: Path) -> tuple[SqlServer, SqlServer]:
    """A primary and its replica in GTID replication, the replica provisioned as a copy of the primary (the
    users start_server creates on both are the primary's GTIDs on the replica too)."""
    base = MYSQL_OPTIONS if kind == "mysql" else {**BINLOG_OPTIONS, "log-slave-updates": None,
                                                   "gtid-strict-mode": "ON"}
    servers = []
    for n in (1, 2):
        own = tmp_path / f"{kind}-{n}"
        copy = own / "template"
        shutil.copytree(template, copy, ignore=shutil.ignore_patterns("auto.cnf"))   # (MySQL: its own server_uuid)
        servers.append(start_server(kind, own, copy, {**base, "server-id": str(n)}))
    primary, replica = servers
    position = executed(primary)
    source = (f"SOURCE_HOST='127.0.0.1', SOURCE_PORT={primary.port}, SOURCE_USER='{primary.user}', "
              f"SOURCE_PASSWORD='{primary.password}', SOURCE_CONNECT_RETRY=1")
    if kind == "mysql":
        replica.sql("RESET BINARY LOGS AND GTIDS", f"SET GLOBAL gtid_purged = '{position}'",
                    f"CHANGE REPLICATION SOURCE TO {source}, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1",
                    "START REPLICA")
    else:
        replica.sql("RESET MASTER", f"SET GLOBAL gtid_slave_pos = '{position}'",
                    f"CHANGE MASTER TO {source.replace('SOURCE_', 'MASTER_')}, MASTER_USE_GTID=slave_pos",
                    "START SLAVE")
    return primary, replica


def promote(replica: SqlServer) -> None:
    if replica.kind == "mysql":
        replica.sql("STOP REPLICA", "RESET REPLICA ALL", "SET GLOBAL super_read_only = OFF",
                    "SET GLOBAL read_only = OFF")
    else:
        replica.sql("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")


async def holds(server: SqlServer, gtids: str, what: str, timeout: float = 60) -> None:
    async def caught_up() -> bool:
        return not GtidSet(gtids).missing_from(GtidSet(executed(server)))
    await wait_until(caught_up, timeout, what, interval=0.1)


class Writer:
    """Transactions on table t of the current primary: a few rows each, now and then an UPDATE of every row
    (sliced by the connector). `held` parks it inside an open transaction; `move(server)` sends it to the
    promoted replica, where it goes on (the parked transaction dies with the old primary, never committed)."""

    def __init__(self, server: SqlServer, db: str, seed: int) -> None:
        self.server, self.db, self.rng = server, db, random.Random(seed)
        self.stop, self.held, self.parked, self.moved = (threading.Event() for _ in range(4))
        self.transactions = 0
        self.next_id = ROWS
        self.last_big = False

    def statements(self) -> list[str]:
        rng = self.rng
        if rng.random() < 0.05:
            return [f"UPDATE t SET v = v + 1, note = 'all{self.transactions}'"]
        out = []
        for _ in range(rng.randrange(1, 5)):
            r = rng.random()
            if r < 0.4:
                self.next_id += 1
                out.append(f"INSERT INTO t VALUES ({self.next_id}, {rng.randrange(100)}, 'new')")
            elif r < 0.85:
                out.append(f"UPDATE t SET v = {rng.randrange(1000)} WHERE id = {rng.randrange(1, self.next_id)}")
            else:
                out.append(f"DELETE FROM t WHERE id = {rng.randrange(1, self.next_id)}")
        return out

    def run(self) -> None:
        conn = self.server.connect(db=self.db)
        while not self.stop.is_set():
            try:
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    # (just before parking, an UPDATE of every row: the primary dies while the connector is
                    # likely still writing its slices, in a log transaction the failover must abort)
                    last = self.held.is_set() and not self.last_big
                    for statement in ["UPDATE t SET v = v + 7, note = 'last'"] if last else self.statements():
                        cur.execute(statement)
                    self.last_big = self.last_big or last
                    if self.held.is_set() and not last and not self.parked.is_set():
                        self.parked.set()
                        self.moved.wait()          # the primary is killed meanwhile: this COMMIT fails
                    cur.execute("COMMIT")
                self.transactions += 1
            except pymysql.err.OperationalError:
                assert self.moved.is_set(), "the workload lost its server before the failover"
                conn = self.server.connect(db=self.db)
            self.stop.wait(self.rng.uniform(0, 0.01))
        conn.close()

    def move(self, server: SqlServer) -> None:
        self.server = server
        self.moved.set()


def connector_config(tmp_path: Path, name: str, broker, primary: SqlServer, replica: SqlServer, db: str,
                     catch_up_ms: int) -> Path:
    return write_config(
        tmp_path / f"{name}.yaml", name=name, connector="mysql", bootstrap_servers=broker.address,
        database={"hosts": [f"127.0.0.1:{primary.port}", f"127.0.0.1:{replica.port}"], "user": primary.user,
                  "password": primary.password, "server_id": 5401, "failover_catch_up_ms": catch_up_ms},
        tables={"include": [rf"{db}\.t"]}, restart_by="gtid", max_batch_records=BATCH, heartbeat_interval_ms=500,
        restart={"initial_backoff_ms": 100, "max_backoff_ms": 500})


def prepare(primary: SqlServer) -> str:
    db = primary.new_database()
    primary.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40))",
                "INSERT INTO t VALUES " + ", ".join(f"({i}, {i % 97}, 'x')" for i in range(1, ROWS + 1)), db=db)
    return db


async def published(address: str, name: str, gtids: str, what: str) -> None:
    async def holds_them() -> bool:
        offset = await committed_offset(address, name)
        return offset is not None and not GtidSet(gtids).missing_from(GtidSet(offset.get("gtids", "")))
    await wait_until(holds_them, 90, what, interval=0.2)


# (suite time: each failover test runs by default on one server, the other with -m slow)
@pytest.mark.parametrize("kind", ["mysql", pytest.param("mariadb", marks=pytest.mark.slow)])
async def test_the_connector_follows_a_failover_to_the_promoted_replica(request, kind, broker, connector, tmp_path):
    template = request.getfixturevalue(f"{kind}_template")
    primary, replica = start_pair(kind, template, tmp_path)
    try:
        name, seed = "failover", random.randrange(1 << 30)
        print(f"seed {seed}")
        db = prepare(primary)
        config = connector_config(tmp_path, name, broker, primary, replica, db, catch_up_ms=30_000)
        process = connector(config)
        await wait_until(lambda: snapshot_done(broker.address, name), 90, "the end of the snapshot")

        writer = Writer(primary, db, seed)
        thread = threading.Thread(target=writer.run, daemon=True)
        thread.start()
        await wait_until(lambda: _true(writer.transactions > 40), 60, "the workload on the primary")
        await published(broker.address, name, executed(primary), "the connector streaming the primary")
        writer.held.set()
        assert await asyncio.to_thread(writer.parked.wait, 30), "the workload did not park"
        before = executed(primary)
        await holds(replica, before, "the replica to apply every committed transaction")
        primary.proc.kill()                            # SIGKILL, a transaction open
        primary.proc.wait()
        promote(replica)
        moved_at = writer.transactions           # (the count goes on: wait for transactions on the replica)
        writer.move(replica)
        await wait_until(lambda: _true(writer.transactions > moved_at + 40), 60, "the workload on the new primary")
        writer.stop.set()
        await asyncio.to_thread(thread.join)

        await published(broker.address, name, executed(replica), "the connector to catch up with the new primary")
        assert process.terminate() == 0, process.log()[-3000:]
        log = process.log()
        assert f"reading from 127.0.0.1:{replica.port}" in log, log
        events = await read_committed(broker.address, [f"{name}.{db}.t"])
        check(events, replica, db, seed)
        servers = {m.data["source"]["server_id"] for m in events if m.value is not None and m.data["op"] != "r"}
        assert servers == {1, 2}, f"changes from servers {servers}, not from the primary and then the replica"
    finally:
        replica.stop()
        primary.stop()


@pytest.mark.parametrize("kind", ["mariadb", pytest.param("mysql", marks=pytest.mark.slow)])
async def test_a_promoted_replica_lacking_published_transactions_stops_the_connector(request, kind, broker,
                                                                                    connector, tmp_path):
    template = request.getfixturevalue(f"{kind}_template")
    primary, replica = start_pair(kind, template, tmp_path)
    try:
        name = "diverged"
        db = prepare(primary)
        await holds(replica, executed(primary), "the replica to copy the table")
        replica.sql("STOP REPLICA" if kind == "mysql" else "STOP SLAVE")   # stopped early: it misses what follows
        lagging = executed(replica)
        config = connector_config(tmp_path, name, broker, primary, replica, db, catch_up_ms=1000)
        process = connector(config)
        await wait_until(lambda: snapshot_done(broker.address, name), 90, "the end of the snapshot")
        for i in range(5):
            primary.sql(f"UPDATE t SET v = v + 1 WHERE id = {i + 1}", db=db)
        lost = executed(primary)
        await published(broker.address, name, lost, "the connector to publish what the replica lacks")
        primary.proc.kill()
        primary.proc.wait()
        promote(replica)
        replica.sql("UPDATE t SET note = 'second history' WHERE id = 1", db=db)

        missing = GtidSet(lost).missing_from(GtidSet(lagging))
        assert missing
        await wait_for_log(process, "no server holds every transaction", timeout=60)
        log = process.log()
        assert f"127.0.0.1:{replica.port} lacks {missing}" in log, log[-3000:]
        assert "will not be restarted" in log
        events = await read_committed(broker.address, [f"{name}.{db}.t"])
        assert not [m for m in events if m.value is not None and m.data["after"] and
                    m.data["after"]["note"] == "second history"], "the second history was published"
    finally:
        replica.stop()
        primary.stop()


async def _true(value: bool) -> bool:
    return value


def check(events, server: SqlServer, db: str, seed: int) -> None:
    """The log replays into the server's table; every streamed transaction is there once and whole."""
    mine, theirs = replay(events), mysql_rows(server, f"`{db}`.t")
    assert same_rows(mine, theirs), f"the log differs from the promoted server (seed {seed})"
    orders: dict[str, list[int]] = defaultdict(list)
    for m in events:
        if m.value is not None and m.data["op"] != "r":
            orders[m.data["transaction"]["id"]].append(m.data["transaction"]["total_order"])
    assert orders, "nothing streamed"
    for txid, seen in orders.items():
        assert sorted(seen) == list(range(1, len(seen) + 1)), (
            f"transaction {txid} is not whole and once: total_order {sorted(seen)[:20]}... (seed {seed})")
    big = sum(1 for seen in orders.values() if len(seen) > BATCH)
    print(f"transactions {len(orders)}, sliced {big}, events {len(events)}")
    assert big, "no transaction was sliced"
