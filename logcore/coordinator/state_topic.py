"""A compacted internal topic that a coordinator appends its records to and replays on start.

Records go through ReplicaManager.append like any produce, as one uncompressed magic-v2 batch per
call, so they get offsets, indexes and recovery for free. Loading reads the partition as a consumer
does, up to its high watermark. A batch written for a producer's transaction (TxnOffsetCommit)
takes effect at its commit marker, as read_committed consumers see it.

In a cluster a coordinator serves the keys of the partitions this broker leads: it loads one once
the partition is committed up to where its log ended at the election (`load_when_committed`), and
answers a write once every in-sync replica has it (`replicated`). Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Iterable, Iterator

from ..protocol.errors import CoordinatorNotAvailable, NotCoordinator, NotLeaderOrFollower, TopicAlreadyExists
from ..replication.partition import Partition, wait_for_news
from ..storage.batch import HEADER_SIZE, TRANSACTIONAL, BatchHeader, read_header
from ..storage.records import control_marker, decode_batch, encode_batch

log = logging.getLogger(__name__)
READ_CHUNK_BYTES = 1 << 20  # a coordinator loads its partitions this much at a time
LOAD_WAIT_S = 1.0  # a partition waiting to load rechecks its leadership at least this often


class StateTopic:
    def __init__(self, name: str, partitions: int, segment_bytes: int, replicas, metadata,
                 create_topic: Callable[..., Awaitable[object]], replication_factor: int = 1,
                 min_insync_replicas: int | None = None) -> None:
        self.name = name
        self._wanted_partitions = partitions
        self._wanted_replicas = replication_factor
        self._wanted_min_isr = min_insync_replicas
        self.configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        self.replicas = replicas
        self.metadata = metadata
        self._create_topic = create_topic
        # partition -> producer id -> (key, value)s of transactions open when `read` ended
        self.open_transactions: dict[int, dict[int, list[tuple[bytes | None, bytes | None]]]] = {}
        self._loading: set[asyncio.Task] = set()
        self._creating: asyncio.Task | None = None  # the topic's creation, while it runs

    @property
    def exists(self) -> bool:
        return self.name in self.metadata.topics

    @property
    def partitions(self) -> int:
        """The existing topic's count wins over the configured one (Kafka never repartitions it)."""
        info = self.metadata.topics.get(self.name)
        return info.partitions if info else self._wanted_partitions

    async def ensure(self) -> None:
        """Create the topic if it is missing, with the configured replication factor capped at the
        live brokers (one for a broker alone), and min.insync.replicas at that factor. Callers that
        come while it is being created wait for that one creation."""
        if not self.exists:
            await asyncio.shield(self._creation())

    def _creation(self) -> asyncio.Task:
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create())
            self._creating.add_done_callback(_log_failure)
        return self._creating

    async def _create(self) -> None:
        replicas = min(self._wanted_replicas, len(self.metadata.brokers))
        configs = dict(self.configs)
        if self._wanted_min_isr is not None:
            configs["min.insync.replicas"] = str(min(self._wanted_min_isr, replicas))
        try:
            await self._create_topic(self.name, partitions=self._wanted_partitions, replication_factor=replicas,
                                     configs=configs)
        except TopicAlreadyExists:  # (another broker made it a moment ago; this one hears of it shortly)
            pass

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int = -1,
               producer_epoch: int = -1) -> None:
        """Write `records` (key, value) as one batch; raises the partition's BrokerError on failure.
        With a producer id the batch belongs to that producer's open transaction. A missing topic is
        created meanwhile (a client that skipped FindCoordinator): COORDINATOR_NOT_AVAILABLE until it is."""
        if not self.exists:
            self._creation()
            raise CoordinatorNotAvailable(f"{self.name} is being created; retry in a moment")
        txn = {"producer_id": producer_id, "producer_epoch": producer_epoch, "base_sequence": 0,
               "attributes": TRANSACTIONAL} if producer_id >= 0 else {}
        self.replicas.append(self.name, partition, encode_batch(records, int(time.time() * 1000), **txn),
                             from_client=False)

    def read(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every (key, value) of one partition in the order it took effect: transactional records at
        their commit marker, aborted ones never. Those of transactions still open at the end are left
        in `open_transactions[partition]` for their marker to settle. It reads what a consumer
        would, through the partition, up to the high watermark: only what is committed."""
        open_txns: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        for header, records in self._batches(partition):
            if header.is_control:
                marker = control_marker(records[0]) if records else None
                settled = open_txns.pop(header.producer_id, [])
                if marker is not None and marker.commit:
                    yield from settled
            elif header.is_transactional:
                open_txns.setdefault(header.producer_id, []).extend((r.key, r.value) for r in records)
            else:
                yield from ((r.key, r.value) for r in records)
        self.open_transactions[partition] = open_txns

    def _batches(self, partition: int) -> Iterator[tuple[BatchHeader, list]]:
        """(header, records) of each batch from the log start to the high watermark, read in chunks."""
        replica = self.replicas.get(self.name, partition)
        offset = replica.log.log_start_offset
        while offset < replica.high_watermark:
            region = replica.read(offset, READ_CHUNK_BYTES, min_one_batch=True)
            if region is None:
                return
            data, position = region.read(), 0
            while position + HEADER_SIZE <= len(data):
                header = read_header(data, position)
                if position + header.size > len(data):
                    break  # cut at the chunk's end: the next read starts with it
                yield header, decode_batch(memoryview(data)[position:position + header.size])
                offset, position = header.next_offset, position + header.size

    def replay(self, apply: Callable[[bytes, bytes | None], None], partitions: Iterable[int] | None = None) -> int:
        """Feed every keyed record of `partitions` (default: all) to `apply(key, value)` in the order it
        took effect (a coordinator's loading path); a record `apply` cannot decode (ValueError) is
        logged and skipped. Returns how many records were applied."""
        applied = 0
        for partition in range(self.partitions) if partitions is None else partitions:
            for key, value in self.read(partition):
                if key is None:
                    continue
                try:
                    apply(key, value)
                    applied += 1
                except ValueError as exc:
                    log.error("%s-%d: skipping undecodable record: %s", self.name, partition, exc)
        return applied

    # -- in a cluster ----------------------------------------------------------------------------

    def load_when_committed(self, partition: Partition, load: Callable[[int], None]) -> None:
        """This broker was elected leader of `partition`: call `load(index)` once the partition is
        committed up to where its log ended at the election, so a coordinator starts from what every
        in-sync replica holds. Not at all if the leadership ends first."""
        task = asyncio.create_task(self._load_when_committed(partition, partition.leader_epoch,
                                                             partition.log.log_end_offset, load))
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    @staticmethod
    async def _load_when_committed(partition: Partition, epoch: int, end: int, load: Callable[[int], None]) -> None:
        def still_leading() -> bool:
            return partition.is_leader and partition.leader_epoch == epoch

        while partition.high_watermark < end and still_leading():
            await wait_for_news([partition], LOAD_WAIT_S)
        if still_leading():
            load(partition.index)

    async def replicated(self, partition: int, timeout_s: float) -> None:
        """Return once everything this broker wrote to `partition` is in every in-sync replica (at
        once for a broker alone). NotCoordinator if it stopped leading the partition meanwhile; the
        partition's other errors (timeout, ISR below min.insync.replicas) as they are."""
        replica = self.replicas.get(self.name, partition)
        try:
            await replica.wait_until_replicated(replica.log.log_end_offset, timeout_s)
        except NotLeaderOrFollower as exc:
            raise NotCoordinator(f"this broker no longer coordinates the keys of {self.name}-{partition}; "
                                 f"find the new coordinator") from exc


def _log_failure(creation: asyncio.Task) -> None:
    """A creation nobody awaits (started by `append`) says why it failed; the next call tries again."""
    if not creation.cancelled() and (exc := creation.exception()) is not None:
        log.warning("creating an internal topic failed: %s", exc)
