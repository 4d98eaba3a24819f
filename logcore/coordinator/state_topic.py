"""An internal topic that a coordinator appends its records to and replays on start.

Records go through ReplicaManager.append like any produce, as one uncompressed magic-v2 batch per
call, so they get offsets, indexes and recovery for free. Loading reads the partition's segments
batch by batch. Event loop only.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterator

from ..storage.records import decode_batch, encode_batch


class StateTopic:
    def __init__(self, name: str, partitions: int, configs: dict[str, str], replicas, metadata,
                 create_topic: Callable[..., object]) -> None:
        self.name = name
        self._wanted_partitions = partitions
        self.configs = configs
        self.replicas = replicas
        self.metadata = metadata
        self._create_topic = create_topic

    @property
    def exists(self) -> bool:
        return self.name in self.metadata.topics

    @property
    def partitions(self) -> int:
        """The existing topic's count wins over the configured one (Kafka never repartitions it)."""
        info = self.metadata.topics.get(self.name)
        return info.partitions if info else self._wanted_partitions

    def ensure(self) -> None:
        if not self.exists:
            self._create_topic(self.name, partitions=self._wanted_partitions, replication_factor=1,
                               configs=dict(self.configs))

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Write `records` (key, value) as one batch; raises the partition's BrokerError on failure."""
        self.ensure()
        self.replicas.append(self.name, partition, encode_batch(records, int(time.time() * 1000)))

    def read(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every (key, value) of one partition, oldest first, control batches skipped."""
        log = self.replicas.get(self.name, partition).log
        for segment in list(log.segments):
            for position, header in segment.headers():
                if header.is_control or header.last_offset < log.log_start_offset:
                    continue
                yield from ((r.key, r.value) for r in decode_batch(os.pread(segment.fd, header.size, position)))
