"""Turns one row change (or one DDL) into records: topic, key, value, partition.

Keys are the primary-key columns as a JSON object in key order, partitioned with Kafka's murmur2.
A primary-key update becomes a delete of the old key and a create of the new one; a delete is followed
by a tombstone where the format has them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import orjson

from cdc.config import SourceConfig
from cdc.errors import CdcError
from cdc.formats import CanalFormat, DebeziumFormat
from cdc.formats.canal_mq import CanalMqOutput
from cdc.murmur2 import partition_for, partitions_for
from cdc.offsets import EventSource
from cdc.records import Record
from cdc.schema.model import TableDef

_dumps = orjson.dumps


def _key(obj) -> bytes:
    """A key's JSON as a compact bytes object: orjson's own output keeps a 4 KiB allocation however short
    the text (orjson 3.13), so 100,000 remembered keys held 400 MB, and every record's key 4 KiB."""
    return bytes(memoryview(_dumps(obj)))


_SKIPPED = {"insert": "c", "update": "u", "delete": "d"}     # Canal's event filters -> change kinds
KNOWN_KEYS = 100_000  # keys a table remembers: a row that changes again soon is keyed without JSON or murmur2


def _keyers(primary_key: tuple[str, ...], partitions: int) -> tuple[Callable, Callable]:
    """(key_of, keys_of) of a table: row -> (key bytes, partition), and a list of rows -> a list of
    those (their partitions computed together: cdc.murmur2.partitions_for). Specialized because they
    run for every row; a single-column key remembers the last KNOWN_KEYS values it keyed."""
    if not primary_key:
        return (lambda row: (None, 0)), (lambda rows: [(None, 0)] * len(rows))
    if len(primary_key) > 1:
        def key_of(row: dict) -> tuple[bytes, int]:
            key = _key({k: row[k] for k in primary_key})
            return key, partition_for(key, partitions) if partitions > 1 else 0

        def keys_of(rows: list[dict]) -> list[tuple[bytes, int]]:
            keys = [_key({k: row[k] for k in primary_key}) for row in rows]
            return list(zip(keys, partitions_for(keys, partitions)))
        return key_of, keys_of
    (column,) = primary_key
    known: dict = {}

    def key_of_one(row: dict) -> tuple[bytes, int]:
        value = row[column]
        found = known.get(value)
        if found is None:
            if len(known) >= KNOWN_KEYS:
                known.clear()
            key = _key({column: value})
            found = known[value] = key, partition_for(key, partitions) if partitions > 1 else 0
        return found

    def keys_of_one(rows: list[dict]) -> list[tuple[bytes, int]]:
        values = [row[column] for row in rows]
        found = list(map(known.get, values))
        if None not in found:
            return found
        missing = [i for i, pair in enumerate(found) if pair is None]
        if len(known) + len(missing) > KNOWN_KEYS:
            known.clear()
        if len(missing) == len(values):         # all new (inserts): keyed together, remembered together
            keys = [_key({column: value}) for value in values]
            found = list(zip(keys, partitions_for(keys, partitions)))
            known.update(zip(values, found))
            return found
        keys = [_key({column: values[i]}) for i in missing]
        for i, key, partition in zip(missing, keys, partitions_for(keys, partitions)):
            found[i] = known[values[i]] = key, partition
        return found
    return key_of_one, keys_of_one


def _primary_key_changed(primary_key: tuple[str, ...]) -> Callable[[dict, dict], bool]:
    if len(primary_key) == 1:
        (column,) = primary_key
        return lambda before, after: before[column] != after[column]
    return lambda before, after: any(before[k] != after[k] for k in primary_key)


@dataclass(slots=True)
class TableContext:
    """A captured table as the emitter needs it; built once per table layout."""

    db: str
    table: str
    topic: str
    partitions: int
    primary_key: tuple[str, ...]
    mysql_types: dict = field(default_factory=dict)
    sql_types: dict = field(default_factory=dict)
    key_of: Callable[[dict], tuple[bytes | None, int]] = None
    keys_of: Callable[[list[dict]], list[tuple[bytes | None, int]]] = None
    primary_key_changed: Callable[[dict, dict], bool] = None
    collection: str = ""
    canal_columns: frozenset[str] | None = None     # the columns Canal's field filters keep (None: all)
    column_index: dict[str, int] = field(default_factory=dict)   # a column's index in the table

    def __post_init__(self) -> None:
        self.key_of, self.keys_of = _keyers(self.primary_key, self.partitions)
        self.primary_key_changed = _primary_key_changed(self.primary_key)
        self.collection = f"{self.db}.{self.table}"

    @classmethod
    def build(cls, config: SourceConfig, partitions: Callable[[str], int], db: str, table: str,
              primary_key: tuple[str, ...], definition: TableDef | None) -> "TableContext":
        topic = config.topic_for(db, table)
        cols = definition.columns if definition else ()
        index = {c.name: i for i, c in enumerate(cols)}
        kept = config.canal_fields.kept(db, table, index) if config.canal_fields is not None else None
        if kept is not None:
            if definition is None:
                raise CdcError(f"{db}.{table} has a Canal field filter but no structure in the schema history to "
                               "apply it to: take a new snapshot (snapshot: always, once)")
            cols = [c for c in cols if c.name in kept]
        return cls(db, table, topic, partitions(topic), primary_key,
                   {c.name: c.mysql_type for c in cols}, {c.name: c.jdbc_type for c in cols},
                   canal_columns=None if kept is None else frozenset(kept), column_index=index)


def _projected(columns: frozenset[str], kind: str, images: list[dict], start: int, stop: int
               ) -> tuple[list[dict], int, int]:
    """Changes `start`..`stop - 1` of `images` with `columns` only (Canal's field filters), renumbered from 0."""
    low, high = (2 * start, 2 * stop) if kind == "u" else (start, stop)
    return [{k: v for k, v in image.items() if k in columns} for image in images[low:high]], 0, stop - start


class Emitter:
    def __init__(self, config: SourceConfig, partitions: Callable[[str], int], clock=time.time) -> None:
        self.config = config
        self.format = CanalFormat if config.format == "canal" else DebeziumFormat
        self._format_row = self.format.row
        self._template = self.format.template
        self.tombstones = self.format.tombstones and config.tombstones_on_delete
        self.partitions = partitions
        self.clock = clock
        self.now_ms = int(clock() * 1000)
        # Canal's MQ routing and batching, when configured: it builds the records of row and DDL events
        mq = config.canal_mq
        self.canal_mq = CanalMqOutput(mq, partitions) if mq is not None and mq.flat_message else None
        # ... or Canal's change entries, on a destination's entry log or in protobuf Messages routed as Canal's MQ
        # output routes them; all leave out what Canal's filters say
        self.canal_skip = {_SKIPPED[k] for k in config.canal_skip if k in _SKIPPED}
        self.canal_skip_ddl = "ddl" in config.canal_skip
        self.canal_entries = None
        gtids = config.restart_by == "gtid"
        if config.canal_entries is not None:
            from cdc.formats.canal_entry import CanalEntryOutput   # (protobuf only for a Canal destination)
            self.canal_entries = CanalEntryOutput(config.canal_entries, gtids)
        elif mq is not None and not mq.flat_message:
            from cdc.formats.canal_mq_messages import CanalMqMessages
            self.canal_entries = CanalMqMessages(mq, partitions, gtids, config.max_batch_bytes)

    def tick(self) -> None:
        """Read the clock for the events about to be emitted (once per binlog event, not per row)."""
        self.now_ms = int(self.clock() * 1000)

    def rows(self, table: TableContext, kind: str, images: list[dict], start: int, stop: int, source: EventSource,
             first_row: int, txn: tuple[bytes, int, int] | None, out: list[Record]) -> None:
        """Append the records of changes `start`..`stop - 1` of one rows event (or snapshot chunk) to `out`:
        change i is `images[i]` (c, r, d) or the pair `images[2i]`, `images[2i + 1]` (u), and row
        `first_row + i` of its position. `txn`: (the transaction block's prefix, its total and per-table
        order before change `start`), or None outside a transaction.

        One loop per event and kind, the value built from the format's per-event template: this is the
        connector's hot path, so a change costs its key, its images' JSON and one %. Formats without a
        template (Canal), snapshot chunks and updates of a primary key go change by change (`row`)."""
        if self.canal_mq is not None or self.canal_entries is not None:
            if kind in self.canal_skip or (kind == "r" and "c" in self.canal_skip):
                return
            if table.canal_columns is not None:
                images, start, stop = _projected(table.canal_columns, kind, images, start, stop)
            if self.canal_mq is not None:
                self.canal_mq.rows(table, kind, images, start, stop, source, self.now_ms, out)
            else:
                self.canal_entries.rows(table, kind, images, start, stop, source, out)
            return
        template = self._template
        if template is None or txn is None:
            self._each(table, kind, images, start, stop, source, first_row, txn, out)
            return
        prefix, order, n = txn
        fmt = template(kind, source, self.now_ms, prefix)
        topic, append, dumps = table.topic, out.append, _dumps
        rows = range(first_row + start, first_row + stop)
        if kind == "c" or kind == "r":
            afters = images[start:stop]
            for after, (key, partition), row in zip(afters, table.keys_of(afters), rows):
                order += 1
                n += 1
                append(Record(topic, key, fmt % (dumps(after), row, order, n), partition))
        elif kind == "d":
            tombstones = self.tombstones
            befores = images[start:stop]
            for before, (key, partition), row in zip(befores, table.keys_of(befores), rows):
                order += 1
                n += 1
                append(Record(topic, key, fmt % (dumps(before), row, order, n), partition))
                if tombstones and key is not None:
                    append(Record(topic, key, None, partition))
        else:
            pk = table.primary_key
            column = pk[0] if len(pk) == 1 else None
            changed = table.primary_key_changed
            befores, afters = images[2 * start:2 * stop:2], images[2 * start + 1:2 * stop:2]
            for before, after, (key, partition), row in zip(befores, afters, table.keys_of(afters), rows):
                order += 1
                n += 1
                if pk and (before[column] != after[column] if column is not None else changed(before, after)):
                    self.row(table, "u", before, after, source, row,       # a delete and a create
                             prefix + b'%d,"data_collection_order":%d}' % (order, n), out)
                    continue
                append(Record(topic, key, fmt % (dumps(before), dumps(after), row, order, n), partition))

    def _each(self, table: TableContext, kind: str, images: list[dict], start: int, stop: int, source: EventSource,
              first_row: int, txn: tuple[bytes, int, int] | None, out: list[Record]) -> None:
        """`rows` change by change."""
        row = self.row
        for i in range(start, stop):
            block = None
            if txn is not None:
                done = i - start + 1
                block = txn[0] + b'%d,"data_collection_order":%d}' % (txn[1] + done, txn[2] + done)
            if kind == "u":
                row(table, "u", images[2 * i], images[2 * i + 1], source, first_row + i, block, out)
            elif kind == "d":
                row(table, "d", images[i], None, source, first_row + i, block, out)
            else:
                row(table, kind, None, images[i], source, first_row + i, block, out)

    def row(self, table: TableContext, op: str, before: dict | None, after: dict | None, source: EventSource,
            row: int, txn: bytes | None, out: list[Record]) -> None:
        """Append the records of one row change to `out`."""
        if op == "u" and table.primary_key and table.primary_key_changed(before, after):
            self.row(table, "d", before, None, source, row, txn, out)
            self.row(table, "c", None, after, source, row, txn, out)
            return
        key, partition = table.key_of(after if after is not None else before)
        value = self._format_row(table, op, before, after, source, row, self.now_ms, txn)
        out.append(Record(table.topic, key, value, partition))
        if op == "d" and self.tombstones and key is not None:
            out.append(Record(table.topic, key, None, partition))

    def schema_change(self, db: str, ddl: str, changes: list, source: dict, out: list[Record]) -> None:
        now = self.now_ms
        if self.canal_skip_ddl and (self.canal_mq is not None or self.canal_entries is not None):
            return
        if self.canal_mq is not None:
            for change in changes:
                self.canal_mq.ddl(change, ddl, source, now, out)
            return
        if self.canal_entries is not None:
            for change in changes:
                self.canal_entries.ddl(change, ddl, source, out)
            return
        if self.format is CanalFormat:
            for change in changes:
                topic = self.config.topic_for(change.db, change.table)
                out.append(Record(topic, None, CanalFormat.ddl(change, ddl, source, now), 0))
            return
        topic = self.config.schema_change_topic
        key = _dumps({"databaseName": db})
        value = DebeziumFormat.schema_change(db, ddl, changes, source, now)
        out.append(Record(topic, key, value, partition_for(key, self.partitions(topic))))

    def commit(self, txid: str | None, offset, out: list[Record]) -> None:
        """A transaction commits at `offset` (Canal's entries close one that had captured rows with an entry)."""
        if self.canal_entries is not None:
            self.canal_entries.commit(txid, offset.position, out)

    def heartbeat(self, out: list[Record]) -> None:
        topic = self.config.heartbeat_topic
        key = _dumps({"serverName": self.config.name})
        value = _dumps({"ts_ms": int(self.clock() * 1000)})
        out.append(Record(topic, key, value, partition_for(key, self.partitions(topic))))

    def transaction(self, status: str, txid: str, counts: dict[str, int] | None, out: list[Record]) -> None:
        topic = self.config.transaction_topic
        key = _dumps({"id": txid})
        body = {"status": status, "id": txid, "ts_ms": int(self.clock() * 1000)}
        if counts is not None:
            body["event_count"] = sum(counts.values())
            body["data_collections"] = [{"data_collection": k, "event_count": n} for k, n in counts.items()]
        out.append(Record(topic, key, _dumps(body), partition_for(key, self.partitions(topic))))
