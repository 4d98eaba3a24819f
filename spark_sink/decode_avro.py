"""`format: debezium-avro`: Kafka records in Confluent's wire format (byte 0, the writer schema's 4-byte registry
id, the Avro body: the connector's `value_format: avro`) → the change rows decode.py makes of the JSON format,
as Spark column expressions.

A micro-batch may hold several writer schemas: one per table, and a table's next one after each DDL. `Decoder`
knows the schemas the registry lists for the job's topics (writer_schemas.py); `records` decodes the batch in one
projection, each record by its own id's schema (spark-avro's `from_avro`, only the branch of the record's id is
evaluated): the columns decode.records gives (kind, table, op, seq, ...), the id (`schema_id`) and, per id, the
image (`image_<id>`: the `after` record, `before` for a delete; null in the other ids' rows). A record whose id
the decoder does not know yet is of kind `unknown`: the job's summary pass finds those, the decoder learns their
ids (the registry listed again, each id fetched) and the batch is decoded again, whole. `values` then reads a
column of the table's current structure (the schema-change topic's, as for JSON) from whichever image its
record has, converted from Debezium's Avro type to the type the JSON path gives it (changes.MySqlType.spark): a
column a writer schema lacks (added later, or dropped before) is null, and the target's schema evolution
(evolve.py) is the JSON path's.
"""

from __future__ import annotations

import functools
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


class Decoder:
    """The writer schemas a job knows, by id, from `registry` (writer_schemas.WriterSchemas: `subscribed()` lists
    the job's topics' schemas, `registry(id)` fetches one). The driver's only."""

    def __init__(self, registry) -> None:
        self.registry = registry
        self.writers: dict[int, WriterSchema] | None = None
        self._steps: list[list[Column]] = []  # `records`' projections for the writers: built once for each set

    def records(self, kafka: DataFrame) -> DataFrame:
        """`records` of the batch with the schemas known so far (listed from the registry on the first batch)."""
        if self.writers is None:
            self._know(self._listed())
        return records(kafka, self._steps)

    def learn(self, ids: set[int]) -> None:
        """The batch holds records of `ids`, which it did not know: list the registry again and fetch each of
        them (SchemaNotFound, or ValueError for a schema this path cannot read, names the id)."""
        self._know({**self._listed(), **{i: WriterSchema(i, self.registry(i)) for i in ids}})

    def _know(self, writers: dict[int, WriterSchema]) -> None:
        self.writers, self._steps = writers, steps(writers)

    def _listed(self) -> dict[int, WriterSchema]:
        writers = {}
        for i, text in self.registry.subscribed().items():
            try:
                writers[i] = WriterSchema(i, text)
            except ValueError:  # (a version no record may use; a record that does comes back unknown, and
                continue        # learn() refuses its schema by its id)
        return writers


def records(kafka: DataFrame, projections: list[list[Column]]) -> DataFrame:
    """One row per Kafka record, with decode.records' columns plus `schema_id` and `image_<id>` for each writer
    schema `projections` (`steps`) were built for; kind `unknown` for a framed record whose id is not among them."""
    return functools.reduce(lambda df, step: df.select(*step), projections, kafka)


def steps(writers: dict[int, WriterSchema]) -> list[list[Column]]:
    """`records` as the projections it applies one after the other (the Decoder keeps them from batch to batch:
    each expression built costs the driver a round trip to the JVM)."""
    framed = [*map(F.col, ("topic", "partition", "offset", "value")), schema_id().alias("schema_id")]
    ids = sorted(writers)
    body = F.expr("substring(value, 6)")
    sid = F.col("schema_id")
    known = sid.isin(*ids) if ids else F.lit(False)
    envelopes = [F.col("*"), *[F.when(sid == i, from_avro(body, writers[i].text, {"mode": "PERMISSIVE"}))
                               .alias(f"e_{i}") for i in ids]]

    def field(*path: str) -> Column:  # the field of whichever envelope the record has
        fields = [F.col(f"e_{i}").getField(path[0]) for i in ids]
        for name in path[1:]:
            fields = [f.getField(name) for f in fields]
        return F.coalesce(*fields) if fields else F.lit(None)

    src = F.struct(*[field("source", name).alias(name) for name in ("db", "table", "file", "pos", "row", "snapshot")])
    op = field("op").cast("string")
    kind = (F.when(sid.isNull(), F.when(F.col("value").isNull(), "skip").otherwise("bad"))
            .when(~known, "unknown")
            .when(op.isin("r", "c", "u", "d"), "row")
            .otherwise("bad"))
    reason = (F.when(sid.isNull(), F.lit(NOT_FRAMED))
              .otherwise(F.format_string("not a Debezium change event in schema %d's Avro", sid)))
    return [framed, envelopes, [
        *map(F.col, ("topic", "partition", "offset", "schema_id")), kind.alias("kind"),
        F.when(known, F.concat_ws(".", src.db, src.table)).alias("table"), op.alias("op"),
        debezium_sequence(src).alias("seq"), F.coalesce(field("source", "ts_ms"), field("ts_ms")).cast("bigint").alias("ts_ms"),
        F.lit(None).cast("array<string>").alias("pk"), F.lit(None).cast("string").alias("types"),
        F.when(kind == "bad", reason).alias("reason"), F.when(kind == "bad", F.base64("value")).alias("raw"),
        F.concat(src.file, F.lit(":"), src.pos.cast("string")).alias("position"),
        *[F.when(F.col(f"e_{i}.op") == "d", F.col(f"e_{i}.before")).otherwise(F.col(f"e_{i}.after")).alias(f"image_{i}")
          for i in ids]]]


def values(writers: dict[int, WriterSchema], ids: set[int]) -> Callable[[ChangeColumn], tuple[Column, Column]]:
    """decode.typed_columns' `value` for a table whose records carry the writer schemas `ids`: (whether the record
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
