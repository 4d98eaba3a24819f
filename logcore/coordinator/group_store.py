"""The groups as `__consumer_offsets` records them: each group's committed offsets and its last
generation (protocol, leader, members and their assignments), the KIP-848 consumer groups (their
epochs, members and assignments: consumer_group.py), the KIP-932 share groups' membership
(share_group.py), and which of the topic's partitions this
broker coordinates. Kafka's GroupMetadataManager, less the offset rules (committed_offsets.py) and
the protocols' rules (membership.py, consumer_groups.py).

`replay` is the only mutator of what the log records, and also the loading path: a change is
appended first (`append`), then replayed. Membership while a rebalance is under way lives in the
same `Group` objects but only in memory (membership.py), as in Kafka.

Event loop only.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from ..protocol.errors import BrokerError, ErrorCode
from ..replication.partition import Partition
from ..protocol.consumer_group_records import ConsumerGroupKey, MemberKey, RegexKey
from ..protocol.share_group_records import ShareGroupKey, ShareMemberKey
from . import consumer_group, share_group
from .consumer_group import ConsumerGroup
from .share_group import ShareGroup
from .group import VALID_PREVIOUS, Group, GroupState, Member
from .offsets_codec import (OFFSETS_TOPIC, GroupValue, Key, OffsetKey, decode, encode_key, encode_value,
                            partition_for)
from .state_topic import StateTopic

log = logging.getLogger(__name__)

S = GroupState
Record = tuple[Key, object]  # (a key of offsets_codec, its value or None)
Tidy = Callable[[Iterable[Group]], None]  # what loading does to the groups it loaded, before it says it is done


class GroupStore:
    def __init__(self, replicas, metadata, config, create_topic, alone: bool) -> None:
        self.config = config
        self.topic = StateTopic(OFFSETS_TOPIC, config.get("offsets.topic.num.partitions"),
                                config.get("offsets.topic.segment.bytes"), replicas, metadata, create_topic,
                                config.get("offsets.topic.replication.factor"))
        self.groups: dict[str, Group] = {}  # classic groups, and every group's committed offsets
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups (their offsets are in `groups`)
        self.share_groups: dict[str, ShareGroup] = {}  # KIP-932 groups' membership (their records' state: share_state.py)
        # The partitions of __consumer_offsets whose groups this broker coordinates: in a cluster,
        # those it leads, once loaded; None for a broker alone, which coordinates every group.
        self.led: set[int] | None = None if alone else set()
        # Told (partition, True) when this broker loaded a partition's groups, (partition, False) when it dropped them.
        self.partition_listeners: list[Callable[[int, bool], None]] = []

    # -- which groups are here -----------------------------------------------------------------

    def owns(self, group_id: str) -> bool:
        return self.led is None or partition_for(group_id, self.topic.partitions) in self.led

    def groups_of(self, partition: int) -> list[Group]:
        count = self.topic.partitions
        return [g for g in self.groups.values() if partition_for(g.group_id, count) == partition]

    def load(self, tidy: Tidy) -> None:
        """A broker alone: rebuild every group and offset by replaying `__consumer_offsets` from the
        start (in a cluster, partitions load as this broker comes to lead them); then `tidy` them."""
        if not self.topic.exists or self.led is not None:
            return
        started = time.monotonic()
        records = self.topic.replay(lambda key, value: self.replay(*decode(key, value)))
        for group in self.groups.values():
            for member in group.members.values():
                member.heartbeat()  # loaded members get one session to find the new coordinator
        for partition in range(self.topic.partitions):
            self._notify(partition, True)
        tidy(self.groups.values())
        log.info("loaded %d group(s) from %d %s record(s) in %.2fs", len(self.groups), records, OFFSETS_TOPIC,
                 time.monotonic() - started)

    def load_partition(self, partition: int, tidy: Tidy) -> None:
        """This broker now leads `partition` (its log is committed up to here): take its groups, then
        `tidy` them."""
        if self.led is None or partition in self.led:
            return
        started = time.monotonic()
        records = self.topic.replay(lambda key, value: self.replay(*decode(key, value)), [partition])
        for group in self.groups_of(partition):
            for member in group.members.values():
                member.heartbeat()
        self.led.add(partition)
        self._notify(partition, True)
        tidy(self.groups_of(partition))
        log.info("coordinating the groups of %s-%d (%d record(s) in %.2fs)", OFFSETS_TOPIC, partition, records,
                 time.monotonic() - started)

    def unload_partition(self, partition: int) -> list[Group]:
        """This broker no longer leads `partition`: its groups leave memory, and are returned (their
        members must be told to find the new coordinator)."""
        if self.led is None:
            return []
        self.led.discard(partition)
        self._notify(partition, False)
        groups = self.groups_of(partition)
        for group in groups:
            del self.groups[group.group_id]
        count = self.topic.partitions
        for kind in (self.consumer_groups, self.share_groups):
            for group_id in [g for g in kind if partition_for(g, count) == partition]:
                del kind[group_id]
        return groups

    def _notify(self, partition: int, loaded: bool) -> None:
        for listener in self.partition_listeners:
            listener(partition, loaded)

    def became_leader(self, partition: Partition, loaded: Callable[[int], None]) -> None:
        """In a cluster: this broker leads `partition` of __consumer_offsets from now on; `loaded(index)`
        once it is committed (`StateTopic.load_when_committed`)."""
        self.topic.load_when_committed(partition, loaded)

    async def replicated(self, group_id: str) -> ErrorCode:
        """Once what was written for `group_id` is in every in-sync replica (at once for a broker
        alone): an acknowledged commit survives its coordinator's death."""
        try:
            await self.topic.replicated(partition_for(group_id, self.topic.partitions),
                                        self.config.get("offsets.commit.timeout.ms") / 1000)
        except BrokerError as exc:
            return exc.code
        return ErrorCode.none

    # -- the only mutator of logged state ------------------------------------------------------

    def append(self, group_id: str, records: list[Record]) -> None:
        """Append then replay: the commit half of compute-then-commit. Raises the log's BrokerError."""
        partition = partition_for(group_id, self.topic.partitions)
        self.topic.append(partition, [(encode_key(k), encode_value(v)) for k, v in records])
        for key, value in records:
            self.replay(key, value)

    def replay(self, key: Key, value) -> None:
        if isinstance(key, (ConsumerGroupKey, MemberKey, RegexKey)):
            consumer_group.replay(self.consumer_groups, key, value)
            return
        if isinstance(key, (ShareGroupKey, ShareMemberKey)):
            share_group.replay(self.share_groups, key, value)
            return
        if isinstance(key, OffsetKey):
            group = self.groups.get(key.group)
            if value is None:
                if group is not None:
                    group.offsets.pop((key.topic, key.partition), None)
                return
            if group is None:
                group = self.groups[key.group] = Group(key.group)
            group.offsets[(key.topic, key.partition)] = value
            return
        group = self.groups.get(key.group)
        if value is None:
            if group is not None:
                self._drop(group)
            return
        if group is None:
            group = self.groups[key.group] = Group(key.group)
        _apply_generation(group, value)

    def _drop(self, group: Group) -> None:
        if group.offsets:  # offsets outlive the group's metadata; it becomes an offsets-only group
            group.state, group.protocol_type, group.protocol, group.leader_id = S.EMPTY, None, None, None
            group.members.clear()
            group.static_members.clear()
            return
        group.state = S.DEAD
        self.groups.pop(group.group_id, None)


def _apply_generation(group: Group, value: GroupValue) -> None:
    group.protocol_type = value.protocol_type or None
    group.generation = value.generation
    group.protocol = value.protocol
    group.leader_id = value.leader
    listed = {m.member_id for m in value.members}
    for member_id in [m for m in group.members if m not in listed]:
        group.remove(member_id)
    for mv in value.members:
        member = group.members.get(mv.member_id)
        if member is None:  # loading: the member rejoins this coordinator by heartbeating
            protocols = [(value.protocol, mv.subscription)] if value.protocol else []
            member = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                            mv.rebalance_timeout, mv.session_timeout, protocols)
            group.add(member)
        member.assignment = mv.assignment
    group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
    target = S.STABLE if group.members else S.EMPTY
    if group.state in VALID_PREVIOUS[target]:
        group.transition(target)
    else:  # loading or a static member's replacement: the log is the truth
        group.state = target
    group.state_timestamp_ms = value.current_state_timestamp if value.current_state_timestamp >= 0 else None
