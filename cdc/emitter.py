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
from cdc.formats import CanalFormat, DebeziumFormat
from cdc.murmur2 import partition_for
from cdc.offsets import EventSource
from cdc.records import Record
from cdc.schema.model import TableDef

_dumps = orjson.dumps


KNOWN_KEYS = 100_000  # keys a table remembers: a row that changes again soon is keyed without JSON or murmur2


def _keyer(primary_key: tuple[str, ...], partitions: int) -> Callable[[dict], tuple[bytes | None, int]]:
    """row -> (key bytes, partition); specialized because it runs once per row."""
    if not primary_key:
        return lambda row: (None, 0)
    if len(primary_key) > 1:
        def key_of(row: dict) -> tuple[bytes, int]:
            key = _dumps({k: row[k] for k in primary_key})
            return key, partition_for(key, partitions) if partitions > 1 else 0
        return key_of
    (column,) = primary_key
    known: dict = {}

    def key_of_one(row: dict) -> tuple[bytes, int]:
        value = row[column]
        found = known.get(value)
        if found is None:
            if len(known) >= KNOWN_KEYS:
                known.clear()
            key = _dumps({column: value})
            found = known[value] = key, partition_for(key, partitions) if partitions > 1 else 0
        return found
    return key_of_one


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
    primary_key_changed: Callable[[dict, dict], bool] = None
    collection: str = ""

    def __post_init__(self) -> None:
        self.key_of = _keyer(self.primary_key, self.partitions)
        self.primary_key_changed = _primary_key_changed(self.primary_key)
        self.collection = f"{self.db}.{self.table}"

    @classmethod
    def build(cls, config: SourceConfig, partitions: Callable[[str], int], db: str, table: str,
              primary_key: tuple[str, ...], definition: TableDef | None) -> "TableContext":
        topic = config.topic_for(db, table)
        cols = definition.columns if definition else ()
        return cls(db, table, topic, partitions(topic), primary_key,
                   {c.name: c.mysql_type for c in cols}, {c.name: c.jdbc_type for c in cols})


class Emitter:
    def __init__(self, config: SourceConfig, partitions: Callable[[str], int], clock=time.time) -> None:
        self.config = config
        self.format = CanalFormat if config.format == "canal" else DebeziumFormat
        self._format_row = self.format.row
        self.tombstones = self.format.tombstones and config.tombstones_on_delete
        self.partitions = partitions
        self.clock = clock
        self.now_ms = int(clock() * 1000)

    def tick(self) -> None:
        """Read the clock for the events about to be emitted (once per binlog event, not per row)."""
        self.now_ms = int(self.clock() * 1000)

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
        if self.format is CanalFormat:
            for change in changes:
                topic = self.config.topic_for(change.db, change.table)
                out.append(Record(topic, None, CanalFormat.ddl(change, ddl, source, now), 0))
            return
        topic = self.config.schema_change_topic
        key = _dumps({"databaseName": db})
        value = DebeziumFormat.schema_change(db, ddl, changes, source, now)
        out.append(Record(topic, key, value, partition_for(key, self.partitions(topic))))

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
