"""`format: debezium-avro`: Kafka records in Confluent's wire format (byte 0, the writer schema's 4-byte registry
id, the Avro body: the connector's `value_format: avro`) → the change rows decode.py makes of the JSON format,
as Spark column expressions.

A micro-batch may hold several writer schemas: one per table, and a table's next one after each DDL. `records`
reads the ids the batch holds (one small pass), fetches each id's schema (WriterSchemas: once per id), decodes
each id's records with spark-avro's `from_avro` and that schema, and unions them: the columns decode.records
gives (kind, table, op, seq, ...), the id (`schema_id`) and, per id, the image (`image_<id>`: the `after` record,
`before` for a delete; null in the other ids' rows). `value` then reads a column of the table's current
structure (the schema-change topic's, as for JSON) from whichever image its record has, converted from
Debezium's Avro type to the type the JSON path gives it (changes.MySqlType.spark): a column a writer schema
lacks (added later, or dropped before) is null, and the target's schema evolution (evolve.py) is the JSON
path's.
"""

from __future__ import annotations

import json
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from common.avro_names import avro_name

from .changes import Column as ChangeColumn
from .changes import MySqlType, UnsupportedType
from .decode import cast, debezium_sequence

_PRIMITIVE = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
GEOMETRY = "io.debezium.data.geometry.Geometry"
NOT_FRAMED = "not Confluent's Avro framing (byte 0, then a 4-byte schema id): is the topic the connector's value_format: avro?"


class WriterSchema:
    """One registered envelope schema: its JSON text, and its `Value` record's fields by name (the non-null
    type of each, named types resolved)."""

    def __init__(self, schema_id: int, text: str) -> None:
        self.id, self.text = schema_id, text
        envelope = json.loads(text)
        record = isinstance(envelope, dict) and envelope.get("type") == "record"
        fields = {f["name"]: f["type"] for f in envelope.get("fields", ())} if record else {}
        if not {"before", "after", "source", "op"} <= fields.keys():
            raise ValueError(f"schema {schema_id} is not a Debezium envelope (a record with before, after, source "
                             f"and op): {text[:200]}")
        named: dict[str, dict] = {}
        value = _named(_non_null(fields["before"]), named)
        self.fields = {f["name"]: _resolve(_non_null(f["type"]), named) for f in value.get("fields", ())}
        for field, avro in self.fields.items():
            if isinstance(avro, dict) and avro.get("logicalType") == "decimal" and int(avro["precision"]) > 38:
                raise UnsupportedType(f"schema {schema_id}, field {field}: DECIMAL({avro['precision']},"
                                      f"{avro.get('scale', 0)}) has more than the 38 digits Spark holds")


def _non_null(avro):
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"a union of {avro}: the connector writes a type or [null, type]")
        return branches[0]
    return avro


def _named(avro, named: dict[str, dict]):
    """Record every named type `avro` defines (for the fields that refer to it by name after)."""
    if isinstance(avro, dict):
        if avro.get("type") in ("record", "enum", "fixed"):
            full = avro["name"] if "." in avro["name"] or "namespace" not in avro else f"{avro['namespace']}.{avro['name']}"
            named[full] = avro
        for field in avro.get("fields", ()):
            _named(_non_null(field["type"]), named)
    return avro


def _resolve(avro, named: dict[str, dict]):
    if isinstance(avro, str) and avro not in _PRIMITIVE:
        return named[avro]
    return avro


def schema_id() -> Column:
    """A record's writer-schema id, from Confluent's header; null for a tombstone or an unframed value."""
    value = F.col("value")
    framed = (F.length(value) >= 5) & (F.hex(F.substring(value, 1, 1)) == "00")
    return F.when(framed, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("int"))


def records(kafka: DataFrame, schemas: Callable[[int], str]) -> tuple[DataFrame, dict[int, WriterSchema]]:
    """One row per Kafka record, with decode.records' columns plus `schema_id` and `image_<id>`; and the writer
    schemas by id. `schemas`: id → the schema's JSON text (WriterSchemas). `kafka` is read twice (the ids,
    then the records): persist it."""
    framed = kafka.select("topic", "partition", "offset", "value", schema_id().alias("schema_id"))
    ids = sorted(r.schema_id for r in framed.where(F.col("schema_id").isNotNull()).select("schema_id").distinct().collect())
    writers = {i: WriterSchema(i, schemas(i)) for i in ids}
    others = framed.where(F.col("schema_id").isNull()).select(
        "topic", "partition", "offset", "schema_id",
        F.when(F.col("value").isNull(), "skip").otherwise("bad").alias("kind"),
        *[F.lit(None).cast(t).alias(c) for c, t in _NULLS],
        F.when(F.col("value").isNotNull(), F.lit(NOT_FRAMED)).alias("reason"),
        F.base64("value").alias("raw"), F.lit(None).cast("string").alias("position"))
    union = others
    for i, writer in writers.items():
        union = union.unionByName(_decoded(framed.where(F.col("schema_id") == i), writer), allowMissingColumns=True)
    return union, writers


_NULLS = (("table", "string"), ("op", "string"), ("seq", "decimal(38,0)"), ("ts_ms", "bigint"),
          ("pk", "array<string>"), ("types", "string"))


def _decoded(rows: DataFrame, writer: WriterSchema) -> DataFrame:
    body = F.expr("substring(value, 6)")
    e = from_avro(body, writer.text, {"mode": "PERMISSIVE"}).alias("e")
    df = rows.select("*", e)
    src = F.col("e.source")
    kind = (F.when(F.col("e").isNull(), "bad")
            .when(F.col("e.op").isin("r", "c", "u", "d"), "row")
            .otherwise("bad"))
    return df.select(
        "topic", "partition", "offset", "schema_id", kind.alias("kind"),
        F.concat_ws(".", src.db, src.table).alias("table"), F.col("e.op").alias("op"),
        debezium_sequence(src).alias("seq"), F.coalesce(src.ts_ms, F.col("e.ts_ms")).alias("ts_ms"),
        F.lit(None).cast("array<string>").alias("pk"), F.lit(None).cast("string").alias("types"),
        F.when(kind == "bad", F.lit(f"not a Debezium change event in schema {writer.id}'s Avro")).alias("reason"),
        F.when(kind == "bad", F.base64("value")).alias("raw"),
        F.concat(src.file, F.lit(":"), src.pos.cast("string")).alias("position"),
        F.when(F.col("e.op") == "d", F.col("e.before")).otherwise(F.col("e.after")).alias(f"image_{writer.id}"))


def values(writers: dict[int, WriterSchema], ids: set[int]) -> Callable[[ChangeColumn], tuple[Column, Column]]:
    """decode.typed's `value` for a table whose records carry the writer schemas `ids`: (whether the record
    holds a value, the value as the JSON path types it), from the image of the record's own schema."""
    def value(column: ChangeColumn) -> tuple[Column, Column]:
        name, present, typed = avro_name(column.name), F.lit(False), F.lit(None).cast(column.type.spark)
        for i in sorted(ids):
            avro = writers[i].fields.get(name)
            if avro is None:                     # (the column is not in this version of the table)
                continue
            raw = F.col(f"image_{i}")[name]
            mine = F.col("schema_id") == i
            present = F.when(mine, raw.isNotNull()).otherwise(present)
            typed = F.when(mine, converted(raw, avro, column.type)).otherwise(typed)
        return present, typed
    return value


def converted(raw: Column, avro, mysql: MySqlType) -> Column:
    """A value of Debezium's Avro type `avro` (as from_avro reads it) as the JSON path's value of a column of
    MySQL type `mysql` (cdc/formats/avro_types.py writes these; docs/cdc.md, "Avro", lists them)."""
    spark = mysql.spark
    name = avro.get("connect.name") if isinstance(avro, dict) else None
    kind = avro.get("type") if isinstance(avro, dict) else avro
    if name == "io.debezium.time.Date":
        return F.date_from_unix_date(raw).try_cast(spark)
    if name in ("io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp"):
        # the wall time as counted from the epoch, read in UTC (the sink's session time zone, session.py)
        instant = F.timestamp_millis(raw) if name.endswith(".Timestamp") else F.timestamp_micros(raw)
        return instant.cast("timestamp_ntz").try_cast(spark)
    if name == "io.debezium.time.MicroTime":
        return cast(_time_text(raw, (mysql.args or (0,))[0]), spark)
    if name == "io.debezium.data.Bits":
        size = (int(avro["connect.parameters"]["length"]) + 7) // 8
        big_endian = F.concat(*[F.substring(F.hex(raw), 2 * i + 1, 2) for i in reversed(range(size))])
        return F.conv(big_endian, 16, 10).try_cast(spark)
    if name == GEOMETRY:
        return F.when(raw.isNotNull(), _json(F.struct(raw.srid.alias("srid"), F.base64(raw.wkb).alias("wkb"))))
    if kind == "array":                          # io.debezium.data.FloatVector
        return _json(raw)
    if kind == "string":                         # texts, and the types written as the JSON format's text
        return cast(raw, spark)
    return raw.try_cast(spark)


def _json(value: Column) -> Column:
    return F.to_json(value, {"ignoreNullFields": "false"})


def _time_text(micros: Column, fsp: int) -> Column:
    """MicroTime (signed µs) as the JSON format's `[-]HH:MM:SS[.f]`, with fsp fraction digits."""
    size = F.abs(micros)
    text = F.format_string("%s%02d:%02d:%02d", F.when(micros < 0, "-").otherwise(""), F.floor(size / 3_600_000_000),
                           F.floor(size / 60_000_000) % 60, F.floor(size / 1_000_000) % 60)
    if fsp:
        text = F.concat(text, F.lit("."), F.substring(F.lpad((size % 1_000_000).cast("string"), 6, "0"), 1, fsp))
    return text
