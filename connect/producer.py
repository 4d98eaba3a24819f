"""Writing batches to the log: records and source offsets, exactly once or at least once.

- `TransactionalWriter` (delivery: exactly_once): one Kafka transaction holds a batch's records
  AND its offset record (by default one transaction per batch; `commit_interval_ms` > 0 groups the
  batches of that many ms into one; batches the source already holds when a commit falls due join
  it, for up to `group_commit_max_ms`), so a read_committed consumer sees each batch whole, once,
  and a restarted task resumes exactly after the last committed batch. A source transaction split over
  several batches (`ends_transaction=False`) stays in one Kafka transaction until its last batch.
  The transactional id is derived from connector name + task id, so a restarted (or zombie)
  instance fences the previous one.
- `AtLeastOnceWriter` (delivery: at_least_once): records are sent as they come; every
  `commit_interval_ms` (default 1 s, and on stop) the writer waits for them all to be acknowledged
  and only then writes the latest offsets. A crash between the two repeats records; a clean stop
  does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder

from .api import Json, SourceRecord
from .config import RuntimeConfig
from .offsets import OffsetRecord, OffsetStore

_PARTITIONER = DefaultPartitioner()


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
        **runtime.security.aiokafka(),
    )


async def start_producer(producer: AIOKafkaProducer, runtime: RuntimeConfig) -> None:
    try:
        await producer.start()
    except KafkaError as exc:
        await producer.stop()
        # aiokafka wraps the version mismatch of FindCoordinator/InitProducerId in a plain KafkaError.
        if runtime.delivery == "exactly_once" and (
                isinstance(exc, IncompatibleBrokerVersion) or "IncompatibleBrokerVersion" in str(exc)):
            raise TransactionsUnsupported(
                f"the broker at {runtime.bootstrap_servers} does not support transactions ({exc}); "
                "set delivery: at_least_once, or point bootstrap_servers at a broker that does") from None
        raise


async def stop_producer(producer: AIOKafkaProducer) -> None:
    """Stop it, and take the failure aiokafka leaves on its transaction manager's waiter when the
    producer was fenced (nothing awaits that future: asyncio would log it as never retrieved)."""
    await producer.stop()
    waiter = getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None)
    if waiter is not None and waiter.done() and not waiter.cancelled():
        waiter.exception()


class Writer(ABC):
    """Sends a task's batches and commits their offsets every `commit_interval_ms`: a commit covers
    every batch written since the last one. Subclasses decide what a commit is. Event loop only.

    Records are appended to one open record batch per topic-partition (aiokafka's BatchBuilder) and
    handed to the producer when that batch is full, when it has lingered `producer.linger_ms`
    (`flush`), or at a commit: one produce batch per partition instead of one `send` per record,
    and a commit never waits for a linger.
    """

    atomic: bool = False
    """Whether a commit makes records visible together with their offsets (a transaction)."""

    def __init__(self, producer: AIOKafkaProducer, store: OffsetStore, connector: str, interval_ms: int,
                 group_max_ms: int = 0, linger_ms: int = 5) -> None:
        self.producer = producer
        self.store = store
        self.connector = connector
        self.interval = interval_ms / 1000
        self.group_max = max(interval_ms, group_max_ms) / 1000
        self.linger = linger_ms / 1000
        self._filling: float | None = None  # when the oldest open record batch got its first record
        self._builders: dict[tuple[str, int], BatchBuilder] = {}
        self._sent: list[asyncio.Future] = []
        self._offsets: dict[bytes, OffsetRecord] = {}  # latest per source partition
        self._since: float | None = None  # when the first uncommitted batch was written
        self._inside = False  # the last batch did not end its source transaction
        self._partitions: dict[str, list[int]] = {}

    async def write(self, records: Sequence[SourceRecord], source_partition: Mapping[str, Json],
                    source_offset: Mapping[str, Json] | None, ends_transaction: bool = True) -> None:
        if self._since is None:
            await self._open()
            self._since = time.monotonic()
        await self._append(records)
        if source_offset is not None:
            offset = self.store.record(self.connector, source_partition, source_offset)
            self._offsets[offset.key] = offset
        self._inside = not ends_transaction

    def commit_due_in(self, more_waiting: bool = False) -> float | None:
        """Seconds until a commit is due, or None when nothing waits for one (or it may not happen yet: a
        source transaction is open). `more_waiting`: the source already holds the next batch; a
        transaction then goes on taking batches (group commit) until it is `group_max` old."""
        if self._since is None or (self._inside and self.atomic):
            return None
        limit = self.group_max if more_waiting and self.atomic else self.interval
        return max(0.0, self._since + limit - time.monotonic())

    def flush_due_in(self) -> float | None:
        """Seconds until the open record batches have lingered `producer.linger_ms` for more records."""
        if self._filling is None:
            return None
        return max(0.0, self._filling + self.linger - time.monotonic())

    async def flush(self) -> None:
        """Hand every open record batch to the producer."""
        for tp in list(self._builders):
            await self._ship(tp)
        self._filling = None

    async def commit(self) -> bool:
        """Commit what was written since the last commit (False: there was nothing). Under exactly-once, a
        source transaction still open (its last batch not yet written) is aborted instead: it is repeated
        whole."""
        if self._since is None:
            return False
        await self.flush()
        sent, offsets, inside = self._sent, list(self._offsets.values()), self._inside
        self._sent, self._offsets, self._since, self._inside = [], {}, None, False
        if inside and self.atomic:
            await self._abort(sent)
        else:
            await self._commit(sent, offsets)
        return True

    async def _append(self, records: Sequence[SourceRecord]) -> None:
        builders = self._builders
        if records and self._filling is None:
            self._filling = time.monotonic()
        for r in records:
            partition = r.partition
            if partition is None:
                partition = await self._partition(r.topic, r.key)
            tp = (r.topic, partition)
            builder = builders.get(tp)
            if builder is None:
                builder = builders[tp] = self.producer.create_batch()
            key, value, headers = r.key, r.value, r.headers
            if key is not None and type(key) is not bytes:
                key = serialize(key)
            if value is not None and type(value) is not bytes:
                value = serialize(value)
            if builder.append(timestamp=r.timestamp_ms, key=key, value=value,
                              headers=list(headers) if headers else None) is None:
                await self._ship(tp)
                builder = builders[tp] = self.producer.create_batch()
                if builder.append(timestamp=r.timestamp_ms, key=key, value=value,
                                  headers=list(headers) if headers else None) is None:
                    raise ValueError(f"a record for {r.topic} is larger than producer.max_batch_size; raise it")

    async def _partition(self, topic: str, key: Json | bytes) -> int:
        """Kafka's default partitioner: murmur2 of the key bytes, a random partition without a key."""
        partitions = self._partitions.get(topic)
        if partitions is None:
            partitions = self._partitions[topic] = sorted(await self.producer.partitions_for(topic))
        return _PARTITIONER(serialize(key), partitions, partitions)

    async def _ship(self, tp: tuple[str, int]) -> None:
        builder = self._builders.pop(tp)
        builder.close()  # a closed batch is sent at once, without lingering
        self._sent.append(await self.producer.send_batch(builder, tp[0], partition=tp[1]))

    async def _send_offsets(self, offsets: list[OffsetRecord]) -> list[asyncio.Future]:
        futures = []
        for o in offsets:
            builder = self.producer.create_batch()
            builder.append(timestamp=None, key=o.key, value=o.value)
            builder.close()
            futures.append(await self.producer.send_batch(builder, o.topic, partition=await self._partition(
                o.topic, o.key)))
        return futures

    async def _open(self) -> None:
        """Called before the first batch after a commit."""

    @abstractmethod
    async def _commit(self, sent: list[asyncio.Future], offsets: list[OffsetRecord]) -> None: ...

    async def _abort(self, sent: list[asyncio.Future]) -> None:
        """Drop what was written since the last commit (only transactional writers can)."""


class TransactionalWriter(Writer):
    """The batches since the last commit, and their offsets, are one transaction."""

    atomic = True

    async def _open(self) -> None:
        await self.producer.begin_transaction()

    async def _commit(self, sent, offsets) -> None:
        try:
            # A failed produce does not fail aiokafka's commit: check every batch before committing.
            await _all_acknowledged([*sent, *await self._send_offsets(offsets)])
            await self.producer.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):  # a fenced producer cannot abort; the coordinator will
                await self.producer.abort_transaction()
            raise

    async def _abort(self, sent) -> None:
        await asyncio.gather(*sent, return_exceptions=True)
        await self.producer.abort_transaction()


class AtLeastOnceWriter(Writer):
    """Offsets are written only after every record they cover is acknowledged."""

    async def _commit(self, sent, offsets) -> None:
        await _all_acknowledged(sent)
        await _all_acknowledged(await self._send_offsets(offsets))


async def _all_acknowledged(sent: list[asyncio.Future]) -> None:
    """Wait for every send; raise the first failure (after all settled, so none is left unretrieved)."""
    for result in await asyncio.gather(*sent, return_exceptions=True):
        if isinstance(result, BaseException):
            raise result


def make_writer(producer: AIOKafkaProducer, store: OffsetStore, runtime: RuntimeConfig) -> Writer:
    if runtime.delivery == "exactly_once":
        return TransactionalWriter(producer, store, runtime.name, runtime.commit_interval_ms or 0,
                                   runtime.group_commit_max_ms, runtime.producer.linger_ms)
    return AtLeastOnceWriter(producer, store, runtime.name,
                             1000 if runtime.commit_interval_ms is None else runtime.commit_interval_ms,
                             linger_ms=runtime.producer.linger_ms)
