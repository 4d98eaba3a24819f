"""Canal's FlatMessage, field for field, one row per message so the key is the row's primary key.

Values are strings as in Canal (null stays null); `old` holds only the columns an update changed.
Snapshot rows are INSERTs; `id` is the binlog position of the event (stable across restarts).
"""

from __future__ import annotations

import orjson

_dumps = orjson.dumps
TYPES = {"c": "INSERT", "r": "INSERT", "u": "UPDATE", "d": "DELETE"}
DDL_TYPES = {"CREATE": "CREATE", "ALTER": "ALTER", "DROP": "ERASE", "RENAME": "RENAME", "TRUNCATE": "TRUNCATE"}


def text(v):
    if v is None or type(v) is str:
        return v
    if type(v) is dict or type(v) is list:      # GEOMETRY, VECTOR: their JSON as text
        return _dumps(v).decode()
    return str(v)


def texts(row: dict) -> dict:
    return {k: text(v) for k, v in row.items()}


class CanalFormat:
    name = "canal"
    tombstones = False
    template = None              # one message per row change, built whole (no per-event template)

    @staticmethod
    def row(table, op: str, before: dict | None, after: dict | None, source, row: int, ts_ms: int,
            txn: bytes | None) -> bytes:
        source = source.fields
        old = None
        if op == "u":
            old = [{k: text(v) for k, v in before.items() if after.get(k) != v}]
        return _dumps({
            "data": [texts(after if after is not None else before)], "database": table.db,
            "es": source["ts_ms"], "id": source["pos"], "isDdl": False, "mysqlType": table.mysql_types,
            "old": old, "pkNames": list(table.primary_key) or None, "sql": "", "sqlType": table.sql_types,
            "table": table.table, "ts": ts_ms, "type": TYPES[op], "gtid": source["gtid"] or ""})

    @staticmethod
    def ddl(change, ddl: str, source: dict, ts_ms: int) -> bytes:
        table = change.definition
        return _dumps({
            "data": None, "database": change.db, "es": source["ts_ms"], "id": source["pos"], "isDdl": True,
            "mysqlType": {c.name: c.mysql_type for c in table.columns} if table else None, "old": None,
            "pkNames": list(table.primary_key) if table else None, "sql": ddl,
            "sqlType": {c.name: c.jdbc_type for c in table.columns} if table else None,
            "table": change.table, "ts": ts_ms, "type": DDL_TYPES[change.type], "gtid": source["gtid"] or ""})
