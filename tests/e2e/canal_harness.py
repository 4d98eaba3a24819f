"""What the Canal TCP-mode tests share (test_canal_tcp.py: one server SIGKILLed and restarted; test_canal_ha.py:
two servers in Canal's ZooKeeper HA, the running one SIGKILLed): `binlake canal run` processes, Canal's Java client
looping as Canal's example does (tests/canal_clients/java/CanalLoop.java), and the checks of what it received."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import threading
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from canal_stock import conf_dir
from e2e_harness import ROOT, ConnectorProcess, mysql_rows, read_committed, wait_until
from mysql_workload import Workload, committed_offset

CANAL_RUN = [sys.executable, "-m", "binlake.cli", "canal", "run"]
CANAL_JARS = ROOT / ".cache" / "canal-client-jars"
CLIENTS = ROOT / "tests" / "canal_clients"
INSERT, UPDATE, DELETE = 1, 2, 3
ROWDATA = 2


def tcp_conf(tmp_path: Path, broker, server, db: str, slave_id: int, **keys: str) -> Path:
    """Canal's stock conf directory (tcp mode) for database `db` of `server`, `keys` set in canal.properties."""
    return conf_dir(tmp_path, {"kafka.bootstrap.servers": broker.address, "canal.metrics.pull.port": "", **keys},
                    {"canal.instance.master.address": f"127.0.0.1:{server.port}",
                     "canal.instance.dbUsername": server.user, "canal.instance.dbPassword": server.password,
                     "canal.instance.mysql.slaveId": str(slave_id), "canal.instance.filter.regex": f"{db}\\..*"})


@contextlib.asynccontextmanager
async def workload_running(server, db: str, seed: int):
    """The Workload writing `db`'s tables (its rows inserted first: Canal takes no snapshot) until the block ends."""
    workload = Workload(server, db, random.Random(seed))
    workload.prepare()
    stop = threading.Event()
    writer = threading.Thread(target=workload.run, args=(stop, 4.0))
    writer.start()
    try:
        yield workload
    finally:
        stop.set()
        await asyncio.to_thread(writer.join)


def start_server(conf: Path, tmp_path: Path, n: int, env: dict[str, str] | None = None) -> ConnectorProcess:
    """`binlake canal run CONF` (`env`: e.g. {"canal.port": ...}, as Canal reads keys from the environment)."""
    return ConnectorProcess(conf, tmp_path / f"canal-{n}.log", env, command=[*CANAL_RUN, str(conf)]).start()


def java_client(where: tuple[str, str], out: Path, stop: Path, log: Path, tmp_path: Path) -> subprocess.Popen:
    """CanalLoop at `where`: (HOST, PORT) for Canal's single client, ("zk", ZK_SERVERS) for its cluster client."""
    assert (CANAL_JARS / ".fetched").exists(), "Canal's Java client is missing: run `make canal-java-client`"
    classes = tmp_path / "classes"
    classpath = f"{CANAL_JARS}/*"
    if not (classes / "CanalLoop.class").exists():
        subprocess.run(["javac", "-cp", classpath, "-d", str(classes), str(CLIENTS / "java" / "CanalLoop.java")],
                       check=True, timeout=300)
    with open(log, "ab") as log_file:
        return subprocess.Popen(["java", "-cp", f"{classes}:{classpath}", "CanalLoop", *where, "example", str(out),
                                 str(stop)], stdout=log_file, stderr=subprocess.STDOUT)


async def state(address: str, server) -> str:
    """Where things stand, for a failure's message."""
    tp = TopicPartition("example.canal-entries", 0)
    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = AIOKafkaConsumer(bootstrap_servers=address, group_id="binlake-canal-example-1001",
                                    enable_auto_commit=False, isolation_level=isolation)
        await consumer.start()
        try:
            consumer.assign([tp])
            ends.append((await consumer.end_offsets([tp]))[tp])
            committed = await consumer.committed(tp)
        finally:
            await consumer.stop()
    return (f"entry log: high watermark {ends[0]}, last stable offset {ends[1]}, client committed {committed}; "
            f"source offset {await committed_offset(address, 'example')}, binlog end {server.binlog_end()}")


def received(out: Path) -> int:
    """Batches the client received so far."""
    return sum(1 for line in out.read_text().splitlines() if line.startswith('{"id"')) if out.exists() else 0


async def acked_to_end(address: str) -> bool:
    """The client's acks reached the last entry of the log (its committed offset is just past it: the commit
    markers of the log's transactions take offsets too, so the log's end is further)."""
    tp = TopicPartition("example.canal-entries", 0)
    last = (await read_committed(address, [tp.topic]))[-1].offset
    consumer = AIOKafkaConsumer(bootstrap_servers=address, group_id="binlake-canal-example-1001",
                                enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    try:
        consumer.assign([tp])
        return await consumer.committed(tp) == last + 1
    finally:
        await consumer.stop()


async def more_batches(out: Path, address: str, server, more: int = 5) -> None:
    """Until the client received `more` batches beyond those it has now."""
    seen = received(out)
    try:
        await wait_until(lambda: asyncio.to_thread(lambda: received(out) > seen + more), 240,
                         "the client to receive more batches")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {await state(address, server)}") from None


async def drain(address: str, server, client: subprocess.Popen, stop: Path, log: Path) -> None:
    """Once the workload ended: until the destination wrote all of it and the client acked every entry; then the
    client stops."""
    end = server.binlog_end()

    async def source_caught_up() -> bool:
        offset = await committed_offset(address, "example")
        return offset is not None and (offset["file"], offset["pos"]) >= end
    await wait_until(source_caught_up, 240, "the destination to write the workload")
    try:
        await wait_until(lambda: acked_to_end(address), 240, "the client to ack every entry")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {await state(address, server)}") from None
    stop.touch()
    assert client.wait(60) == 0, log.read_text()[-3000:]


def replay(batches: list[dict], keys: dict[str, tuple[str, ...]]) -> dict[str, dict[tuple, dict]]:
    tables: dict[str, dict[tuple, dict]] = {t: {} for t in keys}
    for batch in batches:
        for entry in batch["entries"]:
            if entry["type"] != ROWDATA or entry.get("ddl"):
                continue
            rows = tables[entry["table"]]
            for row in entry["rows"]:
                if entry["event"] in (UPDATE, DELETE):
                    rows.pop(tuple(row["before"][k] for k in keys[entry["table"]]), None)
                if entry["event"] in (INSERT, UPDATE):
                    rows[tuple(row["after"][k] for k in keys[entry["table"]])] = row["after"]
    return tables


def check_received(out: Path, server, db: str, key_columns: dict[str, tuple[str, ...]]) -> list[dict]:
    """What the client wrote to `out`, replayed, gives the database's tables; an acked batch never came again (but
    the one whose ack was on the wire at a reconnection), and every entry came in some acked batch. The lines."""
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    batches = [line for line in lines if "id" in line]
    expected = {t: {tuple(str(row[k]) for k in keys): {c: None if v is None else str(v) for c, v in row.items()}
                    for row in mysql_rows(server, f"{db}.{t}", keys).values()} for t, keys in key_columns.items()}
    replayed = replay(batches, key_columns)
    for table in key_columns:
        assert replayed[table].keys() == expected[table].keys(), table
        for key, row in expected[table].items():
            assert {**dict.fromkeys(row), **replayed[table][key]} == row, (table, key)

    def identity(entry: dict) -> tuple:
        return entry["file"], entry["offset"], entry["type"], entry["table"], json.dumps(entry["rows"])
    # An ack is one-way (Canal's protocol has no answer to it): the one the client sent just before the server was
    # killed may not have been stored, so that batch, and only that one, may come again after the reconnection.
    in_flight = {previous["id"] for previous, line in zip(lines, lines[1:]) if "reconnect" in line and "id" in previous}
    acked: dict[tuple, int] = {}
    for batch in batches:
        if batch["acked"]:
            for entry in batch["entries"]:
                first = acked.get(identity(entry))
                assert first is None or first in in_flight, \
                    f"an entry of acked batch {first} came again in acked batch {batch['id']}"
                acked[identity(entry)] = batch["id"]
    assert {identity(e) for b in batches for e in b["entries"]} == acked.keys()
    assert any(not b["acked"] for b in batches)
    return lines
