"""Snapshot rows: the SELECT for each column and the mapping of its text to the canonical value."""

from __future__ import annotations

from typing import Callable

from sqlalchemy import LargeBinary, and_, cast, column, literal_column, or_, select, table, text
from sqlalchemy.sql import ColumnElement, Select

from cdc import values as V
from cdc.schema.model import (BINARY_TYPES, GEOMETRY_TYPES, INTEGER_TYPES, TEXT_TYPES, ColumnDef, TableDef)


def _text(v):
    return V.b64(v) if isinstance(v, bytes) else v


def converter(col: ColumnDef) -> Callable:
    t = col.type
    if t in INTEGER_TYPES or t == "year":
        return int
    if t == "float":
        return lambda s: V.float32(float(s))
    if t == "double":
        return float
    if t == "decimal" or t == "time":
        return str
    if t == "date":
        return V.date_text
    if t == "datetime":
        return V.datetime_text
    if t == "timestamp":
        return V.timestamp_text
    if t in BINARY_TYPES:
        return V.b64
    if t == "bit":
        return lambda raw: int.from_bytes(raw, "big")
    if t in GEOMETRY_TYPES:
        return V.geometry
    if t == "vector":
        return V.vector
    if t in TEXT_TYPES or t in ("enum", "set", "json"):
        return _text
    raise ValueError(f"no snapshot mapping for column {col.name} of type {col.type}")


def chunk_query(definition: TableDef, after: tuple | None, limit: int | None, *, key: tuple[str, ...] | None = None,
                where: str | None = None) -> Select:
    """Rows in primary-key order (or `key`'s: an incremental snapshot's surrogate key) after the key `after`
    (keyset pagination), and where the SQL condition `where` holds."""
    t = table(definition.name, *[column(c.name) for c in definition.columns], schema=definition.db)
    query = select(*(_selected(t.c[c.name], c) for c in definition.columns))
    if where is not None:
        query = query.where(text(f"({where})"))
    pk = [t.c[name] for name in (key if key is not None else _pk_names(definition))]
    if pk:
        query = query.order_by(*pk)
        if after is not None:
            query = query.where(or_(*(and_(*(pk[j] == after[j] for j in range(i)), pk[i] > after[i])
                                      for i in range(len(pk)))))
    if limit is not None:
        query = query.limit(limit)
    return query


def _selected(value: ColumnElement, col: ColumnDef) -> ColumnElement:
    """What the snapshot selects for a column: every column by name (so INVISIBLE ones too), FLOAT widened
    to a double (its text would be rounded to 6 digits), VECTOR as its bytes (PyMySQL cannot read the
    VECTOR result type, and VECTOR_TO_STRING rounds)."""
    if col.type == "float":
        return (value + literal_column("0e0")).label(col.name)
    if col.type == "vector":
        return cast(value, LargeBinary).label(col.name)
    return value


def _pk_names(definition: TableDef) -> list[str]:
    names = {c.name.lower(): c.name for c in definition.columns}
    return [names.get(p.lower(), p) for p in definition.primary_key]


def key_positions(definition: TableDef) -> list[int]:
    lower = [c.name.lower() for c in definition.columns]
    return [lower.index(p.lower()) for p in definition.primary_key]
