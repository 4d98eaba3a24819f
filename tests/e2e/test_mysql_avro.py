"""The mysql connector with value_format and key_format avro, end to end: `binlake connect run` (exactly once)
against a throwaway server, a real broker and `binlake schema-registry`; the change topic read back
read_committed and decoded with confluent-kafka's AvroDeserializer, across a column added mid-stream; an
incompatible change fails the connector with the subject, both schemas and what to do; and a faust worker
reading the connector's Avro with streams.avro.registry_avro."""

from __future__ import annotations

import asyncio
from decimal import Decimal as D

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e_harness import mysql_config, partition_counts, read_committed, wait_until, write_config
from faust_workers import Worker, wait_outputs
from sql_fixtures import by_default_on


@by_default_on("mariadb")
async def test_avro_changes_through_a_ddl_then_an_incompatible_change_stops(server, broker, registry, connector,
                                                                           tmp_path):
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10), d DECIMAL(6,2))",
               f"INSERT INTO `{db}`.t VALUES (1, 'a', 1.50), (2, 'b', NULL)")
    config = mysql_config("av", broker, server, [rf"{db}\..*"], value_format="avro", key_format="avro",
                          schema_registry={"url": registry.url}, delivery="exactly_once")
    running = connector(write_config(tmp_path / "c.yaml", **config))
    topic, client = f"av.{db}.t", SchemaRegistryClient({"url": registry.url})
    reader = AvroDeserializer(client)

    async def changes(count: int):
        try:
            messages = await read_committed(broker.address, [topic])
        except AssertionError:              # (not created yet)
            return None
        decoded = [(reader(m.key, SerializationContext(topic, MessageField.KEY)),
                    reader(m.value, SerializationContext(topic, MessageField.VALUE)) if m.value else None)
                   for m in messages]
        return decoded if len(decoded) >= count else None

    await wait_until(lambda: changes(2), 60, "the snapshot")        # (DECIMAL: Connect's Decimal, exact)
    server.sql(f"UPDATE `{db}`.t SET v = 'z' WHERE id = 1", f"DELETE FROM `{db}`.t WHERE id = 2",
               f"ALTER TABLE `{db}`.t ADD COLUMN n BIGINT NULL", f"INSERT INTO `{db}`.t VALUES (3, 'c', 0.01, 9)")
    got = await wait_until(lambda: changes(6), 60, "the streamed changes")
    assert [(key, value and (value["op"], value["before"], value["after"])) for key, value in got] == [
        ({"id": 1}, ("r", None, {"id": 1, "v": "a", "d": D("1.50")})),
        ({"id": 2}, ("r", None, {"id": 2, "v": "b", "d": None})),
        ({"id": 1}, ("u", {"id": 1, "v": "a", "d": D("1.50")}, {"id": 1, "v": "z", "d": D("1.50")})),
        ({"id": 2}, ("d", {"id": 2, "v": "b", "d": None}, None)),
        ({"id": 2}, None),                                                   # the tombstone
        ({"id": 3}, ("c", None, {"id": 3, "v": "c", "d": D("0.01"), "n": 9}))]
    assert client.get_versions(f"{topic}-value") == [1, 2] and client.get_versions(f"{topic}-key") == [1]

    server.sql(f"ALTER TABLE `{db}`.t MODIFY n VARCHAR(10)", f"INSERT INTO `{db}`.t VALUES (4, 'd', 0, 'x')")
    assert running.wait(60) == 1
    log = running.log()
    assert (f"av-0 failed and will not be restarted: the schema registry refuses a new version of subject "
            f"{topic}-value") in log
    assert "latest registered: " in log and "schema_incompatible: new_subject_version_with_none" in log
    assert len(await changes(6)) == 6                                   # nothing of the refused change was written


PROCESSOR = r'''
import faust
from streams.avro import registry_avro

PRICED = {{"type": "record", "name": "Priced", "namespace": "shop", "fields": [
    {{"name": "id", "type": "int"}}, {{"name": "op", "type": "string"}},
    {{"name": "doubled", "type": ["null", {{"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}]}},
    {{"name": "table", "type": "string"}}]}}
app = faust.App("priced", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                broker_commit_interval=0.5, consumer_auto_offset_reset="earliest", web_enabled=False)
changes = app.topic("{topic}", key_serializer=registry_avro("{url}"), value_serializer=registry_avro("{url}"))
priced = app.topic("priced", value_serializer=registry_avro("{url}", subject="priced-value", schema=PRICED))


@app.agent(changes)
async def price(stream):
    async for key, change in stream.items():
        if change is None:                  # a tombstone
            continue
        row = change["after"] or change["before"]
        await priced.send(value={{"id": key["id"], "op": change["op"], "table": change["source"]["table"],
                                  "doubled": None if row["d"] is None else row["d"] * 2}})
'''


@pytest.mark.slow
async def test_a_faust_worker_reads_the_connectors_avro(mariadb, broker, registry, connector, tmp_path):
    """The whole path in Avro: MariaDB -> the connector (exactly once) -> a `binlake streams worker` reading the
    Debezium envelope and key with registry_avro (DECIMAL as Decimal), writing its own Avro."""
    db = mariadb.new_database()
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, d DECIMAL(6,2))", f"INSERT INTO `{db}`.t VALUES (1, 1.25)")
    config = mysql_config("pv", broker, mariadb, [rf"{db}\..*"], value_format="avro", key_format="avro",
                          schema_registry={"url": registry.url})
    connector(write_config(tmp_path / "c.yaml", **config))
    topic = f"pv.{db}.t"
    (tmp_path / "priced_app.py").write_text(PROCESSOR.format(address=broker.address, url=registry.url, topic=topic))
    async def created():
        try:
            return await partition_counts(broker.address, [topic])
        except AssertionError:              # (not yet)
            return None
    await wait_until(created, 60, "the change topic")
    worker = Worker(tmp_path, 0, "priced_app:app").start()
    try:
        mariadb.sql(f"UPDATE `{db}`.t SET d = NULL WHERE id = 1", f"INSERT INTO `{db}`.t VALUES (2, -0.01)",
                    f"DELETE FROM `{db}`.t WHERE id = 2")
        got = await asyncio.to_thread(wait_outputs, broker.address, "priced", 4)
    finally:
        worker.kill()
    read = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    assert [read(v, SerializationContext("priced", MessageField.VALUE)) for v in got] == [
        {"id": 1, "op": "r", "doubled": D("2.50"), "table": "t"}, {"id": 1, "op": "u", "doubled": None, "table": "t"},
        {"id": 2, "op": "c", "doubled": D("-0.02"), "table": "t"}, {"id": 2, "op": "d", "doubled": D("-0.02"),
                                                                     "table": "t"}]
