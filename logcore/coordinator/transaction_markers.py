"""Commit/abort markers: the control batch that ends a transaction on one partition.

A marker goes through the partition's producer state like any append (which checks its producer
epoch and coordinator epoch, closes the transaction, moves the last stable offset and indexes an
abort). Listeners hear of every marker written, which is how the group coordinator learns that
transactional offset commits on `__consumer_offsets` became visible or vanished.

Every partition lives on this broker, so markers are local appends; WriteTxnMarkers (and
`binlake transactions abort`) arrive here too.

Event loop only.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ..protocol.errors import BrokerError, InvalidProducerEpoch, TransactionCoordinatorFenced, UnknownTopicOrPartition
from ..storage.records import encode_control_batch

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
MarkerListener = Callable[[int, str, int, bool], None]  # (producer id, topic, partition, committed)


class MarkerWriter:
    def __init__(self, replicas, metadata) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.listeners: list[MarkerListener] = []

    def write_one(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                  topic: str, partition: int) -> None:
        """Append one marker; raises the partition's BrokerError."""
        info = self.metadata.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition(f"no partition {topic}-{partition} to write a transaction marker to")
        batch = encode_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, int(time.time() * 1000))
        self.replicas.append(topic, partition, batch, from_client=False)
        for listener in self.listeners:
            listener(producer_id, topic, partition, commit)

    def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
              partitions: list[TopicPartition]) -> set[TopicPartition]:
        """Markers for a transaction's partitions; returns those that need no retry: written, gone
        with their topic, or already past this producer epoch (a newer marker fenced this one)."""
        done = set()
        for topic, partition in partitions:
            try:
                self.write_one(producer_id, producer_epoch, coordinator_epoch, commit, topic, partition)
            except UnknownTopicOrPartition:
                log.info("not writing a marker to %s-%d for producer %d: the partition is gone", topic, partition,
                         producer_id)
            except (InvalidProducerEpoch, TransactionCoordinatorFenced) as exc:
                log.warning("marker for producer %d on %s-%d refused: %s", producer_id, topic, partition, exc)
            except BrokerError as exc:
                log.warning("cannot write marker for producer %d to %s-%d: %s", producer_id, topic, partition, exc)
                continue
            done.add((topic, partition))
        return done
