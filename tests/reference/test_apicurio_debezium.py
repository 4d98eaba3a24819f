"""Debezium's MySQL and MariaDB connectors on Kafka Connect with Apicurio's AvroConverter (2.6, Confluent framing:
`as-confluent`, the id a contentId) against `binlake schema-registry` on logcore, beside binlake's connector with
`value_format: avro` and `key_format: avro` on the same database and the same changes (a DDL among them): the
change events, decoded with confluent-kafka's AvroDeserializer from the registry, are equal, and each registered
schema version is compared field by field (name, Avro type, logical type, Connect type and parameters,
optional-ness). The differences that remain are
binlake's documented departures (docs/compatibility.md, "Debezium's Avro beside binlake's"); the test holds them
to that list, so a new one fails it."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from testkit.brokerproc import ROOT
from testkit.reference import apicurio_converter, start_connect
from waiting import wait_for

pytestmark = [pytest.mark.java, pytest.mark.slow]

DEBEZIUM = {"mysql": "io.debezium.connector.mysql.MySqlConnector",
            "mariadb": "io.debezium.connector.mariadb.MariaDbConnector"}
COLUMNS = """id INT PRIMARY KEY, qty SMALLINT NOT NULL, made DATE NOT NULL DEFAULT '2024-01-01', tiny TINYINT,
    flag BOOLEAN, big BIGINT, amount DECIMAL(10,2) NOT NULL, price DOUBLE, ratio FLOAT, note VARCHAR(20), body TEXT,
    born DATE, seen DATETIME(3), changed TIMESTAMP(6) NULL, took TIME, yr YEAR, kind ENUM('a','b'), tags SET('x','y'),
    raw BLOB, doc JSON"""
ROW = ("({id}, {id}, '2023-12-31', -5, 1, 1099511627776, 12.34, 2.25, 1.5, 'n{id}', 'text', '2024-02-29', "
       "'2024-02-29 12:34:56.789', '2024-02-29 12:34:56.123456', '12:34:56', 2024, 'b', 'x,y', x'00ff', "
       "'{{\"a\": 1}}')")
SNAPSHOT_ROWS = 5
MARKER = 999


def debezium(kind: str, server, broker: str, db: str, registry_url: str) -> dict[str, str]:
    return {"name": "dbz", "connector.class": DEBEZIUM[kind], "database.hostname": "127.0.0.1",
            "database.port": str(server.port), "database.user": server.user, "database.password": server.password,
            "database.server.id": str(random.randint(10_000, 90_000)), "topic.prefix": "dbz",
            "database.include.list": db, "schema.history.internal.kafka.bootstrap.servers": broker,
            "schema.history.internal.kafka.topic": "dbz-history", "schema.name.adjustment.mode": "avro",
            **apicurio_converter(f"{registry_url}/apis/registry/v2")}


def binlake(server, broker: str, db: str, registry_url: str) -> dict:
    return {"name": "bl", "connector": "mysql", "bootstrap_servers": broker,
            "database": {"host": "127.0.0.1", "port": server.port, "user": server.user, "password": server.password,
                         "server_id": random.randint(90_001, 99_999)},
            "tables": {"include": [rf"{db}\..*"]}, "value_format": "avro", "key_format": "avro",
            "schema_registry": {"url": registry_url}}


SOURCE_NOT_COMPARED = {"ts_ms", "ts_us", "ts_ns", "name", "version"}  # (the clocks, the topic prefix, the versions)


def changes(broker: str, client: SchemaRegistryClient, topic: str) -> list[tuple]:
    """(key, op, before, after, source) of each record of `topic`, decoded through the registry, the source block
    without the fields that cannot be equal (a tombstone: (key, None, None, None, None))."""
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "compare", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    reader = AvroDeserializer(client)
    out = []
    while (message := consumer.poll(10)) is not None and not message.error():
        key = reader(message.key(), SerializationContext(topic, MessageField.KEY))
        value = message.value() and reader(message.value(), SerializationContext(topic, MessageField.VALUE))
        out.append((key, None, None, None, None) if value is None else
                   (key, value["op"], value["before"], value["after"],
                    {k: v for k, v in value["source"].items() if k not in SOURCE_NOT_COMPARED}))
    consumer.close()
    return out


def ended(events: list[tuple]) -> bool:
    return bool(events) and events[-1][3] is not None and events[-1][3]["id"] == MARKER


NO_TYPE = (None, None, None, None)


def described(schema: dict, prefix: str) -> dict[str, tuple]:
    """Each field of a record schema and of the records inside it, by path: (the record's full name without
    the topic's prefix, or the field's Avro type; its logicalType, connect.name, connect.type and
    connect.parameters; optional)."""
    named: dict[str, dict] = {}
    out: dict[str, tuple] = {}

    def full_name(record: dict, namespace: str) -> str:
        name = record["name"]
        return name if "." in name else f"{record.get('namespace', namespace)}.{name}".lstrip(".")

    def walk(record: dict, path: str, namespace: str) -> None:
        name = full_name(record, namespace)
        named[name] = record
        for field in record["fields"]:
            kind = field["type"]
            optional = isinstance(kind, list) and "null" in kind
            if isinstance(kind, list):
                kind = next(branch for branch in kind if branch != "null")
            if isinstance(kind, str):
                kind = named.get(kind) or named.get(f"{name.rpartition('.')[0]}.{kind}") or kind
            if isinstance(kind, dict) and kind["type"] == "record":
                inner = full_name(kind, name.rpartition(".")[0])
                out[f"{path}{field['name']}"] = (inner.removeprefix(f"{prefix}."), *NO_TYPE, optional)
                walk(kind, f"{path}{field['name']}.", inner.rpartition(".")[0])
                continue
            spec = kind if isinstance(kind, dict) else {"type": kind}
            out[f"{path}{field['name']}"] = (spec["type"], spec.get("logicalType"), spec.get("connect.name"),
                                             spec.get("connect.type"), spec.get("connect.parameters"), optional)

    out[""] = (full_name(schema, "").removeprefix(f"{prefix}."), *NO_TYPE, False)
    walk(schema, "", "")
    return out


def event_differences(theirs: list[tuple], ours: list[tuple]) -> list[tuple]:
    """Where two event lists of one length differ: (op, part, column, Debezium's, binlake's)."""
    found = []
    for a, b in zip(theirs, ours):
        for part, x, y in zip(("key", "op", "before", "after", "source"), a, b):
            if isinstance(x, dict) and isinstance(y, dict):
                found += [(a[1], part, column, x.get(column), y.get(column))
                          for column in sorted(x.keys() | y.keys()) if x.get(column) != y.get(column)]
            elif x != y:
                found.append((a[1], part, None, x, y))
    return found


def departs(server_kind: str, op: str, part: str, column: str, theirs, ours) -> bool:
    """Whether one difference between the events is among binlake's documented departures (docs/compatibility.md,
    "Debezium's Avro beside binlake's")."""
    if part in ("before", "after"):        # MySQL's JSON from the binlog: compact text in Debezium's, equal values
        return column == "doc" and server_kind == "mysql" and json.loads(theirs) == json.loads(ours)
    return part == "source" and (
        (column, theirs, ours) in (("connector", "mariadb", "mysql"), ("snapshot", "first", "true"))
        or (column == "row" and op == "r" and theirs == 0)           # binlake numbers a snapshot chunk's rows
        or (column == "thread" and ours is None and server_kind == "mysql"))


def differences(theirs: dict[str, tuple], ours: dict[str, tuple]) -> dict[str, tuple]:
    """{path: (Debezium's, binlake's)} where the two differ (None: the field is absent on that side)."""
    return {path: (theirs.get(path), ours.get(path)) for path in sorted(theirs.keys() | ours.keys())
            if theirs.get(path) != ours.get(path)}


DATE = ("int", None, "io.debezium.time.Date", None, None)
ABSENT_IN_BINLAKE = {"source.query": "string", "source.sequence": "string", "source.thread": "long",
                     "source.ts_us": "long", "source.ts_ns": "long", "ts_us": "long", "ts_ns": "long"}
SNAPSHOT = ("string", None, "io.debezium.data.Enum", None)


def departures(server_kind: str) -> dict[str, tuple]:
    """binlake's documented departures from Debezium's value schema (docs/compatibility.md): a DATE NOT NULL
    column is optional (MySQL's zero date is null), FLOAT is a double, the source and envelope fields binlake
    does not write are absent, source.snapshot allows the markers binlake writes only, and on MariaDB the
    source record keeps the MySQL connector's name; the key schemas are the same."""
    mariadb = {"source": (("io.debezium.connector.mariadb.Source", *NO_TYPE, False),
                          ("io.debezium.connector.mysql.Source", *NO_TYPE, False))}
    allowed = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
    return {**{f"{image}.made": (DATE + (False,), DATE + (True,)) for image in ("before", "after")},
            **{f"{image}.ratio": (("float", *NO_TYPE, True), ("double", *NO_TYPE, True))
               for image in ("before", "after")},
            **{path: ((kind, *NO_TYPE, True), None) for path, kind in ABSENT_IN_BINLAKE.items()},
            "source.snapshot": (SNAPSHOT + ({"allowed": allowed}, True),
                                SNAPSHOT + ({"allowed": "true,last,false,incremental"}, True)),
            **(mariadb if server_kind == "mariadb" else {})}


def test_debezium_with_apicurios_converter_and_binlake_write_the_same_avro(apicurio_jars, server_kind, server, broker,
                                                                          registry, tmp_path):
    db = f"side{random.randrange(10**6)}"
    server.sql(f"CREATE DATABASE {db}", f"CREATE TABLE {db}.orders ({COLUMNS})",
               f"INSERT INTO {db}.orders VALUES " + ", ".join(ROW.format(id=i) for i in range(1, SNAPSHOT_ROWS + 1)))
    config = tmp_path / "binlake.yaml"
    config.write_text(yaml.safe_dump(binlake(server, broker.address, db, registry.url)))
    with open(tmp_path / "binlake.log", "wb") as log:
        ours = subprocess.Popen([sys.executable, "-m", "binlake.cli", "connect", "run", str(config)], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
    connect = start_connect(tmp_path / "connect", broker.address, jars=apicurio_jars,
                            connectors=[debezium(server_kind, server, broker.address, db, registry.url)])
    client = SchemaRegistryClient({"url": registry.url})
    topics = {"debezium": f"dbz.{db}.orders", "binlake": f"bl.{db}.orders"}
    try:
        for name, topic in topics.items():
            wait_for(lambda: len(changes(broker.address, client, topic)) >= SNAPSHOT_ROWS, f"{name}'s snapshot",
                     timeout=180)
        server.sql(f"UPDATE {db}.orders SET note = 'changed', amount = amount + 1, seen = NULL WHERE id = 1",
                   f"DELETE FROM {db}.orders WHERE id = 2",
                   f"UPDATE {db}.orders SET id = 20 WHERE id = 3",          # a key update: delete + tombstone + create
                   f"INSERT INTO {db}.orders (id, qty, amount) VALUES (6, 0, 0)",  # the nullable columns null
                   f"ALTER TABLE {db}.orders ADD COLUMN extra VARCHAR(5)",       # each registers version 2
                   f"INSERT INTO {db}.orders (id, qty, amount, extra) VALUES ({MARKER}, 1, 1, 'x')")
        events = {name: wait_for(lambda: (got := changes(broker.address, client, topic)) and ended(got) and got,
                                 f"{name}'s changes", timeout=120) for name, topic in topics.items()}
        assert len(events["binlake"]) == len(events["debezium"])
        found = event_differences(events["debezium"], events["binlake"])
        assert [d for d in found if not departs(server_kind, *d)] == []

        # both registered the value schema twice (before and after the DDL) and the key once; each version is
        # held to the same departures (the new column `extra` is optional on both sides)
        for side, versions in (("key", [1]), ("value", [1, 2])):
            assert [client.get_versions(f"{topic}-{side}") for topic in topics.values()] == [versions, versions]
            for version in versions:
                schemas = {name: json.loads(client.get_version(f"{topic}-{side}", version).schema.schema_str)
                           for name, topic in topics.items()}
                found = differences(described(schemas["debezium"], f"dbz.{db}.orders"),
                                    described(schemas["binlake"], f"bl.{db}.orders"))
                assert found == ({} if side == "key" else departures(server_kind)), (side, version)
                assert (version == 2) == ("after.extra" in described(schemas["binlake"], f"bl.{db}.orders"))
    finally:
        connect.stop()
        ours.kill()
        ours.wait()
        server.sql(f"DROP DATABASE {db}")
