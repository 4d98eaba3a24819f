"""End-to-end helpers: `binlake connect run` as a subprocess, and change topics read back with a real
read_committed consumer (aiokafka), replayed into tables."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

ROOT = Path(__file__).resolve().parents[2]
CONNECT_RUN = [sys.executable, "-m", "binlake.cli", "connect", "run"]


class ConnectorProcess:
    """`binlake connect run CONFIG` (or the `command` given, e.g. `connect worker --config W.yaml`) in its
    own process, so a test can SIGKILL it."""

    def __init__(self, config: Path, log_path: Path, env: dict[str, str] | None = None,
                 command: list[str] | None = None) -> None:
        self.config = config
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.command = command or [*CONNECT_RUN, str(config)]
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ConnectorProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"connect did not exit within {timeout}s:\n{self.log()[-3000:]}") from None

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


async def wait_for_log(process: ConnectorProcess, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.log():
        if process.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in the connector's log:\n{process.log()[-3000:]}")
        await asyncio.sleep(0.05)


def write_config(path: Path, **keys) -> Path:
    path.write_text(yaml.safe_dump(keys, sort_keys=False))
    return path


def mysql_config(name: str, broker, server, include: list[str], **keys) -> dict:
    """A mysql connector config for `server` (sandbox.sql.SqlServer) writing to `broker`."""
    return {"name": name, "connector": "mysql", "bootstrap_servers": broker.address,
            "database": {"host": "127.0.0.1", "port": server.port, "user": server.user,
                         "password": server.password, "server_id": 5401},
            "tables": {"include": include}, "heartbeat_interval_ms": 500, **keys}


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def data(self):
        return None if self.value is None else json.loads(self.value)


async def read_committed(address: str, topics: list[str]) -> list[Message]:
    """Every committed record of `topics` (all partitions, each in log order) up to the end."""
    counts = await partition_counts(address, topics)
    consumer = AIOKafkaConsumer(bootstrap_servers=address, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        out: list[Message] = []
        async with asyncio.timeout(60):
            while pending := [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
                for tp, messages in (await consumer.getmany(*pending, timeout_ms=500)).items():
                    out += [Message(tp.topic, tp.partition, m.offset, m.key, m.value) for m in messages]
        return sorted(out, key=lambda m: (m.topic, m.partition, m.offset))
    finally:
        await consumer.stop()


async def partition_counts(address: str, topics: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        if missing := [t for t in topics if t not in existing]:
            raise AssertionError(f"no such topic: {', '.join(missing)}")
        return {d["topic"]: len(d["partitions"]) for d in await admin.describe_topics(topics)}
    finally:
        await admin.close()


async def wait_until(predicate, timeout: float, what: str, interval: float = 0.3):
    """Await `predicate()` (a coroutine function) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {result!r})")
        await asyncio.sleep(interval)


def replay(messages: list[Message]) -> dict[tuple, dict]:
    """Apply Debezium change events in log order: key -> row image. Tombstones are skipped."""
    rows: dict[tuple, dict] = {}
    for m in messages:
        event = m.data
        if event is None:
            continue
        key = tuple(sorted(json.loads(m.key).items()))
        if event["op"] == "d":
            if key not in rows:
                raise AssertionError(f"a delete of {dict(key)}, which is not there: {m.topic}/{m.partition} at {m.offset}")
            del rows[key]
        else:
            rows[key] = event["after"]
    return rows


def mysql_rows(server, table: str, key: tuple[str, ...] = ("id",), columns: str = "*") -> dict[tuple, dict]:
    """The table as MySQL holds it (`columns` selected), keyed like `replay`: key -> row."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {columns} FROM {table}")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
    return {tuple(sorted((k, row[k]) for k in key)): row for row in rows}


def same_rows(replayed: dict[tuple, dict], expected: dict[tuple, dict]) -> bool:
    """Equal, where a column added after a row's last event counts as its default, NULL."""
    return replayed.keys() == expected.keys() and all(
        {**dict.fromkeys(row), **replayed[key]} == row for key, row in expected.items())
