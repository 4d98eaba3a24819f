"""Segment rolling and retention through a real broker: topic configs from CreateTopics, the check
interval from `log.retention.check.interval.ms`, the log start offset seen by real clients."""

import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

FAST_RETENTION = {"log.retention.check.interval.ms": "200"}


def create_topic(address: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def produce(address: str, topic: str, count: int, size: int = 100, timestamp: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(count):
        producer.produce(topic, value=f"{i}:".encode().ljust(size, b"."), partition=0,
                         **({"timestamp": timestamp} if timestamp else {}))
        producer.poll(0)
    assert producer.flush(30) == 0


def watermarks(address: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": "wm"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    finally:
        consumer.close()


def segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(broker.data_dir / f"{topic}-0") if n.endswith(".log"))


def segment_bytes(broker, topic: str) -> int:
    d = broker.data_dir / f"{topic}-0"
    return sum(os.path.getsize(d / n) for n in os.listdir(d) if n.endswith(".log"))


def retained(broker, topic: str, retention_bytes: int) -> bool:
    """Kafka's rule has been applied: dropping the oldest segment would leave less than retention.bytes."""
    try:
        first = os.path.getsize(broker.data_dir / f"{topic}-0" / f"{segment_bases(broker, topic)[0]:020d}.log")
        return segment_bytes(broker, topic) - first < retention_bytes
    except FileNotFoundError:  # a segment went while we looked
        return False


def wait_for(condition, timeout: float = 15, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def first_consumed_offset(address: str, topic: str) -> int:
    """Where a consumer told to start at the beginning (ListOffsets earliest) gets its first record."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "fresh"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msg = wait_for(lambda: consumer.poll(0.5), what="a first record")
        assert msg.error() is None, msg.error()
        return msg.offset()
    finally:
        consumer.close()


def test_segment_bytes_rolls_and_retention_bytes_deletes_oldest_segments(broker_factory):
    broker = broker_factory(config=FAST_RETENTION)
    create_topic(broker.address, "sized", **{"segment.bytes": "2048", "retention.bytes": "6000"})
    produce(broker.address, "sized", 200)
    wait_for(lambda: retained(broker, "sized", 6000), what="retention")
    bases = segment_bases(broker, "sized")
    assert bases[0] > 0 and len(bases) >= 3
    assert all(os.path.getsize(broker.data_dir / "sized-0" / f"{b:020d}.log") <= 2048 for b in bases)
    low, high = watermarks(broker.address, "sized")
    assert (low, high) == (bases[0], 200), "ListOffsets earliest is the first remaining segment's base"
    assert first_consumed_offset(broker.address, "sized") == bases[0]
    broker.kill()
    broker.start()
    assert watermarks(broker.address, "sized") == (bases[0], 200)


def test_retention_ms_deletes_expired_segments_even_the_active_one(broker_factory):
    broker = broker_factory(config=FAST_RETENTION)
    create_topic(broker.address, "aged", **{"retention.ms": "3600000", "segment.bytes": "4096"})
    two_hours_ago = int(time.time() * 1000) - 7_200_000
    produce(broker.address, "aged", 100, timestamp=two_hours_ago)
    wait_for(lambda: watermarks(broker.address, "aged") == (100, 100), what="every old segment to go")
    assert segment_bases(broker, "aged") == [100]
    assert os.path.getsize(broker.data_dir / "aged-0" / f"{100:020d}.log") == 0
    broker.kill()  # the empty active segment left by the roll is all there is
    broker.start()
    assert watermarks(broker.address, "aged") == (100, 100)
    produce(broker.address, "aged", 5)  # current timestamps: kept
    time.sleep(0.6)
    assert watermarks(broker.address, "aged") == (100, 105)
    assert first_consumed_offset(broker.address, "aged") == 100


def test_retention_keeps_recent_segments_by_time(broker_factory):
    broker = broker_factory(config=FAST_RETENTION)
    create_topic(broker.address, "mixed", **{"retention.ms": "3600000", "segment.bytes": "2048"})
    produce(broker.address, "mixed", 40, timestamp=int(time.time() * 1000) - 7_200_000)
    produce(broker.address, "mixed", 40)
    low = wait_for(lambda: watermarks(broker.address, "mixed")[0], what="the old segments to go")
    assert 20 <= low <= 40, "segments holding only old records go; those with new ones stay"
    time.sleep(0.6)
    assert watermarks(broker.address, "mixed") == (low, 80)


def test_segment_ms_rolls_by_age_and_topic_configs_can_change(broker):
    create_topic(broker.address, "timed", **{"segment.ms": "300"})
    produce(broker.address, "timed", 3)
    time.sleep(0.5)
    produce(broker.address, "timed", 3)
    assert segment_bases(broker, "timed") == [0, 3]
    admin = AdminClient({"bootstrap.servers": broker.address})
    resource = ConfigResource("topic", "timed", incremental_configs=[
        ConfigEntry("segment.ms", "604800000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    time.sleep(0.5)
    produce(broker.address, "timed", 3)
    assert segment_bases(broker, "timed") == [0, 3]


def test_broker_level_segment_and_retention_overrides(broker_factory):
    broker = broker_factory(config={**FAST_RETENTION, "log.segment.bytes": "1500", "log.retention.bytes": "3000"})
    produce(broker.address, "auto", 100)  # auto-created topic: broker defaults apply
    wait_for(lambda: retained(broker, "auto", 3000), what="retention")
    assert all(os.path.getsize(broker.data_dir / "auto-0" / f"{b:020d}.log") <= 1500
               for b in segment_bases(broker, "auto"))
    assert watermarks(broker.address, "auto")[0] == segment_bases(broker, "auto")[0]
