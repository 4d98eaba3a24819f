"""Source offsets kept in a compacted topic of the log, like Kafka Connect's `connect-offsets`.

Record key = JSON `[connector, source_partition]` (keys sorted, no spaces, so one source partition
always has the same key bytes and compaction keeps only its latest offset); value = JSON offset,
or null to forget it. Offsets are read back by consuming the whole topic to its end with
read_committed, so offsets written in an aborted transaction are never seen.

The store does not write: the runtime's writer sends `record()` through the task's own producer,
inside the same transaction as the batch's records (see `connect.producer`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import IncompatibleBrokerVersion, for_code

from .api import Json

log = logging.getLogger(__name__)
TOPIC_ALREADY_EXISTS = 36


def _canonical(value: Json) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    topic: str
    key: bytes
    value: bytes | None


class Offsets:
    """The committed offsets of one connector (implements `connect.api.OffsetReader`)."""

    def __init__(self) -> None:
        self._by_key: dict[str, tuple[Mapping[str, Json], Mapping[str, Json]]] = {}

    def get(self, source_partition: Mapping[str, Json]) -> Mapping[str, Json] | None:
        found = self._by_key.get(_canonical(source_partition))
        return found[1] if found else None

    def all(self) -> list[tuple[Mapping[str, Json], Mapping[str, Json]]]:
        return list(self._by_key.values())

    def apply(self, source_partition: Mapping[str, Json], offset: Mapping[str, Json] | None) -> None:
        key = _canonical(source_partition)
        if offset is None:
            self._by_key.pop(key, None)
        else:
            self._by_key[key] = (source_partition, offset)


class OffsetStore(Protocol):
    """Where source offsets live. The log-backed store below is the one the runtimes use."""

    async def start(self) -> None: ...

    async def load(self, connector: str) -> Offsets: ...

    def record(self, connector: str, source_partition: Mapping[str, Json],
               offset: Mapping[str, Json] | None) -> OffsetRecord: ...


class OffsetStoreError(Exception):
    """The offsets topic is unusable; the message says what to change."""


class LogOffsetStore:
    """Offsets in a compacted topic; created (compact, `partitions`, `replication_factor`) if missing."""

    def __init__(self, bootstrap_servers: str | list[str], topic: str, partitions: int,
                 replication_factor: int | None, request_timeout_ms: int = 30_000) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.timeout = request_timeout_ms / 1000

    def record(self, connector: str, source_partition: Mapping[str, Json],
               offset: Mapping[str, Json] | None) -> OffsetRecord:
        key = _canonical([connector, source_partition]).encode()
        return OffsetRecord(self.topic, key, None if offset is None else _canonical(offset).encode())

    async def start(self) -> None:
        """Make sure the topic exists and is compacted; learn its partition count."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                    request_timeout_ms=int(self.timeout * 1000))
        await admin.start()
        try:
            if self.topic not in await admin.list_topics():
                await self._create(admin)
            [described] = await admin.describe_topics([self.topic])
            self.partitions = len(described["partitions"])
            await self._check_compacted(admin)
        finally:
            await admin.close()

    async def _create(self, admin: AIOKafkaAdminClient) -> None:
        replication = self.replication_factor or min(3, len((await admin.describe_cluster())["brokers"]))
        topic = NewTopic(self.topic, self.partitions, replication, topic_configs={"cleanup.policy": "compact"})
        try:
            response = await admin.create_topics([topic])
        except IncompatibleBrokerVersion:
            log.warning("the broker cannot create topics (no CreateTopics API): offsets topic %s will be "
                        "auto-created without cleanup.policy=compact; create it compacted yourself", self.topic)
            return
        for name, code, *rest in response.topic_errors:
            if code not in (0, TOPIC_ALREADY_EXISTS):
                message = rest[0] if rest and isinstance(rest[0], str) else ""
                raise OffsetStoreError(f"cannot create offsets topic {name}: {for_code(code).__name__} {message}")
        log.info("created offsets topic %s (compact, %d partitions, replication %d)",
                 self.topic, self.partitions, replication)

    async def _check_compacted(self, admin: AIOKafkaAdminClient) -> None:
        """Refuse a topic whose retention would delete offsets (the connector would start over)."""
        try:
            [response] = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, self.topic, {"cleanup.policy": None})])
        except IncompatibleBrokerVersion:
            log.warning("the broker cannot describe configs: not checking that %s is compacted", self.topic)
            return
        for _code, _message, _type, _name, entries in response.resources:
            policy = {entry[0]: entry[1] for entry in entries}.get("cleanup.policy", "")
            if "compact" not in policy.split(","):
                raise OffsetStoreError(
                    f"offsets topic {self.topic} has cleanup.policy={policy}; it must be compact, or retention "
                    f"will delete offsets and connectors start over: alter the topic or pick another offsets.topic")

    async def load(self, connector: str) -> Offsets:
        """Read the topic from the beginning to its last committed record; keep this connector's offsets."""
        offsets = Offsets()
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                    isolation_level="read_committed", auto_offset_reset="earliest",
                                    request_timeout_ms=int(self.timeout * 1000))
        await consumer.start()
        try:
            partitions = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            end = await consumer.end_offsets(partitions)
            async with asyncio.timeout(self.timeout):
                while pending := [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
                    batches = await consumer.getmany(*pending, timeout_ms=500)
                    for message in (m for messages in batches.values() for m in messages):
                        self._replay(offsets, connector, message.key, message.value)
        finally:
            await consumer.stop()
        return offsets

    def _replay(self, offsets: Offsets, connector: str, key: bytes | None, value: bytes | None) -> None:
        try:
            owner, source_partition = json.loads(key)
            offset = None if value is None else json.loads(value)
        except (TypeError, ValueError):
            log.warning("ignoring a record in %s that is not [connector, partition] JSON: %r", self.topic, key)
            return
        if owner == connector:
            offsets.apply(source_partition, offset)
