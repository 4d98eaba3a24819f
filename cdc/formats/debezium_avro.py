"""Debezium's envelope in Avro, in Confluent's wire format: a magic byte 0, the schema's registry id (4 bytes,
big-endian), then the Avro binary body.

A table's value schema is Debezium's `<server>.<db>.<table>.Envelope` record: `before` and `after` (the
optional `Value` record of the table's columns, cdc.formats.avro_types), `source`
(io.debezium.connector.mysql.Source, with the fields the JSON format's source block has), `op`, `ts_ms` and
`transaction` (event.block); its key schema the `Key` record of the primary-key columns. They are
registered under `<topic>-value` and `<topic>-key` (TopicNameStrategy) when the table's structure is first
used (and again after each DDL); a table's row images are written by a writer compiled from its `Value`
record once (cdc.formats.avro_binary), the envelope's other parts by fastavro once per event or from memos: no
registry round trip and no schema walk per record.
"""

from __future__ import annotations

import io
from typing import Callable, NamedTuple

import fastavro
import orjson

from cdc.errors import CdcError
from cdc.formats.avro_binary import Writer, field_writer
from cdc.formats.avro_types import column_field
from cdc.schema.model import ColumnDef, TableDef
from cdc.schema_registry import Registrar
from common.avro_names import avro_name

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


def _branch(avro) -> str | None:
    """The name of an optional field's non-null branch, for fastavro's (branch, value) notation, which spares it
    finding the branch by validating the value against each; None for a field that is not a union."""
    if not isinstance(avro, list):
        return None
    kind = avro[1]
    if isinstance(kind, str):
        return kind
    if kind["type"] in ("record", "enum", "fixed"):
        return f"{kind['namespace']}.{kind['name']}" if "namespace" in kind else kind["name"]
    return kind["type"]


class TableRecord(NamedTuple):
    schema: dict                                # the Avro record of the columns
    image: Callable[[dict], dict]               # a row image (canonical values) → its Avro value, for fastavro
    binary: Callable[[dict], bytes]             # a row image → the record's Avro binary encoding


def table_record(name: str, ns: str, columns: list[ColumnDef], decimals: str) -> TableRecord:
    """A record of `columns`, and the functions turning a row image (canonical values) into its Avro value and
    into its encoding."""
    defined: set[str] = set()
    named: dict[str, Writer] = {}
    fields, plan, writers = [], [], []
    for column in columns:
        field, convert = column_field(column, decimals, defined)
        fields.append(field)
        plan.append((column.name, field["name"], convert))
        writers.append((column.name, field_writer(field["type"], named, convert)))
    names = [f["name"] for f in fields]
    if len(set(names)) != len(names):
        raise CdcError(f"{ns}: two columns have the same Avro name ({', '.join(names)}): Avro names allow only "
                       "letters, digits and _; rename one or leave the table out")
    branches = [_branch(field["type"]) for field in fields]
    plan = [(column, name, convert, branch) for (column, name, convert), branch in zip(plan, branches)]

    def image(row: dict) -> dict:
        out = {}
        for column, name, convert, branch in plan:
            value = row[column]
            if value is not None:
                if convert is not None:
                    value = convert(value)
                if branch is not None:
                    value = (branch, value)
            out[name] = value
        return out

    def binary(row: dict) -> bytes:
        return b"".join([write(row[column]) for column, write in writers])
    schema = {"type": "record", "name": name, "namespace": ns, "fields": fields, "connect.name": f"{ns}.{name}"}
    return TableRecord(schema, image, binary)


def envelope_schema(ns: str, value: dict) -> dict:
    return {"type": "record", "name": "Envelope", "namespace": ns, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", f"{ns}.Value"], "default": None},
        {"name": "source", "type": SOURCE},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", BLOCK], "default": None},
    ], "connect.version": 2, "connect.name": f"{ns}.Envelope"}


def encode(schema, datum) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, datum)
    return out.getvalue()


class _Encodings(dict):
    """Avro's encoding of values of one primitive type by value, written by fastavro once each and kept up to
    `size`: row numbers, transaction orders and ids repeat from event to event."""

    def __init__(self, avro_type: str, size: int) -> None:
        super().__init__()
        self.avro_type, self.size = avro_type, size

    def __missing__(self, value) -> bytes:
        if len(self) > self.size:
            self.clear()
        found = self[value] = encode(self.avro_type, value)
        return found


_VARINTS = _Encodings("long", 100_000)          # (an int's encoding is a long's)
_STRINGS = _Encodings("string", 256)
_NULL, _SECOND = b"\0", b"\2"          # a union's branch 0 (null) or 1, as a zigzag varint
_PARSED_SOURCE = fastavro.parse_schema(SOURCE)
_OPS = {op: encode("string", op) for op in "cudr"}


class _EventParts:
    """The envelope's parts that one event's changes share: `source` up to its last field (`row`), `op` and
    `ts_ms`. Kept for the last event: changes come event by event."""

    __slots__ = ("event", "op", "ts_ms", "source", "tail")

    def __init__(self, event, op: str, ts_ms: int) -> None:
        self.event, self.op, self.ts_ms = event, op, ts_ms
        self.source = encode(_PARSED_SOURCE, {**event.fields, "row": 0})[:-1]     # (row 0 is one byte, 0)
        self.tail = _OPS[op] + _SECOND + encode("long", ts_ms)                    # op, ts_ms (branch long)


def _transaction(txn: bytes | None) -> bytes:
    """The `transaction` union: null, or event.block {id, total_order, data_collection_order} from its JSON."""
    if txn is None:
        return _NULL
    block = orjson.loads(txn)
    return b"".join((_SECOND, _STRINGS[block["id"]], _VARINTS[block["total_order"]],
                     _VARINTS[block["data_collection_order"]]))


class _Writer:
    """One registered record schema: Confluent's header and the record's compiled writer."""

    __slots__ = ("header", "binary")

    def __init__(self, registrar: Registrar, subject: str, record: TableRecord) -> None:
        self.header = b"\0" + registrar.id_for(subject, record.schema).to_bytes(4, "big")
        self.binary = record.binary

    def write(self, row: dict) -> bytes:
        return self.header + self.binary(row)


class AvroTable:
    """A table's Avro writers for one structure: with value_format: avro the envelope (`value`), with key_format:
    avro the key.

    Avro writes a record as its fields' encodings one after the other, so an envelope is built from parts:
    `before` and `after` written by the table's compiled `Value` writer (a union's branch is its index before
    it), the event's shared parts (_EventParts), the row number (the source's last field) and the transaction
    block; `test_cdc_avro` checks the bytes against fastavro's own writing of the whole envelope."""

    def __init__(self, registrar: Registrar, server: str, topic: str, definition: TableDef,
                 primary_key: tuple[str, ...], decimals: str, values: bool, keys: bool) -> None:
        ns = namespace(server, definition.db, definition.name)
        self.record = table_record("Value", ns, list(definition.columns), decimals)
        self.envelope = envelope_schema(ns, self.record.schema)
        if values:             # (key_format: avro alone registers the key only)
            self._header = b"\0" + registrar.id_for(f"{topic}-value", self.envelope).to_bytes(4, "big")
        self._event: _EventParts | None = None
        self._key = None
        if keys and primary_key:
            columns = [definition.column(name) for name in primary_key]
            if None in columns:
                raise CdcError(f"{definition.id}'s key {primary_key} names a column its structure lacks: take a new "
                               "snapshot (snapshot: always, once)")
            self._key = _Writer(registrar, f"{topic}-key", table_record("Key", ns, columns, decimals))

    def key(self, columns: dict) -> bytes:
        """The key of a row, given its primary-key columns (canonical values)."""
        return self._key.write(columns)

    @property
    def avro_keys(self) -> bool:
        return self._key is not None

    def value(self, op: str, before: dict | None, after: dict | None, event, row: int, ts_ms: int,
              txn: bytes | None) -> bytes:
        """The envelope of one change: `event` is the event's cdc.offsets.EventSource, `row` the change's row."""
        parts = self._event
        if parts is None or parts.event is not event or parts.op != op or parts.ts_ms != ts_ms:
            parts = self._event = _EventParts(event, op, ts_ms)
        binary = self.record.binary
        return b"".join((
            self._header,
            _NULL if before is None else _SECOND + binary(before),
            _NULL if after is None else _SECOND + binary(after),
            parts.source, _VARINTS[row], parts.tail, _transaction(txn)))


class DebeziumAvroFormat:
    """`value_format: avro`: the envelope of cdc.formats.debezium, in Avro (the table's AvroTable)."""

    name = "debezium-avro"
    tombstones = True
    template = None              # built change by change (AvroTable.value)

    @staticmethod
    def row(table, op: str, before: dict | None, after: dict | None, source, row: int, ts_ms: int,
            txn: bytes | None) -> bytes:
        return table.avro.value(op, before, after, source, row, ts_ms, txn)
