"""Produce and consume back through a real broker with every real client."""

import asyncio
import subprocess

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer, TopicPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


async def test_aiokafka_roundtrip_every_codec(broker):
    for codec in CODECS:
        topic = f"aio-{codec}"
        async with AIOKafkaProducer(bootstrap_servers=broker.address,
                                    compression_type=None if codec == "none" else codec) as p:
            sent = [await p.send_and_wait(topic, f"value-{i}".encode() * 5, key=f"k{i}".encode(), partition=0,
                                          timestamp_ms=1_700_000_000_000 + i) for i in range(20)]
        assert [m.offset for m in sent] == list(range(20))
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
        await consumer.start()
        try:
            got = [await asyncio.wait_for(consumer.getone(), 10) for _ in range(20)]
        finally:
            await consumer.stop()
        assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == [
            (i, f"k{i}".encode(), f"value-{i}".encode() * 5, 1_700_000_000_000 + i) for i in range(20)
        ]


def test_confluent_roundtrip_every_codec(broker):
    for codec in CODECS:
        topic = f"ck-{codec}"
        producer = Producer({"bootstrap.servers": broker.address, "compression.type": codec, "linger.ms": 5})
        values = [bytes([i % 256]) * (i % 300 + 1) for i in range(2000)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value, key=str(i).encode(), partition=0, timestamp=1_600_000_000_000 + i)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < len(values):
            msg = consumer.poll(10)
            assert msg is not None, f"{codec}: only {len(got)} of {len(values)} consumed"
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
        consumer.close()
        assert got == [(i, str(i).encode(), v, 1_600_000_000_000 + i) for i, v in enumerate(values)]


def test_kcat_produce_and_consume(broker, kcat):
    lines = "\n".join(f"key{i}:value{i}" for i in range(50)) + "\n"
    subprocess.run([kcat, "-b", broker.address, "-P", "-t", "kc", "-p", "0", "-K", ":"], input=lines.encode(),
                   check=True, timeout=30)
    out = subprocess.run([kcat, "-b", broker.address, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%o %k %s\n"],
                         capture_output=True, check=True, timeout=30).stdout.decode()
    assert out.splitlines() == [f"{i} key{i} value{i}" for i in range(50)]
