"""Topic configs that change how a log stores records take effect, with real clients; the one the
broker cannot honour is refused (an accepted config that does nothing would be a lie)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from brokerproc import read_to_end
from logcore.config import BrokerConfig, TopicConfig
from logcore.storage.log import PartitionLog
from logcore.storage.records import encode_batch
from waiting import wait_for


def create_topic(address: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def produce(address: str, topic: str, values: list[bytes], timestamp: int | None = None, **config) -> list:
    """The delivery errors, one per failed message."""
    errors = []
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, "retries": 0, **config})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, _: err and errors.append(err),
                         **({"timestamp": timestamp} if timestamp else {}))
    assert producer.flush(30) == 0
    return errors


@pytest.mark.parametrize("stored", ["zstd", "uncompressed"])
def test_compression_type_recompresses_what_producers_send(broker, stored):
    create_topic(broker.address, "t", **{"compression.type": stored})
    sent = [b"value-%d " % i * 20 for i in range(500)]
    assert produce(broker.address, "t", sent, **{"compression.type": "gzip" if stored == "uncompressed" else "none"}) == []
    directory = broker.data_dir / "t-0"
    [log_file] = [str(directory / n) for n in os.listdir(directory) if n.endswith(".log")]
    dumped = subprocess.run([sys.executable, "-m", "binlake.cli", "dump-log", log_file], capture_output=True,
                            text=True, check=True, timeout=60).stdout
    codecs = set(re.findall(r"compresscodec: (\w+)", dumped))
    assert codecs == {"zstd" if stored == "zstd" else "none"}
    assert read_to_end(broker.address, {"t": 1}) == sent


def test_message_timestamps_too_far_in_the_past_or_future_are_refused(broker):
    create_topic(broker.address, "t", **{"message.timestamp.before.max.ms": "60000",
                                         "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    for timestamp in (now - 3_600_000, now + 3_600_000):
        [error] = produce(broker.address, "t", [b"x"], timestamp=timestamp)
        assert error.code() == KafkaError.INVALID_TIMESTAMP
    assert produce(broker.address, "t", [b"in time"], timestamp=now) == []
    assert read_to_end(broker.address, {"t": 1}) == [b"in time"]


def test_preallocate_is_refused_with_a_reason(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("t", 1, 1, config={"preallocate": "true"})])["t"].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "not supported" in refused.value.args[0].str()


def test_an_empty_cleanup_policy_keeps_everything(broker_factory):
    broker = broker_factory(config={"log.retention.check.interval.ms": "100"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    for topic in ("kept", "control"):
        create_topic(broker.address, topic, **{"segment.bytes": "1024", "retention.ms": "1"})
    # Removing "delete" leaves the policy empty: Kafka accepts that as "keep forever" (KAFKA-19112).
    resource = ConfigResource("topic", "kept", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    [configs] = [future.result(30) for future in admin.describe_configs([ConfigResource("topic", "kept")]).values()]
    assert configs["cleanup.policy"].value == ""
    sent = [b"kept-%d" % i * 10 for i in range(200)]
    for topic in ("kept", "control"):
        assert produce(broker.address, topic, sent) == []
    # retention.ms=1 deletes the control topic's records at the next check; the same check spares "kept".
    wait_for(lambda: "control-0: deleted" in broker.log(), "retention to run on the control topic")
    assert read_to_end(broker.address, {"kept": 1}) == sent
    assert "kept-0: deleted" not in broker.log()


def test_segment_jitter_ms_rolls_each_segment_up_to_that_much_earlier(tmp_path):
    config = TopicConfig(BrokerConfig(), {"segment.ms": "60000", "segment.jitter.ms": "60000"})
    log = PartitionLog(str(tmp_path / "t-0"), "t", 0, config)
    log.open(0, clean=False)
    jitters = set()
    for _ in range(20):
        batch = encode_batch([(None, b"x")], int(time.time() * 1000))
        log.append(batch, log.validate(batch))
        jitter = log.roll_jitter_ms
        assert 0 <= jitter < 60000
        jitters.add(jitter)
        now_ms = int(time.time() * 1000)
        log.active.rolling_base_ms = now_ms - (60000 - jitter) + 5000  # 5 s short of its jittered age
        before = len(log.segments)
        log.append(batch, log.validate(batch))
        assert len(log.segments) == before, "rolled before segment.ms - jitter"
        log.active.rolling_base_ms = now_ms - (60000 - jitter) - 1
        log.append(batch, log.validate(batch))
        assert len(log.segments) == before + 1, "did not roll at segment.ms - jitter"
    assert len(jitters) > 1, "every segment drew the same jitter"
