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
    def template(op: str, source, ts_ms: int, txn_prefix: bytes) -> bytes:
        """`row`'s value for the changes of one event in one transaction, as a %-template whose arguments
        are the JSON of the row images the op has (c, r: after; d: before; u: before, after), the row
        number, and the transaction block's total and per-table order. Built once per event; each
        change is then one % (cdc.emitter.Emitter.rows)."""
        before = b"%b" if op in "ud" else b"null"
        after = b"%b" if op in "cru" else b"null"
        return (b'{"before":' + before + b',"after":' + after + b',"op":"' + _OPS[op] + b'","ts_ms":%d,"source":' % ts_ms
                + source.prefix().replace(b"%", b"%%") + b'%d},"transaction":' + txn_prefix.replace(b"%", b"%%")
                + b'%d,"data_collection_order":%d}}')

    @staticmethod
    def schema_change(db: str, ddl: str, changes: list, source: dict, ts_ms: int) -> bytes:
        return _dumps({"source": source, "ts_ms": ts_ms, "databaseName": db, "schemaName": None, "ddl": ddl,
                       "tableChanges": [{"type": c.type, "id": f"{c.db}.{c.table}",
                                         "previousId": c.previous_id,
                                         "table": c.definition.to_dict() if c.definition else None}
                                        for c in changes]})
