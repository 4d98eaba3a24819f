"""The share-partitions' durable state in `__share_group_state` (KIP-932's share coordinator): the
latest snapshot of each share-partition whose key maps to a partition of the topic this broker
coordinates, each write appended as one ShareSnapshot record (logcore/protocol/share_state_records.py)
and answered once every in-sync replica has it. The topic is compacted: the latest snapshot of each
share-partition is its state.

A broker alone coordinates every key and loads them all on start. In a cluster a broker coordinates
the keys of the partitions it leads, loaded once the partition is committed (`StateTopic`), and the
topic partitions' leaders read and write them through `share_persister.py`, from this broker or
another (ReadShareGroupState / WriteShareGroupState).

A write is answered once every in-sync replica has it, with one exception: a snapshot from a topic
partition's leader on another broker that only counts deliveries (records acquired: the window grew
or delivery counts rose, no record's state and not the start offset changed) is answered once it is
appended here. The leader still holds that state in memory, so no single broker's loss can take it:
a leader's SIGKILL leaves it here, this broker's leaves it at the leader, which writes its whole
snapshot again with its next change. This keeps the share coordinator's replication off the path of
a ShareFetch (docs/groups.md, "Share groups in a cluster").

Writes are fenced as Kafka's share coordinator fences them:
- a snapshot of an older state epoch than the stored one (an admin reset or deletion happened since
  the writer read) is refused with FENCED_STATE_EPOCH;
- a leader's snapshot of an older leader epoch than the latest seen in a read or write of the key
  (a former leader of the topic partition) is refused with FENCED_LEADER_EPOCH.
Event loop only; no `await` between a write's checks and its append.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..protocol import share_state_records as codec
from ..protocol.errors import CoordinatorLoadInProgress, FencedLeaderEpoch, FencedStateEpoch, NotCoordinator
from ..protocol.share_state_records import SharePartitionKey
from ..replication.partition import Partition
from .offsets_codec import partition_for
from .share_partition import RecordState
from .state_topic import StateTopic

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
ADMIN = -1  # the leader epoch of a write that is no leader's (an admin reset)
UNINITIALIZED = -1  # the start offset a read answers for a share-partition with no state (as Kafka's)
_AVAILABLE = int(RecordState.AVAILABLE)


@dataclass(frozen=True)
class Snapshot:
    """One share-partition's durable state: its start offset and the runs (first, last, state,
    delivery count) of its in-flight window, at a state epoch (bumped by an admin reset), as written
    by the topic partition's leader at `leader_epoch` (ADMIN for an admin's write)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[tuple[int, int, int, int], ...]


class ShareStateStore:
    def __init__(self, replicas, metadata, config, create_topic, alone: bool) -> None:
        self.topic = StateTopic(SHARE_STATE_TOPIC, config.get("group.share.state.topic.num.partitions"),
                                config.get("offsets.topic.segment.bytes"), replicas, metadata, create_topic,
                                config.get("offsets.topic.replication.factor"))
        self.timeout_s = config.get("offsets.commit.timeout.ms") / 1000
        self.snapshots: dict[SharePartitionKey, codec.ShareSnapshotValue] = {}
        self.leader_epochs: dict[SharePartitionKey, int] = {}  # the newest leader epoch seen of each key
        self.deleted: dict[SharePartitionKey, int] = {}  # a tombstoned key's last state epoch (in memory)
        # The partitions of the topic whose keys this broker coordinates: in a cluster those it leads,
        # once loaded; None for a broker alone, which coordinates every key.
        self.led: set[int] | None = None if alone else set()

    def partition_of(self, key: SharePartitionKey) -> int:
        """Kafka's share coordinator key: "group:topic id:partition"."""
        return partition_for(f"{key.group}:{key.topic_id}:{key.partition}", self.topic.partitions)

    def owns(self, key: SharePartitionKey) -> bool:
        return self.led is None or self.partition_of(key) in self.led

    # -- loading ---------------------------------------------------------------------------------

    def load(self) -> None:
        """A broker alone: every share-partition as its latest snapshot left it."""
        if self.led is None and self.topic.exists:
            self._load(None)

    def became_leader(self, partition: Partition) -> None:
        """In a cluster: this broker leads `partition` of the topic from now on; its keys load once
        it is committed. Until then their reads and writes hear COORDINATOR_LOAD_IN_PROGRESS."""
        self.topic.load_when_committed(partition, self.load_partition)

    def load_partition(self, index: int) -> None:
        if self.led is not None and index not in self.led:
            self._load([index])
            self.led.add(index)

    def unload_partition(self, index: int) -> None:
        if self.led is None:
            return
        self.led.discard(index)
        for key in [k for k in self.snapshots if self.partition_of(k) == index]:
            del self.snapshots[key]
            self.leader_epochs.pop(key, None)
        for key in [k for k in self.deleted if self.partition_of(k) == index]:
            del self.deleted[key]

    def _load(self, partitions: list[int] | None) -> None:
        started = time.monotonic()

        def apply(key: bytes, value: bytes | None) -> None:
            k, v = codec.decode_key(key), codec.decode_value(value)
            if v is None:
                if k in self.snapshots:
                    self.deleted[k] = self.snapshots.pop(k).state_epoch + 1
                return
            self.snapshots[k] = v
            self.leader_epochs[k] = max(self.leader_epochs.get(k, -1), v.leader_epoch)

        records = self.topic.replay(apply, partitions)
        loaded = sum(1 for k in self.snapshots if partitions is None or self.partition_of(k) in partitions)
        log.info("loaded %d share-partition(s) from %d record(s) of %s%s in %.2fs", loaded, records, SHARE_STATE_TOPIC,
                 "" if partitions is None else f"-{partitions[0]}", time.monotonic() - started)

    # -- reads and writes ------------------------------------------------------------------------

    def _check_owned(self, key: SharePartitionKey) -> None:
        if self.led is None or self.partition_of(key) in self.led:
            return
        view = self.topic.replicas.find(SHARE_STATE_TOPIC, self.partition_of(key))
        if view is not None and view.is_leader:
            raise CoordinatorLoadInProgress(f"{SHARE_STATE_TOPIC}-{self.partition_of(key)} is still loading")
        raise NotCoordinator(f"this broker does not coordinate the state of share-partition {key}")

    def read(self, key: SharePartitionKey, leader_epoch: int) -> Snapshot:
        """The share-partition's state (start offset UNINITIALIZED, at its state epoch: it has none
        yet). A leader's read (`leader_epoch` >= 0) fences the writes of older leaders from now on."""
        self._check_owned(key)
        if leader_epoch >= 0:
            if leader_epoch < self.leader_epochs.get(key, -1):
                raise FencedLeaderEpoch(f"share-partition {key} was read at leader epoch "
                                        f"{self.leader_epochs[key]}, newer than {leader_epoch}")
            self.leader_epochs[key] = leader_epoch
        value = self.snapshots.get(key)
        if value is None:
            return Snapshot(max(self.state_epoch(key), 0), ADMIN, UNINITIALIZED, ())
        return Snapshot(value.state_epoch, value.leader_epoch, value.start_offset, tuple(
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in value.state_batches))

    def state_epoch(self, key: SharePartitionKey) -> int:
        """The key's current state epoch (-1: never written)."""
        value = self.snapshots.get(key)
        return value.state_epoch if value is not None else self.deleted.get(key, -1)

    async def write(self, key: SharePartitionKey, snapshot: Snapshot | None, from_elsewhere: bool = False) -> None:
        """Append the snapshot (None: the key's tombstone, an admin's, which fences every writer that
        read before it) and return once every in-sync replica has it; or once it is appended, for a
        snapshot `from_elsewhere` (a leader on another broker) that only counts deliveries. Raises
        FencedStateEpoch, FencedLeaderEpoch, NotCoordinator or the log's error."""
        self._check_owned(key)
        current = self.state_epoch(key)
        if snapshot is not None:
            if snapshot.state_epoch < current:
                raise FencedStateEpoch(f"share-partition {key} is at state epoch {current}, the write at "
                                       f"{snapshot.state_epoch}: read it again")
            if 0 <= snapshot.leader_epoch < self.leader_epochs.get(key, -1):
                raise FencedLeaderEpoch(f"share-partition {key} has a leader at epoch {self.leader_epochs[key]}; "
                                        f"a write of epoch {snapshot.leader_epoch} comes from a former leader")
        previous = self.snapshots.get(key)
        appended_is_enough = from_elsewhere and counts_deliveries_only(previous, snapshot)
        epoch = previous.snapshot_epoch + 1 if previous is not None else 0
        value = None if snapshot is None else codec.snapshot_value(
            epoch, snapshot.state_epoch, max(snapshot.leader_epoch, self.leader_epochs.get(key, -1)),
            snapshot.start_offset, list(snapshot.batches))
        partition = self.partition_of(key)
        self.topic.append(partition, [(codec.encode_key(key), codec.encode_value(value))])
        if value is None:
            self.snapshots.pop(key, None)
            self.deleted[key] = current + 1
        else:
            self.snapshots[key] = value
            self.leader_epochs[key] = value.leader_epoch
            self.deleted.pop(key, None)
        if not appended_is_enough:
            await self.topic.replicated(partition, self.timeout_s)

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        """InitializeShareGroupState. A start offset UNINITIALIZED (the group coordinator's: the
        share-partition exists, its leader picks the start by `share.auto.offset.reset` at its first
        fetch) creates a state only where there is none, so it never undoes a leader's; a given start
        offset replaces the state, as Kafka's does, unless the stored state epoch is newer than the
        request's (-1: no check) (FENCED_STATE_EPOCH)."""
        self._check_owned(key)
        current = self.state_epoch(key)
        if start_offset == UNINITIALIZED and key in self.snapshots:
            return
        if state_epoch != -1 and current > state_epoch:
            raise FencedStateEpoch(f"share-partition {key} is at state epoch {current}, the initialization at "
                                   f"{state_epoch}")
        await self.write(key, Snapshot(state_epoch if state_epoch >= 0 else max(current, 0), ADMIN, start_offset, ()))

    def keys(self) -> list[SharePartitionKey]:
        """The share-partitions whose state this broker holds."""
        return list(self.snapshots)


def counts_deliveries_only(previous: codec.ShareSnapshotValue | None, snapshot: Snapshot | None) -> bool:
    """Whether `snapshot` differs from the stored `previous` only by deliveries counted: the same state
    epoch and start offset, every record of the previous window in the same state, and the window
    grown only by records written as available (acquired ones). Delivery counts are not compared."""
    if previous is None or snapshot is None or (previous.state_epoch, previous.start_offset) != (
            snapshot.state_epoch, snapshot.start_offset):
        return False
    before = _states(previous.start_offset, ((b.first_offset, b.last_offset, b.delivery_state)
                                              for b in previous.state_batches))
    after = _states(snapshot.start_offset, ((f, l, s) for f, l, s, _ in snapshot.batches))
    return after[:len(before)] == before and not after[len(before):].strip(bytes((_AVAILABLE,)))


def _states(start_offset: int, runs) -> bytearray:
    """A window's state per offset, from its runs (first, last, state); an offset no run covers is
    available (as `SharePartition.restore` reads it)."""
    states = bytearray()
    for first, last, state in sorted(runs):
        if first > start_offset + len(states):
            states += bytes((_AVAILABLE,)) * (first - start_offset - len(states))
        states += bytes((state,)) * (last - max(first, start_offset + len(states)) + 1)
    return states
