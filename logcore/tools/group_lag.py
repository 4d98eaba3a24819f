"""What a consumer group is behind by, and what its members were given, as a user means them.

Lag. Kafka's kafka-consumer-groups subtracts the committed offset from the high watermark, so
transaction markers and aborted records count as lag: an exactly-once group reading a topic written
in transactions (the connector's change topics) shows LAG 1 on every partition it has caught up
with, the commit marker after the last record it processed. Here the lag is the records a
read_committed consumer of the partition would still receive from the committed offset: counted by
reading them where the committed offset is at most COUNT_LIMIT offsets before the last stable
offset, beyond that the offsets up to the last stable offset (too many by at most one marker per
transaction, negligible at that size).

Assignments. A member's assignment bytes may name a partition twice (faust lists a global table's
changelog partition as active and as standby); Kafka's tool shows each partition once, as here.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

COUNT_LIMIT = 1000

Partition = tuple[str, int]


def assigned(member) -> list[Partition]:
    """A group member's partitions (of a ConsumerGroupDescription's MemberDescription), each once, sorted."""
    return sorted({(tp.topic, tp.partition) for tp in (member.assignment.topic_partitions if member.assignment else [])})


def stable_ends(admin: AdminClient, partitions: list[Partition], timeout_s: float) -> dict[Partition, int]:
    """Each partition's last stable offset: the end of what a read_committed consumer can read."""
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s)
    return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}


def records_behind(client_settings: dict[str, str], committed: dict[Partition, int], ends: dict[Partition, int],
                   timeout_s: float) -> dict[Partition, int]:
    """Per partition with a committed offset and a last stable offset (`ends`), the records a
    read_committed consumer would still receive from the committed offset."""
    behind = {tp: max(ends[tp] - offset, 0) for tp, offset in committed.items() if tp in ends}
    near = {tp: committed[tp] for tp, gap in behind.items() if 0 < gap <= COUNT_LIMIT}
    if near:
        behind.update(_count(client_settings, near, ends, timeout_s))
    return behind


def _count(client_settings: dict[str, str], starts: dict[Partition, int], ends: dict[Partition, int],
           timeout_s: float) -> dict[Partition, int]:
    """Records read from each start up to its end (partitions not done within the timeout are left out)."""
    consumer = Consumer({**client_settings, "group.id": "binlake-lag-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    counts = dict.fromkeys(starts, 0)
    reading = set(starts)
    try:
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
        deadline = time.monotonic() + timeout_s
        while reading and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.2):
                tp = (message.topic(), message.partition())
                if message.error() is not None:
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(message.error())
                    reading.discard(tp)
                elif tp in reading and message.offset() >= ends[tp]:
                    reading.discard(tp)  # (committed after the end was read: not part of this lag)
                elif tp in reading:
                    counts[tp] += 1
    finally:
        consumer.close()
    return {tp: n for tp, n in counts.items() if tp not in reading}
