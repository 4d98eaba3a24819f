"""faust codecs for the connector's change events: `value_serializer="debezium"` (or "canal") makes a
topic's values `ChangeEvent`s (spark_sink/changes.py, the one decoder the Spark sink uses too), and
writes `ChangeEvent`s back in the same envelope, so the Spark sink can land a processor's output.

Tombstones and records that are not row changes (schema changes, Canal DDL) decode to None.
"""

from __future__ import annotations

import json
import time

from faust.serializers import codecs

from spark_sink.changes import ChangeEvent, parse


class ChangeEventCodec(codecs.Codec):
    format = "debezium"

    def _loads(self, data: bytes) -> ChangeEvent | None:
        return parse(data, self.format)

    def _dumps(self, event: ChangeEvent) -> bytes:
        return encode(event, self.format)


class DebeziumCodec(ChangeEventCodec):
    format = "debezium"


class CanalCodec(ChangeEventCodec):
    format = "canal"


def register_codecs() -> None:
    codecs.register("debezium", DebeziumCodec())
    codecs.register("canal", CanalCodec())


def encode(event: ChangeEvent, fmt: str = "debezium") -> bytes:
    """`event` in the connector's envelope, keeping the source position of the change it derives
    from, so the Spark sink orders a processor's output as it orders the connector's. Canal needs
    the columns' declared types (`event.types`), which its messages carry."""
    db, _, table = event.table.partition(".")
    ts_ms = event.ts_ms or int(time.time() * 1000)
    if fmt == "canal":
        if not event.types:
            raise ValueError(f"a Canal message for {event.table} needs its columns' MySQL types (ChangeEvent.types)")
        row = event.after if event.after is not None else event.before
        old = {k: v for k, v in (event.before or {}).items() if (event.after or {}).get(k) != v} if event.op == "u" else None
        return json.dumps({"data": [_texts(row)], "old": [_texts(old)] if old is not None else None, "database": db,
                           "table": table, "type": {"r": "INSERT", "c": "INSERT", "u": "UPDATE", "d": "DELETE"}[event.op],
                           "pkNames": list(event.key), "isDdl": False, "es": event.source.get("es", ts_ms),
                           "ts": int(time.time() * 1000), "id": event.source.get("id", 0),
                           "gtid": event.source.get("gtid") or "", "mysqlType": event.types, "sql": ""}).encode()
    source = {**event.source, "db": db, "table": table, "ts_ms": event.source.get("ts_ms", ts_ms)}
    return json.dumps({"before": event.before, "after": event.after, "op": event.op, "ts_ms": ts_ms,
                       "source": source}).encode()


def _texts(row: dict | None) -> dict | None:
    return None if row is None else {k: v if v is None or isinstance(v, str) else json.dumps(v) for k, v in row.items()}
