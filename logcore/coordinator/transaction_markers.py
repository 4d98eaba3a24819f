"""Commit/abort markers: the control batch that ends a transaction on one partition.

A marker goes through the partition's producer state like any append (which checks its producer
epoch and coordinator epoch, closes the transaction, moves the last stable offset and indexes an
abort). Listeners hear of every marker written, which is how the group coordinator learns that
transactional offset commits on `__consumer_offsets` became visible or vanished.

The coordinator writes a transaction's markers with `write`: to the partitions this broker leads
itself, to the others with one WriteTxnMarkers request per leader (Kafka's marker channel). A
marker counts once every in-sync replica of its partition has it, so a leader's death cannot take
back a transaction's end. A broker alone leads everything, and its markers count at once.

A marker of transactions v2 (`Marker.transaction_version` 2, WriteTxnMarkers v2) carries the epoch
its transaction's end bumped, and a partition takes it only if that epoch is newer than the
producer's there: the same marker delayed past the producer's next write is refused
(INVALID_PRODUCER_EPOCH) instead of ending the next transaction.

Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, NamedTuple

from ..protocol.codec import ApiKey, ErrorCode, build, request_class
from ..protocol.errors import BrokerError, UnknownTopicOrPartition
from ..replication.peer import PeerConnection, PeerUnavailable
from ..storage.records import encode_control_batch

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
WRITE_TXN_MARKERS_VERSION = 2
TIMEOUT_S = 30.0  # how long a marker may wait for its partition's ISR (Kafka's request.timeout.ms)

# Answers after which a marker is not retried: it is written, or a newer marker fenced this one.
_SETTLED = {ErrorCode.none: None, ErrorCode.invalid_producer_epoch: "a newer producer epoch fenced it",
            ErrorCode.transaction_coordinator_fenced: "a newer coordinator fenced it"}


class Marker(NamedTuple):
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    transaction_version: int = 0


MarkerListener = Callable[[Marker, str, int], None]  # (the marker, topic, partition)


class MarkerWriter:
    def __init__(self, replicas, metadata, cluster, peer_security=None) -> None:
        self.replicas = replicas
        self.peer_security = peer_security  # (how to reach the other brokers: logcore.security.inter_broker)
        self.metadata = metadata
        self.cluster = cluster
        self.listeners: list[MarkerListener] = []
        self._peers: dict[tuple[str, int], PeerConnection] = {}

    def append(self, marker: Marker, topic: str, partition: int):
        """Append one marker to a partition this broker leads; returns the AppendResult and raises
        the partition's BrokerError."""
        info = self.metadata.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition(f"no partition {topic}-{partition} to write a transaction marker to")
        batch = encode_control_batch(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                     marker.commit, int(time.time() * 1000))
        result = self.replicas.append(topic, partition, batch, from_client=False,
                                      transaction_version=marker.transaction_version)
        for listener in self.listeners:
            listener(marker, topic, partition)
        return result

    def write_here_now(self, marker: Marker, partitions: list[TopicPartition]) -> set[TopicPartition]:
        """A broker alone: its markers, which count once appended; returns those settled."""
        done = set()
        for tp in partitions:
            try:
                self.append(marker, *tp)
                code = ErrorCode.none
            except BrokerError as exc:
                code = exc.code
            if self._settled(marker, tp, code):
                done.add(tp)
        return done

    async def write_here(self, marker: Marker, topic: str, partition: int) -> None:
        """Append one marker here and return once the partition's ISR has it (WriteTxnMarkers)."""
        result = self.append(marker, topic, partition)
        await self.replicas.get(topic, partition).wait_until_replicated(result.next_offset, TIMEOUT_S)

    async def write(self, marker: Marker, partitions: list[TopicPartition]) -> set[TopicPartition]:
        """Markers for a transaction's partitions, wherever their leaders are, all at once; returns
        those that need no retry: written, gone with their topic, or fenced by a newer marker."""
        producer_id = marker.producer_id
        here: list[TopicPartition] = []
        elsewhere: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            view = self.cluster.partition(*tp)
            leader = self.replicas.broker_id if view is None else view.leader  # (unknown: `append` says so)
            if leader == self.replicas.broker_id:
                here.append(tp)
            elif leader < 0:
                log.info("marker for producer %d on %s-%d waits for the partition to get a leader", producer_id, *tp)
            else:
                elsewhere.setdefault(leader, []).append(tp)
        settled = await asyncio.gather(*(self._write_here_settled(marker, tp) for tp in here),
                                       *(self._send(leader, marker, tps) for leader, tps in elsewhere.items()))
        return set().union(*settled)

    async def _write_here_settled(self, marker: Marker, tp: TopicPartition) -> set:
        try:
            await self.write_here(marker, *tp)
            code = ErrorCode.none
        except BrokerError as exc:
            code = exc.code
        return {tp} if self._settled(marker, tp, code) else set()

    async def _send(self, leader: int, marker: Marker, tps: list[TopicPartition]) -> set:
        """One WriteTxnMarkers request to `leader` for `tps`; returns those settled."""
        address = self.cluster.address_of(leader)
        if address is None:
            log.info("markers for producer %d wait for broker %d to come back", marker.producer_id, leader)
            return set()
        peer = self._peers.get(address)
        if peer is None:
            peer = self._peers[address] = PeerConnection(*address, client_id=f"broker-{self.replicas.broker_id}-txn",
                                                         security=self.peer_security)
        producer_id = marker.producer_id
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        request = build(request_class(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION), {"markers": [{
            "producer_id": producer_id, "producer_epoch": marker.producer_epoch, "transaction_result": marker.commit,
            "coordinator_epoch": marker.coordinator_epoch, "transaction_version": marker.transaction_version,
            "topics": [{"name": name, "partition_indexes": indexes} for name, indexes in topics.items()]}]})
        try:
            response = await peer.call(request, TIMEOUT_S + 5)
        except PeerUnavailable as exc:
            log.warning("cannot send markers for producer %d to broker %d: %s", producer_id, leader, exc)
            return set()
        return {(topic.name, p.partition_index) for topic in response.markers[0].topics for p in topic.partitions
                if self._settled(marker, (topic.name, p.partition_index), ErrorCode(p.error_code))}

    def _settled(self, marker: Marker, tp: TopicPartition, code: ErrorCode) -> bool:
        if code in _SETTLED:
            if code is not ErrorCode.none:
                log.warning("marker for producer %d on %s-%d refused: %s", marker.producer_id, *tp, _SETTLED[code])
            return True
        info = self.metadata.topics.get(tp[0])
        if code == ErrorCode.unknown_topic_or_partition and (info is None or tp[1] >= info.partitions):
            log.info("not writing a marker to %s-%d for producer %d: the partition is gone", *tp, marker.producer_id)
            return True
        log.warning("cannot write marker for producer %d to %s-%d yet: %s", marker.producer_id, *tp, code.name)
        return False

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()
