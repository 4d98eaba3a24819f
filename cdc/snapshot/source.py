"""The snapshot source: numbered steps from an empty log to `op: r` events and a streaming position.

1 prepare     two connections: one takes the lock, one reads in a REPEATABLE READ snapshot
2 tables      list the tables, apply the filters; the server's row estimates (for progress), before the lock
3 lock        FLUSH TABLES WITH READ LOCK, or LOCK TABLES ... READ on the captured tables without RELOAD
4 position    the binlog position and GTIDs while nothing can write
5 snapshot    START TRANSACTION WITH CONSISTENT SNAPSHOT on the reading connection
6 structure   SHOW CREATE DATABASE and TABLE into the schema history at that position (not when resuming)
7 unlock      writers go on; the snapshot still sees the locked moment
8 data        each table in primary-key chunks; every chunk is a batch whose offset names its last key
9 complete    the offset loses its snapshot part: streaming starts at the recorded position

Streaming from the recorded position then sees exactly the changes after the snapshot: no gap, no
overlap. A resumed snapshot (after a crash) takes a new consistent snapshot for the remaining chunks
but keeps the first position, so changes made in between are streamed again (at least once).
"""

from __future__ import annotations

import base64
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from cdc.config import SourceConfig
from cdc.connection import raw_values
from cdc.checks import current_position
from cdc.dispatcher import SYSTEM_DATABASES, Dispatcher
from cdc.emitter import TableContext
from cdc.errors import ConfigurationError, UnsupportedDdlError
from cdc.offsets import BinlogPosition, EventSource, Offset, SnapshotProgress, SourceInfo
from cdc.records import Batch
from cdc.schema.history import SchemaHistory
from cdc.schema.model import Schema, TableDef
from cdc.schema.ddl import apply_ddl
from cdc.snapshot.progress import SnapshotProgress as ProgressBar
from cdc.snapshot.rows import chunk_query, converter, key_positions

log = logging.getLogger(__name__)
_ACCESS_DENIED = (1044, 1045, 1142, 1227)


@dataclass
class _State:
    lock: Connection | None = None
    read: Connection | None = None
    databases: list[str] = field(default_factory=list)
    all_tables: list[tuple[str, str]] = field(default_factory=list)
    captured: list[tuple[str, str]] = field(default_factory=list)
    estimates: dict[tuple[str, str], int] = field(default_factory=dict)   # table -> the server's row estimate
    position: BinlogPosition | None = None
    gtids: str = ""
    structure: Schema = field(default_factory=Schema)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _key_json(raw: tuple) -> tuple:
    """A chunk's last key as the server sent it, JSON-safe for the offset."""
    return tuple({"base64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for v in raw)


def _key_raw(stored: tuple) -> tuple:
    return tuple(base64.b64decode(v["base64"]) if isinstance(v, dict) else v for v in stored)


class SnapshotSource:
    def __init__(self, config: SourceConfig, engine: Engine, history: SchemaHistory, dispatcher: Dispatcher,
                 partitions: Callable[[str], int]) -> None:
        self.config = config
        self.engine = engine
        self.history = history
        self.dispatcher = dispatcher
        self.partitions = partitions
        self.progress: ProgressBar | None = None  # the data phase's counts, once it began

    def run(self, resume_from: Offset | None, record_schema: bool) -> Iterator[Batch]:
        with self._session() as s:
            self._consistent_start(s, resume_from, record_schema)
            yield from self._drain()
            yield from self._8_data(s, resume_from.snapshot if resume_from else None)

    def structure_only(self, start: Offset | None = None) -> Offset:
        """For `no_data`: record the structure at the current position (or at `start`, a configured one: the tables
        as they are now stand for the tables there, as Canal's table-meta store takes them on a first start)
        without reading rows."""
        with self._session() as s:
            self._consistent_start(s, start, True)
        return Offset(s.position, s.gtids)

    @contextmanager
    def _session(self) -> Iterator[_State]:
        s = _State()
        try:
            yield s
        finally:
            for conn in (s.lock, s.read):
                if conn is not None:
                    conn.close()

    def _consistent_start(self, s: _State, stream_from: Offset | None, record_schema: bool) -> None:
        self._1_prepare(s)
        self._2_tables(s)
        self._3_lock(s)
        self._4_position(s, stream_from)
        self._5_snapshot(s)
        self._6_structure(s, record_schema)
        self._7_unlock(s)

    def _drain(self) -> Iterator[Batch]:
        while self.dispatcher.ready:
            yield self.dispatcher.ready.popleft()

    # --- steps -----------------------------------------------------------------------------
    def _1_prepare(self, s: _State) -> None:
        s.lock = self.engine.connect()
        s.read = raw_values(self.engine.connect())
        s.lock.exec_driver_sql("SET SESSION lock_wait_timeout = 30")
        s.read.exec_driver_sql("SET SESSION time_zone = '+00:00'")
        variables = {_text(name) for name, _ in s.read.exec_driver_sql(
            "SHOW VARIABLES WHERE Variable_name IN ('show_gipk_in_create_table_and_information_schema', "
            "'information_schema_stats_expiry')").fetchall()}
        if "show_gipk_in_create_table_and_information_schema" in variables:
            # MySQL can hide generated invisible primary keys from SHOW CREATE TABLE; the binlog has them
            s.read.exec_driver_sql("SET SESSION show_gipk_in_create_table_and_information_schema = ON")
        if "information_schema_stats_expiry" in variables:
            # MySQL 8+ answers TABLE_ROWS (the row estimates) from a cache kept a day by default: a table
            # filled since its count was cached would be estimated at its old size, often 0
            s.read.exec_driver_sql("SET SESSION information_schema_stats_expiry = 0")

    def _2_tables(self, s: _State) -> None:
        s.databases = [str(db) for (db,) in s.lock.exec_driver_sql(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY SCHEMA_NAME").fetchall()
            if str(db) not in SYSTEM_DATABASES]
        rows = s.lock.exec_driver_sql(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            "ORDER BY TABLE_SCHEMA, TABLE_NAME").fetchall()
        s.all_tables = [(str(db), str(t)) for db, t in rows if str(db) not in SYSTEM_DATABASES]
        s.captured = [(str(db), str(t)) for db, t in rows if self.dispatcher.captured(str(db), str(t))]
        # (before the lock: FLUSH TABLES evicts InnoDB's live row counts, leaving the persisted statistics,
        # which lag a table filled moments ago)
        s.estimates = {(str(db), str(t)): int(n or 0) for db, t, n in s.read.exec_driver_sql(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES").fetchall()}

    def _3_lock(self, s: _State) -> None:
        try:
            s.lock.exec_driver_sql("FLUSH TABLES WITH READ LOCK")
            return
        except OperationalError as exc:
            if exc.orig.args[0] not in _ACCESS_DENIED:
                raise
            log.info("no RELOAD privilege for a global read lock; locking the captured tables instead")
        if not s.captured:
            return
        try:
            s.lock.exec_driver_sql("LOCK TABLES " + ", ".join(f"`{db}`.`{t}` READ" for db, t in s.captured))
        except OperationalError as exc:
            if exc.orig.args[0] in _ACCESS_DENIED:
                raise ConfigurationError("the snapshot needs a read lock: GRANT RELOAD (global read lock) or "
                                         "LOCK TABLES to the source's user") from None
            raise

    def _4_position(self, s: _State, stream_from: Offset | None) -> None:
        """`stream_from`: a resumed snapshot's first position, or a configured start, instead of the current one."""
        if stream_from is not None:
            s.position, s.gtids = stream_from.position, stream_from.gtids
            return
        version = str(s.lock.exec_driver_sql("SELECT VERSION()").scalar())
        s.position, s.gtids = current_position(s.lock, version)

    def _5_snapshot(self, s: _State) -> None:
        s.read.exec_driver_sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        s.read.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")

    def _6_structure(self, s: _State, record: bool) -> None:
        statements = []
        for db, t in s.all_tables:
            ddl = _text(s.read.exec_driver_sql(f"SHOW CREATE TABLE `{db}`.`{t}`").one()[1])
            try:
                apply_ddl(s.structure, db, ddl)
            except UnsupportedDdlError:
                if self.dispatcher.captured(db, t) and not self.config.ddl_skip_unparseable:
                    raise
                log.warning("not capturing the structure of %s.%s: its DDL is not supported", db, t)
                continue
            statements.append((db, ddl))
        if not record:
            return
        self.history.reset(s.position, s.gtids)
        self.dispatcher.emitter.tick()
        source = self._source(s, "true")
        for db in s.databases:      # every one: a table created later without a charset takes its default
            ddl = _text(s.read.exec_driver_sql(f"SHOW CREATE DATABASE `{db}`").one()[1])
            self.history.record(s.position, db, ddl, gtids=s.gtids)
        for db, ddl in statements:
            changes = self.history.record(s.position, db, ddl, gtids=s.gtids)
            if changes:
                self.dispatcher.schema_change(db, ddl, changes, source)

    def _7_unlock(self, s: _State) -> None:
        s.lock.exec_driver_sql("UNLOCK TABLES")
        s.lock.close()
        s.lock = None

    def _8_data(self, s: _State, resume: SnapshotProgress | None) -> Iterator[Batch]:
        done = list(resume.done) if resume else []
        todo = [s.structure.get(db, t) for db, t in s.captured if f"{db}.{t}" not in done]
        todo = [t for t in todo if t is not None]
        self.progress = bar = ProgressBar(self.config.snapshot_progress, len(todo))
        try:
            for n, definition in enumerate(todo):
                after = None
                if resume and resume.table == definition.id and resume.after is not None:
                    after = _key_raw(resume.after)
                bar.table(definition.id, s.estimates.get((definition.db, definition.name), 0))
                yield from self._read_table(s, definition, after, done, last_table=n == len(todo) - 1, bar=bar)
                done.append(definition.id)
                bar.table_done()
                if n < len(todo) - 1:
                    self.dispatcher.flush(self._offset(s, SnapshotProgress(tuple(done))))
                    yield from self._drain()
        finally:
            bar.close()
        s.read.rollback()
        # 9 complete
        self.dispatcher.flush(Offset(s.position, s.gtids))
        yield from self._drain()

    def _read_table(self, s: _State, definition: TableDef, after: tuple | None, done: list[str],
                    last_table: bool, bar: ProgressBar) -> Iterator[Batch]:
        ctx = TableContext.build(self.config, self.partitions, definition.db, definition.name,
                                 definition.primary_key, definition)
        names = [c.name for c in definition.columns]
        converters = [converter(c) for c in definition.columns]
        keys = key_positions(definition)
        chunk = self.config.snapshot_chunk_rows
        fields = {**self._source(s, "true"), "db": definition.db, "table": definition.name}

        def emit(rows, more: bool) -> None:
            source = EventSource({**fields, "ts_ms": int(time.time() * 1000)})
            self.dispatcher.emitter.tick()
            images = [{name: None if v is None else conv(v) for name, conv, v in zip(names, converters, raw)}
                      for raw in rows]
            final = images[-1:] if last_table and not more else []     # the snapshot's last record says so
            body = images[:len(images) - len(final)]
            done_rows = 0
            while done_rows < len(body):
                done_rows = self.dispatcher.rows(ctx, "r", body, done_rows, source)
            if final:
                self.dispatcher.rows(ctx, "r", final, 0, EventSource({**source.fields, "snapshot": "last"}))
            bar.rows(len(rows))

        if not keys:                     # no key to resume from: one pass, redone whole if interrupted
            parts = s.read.execution_options(stream_results=True).execute(
                chunk_query(definition, None, None)).partitions(chunk)
            rows = next(parts, [])
            while True:
                following = next(parts, None)
                emit(rows, following is not None)
                if following is None:
                    return
                self.dispatcher.flush(self._offset(s, SnapshotProgress(tuple(done))))
                yield from self._drain()
                rows = following
        while True:
            rows = s.read.execute(chunk_query(definition, after, chunk + 1)).fetchall()
            more = len(rows) > chunk      # one row of lookahead tells the last chunk from a full one
            rows = rows[:chunk]
            emit(rows, more)
            if not more:
                return
            after = tuple(rows[-1][k] for k in keys)
            self.dispatcher.flush(self._offset(s, SnapshotProgress(tuple(done), definition.id, _key_json(after))))
            yield from self._drain()

    def _offset(self, s: _State, progress: SnapshotProgress) -> Offset:
        return Offset(s.position, s.gtids, 0, progress)

    def _source(self, s: _State, snapshot: str) -> dict:
        info = SourceInfo(self.config.name, file=s.position.file, pos=s.position.pos, snapshot=snapshot,
                          ts_ms=int(time.time() * 1000))
        return info.to_dict()
