"""Helpers for tests that drive a real `binlake broker` subprocess (tests/conftest.py)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from testkit.brokerproc import BINLAKE, ROOT, BrokerProcess, free_port

__all__ = ["BINLAKE", "NO_REBALANCE_DELAY", "ROOT", "BrokerProcess", "TO_THE_END", "free_port", "read_to_end"]

# A confluent-kafka reader that reports each partition's end as soon as it is there: librdkafka reports it
# from the empty fetch after the last record, which the broker holds for fetch.wait.max.ms (500 ms unless set).
TO_THE_END = {"enable.partition.eof": True, "fetch.wait.max.ms": 10}

# A broker's config for a test whose classic group (or registry or Connect election) has one member, or all
# at once: no waiting Kafka's 3 s for more members to join an empty group first.
NO_REBALANCE_DELAY = {"group.initial.rebalance.delay.ms": "0"}


def read_to_end(address: str, topics: dict[str, int], isolation: str = "read_uncommitted",
                timeout: float = 30) -> list[bytes]:
    """Every value of every partition of `topics` ({name: partition count}) up to its end (the LSO
    for read_committed), partition by partition, read with a real confluent-kafka consumer."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reader", "enable.auto.commit": False,
                        "isolation.level": isolation, **TO_THE_END})
    consumer.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
    got: dict[tuple[str, int], list[bytes]] = {}
    ended: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    while len(ended) < sum(topics.values()):
        assert time.monotonic() < deadline, f"{isolation} reader never reached the end: {ended}"
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            ended.add((msg.topic(), msg.partition()))
            continue
        got.setdefault((msg.topic(), msg.partition()), []).append(msg.value())
    consumer.close()
    return [v for tp in sorted(got) for v in got[tp]]
