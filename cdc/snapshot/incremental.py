"""Incremental snapshots while streaming: the DBLog watermark algorithm, driven by signals.

A table is read in primary-key chunks, interleaved with the binlog, without a lock:

1 low watermark   insert a `snapshot-window-open` row into the signal table (committed at once)
2 chunk           SELECT the next `snapshot_chunk_rows` rows after the last chunk's key (its own read view)
3 high watermark  insert a `snapshot-window-close` row (and delete both watermark rows) in one transaction
4 window          the stream meets the low watermark: from there on, every row the binlog changes in the
                  chunk's table is dropped from the chunk (its newer image is in the stream already)
5 emit            the stream meets the high watermark: what is left of the chunk goes out as `op: r`
                  events (`source.snapshot: "incremental"`) in the batch of that transaction, whose
                  offset names the chunk's last key; then the next chunk

Read-only (a signal topic and no signal table), the watermarks are the server's GTID sets before and after
the SELECT (cdc/snapshot/watermarks.py): the window opens when the chunk has been read, and closes at the
end of the transaction that completes the high set; a chunk during which nothing committed goes out at once.

Why it is right: a change committed before the low watermark is in the chunk and was streamed before
it; one committed after the high watermark is streamed after it; one in between is streamed inside
the window and its key leaves the chunk, so a read never overwrites a newer change. Under
exactly-once delivery the batches from the low watermark to the high one stay in one Kafka
transaction (`Dispatcher.hold`): a chunk and its window commit together, and a stored offset never
points inside a window. After a crash the source resumes at the committed offset (before the window):
the old watermarks it streams again are not its own (other ids) and pass by, and the next chunk is
read anew with new ones.

Read-ahead (watermark rows): once a chunk's watermarks are written, the next chunk of the table is read at
once, between watermarks of its own, while the stream goes on towards the first one's high watermark (at
most `read_ahead` chunks wait; they go out in order). Their windows follow each other in the binlog, so
each still commits alone with its chunk. (GTID windows open when their chunk is read: a chunk read ahead
would open its window inside the last one's, chaining one Kafka transaction across the whole table, so
read-only snapshots read one chunk at a time.)

Progress (tables left, the last chunk's key, filters, paused) lives in the offsets
(`Dispatcher.offset_extras["incremental"]`), so a restarted source continues at the next chunk.
Owned by the streaming thread; `offer` may be called from any thread.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Callable

from sqlalchemy import Connection, Engine

from cdc import signals as S
from cdc.config import SourceConfig
from cdc.connection import raw_values
from cdc.dispatcher import Dispatcher, TableFilter
from cdc.emitter import TableContext
from cdc.offsets import GtidSet, Offset, SourceInfo
from cdc.schema.history import SchemaHistory
from cdc.schema.model import TableDef
from cdc.snapshot.rows import chunk_query, converter
from cdc.snapshot.source import _key_json, _key_raw
from cdc.snapshot.watermarks import Chunk, GtidWatermarks, TableWatermarks

log = logging.getLogger(__name__)
EXTRA = "incremental"          # its key in the offsets
TABLES = "tables"              # the table filters' key in the offsets


@dataclass(frozen=True, slots=True)
class Progress:
    """An incremental snapshot under way, as the offsets hold it. `tables[0]` is being read."""

    id: str
    tables: tuple[str, ...]
    after: tuple | None = None                       # JSON-safe key of the last chunk's last row
    filters: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)   # table -> surrogate key column
    paused: bool = False
    chunks: int = 0                                  # chunks of tables[0] done
    rows: int = 0                                    # rows of tables[0] emitted
    estimate: int = 0                                # the server's row estimate of tables[0]

    def to_dict(self) -> dict:
        return {"id": self.id, "tables": list(self.tables), "after": None if self.after is None else list(self.after),
                "filters": self.filters, "keys": self.keys, "paused": self.paused, "chunks": self.chunks,
                "rows": self.rows, "estimate": self.estimate}

    @classmethod
    def from_dict(cls, d: dict) -> "Progress":
        after = d.get("after")
        return cls(d["id"], tuple(d["tables"]), None if after is None else tuple(after), dict(d.get("filters", {})),
                   dict(d.get("keys", {})), bool(d.get("paused")), int(d.get("chunks", 0)), int(d.get("rows", 0)),
                   int(d.get("estimate", 0)))

    def next_table(self) -> "Progress | None":
        left = self.tables[1:]
        return replace(self, tables=left, after=None, chunks=0, rows=0, estimate=0) if left else None


@dataclass(slots=True)
class _Window:
    """One chunk between its watermarks."""

    table: str
    definition: TableDef
    key: tuple[str, ...]                 # chunk key columns
    rows: dict                           # key value (a tuple for a composite key) -> image, in key order
    last: tuple                          # the chunk's last key as the server sent it
    full: bool                           # as many rows as asked for: more may follow
    marks: Chunk                         # how the stream recognises its watermarks
    opened: bool = False
    closed: bool = False


class IncrementalSnapshot:
    def __init__(self, config: SourceConfig, engine: Engine, history: SchemaHistory, dispatcher: Dispatcher,
                 partitions: Callable[[str], int], stored: dict | None = None) -> None:
        self.config = config
        self.engine = engine
        self.history = history
        self.dispatcher = dispatcher
        self.partitions = partitions
        self.signal_table = config.signal_table
        self.watermarks = TableWatermarks(config.signal_table) if config.signal_table else \
            GtidWatermarks() if config.read_only_snapshots else None
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()   # (signal, signal topic position) from other threads
        self.progress = Progress.from_dict(stored) if stored else None
        self._windows: deque[_Window] = deque()     # chunks read, in key order, waiting for their windows
        self._read: Connection | None = None
        self._table_started = time.monotonic()
        self._rows_at_start = self.progress.rows if self.progress else 0
        # the table filters go into the offsets too: a table they capture after a config change is snapshotted
        dispatcher.offset_extras[TABLES] = {"include": list(config.table_include), "exclude": list(config.table_exclude)}
        self._publish()

    def forget(self) -> None:
        """A full snapshot runs: it reads every table, so no incremental one is needed."""
        self.progress = None
        self._windows.clear()
        self._publish()

    def tables_added(self, stored: dict | None) -> None:
        """Streaming resumes under `stored` (the table filters of the offsets): tables captured now and not
        then, known to the schema history, are snapshotted incrementally (the others are not read again)."""
        if stored is None:
            return
        before = TableFilter(tuple(stored.get("include", ())), tuple(stored.get("exclude", ())))
        added = sorted(f"{db}.{t}" for db, t in self.history.schema.tables
                       if self.dispatcher.captured(db, t) and not before(db, t) and f"{db}.{t}" != self.signal_table)
        if not added:
            return
        if self.watermarks is None:
            log.warning("tables.include now captures %s: without signals (signals: {table: ...} or {topic: ...}) "
                        "their existing rows are not read; only their changes from now on are", ", ".join(added))
            return
        log.info("tables.include now captures %s: snapshotting them incrementally", ", ".join(added))
        self.apply(S.Signal(f"tables-added-{uuid.uuid4().hex[:12]}", S.EXECUTE, tuple(added)))

    # --- signals --------------------------------------------------------------------------
    def offer(self, signal: S.Signal, position: tuple[int, int] | None = None) -> None:
        """From any thread: acted on by the streaming thread at its next event (heartbeats come every second).
        `position`: (partition, offset) of a signal from the signal topic, kept in the offsets once acted on."""
        self.inbox.put((signal, position))

    def apply(self, signal: S.Signal) -> None:
        p = self.progress
        if signal.type == S.EXECUTE:
            self._execute(signal)
        elif signal.type == S.STOP:
            if p is None:
                log.info("signal %s: no incremental snapshot runs; nothing to stop", signal.id)
                return
            left = tuple(t for t in p.tables if signal.tables and t not in signal.tables)
            if p.tables[0] not in left:
                self._windows.clear()       # their watermarks will pass by
                self.dispatcher.hold = False
                p = replace(p, tables=(p.tables[0], *left)).next_table()
            else:
                p = replace(p, tables=left)
            self.progress = p
            log.info("signal %s: incremental snapshot stopped for %s", signal.id,
                     ", ".join(signal.tables) if signal.tables else "every table")
        elif signal.type in (S.PAUSE, S.RESUME):
            if p is None:
                log.info("signal %s: no incremental snapshot runs; nothing to %s", signal.id, signal.type[:-9])
                return
            self.progress = replace(p, paused=signal.type == S.PAUSE)
            log.info("signal %s: incremental snapshot %s", signal.id, "paused" if signal.type == S.PAUSE else "resumed")
        self._publish()

    def _execute(self, signal: S.Signal) -> None:
        p = self.progress
        if p is not None and p.id == signal.id:
            return                          # read again after a restart: it runs already
        tables = []
        for name in signal.tables:
            try:
                self._check(name, signal.surrogate_key)
            except S.SignalRefused as exc:
                log.error("signal %s refused for %s: %s", signal.id, name, exc)
                continue
            tables.append(name)
        if not tables:
            return
        keys = {t: signal.surrogate_key for t in tables if signal.surrogate_key}
        filters = {t: f for t, f in signal.filters.items() if t in tables}
        if p is None:
            self.progress = Progress(signal.id, tuple(tables), filters=filters, keys=keys)
            self._table_started, self._rows_at_start = time.monotonic(), 0
        else:                               # queued behind the running one (Debezium does the same)
            more = tuple(t for t in tables if t not in p.tables)
            self.progress = replace(p, tables=p.tables + more, filters={**p.filters, **filters},
                                    keys={**p.keys, **keys})
        log.info("signal %s: incremental snapshot of %s", signal.id, ", ".join(tables))

    def _check(self, name: str, surrogate: str | None) -> None:
        if self.watermarks is None:
            raise S.SignalRefused("incremental snapshots need watermarks: set signals: {table: db.table} (the "
                                  "connector's user needs INSERT and DELETE on it), or signals: {topic: NAME} for "
                                  "read-only ones (GTID sets as watermarks)")
        db, _, table = name.partition(".")
        if not self.dispatcher.captured(db, table):
            raise S.SignalRefused("not a captured table (tables.include / tables.exclude)")
        definition = self.history.schema.get(db, table)
        if definition is None:
            raise S.SignalRefused("no such table in the schema history")
        if surrogate is not None:
            if definition.column(surrogate) is None:
                raise S.SignalRefused(f"surrogate-key {surrogate!r} is not a column of the table")
        elif not definition.primary_key:
            raise S.SignalRefused("the table has no primary key to read it in chunks by; give a unique column as "
                                  "surrogate-key in the signal's data")

    # --- the streaming thread's hooks -------------------------------------------------------
    def due(self) -> bool:
        """Something to do between events: signals came in, or the next chunk may be read."""
        return not self.inbox.empty() or self._room()

    def _room(self) -> bool:
        """The next chunk may be read: the snapshot runs, and the chunks waiting are fewer than the watermarks'
        read-ahead and full (the last chunk of a table is read alone: the next table starts when it is out)."""
        p, windows = self.progress, self._windows
        return p is not None and not p.paused and (
            not windows or (len(windows) < self.watermarks.read_ahead and windows[-1].full))

    def step(self, at: Offset | None) -> None:
        """`at`: the stream's offset when between two transactions, else None."""
        while not self.inbox.empty():
            signal, position = self.inbox.get()
            self.apply(signal)
            if position is not None:
                partition, offset = position
                self.dispatcher.offset_extras.setdefault(S.OFFSETS, {})[str(partition)] = offset + 1
        if self._room() and (at is not None or not self.watermarks.between):
            self._open_window(self.progress, at)

    def signal_row(self, row: dict) -> None:
        """A row inserted into the signal table, as the binlog has it."""
        id_, type_ = _text(row.get("id")), _text(row.get("type"))
        if type_ in S.WATERMARKS:
            for window in self._windows:        # (none of them: an earlier run's watermarks)
                if id_ == window.marks.open_id:
                    window.opened = True
                    self.dispatcher.hold = True
                elif id_ == window.marks.close_id and window.opened:
                    window.closed = True
            return
        try:
            self.apply(S.parse(id_, type_, _text(row.get("data"))))
        except S.SignalRefused as exc:
            log.error("%s (from the signal table %s)", exc, self.signal_table)

    def changed(self, context: TableContext, rows: list[dict]) -> None:
        """Rows the binlog changed: inside a window they leave its chunk."""
        for window in self._windows:
            if not window.opened or window.closed or context.collection != window.table or not rows:
                continue
            key_of = itemgetter(*_names(window.key, rows[0]))
            pop = window.rows.pop
            for row in rows:                    # (an update's before and after images both)
                pop(key_of(row), None)

    def at_commit(self, offset: Offset, event, streamed: GtidSet) -> None:
        """The transaction the stream is in ends with `event` (the stream restarts at `offset` until it
        has; `streamed`: the GTIDs read, this transaction's included): if it held the high watermark, the
        chunk goes out before its commit (same batch, same Kafka transaction)."""
        for window in self._windows:
            pending = window.marks.pending
            if pending is not None and window.opened and not window.closed and not pending.missing_from(streamed):
                window.closed = True
        self._emit(offset, event.server_id, event.file, event.start)

    def _emit(self, offset: Offset, server_id: int, file: str, pos: int) -> bool:
        """The chunks whose windows closed, in order, as reads (what is left of them); whether any went out."""
        windows = self._windows
        emitted = False
        while windows and windows[0].closed:
            self._emit_one(windows.popleft(), offset, server_id, file, pos)
            emitted = True
        self.dispatcher.hold = any(w.opened for w in windows)
        return emitted

    def _emit_one(self, window: _Window, offset: Offset, server_id: int, file: str, pos: int) -> None:
        definition, p = window.definition, self.progress
        context = TableContext.build(self.config, self.partitions, definition.db, definition.name,
                                     definition.primary_key, definition)
        info = SourceInfo(self.config.name, server_id, file, pos, 0, None, definition.db,
                          definition.name, int(time.time() * 1000), "incremental")
        images = list(window.rows.values())
        self.dispatcher.reads(context, images, info.event(), offset)
        p = replace(p, after=_key_json(window.last), chunks=p.chunks + 1, rows=p.rows + len(images))
        if not window.full:
            log.info("incremental snapshot %s: %s done (%d rows in %d chunks)", p.id, window.table, p.rows, p.chunks)
            p = p.next_table()
            self._table_started, self._rows_at_start = time.monotonic(), 0
            if p is None:
                log.info("incremental snapshot done")
        self.progress = p
        self._publish()

    def close(self) -> None:
        if self._read is not None:
            self._read.close()
            self._read = None

    # --- metrics ----------------------------------------------------------------------------
    def metrics(self, now: float) -> dict[str, float]:
        p = self.progress
        if p is None:
            return {"incremental_snapshot_running": 0.0}
        rate = (p.rows - self._rows_at_start) / max(1e-3, time.monotonic() - self._table_started)
        left = max(0, p.estimate - p.rows)
        found = {"incremental_snapshot_running": 1.0, "incremental_snapshot_paused": float(p.paused),
                 "incremental_snapshot_tables_left": float(len(p.tables)), "incremental_snapshot_chunks": float(p.chunks),
                 "incremental_snapshot_rows_read": float(p.rows), "incremental_snapshot_rows_estimated": float(p.estimate),
                 "incremental_snapshot_rows_per_second": rate}
        if rate > 0:
            found["incremental_snapshot_eta_seconds"] = left / rate
        return found

    def status(self) -> dict | None:
        """Progress for people: the table being read, its chunk, rows and ETA."""
        p = self.progress
        if p is None:
            return None
        m = self.metrics(time.time())
        return {"id": p.id, "table": p.tables[0], "tables_left": list(p.tables), "paused": p.paused,
                "chunk": p.chunks, "rows": p.rows, "rows_estimated": p.estimate,
                "eta_seconds": round(m["incremental_snapshot_eta_seconds"], 1)
                if "incremental_snapshot_eta_seconds" in m else None}

    # --- chunks -----------------------------------------------------------------------------
    def _publish(self) -> None:
        extras = self.dispatcher.offset_extras
        if self.progress is None:
            extras.pop(EXTRA, None)
        else:
            extras[EXTRA] = self.progress.to_dict()

    def _connection(self) -> Connection:
        if self._read is None:
            conn = raw_values(self.engine.connect())
            conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")
            if conn.exec_driver_sql("SHOW VARIABLES LIKE 'information_schema_stats_expiry'").fetchall():
                conn.exec_driver_sql("SET SESSION information_schema_stats_expiry = 0")
            conn.commit()
            self._read = conn
        return self._read

    def _open_window(self, p: Progress, at: Offset | None) -> None:
        name = p.tables[0]
        db, _, table = name.partition(".")
        definition = self.history.schema.get(db, table)
        surrogate = p.keys.get(name)
        windows = self._windows
        if definition is None or not (definition.primary_key or surrogate):
            if windows:
                return                     # (the chunks read go out first)
            log.error("incremental snapshot %s: %s %s; skipping it", p.id, name,
                      "is no longer in the schema history" if definition is None else "has no primary key any more")
            self.progress = p.next_table()
            self._publish()
            return
        key = (definition.column(surrogate).name,) if surrogate else _pk(definition)
        conn = self._connection()
        if p.chunks == 0 and p.estimate == 0 and not windows:
            (estimate,) = conn.exec_driver_sql(
                "SELECT COALESCE(MAX(TABLE_ROWS), 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                "TABLE_NAME = %s", (db, table)).one()
            p = self.progress = replace(p, estimate=int(estimate))
            conn.rollback()
        limit = self.config.snapshot_chunk_rows
        after = windows[-1].last if windows else _key_raw(p.after) if p.after is not None else None
        query = chunk_query(definition, after, limit, key=key, where=p.filters.get(name))
        marks = self.watermarks.read(conn, lambda: conn.execute(query).fetchall(), at, name,
                                     None if after is None else _key_json(after))
        if marks is None:
            return                         # (not yet: tried again at the next step)
        raw = marks.rows
        names = [c.name for c in definition.columns]
        converters = [converter(c) for c in definition.columns]
        positions = [names.index(k) for k in key]
        key_of = itemgetter(*key)               # (one column: the value itself, as in `changed`)
        rows: dict = {}
        for r in raw:
            image = {n: None if v is None else conv(v) for n, conv, v in zip(names, converters, r)}
            rows[key_of(image)] = image
        last = tuple(raw[-1][i] for i in positions) if raw else tuple(after) if after is not None else ()
        marks.rows = []
        window = _Window(name, definition, key, rows, last, len(raw) >= limit, marks)
        windows.append(window)
        if marks.pending is not None:      # GTID watermarks: open now; nothing committed meanwhile: closed now
            window.opened = True
            window.closed = not marks.pending
            if self._emit(at, 0, at.position.file, at.position.pos):
                self.dispatcher.flush(at)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _pk(definition: TableDef) -> tuple[str, ...]:
    return tuple(definition.column(p).name for p in definition.primary_key)


def _names(key: tuple[str, ...], row: dict) -> tuple[str, ...]:
    """The key columns as the binlog's images spell them (the history and the server may differ in case)."""
    if all(k in row for k in key):
        return key
    lower = {n.lower(): n for n in row}
    return tuple(lower[k.lower()] for k in key)
