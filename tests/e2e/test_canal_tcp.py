"""`binlake canal run CONF_DIR` in tcp mode (Canal's stock serverMode) with Canal's own clients, the Java
`canal.client` from Maven Central and canal-python from PyPI, looping as Canal's example client does (get without
ack, ack; every fifth batch rolled back) while a MariaDB workload runs and the server is SIGKILLed twice.
Replaying what the client received gives MariaDB's tables; an acked batch never comes again (but the one whose ack
was on the wire at the kill), and every entry comes in some acked batch; with canal.instance.get.ddl.isolation each
DDL comes in a batch of its own."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from canal_stock import conf_dir
from e2e_harness import ROOT, ConnectorProcess, mysql_rows, read_committed, wait_for_log, wait_until
from mysql_workload import Workload, committed_offset
from sandbox.process import free_port

CANAL_RUN = [sys.executable, "-m", "binlake.cli", "canal", "run"]
CANAL_PYTHON = ROOT / ".cache" / "canal-python"
CANAL_JARS = ROOT / ".cache" / "canal-client-jars"
CLIENTS = ROOT / "tests" / "canal_clients"
INSERT, UPDATE, DELETE = 1, 2, 3
ROWDATA = 2


def start_server(conf: Path, tmp_path: Path, n: int) -> ConnectorProcess:
    return ConnectorProcess(conf, tmp_path / f"canal-{n}.log", command=[*CANAL_RUN, str(conf)]).start()


def python_client(port: int, out: Path, stop: Path, log: Path, tmp_path: Path) -> subprocess.Popen:
    assert (CANAL_PYTHON / "canal" / "client.py").exists(), "canal-python is missing: run `make canal-python`"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(CANAL_PYTHON), PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    with open(log, "ab") as log_file:       # (cwd elsewhere: binlake's own `canal` package must not shadow it)
        return subprocess.Popen([sys.executable, str(CLIENTS / "canal_python_client.py"), "127.0.0.1", str(port),
                                 "example", str(out), str(stop)],
                                stdout=log_file, stderr=subprocess.STDOUT, cwd=CANAL_PYTHON, env=env)


def java_client(port: int, out: Path, stop: Path, log: Path, tmp_path: Path) -> subprocess.Popen:
    assert (CANAL_JARS / ".fetched").exists(), "Canal's Java client is missing: run `make canal-java-client`"
    classes = tmp_path / "classes"
    classpath = f"{CANAL_JARS}/*"
    subprocess.run(["javac", "-cp", classpath, "-d", str(classes), str(CLIENTS / "java" / "CanalLoop.java")],
                   check=True, timeout=300)
    with open(log, "ab") as log_file:
        return subprocess.Popen(["java", "-cp", f"{classes}:{classpath}", "CanalLoop", "127.0.0.1", str(port),
                                 "example", str(out), str(stop)], stdout=log_file, stderr=subprocess.STDOUT)


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


@pytest.mark.timeout(900)
# canal-python is `slow` for suite time: the protocol is the same, the Java client is Canal's own
@pytest.mark.parametrize("start_client", [java_client, pytest.param(python_client, marks=pytest.mark.slow)],
                         ids=["java", "python"])
async def test_canal_clients_through_two_sigkills(mariadb, broker, tmp_path, start_client):
    server = mariadb
    seed = int(os.environ.get("E2E_SEED", random.randrange(1 << 30)))
    print(f"E2E_SEED={seed}")
    db = server.new_database()
    port = free_port()
    conf = conf_dir(tmp_path, {"kafka.bootstrap.servers": broker.address, "canal.port": str(port),
                               "canal.metrics.pull.port": ""},
                    {"canal.instance.master.address": f"127.0.0.1:{server.port}",
                     "canal.instance.dbUsername": server.user, "canal.instance.dbPassword": server.password,
                     "canal.instance.mysql.slaveId": "5404", "canal.instance.filter.regex": f"{db}\\..*",
                     "canal.instance.get.ddl.isolation": "true"})
    process = start_server(conf, tmp_path, 0)
    await wait_for_log(process, "example-0 started", timeout=180)
    await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
    out, stop_file = tmp_path / "received.jsonl", tmp_path / "stop"
    client = start_client(port, out, stop_file, tmp_path / "client.log", tmp_path)
    try:
        workload = Workload(server, db, random.Random(seed))
        workload.prepare()                      # (Canal takes no snapshot: the tables' rows come as INSERTs)
        stop = threading.Event()
        writer = threading.Thread(target=workload.run, args=(stop, 4.0))
        writer.start()
        try:
            for n in (1, 2):
                seen = received(out)
                try:
                    await wait_until(lambda: asyncio.to_thread(lambda: received(out) > seen + 5), 240,
                                     "the client to receive more batches")
                except AssertionError as exc:
                    raise AssertionError(f"{exc}; {await state(broker.address, server)}") from None
                process.proc.send_signal(signal.SIGKILL)
                process.proc.wait()
                process = start_server(conf, tmp_path, n)
        finally:
            stop.set()
            writer.join()
        end = server.binlog_end()

        async def source_caught_up() -> bool:
            offset = await committed_offset(broker.address, "example")
            return offset is not None and (offset["file"], offset["pos"]) >= end
        await wait_until(source_caught_up, 240, "the destination to write the workload")
        try:
            await wait_until(lambda: acked_to_end(broker.address), 240, "the client to ack every entry")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {await state(broker.address, server)}") from None
        stop_file.touch()
        assert client.wait(60) == 0, (tmp_path / "client.log").read_text()[-3000:]
    finally:
        if client.poll() is None:
            client.kill()
        process.kill()

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    batches = [line for line in lines if "id" in line]
    assert sum(1 for line in lines if "reconnect" in line) >= 2
    key_columns = {t: keys for t, keys in workload.tables.items()}
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
    ddl_batches = [b for b in batches if any(e.get("ddl") for e in b["entries"])]
    assert ddl_batches and all(len(b["entries"]) == 1 for b in ddl_batches)     # get.ddl.isolation: each alone
