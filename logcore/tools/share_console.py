"""`binlake consume --share-group G`: a console share consumer (kafka-console-share-consumer), on
confluent-kafka's ShareConsumer. Records are acquired in the share group and accepted once printed
(implicit acknowledgement): what another member of the group holds is not printed here."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, ShareConsumer

POLL_S = 1.0


@dataclass(frozen=True)
class ShareRecord:
    """A confluent-kafka Message in the shape the console formatter reads (aiokafka's ConsumerRecord)."""

    partition: int
    offset: int
    timestamp_type: int | None  # 0 CreateTime, 1 LogAppendTime, None: none
    timestamp: int
    headers: list
    key: bytes | None
    value: bytes | None

    @classmethod
    def of(cls, message) -> "ShareRecord":
        kind, timestamp = message.timestamp()  # confluent's kinds: 0 none, 1 create time, 2 log append time
        return cls(message.partition(), message.offset(), kind - 1 if kind else None, timestamp,
                   list(message.headers() or []), message.key(), message.value())


def consume_shared(bootstrap: str, topic: str, group: str, max_messages: int | None, timeout_ms: int | None,
                   write) -> int:
    """Print (`write(records)`) what the share group hands this member until `max_messages` or
    `timeout_ms` without one; the count printed."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "client.id": "binlake-console-share-consumer"})
    count = 0
    try:
        consumer.subscribe([topic])
        last = time.monotonic()
        while max_messages is None or count < max_messages:
            messages = consumer.poll(POLL_S if timeout_ms is None else min(POLL_S, timeout_ms / 1000))
            records = []
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
                records.append(ShareRecord.of(message))
            records = records[:None if max_messages is None else max_messages - count]
            if records:
                write(records)
                count += len(records)
                last = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                break
        consumer.commit_sync(30)  # (the last poll's records, accepted)
    finally:
        consumer.close()
    return count
