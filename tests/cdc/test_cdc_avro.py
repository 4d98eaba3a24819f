"""value_format: avro and key_format: avro: the same changes as the JSON format, field for field, read back with
confluent-kafka's AvroDeserializer from a real `binlake schema-registry` (on a real broker); a DDL registers the
table's next schema version; an incompatible change stops the source, or (schema_incompatible:
new_subject_version_with_none) sets the subject's compatibility to NONE and goes on."""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import re

import fastavro

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from brokerproc import NO_REBALANCE_DELAY, BrokerProcess
from cdc.formats.debezium_avro import AvroTable, table_record
from cdc.murmur2 import partition_for
from cdc.offsets import SourceInfo
from cdc.schema.model import ColumnDef, TableDef
from cdc.schema_registry import SchemaIncompatible, registrar
from cdc_harness import Capture
from connect.config import ConfigError, load, validate
from test_cdc_types import columns, create_and_insert
from testkit.brokerproc import ROOT
from testkit.registryproc import RegistryProcess


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", config=NO_REBALANCE_DELAY).start()
    process = RegistryProcess(broker.address, tmp_path_factory.mktemp("registry") / "registry.log").start()
    yield process
    process.kill()
    broker.kill()


@pytest.fixture(scope="module")
def client(registry):
    return SchemaRegistryClient({"url": registry.url})


def avro_config(capture: Capture, registry, db: str, **overrides) -> dict:
    return capture.config(db, value_format="avro", key_format="avro", schema_registry={"url": registry.url},
                          **overrides)


def decoded(client, batches) -> list[dict]:
    """The records as a consumer reads them: keys and values through AvroDeserializer."""
    reader = AvroDeserializer(client)
    out = []
    for record in (r for b in batches for r in b.records):
        if record.topic.count(".") != 2:        # schema changes (`srv`) stay JSON
            continue
        key = reader(record.key, SerializationContext(record.topic, MessageField.KEY)) if record.key else None
        value = (reader(record.value, SerializationContext(record.topic, MessageField.VALUE))
                 if record.value is not None else None)
        out.append({"topic": record.topic, "key": key, "value": value, "partition": record.partition})
    return out


def _fsp(declared: str) -> int:
    found = re.match(r"\w+\((\d+)\)", declared)
    return int(found.group(1)) if found else 0


def _fraction(micros: int, fsp: int) -> str:
    return "." + f"{micros:06d}"[:fsp] if fsp else ""


def _time(us: int, fsp: int) -> str:
    sign, us = ("-" if us < 0 else ""), abs(us)
    seconds, micros = divmod(us, 1_000_000)
    return f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{_fraction(micros, fsp)}"


def json_form(value, declared: str):
    """A Debezium Avro value (by the column's declared type) as docs/cdc.md's JSON mapping writes it."""
    if value is None:
        return None
    kind = declared.split("(")[0].split()[0].lower()
    if isinstance(value, decimal.Decimal):
        return format(value, "f") if kind == "decimal" else int(value)
    if isinstance(value, bytes):
        return int.from_bytes(value, "little") if kind == "bit" else base64.b64encode(value).decode()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict):                 # Geometry
        return {"srid": value["srid"], "wkb": base64.b64encode(value["wkb"]).decode()}
    if kind == "date":
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=value)).isoformat()
    if kind == "datetime":
        fsp = _fsp(declared)
        us = value * 1000 if fsp <= 3 else value
        moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=us)
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + _fraction(moment.microsecond, fsp)
    if kind == "time":
        return _time(value, _fsp(declared))
    return value


def as_json(value: dict | None, types: dict[str, str]) -> dict | None:
    return None if value is None else {k: json_form(v, types[k]) for k, v in value.items()}


def test_avro_carries_what_json_carries(server, db, capture, registry, client):
    """Every type of test_cdc_types' table, snapshot and binlog, keys and values: the Avro records read back and
    mapped as the JSON format maps them are the JSON format's records (ts_ms, the emission time, aside)."""
    create_and_insert(server, db, "src")
    as_json_config, as_avro_config = capture.config(db), avro_config(capture, registry, db)
    runs = {"json": [capture.run(as_json_config)], "avro": [capture.run(as_avro_config)]}
    stored = ", ".join(["id"] + [c[0] for c in columns(server.kind) if c[2] is not None])
    server.sql("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'", "SET SESSION time_zone = '+00:00'",
               f"CREATE TABLE `{db}`.dst LIKE `{db}`.src",
               f"INSERT INTO `{db}`.dst ({stored}) SELECT {stored} FROM `{db}`.src",
               f"UPDATE `{db}`.dst SET c = 'zz' WHERE id = 1", f"UPDATE `{db}`.dst SET id = 7 WHERE id = 3",
               f"DELETE FROM `{db}`.dst WHERE id = 2")
    for kind, config in (("json", as_json_config), ("avro", as_avro_config)):
        runs[kind].append(capture.run(config, offset=runs[kind][0][-1].offset))
    types = {"id": "INT", **{c[0]: c[1] for c in columns(server.kind)}}
    expected = [r for r in Capture.records(runs["json"][0] + runs["json"][1]) if r["topic"].count(".") == 2]
    got = decoded(client, runs["avro"][0] + runs["avro"][1])
    assert len(got) == len(expected) and len(got) > 10
    ops = set()
    for avro, json in zip(got, expected):
        assert avro["topic"] == json["topic"] and avro["key"] == json["key"]
        if json["value"] is None:
            assert avro["value"] is None
            continue
        value, want = avro["value"], json["value"]
        ops.add(value["op"])
        assert value["op"] == want["op"]
        if value["op"] == "r":                  # (a snapshot's source.ts_ms is the time of its read)
            assert type(value["source"].pop("ts_ms")) is int and want["source"].pop("ts_ms")
        assert value["source"] == want["source"]
        assert value["transaction"] == want["transaction"]
        assert isinstance(value["ts_ms"], int)
        for image in ("before", "after"):
            mapped = as_json(value[image], types)
            for column in (want[image] or {}):
                assert mapped[column] == want[image][column], (image, column, types[column])
            assert mapped == want[image]
    assert ops == {"r", "c", "u", "d"}
    assert client.get_versions(f"srv.{db}.dst-value") == [1]
    assert client.get_versions(f"srv.{db}.dst-key") == [1]


def table_ids(batches) -> list[int]:
    """The schema id of each record of table t."""
    return [int.from_bytes(r.value[1:5], "big") for b in batches for r in b.records if r.topic.endswith(".t")]


def test_a_ddl_registers_the_next_version(server, db, capture, registry, client):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10))", f"INSERT INTO `{db}`.t VALUES (1, 'a')")
    config = avro_config(capture, registry, db)
    first = capture.run(config)
    server.sql(f"ALTER TABLE `{db}`.t ADD COLUMN n BIGINT NULL", f"INSERT INTO `{db}`.t VALUES (2, 'b', 5)")
    second = capture.run(config, offset=first[-1].offset)
    subject = f"srv.{db}.t-value"
    assert client.get_versions(subject) == [1, 2]
    values = [r["value"] for r in decoded(client, first + second)]
    assert [v["after"] for v in values] == [{"id": 1, "v": "a"}, {"id": 2, "v": "b", "n": 5}]
    assert table_ids(first) + table_ids(second) == [client.get_version(subject, v).schema_id for v in (1, 2)]
    registrar.cache_clear()               # a restarted source process registers again: the same ids, no version
    again = capture.run(config, offset=first[-1].offset)
    assert table_ids(again) == table_ids(second) == [client.get_version(subject, 2).schema_id]
    assert client.get_versions(subject) == [1, 2]


def test_an_incompatible_change_stops_the_source(server, db, capture, registry, client):
    """Under the registry's default BACKWARD, INT -> VARCHAR can't be read by the new schema from old data."""
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)", f"INSERT INTO `{db}`.t VALUES (1, 1)")
    config = avro_config(capture, registry, db)
    first = capture.run(config)
    server.sql(f"ALTER TABLE `{db}`.t MODIFY v VARCHAR(10)", f"INSERT INTO `{db}`.t VALUES (2, 'b')")
    with pytest.raises(SchemaIncompatible) as stopped:
        capture.run(config, offset=first[-1].offset)
    message = str(stopped.value)
    subject = f"srv.{db}.t-value"
    assert f"subject {subject}" in message and "schema_incompatible: new_subject_version_with_none" in message
    latest, new = re.search(r"latest registered: (.*)\n  new: (.*)\n", message).groups()
    assert '"name":"v","type":["null","int"]' in latest.replace(" ", "")
    assert '"name":"v","type":["null","string"]' in new.replace(" ", "")
    assert client.get_versions(subject) == [1]


def test_new_subject_version_with_none_goes_on(server, db, capture, registry, client):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)", f"INSERT INTO `{db}`.t VALUES (1, 1)")
    config = avro_config(capture, registry, db, schema_incompatible="new_subject_version_with_none")
    first = capture.run(config)
    server.sql(f"ALTER TABLE `{db}`.t MODIFY v VARCHAR(10)", f"INSERT INTO `{db}`.t VALUES (2, 'b')")
    second = capture.run(config, offset=first[-1].offset)
    subject = f"srv.{db}.t-value"
    assert client.get_versions(subject) == [1, 2]
    assert client.get_compatibility(subject) == "NONE"
    assert [r["value"]["after"] for r in decoded(client, first + second)] == [{"id": 1, "v": 1}, {"id": 2, "v": "b"}]


MYSQL = {"name": "shop", "connector": "mysql", "bootstrap_servers": "127.0.0.1:9092",
         "database": {"user": "cdc", "server_id": 5}}


def config_problems(**keys) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        validate({**MYSQL, **keys}, "shop.yaml", {})
    return dict(caught.value.problems)


def test_the_connector_config_refuses_wrong_combinations():
    registry_url = {"url": "http://127.0.0.1:8081"}
    ok = validate({**MYSQL, "value_format": "avro", "schema_registry": {**registry_url, "basic_auth_user": "u",
                                                                       "basic_auth_password": "p"}}, "shop.yaml", {})
    source = ok.config.source_config("shop")
    assert (source.value_format, source.key_format, source.schema_registry.client_conf()) == (
        "avro", "json", {"url": "http://127.0.0.1:8081", "basic.auth.user.info": "u:p"})
    assert config_problems(value_format="avro") == {
        "": "value_format: avro registers its schemas: set schema_registry: {url: http://HOST:PORT}"}
    assert config_problems(schema_registry=registry_url) == {
        "": "schema_registry is used by Avro keys or values: set value_format: avro (or key_format: avro), or drop "
            "schema_registry"}
    assert config_problems(key_format="avro", format="canal", schema_registry=registry_url) == {
        "": "key_format: avro writes Debezium's envelope in Avro: set format: debezium (not canal)"}
    wrong = config_problems(value_format="avro", schema_registry={"url": "http://r:8081", "basic_auth_user": "u"})
    assert wrong == {"schema_registry": "basic_auth_user and basic_auth_password go together: set both, or neither"}
    wrong = config_problems(value_format="avro", schema_registry={"url": "r:8081"})
    assert "schema_registry.url" in wrong
    wrong = config_problems(value_format="avro", schema_registry=registry_url, schema_incompatible="ignore")
    assert "'stop' or 'new_subject_version_with_none'" in wrong["schema_incompatible"]


class _Ids:
    """A registrar that hands out id 7 (the bytes of the body are under test, not the registry)."""

    def id_for(self, subject: str, schema: dict) -> int:
        return 7


def test_an_envelope_built_from_parts_is_fastavros_whole_envelope():
    table = TableDef("shop", "t", (ColumnDef("id", "bigint", nullable=False), ColumnDef("v", "varchar", (9,)),
                                   ColumnDef("d", "decimal", (6, 2)), ColumnDef("at", "datetime", (6,))), ("id",))
    avro = AvroTable(_Ids(), "srv", "srv.shop.t", table, ("id",), "precise", values=True, keys=True)
    parsed = fastavro.parse_schema(avro.envelope)
    event = SourceInfo("srv", 1, "binlog.000002", 4711, 0, "0-1-9", "shop", "t", 1_700_000_000_000).event()
    one = {"id": 1, "v": "é", "d": "-1.50", "at": "2024-02-29T23:59:59.000001"}
    two = {"id": 2, "v": None, "d": None, "at": None}
    for op, before, after, row, txn in [("c", None, one, 0, None), ("u", one, two, 300, b'{"id":"0-1-9",'
                                        b'"total_order":70000,"data_collection_order":2}'), ("d", two, None, 5, None),
                                        ("r", None, two, 2**31 - 1, None)]:
        value = avro.value(op, before, after, event, row, 1_700_000_000_123, txn)
        whole = io.BytesIO()
        fastavro.schemaless_writer(whole, parsed, {
            "before": before and ("srv.shop.t.Value", avro.record.image(before)),
            "after": after and ("srv.shop.t.Value", avro.record.image(after)),
            "source": {**event.fields, "row": row}, "op": op, "ts_ms": 1_700_000_000_123,
            "transaction": txn and json.loads(txn)})
        assert value == b"\0\0\0\0\7" + whole.getvalue(), op
    assert avro.key({"id": 5}) == b"\0\0\0\0\7" + b"\x0a"


# Every Avro type cdc.formats.avro_types writes, with values at the varint, sign and length edges.
EDGES = [
    (ColumnDef("i", "int", nullable=False), [0, -1, 63, 64, -64, -65, 2**31 - 1, -2**31]),
    (ColumnDef("t", "tinyint"), [None, -128, 127]), (ColumnDef("iu", "int", unsigned=True), [4294967295, 8191, 8192]),
    (ColumnDef("b", "bigint"), [2**63 - 1, -2**63, 10**15]),
    (ColumnDef("bu", "bigint", unsigned=True), [0, 18446744073709551615, 127, 128]),
    (ColumnDef("d", "decimal", (12, 4)), ["0.0000", "-0.0001", "12.5", "-99999999.9999", "128.0000", "-128"]),
    (ColumnDef("f", "float"), [0.0, -1.5, 3.4e38, 1]), (ColumnDef("dbl", "double", nullable=False), [5e-324, -0.0]),
    (ColumnDef("da", "date"), [None, "1969-12-31", "9999-12-31"]),
    (ColumnDef("dt", "datetime"), ["1000-01-01T00:00:00", "2038-01-19T03:14:08"]),
    (ColumnDef("dt6", "datetime", (6,)), ["1969-07-20T20:17:40.000001"]),
    (ColumnDef("ts", "timestamp", (3,)), ["2038-01-19T03:14:07.999Z"]),
    (ColumnDef("tm", "time", (6,)), ["-838:59:59.000000", "00:00:00.000001"]), (ColumnDef("y", "year"), [1901, 2155]),
    (ColumnDef("vc", "varchar", (20,)), ["", "café€ 日本", "x" * 200]), (ColumnDef("tx", "text"), ["🎉"]),
    (ColumnDef("en", "enum", values=("a", "b")), ["b"]), (ColumnDef("se", "set", values=("x", "y")), ["", "x,y"]),
    (ColumnDef("js", "json"), ['{"a": [1, null]}']), (ColumnDef("bl", "blob"), ["", "YQAAAA=="]),
    (ColumnDef("b1", "bit", (1,)), [0, 1]), (ColumnDef("b12", "bit", (12,)), [682, 4095]),
    (ColumnDef("ge", "point"), [{"srid": 4326, "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA"}, {"srid": None, "wkb": ""}]),
    (ColumnDef("g2", "geometry"), [{"srid": 0, "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA"}]),
    (ColumnDef("ve", "vector", (3,)), [[1.5, -2.25, 0.1], []]),
]


@pytest.mark.parametrize("decimals", ["precise", "string"])
def test_the_compiled_writer_of_a_row_is_fastavros_writing_of_it_for_every_type(decimals):
    record = table_record("Value", "srv.shop.t", [c for c, _ in EDGES], decimals)
    parsed = fastavro.parse_schema(record.schema)
    for n in range(max(len(values) for _, values in EDGES)):
        row = {c.name: values[n % len(values)] for c, values in EDGES}
        whole = io.BytesIO()
        fastavro.schemaless_writer(whole, parsed, record.image(row))
        assert record.binary(row) == whole.getvalue(), row
    assert record.binary({**row, "t": None, "da": None}) != record.binary(row)


def test_the_registry_password_is_not_shown():
    settings = validate({**MYSQL, "value_format": "avro", "schema_registry": {
        "url": "https://r:8081", "basic_auth_user": "u", "basic_auth_password": "s3cret", "ca_file": "/ca.pem"}},
        "shop.yaml", {}).config.source_config("shop").schema_registry
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())
    assert settings.client_conf() == {"url": "https://r:8081", "basic.auth.user.info": "u:s3cret",
                                      "ssl.ca.location": "/ca.pem"}


def test_avro_keys_with_json_values_partition_by_the_avro_bytes(server, db, capture, registry, client):
    """key_format: avro alone: the key is the Key record (murmur2 of its bytes picks the partition, as Java's
    producer with Confluent's serializer does), the value stays the JSON envelope; no value subject."""
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, k VARCHAR(5))",
               f"INSERT INTO `{db}`.t VALUES " + ", ".join(f"({i}, 'k{i}')" for i in range(40)))
    config = capture.config(db, key_format="avro", schema_registry={"url": registry.url}, topic_partitions=3)
    records = [r for b in capture.run(config) for r in b.records if r.topic == f"srv.{db}.t"]
    read = AvroDeserializer(client)
    assert sorted(read(r.key, SerializationContext(r.topic, MessageField.KEY))["id"] for r in records) == list(range(40))
    assert [r.partition for r in records] == [partition_for(r.key, 3) for r in records]
    assert {r.partition for r in records} == {0, 1, 2}
    assert [json.loads(r.value)["after"]["k"] for r in records] == [f"k{i}" for i in range(40)]
    assert f"srv.{db}.t-value" not in client.get_subjects()


def test_the_avro_example_is_valid():
    spec = load(ROOT / "examples" / "shop-avro.yaml", {"MYSQL_PASSWORD": "x"})
    source = spec.config.source_config(spec.name)
    assert (source.value_format, source.key_format, source.schema_registry.url) == (
        "avro", "avro", "http://127.0.0.1:8081")
