"""`binlake mirror-maker` between two real brokers: every record of the matching topics lands once,
with its key, headers and partition, even when the mirror is SIGKILLed mid-stream and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from brokerproc import ROOT, TO_THE_END
from waiting import wait_for


def records(address: str, topic: str, partitions: int) -> list[tuple]:
    """(partition, key, value, headers) of every committed record, partition by partition."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "check", "enable.auto.commit": False,
                         "isolation.level": "read_committed", **TO_THE_END})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, ended, deadline = [], set(), time.monotonic() + 60
    while len(ended) < partitions:
        assert time.monotonic() < deadline, "never reached the end"
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            ended.add(message.partition())
            continue
        got.append((message.partition(), message.key(), message.value(), tuple(message.headers() or ())))
    consumer.close()
    return sorted(got, key=lambda r: r[0])  # stable: each partition's order is kept


def committed_count(address: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": address, "group.id": "count", "isolation.level": "read_committed"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    except Exception:
        return 0
    finally:
        consumer.close()


# Against Apache Kafka (either side) the test is `slow`: a JVM broker's start is most of its time.
@pytest.mark.parametrize("source_kind,target_kind", [
    ("logcore", "logcore"),
    pytest.param("logcore", "kafka", marks=[pytest.mark.kafka, pytest.mark.slow]),
    pytest.param("kafka", "logcore", marks=[pytest.mark.kafka, pytest.mark.slow])])
def test_a_killed_mirror_resumes_and_the_target_equals_the_source(request, tmp_path, source_kind, target_kind):
    def start(kind: str, name: str):
        return request.getfixturevalue("broker_factory" if kind == "logcore" else "apache_kafka_factory")(name=name)
    source, target = start(source_kind, "source"), start(target_kind, "target")
    admin = AdminClient({"bootstrap.servers": source.address})
    for topic in ("shop.orders", "other"):
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": source.address, "linger.ms": 5})
    for i in range(6000):
        producer.produce("shop.orders", key=b"k%d" % (i % 50), value=b"v%d" % i, headers=[("n", b"%d" % i)])
        producer.poll(0)
    producer.produce("other", b"not mirrored")
    assert producer.flush(30) == 0
    command = [sys.executable, "-m", "binlake.cli", "mirror-maker", "--source", source.address,
               "--target", target.address, "--include", r"shop\..*"]
    log = open(tmp_path / "mirror.log", "ab")
    first = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
    try:
        wait_for(lambda: committed_count(target.address, "shop.orders", 3) > 0, "the mirror's first transactions")
    finally:
        os.kill(first.pid, signal.SIGKILL)  # mid-stream: an open transaction must never show
        first.wait()
    second = subprocess.run([*command, "--max-idle-ms", "3000"], cwd=ROOT, stdout=log, stderr=log, timeout=300)
    assert second.returncode == 0, (tmp_path / "mirror.log").read_text()[-3000:]
    assert records(target.address, "shop.orders", 3) == records(source.address, "shop.orders", 3)
    assert "other" not in AdminClient({"bootstrap.servers": target.address}).list_topics(timeout=10).topics
