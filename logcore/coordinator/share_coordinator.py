"""Share groups (KIP-932) on this broker: the facade the share request handlers call. The work is
done by

    share_groups.py      ShareGroupHeartbeat / ShareGroupDescribe: members, epochs, sessions
    share_group.py       one share group as `__consumer_offsets` records it, and its replay
    share_assignor.py    the `simple` assignor
    share_sessions.py    ShareFetch / ShareAcknowledge's share sessions and their epochs
    share_partition.py   one share-partition: acquired records, locks, acknowledgements, start offset
    share_state.py       the share-partitions' snapshots in `__share_group_state`

An acknowledgement batch is checked whole before any of it is applied (share_partition.acknowledge),
and the share-partition's snapshot is appended before the answer.
Acquiring is not logged (as in Kafka): after a restart an acquired record is available again.
Event loop only; no `await` between a share-partition's change and its write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass

from ..group_configs import GroupConfig, duration_ms
from ..protocol.codec import ErrorCode
from ..protocol.errors import BrokerError, InvalidRecordState, NonEmptyGroup, UnknownMemberId
from ..protocol.share_state_records import SharePartitionKey
from ..storage.batch import BatchHeader
from .share_groups import ShareGroup, ShareGroups, ShareHeartbeatResult
from .share_partition import Acquired, SharePartition, region_batches
from .share_sessions import ShareSessions
from .share_state import ShareStateStore
from .sweeper import Sweeper

log = logging.getLogger(__name__)

MAX_SWEEP_WAIT_S = 1.0


@dataclass(frozen=True)
class Fetched:
    records: bytes                 # the batches holding the acquired records, as the log has them
    acquired: list[Acquired]


class ShareCoordinator:
    def __init__(self, replicas, metadata, config, create_topic, group_configs, group_store, is_other_group,
                 alone: bool = True) -> None:
        self.alone = alone  # (in a ZooKeeper cluster share groups are not served yet: nothing to load)
        self.replicas = replicas
        self.metadata = metadata
        self.config = config
        self.sweeper = Sweeper(self.sweep, self._next_sweep)
        self.groups = ShareGroups(group_store, metadata, config, group_configs, is_other_group, self.sweeper.by)
        self.groups.member_left.append(self._member_left)
        self.sessions = ShareSessions()
        self.state = ShareStateStore(replicas, metadata, config, create_topic)
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self._available = asyncio.Event()  # set (then replaced) when records become available again

    async def start(self) -> None:
        if self.alone:
            self.partitions = self.state.load()
            self.topics_deleted(set())  # (topics deleted while the broker was down)
        self.sweeper.start()

    async def stop(self) -> None:
        self.sweeper.stop()

    def group_config(self, group_id: str) -> GroupConfig:
        return self.groups.group_config(group_id)

    # -- membership ------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        return self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host)

    def group(self, group_id: str) -> ShareGroup | None:
        return self.groups.groups.get(group_id)

    def group_ids(self) -> set[str]:
        """Every share group this broker knows: those with members and those with a share-partition."""
        return set(self.groups.groups) | {key.group for key in self.partitions}

    def _member_left(self, group_id: str, member_id: str, timed_out: bool) -> None:
        """A member that left on its own still closes its share session (its last acknowledgements may
        race its leaving heartbeat on another connection); a timed-out one's session goes with it."""
        if timed_out:
            self.sessions.drop_member(group_id, member_id)
        self.release(group_id, member_id)

    def release(self, group_id: str, member_id: str) -> None:
        """The member's locks go (it left, or closed its share session): its records are available again."""
        limit = self.config.get("group.share.delivery.count.limit")
        for key, partition in self.partitions.items():
            if key.group == group_id and partition.release_member(member_id, limit):
                self._persist(key, partition)
                self._wake()

    def check_member(self, group_id: str, member_id: str) -> None:
        if not self.groups.is_member(group_id, member_id):
            raise UnknownMemberId(f"member {member_id} is not in share group {group_id!r}; it must join first")

    # -- records ---------------------------------------------------------------------------------

    def acknowledge(self, group_id: str, member_id: str, topic_id: uuid.UUID, index: int,
                    batches: list[tuple[int, int, list[int]]]) -> None:
        """Apply one partition's acknowledgement batches and write the result. Raises InvalidRecordState
        (for the batch that failed; the ones before it stand) or the log's error."""
        key = SharePartitionKey(group_id, topic_id, index)
        partition = self.partitions.get(key)
        if partition is None:
            raise InvalidRecordState(f"share group {group_id!r} has fetched nothing from {topic_id}-{index}")
        limit = self.config.get("group.share.delivery.count.limit")
        try:
            for first, last, types in batches:
                partition.acknowledge(member_id, first, last, types, limit)
        finally:
            self._persist(key, partition)
            if partition.next_fetch_offset() < partition.end_offset:
                self._wake()

    def acquire(self, group_id: str, member_id: str, topic: str, topic_id: uuid.UUID, index: int,
                max_records: int, max_bytes: int) -> Fetched:
        """Acquire for the member what is available of one partition (creating its share-partition at
        `share.auto.offset.reset`), under a lock of `share.record.lock.duration.ms`."""
        config = self.group_config(group_id)
        read_committed = config["share.isolation.level"] == "read_committed"
        key = SharePartitionKey(group_id, topic_id, index)
        partition = self.partitions.get(key)
        if partition is None:
            partition = self.partitions[key] = SharePartition(self._initial_offset(topic, index, config, read_committed))
            self._persist(key, partition)
        replica = self.replicas.leader(topic, index)
        if partition.start_offset < replica.log.log_start_offset:  # (retention passed it)
            partition.reset(replica.log.log_start_offset)
            self._persist(key, partition)
        got = self.replicas.read(topic, index, partition.next_fetch_offset(), max_bytes, min_one_batch=True,
                                 read_committed=read_committed)
        if got.records is None:
            return Fetched(b"", [])
        spans: list[tuple[int, int]] = []
        deadline = time.monotonic() + config["share.record.lock.duration.ms"] / 1000
        acquired, chosen = partition.acquire(region_batches(got.records, spans), member_id, max_records, deadline,
                                             self.config.get("group.share.partition.max.record.locks"),
                                             AbortedBatches(got.aborted) if read_committed else _never)
        if acquired:
            self.sweeper.by(deadline)
        return Fetched(_read_spans(got.records, [spans[i] for i in chosen]), acquired)

    def _initial_offset(self, topic: str, index: int, config: GroupConfig, read_committed: bool) -> int:
        """Where the group starts on a partition it never read (`share.auto.offset.reset`): the log
        start, the end, or the first record at most `by_duration:` old (the end when there is none)."""
        replica = self.replicas.leader(topic, index)
        end = replica.last_stable_offset if read_committed else replica.high_watermark
        reset = config["share.auto.offset.reset"]
        if reset == "earliest":
            return replica.log.log_start_offset
        if reset == "latest":
            return end
        found = replica.log.offset_for_timestamp(int(time.time() * 1000) - duration_ms(reset))
        return end if found is None else min(found[0], end)

    async def wait_for_available(self, timeout_s: float) -> None:
        """Sleep until records of some share-partition become available again, or the timeout."""
        if timeout_s <= 0:
            return
        try:
            await asyncio.wait_for(self._available.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def _wake(self) -> None:
        self._available.set()
        self._available = asyncio.Event()

    def _persist(self, key: SharePartitionKey, partition: SharePartition | None) -> None:
        self.state.write(key, partition)

    # -- admin -----------------------------------------------------------------------------------

    def state_name(self, group_id: str) -> str:
        group = self.groups.groups.get(group_id)
        return group.state if group is not None else "Empty"

    def share_partition(self, group_id: str, topic_id: uuid.UUID, index: int) -> SharePartition | None:
        return self.partitions.get(SharePartitionKey(group_id, topic_id, index))

    def share_partitions(self, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        return {(k.topic_id, k.partition): p for k, p in self.partitions.items() if k.group == group_id}

    def require_empty(self, group_id: str) -> None:
        group = self.groups.groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroup(f"share group {group_id!r} has {len(group.members)} member(s): stop them first")

    def reset_offset(self, group_id: str, topic_id: uuid.UUID, index: int, offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts at `offset`, nothing in flight. Only for
        a group with no members (NonEmptyGroup)."""
        self.require_empty(group_id)
        key = SharePartitionKey(group_id, topic_id, index)
        partition = self.partitions.setdefault(key, SharePartition(offset))
        partition.reset(offset)
        self._persist(key, partition)

    def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> None:
        """DeleteShareGroupOffsets: the group forgets the topic (it starts again at
        share.auto.offset.reset). Only for a group with no members (NonEmptyGroup)."""
        self.require_empty(group_id)
        for key in [k for k in self.partitions if k.group == group_id and k.topic_id == topic_id]:
            self._persist(key, None)
            del self.partitions[key]

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: its share-partitions' state goes. NON_EMPTY_GROUP while it
        has members."""
        try:
            self.require_empty(group_id)
            for key in [k for k in self.partitions if k.group == group_id]:
                self._persist(key, None)
                del self.partitions[key]
        except BrokerError as exc:
            return exc.code
        self.groups.delete(group_id)
        self.sessions.drop_group(group_id)
        log.info("share group %s deleted", group_id)
        return ErrorCode.none

    def topics_deleted(self, topics: set[str]) -> int:
        """A deletion listener (modes.py): the share-partitions of topics that are gone (by id: a topic
        created again under the same name is another topic) are deleted with them. How many went."""
        gone = [key for key in self.partitions if self.metadata.by_id(key.topic_id) is None]
        for key in gone:
            try:
                self._persist(key, None)
            except BrokerError as exc:
                log.error("share group %s: cannot delete the state of deleted topic %s-%d: %s", key.group,
                          key.topic_id, key.partition, exc)
                continue
            del self.partitions[key]
        if gone:
            log.info("deleted %d share-partition(s) of deleted topics %s", len(gone), ", ".join(sorted(topics)) or "")
        return len(gone)

    # -- the sweep -------------------------------------------------------------------------------

    def sweep(self, now: float) -> None:
        self.groups.expire(now)
        limit = self.config.get("group.share.delivery.count.limit")
        for key, partition in self.partitions.items():
            if partition.expire_locks(now, limit):
                try:
                    self._persist(key, partition)
                except BrokerError as exc:
                    log.error("share group %s: cannot write %s-%d's state after its locks ended: %s", key.group,
                              key.topic_id, key.partition, exc)
                self._wake()

    def _next_sweep(self, now: float) -> float:
        due = [now + MAX_SWEEP_WAIT_S, *self.groups.deadlines(),
               *(t for p in self.partitions.values() if (t := p.earliest_lock_end()) is not None)]
        return min(t for t in due if t > now) if any(t > now for t in due) else now + MAX_SWEEP_WAIT_S


def _never(header: BatchHeader) -> bool:
    return False


class AbortedBatches:
    """Asked of each batch of a read_committed read in order: is it an aborted transaction's (the
    read's `aborted` list: (producer id, first offset)s), which a share group never hands out?"""

    def __init__(self, aborted) -> None:
        self.starts = sorted(((a.first_offset, a.producer_id) for a in aborted or ()), reverse=True)
        self.open: set[int] = set()  # producers inside an aborted transaction

    def __call__(self, header: BatchHeader) -> bool:
        while self.starts and self.starts[-1][0] <= header.base_offset:
            self.open.add(self.starts.pop()[1])
        if header.producer_id not in self.open:
            return False
        if header.is_control:
            self.open.discard(header.producer_id)
            return False
        return header.is_transactional


def _read_spans(region, spans: list[tuple[int, int]]) -> bytes:
    """The bytes of these (start, end) spans of a log region, adjacent ones read together."""
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and merged[-1][1] == start:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    return b"".join(os.pread(region.fd, end - start, region.position + start) for start, end in merged)
