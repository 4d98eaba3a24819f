"""`binlake schema-registry` on a real broker, driven by confluent-kafka's own SchemaRegistryClient and its
Avro serializers: registration, lookup, compatibility, deletes with Confluent's error codes, state
read back from `_schemas` by a restarted registry, writes forwarded by a follower, and Avro records
produced and consumed through the broker."""

from __future__ import annotations

import base64
import json
import struct

import httpx2 as httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from brokerproc import NO_REBALANCE_DELAY
from testkit.registryproc import RegistryProcess
from waiting import wait_for


def record(*fields, name="User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": list(fields)})


NAME = {"name": "name", "type": "string"}
V1 = record(NAME)
V2 = record(NAME, {"name": "age", "type": "int", "default": 0})
NO_DEFAULT = record(NAME, {"name": "email", "type": "string"})


def client(registry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def refused(call, *args, **kwargs) -> tuple[int, int, str]:
    """(HTTP status, Confluent error code, message) of a call the registry must refuse."""
    with pytest.raises(SchemaRegistryError) as caught:
        call(*args, **kwargs)
    return caught.value.http_status_code, caught.value.error_code, caught.value.error_message


def test_register_lookup_and_read_back(registry):
    sr = client(registry)
    first = sr.register_schema("users-value", Schema(V1, "AVRO"))
    assert SchemaRegistryClient({"url": registry.url}).register_schema("users-value", Schema(V1, "AVRO")) == first
    second = sr.register_schema("users-value", Schema(V2, "AVRO"))
    assert second > first
    assert sr.get_versions("users-value") == [1, 2]
    assert "users-value" in sr.get_subjects()
    latest = sr.get_latest_version("users-value")
    assert (latest.version, latest.schema_id, json.loads(latest.schema.schema_str)) == (2, second, json.loads(V2))
    assert json.loads(sr.get_schema_by_guid(latest.guid).schema_str) == json.loads(V2)
    found = sr.lookup_schema("users-value", Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, first)
    # the same schema in another subject keeps its id; the id names both subjects
    assert sr.register_schema("people-value", Schema(V1, "AVRO")) == first
    assert sorted(sr.get_subjects_by_schema_id(first)) == ["people-value", "users-value"]
    assert json.loads(SchemaRegistryClient({"url": registry.url}).get_schema(second).schema_str) == json.loads(V2)
    assert sr.get_schema_types() == ["AVRO", "JSON", "PROTOBUF"]
    assert refused(sr.lookup_schema, "users-value", Schema(NO_DEFAULT, "AVRO"))[:2] == (404, 40403)
    assert refused(sr.get_version, "nobody", 1)[:2] == (404, 40401)
    assert refused(sr.get_version, "users-value", 7)[:2] == (404, 40402)
    assert refused(SchemaRegistryClient({"url": registry.url}).get_schema, 999)[:2] == (404, 40403)


def test_incompatible_schema_is_409_and_levels_are_configurable(registry):
    sr = client(registry)
    sr.register_schema("orders-value", Schema(V1, "AVRO"))
    status, code, message = refused(sr.register_schema, "orders-value", Schema(NO_DEFAULT, "AVRO"))
    assert (status, code) == (409, 409)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in message and "'email'" in message
    assert sr.test_compatibility("orders-value", Schema(NO_DEFAULT, "AVRO")) is False
    assert sr.test_compatibility("orders-value", Schema(V2, "AVRO")) is True
    assert sr.get_compatibility() == "BACKWARD"


def test_import_mode_keeps_the_ids_and_versions_it_is_given(registry):
    sr = client(registry)
    outside = httpx.post(f"{registry.url}/subjects/imported-value/versions",
                         json={"schema": V1, "id": 5000, "version": 7})
    assert (outside.status_code, outside.json()["error_code"]) == (422, 42205)  # not in IMPORT mode
    assert sr.update_mode("imported-value", "IMPORT") == "IMPORT"
    answer = httpx.post(f"{registry.url}/subjects/imported-value/versions", json={"schema": V1, "id": 5000,
                                                                                   "version": 7})
    assert answer.json()["id"] == 5000
    assert (sr.get_version("imported-value", 7).schema_id, sr.get_versions("imported-value")) == (5000, [7])
    again = httpx.post(f"{registry.url}/subjects/imported-value/versions", json={"schema": V2, "id": 5001,
                                                                                  "version": 7})
    assert (again.status_code, again.json()["error_code"]) == (422, 42205)  # version 7 exists
    taken = httpx.post(f"{registry.url}/subjects/imported-value/versions", json={"schema": V2, "id": 5000,
                                                                                  "version": 8})
    assert (taken.status_code, taken.json()["error_code"]) == (422, 42205)  # id 5000 holds another schema
    sr.delete_mode("imported-value")
    fresh = record(NAME, {"name": "imported_at", "type": "long", "default": 0})
    assert sr.register_schema("imported-value", Schema(fresh, "AVRO")) == 5001  # ids go on past the imported
    sr.set_compatibility("orders-value", "FORWARD")  # readers of v1 ignore the new field: allowed now
    assert sr.get_compatibility("orders-value") == "FORWARD"
    assert sr.register_schema("orders-value", Schema(NO_DEFAULT, "AVRO")) > 0
    assert refused(sr.set_compatibility, "orders-value", "SIDEWAYS")[:2] == (422, 42203)
    assert refused(sr.register_schema, "orders-value", Schema('{"type": "nope"}', "AVRO"))[:2] == (422, 42201)
    raw = httpx.get(f"{registry.url}/subjects/orders-value/versions/0")
    assert (raw.status_code, raw.json()["error_code"]) == (422, 42202)


def test_soft_and_hard_deletes(registry):
    sr = client(registry)
    sr.register_schema("carts-value", Schema(V1, "AVRO"))
    sr.register_schema("carts-value", Schema(V2, "AVRO"))
    assert refused(sr.delete_version, "carts-value", 1, permanent=True)[:2] == (404, 40407)
    assert sr.delete_version("carts-value", 1) == 1
    assert sr.get_versions("carts-value") == [2]
    assert httpx.get(f"{registry.url}/subjects/carts-value/versions", params={"deleted": "true"}).json() == [1, 2]
    assert refused(sr.delete_version, "carts-value", 1)[:2] == (404, 40406)
    assert sr.delete_version("carts-value", 1, permanent=True) == 1
    assert refused(sr.delete_subject, "carts-value", permanent=True)[:2] == (404, 40405)
    assert sr.delete_subject("carts-value") == [2]
    assert "carts-value" not in sr.get_subjects()
    assert "carts-value" in httpx.get(f"{registry.url}/subjects", params={"deleted": "true"}).json()
    assert refused(sr.delete_subject, "carts-value")[:2] == (404, 40404)
    assert refused(sr.get_versions, "carts-value")[:2] == (404, 40401)
    assert sr.delete_subject("carts-value", permanent=True) == [2]
    assert "carts-value" not in httpx.get(f"{registry.url}/subjects", params={"deleted": "true"}).json()
    # a subject registered again after a hard delete starts at version 1
    sr.register_schema("carts-value", Schema(V1, "AVRO"))
    assert sr.get_versions("carts-value") == [1]


def test_references_and_a_referenced_schema_cannot_be_deleted(registry):
    sr = client(registry)
    address = json.dumps({"type": "record", "name": "Address", "namespace": "shop",
                          "fields": [{"name": "city", "type": "string"}]})
    sr.register_schema("address", Schema(address, "AVRO"))
    customer = record(NAME, {"name": "home", "type": "shop.Address"}, name="Customer")
    reference = SchemaReference("shop.Address", "address", 1)
    customer_id = sr.register_schema("customers-value", Schema(customer, "AVRO", [reference]))
    got = sr.get_latest_version("customers-value").schema
    assert [(r.name, r.subject, r.version) for r in got.references] == [("shop.Address", "address", 1)]
    assert httpx.get(f"{registry.url}/subjects/address/versions/1/referencedby").json() == [customer_id]
    assert refused(sr.delete_subject, "address")[:2] == (422, 42206)
    # without the reference the named type is unknown
    assert refused(sr.register_schema, "other-value", Schema(customer, "AVRO"))[:2] == (422, 42201)


def test_json_and_protobuf_schemas(registry):
    sr = client(registry)
    closed = {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": False}
    sr.register_schema("events-value", Schema(json.dumps(closed), "JSON"))
    widened = {**closed, "properties": {"id": {"type": "number"}}}
    assert sr.register_schema("events-value", Schema(json.dumps(widened), "JSON")) > 0
    narrowed = {**closed, "properties": {"id": {"type": "string"}}}
    assert refused(sr.register_schema, "events-value", Schema(json.dumps(narrowed), "JSON"))[:2] == (409, 409)
    proto = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string note = 2; }'
    proto_id = sr.register_schema("proto-value", Schema(proto, "PROTOBUF"))
    # the ProtobufDeserializer asks for the compiled descriptor (format=serialized)
    serialized = httpx.get(f"{registry.url}/schemas/ids/{proto_id}", params={"format": "serialized"}).json()
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert [m.name for m in descriptor.message_type] == ["Order"] and descriptor.package == "shop"
    changed = proto.replace("string note", "double note")
    assert refused(sr.register_schema, "proto-value", Schema(changed, "PROTOBUF"))[:2] == (409, 409)
    assert refused(sr.register_schema, "proto-value", Schema("message {", "PROTOBUF"))[:2] == (422, 42201)


def test_modes_and_configs(registry):
    sr = client(registry)
    sr.register_schema("ro-value", Schema(V1, "AVRO"))
    assert sr.update_mode("ro-value", "READONLY") == "READONLY"
    assert refused(sr.register_schema, "ro-value", Schema(V2, "AVRO"))[:2] == (422, 42205)
    assert sr.delete_mode("ro-value") == "READONLY"
    assert sr.get_global_mode() == "READWRITE"
    assert refused(sr.get_config, "ro-value")[:2] == (404, 40408)
    sr.set_compatibility(level="FULL")
    try:
        assert sr.get_config().compatibility_level == "FULL"
        assert httpx.get(f"{registry.url}/config/ro-value", params={"defaultToGlobal": "true"}).json() == {
            "compatibilityLevel": "FULL"}
    finally:
        assert sr.delete_config().compatibility_level == "FULL"  # back to the default for the module's others
    assert sr.get_compatibility() == "BACKWARD"


def test_a_restarted_registry_reads_everything_back_from_the_topic(registry_factory):
    first = registry_factory("first")
    sr = client(first)
    ids = [sr.register_schema("a-value", Schema(V1, "AVRO")), sr.register_schema("a-value", Schema(V2, "AVRO")),
           sr.register_schema("b-value", Schema(NO_DEFAULT, "AVRO"))]
    sr.set_compatibility("b-value", "NONE")
    sr.delete_version("a-value", 1)
    before = {path: httpx.get(f"{first.url}{path}").json() for path in (
        "/subjects", "/subjects/a-value/versions?deleted=true", "/subjects/a-value/versions",
        "/subjects/a-value/versions/2", "/subjects/b-value/versions/latest", "/config/b-value",
        f"/schemas/ids/{ids[2]}")}
    first.stop()
    second = registry_factory("second")
    after = {path: httpx.get(f"{second.url}{path}").json() for path in before}
    assert after == before
    # ids go on from the highest one, never reused
    assert client(second).register_schema("c-value", Schema(record({"name": "z", "type": "long"}), "AVRO")) == \
        max(ids) + 1


def test_a_follower_forwards_writes_to_the_leader(registry_factory):
    leader = registry_factory("leader")
    client(leader).register_schema("f-value", Schema(V1, "AVRO"))  # (the first instance has been elected)
    follower = registry_factory("follower", "--no-leader-eligibility")
    schema_id = client(follower).register_schema("f-value", Schema(V2, "AVRO"))
    assert client(leader).get_latest_version("f-value").schema_id == schema_id
    wait_for(lambda: httpx.get(f"{follower.url}/subjects/f-value/versions").json() == [1, 2],
             "the follower to read the forwarded write back from the topic")
    metrics = httpx.get(f"{leader.url}/metrics").text
    assert "binlake_registry_leader 1.0" in metrics
    assert "binlake_registry_leader 0.0" in httpx.get(f"{follower.url}/metrics").text


def test_avro_round_trip_through_the_broker_with_confluents_serializers(sr_broker, registry):
    sr = client(registry)
    serializer = AvroSerializer(sr, V2)
    deserializer = AvroDeserializer(sr)
    users = [{"name": "ada", "age": 36}, {"name": "grace", "age": 85}, {"name": "édouard", "age": 0}]
    producer = Producer({"bootstrap.servers": sr_broker.address})
    context = SerializationContext("users", MessageField.VALUE)
    payloads = [serializer(user, context) for user in users]
    for payload in payloads:
        producer.produce("users", payload)
    assert producer.flush(30) == 0
    magic, schema_id = struct.unpack(">bI", payloads[0][:5])  # Confluent's wire format: 0, then the id
    assert (magic, schema_id) == (0, sr.get_latest_version("users-value").schema_id)
    consumer = Consumer({"bootstrap.servers": sr_broker.address, "group.id": "avro-reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["users"])
    got = []
    try:
        def read():
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(AvroDeserializer(SchemaRegistryClient({"url": registry.url}))(message.value(), context))
            return len(got) == len(users)
        wait_for(read, "three Avro records back from the broker")
    finally:
        consumer.close()
    assert got == users
    assert deserializer(payloads[1], context) == users[1]


def leads(process) -> bool:
    return "binlake_registry_leader 1.0" in httpx.get(f"{process.url}/metrics").text


@pytest.mark.parametrize("how", ["stop", pytest.param("kill", marks=pytest.mark.slow)])
def test_another_instance_takes_over_when_the_leader_goes(registry_factory, how):
    """Stopped, the leader leaves the group and the other leads at once; SIGKILLed, after its session
    times out (10 s). Writes sent to the survivor meanwhile are refused with 5000x, never lost."""
    first = registry_factory("first")
    client(first).register_schema("h-value", Schema(V1, "AVRO"))
    second = registry_factory("second")
    wait_for(lambda: not leads(second) and leads(first), "the first instance to stay the leader")
    first.stop() if how == "stop" else first.kill()

    def registered():
        try:
            return client(second).register_schema("h-value", Schema(V2, "AVRO"))
        except SchemaRegistryError as exc:
            assert exc.error_code in (50003, 50004), exc
            return None
    schema_id = wait_for(registered, "the second instance to lead and take the write", timeout=40)
    assert leads(second)
    assert client(second).get_latest_version("h-value").schema_id == schema_id
    assert client(second).get_versions("h-value") == [1, 2]


@pytest.mark.kafka
@pytest.mark.slow
def test_on_apache_kafka(apache_kafka_factory, tmp_path):
    """The registry on Apache Kafka instead of logcore: the same topic, group and records."""
    kafka = apache_kafka_factory({"group.initial.rebalance.delay.ms": "0"})
    first = RegistryProcess(kafka.address, tmp_path / "first.log").start()
    try:
        ids = [client(first).register_schema("k-value", Schema(s, "AVRO")) for s in (V1, V2)]
        assert refused(client(first).register_schema, "k-value", Schema(NO_DEFAULT, "AVRO"))[:2] == (409, 409)
    finally:
        first.stop()
    second = RegistryProcess(kafka.address, tmp_path / "second.log").start()
    try:
        assert [client(second).get_version("k-value", v).schema_id for v in (1, 2)] == ids
    finally:
        second.kill()


def test_the_registry_rides_out_a_broker_restart(broker_factory, tmp_path):
    broker = broker_factory(NO_REBALANCE_DELAY)
    registry = RegistryProcess(broker.address, tmp_path / "registry.log").start()
    try:
        first = client(registry).register_schema("r-value", Schema(V1, "AVRO"))
        broker.kill()
        broker.start(timeout=60)

        def registered():
            try:
                return client(registry).register_schema("r-value", Schema(V2, "AVRO"))
            except SchemaRegistryError as exc:
                assert exc.error_code in (50001, 50002, 50003, 50004), exc
                return None
        second = wait_for(registered, "a write after the broker's restart")
        assert second > first and client(registry).get_versions("r-value") == [1, 2]
        assert registry.proc.poll() is None
    finally:
        registry.kill()
