"""Between the sources and the output: table filters, transaction metadata, heartbeats and batching.

Row changes accumulate in the open batch; a batch closes at a transaction commit, a DDL, a snapshot
chunk, or when it reaches `max_batch_records` records or `max_batch_bytes` bytes of keys and values
(then the source closes it with a mid-transaction offset), so memory stays bounded however large a
transaction is, and however wide its rows. (A snapshot chunk is read whole, so there
`snapshot_chunk_rows` bounds it.)
"""

from __future__ import annotations

import re
import time
from collections import deque

import orjson

from cdc.config import SourceConfig
from cdc.emitter import Emitter, TableContext
from cdc.offsets import EventSource, Offset
from cdc.records import Batch, Record

SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


class TableFilter:
    """Anchored regexes over `db.table`: captured if some include matches (or there are none) and no
    exclude matches. System databases are captured only when an include names them."""

    def __init__(self, include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
        self._include = [re.compile(p) for p in include]
        self._exclude = [re.compile(p) for p in exclude]
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, db: str, table: str) -> bool:
        hit = self._cache.get((db, table))
        if hit is None:
            name = f"{db}.{table}"
            if self._include:
                hit = any(p.fullmatch(name) for p in self._include)
            else:
                hit = db not in SYSTEM_DATABASES
            hit = hit and not any(p.fullmatch(name) for p in self._exclude)
            self._cache[(db, table)] = hit
        return hit


class Dispatcher:
    """Owned by one source thread. `ready` holds closed batches for the source to yield."""

    def __init__(self, config: SourceConfig, emitter: Emitter, clock=time.monotonic) -> None:
        self.config = config
        self.emitter = emitter
        self.captured = TableFilter(config.table_include, config.table_exclude)
        self._metadata = config.transaction_metadata
        self._max_records = config.max_batch_records
        self._max_bytes = config.max_batch_bytes
        self._bytes = 0                  # keys and values of the open batch
        self._per_change = 0             # bytes per change of the last run, to size the next
        self.clock = clock
        self.ready: deque[Batch] = deque()
        self._records: list[Record] = []
        self._last_flush = clock()
        self._txid: str | None = None
        self._counts: dict[str, int] = {}
        self._order = 0
        self._sliced = False
        # Incremental snapshots (cdc/snapshot/incremental.py): their progress goes into every offset, and
        # while a chunk's window is open (`hold`) batches do not end the Kafka transaction.
        self.offset_extras: dict = {}
        self.hold = False
        self._held = False

    @property
    def full(self) -> bool:
        return len(self._records) >= self._max_records or self._bytes >= self._max_bytes

    # --- transactions ----------------------------------------------------------------------
    def begin(self, txid: str, already_emitted: int = 0) -> None:
        """A transaction starts; `already_emitted` of its changes went out before a restart."""
        self._txid, self._counts, self._order = txid, {}, already_emitted
        self._sliced = False
        self._txn_prefix = b'{"id":%b,"total_order":' % orjson.dumps(txid)

    def rows(self, table: TableContext, kind: str, images: list[dict], start: int, source: EventSource,
             first_row: int = 0) -> int:
        """Emit the changes of one rows event (or snapshot chunk, kind "r") from change `start` on (update
        images come in before/after pairs) until the batch is full; returns the first change not emitted.
        Change i is row `first_row + i` of its position.

        The emitter takes the changes in runs (Emitter.rows), each as long as the batch's room allows
        however many records a change makes (a delete and its tombstone; an update of the primary key:
        delete, tombstone, create), so the batch closes after the same change as one taken at a time."""
        records = self._records
        limit = self._max_records
        count = len(images) // 2 if kind == "u" else len(images)
        if kind == "u":
            most = 3 if table.primary_key else 1
        else:
            most = 2 if kind == "d" and self.emitter.tombstones else 1
        index = start
        max_bytes = self._max_bytes
        while index < count:
            room = (limit - len(records)) // most
            if self._per_change and self._bytes < max_bytes:    # (over it: a snapshot chunk going on)
                room = min(room, (max_bytes - self._bytes) // self._per_change)
            stop = min(count, index + max(1, room))
            before = len(records)
            txn = None
            if self._txid is not None:
                if self._metadata and self._order == 0 and not self._counts:
                    self.emitter.transaction("BEGIN", self._txid, None, records)
                n = self._counts.get(table.collection, 0)
                txn = (self._txn_prefix, self._order, n)
                self._order += stop - index
                self._counts[table.collection] = n + stop - index
            self.emitter.rows(table, kind, images, index, stop, source, first_row, txn, records)
            added = _size(records, before)
            self._bytes += added
            self._per_change = max(1, added // (stop - index))
            index = stop
            if len(records) >= limit or self._bytes >= max_bytes:
                break
        return index

    def commit(self, offset: Offset) -> None:
        if self._txid is not None and self._counts and self.config.transaction_metadata:
            self.emitter.transaction("END", self._txid, self._counts, self._records)
        self.emitter.commit(self._txid, offset, self._records)
        self._txid = None
        if self._records or self._sliced or self._held:   # a split transaction always ends with its commit offset
            self.flush(offset)
        else:
            self.heartbeat(offset)      # filtered-out traffic still moves the offset

    # --- other events ----------------------------------------------------------------------
    def schema_change(self, db: str, ddl: str, changes: list, source: dict) -> None:
        """Records for captured tables' changes; they go out with the DDL group's commit."""
        captured = [c for c in changes if self.captured(c.db, c.table)]
        if captured:
            self.emitter.schema_change(db, ddl, captured, source, self._records)

    def heartbeat(self, offset: Offset) -> None:
        """Emit a heartbeat with `offset` if nothing was flushed for heartbeat_interval_s."""
        interval = self.config.heartbeat_interval_s
        if interval and self._txid is None and not self._records and self.clock() - self._last_flush >= interval:
            self.emitter.heartbeat(self._records)
            self.flush(offset)

    def flush(self, offset: Offset) -> None:
        self._sliced = self._txid is not None      # inside a transaction: a slice of it
        self._held = self.hold
        stored = offset.to_dict()
        if self.offset_extras:
            stored.update(self.offset_extras)
        self.ready.append(Batch(self._records, stored, ends_transaction=not (self._sliced or self._held)))
        self._records = []
        self._bytes = 0
        self._last_flush = self.clock()

    def reads(self, table: TableContext, images: list[dict], source: EventSource, offset: Offset) -> None:
        """An incremental snapshot's chunk: `op: r` changes outside the numbering of the transaction they
        go out with, in slices that do not end the Kafka transaction when the batch fills (`offset` is the
        slices' restart position)."""
        txid, self._txid = self._txid, None
        hold, self.hold = self.hold, True
        try:
            index = 0
            while index < len(images):
                index = self.rows(table, "r", images, index, source)
                if self.full and index < len(images):
                    self.flush(offset)
        finally:
            self._txid, self.hold = txid, hold


def _size(records: list[Record], start: int) -> int:
    """Bytes of the keys and values of records[start:]."""
    return sum([len(r.value or b"") + len(r.key or b"") for r in records[start:]])
