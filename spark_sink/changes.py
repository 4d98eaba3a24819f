"""Change events as the mysql connector writes them, decoded once for everyone who reads them.

Pure Python (no Spark): the Spark sink takes its type table and its sequence from here and builds
column expressions on them (spark_sink/decode.py); stream processors decode single records with
`parse` (streams/). Both formats carry the same value representations (docs/cdc.md, "Type mapping");
Canal writes each as a string.

The **sequence** orders the changes of one key across everything the connector may emit, as one
integer that sorts correctly (Spark keeps it as DECIMAL(38,0)):

- Debezium: (binlog file number, position, phase, row): `binlog.000003` at 4711, row 2 of the event.
  Snapshot reads are phase 0 and carry the snapshot's binlog position, so they sort before every
  change streamed from that position on, and after everything before it.
- Canal has no binlog file name and writes snapshot rows as plain INSERTs: (commit second, GTID
  sequence number, Kafka offset). A key's records share a partition and its offsets follow commit
  order, so one key's changes always sort right; the second and the GTID order changes across
  partitions (a TRUNCATE against rows), exactly when the server has GTIDs and to the second without.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import re
from dataclasses import dataclass, field

# -- MySQL column types --------------------------------------------------------------------------

_TYPE = re.compile(r"\s*([a-z]+)\s*(?:\((.*)\))?\s*(unsigned)?", re.IGNORECASE)


@dataclass(frozen=True)
class MySqlType:
    base: str  # lower case: int, decimal, varchar, ...
    args: tuple[int, ...] = ()
    unsigned: bool = False

    @classmethod
    def parse(cls, expression: str) -> "MySqlType":
        """From a declared type as the connector writes it: `int(11) unsigned`, `decimal(10,2)`, `enum('a','b')`."""
        match = _TYPE.match(expression or "")
        if not match:
            raise ValueError(f"not a MySQL column type: {expression!r}")
        base, args, unsigned = match.groups()
        base = base.lower()
        numbers = tuple(int(a) for a in (args or "").split(",") if a.strip().isdigit()) if base not in ("enum", "set") else ()
        return cls(base, numbers, bool(unsigned))

    @property
    def spark(self) -> str:
        """The Spark SQL type that holds every value of this column exactly."""
        base, unsigned = self.base, self.unsigned
        if base in ("tinyint", "smallint", "mediumint") or (base == "int" and not unsigned) or base == "year":
            return "int"
        if base == "int" or (base == "bigint" and not unsigned) or base == "bit":
            return "bigint"
        if base == "bigint":
            return "decimal(20,0)"
        if base == "decimal":
            precision, scale = (self.args + (10, 0))[:2] if self.args else (10, 0)
            if len(self.args) == 1:
                scale = 0
            if precision > 38:
                raise UnsupportedType(f"DECIMAL({precision},{scale}) has more than the 38 digits Spark holds")
            return f"decimal({precision},{scale})"
        return {"float": "float", "double": "double", "date": "date", "datetime": "timestamp_ntz",
                "timestamp": "timestamp"}.get(base, "binary" if self.is_binary else "string")

    @property
    def postgres(self) -> str:
        """The PostgreSQL type of the same values."""
        spark = self.spark
        if spark.startswith("decimal"):
            return spark.replace("decimal", "numeric")
        if self.base == "json":
            return "jsonb"
        return {"int": "integer", "bigint": "bigint", "float": "real", "double": "double precision", "date": "date",
                "timestamp_ntz": "timestamp(6)", "timestamp": "timestamptz(6)", "binary": "bytea"}.get(spark, "text")

    @property
    def is_binary(self) -> bool:
        return self.base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")

    def value(self, raw):
        """The typed Python value of one JSON value (or Canal's string) of this column."""
        if raw is None:
            return None
        spark = self.spark
        if spark in ("int", "bigint"):
            return int(raw)
        if spark.startswith("decimal"):
            return decimal.Decimal(str(raw))
        if spark in ("float", "double"):
            return float(raw)
        if spark == "date":
            return datetime.date.fromisoformat(raw)
        if spark == "timestamp_ntz":
            return datetime.datetime.fromisoformat(raw)
        if spark == "timestamp":
            return datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        if spark == "binary":
            return base64.b64decode(raw)
        return raw if isinstance(raw, str) else json.dumps(raw, separators=(",", ":"))


class UnsupportedType(ValueError):
    """A MySQL type the target cannot hold."""


@dataclass(frozen=True)
class Column:
    name: str
    type: MySqlType


@dataclass(frozen=True)
class TableSchema:
    table: str  # db.table
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    position: str = ""  # where in the source this definition took effect, for error messages

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


# -- sequences ----------------------------------------------------------------------------------

ROW_DIGITS, POS_DIGITS, GTID_DIGITS, OFFSET_DIGITS = 10**8, 10**12, 10**12, 10**13
_FILE_NUMBER = re.compile(r"(\d+)$")


def binlog_number(file: str | None) -> int:
    match = _FILE_NUMBER.search(file or "")
    return int(match.group(1)) if match else 0


def debezium_sequence(source: dict) -> int:
    phase = 0 if source.get("snapshot") in ("true", "last") else 1
    return (((binlog_number(source.get("file")) * POS_DIGITS + int(source.get("pos") or 0)) * 10 + phase)
            * ROW_DIGITS + int(source.get("row") or 0))


def gtid_number(gtid: str | None) -> int:
    """The ordering part of a GTID: MariaDB's `domain-server-seqno` seqno, MySQL's `uuid:n` n."""
    match = _FILE_NUMBER.search(gtid or "")
    return int(match.group(1)) if match else 0


def canal_sequence(message: dict, offset: int) -> int:
    second = int(message.get("es") or 0) // 1000
    return (second * GTID_DIGITS + gtid_number(message.get("gtid"))) * OFFSET_DIGITS + offset


# -- events ---------------------------------------------------------------------------------------

CANAL_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}


@dataclass(frozen=True)
class ChangeEvent:
    """One row change: op r|c|u|d, the row before and after (raw JSON values, see `typed`), its
    table (`db.table`), key (primary-key columns) and sequence."""

    table: str
    op: str
    before: dict | None
    after: dict | None
    sequence: int
    ts_ms: int
    key: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)  # where it came from: Debezium's source, Canal's es/id/gtid
    types: dict | None = None  # Canal's mysqlType: column -> declared type

    @property
    def row(self) -> dict:
        """The row as it is after the change (before it, for a delete)."""
        return self.after if self.after is not None else (self.before or {})

    def typed(self, schema: TableSchema) -> dict:
        """The row's values converted by the table's column types (DECIMAL exact, DATETIME a datetime)."""
        return {name: (c.type.value(v) if (c := schema.column(name)) else v) for name, v in self.row.items()}


class NotAChangeEvent(ValueError):
    """A record that is neither a row change nor one of the connector's other records."""


def parse(value: bytes | None, fmt: str, offset: int = 0) -> ChangeEvent | None:
    """The row change in a record's value; None for the connector's other records (tombstones,
    schema changes, DDL, heartbeats). NotAChangeEvent when the value is not the connector's."""
    if value is None:
        return None
    try:
        body = json.loads(value)
    except ValueError as exc:
        raise NotAChangeEvent(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise NotAChangeEvent(f"a JSON {type(body).__name__}, not a change event")
    return _canal(body, offset) if fmt == "canal" else _debezium(body)


def _debezium(body: dict) -> ChangeEvent | None:
    if isinstance(body.get("payload"), dict) and "schema" in body:
        body = body["payload"]  # Kafka Connect's JsonConverter with schemas.enable=true, as Debezium writes by default
    if "ddl" in body or ("ts_ms" in body and "op" not in body and "source" not in body):
        return None  # a schema change or a heartbeat
    source = body.get("source")
    if body.get("op") not in ("r", "c", "u", "d") or not isinstance(source, dict):
        raise NotAChangeEvent("no op and source: not a Debezium change event")
    return ChangeEvent(f"{source.get('db')}.{source.get('table')}", body["op"], body.get("before"), body.get("after"),
                       debezium_sequence(source), int(source.get("ts_ms") or 0), source=source)


def _canal(body: dict, offset: int) -> ChangeEvent | None:
    if body.get("isDdl"):
        return None
    op = CANAL_OPS.get(body.get("type"))
    rows = body.get("data")
    if op is None or not rows:
        raise NotAChangeEvent("no INSERT/UPDATE/DELETE type and data: not a Canal flat message")
    row = rows[0]
    before = {**row, **(body.get("old") or [{}])[0]} if op == "u" else (row if op == "d" else None)
    after = None if op == "d" else row
    key = {k: row.get(k) for k in body.get("pkNames") or ()}
    return ChangeEvent(f"{body.get('database')}.{body.get('table')}", op, before, after,
                       canal_sequence(body, offset), int(body.get("es") or 0), key,
                       {k: body.get(k) for k in ("es", "id", "gtid")}, body.get("mysqlType"))


# -- schema history (Debezium's schema-change events) --------------------------------------------


@dataclass
class SchemaHistory:
    """Tables as the schema-change events describe them, and the TRUNCATEs, in source order."""

    tables: dict[str, TableSchema] = field(default_factory=dict)
    truncates: dict[str, int] = field(default_factory=dict)  # table -> sequence of its latest TRUNCATE
    dropped: set[str] = field(default_factory=set)

    def apply(self, body: dict) -> None:
        source = body.get("source") or {}
        sequence = debezium_sequence(source)
        for change in body.get("tableChanges") or ():
            table_id, kind = change.get("id"), change.get("type")
            if kind == "TRUNCATE":
                self.truncates[table_id] = max(self.truncates.get(table_id, 0), sequence)
            elif kind == "DROP":
                self.dropped.add(table_id)
            elif change.get("table"):
                definition = change["table"]
                columns = tuple(Column(c["name"], MySqlType.parse(c.get("typeExpression") or c.get("typeName")))
                                for c in definition.get("columns") or ())
                self.tables[table_id] = TableSchema(table_id, columns, tuple(definition.get("primaryKeyColumnNames") or ()),
                                                    f"{source.get('file')}:{source.get('pos')}")
                self.dropped.discard(table_id)
                if change.get("previousId"):
                    self.tables.pop(change["previousId"], None)
