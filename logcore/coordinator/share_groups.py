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

The membership is written to `__consumer_offsets` as Kafka's share group records (share_group.py,
logcore/protocol/share_group_records.py), appended then replayed, so a restarted broker knows its
groups and members; each loaded member gets a new session. As in Kafka, when the group subscribes to
partitions whose share-partitions were never initialized, key 15 records them as initializing (the
share coordinator facade then has them created and records them initialized). The records' state is in
`__share_group_state` (share_state.py). Event loop only; no `await` between computing records and
appending them.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Callable

from ..group_configs import GroupConfig, effective_group_config
from ..protocol.errors import (BrokerError, FencedMemberEpoch, GroupIdNotFound, GroupMaxSizeReached, InvalidRequest,
                               NotCoordinator, UnknownMemberId, UnsupportedVersion)
from .share_assignor import Assignment, simple_assign
from .share_group import (Record, ShareGroup, ShareMember, StatePartitions, assignment_records, end_records,
                          epoch_record, metadata_record, removal_records, state_partitions_record)

log = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
SESSION_TIMED_OUT = "session timed out"


@dataclass(frozen=True)
class ShareHeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged, not sent


class ShareGroups:
    def __init__(self, store, metadata, config, group_configs, is_other_group: Callable[[str], bool],
                 sweep_by: Callable[[float], None]) -> None:
        self.store = store  # (GroupStore: appends to __consumer_offsets, then replays)
        self.groups: dict[str, ShareGroup] = store.share_groups
        self.metadata = metadata
        self.config = config
        self.group_configs = group_configs
        self.is_other_group = is_other_group  # (group id): a classic or consumer group has that id
        self.sweep_by = sweep_by
        # told (group, member, whether its session timed out) when a member goes: its locks go
        self.member_left: list[Callable[[str, str, bool], None]] = []

    def group_config(self, group_id: str) -> GroupConfig:
        return effective_group_config(self.config, self.group_configs, group_id)

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed_topic_names: tuple[str, ...] | None, client_id: str, client_host: str) -> ShareHeartbeatResult:
        """Raises the BrokerError the member hears."""
        self._validate(group_id, member_id, member_epoch, subscribed_topic_names)
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id!r}")
            self.remove(group, member_id, "left the group")
            return ShareHeartbeatResult(member_id, LEAVE_EPOCH, 0, None)
        group = group or ShareGroup(group_id)  # (exists once its first records are replayed)
        member = group.members.get(member_id)
        if member is None:
            if member_epoch != JOIN_EPOCH:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id!r}; rejoin with epoch 0")
            if len(group.members) >= self.config.get("group.share.max.size"):
                raise GroupMaxSizeReached(f"share group {group_id!r} is full (group.share.max.size)")
        elif member_epoch > member.member_epoch:
            raise FencedMemberEpoch(f"member {member_id} sent epoch {member_epoch}, newer than its "
                                    f"{member.member_epoch}; it must rejoin")
        before = member or ShareMember(member_id)
        updated = replace(before, rack_id=rack_id or before.rack_id, client_id=client_id, client_host=client_host,
                          subscribed_topic_names=before.subscribed_topic_names if subscribed_topic_names is None
                          else tuple(sorted(subscribed_topic_names)))
        out = [] if updated == member else [metadata_record(group_id, updated)]
        bump = member is None or updated.subscribed_topic_names != before.subscribed_topic_names
        self._commit(group, {**group.members, member_id: updated}, bump, out)
        if member is None:
            log.info("share group %s: member %s joined (epoch %d)", group_id, member_id, self.groups[group_id].group_epoch)
        group = self.groups[group_id]
        now = group.members[member_id]
        config = self.group_config(group_id)
        group.deadlines[member_id] = time.monotonic() + config["share.session.timeout.ms"] / 1000
        self.sweep_by(group.deadlines[member_id])
        full = member_epoch == JOIN_EPOCH or subscribed_topic_names is not None
        changed = member is None or now.assigned != member.assigned or member_epoch != now.member_epoch
        return ShareHeartbeatResult(member_id, now.member_epoch, config["share.heartbeat.interval.ms"],
                                    now.assigned if full or changed else None)

    def _commit(self, group: ShareGroup, members: dict[str, ShareMember], bump: bool, out: list[Record]) -> None:
        """Steps 2-4 for `members` (the group's after this change): the group epoch, bumped if `bump` or a
        subscribed topic was created, deleted or grown; a new target when it moved, which every member
        takes at once; the records (after those in `out`) appended, then replayed."""
        subscribed = self._subscribed_topics(members)
        epoch = group.group_epoch
        if bump or subscribed != group.subscribed:
            epoch += 1
            out.append(epoch_record(group.group_id, epoch))
        initializing = group.state_partitions.to_initialize({i: (name, n) for name, (i, n) in subscribed.items()})
        if initializing is not None:  # (the share coordinator is asked to create them: ShareCoordinator)
            out.append(state_partitions_record(group.group_id, initializing))
        if epoch > group.assignment_epoch:
            targets = simple_assign({m: frozenset(subscribed[name][0] for name in member.subscribed_topic_names
                                                  if name in subscribed) for m, member in members.items()},
                                    {topic_id: count for topic_id, count in subscribed.values()})
            out += assignment_records(group.group_id, members, targets, epoch)
        if out:
            self.store.append(group.group_id, out)
        if group.group_id in self.groups:
            self.groups[group.group_id].subscribed = subscribed

    def _validate(self, group_id: str, member_id: str, member_epoch: int,
                  subscribed: tuple[str, ...] | None) -> None:
        if "share" not in self.config.get("group.coordinator.rebalance.protocols"):
            raise UnsupportedVersion("share groups are off on this broker "
                                     "(group.coordinator.rebalance.protocols has no 'share')")
        if not self.store.owns(group_id):
            raise NotCoordinator(f"this broker does not coordinate group {group_id!r}")
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

    def _subscribed_topics(self, members: dict[str, ShareMember]) -> dict[str, tuple[uuid.UUID, int]]:
        topics = self.metadata.topics
        names = {name for m in members.values() for name in m.subscribed_topic_names if name in topics}
        return {name: (topics[name].topic_id, topics[name].partitions) for name in sorted(names)}

    def remove(self, group: ShareGroup, member_id: str, reason: str) -> None:
        """The member's records tombstoned, the group epoch bumped and the others' partitions recomputed."""
        others = {m: member for m, member in group.members.items() if m != member_id}
        try:
            self._commit(group, others, True, removal_records(group.group_id, member_id))
        except BrokerError as exc:
            log.error("share group %s: cannot remove member %s (%s): %s", group.group_id, member_id, reason, exc)
            return
        log.info("share group %s: member %s %s; group epoch %d", group.group_id, member_id, reason,
                 self.groups[group.group_id].group_epoch)
        for listener in self.member_left:
            listener(group.group_id, member_id, reason == SESSION_TIMED_OUT)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def record_state_partitions(self, group_id: str, state: StatePartitions) -> None:
        """Key 15 as `state` (the group's share-partitions initialized, or deleted, at the share coordinator)."""
        if group_id in self.groups and state != self.groups[group_id].state_partitions:
            self.store.append(group_id, [state_partitions_record(group_id, state)])

    def delete(self, group_id: str) -> None:
        """DeleteGroups: the caller checked the group has no members."""
        if group_id in self.groups:
            self.store.append(group_id, end_records(group_id))

    # -- sessions --------------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Remove the members whose session ended. A member with no session yet (the group was just
        loaded) gets one from now."""
        for group in list(self.groups.values()):
            if not self.store.owns(group.group_id):
                continue
            session_ms = None
            for member_id in list(group.members):
                if member_id not in group.deadlines:
                    session_ms = session_ms or self.group_config(group.group_id)["share.session.timeout.ms"]
                    group.deadlines[member_id] = now + session_ms / 1000
                elif now >= group.deadlines[member_id]:
                    self.remove(group, member_id, SESSION_TIMED_OUT)

    def deadlines(self) -> list[float]:
        return [t for group in self.groups.values() for t in group.deadlines.values()]
