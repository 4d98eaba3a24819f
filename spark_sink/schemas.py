"""Where a micro-batch learns its tables' columns, primary keys and TRUNCATEs.

Debezium: from the connector's schema-change topic, read on the driver with a read_committed
consumer up to its end at every batch (it is small, and the rows a batch holds were committed
after the schema changes they follow). Canal: from the batch itself, since every Canal message
carries `mysqlType` and `pkNames`.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from common.kafka_security import KafkaSecurity

from .changes import Column, MySqlType, SchemaHistory, TableSchema, debezium_sequence


class DebeziumSchemas:
    """Reads the schema topic from where the last catch-up ended, with a new consumer each time:
    librdkafka reports a partition's end only once per consumer, so a long-lived one could not tell
    "nothing new" from "not there yet". A catch-up that hears nothing for `stall_timeout_s` (the
    brokers gone) fails the batch with that said, rather than wait for ever."""

    stall_timeout_s = 120.0

    def __init__(self, bootstrap_servers: str, topic: str, security: KafkaSecurity = KafkaSecurity()) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self.topic = topic
        self.history = SchemaHistory()
        consumer = self._consumer()
        try:
            metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        finally:
            consumer.close()
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise RuntimeError(f"schema topic {topic!r} not found on {bootstrap_servers}: set schema_topic to the "
                               f"connector's name (its schema changes go there)")
        self._next = {p: 0 for p in metadata.partitions}  # where the next catch-up starts

    def _consumer(self) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "binlake-sink-schemas",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10, **self.security.confluent()})

    def catch_up(self) -> SchemaHistory:
        """Apply every schema change committed since the last call, in source order."""
        consumer = self._consumer()
        events = []
        try:
            consumer.assign([TopicPartition(self.topic, p, offset) for p, offset in self._next.items()])
            ended: set[int] = set()
            heard = time.monotonic()
            while len(ended) < len(self._next):
                message = consumer.poll(min(5.0, self.stall_timeout_s))
                if message is None:
                    if time.monotonic() - heard > self.stall_timeout_s:
                        raise RuntimeError(f"reading schema topic {self.topic} from {self.bootstrap_servers}: nothing "
                                           f"came for {self.stall_timeout_s:g} s (are the brokers up and reachable?)")
                    continue
                heard = time.monotonic()
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        ended.add(message.partition())
                        continue
                    raise RuntimeError(f"reading schema topic {self.topic}: {message.error()}")
                self._next[message.partition()] = message.offset() + 1
                if message.value() is not None:
                    events.append(json.loads(message.value()))
        finally:
            consumer.close()
        for body in sorted(events, key=lambda b: debezium_sequence(b.get("source") or {})):
            self.history.apply(body)
        return self.history


def canal_schema(table: str, types_json: str, primary_key: list[str] | None, position: str) -> TableSchema:
    """A table's schema from one Canal message's `mysqlType` (JSON, in column order) and `pkNames`."""
    types = json.loads(types_json)
    return TableSchema(table, tuple(Column(name, MySqlType.parse(t)) for name, t in types.items()),
                       tuple(primary_key or ()), position)
