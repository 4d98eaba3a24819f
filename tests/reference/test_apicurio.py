"""Apicurio Registry's Java serdes (2.6 and 3.1, from Maven Central) against `binlake schema-registry` on logcore,
through Apicurio's v2 REST API (registry/apicurio.py), in Confluent's framing (`as-confluent`, the id a contentId):
what Java writes, confluent-kafka's AvroDeserializer reads, and what confluent-kafka's AvroSerializer writes,
Java reads, both authenticating with HTTP Basic. Debezium on Kafka Connect with Apicurio's AvroConverter beside
binlake's connector: test_apicurio_debezium.py."""

from __future__ import annotations

import datetime
import json
import struct
import subprocess
from pathlib import Path

import httpx2 as httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from brokerproc import NO_REBALANCE_DELAY, read_to_end
from testkit.reference import JAVA, MissingReference, apicurio_classpath
from testkit.registryproc import RegistryProcess

pytestmark = pytest.mark.java

COUNT = 30
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": "double"}, {"name": "paid", "type": "boolean"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
EPOCH_MS = 1700000000000
USER, PASSWORD = "serde", "serde-secret"


def order(i: int) -> dict:
    """The order ApicurioAvro.java writes for i."""
    return {"id": i, "note": None if i % 3 == 0 else f"n{i}", "amount": i * 1.5, "paid": i % 2 == 0,
            "placed": datetime.datetime.fromtimestamp((EPOCH_MS + i * 1000) / 1000, datetime.timezone.utc)}


@pytest.fixture
def compiled(line, tmp_path) -> tuple[str, Path]:
    """(classpath, directory of the ApicurioAvro class compiled against it) for Apicurio's `line` (2 or 3)."""
    try:
        jars = apicurio_classpath(line)
    except MissingReference as exc:
        pytest.fail(str(exc))
    source = Path(__file__).parent / "java" / "ApicurioAvro.java"
    subprocess.run(["javac", "-cp", jars, "-d", str(tmp_path), str(source)], check=True, timeout=120)
    return jars, tmp_path


@pytest.fixture
def broker(broker_factory):
    return broker_factory(NO_REBALANCE_DELAY)  # (the registry's election)


@pytest.fixture
def secured_registry(broker, tmp_path):
    """`binlake schema-registry` with HTTP Basic authentication (USER, PASSWORD)."""
    (tmp_path / "users").write_text(f"{USER}: {PASSWORD}\n")
    process = RegistryProcess(broker.address, tmp_path / "registry.log", None, "--basic-auth-users",
                              str(tmp_path / "users")).start()
    yield process
    process.kill()


def apicurio_avro(jars: tuple[str, Path], *args: str) -> str:
    classpath, classes = jars
    done = subprocess.run([JAVA, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                           f"{classes}:{classpath}", "ApicurioAvro", *args, USER, PASSWORD],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"ApicurioAvro {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.parametrize("line", ["2", pytest.param("3", marks=pytest.mark.slow)])  # 2.6.13 and 3.1.7
def test_apicurio_serdes_and_confluent_kafka_read_each_others_avro(line, compiled, broker, secured_registry):
    """Through a registry with Basic authentication, which both clients send."""
    url = f"{secured_registry.url}/apis/registry/v2"
    assert httpx.get(f"{url}/ids/contentIds/1").status_code == 401
    client = SchemaRegistryClient({"url": secured_registry.url, "basic.auth.user.info": f"{USER}:{PASSWORD}"})

    # Java writes through Apicurio's API; Python reads the Confluent framing with the schema by its id
    apicurio_avro(compiled, "produce", broker.address, url, "java-orders", str(COUNT))
    written = read_to_end(broker.address, {"java-orders": 1})
    registered = client.get_latest_version("java-orders-value")
    assert (registered.version, json.loads(registered.schema.schema_str)) == (1, ORDER)
    assert {value[:5] for value in written} == {b"\0" + struct.pack(">I", registered.schema_id)}
    reader = AvroDeserializer(client)
    context = SerializationContext("java-orders", MessageField.VALUE)
    assert [reader(value, context) for value in written] == [order(i) for i in range(COUNT)]

    # Python registers through Confluent's API and writes; Java reads by the id in each record
    writer = AvroSerializer(client, json.dumps(ORDER))
    producer = Producer({"bootstrap.servers": broker.address})
    for i in range(COUNT):
        producer.produce("python-orders", key=str(i), value=writer(order(i), SerializationContext(
            "python-orders", MessageField.VALUE)))
    assert producer.flush(30) == 0
    printed = apicurio_avro(compiled, "consume", broker.address, url, "python-orders", str(COUNT))
    assert [json.loads(line) for line in printed.splitlines()] == [
        {**order(i), "placed": EPOCH_MS + i * 1000} for i in range(COUNT)]
    # the same schema under both subjects is one id, as in Confluent's registry
    assert client.get_latest_version("python-orders-value").schema_id == registered.schema_id
