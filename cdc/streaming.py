"""The streaming source: binlog events in, batches out, one handler per event type.

Positions: a transaction's restart position is where its group starts (the GTID event, or BEGIN
without GTIDs); after its commit the offset moves past the commit event. Rows of a large transaction
already emitted before a restart are skipped by count (`skip_rows`). The events of a compressed
transaction all stand at its payload event's position; their rows are numbered on across them, so
each change keeps a distinct (position, row) for the sink's ordering.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from cdc.binlog.client import BinlogClient
from cdc.binlog.events import Begin, Commit, Event, Gtid, Heartbeat, Query, Rotate, Rows, TableMap
from cdc.config import SourceConfig
from cdc.dispatcher import Dispatcher
from cdc.emitter import TableContext
from cdc.errors import DecodeError
from cdc.jsondiff import JsonDiffError
from cdc.offsets import BinlogPosition, GtidSet, Offset, SourceInfo
from cdc.records import Batch
from cdc.rowdecoder import RowImageError, compile_partial_update_decoder, compile_rows_decoder
from cdc.schema.columns import describe_columns
from cdc.schema.history import SchemaHistory


# A data change written as a statement: a session ran with binlog_format=STATEMENT or MIXED.
_STATEMENT_DML = re.compile(r"(?:\s|/\*.*?\*/)*(INSERT|UPDATE|DELETE|REPLACE)\b", re.I | re.S)


class _MappedTable:
    __slots__ = ("decode", "decode_partial", "context", "signal")

    def __init__(self, decode, decode_partial, context: TableContext | None, signal: bool = False) -> None:
        self.decode = decode
        self.decode_partial = decode_partial    # for PARTIAL_UPDATE_ROWS events
        self.context = context
        self.signal = signal                    # the signal table (incremental snapshots)


class StreamingSource:
    """Single-threaded; `stop()` may be called from another thread and takes effect at the next event."""

    def __init__(self, config: SourceConfig, dispatcher: Dispatcher, history: SchemaHistory,
                 partitions: Callable[[str], int]) -> None:
        self.config = config
        self.dispatcher = dispatcher
        self.history = history
        self.partitions = partitions
        self.source = SourceInfo(config.name)
        self._tables: dict[int, _MappedTable] = {}
        self._contexts: dict[tuple, TableContext] = {}
        self._handlers: dict[type, Callable[[Event], None]] = {
            Rows: self._on_rows, TableMap: self._on_table_map, Commit: self._on_commit, Gtid: self._on_gtid,
            Begin: self._on_begin, Query: self._on_query, Rotate: self._on_rotate, Heartbeat: self._on_heartbeat}
        self._stopping = False
        self.incremental = None                 # an IncrementalSnapshot, when signals are configured
        self._signal_table = tuple(config.signal_table.split(".", 1)) if config.signal_table else None
        self._offset: Offset | None = None
        self.last_event_ts: int | None = None  # the server's timestamp (s) of the last transaction or DDL read
        self.caught_up = False
        self.on_idle: Callable[[], None] | None = None   # called at each binlog heartbeat (heartbeat_query)

    def stop(self) -> None:
        self._stopping = True

    def lag_seconds(self, now: float) -> float | None:
        """How far behind the server the stream is: 0 once a heartbeat said nothing more waits, else the
        age of the last transaction read (None before the first)."""
        if self.caught_up:
            return 0.0
        return None if self.last_event_ts is None else max(0.0, now - self.last_event_ts)

    @property
    def position(self) -> BinlogPosition | None:
        """Where the stream has read to, between transactions (None before it starts)."""
        return self._offset.position if self._offset is not None else None

    def run(self, client: BinlogClient, offset: Offset) -> Iterator[Batch]:
        self._offset = offset                   # committed: where to restart between transactions
        self._gtids = GtidSet(offset.gtids)
        self._skip = offset.skip_rows
        self._first_group = True                # the group the offset points into (we connect at it)
        self._in_group = self._dml_txn = False
        self._txn_start: BinlogPosition | None = None
        self._txn_gtid: str | None = None
        self._emitted = 0
        self._rows_at: tuple[str, int] | None = None   # position of the last rows event, and its next row number
        self._next_row = 0
        handlers = self._handlers
        ready = self.dispatcher.ready
        incremental = self.incremental
        try:
            for event in client.events():
                handlers[type(event)](event)
                while ready:
                    yield ready.popleft()
                if incremental is not None and incremental.due():   # signals from other channels; the next chunk
                    incremental.step(None if self._in_group else self._offset)   # (read while the last is written)
                    while ready:
                        yield ready.popleft()
                if self._stopping:
                    return
        finally:
            client.close()

    # --- handlers --------------------------------------------------------------------------
    def _start_group(self, event: Event, gtid: str | None) -> None:
        self._in_group = True
        self._txn_start = BinlogPosition(event.file, event.start)
        self._txn_gtid = gtid
        self._emitted = 0
        if not self._first_group:
            self._skip = 0
        self._first_group = False
        self.dispatcher.begin(gtid or str(self._txn_start), already_emitted=self._skip)

    def _on_gtid(self, event: Gtid) -> None:
        self._start_group(event, event.gtid)
        self._dml_txn = not event.standalone

    def _on_begin(self, event: Begin) -> None:
        if not self._in_group:
            self._start_group(event, None)
        self._dml_txn = True

    def _on_table_map(self, event: TableMap) -> None:
        if self._signal_table == (event.db, event.table) and self.incremental is not None:
            columns, _ = describe_columns(event, self.history.schema.get(event.db, event.table))
            self._tables[event.table_id] = _MappedTable(compile_rows_decoder(columns), None, None, signal=True)
            return
        if not self.dispatcher.captured(event.db, event.table):
            self._tables[event.table_id] = _MappedTable(None, None, None)
            return
        definition = self.history.schema.get(event.db, event.table)   # the table as of this event
        columns, pk = describe_columns(event, definition)
        key = (event.db, event.table, pk, definition)
        context = self._contexts.get(key)
        if context is None:
            context = TableContext.build(self.config, self.partitions, event.db, event.table, pk, definition)
            self._contexts[key] = context
        self._tables[event.table_id] = _MappedTable(compile_rows_decoder(columns),
                                                    compile_partial_update_decoder(columns), context)

    def _on_rows(self, event: Rows) -> None:
        mapped = self._tables.get(event.table_id)
        if mapped is None:
            raise DecodeError(f"rows event at {event.file}:{event.start} for table id {event.table_id}, "
                              "which no table map described")
        if mapped.context is None:
            if mapped.signal and event.kind == "c":
                for row in mapped.decode(event.data, event.begin, event.stop):
                    self.incremental.signal_row(row)
            return
        if not self._in_group:
            self._start_group(event, None)
            self._dml_txn = True
        if event.partial:
            rows = self._decode_partial(mapped, event)
        else:
            rows = mapped.decode(event.data, event.begin, event.stop)
        if self.incremental is not None:
            self.incremental.changed(mapped.context, rows)
        self.dispatcher.emitter.tick()
        source = self.source
        source.server_id, source.file, source.pos, source.gtid = event.server_id, event.file, event.start, self._txn_gtid
        source.db, source.table, source.ts_ms = mapped.context.db, mapped.context.table, event.ts * 1000
        event_source = source.event()
        count = len(rows) // 2 if event.kind == "u" else len(rows)
        at = (event.file, event.start)
        first_row = self._next_row if at == self._rows_at else 0
        self._rows_at, self._next_row = at, first_row + count
        index = min(self._skip, count)          # rows emitted before a restart
        self._skip -= index
        self._emitted += index
        while index < count:
            done = self.dispatcher.rows(mapped.context, event.kind, rows, index, event_source, first_row)
            self._emitted += done - index
            index = done
            if self.dispatcher.full:
                # A slice of a large transaction: restart at its start and skip what was emitted.
                self.dispatcher.flush(Offset(self._txn_start, str(self._gtids), self._emitted))

    @staticmethod
    def _decode_partial(mapped: _MappedTable, event: Rows) -> list:
        try:
            return mapped.decode_partial(event.data, event.begin, event.stop)
        except (JsonDiffError, RowImageError) as exc:
            raise DecodeError(
                f"cannot rebuild the partial JSON update of {mapped.context.db}.{mapped.context.table} at "
                f"{event.file}:{event.start}: {exc} (please report this event). To go on, set "
                "binlog_row_value_options='' (globally, and in the sessions that set it) so updates log whole "
                "JSON documents, and start the source once with snapshot: always") from None

    def _on_commit(self, event: Commit) -> None:
        self._end_group(event)

    def _group_end_offset(self, event: Event) -> Offset:
        if self._txn_gtid:
            self._gtids.add(self._txn_gtid)
        return Offset(BinlogPosition(event.file, event.end), str(self._gtids))

    def _gtids_after_group(self) -> str:
        """The executed set once the open group commits (schema history records carry it)."""
        if not self._txn_gtid:
            return str(self._gtids)
        after = GtidSet(str(self._gtids))
        after.add(self._txn_gtid)
        return str(after)

    def _end_group(self, event: Event) -> None:
        self.last_event_ts, self.caught_up = event.ts, False
        restart, self._offset = self._offset, self._group_end_offset(event)
        if self.incremental is not None:        # a chunk whose high watermark this group held goes out with it
            self.incremental.at_commit(restart, event, self._gtids)
        self._in_group = self._dml_txn = False
        self._txn_gtid = None
        self._skip = 0
        self.dispatcher.commit(self._offset)

    def _on_query(self, event: Query) -> None:
        if _STATEMENT_DML.match(event.sql):
            raise DecodeError(f"a data change written as an SQL statement at {event.file}:{event.start} (a session "
                              "ran with binlog_format=STATEMENT or MIXED): its rows are not in the binlog. Set "
                              "binlog_format=ROW for every session, then re-snapshot the tables it changed: "
                              f"{event.sql[:200]!r}")
        changes = self.history.record(BinlogPosition(event.file, event.end), event.db, event.sql,
                                      event.server_charset, self._gtids_after_group())
        if changes:                     # a changed table gets a new table id, so its next map is sent
            self.dispatcher.emitter.tick()
            src = self.source
            src.server_id, src.file, src.pos, src.row = event.server_id, event.file, event.start, 0
            db = event.db or changes[0].db
            src.gtid, src.db, src.table, src.ts_ms = self._txn_gtid, db, "", event.ts * 1000
            self.dispatcher.schema_change(db, event.sql, changes, src.to_dict())
        if not self._dml_txn:           # a DDL is a group of its own
            self._end_group(event)

    def _on_rotate(self, event: Rotate) -> None:
        if event.ts:                    # a real rotate (not the one sent on connect): ids may be reused
            self._tables.clear()
        # Forward only. Restarted by GTID set, the server streams from the start of the first file that may
        # hold a missing GTID (position 4) and skips what the set holds: its rotates name places behind the
        # offset, and a heartbeat storing one would replay the schema history to before its snapshot.
        rotated = BinlogPosition(event.next_file, event.next_pos)
        if not self._in_group and rotated > self._offset.position:
            self._offset = Offset(rotated, str(self._gtids))

    def _on_heartbeat(self, event: Heartbeat) -> None:
        self.caught_up = not self._in_group  # the server has sent everything it has
        if not self._in_group:
            self.dispatcher.heartbeat(self._offset)
            if self.on_idle is not None:
                self.on_idle()

