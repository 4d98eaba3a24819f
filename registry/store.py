"""The `_schemas` topic: read whole at start-up, tailed afterwards, written by the leader.

Every instance keeps a consumer on the topic's one partition and replays each record into its
`RegistryState`, so all instances converge on the same state. A write is a produce (acks=all) and
then a wait until this instance's own tail has replayed the record: the answer to a request that
registered a schema is given from the state that the log says, never from a guess.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from common.kafka_security import KafkaSecurity
from common.log_topics import LogTopics

from .errors import StoreError, StoreTimeout
from .records import Key
from .state import RegistryState

log = logging.getLogger(__name__)


class KafkaStore:
    """Owns the tail task; `state` is mutated only by it (event loop only)."""

    def __init__(self, bootstrap_servers: str, state: RegistryState, topic: str = "_schemas", *,
                 replication_factor: int | None = None, security: KafkaSecurity = KafkaSecurity(),
                 timeout_s: float = 30.0) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.state = state
        self.topic = topic
        self.partition = TopicPartition(topic, 0)
        self.replication_factor = replication_factor
        self.security = security
        self.timeout_s = timeout_s
        self.position = 0       # the next offset to replay
        self._advanced = asyncio.Condition()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._tail: asyncio.Task | None = None

    async def start(self) -> None:
        """Create the topic if missing (compacted, one partition; an existing one that is not compacted is
        refused), then replay it to its end before returning."""
        await LogTopics(self.bootstrap_servers, self.replication_factor, security=self.security).ensure_topic(
            self.topic, 1, compact=True, label="schemas topic", loss="registered schemas")
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                          isolation_level="read_committed", **self.security.aiokafka())
        await self._consumer.start()
        self._consumer.assign([self.partition])
        await self._consumer.seek_to_beginning(self.partition)
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all",
                                          enable_idempotence=True, **self.security.aiokafka())
        await self._producer.start()
        self._tail = asyncio.create_task(self._follow(), name="schemas-tail")
        await self.catch_up()
        log.info("read %s to offset %d: %d subjects, schema ids up to %d", self.topic, self.position,
                 len(self.state.subjects), self.state.max_id)

    async def stop(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            await asyncio.gather(self._tail, return_exceptions=True)
        for client in (self._producer, self._consumer):
            if client is not None:
                await client.stop()

    async def wait(self) -> None:
        """Until the tail fails (an unreadable record): raises why."""
        await self._tail

    async def _follow(self) -> None:
        while True:
            batches = await self._consumer.getmany(self.partition, timeout_ms=1000)
            for record in batches.get(self.partition, []):
                try:
                    self.state.replay(record.key, record.value)
                except (ValueError, KeyError, TypeError) as exc:
                    raise StoreError(f"{self.topic} offset {record.offset}: cannot replay key {record.key!r}: "
                                     f"{exc}") from exc
            position = await self._consumer.position(self.partition)
            if position != self.position:
                async with self._advanced:
                    self.position = position
                    self._advanced.notify_all()

    async def _wait_for(self, offset: int) -> None:
        """Until the tail has replayed everything before `offset`."""
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._advanced:
                    await self._advanced.wait_for(lambda: self.position >= offset or self._tail.done())
        except TimeoutError:
            raise StoreTimeout(f"{self.topic} was not read up to offset {offset} within {self.timeout_s:.0f}s") \
                from None
        if self._tail.done():
            await self._tail  # raises what stopped it

    async def catch_up(self) -> None:
        """Replay up to the end of the topic as it is now."""
        try:
            end = (await self._consumer.end_offsets([self.partition]))[self.partition]
        except KafkaError as exc:
            raise StoreError(f"cannot read the end of {self.topic}: {exc}") from exc
        await self._wait_for(end)

    async def append(self, records: list[tuple[Key, bytes | None]]) -> None:
        """Write `records` in order and return once this instance has replayed them."""
        try:
            futures = [await self._producer.send(self.topic, value, key=key.encode(), partition=0)
                       for key, value in records]
            offsets = [(await f).offset for f in futures]
        except KafkaError as exc:
            raise StoreError(f"cannot write to {self.topic}: {exc}") from exc
        if offsets:
            await self._wait_for(offsets[-1] + 1)
