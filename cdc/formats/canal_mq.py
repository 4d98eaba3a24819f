"""Canal's MQ output (canal.serverMode=kafka, canal.mq.flatMessage=true): FlatMessages routed by Canal's rules
(cdc/canal_routing.py), as Canal's MQMessageUtils builds and splits them.

With `flat_message_rows: event` (Canal's batching) a binlog rows event is one FlatMessage whose `data` holds all
its rows, split by partition when a partitionHash applies; with `row` each row is a message of its own. Fields
are written as Canal's fastjson2 writes them: alphabetical, nulls included. `old` holds, for each updated row, the
before values of the columns an update of this event has changed so far (Canal keeps one set per event, not per
row). Records have no key, and an explicit partition, as Canal's producer sends them. `id` is the binlog position
of the event (Canal's is its in-memory batch number, which restarts at 1 with the server).
"""

from __future__ import annotations

from typing import Callable

import orjson

from cdc.canal_routing import CanalMq, Router
from cdc.errors import CdcError
from cdc.formats.canal import DDL_TYPES, TYPES, texts
from cdc.records import Record

_dumps = orjson.dumps


def _message(table, kind: str, fields: dict, now_ms: int, data: list, old: list | None, pk_names) -> bytes:
    """One FlatMessage; keys in fastjson2's (alphabetical) order."""
    return _dumps({
        "data": data, "database": table.db, "es": fields["ts_ms"], "gtid": fields["gtid"] or "", "id": fields["pos"],
        "isDdl": False, "mysqlType": table.mysql_types or None, "old": old, "pkNames": pk_names, "sql": "",
        "sqlType": table.sql_types or None, "table": table.table, "ts": now_ms, "type": TYPES[kind]})


class CanalMqOutput:
    """The records of one destination's changes. Owned by the source's emitter."""

    def __init__(self, settings: CanalMq, partitions: Callable[[str], int]) -> None:
        self.router = Router(settings)
        self.per_row = settings.flat_message_rows == "row"
        self._partitions = partitions
        self._checked: set[str] = set()

    def topic(self, db: str, table: str) -> str:
        topic = self.router.topic(db, table)
        if topic not in self._checked:
            have, need = self._partitions(topic), self.router.partitions_needed(topic)
            if have < need:
                raise CdcError(f"topic {topic!r} has {have} partition(s) but Canal's routing writes to {need} "
                               f"(canal.mq.partitionsNum / dynamicTopicPartitionNum / partition): add partitions "
                               f"(binlake topics alter --topic {topic} --partitions {need}) or lower the setting")
            self._checked.add(topic)
        return topic

    def rows(self, table, kind: str, images: list[dict], start: int, stop: int, source, now_ms: int,
             out: list[Record]) -> None:
        """Append the messages of changes `start`..`stop - 1` of one rows event (or snapshot chunk)."""
        fields = source.fields
        if kind == "u":
            befores, rows = images[2 * start:2 * stop:2], images[2 * start + 1:2 * stop:2]
        else:
            befores, rows = None, images[start:stop]
        data = [texts(row) for row in rows]
        old = None
        if befores is not None:
            old, changed = [], set()
            for before, after in zip(befores, data):
                before = texts(before)
                changed.update(k for k, v in after.items() if before.get(k) != v)
                old.append({k: v for k, v in before.items() if k in changed})
        key_set = set(table.primary_key)
        pk_names = [c for c in data[0] if c in key_set] or None if data else None
        topic = self.topic(table.db, table.table)
        router = self.router
        for partition, indexes in router.split(table.db, table.table, topic, pk_names, data):
            groups = [[i] for i in indexes] if self.per_row else [indexes]
            for group in groups:
                value = _message(table, kind, fields, now_ms, [data[i] for i in group],
                                 None if old is None else [old[i] for i in group], pk_names)
                out.append(Record(topic, None, value, partition))

    def ddl(self, change, ddl: str, source: dict, now_ms: int, out: list[Record]) -> None:
        """A DDL's message: partition 0 when a partitionHash is set (Canal's), else canal.mq.partition. The
        structures read when a destination starts (`source.snapshot`) make none: Canal starts without them."""
        if source["snapshot"] == "true":
            return
        topic = self.topic(change.db, change.table)
        partition = 0 if self.router.hashed else self.router.settings.partition
        out.append(Record(topic, None, _dumps({
            "data": None, "database": change.db, "es": source["ts_ms"], "gtid": source["gtid"] or "",
            "id": source["pos"], "isDdl": True, "mysqlType": None, "old": None, "pkNames": None, "sql": ddl,
            "sqlType": None, "table": change.table, "ts": now_ms, "type": DDL_TYPES[change.type]}), partition))

