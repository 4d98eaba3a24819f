"""Schema history: DDL text with the binlog position it ran at (and the GTID set executed once it ran),
replayable to any position, or to any GTID set (a source that follows a failover restarts on a server
whose binlog positions are not the old one's: cdc/failover.py).

`record` parses and applies a statement and appends it to the store; `recover(position)` rebuilds the
schema from the store as it was at that position, so events read after a restart are described by the
tables as they were when the events were written. A snapshot starts with a reset record. Where the
records live is the store's business: in memory, a JSON-lines file, or (with the runtime) a compacted
topic written in the connector's transactions — anything with `append` and `records`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Iterable, Protocol

from cdc.errors import UnsupportedDdlError
from cdc.offsets import BinlogPosition, GtidSet
from cdc.records import Record
from cdc.schema.ddl import TableChange, apply_ddl
from cdc.schema.model import Schema

log = logging.getLogger(__name__)


class HistoryStore(Protocol):
    def append(self, record: dict) -> None: ...

    def records(self) -> Iterable[dict]: ...


class MemoryHistoryStore:
    def __init__(self) -> None:
        self._records: list[dict] = []

    def append(self, record: dict) -> None:
        self._records.append(dict(record))

    def records(self) -> Iterable[dict]:
        return list(self._records)


class FileHistoryStore:
    """JSON lines, appended and fsynced one record at a time."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def append(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> Iterable[dict]:
        if not self.path.exists():
            return []
        with open(self.path) as f:
            return [json.loads(line) for line in f if line.strip()]


class TopicHistoryStore:
    """Records kept in a log topic by the connector runtime: loaded from the topic's committed records
    at start; new ones wait in `take()` until the runtime writes them with the next batch, in the same
    Kafka transaction as that batch's offset, so the stored history never runs ahead of (or behind)
    the stored offset. Keys are the record's sequence number (unique: compaction keeps them all)."""

    def __init__(self, topic: str, stored: Iterable[bytes | None] = ()) -> None:
        self.topic = topic
        self._records = [json.loads(value) for value in stored if value is not None]
        self._pending: list[Record] = []

    def append(self, record: dict) -> None:
        key = b"%d" % len(self._records)
        self._records.append(dict(record))
        self._pending.append(Record(self.topic, key, json.dumps(record).encode(), 0))

    def records(self) -> Iterable[dict]:
        return list(self._records)

    def take(self) -> list[Record]:
        """Records appended since the last call, for the batch about to be written."""
        pending, self._pending = self._pending, []
        return pending


def _position(record: dict) -> BinlogPosition:
    return BinlogPosition(record["file"], record["pos"])


class SchemaHistory:
    """The schema as of the last recorded or recovered position. One owner (the source) mutates it."""

    def __init__(self, store: HistoryStore, skip_unparseable: bool = False,
                 captured: Callable[[str, str], bool] = lambda db, table: True) -> None:
        self.store = store
        self.skip_unparseable = skip_unparseable
        self.captured = captured
        self.schema = Schema()
        self._seen: set[tuple[str, int, str]] = set()

    def recover(self, position: BinlogPosition, gtids: str | None = None) -> Schema:
        """Replay stored records at or before `position`, from the last reset before it. Given `gtids` (a
        source restarting by GTID set, maybe on another server of the topology, whose binlog positions
        mean nothing here), a record that carries its GTID set is before when `gtids` holds that set."""
        if gtids is not None:
            within = GtidSet(gtids)
            def before(r: dict) -> bool:
                if "gtids" in r:
                    return not GtidSet(r["gtids"]).missing_from(within)
                return _position(r) <= position
        else:
            def before(r: dict) -> bool:
                return _position(r) <= position
        records = [r for r in self.store.records() if before(r)]
        self._seen = {_identity(r) for r in self.store.records()}
        start = max((k for k, r in enumerate(records) if r.get("reset")), default=0)
        self.schema = Schema()
        for r in records[start:]:
            if not r.get("reset"):
                apply_ddl(self.schema, r.get("db", ""), r["ddl"], r.get("server_charset"))
        return self.schema

    def reset(self, position: BinlogPosition, gtids: str | None = None) -> None:
        """A snapshot begins: forget everything; the structure read next is recorded at `position` (and
        the server's executed GTID set there)."""
        self.schema = Schema()
        self._append({"file": position.file, "pos": position.pos, "reset": True, **_gtids(gtids)})

    def record(self, position: BinlogPosition, db: str, ddl: str, server_charset: str | None = None,
               gtids: str | None = None) -> list[TableChange] | None:
        """Apply and store one statement. None if it cannot change tables (or was skipped as configured).
        `server_charset`: the server's default character set when it ran (kept for CREATE DATABASE);
        `gtids`: the GTID set executed once it ran (for `recover` by GTID set)."""
        try:
            changes = apply_ddl(self.schema, db, ddl, server_charset)
        except UnsupportedDdlError as exc:
            if not self.skip_unparseable and (exc.table is None or self.captured(*exc.table)):
                raise UnsupportedDdlError(
                    f"at {position}: {exc}. The schema history must follow every statement that shapes a "
                    "captured table: with binlog_row_metadata=MINIMAL it is what names and describes the "
                    "columns of each row event. Report the statement so the parser learns it; "
                    "ddl_skip_unparseable: true skips it, which is safe only if it changes no captured "
                    "table's columns") from None
            log.warning("skipping DDL at %s: %s", position, exc)
            return None
        if changes is not None:
            record = {"file": position.file, "pos": position.pos, "db": db, "ddl": ddl, **_gtids(gtids)}
            if server_charset is not None:
                record["server_charset"] = server_charset
            self._append(record)
        return changes

    def _append(self, record: dict) -> None:
        key = _identity(record)
        if key not in self._seen:      # a statement re-read after a restart is stored once
            self._seen.add(key)
            self.store.append(record)


def _gtids(gtids: str | None) -> dict:
    return {} if gtids is None else {"gtids": gtids}


def _identity(record: dict) -> tuple[str, int, str, str]:
    """What makes a record the same statement: a snapshot records every table at one position, and two
    databases may hold tables created by the same text, so the database is part of it."""
    return record["file"], record["pos"], record.get("db", ""), record.get("ddl", "")
