"""KIP-932 share groups: ShareGroupHeartbeat and ShareGroupDescribe (the membership half of Kafka's
share group coordinator; the records' half is share_partition.py).

A share group's members do not own partitions: many members may fetch one partition, and the
records are handed out one lock at a time by the partition's SharePartition. So the membership is
simpler than KIP-848's:

    group epoch     bumped when a member joins or leaves or a subscription (or a subscribed topic) changes
    member epoch    the group epoch the member's assignment was computed at: a member heartbeating with
                    an epoch newer than its own is fenced, an older one is told its current epoch

The assignment is Kafka's `simple` assignor (share_assignor.py): there is nothing to revoke, so a
member takes its new partitions at once. Sessions (`share.session.timeout.ms`) and heartbeat intervals
(`share.heartbeat.interval.ms`) come from the group configs.

The membership lives in memory: a member that finds its coordinator restarted hears UNKNOWN_MEMBER_ID
and rejoins at epoch 0 (what share consumers do anyway). The records' state, which must not be
lost, is durable (share_state.py). Event loop only.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ..group_configs import GroupConfig, effective_group_config
from ..protocol.errors import (FencedMemberEpoch, GroupIdNotFound, GroupMaxSizeReached, InvalidRequest,
                               UnknownMemberId, UnsupportedVersion)
from .share_assignor import Assignment, simple_assign

log = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
SESSION_TIMED_OUT = "session timed out"


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)


@dataclass(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    deadlines: dict[str, float] = field(default_factory=dict)  # member id → session end (time.monotonic())
    subscribed: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)  # name → (id, partitions)

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState names: Empty, Stable (Dead once deleted)."""
        return "Stable" if self.members else "Empty"


@dataclass(frozen=True)
class ShareHeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged, not sent


class ShareGroups:
    def __init__(self, metadata, config, group_configs, is_other_group: Callable[[str], bool],
                 sweep_by: Callable[[float], None]) -> None:
        self.metadata = metadata
        self.config = config
        self.group_configs = group_configs
        self.is_other_group = is_other_group  # (group id): a classic or consumer group has that id
        self.sweep_by = sweep_by
        self.groups: dict[str, ShareGroup] = {}
        # told (group, member, whether its session timed out) when a member goes: its locks go
        self.member_left: list[Callable[[str, str, bool], None]] = []

    def group_config(self, group_id: str) -> GroupConfig:
        return effective_group_config(self.config, self.group_configs, group_id)

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed_topic_names: tuple[str, ...] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        """Raises the BrokerError the member hears."""
        self._validate(group_id, member_id, member_epoch, subscribed_topic_names)
        if member_epoch == LEAVE_EPOCH:
            group = self.groups.get(group_id)
            if group is None or member_id not in group.members:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id!r}")
            self.remove(group, member_id, "left the group")
            return ShareHeartbeatResult(member_id, LEAVE_EPOCH, 0, None)
        group = self.groups.get(group_id)
        if group is None:
            if member_epoch != JOIN_EPOCH:
                raise UnknownMemberId(f"share group {group_id!r} has no member {member_id}; rejoin with epoch 0")
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None:
            if member_epoch != JOIN_EPOCH:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id!r}; rejoin with epoch 0")
            if len(group.members) >= self.config.get("group.share.max.size"):
                raise GroupMaxSizeReached(f"share group {group_id!r} is full (group.share.max.size)")
            member = group.members[member_id] = ShareMember(member_id)
            group.group_epoch += 1
            log.info("share group %s: member %s joined (epoch %d)", group_id, member_id, group.group_epoch)
        elif member_epoch > member.member_epoch:
            raise FencedMemberEpoch(f"member {member_id} sent epoch {member_epoch}, newer than its "
                                    f"{member.member_epoch}; it must rejoin")
        previous = {m: dict(other.assigned) for m, other in group.members.items()}
        member.rack_id = rack_id or member.rack_id
        member.client_id, member.client_host = client_id, client_host
        if subscribed_topic_names is not None and tuple(sorted(subscribed_topic_names)) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(subscribed_topic_names))
            group.group_epoch += 1
        self._assign_if_needed(group)
        config = self.group_config(group_id)
        group.deadlines[member_id] = time.monotonic() + config["share.session.timeout.ms"] / 1000
        self.sweep_by(group.deadlines[member_id])
        full = member_epoch == JOIN_EPOCH or subscribed_topic_names is not None
        changed = previous.get(member_id) != member.assigned or member_epoch != member.member_epoch
        return ShareHeartbeatResult(member_id, member.member_epoch, config["share.heartbeat.interval.ms"],
                                    member.assigned if full or changed else None)

    def _validate(self, group_id: str, member_id: str, member_epoch: int,
                  subscribed: tuple[str, ...] | None) -> None:
        if "share" not in self.config.get("group.coordinator.rebalance.protocols"):
            raise UnsupportedVersion("share groups are off on this broker "
                                     "(group.coordinator.rebalance.protocols has no 'share')")
        if self.config.get("zookeeper.connect"):
            raise UnsupportedVersion("share groups are served by a broker alone only, not yet in a ZooKeeper cluster")
        if not group_id:
            raise InvalidRequest("GroupId can't be empty")
        if not member_id:
            raise InvalidRequest("MemberId can't be empty: a share consumer chooses its own")
        if member_epoch == JOIN_EPOCH and not subscribed:
            raise InvalidRequest("SubscribedTopicNames must be set in the first request")
        if member_epoch < LEAVE_EPOCH:
            raise InvalidRequest(f"MemberEpoch {member_epoch} is invalid: 0 joins, -1 leaves, a positive "
                                 f"epoch heartbeats")
        if group_id not in self.groups and self.is_other_group(group_id):
            raise GroupIdNotFound(f"group {group_id!r} is a classic or consumer group, not a share group")

    def _subscribed_topics(self, group: ShareGroup) -> dict[str, tuple[uuid.UUID, int]]:
        topics = self.metadata.topics
        names = {name for m in group.members.values() for name in m.subscribed_topic_names if name in topics}
        return {name: (topics[name].topic_id, topics[name].partitions) for name in sorted(names)}

    def _assign_if_needed(self, group: ShareGroup) -> None:
        """A new target when the group epoch moved or a subscribed topic was created, deleted or grown;
        each member takes its part and the group's epoch at once (nothing to revoke in a share group)."""
        subscribed = self._subscribed_topics(group)
        if subscribed != group.subscribed:
            group.subscribed = subscribed
            group.group_epoch += 1
        if group.group_epoch == group.assignment_epoch:
            return
        targets = simple_assign({m: frozenset(subscribed[name][0] for name in member.subscribed_topic_names
                                              if name in subscribed)
                                 for m, member in group.members.items()},
                                {topic_id: count for topic_id, count in subscribed.values()})
        group.assignment_epoch = group.group_epoch
        for member_id, member in group.members.items():
            member.assigned = targets.get(member_id, {})
            member.member_epoch = group.group_epoch

    def remove(self, group: ShareGroup, member_id: str, reason: str) -> None:
        group.members.pop(member_id, None)
        group.deadlines.pop(member_id, None)
        group.group_epoch += 1
        self._assign_if_needed(group)
        log.info("share group %s: member %s %s; group epoch %d", group.group_id, member_id, reason, group.group_epoch)
        for listener in self.member_left:
            listener(group.group_id, member_id, reason == SESSION_TIMED_OUT)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def delete(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # -- sessions --------------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.deadlines.items()):
                if now >= deadline:
                    self.remove(group, member_id, SESSION_TIMED_OUT)

    def deadlines(self) -> list[float]:
        return [t for group in self.groups.values() for t in group.deadlines.values()]
