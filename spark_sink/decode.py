"""Kafka records → change rows, as Spark column expressions (no Python UDF, no collect of rows).

`records` parses each record's value with the format's envelope: row changes get their table,
op, image (the row after the change, before it for a delete: a map of column → the JSON value's
text, or Canal's string) and sequence; DDL, tombstones, heartbeats and schema changes are told
apart; anything else is `bad` with a reason. `typed_columns` turns one table's images into typed
columns by the table's MySQL types (spark_sink/changes.py holds the type table and the sequence
formula this mirrors).
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .changes import GTID_DIGITS, OFFSET_DIGITS, POS_DIGITS, ROW_DIGITS, TableSchema
from .changes import Column as ChangeColumn

SEQ = "decimal(38,0)"

_ENVELOPE = ("op STRING, before MAP<STRING,STRING>, after MAP<STRING,STRING>, ddl STRING, databaseName STRING, "
             "tableChanges ARRAY<STRUCT<type: STRING, id: STRING>>, source STRUCT<file: STRING, pos: BIGINT, "
             "row: BIGINT, snapshot: STRING, db: STRING, table: STRING, gtid: STRING, ts_ms: BIGINT>, ts_ms BIGINT")
# The envelope as binlake's connector writes it, or inside Kafka Connect's JsonConverter wrapping with
# schemas.enable=true ({"schema": ..., "payload": envelope}, schema first), as Debezium writes it by default.
_WRAPPED = r'^\s*\{\s*"schema"\s*:'
_CANAL = ("data ARRAY<MAP<STRING,STRING>>, old ARRAY<MAP<STRING,STRING>>, type STRING, database STRING, "
          "table STRING, pkNames ARRAY<STRING>, isDdl BOOLEAN, es BIGINT, id BIGINT, gtid STRING, "
          "mysqlType MAP<STRING,STRING>")


def _dec(column: Column | int) -> Column:
    return (column if isinstance(column, Column) else F.lit(column)).cast(SEQ)


def _trailing_number(text: Column) -> Column:
    return F.coalesce(F.regexp_extract(text, r"(\d+)$", 1).try_cast(SEQ), _dec(0))


def debezium_sequence(src: Column) -> Column:
    """The sequence of a Debezium change from its `source` block (spark_sink/changes.py's formula)."""
    phase = F.when(src.snapshot.isin("true", "last"), 0).otherwise(1)
    return _dec(_dec(_dec(_trailing_number(src.file) * POS_DIGITS + F.coalesce(src.pos, F.lit(0))) * 10 + phase)
                * ROW_DIGITS + F.coalesce(src.row, F.lit(0)))


def records(kafka: DataFrame, fmt: str) -> DataFrame:
    """One row per Kafka record: topic, partition, offset, kind (row | truncate | ddl | skip | bad),
    table (db.table), op, image, seq, ts_ms, pk (Canal's pkNames), types (Canal's mysqlType
    as JSON, in column order), reason and raw (why a record is bad, and its value), position."""
    text = F.col("value").cast("string")
    base = kafka.select("topic", "partition", "offset", "value", text.alias("text"))
    return _debezium(base) if fmt == "debezium" else _canal(base)


def _debezium(base: DataFrame) -> DataFrame:
    # One parse a record: a wrapped record's payload is cut out as text first, and only those pay for it.
    # (One schema of both shapes, picked from after the parse, made read+decode three times slower.)
    text = F.col("text")
    envelope = F.when(text.rlike(_WRAPPED), F.get_json_object(text, "$.payload")).otherwise(text)
    e = F.from_json(envelope, _ENVELOPE).alias("e")
    df = base.select("*", e)
    src = F.col("e.source")
    change_types = F.transform(F.coalesce(F.col("e.tableChanges"), F.array()), lambda c: c.type)
    kind = (F.when(F.col("value").isNull(), "skip")
            .when(F.col("e").isNull(), "bad")
            .when(F.col("e.ddl").isNotNull() & F.array_contains(change_types, "TRUNCATE"), "truncate")
            .when(F.col("e.ddl").isNotNull(), "ddl")
            .when(F.col("e.op").isin("r", "c", "u", "d") & src.isNotNull(), "row")
            .when(F.col("e.ts_ms").isNotNull() & F.col("e.op").isNull() & src.isNull(), "skip")  # heartbeat
            .otherwise("bad"))
    table = F.when(F.col("e.ddl").isNotNull(), F.col("e.tableChanges")[0].id).otherwise(
        F.concat_ws(".", src.db, src.table))
    return df.select(
        "topic", "partition", "offset", kind.alias("kind"), table.alias("table"), F.col("e.op").alias("op"),
        F.when(F.col("e.op") == "d", F.col("e.before")).otherwise(F.col("e.after")).alias("image"),
        debezium_sequence(src).alias("seq"),
        F.coalesce(src.ts_ms, F.col("e.ts_ms")).alias("ts_ms"), F.lit(None).cast("array<string>").alias("pk"),
        F.lit(None).cast("string").alias("types"),
        F.when(kind == "bad", F.lit("not a Debezium change event (no op and source)")).alias("reason"),
        F.when(kind == "bad", F.col("text")).alias("raw"),
        F.concat(src.file, F.lit(":"), src.pos.cast("string")).alias("position"))


def _canal(base: DataFrame) -> DataFrame:
    e = F.from_json("text", _CANAL).alias("e")
    df = base.select("*", e)
    second = _dec(F.floor(F.coalesce(F.col("e.es"), F.lit(0)) / 1000))
    seq = _dec(_dec(second * GTID_DIGITS + _trailing_number(F.col("e.gtid"))) * OFFSET_DIGITS + F.col("offset"))
    op = F.when(F.col("e.type") == "INSERT", "c").when(F.col("e.type") == "UPDATE", "u") \
        .when(F.col("e.type") == "DELETE", "d")
    row = F.col("e.data")[0]
    kind = (F.when(F.col("value").isNull(), "skip")
            .when(F.col("e").isNull(), "bad")
            .when(F.col("e.isDdl") & (F.col("e.type") == "TRUNCATE"), "truncate")
            .when(F.col("e.isDdl"), "ddl")
            .when(op.isNotNull() & row.isNotNull(), "row")
            .otherwise("bad"))
    # mysqlType keeps the table's column order; a parsed map does not, so keep the JSON text too
    types = F.get_json_object("text", "$.mysqlType")
    return df.select(
        "topic", "partition", "offset", kind.alias("kind"),
        F.concat_ws(".", F.col("e.database"), F.col("e.table")).alias("table"), op.alias("op"),
        row.alias("image"), seq.alias("seq"), F.col("e.es").alias("ts_ms"),
        F.col("e.pkNames").alias("pk"), types.alias("types"),
        F.when(kind == "bad", F.lit("not a Canal flat message (no INSERT/UPDATE/DELETE type and data)")).alias("reason"),
        F.when(kind == "bad", F.col("text")).alias("raw"),
        F.concat(F.lit("pos "), F.col("e.id").cast("string")).alias("position"))


def cast(raw: Column, spark_type: str) -> Column:
    """A column's typed value from its text: NULL where the text does not fit the type (`typed_columns`
    reports those)."""
    if spark_type == "binary":
        return F.try_to_binary(raw, F.lit("base64"))
    if spark_type == "string":
        return raw
    return raw.try_cast(spark_type)


def text_value(column: ChangeColumn) -> tuple[Column, Column]:
    """(whether the record holds a value, the value typed) of a column in a JSON or Canal image (`image`: the
    column's text by name)."""
    raw = F.col("image")[column.name]
    return raw.isNotNull(), cast(raw, column.type.spark)


def typed_columns(schema: TableSchema,
                  value: Callable[[ChangeColumn], tuple[Column, Column]] = text_value) -> list[Column]:
    """The projection of one table's row changes with typed MySQL columns (the image after the change; before it
    for a delete, keeping only the key: a tombstone), then __seq, __op, __deleted, __ts, the record's place; plus,
    for each column, whether its value failed to convert (`__bad_<i>`), for `SinkJob._converted`
    (spark_sink/job.py, which keeps the projection from batch to batch: each expression built costs the driver a
    round trip to the JVM). `value` reads one column from a record's image (text_value; spark_sink/decode_avro.py
    for Avro)."""
    key = set(schema.primary_key)
    columns, bad = [], []
    for i, c in enumerate(schema.columns):
        present, typed_value = value(c)
        if c.name not in key:
            typed_value = F.when(F.col("op") != "d", typed_value)
        columns.append(typed_value.alias(c.name))
        bad.append((present & typed_value.isNull() & (F.col("op") != "d")).alias(f"__bad_{i}"))
    return [*columns, F.col("seq").alias("__seq"), F.col("op").alias("__op"), (F.col("op") == "d").alias("__deleted"),
            F.timestamp_millis("ts_ms").alias("__ts"), *map(F.col, ("topic", "partition", "offset", "position")), *bad]
