"""Share groups (KIP-932) on this broker: the facade the share request handlers call. The work is
done by

    share_groups.py      ShareGroupHeartbeat / ShareGroupDescribe: members, epochs, sessions
    share_group.py       one share group as `__consumer_offsets` records it, and its replay
    share_assignor.py    the `simple` assignor
    share_sessions.py    ShareFetch / ShareAcknowledge's share sessions and their epochs
    share_partition.py   one share-partition: acquired records, locks, acknowledgements, start offset
    share_state.py       the share coordinator: the share-partitions' snapshots in `__share_group_state`
    share_persister.py   where a leader reads and writes them: this broker's share coordinator or another's

Membership is the group coordinator's (the leader of the group's `__consumer_offsets` partition),
and so is the record of which share-partitions have state (key 15): when the members subscribe to
partitions it does not list, the group coordinator has the share coordinator create their state
(InitializeShareGroupState, start offset unknown: the leader picks it at its first fetch) and lists
them; admin changes (alter, delete offsets, delete the group) and topic deletions update it, so a
new coordinator finds every share-partition of a group with no members;
the share-partitions are held by the leader of their topic partition (Kafka's SharePartitionManager),
read from the share coordinator when a member first fetches there, and dropped when the leadership
moves: the next leader reads them back. A change (acknowledgements, acquisitions, locks that end)
marks its share-partition dirty; `flush` writes the dirty ones, and a request's answer goes out once
its share-partitions are written (replicated, except a snapshot that only counts deliveries written to
a share coordinator on another broker: share_state.py). Acquisitions are written too (Kafka does
not), so a record handed out before a leader's crash comes back with its delivery counted.
Event loop only; no `await` between checking a share-partition's leadership and changing it.
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
from ..protocol.errors import (BrokerError, FencedLeaderEpoch, FencedStateEpoch, InvalidRecordState, NonEmptyGroup,
                               NotLeaderOrFollower, UnknownMemberId, UnknownTopicId)
from ..protocol.share_state_records import SharePartitionKey
from ..replication.partition import Partition
from ..storage.batch import BatchHeader
from .share_groups import ShareGroup, ShareGroups, ShareHeartbeatResult
from .share_partition import Acquired, SharePartition, region_batches
from .share_persister import SharePersister
from .share_sessions import ShareSessions
from .share_state import ADMIN, UNINITIALIZED, ShareStateStore, Snapshot
from .sweeper import Sweeper

log = logging.getLogger(__name__)

MAX_SWEEP_WAIT_S = 1.0


@dataclass(frozen=True)
class Fetched:
    records: bytes                 # the batches holding the acquired records, as the log has them
    acquired: list[Acquired]


class ShareCoordinator:
    def __init__(self, replicas, metadata, config, create_topic, group_configs, group_store, is_other_group,
                 cluster, alone: bool = True, peer_security=None) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.config = config
        self.sweeper = Sweeper(self.sweep, self._next_sweep)
        self.groups = ShareGroups(group_store, metadata, config, group_configs, is_other_group, self.sweeper.by)
        self.groups.member_left.append(self._member_left)
        self.sessions = ShareSessions()
        self.state = ShareStateStore(replicas, metadata, config, create_topic, alone)
        self.persister = SharePersister(self.state, cluster, replicas.broker_id, peer_security)
        # The share-partitions this broker holds as their topic partition's leader, and the leader
        # epoch each was read at (a new epoch: the leadership moved meanwhile, read it again).
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self.epochs: dict[SharePartitionKey, int] = {}
        self._dirty: set[SharePartitionKey] = set()
        self._turns: dict[SharePartitionKey, asyncio.Lock] = {}  # one read or write of a key at a time
        self._background: set[asyncio.Task] = set()
        self._initializing: set[str] = set()  # groups whose share-partitions are being initialized
        self._available = asyncio.Event()  # set (then replaced) when records become available again

    async def ensure_topic(self) -> None:
        """Create `__share_group_state` if it does not exist yet."""
        await self.state.topic.ensure()

    async def start(self) -> None:
        self.state.load()
        self.topics_deleted(set())  # (topics deleted while the broker was down)
        self.sweeper.start()

    async def stop(self) -> None:
        self.sweeper.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self.persister.close()

    def group_config(self, group_id: str) -> GroupConfig:
        return self.groups.group_config(group_id)

    # -- share coordinator partitions (in a cluster) ---------------------------------------------

    def became_leader(self, partition: Partition) -> None:
        self.state.became_leader(partition)

    def unload_partition(self, index: int) -> None:
        self.state.unload_partition(index)

    # -- membership ------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        result = self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host)
        group = self.group(group_id)
        if group is not None and group.state_partitions.initializing and group_id not in self._initializing:
            self._initializing.add(group_id)
            self._in_background(self._initialize(group_id))
        return result

    async def _initialize(self, group_id: str) -> None:
        """Have the share coordinator create the state of the group's share-partitions that key 15 lists
        as initializing, then list them as initialized. One that fails stays initializing, tried again
        at a later heartbeat."""
        try:
            group, done = self.group(group_id), {}
            for topic_id, partitions in dict(group.state_partitions.initializing if group else {}).items():
                for index in sorted(partitions):
                    await self.persister.initialize(SharePartitionKey(group_id, topic_id, index), -1, UNINITIALIZED)
                    # (a broker alone's write does not suspend: thousands of partitions must not hold the loop)
                    await asyncio.sleep(0)
                done[topic_id] = partitions
            group = self.group(group_id)
            if group is not None and self.owns(group_id):
                self.groups.record_state_partitions(group_id, group.state_partitions.initialized_now(done, {}))
        except BrokerError as exc:
            log.warning("share group %s: cannot initialize its share-partitions now (tried again at a later "
                        "heartbeat): %s", group_id, exc)
        finally:
            self._initializing.discard(group_id)

    def _in_background(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates the group's membership."""
        return self.groups.store.owns(group_id)

    def group(self, group_id: str) -> ShareGroup | None:
        return self.groups.groups.get(group_id)

    def group_ids(self) -> set[str]:
        """Every share group this broker coordinates (ListGroups, the id checks of JoinGroup and
        DeleteGroups): those with members, and those with a share-partition whose state or copy is here."""
        known = set(self.groups.groups) | {key.group for key in self.state.keys()} | {key.group for key in self.partitions}
        return {group_id for group_id in known if self.owns(group_id)}

    def _member_left(self, group_id: str, member_id: str, timed_out: bool) -> None:
        """A member that left on its own still closes its share session (its last acknowledgements may
        race its leaving heartbeat on another connection); a timed-out one's session goes with it."""
        if timed_out:
            self.sessions.drop_member(group_id, member_id)
        self.release(group_id, member_id)

    def release(self, group_id: str, member_id: str) -> None:
        """The member's locks go (it left, or closed its share session) on the share-partitions held
        here: its records are available again. (Those held by other leaders: at their locks' end.)"""
        limit = self.config.get("group.share.delivery.count.limit")
        for key, partition in list(self.partitions.items()):
            if key.group == group_id and partition.release_member(member_id, limit):
                self._changed(key)
                self._wake()
        self._flush_later()

    def opening_session(self, group_id: str) -> None:
        """A member opens a share session here. If no other member of the group has one, the group's
        share-partitions held here are read again at their next fetch: the group was empty, and an
        admin may have reset or deleted their state meanwhile (a write would be fenced, but a
        share-partition with nothing to hand out writes nothing)."""
        if not self.sessions.serves(group_id):
            for key in [k for k in self.partitions if k.group == group_id and k not in self._dirty]:
                self._drop(key)

    def check_member(self, group_id: str, member_id: str) -> None:
        """Where the group is coordinated here, the member must be in it. A leader elsewhere trusts
        the share session, as Kafka's does."""
        if self.owns(group_id) and not self.groups.is_member(group_id, member_id):
            raise UnknownMemberId(f"member {member_id} is not in share group {group_id!r}; it must join first")

    # -- the share-partitions held here ----------------------------------------------------------

    def _leading(self, key: SharePartitionKey, topic: str) -> int:
        """The leader epoch of the key's topic partition (NOT_LEADER_OR_FOLLOWER unless this broker
        leads it); a share-partition held from an earlier leadership is dropped."""
        epoch = self.replicas.leader(topic, key.partition).leader_epoch
        if key in self.partitions and self.epochs[key] != epoch:
            self._drop(key)
        return epoch

    def _drop(self, key: SharePartitionKey) -> None:
        self.partitions.pop(key, None)
        self.epochs.pop(key, None)
        self._dirty.discard(key)

    def _turn(self, key: SharePartitionKey) -> asyncio.Lock:
        return self._turns.setdefault(key, asyncio.Lock())

    async def _held(self, key: SharePartitionKey, topic: str, config: GroupConfig) -> SharePartition:
        """The share-partition, read from the share coordinator if this leader does not hold it yet
        (one not initialized starts at `share.auto.offset.reset`)."""
        self._leading(key, topic)
        if key in self.partitions:
            return self.partitions[key]
        async with self._turn(key):
            epoch = self._leading(key, topic)
            if key in self.partitions:
                return self.partitions[key]
            got = await self.persister.read(key, epoch)
            if self._leading(key, topic) != epoch:
                raise NotLeaderOrFollower(f"the leadership of {topic}-{key.partition} moved while its "
                                          f"share-partition was read")
            if got.start_offset == UNINITIALIZED:  # (written at once, as Kafka's InitializeShareGroupState)
                read_committed = config["share.isolation.level"] == "read_committed"
                partition = SharePartition(self._initial_offset(topic, key.partition, config, read_committed))
                partition.state_epoch = got.state_epoch
                await self.persister.write(key, _snapshot(partition, epoch))
                if self._leading(key, topic) != epoch:
                    raise NotLeaderOrFollower(f"the leadership of {topic}-{key.partition} moved while its "
                                              f"share-partition was written")
            else:
                partition = SharePartition.restore(got.start_offset, got.state_epoch, got.batches)
            self.partitions[key], self.epochs[key] = partition, epoch
            return partition

    def _changed(self, key: SharePartitionKey) -> None:
        self._dirty.add(key)

    async def flush(self, keys) -> dict[SharePartitionKey, BrokerError]:
        """Write the dirty share-partitions of `keys`; those that could not be, with their error."""
        failed = {}
        for key in keys:
            try:
                await self._flush(key)
            except BrokerError as exc:
                failed[key] = exc
        return failed

    async def _flush(self, key: SharePartitionKey) -> None:
        async with self._turn(key):
            partition = self.partitions.get(key)
            if partition is None:
                raise NotLeaderOrFollower(f"share-partition {key} is no longer held here (its leadership moved)")
            if key not in self._dirty:
                return
            self._dirty.discard(key)
            try:
                await self.persister.write(key, _snapshot(partition, self.epochs[key]))
            except (FencedStateEpoch, FencedLeaderEpoch):
                if self.partitions.get(key) is partition:  # (reset by an admin, or led elsewhere now): read again
                    self._drop(key)
                raise
            except BrokerError:
                if self.partitions.get(key) is partition:
                    self._dirty.add(key)
                raise

    def _flush_later(self) -> None:
        """Write the dirty share-partitions in the background (a sweep's or a departure's changes)."""
        if self._dirty:
            self._in_background(self._flush_logged(set(self._dirty)))

    async def _flush_logged(self, keys) -> None:
        for key, exc in (await self.flush(keys)).items():
            log.error("share group %s: cannot write the state of %s-%d: %s", key.group, key.topic_id, key.partition, exc)

    # -- records ---------------------------------------------------------------------------------

    def _topic(self, topic_id: uuid.UUID) -> str:
        info = self.metadata.by_id(topic_id)
        if info is None:
            raise UnknownTopicId(f"no topic has id {topic_id}; refresh metadata")
        return info.name

    def acknowledge(self, group_id: str, member_id: str, topic_id: uuid.UUID, index: int,
                    batches: list[tuple[int, int, list[int]]]) -> SharePartitionKey:
        """Apply one partition's acknowledgement batches (`flush` writes them). Raises
        InvalidRecordState (for the batch that failed; the ones before it stand), or
        NOT_LEADER_OR_FOLLOWER when this broker does not lead the partition."""
        key = SharePartitionKey(group_id, topic_id, index)
        self._leading(key, self._topic(topic_id))
        partition = self.partitions.get(key)
        if partition is None:
            raise InvalidRecordState(f"share group {group_id!r} has fetched nothing from {topic_id}-{index} "
                                     f"at this leader")
        limit = self.config.get("group.share.delivery.count.limit")
        start = partition.start_offset
        try:
            for first, last, types in batches:
                partition.acknowledge(member_id, first, last, types, limit)
        finally:
            self._changed(key)
            # records released, or the window moved on (a fetch waiting on a full window may take
            # the next batch now: the member's own next ShareFetch may be that waiting one)
            if partition.next_fetch_offset() < partition.end_offset or partition.start_offset > start:
                self._wake()
        return key

    async def acquire(self, group_id: str, member_id: str, topic: str, topic_id: uuid.UUID, index: int,
                      max_records: int, max_bytes: int) -> Fetched:
        """Acquire for the member what is available of one partition (creating its share-partition at
        `share.auto.offset.reset`), under a lock of `share.record.lock.duration.ms` (`flush` writes it)."""
        config = self.group_config(group_id)
        read_committed = config["share.isolation.level"] == "read_committed"
        key = SharePartitionKey(group_id, topic_id, index)
        partition = await self._held(key, topic, config)
        replica = self.replicas.leader(topic, index)
        if partition.start_offset < replica.log.log_start_offset:  # (retention passed it)
            partition.reset(replica.log.log_start_offset)
            self._changed(key)
        got = self.replicas.read(topic, index, partition.next_fetch_offset(), max_bytes, min_one_batch=True,
                                 read_committed=read_committed)
        if got.records is None:
            return Fetched(b"", [])
        spans: list[tuple[int, int]] = []
        deadline = time.monotonic() + config["share.record.lock.duration.ms"] / 1000
        acquired, chosen = partition.acquire(region_batches(got.records, spans), member_id, max_records, deadline,
                                             self.config.get("group.share.partition.max.record.locks"),
                                             AbortedBatches(got.aborted) if read_committed else _never)
        if acquired or chosen:
            self._changed(key)
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

    def holds_locks(self, group_id: str, member_id: str, partitions) -> bool:
        """Whether the member holds acquired records on any of these (topic id, partition)s here."""
        return any((held := self.partitions.get(SharePartitionKey(group_id, *tp))) is not None
                   and member_id in held.members for tp in partitions)

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

    # -- admin (at the group's coordinator) ------------------------------------------------------

    def state_name(self, group_id: str) -> str:
        group = self.groups.groups.get(group_id)
        return group.state if group is not None else "Empty"

    async def share_partition(self, group_id: str, topic_id: uuid.UUID, index: int) -> SharePartition | None:
        """The share-partition as its durable state has it (None: the group never read it)."""
        got = await self.persister.read(SharePartitionKey(group_id, topic_id, index), ADMIN)
        if got.start_offset == UNINITIALIZED:
            return None
        return SharePartition.restore(got.start_offset, got.state_epoch, got.batches)

    def known_partitions(self, group_id: str) -> set[tuple[uuid.UUID, int]]:
        """The (topic id, partition)s the group may have state on: those key 15 lists, those whose state
        or share-partition is here, and every partition of the topics its members subscribe."""
        known = {(k.topic_id, k.partition) for k in [*self.state.keys(), *self.partitions] if k.group == group_id}
        group = self.groups.groups.get(group_id)
        if group is not None:
            known |= group.state_partitions.known()
        for name in {n for m in (group.members.values() if group else ()) for n in m.subscribed_topic_names}:
            info = self.metadata.topics.get(name)
            if info is not None:
                known |= {(info.topic_id, i) for i in range(info.partitions)}
        return known

    def require_empty(self, group_id: str) -> None:
        group = self.groups.groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroup(f"share group {group_id!r} has {len(group.members)} member(s): stop them first")

    async def _admin_write(self, key: SharePartitionKey, snapshot: Snapshot | None) -> None:
        """An admin's change: written at the share coordinator, and the share-partition, if held here,
        read again (a leader elsewhere finds its writes fenced by the new state epoch, and reads again)."""
        async with self._turn(key):
            await self.persister.write(key, snapshot)
            self._drop(key)

    async def reset_offset(self, group_id: str, topic_id: uuid.UUID, index: int, offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts at `offset`, nothing in flight, at the next
        state epoch. Only for a group with no members (NonEmptyGroup)."""
        self.require_empty(group_id)
        key = SharePartitionKey(group_id, topic_id, index)
        current = await self.persister.summary(key)
        await self._admin_write(key, Snapshot(current.state_epoch + 1, ADMIN, offset, ()))
        group = self.group(group_id)
        if group is not None:
            self.groups.record_state_partitions(group_id, group.state_partitions.initialized_now(
                {topic_id: frozenset((index,))}, {topic_id: self._topic(topic_id)}))

    async def _has_state(self, group_id: str, topic_id: uuid.UUID, index: int) -> bool:
        """Whether the share-partition's state is to be deleted: key 15 lists it (initialized, maybe with
        its start still unknown), or the share coordinator has a start offset for it."""
        group = self.group(group_id)
        if group is not None and (topic_id, index) in group.state_partitions.known():
            return True
        return (await self.persister.summary(SharePartitionKey(group_id, topic_id, index))).start_offset != UNINITIALIZED

    async def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> None:
        """DeleteShareGroupOffsets: the group forgets the topic (it starts again at
        share.auto.offset.reset). Only for a group with no members (NonEmptyGroup)."""
        self.require_empty(group_id)
        info, group = self.metadata.by_id(topic_id), self.group(group_id)
        indexes = [index for index in range(info.partitions if info else 0)
                   if await self._has_state(group_id, topic_id, index)]
        if group is not None and info is not None:  # (key 15: the topic's state is being deleted ...)
            self.groups.record_state_partitions(group_id, group.state_partitions.deleting_topic(topic_id, info.name))
        for index in indexes:
            await self._admin_write(SharePartitionKey(group_id, topic_id, index), None)
        if (group := self.group(group_id)) is not None:  # (... and is gone)
            self.groups.record_state_partitions(group_id, group.state_partitions.forgetting({topic_id}))

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: its share-partitions' state goes. NON_EMPTY_GROUP while it
        has members."""
        try:
            self.require_empty(group_id)
            for topic_id, index in sorted(self.known_partitions(group_id)):
                if await self._has_state(group_id, topic_id, index):
                    await self._admin_write(SharePartitionKey(group_id, topic_id, index), None)
        except BrokerError as exc:
            return exc.code
        self.groups.delete(group_id)
        self.sessions.drop_group(group_id)
        log.info("share group %s deleted", group_id)
        return ErrorCode.none

    def topics_deleted(self, topics: set[str]) -> int:
        """A deletion listener (modes.py): the share-partitions of topics that are gone (by id: a topic
        created again under the same name is another topic) are deleted with them, as far as this
        broker holds them or coordinates their state. How many."""
        for key in [k for k in self.partitions if self.metadata.by_id(k.topic_id) is None]:
            self._drop(key)
        for group_id, group in list(self.groups.groups.items()):  # (key 15 forgets them)
            ids = {t for t, _ in group.state_partitions.known()} | group.state_partitions.deleting
            if (deleted := {t for t in ids if self.metadata.by_id(t) is None}) and self.owns(group_id):
                try:
                    self.groups.record_state_partitions(group_id, group.state_partitions.forgetting(deleted))
                except BrokerError as exc:
                    log.error("share group %s: cannot record its deleted topics' share-partitions gone: %s", group_id, exc)
        gone = [key for key in self.state.keys() if self.metadata.by_id(key.topic_id) is None]
        if gone:
            self._in_background(self._delete_state(gone, topics))
        return len(gone)

    async def _delete_state(self, keys: list[SharePartitionKey], topics: set[str]) -> None:
        for key in keys:
            try:
                await self.state.write(key, None)
            except BrokerError as exc:
                log.error("share group %s: cannot delete the state of deleted topic %s-%d: %s", key.group,
                          key.topic_id, key.partition, exc)
        log.info("deleted %d share-partition(s) of deleted topics %s", len(keys), ", ".join(sorted(topics)) or "")

    # -- the sweep -------------------------------------------------------------------------------

    def sweep(self, now: float) -> None:
        self.groups.expire(now)
        limit = self.config.get("group.share.delivery.count.limit")
        for key, partition in self.partitions.items():
            if partition.expire_locks(now, limit):
                self._changed(key)
                self._wake()
        self._flush_later()

    def _next_sweep(self, now: float) -> float:
        due = [now + MAX_SWEEP_WAIT_S, *self.groups.deadlines(),
               *(t for p in self.partitions.values() if (t := p.earliest_lock_end()) is not None)]
        return min(t for t in due if t > now) if any(t > now for t in due) else now + MAX_SWEEP_WAIT_S


def _snapshot(partition: SharePartition, leader_epoch: int) -> Snapshot:
    return Snapshot(partition.state_epoch, leader_epoch, partition.start_offset, tuple(partition.state_batches()))


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
