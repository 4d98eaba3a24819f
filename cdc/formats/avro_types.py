"""MySQL column types as Debezium's Avro converter writes them: an Avro type (with Kafka Connect's
`connect.name`, `connect.parameters`, `connect.version` beside it) and the conversion of the column's
canonical value (cdc.values, docs/cdc.md's type mapping) to the Avro value.

Debezium's MySQL defaults: TINYINT, SMALLINT int16; MEDIUMINT, INT, SMALLINT UNSIGNED int32; INT UNSIGNED,
BIGINT int64; BIGINT UNSIGNED as Decimal(20, 0) (its `bigint.unsigned.handling.mode=precise`: the value
stays exact); DECIMAL as Kafka Connect's Decimal (bytes, `decimal.handling.mode=precise`) or text
(`string`); FLOAT, DOUBLE double (a FLOAT's shortest decimal survives a double, not a float); DATE
io.debezium.time.Date (days); DATETIME(0-3) io.debezium.time.Timestamp (ms), DATETIME(4-6) MicroTimestamp
(µs); TIMESTAMP ZonedTimestamp (ISO text, UTC); TIME MicroTime (µs, `time.precision.mode=
adaptive_time_microseconds`); YEAR io.debezium.time.Year; ENUM io.debezium.data.Enum, SET EnumSet (the
members in `allowed`); JSON io.debezium.data.Json (text); binary strings bytes; BIT(1) boolean, BIT(n)
io.debezium.data.Bits (little-endian bytes); geometries io.debezium.data.geometry.Geometry {wkb, srid};
VECTOR io.debezium.data.FloatVector (doubles, for the FLOAT reason).
"""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import Callable

from cdc.errors import CdcError
from cdc.schema.model import BINARY_TYPES, GEOMETRY_TYPES, TEXT_TYPES, ColumnDef
from common.avro_names import avro_name

_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
_US = datetime.timedelta(microseconds=1)
_MS = datetime.timedelta(milliseconds=1)
GEOMETRY = "io.debezium.data.geometry.Geometry"
# columns whose canonical value can be null in a NOT NULL column: zero dates, and MySQL's empty JSON
# (a NOT NULL JSON column added to existing rows)
_NULL_EVEN_IF_NOT_NULL = ("date", "datetime", "timestamp", "json")


def _connect(avro: str, name: str, version: int | None = 1, **parameters: str) -> dict:
    schema = {"type": avro, "connect.name": name}
    if version is not None:
        schema["connect.version"] = version
    if parameters:
        schema["connect.parameters"] = parameters
    return schema


def decimal_type(precision: int, scale: int) -> dict:
    """Kafka Connect's Decimal as Confluent's converter writes it: Avro's decimal logical type on bytes."""
    return {"type": "bytes", "scale": scale, "precision": precision, "connect.version": 1,
            "connect.parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
            "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}


def days(text: str) -> int:
    return datetime.date.fromisoformat(text).toordinal() - _EPOCH_DAY


def micros(text: str) -> int:
    return (datetime.datetime.fromisoformat(text) - _EPOCH) // _US


def millis(text: str) -> int:
    return (datetime.datetime.fromisoformat(text) - _EPOCH) // _MS


def time_micros(text: str) -> int:
    """`[-]H:MM:SS[.f]` (hours up to 838) -> signed microseconds."""
    sign = -1 if text.startswith("-") else 1
    hours, minutes, seconds = text.lstrip("-").split(":")
    whole, _, fraction = seconds.partition(".")
    return sign * (((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int(fraction.ljust(6, "0")))


def _bits(length: int) -> Callable[[int], bytes]:
    size = (length + 7) // 8
    return lambda value: value.to_bytes(size, "little")


def _geometry(value: dict) -> dict:
    return {"wkb": base64.b64decode(value["wkb"]), "srid": value["srid"]}


def _geometry_type(defined: set[str]) -> dict | str:
    """The Geometry record, defined once per schema and named after that (Avro forbids a second definition)."""
    if GEOMETRY in defined:
        return GEOMETRY
    defined.add(GEOMETRY)
    return {"type": "record", "name": "Geometry", "namespace": "io.debezium.data.geometry",
            "fields": [{"name": "wkb", "type": "bytes"}, {"name": "srid", "type": ["null", "int"], "default": None}],
            "connect.doc": "Geometry", "connect.version": 1, "connect.name": GEOMETRY}


def column_type(column: ColumnDef, decimals: str, defined: set[str]) -> tuple[dict | str, Callable | None]:
    """(Avro type, canonical value -> Avro value or None when it is the same) of a column, never null:
    `column_field` makes it optional. `defined`: the named types the schema already holds."""
    kind, args = column.type, column.args
    if kind in ("tinyint", "smallint"):
        if kind == "smallint" and column.unsigned:
            return "int", None
        return {"type": "int", "connect.type": "int16"}, None
    if kind == "mediumint" or (kind == "int" and not column.unsigned):
        return "int", None
    if kind == "int" or (kind == "bigint" and not column.unsigned):
        return "long", None
    if kind == "bigint":
        return decimal_type(20, 0), decimal.Decimal
    if kind == "decimal":
        if decimals == "string":
            return "string", None
        return decimal_type(args[0] if args else 10, args[1] if len(args) > 1 else 0), decimal.Decimal
    if kind in ("float", "double"):
        return "double", None
    if kind == "date":
        return _connect("int", "io.debezium.time.Date"), days
    if kind == "datetime":
        if (args[0] if args else 0) <= 3:
            return _connect("long", "io.debezium.time.Timestamp"), millis
        return _connect("long", "io.debezium.time.MicroTimestamp"), micros
    if kind == "timestamp":
        return _connect("string", "io.debezium.time.ZonedTimestamp"), None
    if kind == "time":
        return _connect("long", "io.debezium.time.MicroTime"), time_micros
    if kind == "year":
        return _connect("int", "io.debezium.time.Year"), None
    if kind in TEXT_TYPES:
        return "string", None
    if kind in ("enum", "set"):
        name = "io.debezium.data.Enum" if kind == "enum" else "io.debezium.data.EnumSet"
        return _connect("string", name, allowed=",".join(column.values)), None
    if kind == "json":
        return _connect("string", "io.debezium.data.Json"), None
    if kind in BINARY_TYPES:
        return "bytes", base64.b64decode
    if kind == "bit":
        length = args[0] if args else 1
        if length == 1:
            return "boolean", bool
        return _connect("bytes", "io.debezium.data.Bits", length=str(length)), _bits(length)
    if kind in GEOMETRY_TYPES:
        return _geometry_type(defined), _geometry
    if kind == "vector":
        return {"type": "array", "items": "double", "connect.name": "io.debezium.data.FloatVector",
                "connect.version": 1}, None
    raise CdcError(f"column {column.name} has type {column.mysql_type}, which binlake has no Avro type for: "
                   "leave the table out (tables.exclude) or use value_format: json")


def column_field(column: ColumnDef, decimals: str, defined: set[str]) -> tuple[dict, Callable | None]:
    """The Avro field of a column (optional, default null, when the column's value can be null)."""
    avro, convert = column_type(column, decimals, defined)
    field = {"name": avro_name(column.name), "type": avro}
    if column.nullable or column.type in _NULL_EVEN_IF_NOT_NULL:
        field = {"name": field["name"], "type": ["null", avro], "default": None}
    return field, convert
