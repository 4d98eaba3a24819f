"""One KIP-848 consumer group: its epochs, members, target assignment and who owns which partition,
and the reconciliation of one member towards its target (Kafka's ConsumerGroup and
CurrentAssignmentBuilder).

    group epoch        bumped when the membership or a subscription (or a subscribed topic) changes
    assignment epoch   the group epoch the target assignment was computed at
    member epoch       the assignment epoch a member has reconciled to; its partitions carry it

A member moves towards its target without a stop-the-world rebalance: partitions it must give up
are revoked first (state UNREVOKED_PARTITIONS, same epoch) while it keeps the rest; once its
heartbeat no longer reports them, it takes the target epoch and the partitions that are free —
a partition another member still owns waits (UNRELEASED_PARTITIONS) until that member released it.

Mutated only by `replay` (consumer_groups.py), on the event loop; `reconcile` is pure.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field, replace

from ..protocol import consumer_group_records as records
from ..protocol.consumer_group_records import i8, i32
from .assignors import Assignment

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


class MemberState(enum.IntEnum):
    """As Kafka numbers them in the CurrentMemberAssignment record."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True)
class ConsumerMember:
    """A member as the log records it (subscription, epochs, partitions). Immutable: a change is a new one."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # A member speaking the classic protocol (JoinGroup/SyncGroup) in this group: its session timeout
    # and its (protocol name, metadata)s; None for a KIP-848 member.
    classic_session_timeout_ms: int | None = None
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None

    @property
    def classic(self) -> bool:
        return self.classic_protocols is not None

    def same_subscription(self, other: "ConsumerMember") -> bool:
        return (self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor, self.rack_id) == (
            other.subscribed_topic_names, other.subscribed_topic_regex, other.server_assignor, other.rack_id)

    def same_assignment(self, other: "ConsumerMember") -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation) == (
            other.member_epoch, other.previous_member_epoch, other.state, other.assigned, other.pending_revocation)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id → target partitions
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)  # owner's member epoch
    # regex → the topics it resolved to (key 16): the matches its last resolver may describe
    resolved_regexes: dict[str, frozenset[str]] = field(default_factory=dict)
    # Memory only: session and revocation deadlines (time.monotonic()); a classic member's deadlines to
    # rejoin once told to (JoinGroup) and to sync once joined (SyncGroup), each its rebalance timeout;
    # the subscribed topics at the last epoch bump (name → (id, partition count)); when the group last
    # changed state.
    deadlines: dict[str, float] = field(default_factory=dict)
    revocation_deadlines: dict[str, float] = field(default_factory=dict)
    join_deadlines: dict[str, float] = field(default_factory=dict)
    sync_deadlines: dict[str, float] = field(default_factory=dict)
    subscribed_metadata: dict[str, tuple[uuid.UUID, int]] | None = None
    state_timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState names: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def partition_epoch(self, topic: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic, partition), -1)

    # -- replay's helpers ------------------------------------------------------------------------

    def set_assignment(self, member: ConsumerMember) -> None:
        """Record `member`'s epochs and partitions (its previous ones released)."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs[(topic, p)] = member.member_epoch

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    if self.partition_epochs.get((topic, p)) == member.member_epoch:
                        del self.partition_epochs[(topic, p)]

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
        for deadlines in (self.deadlines, self.revocation_deadlines, self.join_deadlines, self.sync_deadlines):
            deadlines.pop(member_id, None)


# -- reconciliation (pure) -----------------------------------------------------------------------


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Does the member still report owning any of `partitions`? (Not reported: assume it does.)"""
    if owned is None:
        return True
    return any(owned.get(topic, frozenset()) & ps for topic, ps in partitions.items())


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment, owned: Assignment | None,
              partition_epoch) -> ConsumerMember:
    """The member one step closer to `target` (at `target_epoch`), given what its heartbeat reports
    owning (`owned`, None when not reported) and `partition_epoch(topic, p)` (-1: nobody owns it)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owned, partition_epoch)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owned, partition_epoch)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owned, partition_epoch)
    return _next(member, target_epoch, target_epoch, target, owned, partition_epoch)


def _next(member: ConsumerMember, epoch: int, target_epoch: int, target: Assignment, owned: Assignment | None,
          partition_epoch) -> ConsumerMember:
    kept: dict[uuid.UUID, frozenset[int]] = {}      # assigned ∩ target
    revoking: dict[uuid.UUID, frozenset[int]] = {}  # assigned - target
    free: dict[uuid.UUID, frozenset[int]] = {}      # target - assigned that nobody owns
    unreleased = False
    for topic in set(target) | set(member.assigned):
        wanted, current = target.get(topic, frozenset()), member.assigned.get(topic, frozenset())
        if keep := current & wanted:
            kept[topic] = keep
        if current - wanted:
            revoking[topic] = current - wanted
        available = frozenset(p for p in wanted - current if partition_epoch(topic, p) == -1)
        if available:
            free[topic] = available
        unreleased = unreleased or len(available) < len(wanted - current)
    if revoking and owns_any(owned, revoking):
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, member_epoch=epoch,
                       previous_member_epoch=member.member_epoch, assigned=kept, pending_revocation=revoking)
    assigned = {topic: kept.get(topic, frozenset()) | free.get(topic, frozenset()) for topic in set(kept) | set(free)}
    return replace(member, state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
                   member_epoch=target_epoch, previous_member_epoch=member.member_epoch, assigned=assigned,
                   pending_revocation={})


# -- the records (replay is the only mutator, and the loading path) -------------------------------


def _assignment(topic_partitions) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def topic_partitions(assignment: Assignment) -> tuple[records.TopicPartitions, ...]:
    return tuple(records.TopicPartitions(topic_id=topic, partitions=tuple(i32(p) for p in sorted(ps)))
                 for topic, ps in sorted(assignment.items(), key=lambda item: str(item[0])) if ps)


def member_metadata_value(member: ConsumerMember) -> records.MemberMetadata:
    classic = None if member.classic_protocols is None else records.ClassicMemberMetadata(
        session_timeout_ms=i32(member.classic_session_timeout_ms), supported_protocols=tuple(
            records.ClassicProtocol(name=name, metadata=metadata) for name, metadata in member.classic_protocols))
    return records.MemberMetadata(records.MemberMetadataValue(
        instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=member.subscribed_topic_names,
        subscribed_topic_regex=member.subscribed_topic_regex, rebalance_timeout_ms=i32(member.rebalance_timeout_ms),
        server_assignor=member.server_assignor), classic)


def current_assignment_value(member: ConsumerMember) -> records.CurrentAssignmentValue:
    return records.CurrentAssignmentValue(
        member_epoch=i32(member.member_epoch), previous_member_epoch=i32(member.previous_member_epoch),
        state=i8(member.state), assigned_partitions=topic_partitions(member.assigned),
        partitions_pending_revocation=topic_partitions(member.pending_revocation))


def removal_records(group_id: str, member_id: str) -> list[tuple[records.MemberKey, None]]:
    """The tombstones that remove a member, in Kafka's order."""
    return [(records.MemberKey(records.CURRENT_ASSIGNMENT, group_id, member_id), None),
            (records.MemberKey(records.TARGET_MEMBER, group_id, member_id), None),
            (records.MemberKey(records.MEMBER_METADATA, group_id, member_id), None)]


def end_records(group: ConsumerGroup) -> list[tuple[records.ConsumerGroupKey | records.RegexKey, None]]:
    """The tombstones that end an empty consumer group (deleted, or taken over by a classic group)."""
    return [*((records.RegexKey(records.REGEX, group.group_id, regex), None) for regex in sorted(group.resolved_regexes)),
            (records.ConsumerGroupKey(records.TARGET_METADATA, group.group_id), None),
            (records.ConsumerGroupKey(records.GROUP_EPOCH, group.group_id), None)]


def replay(groups: dict[str, ConsumerGroup], key: records.ConsumerGroupKey | records.MemberKey | records.RegexKey,
           value) -> None:
    """Apply one consumer group record (value None: a tombstone) to `groups`."""
    group = groups.get(key.group)
    if value is None:
        if group is None:
            return
        if isinstance(key, records.RegexKey):
            group.resolved_regexes.pop(key.regex, None)
        elif key.version == records.GROUP_EPOCH:
            del groups[key.group]
        elif key.version == records.MEMBER_METADATA:
            group.remove(key.member_id)
        elif key.version == records.TARGET_MEMBER:
            group.target.pop(key.member_id, None)
        elif key.version == records.CURRENT_ASSIGNMENT and key.member_id in group.members:
            group.set_assignment(replace(group.members[key.member_id], member_epoch=0, previous_member_epoch=0,
                                         state=MemberState.STABLE, assigned={}, pending_revocation={}))
        return
    if group is None:
        group = groups[key.group] = ConsumerGroup(key.group)
    before = group.state
    if isinstance(key, records.RegexKey):
        group.resolved_regexes[key.regex] = frozenset(value.topics)
    elif key.version == records.GROUP_EPOCH:
        group.group_epoch = value.epoch
    elif key.version == records.TARGET_METADATA:
        group.assignment_epoch = value.assignment_epoch
    elif key.version == records.TARGET_MEMBER:
        group.target[key.member_id] = _assignment(value.topic_partitions)
    elif key.version == records.MEMBER_METADATA:
        member = group.members.get(key.member_id) or ConsumerMember(key.member_id)
        value, classic = value.value, value.classic
        group.members[key.member_id] = replace(
            member, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, subscribed_topic_names=tuple(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic_session_timeout_ms=None if classic is None else classic.session_timeout_ms,
            classic_protocols=None if classic is None else tuple((p.name, p.metadata)
                                                                 for p in classic.supported_protocols))
    elif key.version == records.CURRENT_ASSIGNMENT:
        member = group.members.get(key.member_id) or ConsumerMember(key.member_id)
        try:
            state = MemberState(value.state)
        except ValueError:
            state = MemberState.UNKNOWN
        group.set_assignment(replace(member, member_epoch=value.member_epoch,
                                     previous_member_epoch=value.previous_member_epoch, state=state,
                                     assigned=_assignment(value.assigned_partitions),
                                     pending_revocation=_assignment(value.partitions_pending_revocation)))
    # (PARTITION_METADATA: Kafka 4.0's copy of the subscribed topics' metadata, recomputed here)
    if group.state != before:
        group.state_timestamp_ms = int(time.time() * 1000)
