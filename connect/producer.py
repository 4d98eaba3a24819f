"""Writing batches to the log: records and source offsets, exactly once or at least once.

- `TransactionalWriter` (delivery: exactly_once): one Kafka transaction per batch holding its
  records AND its offset record, so a read_committed consumer sees each batch whole, once, and a
  restarted task resumes exactly after the last committed batch. The transactional id is derived
  from connector name + task id, so a restarted (or zombie) instance fences the previous one.
- `AtLeastOnceWriter` (delivery: at_least_once): records are sent as they come; every
  `flush_interval_ms` (and on stop) the writer waits for them all to be acknowledged and only then
  writes the latest offsets. A crash between the two repeats records; a clean stop does not.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError

from .api import Json, SourceRecord
from .config import RuntimeConfig
from .offsets import OffsetRecord, OffsetStore


class TransactionsUnsupported(Exception):
    """The broker has no transaction support; exactly_once cannot work against it."""


def serialize(data: Json | bytes) -> bytes | None:
    """bytes as they are, str as UTF-8, None as None (a tombstone), anything else as compact JSON."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def transactional_id(connector: str, task_id: int) -> str:
    return f"binlake-connect-{connector}-{task_id}"


def make_producer(runtime: RuntimeConfig, task_id: int) -> AIOKafkaProducer:
    settings = runtime.producer
    exactly_once = runtime.delivery == "exactly_once"
    return AIOKafkaProducer(
        bootstrap_servers=runtime.bootstrap_servers,
        client_id=f"binlake-connect-{runtime.name}-{task_id}",
        acks="all",
        compression_type=settings.compression_type,
        linger_ms=settings.linger_ms,
        max_batch_size=settings.max_batch_size,
        request_timeout_ms=settings.request_timeout_ms,
        transactional_id=transactional_id(runtime.name, task_id) if exactly_once else None,
        transaction_timeout_ms=settings.transaction_timeout_ms,
    )


async def start_producer(producer: AIOKafkaProducer, runtime: RuntimeConfig) -> None:
    try:
        await producer.start()
    except KafkaError as exc:
        # aiokafka wraps the version mismatch of FindCoordinator/InitProducerId in a plain KafkaError.
        if runtime.delivery == "exactly_once" and (
                isinstance(exc, IncompatibleBrokerVersion) or "IncompatibleBrokerVersion" in str(exc)):
            await producer.stop()
            raise TransactionsUnsupported(
                f"the broker at {runtime.bootstrap_servers} does not support transactions ({exc}); "
                "set delivery: at_least_once, or point bootstrap_servers at a broker that does") from None
        await producer.stop()
        raise


class Writer(ABC):
    """Sends a task's batches; subclasses decide when offsets are committed. Event loop only."""

    def __init__(self, producer: AIOKafkaProducer, store: OffsetStore, connector: str) -> None:
        self.producer = producer
        self.store = store
        self.connector = connector

    async def _send(self, record: SourceRecord) -> asyncio.Future:
        return await self.producer.send(
            record.topic, serialize(record.value), key=serialize(record.key), partition=record.partition,
            timestamp_ms=record.timestamp_ms, headers=list(record.headers) or None)

    async def _send_offset(self, offset: OffsetRecord) -> asyncio.Future:
        return await self.producer.send(offset.topic, offset.value, key=offset.key)

    @abstractmethod
    async def write(self, records: Sequence[SourceRecord], source_partition: Mapping[str, Json],
                    source_offset: Mapping[str, Json] | None) -> None: ...

    def commit_due_in(self) -> float | None:
        """Seconds until offsets must be committed, or None when nothing is waiting."""
        return None

    async def commit(self) -> None:
        """Commit every offset written so far (no-op when each write commits)."""


class TransactionalWriter(Writer):
    async def write(self, records, source_partition, source_offset) -> None:
        async with self.producer.transaction():
            sent = [await self._send(r) for r in records]
            if source_offset is not None:
                sent.append(await self._send_offset(self.store.record(self.connector, source_partition, source_offset)))
            await asyncio.gather(*sent)


class AtLeastOnceWriter(Writer):
    def __init__(self, producer: AIOKafkaProducer, store: OffsetStore, connector: str, interval_ms: int) -> None:
        super().__init__(producer, store, connector)
        self.interval = interval_ms / 1000
        self._sent: list[asyncio.Future] = []
        self._offsets: dict[bytes, OffsetRecord] = {}
        self._since: float | None = None

    async def write(self, records, source_partition, source_offset) -> None:
        self._sent += [await self._send(r) for r in records]
        if source_offset is not None:
            offset = self.store.record(self.connector, source_partition, source_offset)
            self._offsets[offset.key] = offset
        if self._since is None:
            self._since = time.monotonic()
        if self.commit_due_in() == 0:
            await self.commit()

    def commit_due_in(self) -> float | None:
        if self._since is None:
            return None
        return max(0.0, self._since + self.interval - time.monotonic())

    async def commit(self) -> None:
        sent, offsets = self._sent, list(self._offsets.values())
        self._sent, self._offsets, self._since = [], {}, None
        await asyncio.gather(*sent)  # every record acknowledged before any offset that covers it
        await asyncio.gather(*[await self._send_offset(o) for o in offsets])


def make_writer(producer: AIOKafkaProducer, store: OffsetStore, runtime: RuntimeConfig) -> Writer:
    if runtime.delivery == "exactly_once":
        return TransactionalWriter(producer, store, runtime.name)
    return AtLeastOnceWriter(producer, store, runtime.name, runtime.offsets.flush_interval_ms)
