"""Incremental snapshots on a signal (issue 35), end to end: a connector started with `snapshot: no_data`
on a filled table; a signal asks for an incremental snapshot of it while a workload updates, deletes and
inserts its rows; the connector (`binlake connect run`) is SIGKILLed during the snapshot: first while the
snapshot is paused (`pause-snapshot`, committed), so that the kill lands mid-snapshot however fast the
machine is, and the restarted connector must report the same progress, still paused; last while it runs,
at its first chunk after a `resume-snapshot`. The signals come either as rows inserted into the signal
table (watermarks written to it), or as records of the signal topic with no signal table (read-only: GTID
sets as watermarks, the connector's user may not write).
Afterwards a read_committed consumer's log must

- replay (last event per key) into exactly the table MySQL holds,
- hold each key's snapshot read at most once (each chunk committed once, with its progress: the runs
  after a kill go on at the next chunk, not from the start),
- hold the table's rows as reads (`op: r`, `source.snapshot: "incremental"`): every row the workload
  did not touch arrived that way.

Set E2E_SEED to replay a run."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from aiokafka import AIOKafkaProducer

from sandbox.process import free_port
from e2e_harness import mysql_config, mysql_rows, read_committed, wait_for_log, wait_until, write_config
from mysql_workload import CommittedOffsets, committed_offset

SIGNAL_TABLE = "binlake_signal"


class Workload:
    """Random single-row updates, deletes and inserts (new keys past the end, and deleted keys again) on
    `t`; `touched` holds every key it changed."""

    def __init__(self, server, db: str, rows: int, rng: random.Random) -> None:
        self.server, self.db, self.rows, self.rng = server, db, rows, rng
        self.next_id = rows
        self.deleted: list[int] = []
        self.touched: set[int] = set()
        self.transactions = 0

    def statement(self) -> str:
        r, rng = self.rng.random(), self.rng
        if r < 0.5:
            key = rng.randrange(1, self.next_id + 1)
            self.touched.add(key)
            return f"UPDATE t SET v = v + 1, s = 'u{rng.randrange(10**6)}' WHERE id = {key}"
        if r < 0.7:
            key = rng.randrange(1, self.next_id + 1)
            self.touched.add(key)
            self.deleted.append(key)
            return f"DELETE FROM t WHERE id = {key}"
        if r < 0.8 and self.deleted:
            key = self.deleted.pop(rng.randrange(len(self.deleted)))
        else:
            self.next_id += 1
            key = self.next_id
        self.touched.add(key)
        return f"INSERT IGNORE INTO t VALUES ({key}, {rng.randrange(100)}, 'i{key}')"

    def run(self, stop: threading.Event) -> None:
        with self.server.connect(db=self.db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("BEGIN")
                for _ in range(self.rng.randint(1, 4)):
                    cur.execute(self.statement())
                cur.execute("COMMIT")
                self.transactions += 1
                time.sleep(self.rng.uniform(0, 0.01))


def prepare(server, rows: int, signal_table: bool = True) -> str:
    db = server.new_database()
    server.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40))", db=db)
    if signal_table:
        server.sql(f"CREATE TABLE {SIGNAL_TABLE} (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)",
                   f"GRANT INSERT, DELETE ON `{db}`.`{SIGNAL_TABLE}` TO '{server.user}'@'%'", db=db)
    for start in range(1, rows + 1, 10_000):
        values = ", ".join(f"({i}, {i % 97}, 's{i}')" for i in range(start, min(rows, start + 9_999) + 1))
        server.sql(f"INSERT INTO t VALUES {values}", db=db)
    return db


def replay_last(events) -> dict[tuple, dict]:
    """Last event per key; a delete of a key the log never had (deleted before its chunk was read) is fine."""
    rows: dict[tuple, dict] = {}
    for m in events:
        if m.value is None:
            continue
        key = tuple(sorted(json.loads(m.key).items()))
        if m.data["op"] == "d":
            rows.pop(key, None)
        else:
            rows[key] = m.data["after"]
    return rows


class Signals:
    """Signals to the connector through its channel (a row of the signal table, or a record of the signal
    topic on one kept producer); `acted_on(mark)`: the connector has committed an offset past the signal
    that `send` returned `mark` for (its binlog position, or its signal topic position)."""

    def __init__(self, channel: str, server, db: str, address: str, name: str) -> None:
        self.channel, self.server, self.db, self.address, self.name = channel, server, db, address, name
        self.config = {"table": f"{db}.{SIGNAL_TABLE}"} if channel == "table" else {"topic": f"{name}-signals"}
        self.sent = 0
        self._producer: AIOKafkaProducer | None = None

    async def __aenter__(self) -> "Signals":
        if self.channel == "topic":
            self._producer = AIOKafkaProducer(bootstrap_servers=self.address)
            await self._producer.start()
        return self

    async def __aexit__(self, *exc) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def send(self, *types: str, data: dict | None = None) -> tuple:
        """Each type as its own signal (a transaction or a record of its own), back to back, in order; `data`
        goes with execute-snapshot."""
        signals = []
        for type_ in types:
            self.sent += 1
            signals.append({"id": f"{type_}-{self.sent}", "type": type_,
                            "data": data if type_ == "execute-snapshot" else {}})
        if self.channel == "table":
            with self.server.connect(db=self.db) as conn, conn.cursor() as cur:    # (autocommit)
                for s in signals:
                    cur.execute(f"INSERT INTO {SIGNAL_TABLE} VALUES (%s, %s, %s)",
                                (s["id"], s["type"], json.dumps(s["data"])))
            return self.server.binlog_end()
        for s in signals:
            sent = await self._producer.send_and_wait(self.config["topic"], json.dumps(s).encode(),
                                                      key=self.name.encode())
        return sent.partition, sent.offset

    def acted_on(self, mark: tuple, offset: dict | None) -> bool:
        if offset is None:
            return False
        if self.channel == "table":
            return (offset["file"], offset["pos"]) >= tuple(mark)
        partition, at = mark
        return int((offset.get("signal_offsets") or {}).get(str(partition), 0)) > at


async def run_in_slices_until_moved(process, progress, chunks: int) -> None:
    """Let the connector run in 20 ms slices, stopped (SIGSTOP) between them, until its committed progress
    is past `chunks`: it is then stopped mid-snapshot however fast the machine, and the caller's kill lands
    while the snapshot runs (polling a free-running connector can miss a snapshot that ends in one poll)."""
    deadline = time.monotonic() + 120
    process.proc.send_signal(signal.SIGSTOP)
    while (await progress())["chunks"] <= chunks:
        assert time.monotonic() < deadline, f"no chunk past chunk {chunks} in 120 s"
        process.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.02)
        process.proc.send_signal(signal.SIGSTOP)


async def run_incremental(server, broker, connector, tmp_path, *, rows: int, chunk: int, kills: int,
                          channel: str) -> None:
    """Every kill but the last while the snapshot is paused (the test steps it on with resume-snapshot and
    pause-snapshot sent back to back, and kills once the pause is committed: however fast the snapshot runs,
    it is under way at the kill); the last one while it runs, at its first chunk after a resume."""
    seed = int(os.environ.get("E2E_SEED", random.randrange(1 << 30)))
    print(f"E2E_SEED={seed}")
    db = prepare(server, rows, signal_table=channel == "table")
    name = "inc"
    address, topic = broker.address, f"{name}.{db}.t"
    signals = Signals(channel, server, db, address, name)
    config = write_config(tmp_path / "inc.yaml", **mysql_config(
        name, broker, server, [rf"{db}\.t"], snapshot="no_data", snapshot_chunk_rows=chunk, max_batch_records=500,
        topic_partitions=2, signals=signals.config, commit_interval_ms=100,
        restart={"initial_backoff_ms": 100, "max_backoff_ms": 1000}))
    where = f"(E2E_SEED={seed})"
    rest: list[str] = []
    offsets = CommittedOffsets(address)

    async def committed() -> dict | None:
        return await offsets.get(name)

    async def started() -> object:
        stored = await committed()
        rest.append(f"127.0.0.1:{free_port()}")
        process = connector(config, args=("--rest", rest[-1]))
        await wait_for_log(process, f"{name}-0 started", timeout=120)

        async def first() -> bool:
            return await committed() != stored
        await wait_until(first, 120, "the connector's first commit", interval=0.1)
        return process

    async def reported() -> dict | None:
        """The running source's progress as its REST status reports it (once a second)."""
        url = f"http://{rest[-1]}/connectors/{name}/status"
        status = await asyncio.to_thread(lambda: json.loads(urllib.request.urlopen(url, timeout=10).read()))
        return (status["tasks"][0].get("source") or {}).get("incremental_snapshot")

    async def progress() -> dict:
        """The snapshot's committed progress; it must still be under way."""
        offset = await committed()
        assert offset is not None and "incremental" in offset, \
            f"the snapshot ended before kill {n + 1} of {kills} {where}: give it more chunks"
        return offset["incremental"]

    async def paused_past(chunks: int) -> dict:
        """Step the paused snapshot on (a resume and a pause back to back: a chunk or two) until the committed
        progress is past `chunks` and paused."""
        while True:
            mark = await signals.send("resume-snapshot", "pause-snapshot")

            async def acted_on() -> dict | None:
                offset = await committed()
                return offset if signals.acted_on(mark, offset) else None
            await wait_until(acted_on, 120, f"the commit past the signals at {mark}", interval=0.1)
            now = await progress()
            assert now["paused"], now
            if now["chunks"] > chunks:
                return now

    workload = Workload(server, db, rows, random.Random(seed + 1))
    stop = threading.Event()
    writer = threading.Thread(target=workload.run, args=(stop,), daemon=True)
    n = 0
    async with offsets, signals:
        process = await started()
        writer.start()
        try:
            await signals.send("execute-snapshot", "pause-snapshot",
                               data={"data-collections": [f"{db}.t"], "type": "incremental"})
            chunks = 0
            for n in range(kills - 1):      # killed while paused, a chunk or more further each time
                chunks = (await paused_past(chunks))["chunks"]
                process.kill()
                before = await progress()
                process = await started()
                now = await wait_until(reported, 60, "the restarted source's progress in its REST status")
                assert now["paused"] and now["chunk"] == before["chunks"] and now["rows"] == before["rows"], \
                    (before, now)       # on at the next chunk, not from the start
                assert now["table"] == f"{db}.t" and {"rows_estimated", "eta_seconds"} <= now.keys(), now
                chunks = before["chunks"]
            n = kills - 1               # the last kill: while the snapshot runs, at its first chunk past the resume
            await signals.send("resume-snapshot")
            await run_in_slices_until_moved(process, progress, chunks)
            process.kill()
            await progress()
            process = await started()

            async def done() -> bool:
                offset = await committed()
                return offset is not None and "incremental" not in offset
            await wait_until(done, 300, "the end of the incremental snapshot", interval=0.2)
            stop.set()
            await asyncio.to_thread(writer.join)
            end = server.binlog_end()

            async def caught_up() -> bool:
                offset = await committed()
                return offset is not None and (offset["file"], offset["pos"]) >= tuple(end)
            await wait_until(caught_up, 90, f"the committed offset to reach {end}")
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            stop.set()
            await asyncio.to_thread(writer.join)

    events = await read_committed(address, [topic])
    mine = replay_last(events)
    theirs = mysql_rows(server, f"`{db}`.t")
    assert mine.keys() == theirs.keys(), (
        f"keys differ {where}: missing {sorted(theirs.keys() - mine.keys())[:5]}, extra {sorted(mine.keys() - theirs.keys())[:5]}")
    different = [k for k in theirs if mine[k] != theirs[k]]
    assert not different, f"rows differ {where}: {[(mine[k], theirs[k]) for k in different[:5]]}"
    reads = [m for m in events if m.value is not None and m.data["op"] == "r"]
    assert all(m.data["source"]["snapshot"] == "incremental" for m in reads)
    read_keys = [json.loads(m.key)["id"] for m in reads]
    assert len(read_keys) == len(set(read_keys)), f"a key was read twice {where}"
    untouched = set(range(1, rows + 1)) - workload.touched
    missing = untouched - set(read_keys)
    assert not missing, f"untouched rows that did not arrive as incremental reads {where}: {sorted(missing)[:5]}"
    print(f"rows {rows}, reads {len(reads)}, workload transactions {workload.transactions}, "
          f"touched {len(workload.touched)}, events {len(events)}")
    assert workload.transactions > 50, "the workload ran too little to mean anything"


# (server, channel): by default each channel on one server, MySQL's GTID sets and MariaDB's read view both
# covered; the other pairs, the 100,000 rows and more kills are slow. (The timeouts leave room for a
# shared 2-core machine under a load average of 30.)
SHORT = dict(rows=10_000, chunk=250, kills=2)
CASES = [*(pytest.param(kind, channel, SHORT, marks=pytest.mark.timeout(600), id=f"{kind}-{channel}")
           for kind, channel in (("mysql", "table"), ("mariadb", "topic"))),
         *(pytest.param(kind, channel, SHORT, marks=[pytest.mark.slow, pytest.mark.timeout(600)],
                        id=f"{kind}-{channel}") for kind, channel in (("mariadb", "table"), ("mysql", "topic"))),
         *(pytest.param(kind, channel, dict(rows=100_000, chunk=1_000, kills=2),
                        marks=[pytest.mark.slow, pytest.mark.timeout(1500)], id=f"{kind}-{channel}-100k")
           for kind in ("mysql", "mariadb") for channel in ("table", "topic")),
         *(pytest.param(kind, channel, dict(rows=20_000, chunk=250, kills=6),
                        marks=[pytest.mark.slow, pytest.mark.timeout(900)], id=f"{kind}-{channel}-6-kills")
           for kind, channel in (("mysql", "table"), ("mariadb", "topic")))]


@pytest.mark.parametrize("kind, channel, size", CASES)
async def test_incremental_snapshot_under_a_workload_with_kills(request, broker, connector, tmp_path, kind, channel,
                                                                size):
    await run_incremental(request.getfixturevalue(kind), broker, connector, tmp_path, channel=channel, **size)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlake.cli", "connect", *args], capture_output=True, text=True,
                          timeout=60)


async def test_signals_from_the_command_line_refusals_and_an_added_table(mariadb, broker, connector, tmp_path):
    """`binlake connect signal NAME execute-snapshot --tables db.t --where SQL` through the REST API: only the
    rows the condition selects are read; a signal without tables is refused by the command, a table without
    a primary key or not captured in the log, and the connector goes on. Then a table added to
    tables.include (a restart with the new config) is snapshotted incrementally, and the first one is not
    read again. (The progress in the REST status: test_incremental_snapshot_under_a_workload_with_kills.)"""
    server = mariadb
    db = prepare(server, 3_000)
    server.sql("CREATE TABLE u (a INT, b VARCHAR(8), n INT, PRIMARY KEY (a, b))",
               "INSERT INTO u VALUES " + ", ".join(f"({i // 3}, 'k{i % 3}', {i})" for i in range(900)),
               "CREATE TABLE nokey (n INT)", db=db)
    name, rest = "sig", f"127.0.0.1:{free_port()}"
    keys = dict(snapshot="no_data", snapshot_chunk_rows=250, signals={"table": f"{db}.{SIGNAL_TABLE}"})
    config = write_config(tmp_path / "sig.yaml", **mysql_config(name, broker, server, [rf"{db}\.(t|nokey)"], **keys))
    process = connector(config, args=("--rest", rest))
    await wait_for_log(process, f"{name}-0 started", timeout=60)
    url = f"http://{rest}"

    async def accepted(*args: str) -> subprocess.CompletedProcess:
        while True:     # (until the source process runs)
            done = await asyncio.to_thread(_cli, "signal", name, *args, "--url", url)
            if done.returncode == 0 or "not running" not in done.stderr:
                return done
            await asyncio.sleep(0.2)

    refused = await asyncio.to_thread(_cli, "signal", name, "execute-snapshot", "--url", url)
    assert refused.returncode != 0 and "--tables" in refused.stderr
    done = await accepted("execute-snapshot", "--tables", f"{db}.nokey")   # no primary key: refused in the log
    assert done.returncode == 0, done.stderr
    done = await accepted("execute-snapshot", "--tables", f"{db}.u")        # not captured: refused in the log
    assert done.returncode == 0, done.stderr
    done = await accepted("execute-snapshot", "--tables", f"{db}.t", "--where", "id > 1000")
    assert done.returncode == 0, done.stderr
    await wait_for_log(process, "has no primary key")
    await wait_for_log(process, "not a captured table")
    await wait_for_log(process, f"{db}.t done", timeout=90)

    async def finished() -> bool:
        offset = await committed_offset(broker.address, name)
        return offset is not None and "incremental" not in offset
    await wait_until(finished, 90, "the end of the snapshot of t in the committed offsets")
    events = await read_committed(broker.address, [f"{name}.{db}.t"])
    read = sorted(json.loads(m.key)["id"] for m in events if m.value is not None and m.data["op"] == "r")
    assert read == list(range(1001, 3001))
    assert process.terminate() == 0

    # u joins tables.include: read incrementally (its composite key in chunks), t not again
    config = write_config(tmp_path / "sig.yaml", **mysql_config(name, broker, server, [rf"{db}\.(t|u|nokey)"], **keys))
    process = connector(config)
    await wait_for_log(process, f"now captures {db}.u", timeout=60)

    async def u_read() -> bool:
        offset = await committed_offset(broker.address, name)
        return offset is not None and "incremental" not in offset and "u" in offset["tables"]["include"][0]
    await wait_until(u_read, 90, "the snapshot of the added table")
    events = await read_committed(broker.address, [f"{name}.{db}.t", f"{name}.{db}.u"])
    reads = [m for m in events if m.value is not None and m.data["op"] == "r"]
    assert sorted(m.data["after"]["n"] for m in reads if m.topic.endswith(".u")) == list(range(900))
    assert len([m for m in reads if m.topic.endswith(".t")]) == 2000
    assert process.terminate() == 0
