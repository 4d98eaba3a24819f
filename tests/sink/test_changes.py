"""The change-event model shared by the Spark sink and stream processors (spark_sink/changes.py),
and the Spark decoder that must compute the same sequences and types from the same records."""

import datetime
import decimal
import json

import pytest

from spark_sink import decode
from spark_sink.changes import (MySqlType, NotAChangeEvent, SchemaHistory, UnsupportedType, canal_sequence,
                                debezium_sequence, parse)


@pytest.mark.parametrize(("expression", "spark", "postgres"), [
    ("int(11)", "int", "integer"), ("int(10) unsigned", "bigint", "bigint"), ("bigint(20)", "bigint", "bigint"),
    ("bigint unsigned", "decimal(20,0)", "numeric(20,0)"), ("decimal(10,2)", "decimal(10,2)", "numeric(10,2)"),
    ("datetime(6)", "timestamp_ntz", "timestamp(6)"), ("timestamp(3)", "timestamp", "timestamptz(6)"),
    ("json", "string", "jsonb"), ("enum('a','b')", "string", "text"), ("longblob", "binary", "bytea"),
    ("tinyint(1)", "int", "integer"), ("bit(12)", "bigint", "bigint"), ("double", "double", "double precision"),
])
def test_mysql_types_map_to_types_that_hold_every_value(expression, spark, postgres):
    kind = MySqlType.parse(expression)
    assert (kind.spark, kind.postgres) == (spark, postgres)


def test_a_decimal_wider_than_spark_is_refused_with_a_reason():
    with pytest.raises(UnsupportedType, match=r"DECIMAL\(65,4\) has more than the 38 digits"):
        MySqlType.parse("decimal(65,4)").spark


def test_values_come_back_typed():
    assert MySqlType.parse("decimal(20,6)").value("-12345.678900") == decimal.Decimal("-12345.678900")
    assert MySqlType.parse("datetime(6)").value("9999-12-31T23:59:59.999999") == datetime.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert MySqlType.parse("timestamp").value("2038-01-19T03:14:07Z").tzinfo is not None
    assert MySqlType.parse("blob").value("YQAAAA==") == b"a\0\0\0"
    assert MySqlType.parse("bigint unsigned").value("18446744073709551615") == 18446744073709551615


def test_snapshot_reads_sort_before_what_streams_from_their_position():
    snapshot = debezium_sequence({"file": "binlog.000002", "pos": 500, "row": 9, "snapshot": "true"})
    streamed = debezium_sequence({"file": "binlog.000002", "pos": 500, "row": 0, "snapshot": "false"})
    earlier = debezium_sequence({"file": "binlog.000001", "pos": 99999, "row": 3, "snapshot": "false"})
    assert earlier < snapshot < streamed


def test_parse_both_formats_and_tell_other_records_apart():
    body = {"before": None, "after": {"id": 1}, "op": "c", "source": {"db": "s", "table": "t", "file": "b.000001",
                                                                       "pos": 4, "row": 0, "snapshot": "false"}}
    assert parse(json.dumps(body).encode(), "debezium").table == "s.t"
    canal = {"data": [{"id": "1", "v": "b"}], "old": [{"v": "a"}], "type": "UPDATE", "database": "s", "table": "t",
             "pkNames": ["id"], "isDdl": False, "es": 1_700_000_000_000, "id": 5, "gtid": "0-1-42"}
    event = parse(json.dumps(canal).encode(), "canal", offset=7)
    assert (event.op, event.before, event.after, event.key) == ("u", {"id": "1", "v": "a"}, {"id": "1", "v": "b"}, {"id": "1"})
    assert parse(None, "debezium") is None
    assert parse(json.dumps({"ddl": "ALTER", "tableChanges": []}).encode(), "debezium") is None
    with pytest.raises(NotAChangeEvent):
        parse(b"[1, 2]", "debezium")


def test_schema_history_follows_create_alter_truncate_drop():
    history = SchemaHistory()
    columns = [{"name": "id", "typeExpression": "int(11)"}]
    for kind, pos in [("CREATE", 1), ("TRUNCATE", 2), ("TRUNCATE", 5)]:
        history.apply({"source": {"file": "b.000001", "pos": pos}, "tableChanges": [
            {"type": kind, "id": "s.t", "table": {"primaryKeyColumnNames": ["id"], "columns": columns}}]})
    assert history.tables["s.t"].primary_key == ("id",)
    assert history.truncates["s.t"] == debezium_sequence({"file": "b.000001", "pos": 5})


def test_spark_computes_the_same_sequences_as_python(spark):
    debezium = [{"op": "c", "before": None, "after": {"id": i}, "source": {
        "file": f"binlog.{f:06d}", "pos": p, "row": r, "snapshot": s, "db": "d", "table": "t"}}
        for i, (f, p, r, s) in enumerate([(1, 4, 0, "false"), (999999, 4294967295, 99999, "true"), (12, 7, 3, "last")])]
    canal = [{"data": [{"id": str(i)}], "type": "INSERT", "database": "d", "table": "t", "isDdl": False,
              "es": es, "id": 10, "gtid": g} for i, (es, g) in enumerate([(1_700_000_000_999, ""), (1_800_000_000_000, "0-1-987654321")])]
    # Kafka Connect's JsonConverter with schemas (Debezium's default) wraps the same envelope
    schema = {"type": "struct", "name": "d.d.t.Envelope", "fields": [{"field": "payload", "type": "string"}]}
    wrapped = [{"schema": schema, "payload": b} for b in debezium]
    assert [parse(json.dumps(b).encode(), "debezium").table for b in wrapped] == ["d.t"] * 3
    sequence = {"debezium": lambda body, offset: debezium_sequence(body.get("payload", body)["source"]),
                "canal": canal_sequence}
    for fmt, variants in (("debezium", (debezium, wrapped)), ("canal", (canal,))):
        # each variant in both spellings (JsonConverter writes compact JSON: the schema is skipped), 100
        # offsets apart: one Spark job a format
        spelled = [(bodies, separators) for bodies in variants for separators in ((", ", ": "), (",", ":"))]
        kafka = spark.createDataFrame([("t", 0, 100 * i + offset, json.dumps(b, separators=separators).encode())
                                       for i, (bodies, separators) in enumerate(spelled)
                                       for offset, b in enumerate(bodies)],
                                      "topic string, partition int, offset long, value binary")
        decoded = decode.records(kafka, fmt).orderBy("offset").collect()
        for i, (bodies, _) in enumerate(spelled):
            rows = [r for r in decoded if r.offset // 100 == i]
            assert [int(r.seq) for r in rows] == [sequence[fmt](b, 100 * i + offset) for offset, b in enumerate(bodies)]
            assert {r.kind for r in rows} == {"row"} and {r.table for r in rows} == {"d.t"}
            assert rows[0].image["id"] == "0"
