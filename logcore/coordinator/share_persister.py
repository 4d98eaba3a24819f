"""Where a topic partition's leader reads and writes its share-partitions' state, and the group
coordinator initializes it and reads its summary (Kafka's Persister): this broker's share coordinator
(share_state.py) when it coordinates the key, else the leader of the key's `__share_group_state`
partition, asked with InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary v0 (APIs 83-87, between brokers).

A coordinator that is moving or loading (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, or a broker that cannot be reached), or a write its in-sync replicas
did not take in time (a follower died and the ISR has not shrunk yet), is tried again until
`RETRY_S` has passed: a snapshot is the whole state, so writing it twice is harmless. A fenced epoch
is raised at once. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..protocol.codec import ApiKey, ErrorCode, build, request_class
from ..protocol.errors import BrokerError, CoordinatorNotAvailable
from ..protocol.share_state_records import SharePartitionKey
from ..replication.peer import PeerConnection, PeerUnavailable
from .share_state import ADMIN, SHARE_STATE_TOPIC, ShareStateStore, Snapshot

log = logging.getLogger(__name__)

RETRY_S = 10.0  # how long a read or write waits for a moving share coordinator
BACKOFF_S = 0.1
CALL_TIMEOUT_S = 30.0
_RETRIED = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
            ErrorCode.request_timed_out, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append}


class SharePersister:
    def __init__(self, store: ShareStateStore, cluster, broker_id: int, peer_security=None) -> None:
        self.store = store
        self.cluster = cluster
        self.broker_id = broker_id
        self.peer_security = peer_security
        self._peers: dict[tuple[str, int], PeerConnection] = {}

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> Snapshot:
        return await self._retrying(key, lambda: self.store.read(key, leader_epoch),
                                    lambda peer: self._read_remote(peer, key, leader_epoch))

    async def write(self, key: SharePartitionKey, snapshot: Snapshot | None) -> None:
        """Write the share-partition's state (None: delete it, an admin's deletion)."""
        await self._retrying(key, lambda: self.store.write(key, snapshot),
                             lambda peer: self._write_remote(peer, key, snapshot))

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        await self._retrying(key, lambda: self.store.initialize(key, state_epoch, start_offset),
                             lambda peer: self._call(peer, ApiKey.INITIALIZE_SHARE_GROUP_STATE, _request(key, {
                                 "state_epoch": state_epoch, "start_offset": start_offset})))

    async def summary(self, key: SharePartitionKey) -> Snapshot:
        """The share-partition's state epoch and start offset (UNINITIALIZED: none), without its batches."""
        def here() -> Snapshot:
            got = self.store.read(key, ADMIN)
            return Snapshot(got.state_epoch, got.leader_epoch, got.start_offset, ())

        async def there(peer: PeerConnection) -> Snapshot:
            got = await self._call(peer, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, _request(key, {"leader_epoch": ADMIN}))
            return Snapshot(got.state_epoch, got.leader_epoch, got.start_offset, ())
        return await self._retrying(key, here, there)

    async def _retrying(self, key, here, there):
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                peer = await self._coordinator(key)
                if peer is None:
                    result = here()
                    return await result if asyncio.iscoroutine(result) else result
                return await there(peer)
            except BrokerError as exc:
                if exc.code not in _RETRIED or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(BACKOFF_S)

    async def _coordinator(self, key: SharePartitionKey) -> PeerConnection | None:
        """None when this broker coordinates the key (or is the one to say why not); else a
        connection to the broker that does."""
        if self.store.led is None or self.store.owns(key):
            return None
        await self.store.topic.ensure()
        node = self.cluster.coordinator(SHARE_STATE_TOPIC, self.store.partition_of(key))
        if node is None:
            raise CoordinatorNotAvailable(f"{SHARE_STATE_TOPIC}-{self.store.partition_of(key)} has no leader now")
        if node.node_id == self.broker_id:
            return None  # (this broker leads it; the store says whether it has loaded)
        address = (node.host, node.port)
        peer = self._peers.get(address)
        if peer is None:
            peer = self._peers[address] = PeerConnection(
                *address, client_id=f"broker-{self.broker_id}-share-persister", security=self.peer_security)
        return peer

    async def _call(self, peer: PeerConnection, api: ApiKey, data: dict):
        try:
            response = await peer.call(build(request_class(api, 0), data), CALL_TIMEOUT_S)
        except PeerUnavailable as exc:
            raise CoordinatorNotAvailable(str(exc)) from exc
        partition = response.results[0].partitions[0]
        if partition.error_code != ErrorCode.none:
            raise BrokerError(partition.error_message or f"the share coordinator answered {partition.error_code.name}",
                              ErrorCode(partition.error_code))
        return partition

    async def _read_remote(self, peer: PeerConnection, key: SharePartitionKey, leader_epoch: int) -> Snapshot:
        got = await self._call(peer, ApiKey.READ_SHARE_GROUP_STATE, {"group_id": key.group, "topics": [
            {"topic_id": key.topic_id, "partitions": [{"partition": key.partition, "leader_epoch": leader_epoch}]}]})
        return Snapshot(got.state_epoch, -1, got.start_offset, tuple(
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in got.state_batches))

    async def _write_remote(self, peer: PeerConnection, key: SharePartitionKey, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            await self._call(peer, ApiKey.DELETE_SHARE_GROUP_STATE, {"group_id": key.group, "topics": [
                {"topic_id": key.topic_id, "partitions": [{"partition": key.partition}]}]})
            return
        await self._call(peer, ApiKey.WRITE_SHARE_GROUP_STATE, {"group_id": key.group, "topics": [
            {"topic_id": key.topic_id, "partitions": [{
                "partition": key.partition, "state_epoch": snapshot.state_epoch,
                "leader_epoch": snapshot.leader_epoch, "start_offset": snapshot.start_offset,
                "state_batches": [{"first_offset": f, "last_offset": l, "delivery_state": s, "delivery_count": c}
                                  for f, l, s, c in snapshot.batches]}]}]})

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()


def _request(key: SharePartitionKey, partition: dict) -> dict:
    """A one-partition request of the share-state APIs."""
    return {"group_id": key.group, "topics": [{"topic_id": key.topic_id,
                                               "partitions": [{"partition": key.partition, **partition}]}]}
