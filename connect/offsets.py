"""Source offsets kept in a compacted topic of the log, like Kafka Connect's `connect-offsets`.

Record key = JSON `[connector, source_partition]` (keys sorted, no spaces, so one source partition
always has the same key bytes and compaction keeps only its latest offset); value = JSON offset,
or null to forget it. Offsets are read back by consuming the whole topic to its end with
read_committed, so offsets written in an aborted transaction are never seen.

The store does not write: the runtime's writer sends `record()` through the task's own producer,
inside the same transaction as the batch's records (see `connect.producer`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from common.kafka_security import KafkaSecurity
from common.log_topics import LogTopics

from .api import Json

log = logging.getLogger(__name__)


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


class LogOffsetStore:
    """Offsets in a compacted topic; created (compact, `partitions`, `replication_factor`) if missing."""

    def __init__(self, bootstrap_servers: str | list[str], topic: str, partitions: int,
                 replication_factor: int | None, request_timeout_ms: int = 30_000,
                 security: KafkaSecurity = KafkaSecurity()) -> None:
        self.topic = topic
        self.partitions = partitions
        self.topics = LogTopics(bootstrap_servers, replication_factor, request_timeout_ms, security)

    def record(self, connector: str, source_partition: Mapping[str, Json],
               offset: Mapping[str, Json] | None) -> OffsetRecord:
        key = _canonical([connector, source_partition]).encode()
        return OffsetRecord(self.topic, key, None if offset is None else _canonical(offset).encode())

    async def start(self) -> None:
        """Make sure the topic exists and is compacted (connectors would start over if retention deleted
        offsets); learn its partition count."""
        await self.topics.ensure_topic(self.topic, self.partitions, compact=True, label="offsets topic",
                                       loss="offsets and connectors start over")
        self.partitions = await self.topics.partitions(self.topic)

    async def load(self, connector: str) -> Offsets:
        """Read the topic from the beginning to its last committed record; keep this connector's offsets."""
        offsets = Offsets()
        for key, value in await self.topics.read(self.topic):
            self._replay(offsets, connector, key, value)
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
