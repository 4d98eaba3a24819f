"""Group coordinator: Kafka's classic consumer-group protocol and KIP-848's consumer group protocol
over the `__consumer_offsets` topic. The facade the request handlers and the broker call; the work
is done by

    group_store.py        the groups and offsets as the topic records them (load, replay, append)
    membership.py         JoinGroup, SyncGroup, Heartbeat, LeaveGroup: members and rebalances
    consumer_groups.py    ConsumerGroupHeartbeat, ConsumerGroupDescribe: KIP-848 groups
    classic_members.py    the classic requests of a KIP-848 group's classic members (online upgrade)
    group_migration.py    the records of an online upgrade (classic → consumer) and downgrade
    committed_offsets.py  OffsetCommit / Fetch / Delete, DeleteGroups, expiry, deleted topics' offsets
    sweeper.py            one timer at the earliest deadline of any of them

A request first computes its records without mutating anything, appends them through the replica
manager, then replays them (`GroupStore.replay`, also the loading path). Event loop only.
"""

from __future__ import annotations

import time

from ..protocol.errors import ErrorCode
from ..replication.partition import Partition
from .classic_members import ClassicMembers
from .committed_offsets import CommittedOffsets, OffsetCommit
from .consumer_group import ConsumerGroup, end_records
from .consumer_groups import ConsumerGroups, Heartbeat, HeartbeatResult
from .share_group import ShareGroup
from .group import Group, GroupState
from .group_store import GroupStore
from .membership import JoinRequest, JoinResult, Membership, SyncResult, not_coordinator
from .offsets_codec import GroupKey, GroupValue, OffsetKey, OffsetValue
from .sweeper import Sweeper

__all__ = ["GroupCoordinator", "Heartbeat", "HeartbeatResult", "JoinRequest", "JoinResult", "OffsetCommit",
           "SyncResult"]

MAX_SWEEP_WAIT_S = 1.0  # bounds how late a deadline set outside the sweep is noticed


class GroupCoordinator:
    def __init__(self, replicas, metadata, config, create_topic, group_configs, alone: bool = True) -> None:
        self.config = config
        self.metadata = metadata
        self.store = GroupStore(replicas, metadata, config, create_topic, alone)
        # (`self.sweep` looked up at each run: tests replace it to watch the sweeps)
        self.sweeper = Sweeper(lambda now: self.sweep(now), self._next_sweep)
        self.membership = Membership(self.store, config, self.sweeper.by)
        self.consumer = ConsumerGroups(self.store, metadata, config, group_configs, self.sweeper.by,
                                       self.membership.rebalance)
        self.classic_members = ClassicMembers(self.consumer)
        self.offsets = CommittedOffsets(self.store, metadata, config, self.membership.touch, self.consumer.check_commit)
        self.topic = self.store.topic
        self.groups: dict[str, Group] = self.store.groups
        # Told (partition, True) when this broker loaded a partition's groups, (partition, False) when it dropped them.
        self.partition_listeners = self.store.partition_listeners
        # Told which topics' offsets went (`gone(topic)`): transactional commits still pending for them go too.
        self.deletion_listeners = self.offsets.deletion_listeners
        self._next_retention_check = 0.0

    @property
    def led(self) -> set[int] | None:
        """The partitions of __consumer_offsets whose groups this broker coordinates: in a cluster,
        those it leads, once loaded; None for a broker alone, which coordinates every group."""
        return self.store.led

    @property
    def sweep_due(self) -> float:
        return self.sweeper.due

    # -- lifecycle and partitions led ----------------------------------------------------------

    async def start(self) -> None:
        self.load()
        self.sweeper.start()

    async def stop(self) -> None:
        self.sweeper.stop()
        not_coordinator(self.groups.values())

    def load(self) -> None:
        self.store.load(self.offsets.remove_missing_topics)

    def owns(self, group_id: str) -> bool:
        return self.store.owns(group_id)

    def became_leader(self, partition: Partition) -> None:
        """In a cluster: this broker leads `partition` of __consumer_offsets from now on. Its groups
        load once it is committed; until then their members hear NOT_COORDINATOR and retry."""
        self.store.became_leader(partition, self.load_partition)

    def load_partition(self, partition: int) -> None:
        self.store.load_partition(partition, self.offsets.remove_missing_topics)

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads `partition`: its groups' members must find the new coordinator."""
        not_coordinator(self.store.unload_partition(partition))

    async def replicated(self, group_id: str) -> ErrorCode:
        return await self.store.replicated(group_id)

    async def ensure_topic(self) -> None:
        """Kafka creates `__consumer_offsets` on the first FindCoordinator for a group."""
        await self.topic.ensure()

    def replay(self, key: OffsetKey | GroupKey, value: OffsetValue | GroupValue | None) -> None:
        self.store.replay(key, value)

    # -- membership ----------------------------------------------------------------------------

    # (a KIP-848 group with members answers classic requests itself: its classic members)

    def _classic_in_consumer_group(self, group_id: str) -> bool:
        return self.owns(group_id) and self.classic_members.serves(group_id)

    async def join(self, req: JoinRequest) -> JoinResult:
        if self._classic_in_consumer_group(req.group_id):
            return self.classic_members.join(req)
        return await self.membership.join(req)

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes]) -> SyncResult:
        if self._classic_in_consumer_group(group_id):
            return self.classic_members.sync(group_id, generation, member_id, instance_id, protocol_type, protocol)
        return await self.membership.sync(group_id, generation, member_id, instance_id, protocol_type, protocol,
                                          assignments)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        if self._classic_in_consumer_group(group_id):
            return self.classic_members.heartbeat(group_id, generation, member_id, instance_id)
        return self.membership.heartbeat(group_id, generation, member_id, instance_id)

    def leave(self, group_id: str, identities: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        if self._classic_in_consumer_group(group_id):
            return self.classic_members.leave(group_id, identities)
        return self.membership.leave(group_id, identities)

    def group(self, group_id: str) -> Group | None:
        """The classic group, if this broker has it (in any state)."""
        return None if group_id in self.store.consumer_groups else self.groups.get(group_id)

    def listed(self) -> list[Group]:
        """The classic groups (and groups of committed offsets alone)."""
        return [g for g in self.groups.values()
                if not g.is_(GroupState.DEAD) and g.group_id not in self.store.consumer_groups]

    # -- consumer groups (KIP-848) -------------------------------------------------------------

    def consumer_heartbeat(self, heartbeat: Heartbeat) -> HeartbeatResult:
        return self.consumer.heartbeat(heartbeat)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.store.consumer_groups.get(group_id)

    def consumer_groups(self) -> list[ConsumerGroup]:
        return list(self.store.consumer_groups.values())

    def share_groups(self) -> list[ShareGroup]:
        """The KIP-932 share groups' membership (their records' state is the share coordinator's)."""
        return list(self.store.share_groups.values())

    def consumer_assignor(self, group: ConsumerGroup) -> str:
        return self.consumer.assignor_name(group.members.values())

    def check_consumer_commit(self, group_id: str, member_epoch: int, member_id: str) -> ErrorCode | None:
        """A commit's check in a KIP-848 group (None: `group_id` is not one)."""
        return self.consumer.check_commit(group_id, member_epoch, member_id)

    def check_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        return self.consumer.check_fetch(group_id, member_id, member_epoch)

    # -- offsets -------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                       commits: list[OffsetCommit]) -> list[ErrorCode]:
        """One error per commit, in order."""
        return self.offsets.commit(group_id, generation, member_id, instance_id, commits)

    def offset_records(self, group_id: str, commits: list[OffsetCommit]):
        return self.offsets.records(group_id, commits)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], OffsetValue | None]:
        return self.offsets.fetch(group_id, partitions)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return self.offsets.delete(group_id, partitions)

    def delete_group(self, group_id: str) -> ErrorCode:
        consumer = self.store.consumer_groups.get(group_id)
        if consumer is not None and consumer.members and self.owns(group_id):
            return ErrorCode.non_empty_group
        return self.offsets.delete_group(group_id, end_records(consumer) if consumer else [])

    def expire_offsets(self, now_ms: int) -> int:
        return self.offsets.expire(now_ms)

    def topics_deleted(self, topics: set[str]) -> int:
        return self.offsets.topics_deleted(topics)

    # -- the sweep -----------------------------------------------------------------------------

    def sweep(self, now: float) -> None:
        self.membership.expire(now)
        self.consumer.expire(now)
        if now >= self._next_retention_check:
            self._next_retention_check = now + self.config.get("offsets.retention.check.interval.ms") / 1000
            self.expire_offsets(int(time.time() * 1000))

    def _next_sweep(self, now: float) -> float:
        """The earliest moment after `now` at which the sweep has something to check, within MAX_SWEEP_WAIT_S."""
        due = [self._next_retention_check, now + MAX_SWEEP_WAIT_S, *self.membership.deadlines(),
               *self.consumer.deadlines()]
        return min(t for t in due if t > now)
