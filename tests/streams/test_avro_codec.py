"""streams.avro.registry_avro: a real `binlake streams worker` (exactly once) reads records that confluent-kafka's
AvroSerializer wrote through a real `binlake schema-registry`, as typed values (Decimal, ints, None), and
writes its own with a schema it registers; confluent-kafka's AvroDeserializer reads them back."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from faust_workers import Worker, faust_broker, wait_outputs
from streams.avro import registry_avro
from testkit.registryproc import RegistryProcess

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None}]}

APP = r'''
import faust
from streams.avro import registry_avro

TOTAL = {{"type": "record", "name": "Total", "namespace": "shop", "fields": [
    {{"name": "id", "type": "int"}},
    {{"name": "doubled", "type": {{"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}}},
    {{"name": "noted", "type": "boolean"}}]}}
app = faust.App("avro-app", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                broker_commit_interval=0.5, consumer_auto_offset_reset="earliest", web_enabled=False)
orders = app.topic("avro-in", value_serializer=registry_avro("{url}"))
totals = app.topic("avro-out", value_serializer=registry_avro("{url}", subject="avro-out-value", schema=TOTAL))


@app.agent(orders)
async def double(stream):
    async for order in stream:
        assert type(order["price"]).__name__ == "Decimal", order   # typed, as the schema says
        await totals.send(value={{"id": order["id"], "doubled": order["price"] * 2,
                                  "noted": order["note"] is not None}})
'''


def test_a_worker_reads_and_writes_registry_avro(broker_factory, tmp_path):
    broker = faust_broker(broker_factory, "avro-in", "avro-out")
    registry = RegistryProcess(broker.address, tmp_path / "registry.log").start()
    worker = None
    try:
        client = SchemaRegistryClient({"url": registry.url})
        serialize = AvroSerializer(client, json.dumps(ORDER))
        producer = Producer({"bootstrap.servers": broker.address})
        orders = [{"id": 1, "price": Decimal("12.30"), "note": None}, {"id": 2, "price": Decimal("0.05"), "note": "x"},
                  {"id": 3, "price": Decimal("-999999.99"), "note": None}]
        for order in orders:
            producer.produce("avro-in", value=serialize(order, SerializationContext("avro-in", MessageField.VALUE)))
        producer.flush(30)
        (tmp_path / "avro_app.py").write_text(APP.format(address=broker.address, url=registry.url))
        worker = Worker(tmp_path, 0, "avro_app:app").start()
        got = wait_outputs(broker.address, "avro-out", 3)
        read = AvroDeserializer(client)
        assert [read(v, SerializationContext("avro-out", MessageField.VALUE)) for v in got] == [
            {"id": 1, "doubled": Decimal("24.60"), "noted": False}, {"id": 2, "doubled": Decimal("0.10"), "noted": True},
            {"id": 3, "doubled": Decimal("-1999999.98"), "noted": False}]
        assert client.get_versions("avro-out-value") == [1]
    finally:
        if worker is not None:
            worker.kill()
        registry.kill()


def test_the_codec_names_what_it_cannot_read_or_write():
    reader = registry_avro("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="not Confluent's Avro framing: 3 bytes starting 7b2231"):
        reader.loads(b'{"1')
    with pytest.raises(ValueError, match="only reads"):
        reader.dumps({"id": 1})
    with pytest.raises(ValueError, match="give both, or neither"):
        registry_avro("http://127.0.0.1:1", subject="s")
