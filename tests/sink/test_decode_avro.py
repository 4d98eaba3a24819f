"""format: debezium-avro decodes to what format: debezium gives for the same changes: every MySQL type the
connector writes in Avro (cdc/formats/avro_types.py), across two writer schemas of one table (a column added,
one dropped), decoded by spark_sink/decode_avro.py beside spark_sink/decode.py on a local SparkSession."""

from __future__ import annotations

import base64
import io
import json

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from cdc.formats.debezium_avro import envelope_schema, namespace, table_record
from cdc.schema.model import ColumnDef
from common.schema_registry import SchemaRegistrySettings
from spark_sink import decode, decode_avro
from spark_sink.changes import Column, MySqlType, TableSchema
from spark_sink.config import validate
from spark_sink.job import SinkJob
from spark_sink.writer_schemas import WriterSchemas
from testkit.registryproc import RegistryProcess

POINT = base64.b64encode(bytes.fromhex("0101000000000000000000f03f0000000000000040")).decode()
# (column, the JSON format's value)
TYPES = [
    (ColumnDef("id", "int", nullable=False), 1),
    (ColumnDef("ti", "tinyint"), -128), (ColumnDef("su", "smallint", unsigned=True), 65535),
    (ColumnDef("mi", "mediumint"), -8388608), (ColumnDef("iu", "int", unsigned=True), 4294967295),
    (ColumnDef("bi", "bigint"), -9223372036854775808), (ColumnDef("bu", "bigint", unsigned=True), 18446744073709551615),
    (ColumnDef("de", "decimal", (20, 6)), "-12345.678900"), (ColumnDef("fl", "float"), 123456.79),
    (ColumnDef("db", "double"), 0.30000000000000004), (ColumnDef("da", "date"), "2024-02-29"),
    (ColumnDef("dt0", "datetime"), "1969-07-20T20:17:40"), (ColumnDef("dt3", "datetime", (3,)), "2020-01-02T03:04:05.678"),
    (ColumnDef("dt6", "datetime", (6,)), "9999-12-31T23:59:59.999999"),
    (ColumnDef("ts", "timestamp", (3,)), "2038-01-19T03:14:07.999Z"),
    (ColumnDef("t0", "time"), "-838:59:59"), (ColumnDef("t3", "time", (3,)), "-00:00:00.500"),
    (ColumnDef("t6", "time", (6,)), "12:34:56.000001"), (ColumnDef("ye", "year"), 2155),
    (ColumnDef("vc", "varchar", (20,)), "café€ 日本"), (ColumnDef("en", "enum", values=("a", "b")), "b"),
    (ColumnDef("se", "set", values=("x", "y", "z")), "x,z"), (ColumnDef("js", "json"), '{"a": 1, "b": [true, null]}'),
    (ColumnDef("bl", "blob"), "YQAAAA=="), (ColumnDef("b1", "bit", (1,)), 1), (ColumnDef("b12", "bit", (12,)), 682),
    (ColumnDef("b64", "bit", (64,)), 9223372036854775807), (ColumnDef("ge", "point"), {"srid": 4326, "wkb": POINT}),
    (ColumnDef("g2", "geometry"), {"srid": 0, "wkb": POINT}), (ColumnDef("nu", "int"), None),
    (ColumnDef("ve", "vector", (3,)), [1.5, -2.25, 0.1]),
]


def source(pos: int, row: int = 0) -> dict:
    return {"version": "binlake-0.1", "connector": "mysql", "name": "srv", "ts_ms": 1_700_000_000_000, "snapshot": "false",
            "db": "shop", "table": "t", "server_id": 1, "gtid": None, "file": "binlog.000001", "pos": pos, "row": row}


class AvroWriter:
    """A table's envelope written as the connector writes it, framed with a registry id."""

    def __init__(self, schema_id: int, columns: list[ColumnDef]) -> None:
        ns = namespace("srv", "shop", "t")
        value, self.image, _ = table_record("Value", ns, columns, "precise")
        self.schema = envelope_schema(ns, value)
        self.parsed = fastavro.parse_schema(self.schema)
        self.id, self.header = schema_id, b"\0" + schema_id.to_bytes(4, "big")

    def write(self, op: str, before: dict | None, after: dict | None, pos: int) -> bytes:
        out = io.BytesIO()
        value = "srv.shop.t.Value"                  # (the union's branch, in fastavro's notation)
        fastavro.schemaless_writer(out, self.parsed, {
            "before": before and (value, self.image(before)), "after": after and (value, self.image(after)),
            "source": source(pos),
            "op": op, "ts_ms": 1, "transaction": None})
        return self.header + out.getvalue()


def json_event(op: str, before: dict | None, after: dict | None, pos: int) -> bytes:
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": 1, "source": source(pos)}).encode()


def decoded(spark, values: list[bytes | None], schema: TableSchema, avro: dict[int, str] | None):
    kafka = spark.createDataFrame([("t", 0, offset, v) for offset, v in enumerate(values)],
                                  "topic string, partition int, offset long, value binary")
    if avro is None:
        records, value = decode.records(kafka, "debezium"), decode.text_value
    else:
        writers = {i: decode_avro.WriterSchema(i, text) for i, text in avro.items()}
        records, value = decode_avro.records(kafka, decode_avro.steps(writers)), decode_avro.values(writers, set(writers))
    rows = records.where("kind = 'row'")
    kinds = sorted((r.offset, r.kind) for r in records.select("offset", "kind").collect())
    return kinds, [r.asDict() for r in rows.select(*decode.typed_columns(schema, value)).orderBy("offset").collect()]


def table_schema(columns: list[ColumnDef]) -> TableSchema:
    return TableSchema("shop.t", tuple(Column(c.name, MySqlType.parse(c.mysql_type)) for c in columns), ("id",))


def test_every_type_and_two_schema_versions_decode_as_the_json_format(spark):
    columns = [c for c, _ in TYPES]
    row = {c.name: v for c, v in TYPES}
    # version 1 has `old` (dropped later) and lacks `vc` (added later); version 2 is the table now
    v1_columns = [c for c in columns if c.name != "vc"] + [ColumnDef("old", "int")]
    v1, v2 = AvroWriter(11, v1_columns), AvroWriter(12, columns)
    first = {**{k: v for k, v in row.items() if k != "vc"}, "old": 5}
    second = {**row, "id": 2, "nu": 7, "ti": None, "ge": None}
    changes = [("c", None, first, 100, v1), ("u", first, {**first, "bl": None, "de": "0.000001"}, 200, v1),
               ("c", None, second, 300, v2), ("d", second, None, 400, v2)]
    avro = [w.write(op, b, a, pos) for op, b, a, pos, w in changes] + [None, b"{not avro"]
    text = [json_event(op, b, a, pos) for op, b, a, pos, _ in changes] + [None]
    schema = table_schema(columns)

    avro_kinds, from_avro = decoded(spark, avro, schema, {11: json.dumps(v1.schema), 12: json.dumps(v2.schema)})
    json_kinds, from_json = decoded(spark, text, schema, None)
    assert avro_kinds == [*json_kinds, (5, "bad")]             # (the tombstone skipped, the unframed value bad)
    assert [{k: v for k, v in r.items() if k.startswith("__bad")} for r in from_avro] == \
        [{f"__bad_{i}": False for i in range(len(columns))}] * 4
    assert [{k: (a[k], j[k]) for k in j if a[k] != j[k]} for a, j in zip(from_avro, from_json)] == [{}] * 4
    assert from_avro[0]["vc"] is None and from_avro[2]["vc"] == "café€ 日本" and "old" not in from_avro[0]
    assert from_avro[2]["ge"] is None and from_avro[2]["nu"] == 7 and from_avro[0]["t3"] == "-00:00:00.500"


def test_a_decimal_wider_than_spark_names_the_field():
    with pytest.raises(ValueError, match=r"schema 3, field d: DECIMAL\(65,4\) has more than the 38 digits"):
        decode_avro.WriterSchema(3, json.dumps(AvroWriter(3, [ColumnDef("id", "int"),
                                                               ColumnDef("d", "decimal", (65, 4))]).schema))


@pytest.mark.parametrize("text", ['"string"', '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'])
def test_a_schema_that_is_not_an_envelope_is_named(text):
    with pytest.raises(ValueError, match="schema 4 is not a Debezium envelope"):
        decode_avro.WriterSchema(4, text)


def schema_change(columns: list[ColumnDef], pos: int) -> bytes:
    """The connector's schema-change event (JSON, in its schema topic) that makes shop.t `columns`."""
    return json.dumps({"source": {"file": "binlog.000001", "pos": pos, "db": "shop", "table": "t", "snapshot": "false"},
                       "ddl": "CREATE or ALTER TABLE t ...", "databaseName": "shop", "tableChanges": [{
                           "type": "CREATE", "id": "shop.t", "table": {"primaryKeyColumnNames": ["id"], "columns": [
                               {"name": c.name, "typeName": c.type.upper(), "typeExpression": c.mysql_type}
                               for c in columns]}}]}).encode()


@pytest.mark.timeout(600)  # (two sink runs and a registry: a minute on a quiet machine, several under load)
def test_a_writer_schema_registered_after_the_job_listed_the_registry_is_learnt_and_the_batch_decoded_whole(
        spark, broker, tmp_path):
    """The job lists its topics' schemas when it starts; a later batch with records of a version registered since
    (a column added) has them decoded all the same, every change merged once, in order; the listing follows
    topic_pattern and leaves other topics' subjects out."""
    registry = RegistryProcess(broker.address, tmp_path / "registry.log").start()
    try:
        client, topic = SchemaRegistryClient({"url": registry.url}), "srv.shop.t"
        v1_columns = [ColumnDef("id", "int", nullable=False), ColumnDef("name", "varchar", (20,))]
        v2_columns = [*v1_columns, ColumnDef("note", "varchar", (20,))]

        def registered(columns: list[ColumnDef], subject: str = f"{topic}-value") -> AvroWriter:
            schema_id = client.register_schema(subject, Schema(json.dumps(AvroWriter(0, columns).schema), "AVRO"))
            return AvroWriter(schema_id, columns)

        p = Producer({"bootstrap.servers": broker.address})

        def produce(*changes) -> None:
            for topic_, value in changes:
                p.produce(topic_, value)
            p.flush(30)

        v1 = registered(v1_columns)
        produce(("srv", schema_change(v1_columns, 4)), *[(topic, v1.write("c", None, {"id": i, "name": f"n{i}"}, 100 + i))
                                                         for i in range(1, 4)])
        job = SinkJob(spark, validate({
            "bootstrap_servers": broker.address, "topics": [topic], "format": "debezium-avro", "schema_topic": "srv",
            "schema_registry": {"url": registry.url}, "checkpoint": str(tmp_path / "ck"), "trigger": "available_now",
            "target": {"delta": {"path": str(tmp_path / "delta")}}}))
        job.start().awaitTermination()
        assert set(job.avro.writers) == {v1.id}

        registered(v1_columns, "other.shop.t-value")
        v2 = registered(v2_columns)
        produce(("srv", schema_change(v2_columns, 200)),
                (topic, v1.write("u", {"id": 1, "name": "n1"}, {"id": 1, "name": "old"}, 300)),
                (topic, v2.write("u", {"id": 1, "name": "old", "note": None}, {"id": 1, "name": "new", "note": "v2"}, 400)),
                (topic, v2.write("c", None, {"id": 4, "name": "n4", "note": "four"}, 500)),
                (topic, v1.write("d", {"id": 2, "name": "n2"}, None, 301)))
        job.start().awaitTermination()           # (the same job: its decoder listed the registry before v2)
        ids = {v1.id, v2.id}
        assert set(job.avro.writers) == ids
        rows = spark.read.format("delta").load(str(tmp_path / "delta" / "shop" / "t")).where("NOT __deleted")
        assert sorted((r.id, r.name, r.note) for r in rows.collect()) == [(1, "new", "v2"), (3, "n3", None),
                                                                          (4, "n4", "four")]
        settings = SchemaRegistrySettings(url=registry.url)
        assert set(WriterSchemas(settings, pattern=r"srv\.shop\..*").subscribed()) == ids
        assert set(WriterSchemas(settings, topics=[topic, "srv.shop.none"]).subscribed()) == ids
    finally:
        registry.kill()
