"""A compacted internal topic that a coordinator appends its records to and replays on start.

Records go through ReplicaManager.append like any produce, as one uncompressed magic-v2 batch per
call, so they get offsets, indexes and recovery for free. Loading reads the partition as a consumer
does, up to its high watermark. A batch written for a producer's transaction (TxnOffsetCommit)
takes effect at its commit marker, as read_committed consumers see it. Event loop only.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Iterator

from ..storage.batch import HEADER_SIZE, TRANSACTIONAL, BatchHeader, read_header
from ..storage.records import control_marker, decode_batch, encode_batch

log = logging.getLogger(__name__)
READ_CHUNK_BYTES = 1 << 20  # a coordinator loads its partitions this much at a time


class StateTopic:
    def __init__(self, name: str, partitions: int, segment_bytes: int, replicas, metadata,
                 create_topic: Callable[..., object], replication_factor: int = 1) -> None:
        self.name = name
        self._wanted_partitions = partitions
        self._wanted_replicas = replication_factor
        self.configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        self.replicas = replicas
        self.metadata = metadata
        self._create_topic = create_topic
        # partition -> producer id -> (key, value)s of transactions open when `read` ended
        self.open_transactions: dict[int, dict[int, list[tuple[bytes | None, bytes | None]]]] = {}

    @property
    def exists(self) -> bool:
        return self.name in self.metadata.topics

    @property
    def partitions(self) -> int:
        """The existing topic's count wins over the configured one (Kafka never repartitions it)."""
        info = self.metadata.topics.get(self.name)
        return info.partitions if info else self._wanted_partitions

    def ensure(self) -> None:
        """Create the topic if it is missing, with the configured replication factor capped at the
        live brokers (one for a broker alone)."""
        if not self.exists:
            self._create_topic(self.name, partitions=self._wanted_partitions,
                               replication_factor=min(self._wanted_replicas, len(self.metadata.brokers)),
                               configs=dict(self.configs))

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int = -1,
               producer_epoch: int = -1) -> None:
        """Write `records` (key, value) as one batch; raises the partition's BrokerError on failure.
        With a producer id the batch belongs to that producer's open transaction."""
        self.ensure()
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
