"""A captured table's columns and primary key as a TABLE_MAP event and the schema history describe them.

With binlog_row_metadata=FULL the table map describes itself: names, signedness, charsets, ENUM/SET
members, primary key. With MINIMAL (MySQL's default) or NO_LOG (MariaDB's) it carries only each
column's type code and storage metadata (lengths, fsp, precision, sizes); the rest then comes from the
schema history's definition of the table as of that event, as Debezium and Canal do. The binlog's
types and storage metadata stay authoritative for decoding. A definition that is missing or disagrees
with the binlog (the history missed a DDL) stops the source: a guess would put values under the wrong
names.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from pymysqlreplication.constants import FIELD_TYPE as T

from cdc.binlog.events import BinlogColumn, TableMap
from cdc.binlog.vector_tablemap import VECTOR
from cdc.errors import DecodeError
from cdc.charsets import codec
from cdc.schema.model import BINARY_TYPES, CHARACTER_TYPES, GEOMETRY_TYPES, ColumnDef, TableDef

_BLOB = {T.BLOB}
# The binlog type codes a declared type is written with (old and new temporal formats alike; JSON is
# a BLOB on MariaDB).
BINLOG_TYPES: dict[str, set[int]] = {
    "tinyint": {T.TINY}, "smallint": {T.SHORT}, "mediumint": {T.INT24}, "int": {T.LONG}, "bigint": {T.LONGLONG},
    "decimal": {T.NEWDECIMAL}, "float": {T.FLOAT}, "double": {T.DOUBLE}, "bit": {T.BIT},
    "date": {T.DATE}, "time": {T.TIME2, T.TIME}, "datetime": {T.DATETIME2, T.DATETIME},
    "timestamp": {T.TIMESTAMP2, T.TIMESTAMP}, "year": {T.YEAR},
    "char": {T.STRING}, "binary": {T.STRING}, "varchar": {T.VARCHAR, T.VAR_STRING},
    "varbinary": {T.VARCHAR, T.VAR_STRING}, "enum": {T.ENUM}, "set": {T.SET}, "json": {T.JSON, T.BLOB},
    **{t: _BLOB for t in ("tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob",
                          "longblob")},
    **{t: {T.GEOMETRY} for t in GEOMETRY_TYPES},
    "vector": {VECTOR},
}
_REBUILD = ("take a new snapshot so the history is read from the server again (start the source once with "
            "snapshot: always, or delete its stored offset)")


class _Unusable(Exception):
    """Why the history's definition cannot describe a table map."""


def describe_columns(event: TableMap, definition: TableDef | None) -> tuple[tuple[BinlogColumn, ...], tuple[str, ...]]:
    """(columns, primary-key column names) of a captured table's map; `definition` is the history's
    table as of the event. Raises DecodeError where the binlog has no names and the history cannot give
    them truthfully."""
    if all(c.name is not None for c in event.columns):       # FULL: the binlog describes itself
        pk = tuple(event.columns[i].name for i in event.primary_key)
        if not pk and definition is not None:
            pk = definition.primary_key
        return event.columns, pk
    where = (f"{event.db}.{event.table}: the table map at {event.file}:{event.start} carries no column names "
             "(binlog_row_metadata is not FULL), so they come from the schema history")
    if definition is None:
        raise DecodeError(f"{where}, which has no definition of the table; {_REBUILD}")
    try:
        return _from_history(event.columns, definition)
    except _Unusable as exc:
        raise DecodeError(f"{where}, whose definition cannot describe them: {exc}; {_REBUILD}") from None


@lru_cache(maxsize=1024)
def _from_history(columns: tuple[BinlogColumn, ...], definition: TableDef
                  ) -> tuple[tuple[BinlogColumn, ...], tuple[str, ...]]:
    """Built once per table layout and definition, like the row decoder compiled from it."""
    declared = definition.columns
    missed = "the history missed a change to the table"
    if len(columns) != len(declared):
        raise _Unusable(f"the binlog has {len(columns)} columns, the history {len(declared)} "
                        f"({', '.join(c.name for c in declared)}): {missed}")
    wrong = [f"column {i + 1} `{d.name}` is {d.mysql_type} in the history but {_type_name(c.type)} in the binlog"
             for i, (c, d) in enumerate(zip(columns, declared)) if c.type not in BINLOG_TYPES.get(d.type, ())]
    if wrong:
        raise _Unusable("; ".join(wrong) + f": {missed}")
    merged = tuple(replace(c, name=d.name, unsigned=d.unsigned, charset=_charset(d), values=d.values)
                   for c, d in zip(columns, declared))
    names = {d.name.lower(): d.name for d in declared}      # key columns spelled as the columns are
    return merged, tuple(names.get(p.lower(), p) for p in definition.primary_key)


def _charset(column: ColumnDef) -> str | None:
    """The decoder's charset for a column, as pymysqlreplication would give it from FULL metadata."""
    if column.type in BINARY_TYPES:
        return "binary"
    if column.type == "json":                 # MariaDB's JSON is LONGTEXT in utf8mb4; MySQL's is binary JSON
        return "utf8"
    if column.type not in CHARACTER_TYPES:
        return None
    if column.charset is None:
        raise _Unusable(f"column `{column.name}` has no known character set: the history never learnt its "
                        "table's or its database's default")
    try:
        return codec(column.charset)
    except ValueError as exc:
        raise _Unusable(f"column `{column.name}`: {exc}") from None


def _type_name(code: int) -> str:
    """MySQL's name of a binlog type code: the first FIELD_TYPE constant with it (TINY, not CHAR)."""
    return next((name for name, value in vars(T).items() if name.isupper() and value == code), str(code))
