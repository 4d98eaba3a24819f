"""What real clients expect of a broker: version negotiation, keyed partitioning, offsets by time,
long-poll wake-up, out-of-range resets and timestamps — checked with kafka-python, aiokafka,
confluent-kafka (librdkafka 2.16) and kcat (librdkafka 2.0)."""

import asyncio
import re
import subprocess
import threading
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import (OFFSET_END, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

BASE_TS = 1_700_000_000_000


def create_topic(address: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(30)


def produce_one_batch_each(address: str, topic: str, values: list[bytes], timestamps: list[int] | None = None,
                           partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=partition, timestamp=timestamps[i] if timestamps else 0)
        assert producer.flush(10) == 0


def confluent_consumer(address: str, **config) -> Consumer:
    return Consumer({"bootstrap.servers": address, "group.id": "tests", "enable.auto.commit": False, **config})


def poll_values(consumer: Consumer, count: int, timeout: float = 15) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg)
    return got


# ---------------------------------------------------------------------------------------------
# Version negotiation


def test_librdkafka_2_0_enables_every_feature_the_broker_has(broker, kcat):
    """kcat (librdkafka 2.0.2) decides features from ApiVersions; each needs a common version."""
    out = subprocess.run([kcat, "-b", broker.address, "-L", "-d", "feature"], capture_output=True, timeout=30,
                         check=True).stderr.decode()
    enabled = set(re.findall(r"Enabling feature (\w+)", out))
    assert {"ApiVersion", "MsgVer2", "OffsetTime", "ZSTD", "LZ4", "IdempotentProducer",
            "BrokerBalancedConsumer", "BrokerGroupCoordinator"} <= enabled, enabled


def test_librdkafka_2_16_picks_the_newest_versions(broker):
    """librdkafka 2.16 opens with ApiVersions v3 and then uses Metadata v13, Fetch with topic ids."""
    lines: list[str] = []
    logger = type("L", (), {"log": lambda self, level, fmt, *args: lines.append(fmt % args if args else fmt)})()
    config = {"bootstrap.servers": broker.address, "debug": "protocol", "logger": logger}
    producer = Producer({**config, "linger.ms": 0})
    producer.produce("neg", b"v", partition=0)
    assert producer.flush(10) == 0
    consumer = confluent_consumer(broker.address, **config)
    consumer.assign([TopicPartition("neg", 0, 0)])
    assert poll_values(consumer, 1)[0].value() == b"v"
    consumer.close()
    sent = dict(re.findall(r"Sent (\w+)Request \(v(\d+)", "\n".join(lines)))
    assert {k: int(v) for k, v in sent.items() if k in ("ApiVersion", "Metadata", "Fetch")} == {
        "ApiVersion": 3, "Metadata": 13, "Fetch": 16}
    assert int(sent["Produce"]) >= 9
    assert not [line for line in lines if "UNSUPPORTED_VERSION" in line or "Unsupported" in line]


# ---------------------------------------------------------------------------------------------
# Round trips and partitioning


def test_kafka_python_roundtrip(broker):
    producer = KafkaProducer(bootstrap_servers=broker.address)  # idempotent by default in 3.0
    sent = [producer.send("kp", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0).get(10)
            for i in range(50)]
    producer.close()
    assert [m.offset for m in sent] == list(range(50))
    consumer = KafkaConsumer(bootstrap_servers=broker.address, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000)
    consumer.assign([KpTopicPartition("kp", 0)])
    got = []
    for msg in consumer:
        got.append((msg.offset, msg.key, msg.value))
        if len(got) == 50:
            break
    consumer.close()
    assert got == [(i, f"k{i}".encode(), f"v{i}".encode()) for i in range(50)]


def test_keyed_partitioning_agrees_across_clients(broker):
    create_topic(broker.address, "keyed", partitions=6)
    keys = [f"customer-{i}".encode() for i in range(60)]

    confluent = {}
    producer = Producer({"bootstrap.servers": broker.address, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce("keyed", b"c", key=key,
                         on_delivery=lambda err, msg: confluent.update({msg.key(): msg.partition()}))
    assert producer.flush(10) == 0

    kp_producer = KafkaProducer(bootstrap_servers=broker.address)
    kafka_python = {key: kp_producer.send("keyed", key=key, value=b"k").get(10).partition for key in keys}
    kp_producer.close()

    async def aiokafka_partitions() -> dict:
        async with AIOKafkaProducer(bootstrap_servers=broker.address) as p:
            return {key: (await p.send_and_wait("keyed", b"a", key=key)).partition for key in keys}

    aio = asyncio.run(aiokafka_partitions())
    assert confluent == kafka_python == aio
    assert len(set(aio.values())) == 6, "60 keys should land on every one of 6 partitions"

    # And the broker stored each message where the producers were told it went.
    consumer = confluent_consumer(broker.address)
    consumer.assign([TopicPartition("keyed", p, 0) for p in range(6)])
    stored = poll_values(consumer, 180)
    consumer.close()
    assert {(m.key(), m.partition()) for m in stored} == set(aio.items())


# ---------------------------------------------------------------------------------------------
# Offsets by time


def test_offsets_for_times(broker):
    timestamps = [BASE_TS + 1000 * i for i in range(5)]
    produce_one_batch_each(broker.address, "times", [f"m{i}".encode() for i in range(5)], timestamps)
    # A batch of several records: the answer is the first record at or after the time, not the batch start.
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 200})
    for i in range(5, 10):
        producer.produce("times", f"m{i}".encode(), partition=0, timestamp=BASE_TS + 1000 * i)
    assert producer.flush(10) == 0

    consumer = confluent_consumer(broker.address)
    asked = [BASE_TS + 2500, BASE_TS, BASE_TS - 1, BASE_TS + 7000, BASE_TS + 99_000]
    found = [consumer.offsets_for_times([TopicPartition("times", 0, ts)], timeout=10)[0].offset for ts in asked]
    consumer.close()
    assert found == [3, 0, 0, 7, OFFSET_END]

    async def aiokafka_offsets() -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.address)
        await consumer.start()
        try:
            tp = AioTopicPartition("times", 0)
            return [(await consumer.offsets_for_times({tp: ts}))[tp] for ts in asked]
        finally:
            await consumer.stop()

    got = asyncio.run(aiokafka_offsets())
    assert [(g.offset, g.timestamp) if g else None for g in got] == [
        (3, BASE_TS + 3000), (0, BASE_TS), (0, BASE_TS), (7, BASE_TS + 7000), None]


# ---------------------------------------------------------------------------------------------
# Fetch behaviour seen by consumers


def test_long_poll_delivers_new_data_at_once(broker):
    produce_one_batch_each(broker.address, "lp", [b"old"])
    consumer = confluent_consumer(broker.address, **{"fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition("lp", 0, 1)])
    assert consumer.poll(1.5) is None  # now parked in a 5 s long poll at the end of the log
    produced_at = []

    def produce_later() -> None:
        time.sleep(0.5)
        produced_at.append(time.monotonic())
        produce_one_batch_each(broker.address, "lp", [b"new"])

    thread = threading.Thread(target=produce_later)
    thread.start()
    msg = poll_values(consumer, 1, timeout=10)[0]
    received = time.monotonic()
    thread.join()
    consumer.close()
    assert msg.value() == b"new"
    assert received - produced_at[0] < 2.0, f"took {received - produced_at[0]:.2f}s; the fetch slept on"


def test_offset_out_of_range_triggers_auto_offset_reset(broker):
    produce_one_batch_each(broker.address, "reset", [b"a", b"b", b"c"])

    earliest = confluent_consumer(broker.address, **{"auto.offset.reset": "earliest"})
    earliest.assign([TopicPartition("reset", 0, 1000)])
    assert [m.offset() for m in poll_values(earliest, 3)] == [0, 1, 2]
    earliest.close()

    latest = confluent_consumer(broker.address, **{"auto.offset.reset": "latest"})
    latest.assign([TopicPartition("reset", 0, 1000)])
    assert latest.poll(2) is None
    produce_one_batch_each(broker.address, "reset", [b"d"])
    assert [(m.offset(), m.value()) for m in poll_values(latest, 1)] == [(3, b"d")]
    latest.close()

    kp = KafkaConsumer(bootstrap_servers=broker.address, auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    tp = KpTopicPartition("reset", 0)
    kp.assign([tp])
    kp.seek(tp, 1000)
    assert next(iter(kp)).offset == 0
    kp.close()

    async def aiokafka_reset() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.address, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = AioTopicPartition("reset", 0)
            consumer.assign([tp])
            consumer.seek(tp, 1000)
            return (await asyncio.wait_for(consumer.getone(), 10)).offset
        finally:
            await consumer.stop()

    assert asyncio.run(aiokafka_reset()) == 0


# ---------------------------------------------------------------------------------------------
# Timestamps


def test_create_time_is_kept(broker):
    produce_one_batch_each(broker.address, "ct", [b"x"], [BASE_TS + 42])
    consumer = confluent_consumer(broker.address)
    consumer.assign([TopicPartition("ct", 0, 0)])
    msg = poll_values(consumer, 1)[0]
    consumer.close()
    assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, BASE_TS + 42)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_log_append_time_replaces_the_producers_timestamp(broker, client):
    topic = f"lat-{client}"
    create_topic(broker.address, topic, **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    if client == "confluent":
        reported = []
        producer = Producer({"bootstrap.servers": broker.address})
        producer.produce(topic, b"x", partition=0, timestamp=BASE_TS,
                         on_delivery=lambda err, msg: reported.append(msg.timestamp()))
        assert producer.flush(10) == 0
        kind, acked_ts = reported[0]
        assert kind == TIMESTAMP_LOG_APPEND_TIME
    else:
        producer = KafkaProducer(bootstrap_servers=broker.address)
        acked_ts = producer.send(topic, b"x", partition=0, timestamp_ms=BASE_TS).get(10).timestamp
        producer.close()
    after = int(time.time() * 1000)
    assert before <= acked_ts <= after, "the produce response carries the broker's append time"

    consumer = confluent_consumer(broker.address)
    consumer.assign([TopicPartition(topic, 0, 0)])
    msg = poll_values(consumer, 1)[0]
    consumer.close()
    assert msg.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, acked_ts)


# ---------------------------------------------------------------------------------------------
# Durability settings


def test_acks_all_needs_min_insync_replicas_in_sync(broker):
    """One broker is an ISR of one: with min.insync.replicas=2 an acks=all write is refused with
    NOT_ENOUGH_REPLICAS and nothing is written, acks=1 is taken, and lowering the setting lets
    acks=all through."""
    create_topic(broker.address, "misr", **{"min.insync.replicas": "2"})

    def produce(acks: str):
        reported = []
        producer = Producer({"bootstrap.servers": broker.address, "acks": acks, "retries": 0, "linger.ms": 0})
        producer.produce("misr", b"x", partition=0, on_delivery=lambda err, msg: reported.append((err, msg.offset())))
        producer.flush(30)
        return reported[0]

    err, _ = produce("all")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    assert produce("1") == (None, 0), "acks=1 does not wait for replicas, and the refused write left nothing"
    admin = AdminClient({"bootstrap.servers": broker.address})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "misr",
                              incremental_configs=[ConfigEntry("min.insync.replicas", "1",
                                                               incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert produce("all") == (None, 1)
