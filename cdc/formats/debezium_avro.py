"""Debezium's envelope in Avro, in Confluent's wire format: a magic byte 0, the schema's registry id (4 bytes,
big-endian), then the Avro binary body.

A table's value schema is Debezium's `<server>.<db>.<table>.Envelope` record: `before` and `after` (the
optional `Value` record of the table's columns, cdc.formats.avro_types), `source`
(io.debezium.connector.mysql.Source, with the fields the JSON format's source block has), `op`, `ts_ms` and
`transaction` (event.block); its key schema the `Key` record of the primary-key columns. They are
registered under `<topic>-value` and `<topic>-key` (TopicNameStrategy) when the table's structure is first
used (and again after each DDL), parsed once with fastavro, and every record is then written with
fastavro's schemaless_writer: no registry round trip per record.
"""

from __future__ import annotations

import io
from typing import Callable

import fastavro
import orjson

from cdc.errors import CdcError
from cdc.formats.avro_types import avro_name, column_field
from cdc.schema.model import ColumnDef, TableDef
from cdc.schema_registry import Registrar

SOURCE = {
    "type": "record", "name": "Source", "namespace": "io.debezium.connector.mysql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
                                        "connect.parameters": {"allowed": "true,last,false,incremental"},
                                        "connect.default": "false", "connect.name": "io.debezium.data.Enum"},
                                       "null"], "default": "false"},
        {"name": "db", "type": "string"},
        {"name": "table", "type": ["null", "string"], "default": None},
        {"name": "server_id", "type": "long"},
        {"name": "gtid", "type": ["null", "string"], "default": None},
        {"name": "file", "type": "string"},
        {"name": "pos", "type": "long"},
        {"name": "row", "type": "int"},
    ],
    "connect.name": "io.debezium.connector.mysql.Source",
}
BLOCK = {
    "type": "record", "name": "block", "namespace": "event",
    "fields": [{"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
               {"name": "data_collection_order", "type": "long"}],
    "connect.version": 1, "connect.name": "event.block",
}


def namespace(server: str, db: str, table: str) -> str:
    return ".".join(avro_name(part) for part in (server, db, table))


def _record(name: str, ns: str, columns: list[ColumnDef], decimals: str) -> tuple[dict, Callable[[dict], dict]]:
    """A record of `columns` and the function turning a row image (canonical values) into its Avro value."""
    defined: set[str] = set()
    fields, plan = [], []
    for column in columns:
        field, convert = column_field(column, decimals, defined)
        fields.append(field)
        plan.append((column.name, field["name"], convert))
    names = [f["name"] for f in fields]
    if len(set(names)) != len(names):
        raise CdcError(f"{ns}: two columns have the same Avro name ({', '.join(names)}): Avro names allow only "
                       "letters, digits and _; rename one or leave the table out")
    plain = [(column, name) for column, name, convert in plan if convert is None]
    converted = [(column, name, convert) for column, name, convert in plan if convert is not None]

    def image(row: dict) -> dict:
        out = {name: row[column] for column, name in plain}
        for column, name, convert in converted:
            value = row[column]
            out[name] = None if value is None else convert(value)
        return out
    schema = {"type": "record", "name": name, "namespace": ns, "fields": fields, "connect.name": f"{ns}.{name}"}
    return schema, image


def envelope_schema(ns: str, value: dict) -> dict:
    return {"type": "record", "name": "Envelope", "namespace": ns, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", f"{ns}.Value"], "default": None},
        {"name": "source", "type": SOURCE},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", BLOCK], "default": None},
    ], "connect.version": 2, "connect.name": f"{ns}.Envelope"}


class _Writer:
    """One registered schema: Confluent's header, the parsed schema, fastavro's writer."""

    __slots__ = ("header", "parsed")

    def __init__(self, registrar: Registrar, subject: str, schema: dict) -> None:
        self.header = b"\0" + registrar.id_for(subject, schema).to_bytes(4, "big")
        self.parsed = fastavro.parse_schema(schema)

    def write(self, datum: dict) -> bytes:
        out = io.BytesIO()
        out.write(self.header)
        fastavro.schemaless_writer(out, self.parsed, datum)
        return out.getvalue()


class AvroTable:
    """A table's Avro writers for one structure: the envelope (`value`) and, with key_format: avro, the key."""

    def __init__(self, registrar: Registrar, server: str, topic: str, definition: TableDef,
                 primary_key: tuple[str, ...], decimals: str, keys: bool) -> None:
        ns = namespace(server, definition.db, definition.name)
        value, self.image = _record("Value", ns, list(definition.columns), decimals)
        self._value = _Writer(registrar, f"{topic}-value", envelope_schema(ns, value))
        self._key = self._key_image = None
        if keys and primary_key:
            columns = [definition.column(name) for name in primary_key]
            if None in columns:
                raise CdcError(f"{definition.id}'s key {primary_key} names a column its structure lacks: take a new "
                               "snapshot (snapshot: always, once)")
            key, self._key_image = _record("Key", ns, columns, decimals)
            self._key = _Writer(registrar, f"{topic}-key", key)

    def key(self, columns: dict) -> bytes:
        """The key of a row, given its primary-key columns (canonical values)."""
        return self._key.write(self._key_image(columns))

    @property
    def avro_keys(self) -> bool:
        return self._key is not None

    def value(self, op: str, before: dict | None, after: dict | None, source: dict, ts_ms: int,
              txn: bytes | None) -> bytes:
        image = self.image
        return self._value.write({
            "before": None if before is None else image(before), "after": None if after is None else image(after),
            "source": source, "op": op, "ts_ms": ts_ms, "transaction": None if txn is None else orjson.loads(txn)})


class DebeziumAvroFormat:
    """`value_format: avro`: the envelope of cdc.formats.debezium, in Avro (the table's AvroTable)."""

    name = "debezium-avro"
    tombstones = True
    template = None              # built change by change: each value is one schemaless_writer call

    @staticmethod
    def row(table, op: str, before: dict | None, after: dict | None, source, row: int, ts_ms: int,
            txn: bytes | None) -> bytes:
        return table.avro.value(op, before, after, {**source.fields, "row": row}, ts_ms, txn)
