"""Topics a runtime keeps state in (the connectors', Canal's, the schema registry's), through aiokafka's
admin client and consumer.

`LogTopics` creates topics (compacted where state lives in them), refuses a state topic whose
retention would delete it, answers partition counts, reads a topic back to its end, and follows one
(a task's signal topic), always with read_committed, so records of aborted transactions are never seen.
The connector offsets store, the tasks (`TaskContext.log`, e.g. a schema history topic or a signal topic)
and the schema registry (`_schemas`) use it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import IncompatibleBrokerVersion, for_code

from common.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)
TOPIC_ALREADY_EXISTS = 36
# A topic just created in a cluster reaches the brokers one by one; until then they answer these.
NOT_KNOWN_YET = {3, 5}  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE


class TopicError(Exception):
    """A topic is missing and cannot be created, or is unusable as configured; the message says what to change."""


class LogTopics:
    """Topic administration and read-back over one bootstrap list. Event loop only; one admin client
    per call, so an idle runtime holds no extra connections."""

    def __init__(self, bootstrap_servers: str | list[str], replication_factor: int | None = None,
                 request_timeout_ms: int = 30_000, security: KafkaSecurity = KafkaSecurity()) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self.replication_factor = replication_factor
        self.timeout = request_timeout_ms / 1000
        self._partitions: dict[str, int] = {}

    def _admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                   request_timeout_ms=int(self.timeout * 1000), **self.security.aiokafka())

    async def partitions(self, topic: str, create: int = 1) -> int:
        if topic not in self._partitions:
            await self.ensure_topic(topic, create)
        return self._partitions[topic]

    async def ensure_topic(self, topic: str, partitions: int = 1, compact: bool = False, *,
                           label: str = "topic", loss: str = "the state it holds") -> None:
        """Create `topic` if missing. A compacted one holds state: an existing topic that is not compacted
        is refused, with `label` ("offsets topic") and `loss` (what retention would do) in the message."""
        admin = self._admin()
        await admin.start()
        try:
            if topic not in await admin.list_topics():
                await self._create(admin, topic, partitions, compact)
            described = await self._described(admin, topic)
            self._partitions[topic] = len(described["partitions"])
            if compact:
                await self._check_compacted(admin, topic, label, loss)
        finally:
            await admin.close()

    async def _described(self, admin: AIOKafkaAdminClient, topic: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            [described] = await admin.describe_topics([topic])
            code = described["error_code"]
            if not code:
                return described
            if code not in NOT_KNOWN_YET or time.monotonic() > deadline:
                raise TopicError(f"cannot describe topic {topic}: {for_code(code).__name__}")
            await asyncio.sleep(0.1)

    async def _create(self, admin: AIOKafkaAdminClient, topic: str, partitions: int, compact: bool) -> None:
        replication = self.replication_factor or min(3, len((await admin.describe_cluster())["brokers"]))
        configs = {"cleanup.policy": "compact"} if compact else {}
        try:
            response = await admin.create_topics([NewTopic(topic, partitions, replication, topic_configs=configs)])
        except IncompatibleBrokerVersion:
            log.warning("the broker cannot create topics (no CreateTopics API): %s will be auto-created%s",
                        topic, "; create it with cleanup.policy=compact yourself" if compact else "")
            return
        for name, code, *rest in response.topic_errors:
            if code not in (0, TOPIC_ALREADY_EXISTS):
                message = rest[0] if rest and isinstance(rest[0], str) else ""
                raise TopicError(f"cannot create topic {name}: {for_code(code).__name__} {message}")
        log.info("created topic %s (%s%d partition%s, replication %d)",
                 topic, "compact, " if compact else "", partitions, "s" if partitions != 1 else "", replication)

    async def _check_compacted(self, admin: AIOKafkaAdminClient, topic: str, label: str, loss: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                [response] = await admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": None})])
            except IncompatibleBrokerVersion:
                log.warning("the broker cannot describe configs: not checking that %s is compacted", topic)
                return
            codes = {code for code, *_ in response.resources}
            if not codes & NOT_KNOWN_YET or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        for code, message, _type, _name, entries in response.resources:
            if code:
                raise TopicError(f"cannot describe the configs of {label} {topic}: {for_code(code).__name__} "
                                 f"{message or ''}")
            policy = {entry[0]: entry[1] for entry in entries}.get("cleanup.policy", "")
            if "compact" not in policy.split(","):
                raise TopicError(
                    f"{label} {topic} has cleanup.policy={policy}; it must be compact, or retention will delete "
                    f"{loss}: alter the topic (cleanup.policy=compact) or configure another one")

    async def _assigned(self, topic: str) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
        """A started read_committed consumer assigned every partition of `topic` (created if missing)."""
        if topic not in self._partitions:
            await self.ensure_topic(topic)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                    isolation_level="read_committed", auto_offset_reset="earliest",
                                    request_timeout_ms=int(self.timeout * 1000), **self.security.aiokafka())
        await consumer.start()
        partitions = [TopicPartition(topic, p) for p in range(self._partitions[topic])]
        consumer.assign(partitions)
        return consumer, partitions

    async def read(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        """Every committed record of every partition (in order within a partition), up to the end as it is now."""
        consumer, partitions = await self._assigned(topic)
        records: list[tuple[bytes | None, bytes | None]] = []
        try:
            await consumer.seek_to_beginning(*partitions)
            end = await consumer.end_offsets(partitions)
            async with asyncio.timeout(self.timeout):
                while pending := [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
                    batches = await consumer.getmany(*pending, timeout_ms=500)
                    records += ((m.key, m.value) for messages in batches.values() for m in messages)
        finally:
            await consumer.stop()
        return records

    async def follow(self, topic: str, start: dict[int, int]) -> AsyncIterator[tuple[int, int, bytes | None,
                                                                                   bytes | None]]:
        """(partition, offset, key, value) of every committed record of `topic` (created if missing) as it
        arrives, from `start` (partition -> offset; a partition not in it from its beginning), until the
        caller stops iterating."""
        consumer, partitions = await self._assigned(topic)
        try:
            for tp in partitions:
                if tp.partition in start:
                    consumer.seek(tp, start[tp.partition])
                else:
                    await consumer.seek_to_beginning(tp)
            while True:
                for tp, messages in (await consumer.getmany(timeout_ms=1000)).items():
                    for m in messages:
                        yield tp.partition, m.offset, m.key, m.value
        finally:
            await consumer.stop()
