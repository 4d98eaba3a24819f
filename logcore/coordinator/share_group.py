"""One KIP-932 share group as `__consumer_offsets` records it (logcore/protocol/share_group_records.py):
its epochs, its members' subscriptions and the partitions each was given, which of its share-partitions
have state at the share coordinator (key 15, `StatePartitions`), and `replay`, the only mutator of that
state and also its loading path. Session deadlines live in memory only.

Event loop only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from ..protocol import share_group_records as records
from ..protocol.consumer_group_records import TargetAssignmentMemberValue, TargetAssignmentMetadataValue, i32
from ..protocol.share_group_records import ShareGroupKey, ShareMemberKey
from .consumer_group import topic_partitions
from .share_assignor import Assignment

Record = tuple[ShareGroupKey | ShareMemberKey, object]


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)


@dataclass(frozen=True)
class StatePartitions:
    """Key 15 (ShareGroupStatePartitionMetadata): the share-partitions the group coordinator asked the
    share coordinator to create (initializing) and those it has (initialized), and the topics whose
    state is being deleted; with the topic names as recorded (a deleted topic's name stays readable)."""

    initializing: Assignment = field(default_factory=dict)
    initialized: Assignment = field(default_factory=dict)
    deleting: frozenset[uuid.UUID] = frozenset()
    names: dict[uuid.UUID, str] = field(default_factory=dict)

    def known(self) -> set[tuple[uuid.UUID, int]]:
        """Every (topic id, partition) that may have state."""
        return {(t, p) for a in (self.initializing, self.initialized) for t, ps in a.items() for p in ps}

    def to_initialize(self, wanted: dict[uuid.UUID, tuple[str, int]]) -> "StatePartitions | None":
        """With the partitions of `wanted` (topic id → (name, partition count)) that are neither
        initializing nor initialized added as initializing; None when there are none."""
        added = {t: frozenset(range(count)) - self.initializing.get(t, frozenset()) - self.initialized.get(t, frozenset())
                 for t, (_, count) in wanted.items()}
        added = {t: ps for t, ps in added.items() if ps}
        if not added:
            return None
        return replace(self, initializing=_union(self.initializing, added),
                       names={**self.names, **{t: wanted[t][0] for t in added}})

    def initialized_now(self, done: Assignment, names: dict[uuid.UUID, str]) -> "StatePartitions":
        """`done` moved (or added) to initialized."""
        return replace(self, initializing=_minus(self.initializing, done), initialized=_union(self.initialized, done),
                       names={**self.names, **names})

    def deleting_topic(self, topic_id: uuid.UUID, name: str) -> "StatePartitions":
        return replace(self, initializing=_minus_topic(self.initializing, topic_id),
                       initialized=_minus_topic(self.initialized, topic_id), deleting=self.deleting | {topic_id},
                       names={**self.names, topic_id: name})

    def forgetting(self, topic_ids: set[uuid.UUID]) -> "StatePartitions":
        """Without these topics (their state is deleted, or they are)."""
        return StatePartitions({t: ps for t, ps in self.initializing.items() if t not in topic_ids},
                               {t: ps for t, ps in self.initialized.items() if t not in topic_ids},
                               self.deleting - topic_ids, {t: n for t, n in self.names.items() if t not in topic_ids})

    def value(self) -> records.ShareStatePartitionsValue:
        def infos(assignment: Assignment):
            return tuple(records.TopicPartitionsInfo(topic_id=t, topic_name=self.names.get(t, ""),
                                                     partitions=tuple(i32(p) for p in sorted(ps)))
                         for t, ps in sorted(assignment.items(), key=lambda item: str(item[0])) if ps)
        return records.ShareStatePartitionsValue(
            initializing_topics=infos(self.initializing), initialized_topics=infos(self.initialized),
            deleting_topics=tuple(records.TopicInfo(topic_id=t, topic_name=self.names.get(t, ""))
                                  for t in sorted(self.deleting, key=str)))

    @classmethod
    def of(cls, value: records.ShareStatePartitionsValue) -> "StatePartitions":
        names = {t.topic_id: t.topic_name for t in (*value.initializing_topics, *value.initialized_topics,
                                                     *value.deleting_topics)}
        return cls(_assignment(value.initializing_topics), _assignment(value.initialized_topics),
                   frozenset(t.topic_id for t in value.deleting_topics), names)


def _union(a: Assignment, b: Assignment) -> Assignment:
    return {t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in set(a) | set(b)}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    left = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in left.items() if ps}


def _minus_topic(a: Assignment, topic_id: uuid.UUID) -> Assignment:
    return {t: ps for t, ps in a.items() if t != topic_id}


@dataclass(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    state_partitions: StatePartitions = field(default_factory=StatePartitions)
    # Memory only: session ends (time.monotonic()), the subscribed topics at the last epoch bump
    deadlines: dict[str, float] = field(default_factory=dict)
    subscribed: dict[str, tuple[uuid.UUID, int]] | None = None  # name → (id, partitions); None: not yet known

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState names: Empty, Stable (Dead once deleted)."""
        return "Stable" if self.members else "Empty"


def metadata_record(group_id: str, member: ShareMember) -> Record:
    return (ShareMemberKey(records.SHARE_MEMBER_METADATA, group_id, member.member_id),
            records.ShareMemberMetadataValue(rack_id=member.rack_id, client_id=member.client_id,
                                             client_host=member.client_host,
                                             subscribed_topic_names=member.subscribed_topic_names))


def epoch_record(group_id: str, epoch: int) -> Record:
    return ShareGroupKey(records.SHARE_GROUP_EPOCH, group_id), records.ShareGroupMetadataValue(epoch=i32(epoch))


def assignment_records(group_id: str, members: dict[str, ShareMember], targets: dict[str, Assignment],
                       epoch: int) -> list[Record]:
    """The new target of each member and its taking it at once (nothing to revoke in a share group)."""
    out: list[Record] = [(ShareGroupKey(records.SHARE_TARGET_METADATA, group_id),
                          TargetAssignmentMetadataValue(assignment_epoch=i32(epoch)))]
    for member_id, member in members.items():
        target = targets.get(member_id, {})
        out.append((ShareMemberKey(records.SHARE_TARGET_MEMBER, group_id, member_id),
                    TargetAssignmentMemberValue(topic_partitions=topic_partitions(target))))
        out.append((ShareMemberKey(records.SHARE_CURRENT_ASSIGNMENT, group_id, member_id),
                    records.ShareCurrentAssignmentValue(member_epoch=i32(epoch),
                                                        previous_member_epoch=i32(member.member_epoch),
                                                        assigned_partitions=topic_partitions(target))))
    return out


def state_partitions_record(group_id: str, state: StatePartitions) -> Record:
    return ShareGroupKey(records.SHARE_STATE_PARTITIONS, group_id), state.value()


def removal_records(group_id: str, member_id: str) -> list[Record]:
    return [(ShareMemberKey(version, group_id, member_id), None) for version in
            (records.SHARE_CURRENT_ASSIGNMENT, records.SHARE_TARGET_MEMBER, records.SHARE_MEMBER_METADATA)]


def end_records(group_id: str) -> list[Record]:
    """The tombstones that end an empty share group (deleted)."""
    return [(ShareGroupKey(records.SHARE_STATE_PARTITIONS, group_id), None),
            (ShareGroupKey(records.SHARE_TARGET_METADATA, group_id), None),
            (ShareGroupKey(records.SHARE_GROUP_EPOCH, group_id), None)]


def _assignment(tps) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in tps if tp.partitions}


def replay(groups: dict[str, ShareGroup], key: ShareGroupKey | ShareMemberKey, value) -> None:
    """Apply one share group record (value None: a tombstone) to `groups`."""
    group = groups.get(key.group)
    if value is None:
        if group is None:
            return
        if key.version == records.SHARE_GROUP_EPOCH:
            del groups[key.group]
        elif key.version == records.SHARE_MEMBER_METADATA:
            group.members.pop(key.member_id, None)
            group.deadlines.pop(key.member_id, None)
        elif key.version == records.SHARE_TARGET_MEMBER:
            group.target.pop(key.member_id, None)
        elif key.version == records.SHARE_CURRENT_ASSIGNMENT and key.member_id in group.members:
            group.members[key.member_id] = replace(group.members[key.member_id], assigned={})
        elif key.version == records.SHARE_STATE_PARTITIONS:
            group.state_partitions = StatePartitions()
        return
    if group is None:
        group = groups[key.group] = ShareGroup(key.group)
    if key.version == records.SHARE_GROUP_EPOCH:
        group.group_epoch = value.epoch
    elif key.version == records.SHARE_TARGET_METADATA:
        group.assignment_epoch = value.assignment_epoch
    elif key.version == records.SHARE_TARGET_MEMBER:
        group.target[key.member_id] = _assignment(value.topic_partitions)
    elif key.version == records.SHARE_MEMBER_METADATA:
        member = group.members.get(key.member_id) or ShareMember(key.member_id)
        group.members[key.member_id] = replace(member, rack_id=value.rack_id, client_id=value.client_id,
                                               client_host=value.client_host,
                                               subscribed_topic_names=tuple(value.subscribed_topic_names))
    elif key.version == records.SHARE_STATE_PARTITIONS:
        group.state_partitions = StatePartitions.of(value)
    elif key.version == records.SHARE_CURRENT_ASSIGNMENT:
        member = group.members.get(key.member_id) or ShareMember(key.member_id)
        group.members[key.member_id] = replace(member, member_epoch=value.member_epoch,
                                               previous_member_epoch=value.previous_member_epoch,
                                               assigned=_assignment(value.assigned_partitions))
