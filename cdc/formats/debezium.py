"""Debezium's envelope: {before, after, op, ts_ms, source, transaction}; schema changes as
{source, databaseName, ddl, tableChanges}."""

from __future__ import annotations

import orjson

_dumps = orjson.dumps
_OPS = {op: op.encode() for op in "cudr"}


class DebeziumFormat:
    name = "debezium"
    tombstones = True            # a delete is followed by a null value with the same key

    @staticmethod
    def row(table, op: str, before: dict | None, after: dict | None, source, row: int, ts_ms: int,
            txn: bytes | None) -> bytes:
        # Assembled from pre-serialized parts: this runs once per row.
        return b'{"before":%b,"after":%b,"op":"%b","ts_ms":%d,"source":%b,"transaction":%b}' % (
            _dumps(before), _dumps(after), _OPS[op], ts_ms, source.json(row), txn or b"null")

    @staticmethod
    def schema_change(db: str, ddl: str, changes: list, source: dict, ts_ms: int) -> bytes:
        return _dumps({"source": source, "ts_ms": ts_ms, "databaseName": db, "schemaName": None, "ddl": ddl,
                       "tableChanges": [{"type": c.type, "id": f"{c.db}.{c.table}",
                                         "previousId": c.previous_id,
                                         "table": c.definition.to_dict() if c.definition else None}
                                        for c in changes]})
