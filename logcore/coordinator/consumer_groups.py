"""KIP-848's consumer group protocol: ConsumerGroupHeartbeat, ConsumerGroupDescribe, member sessions
and revocation timeouts (the consumer half of Kafka's GroupMetadataManager).

One heartbeat, as Kafka handles it:

1. validate; find or create the group (epoch 0) and the member (a static member's new incarnation
   takes over its old one's partitions, if that one left with epoch -2);
2. take the member's new subscription; bump the group epoch if it changed, the member is new, or
   the subscribed topics changed (created, deleted, grown). A regex is resolved against the topics
   at each heartbeat of a member subscribing with it, to the matches that member may DESCRIBE (as
   Kafka filters them); the resolution is the group's, recorded as key 16 when it changes;
3. if the group epoch passed the assignment epoch, compute the target assignment with the group's
   assignor (assignors.py) for every member;
4. reconcile the member one step towards its target (consumer_group.reconcile): revoke first, then
   take the new epoch and the partitions that are free;
5. append the records of what changed (Kafka's own, logcore/protocol/consumer_group_records.py)
   and replay them; answer the member epoch, the heartbeat interval and, when it changed or the
   request was a full one, the member's partitions.

Sessions (`consumer.session.timeout.ms`) and heartbeat intervals (`consumer.heartbeat.interval.ms`)
come from the group configs (logcore/group_configs.py). A member whose session ends, or that keeps
partitions past its rebalance timeout after being asked to revoke them, is fenced: its records are
tombstoned and the group epoch bumped. Event loop only; no `await` between computing records and
appending them.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from ..config import BrokerConfig
from ..group_configs import GroupConfig, effective_group_config
from ..protocol import consumer_group_records as records
from ..protocol.codec import ErrorCode
from ..protocol.consumer_group_records import ConsumerGroupKey, MemberKey, RegexKey, RegexValue, i32, i64
from ..protocol.errors import (BrokerError, CoordinatorNotAvailable, FencedInstanceId, FencedMemberEpoch,
                               GroupIdNotFound, GroupMaxSizeReached,
                               InvalidRegularExpression, InvalidRequest, NotCoordinator,
                               UnknownMemberId, UnreleasedInstanceId, UnsupportedAssignor, UnsupportedVersion)
from .assignors import ASSIGNORS, Assignment
from .consumer_group import (LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember, MemberState,
                             current_assignment_value, member_metadata_value, reconcile, removal_records,
                             topic_partitions)
from .group import Group, GroupState
from .group_migration import downgrade_records, upgrade_records

log = logging.getLogger(__name__)

Record = tuple[ConsumerGroupKey | MemberKey | RegexKey, object]
Regexes = Mapping[str, frozenset[str]]  # a regex → the topic names it resolved to


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat; None (and -1 for the rebalance timeout) means "unchanged"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    # The sender's DESCRIBE right on a topic, by name; None: every topic (no authorizer)
    describable: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent


class ConsumerGroups:
    def __init__(self, store, metadata, config: BrokerConfig, group_configs, sweep_by: Callable[[float], None],
                 classic_rebalance: Callable[[str, str], None]) -> None:
        self.store = store
        self.classic_rebalance = classic_rebalance  # (group id, reason): a classic group starts a rebalance
        self.groups: dict[str, ConsumerGroup] = store.consumer_groups
        self.metadata = metadata
        self.config = config
        self.group_configs = group_configs
        self.sweep_by = sweep_by

    def group_config(self, group_id: str) -> GroupConfig:
        return effective_group_config(self.config, self.group_configs, group_id)

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------------

    def heartbeat(self, hb: Heartbeat) -> HeartbeatResult:
        """Raises the BrokerError the member hears (fenced, unknown member, ...)."""
        self._validate(hb)
        if not self.store.owns(hb.group_id):
            raise NotCoordinator(f"this broker does not coordinate group {hb.group_id!r}")
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(hb)
        group = self._group(hb.group_id, create=hb.member_epoch == 0)
        out: list[Record] = []
        member_id = hb.member_id or str(uuid.uuid4())  # (v0 clients may let the coordinator choose)
        member, new, replaced = self._member(group, replace(hb, member_id=member_id), out)
        updated = replace(
            member, instance_id=hb.instance_id or member.instance_id, rack_id=hb.rack_id or member.rack_id,
            rebalance_timeout_ms=hb.rebalance_timeout_ms if hb.rebalance_timeout_ms >= 0 else member.rebalance_timeout_ms,
            server_assignor=hb.server_assignor if hb.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(sorted(hb.subscribed_topic_names)) if hb.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(hb.subscribed_topic_regex or None if hb.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=hb.client_id, client_host=hb.client_host, classic_session_timeout_ms=None,
            classic_protocols=None)  # (a classic member that restarted with the consumer protocol)
        resolved = {} if not updated.subscribed_topic_regex else {
            updated.subscribed_topic_regex: self._resolve(updated.subscribed_topic_regex, hb.describable)}
        reconciled = self.update(group, member, updated, new, replaced, hb.owned, out, resolved)
        group = self.groups[hb.group_id]
        config = self.group_config(group.group_id)
        self.touch(group, member_id, config["consumer.session.timeout.ms"])
        full = hb.member_epoch == 0 or (hb.rebalance_timeout_ms != -1 and hb.subscribed_topic_names is not None
                                        and hb.owned is not None)
        return HeartbeatResult(member_id, reconciled.member_epoch, config["consumer.heartbeat.interval.ms"],
                               reconciled.assigned if full or reconciled.assigned != member.assigned else None)

    def update(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember, new: bool,
               replaced: str | None, owned: Assignment | None, out: list[Record],
               resolved: Regexes | None = None) -> ConsumerMember:
        """Steps 2-5 for `member` (`updated`: with its request's changes; `resolved`: the regex it
        subscribes with, resolved for it): the group epoch, the target assignment, the member's next
        step; the records (after those already in `out`) appended and replayed. The member as
        reconciled."""
        member_id = updated.member_id
        if new or replaced or member_metadata_value(updated) != member_metadata_value(member):
            out.append((MemberKey(records.MEMBER_METADATA, group.group_id, member_id), member_metadata_value(updated)))
        others = {m: other for m, other in group.members.items() if m not in (member_id, replaced)}
        members = {**others, member_id: updated}
        if group.subscribed_metadata is None:  # (new, or just loaded: what its members subscribed to so far)
            group.subscribed_metadata = self._subscribed_topics({**others, member_id: member}, group.resolved_regexes)
        regexes = self._regexes(group, members, resolved or {}, out)
        subscribed = self._subscribed_topics(members, regexes)
        epoch = group.group_epoch
        if new or not updated.same_subscription(member) or subscribed != group.subscribed_metadata:
            epoch += 1
            out.append((ConsumerGroupKey(records.GROUP_EPOCH, group.group_id), records.GroupMetadataValue(epoch=i32(epoch))))
        previous = {m: group.target[m] for m in others if m in group.target}
        previous[member_id] = group.target.get(replaced or member_id, {})
        target, target_epoch = previous[member_id], group.assignment_epoch
        if epoch > group.assignment_epoch:
            targets = self._assign(members, subscribed, previous, regexes)
            out += self._target_records(group.group_id, previous, targets, epoch)
            target, target_epoch = targets[member_id], epoch
        elif replaced:  # a static member's new incarnation inherits its target
            out += self._target_records(group.group_id, {}, {member_id: target}, None)
        reconciled = reconcile(updated, target_epoch, target, owned, group.partition_epoch)
        if new or replaced or not reconciled.same_assignment(member):
            out.append((MemberKey(records.CURRENT_ASSIGNMENT, group.group_id, member_id),
                        current_assignment_value(reconciled)))
        if out:
            self.store.append(group.group_id, out)
        group = self.groups[group.group_id]
        group.subscribed_metadata = subscribed
        self._watch_revocation(group, reconciled)
        if reconciled.member_epoch != member.member_epoch or reconciled.state is not member.state:
            log.info("group %s (epoch %d): member %s at epoch %d, %s, %d partition(s)", group.group_id,
                     group.group_epoch, member_id, reconciled.member_epoch, reconciled.state.name,
                     sum(map(len, reconciled.assigned.values())))
        return reconciled

    def _validate(self, hb: Heartbeat) -> None:
        if "consumer" not in self.config.get("group.coordinator.rebalance.protocols"):
            raise UnsupportedVersion("the consumer group protocol is off on this broker "
                                     "(group.coordinator.rebalance.protocols has no 'consumer')")
        if not hb.group_id:
            raise InvalidRequest("GroupId can't be empty")
        if hb.instance_id == "" or hb.rack_id == "":
            raise InvalidRequest("InstanceId and RackId can't be empty strings (null: unchanged)")
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms < 0:
                raise InvalidRequest("RebalanceTimeoutMs must be provided in the first request")
            if hb.owned is None or hb.owned:
                raise InvalidRequest("TopicPartitions must be empty when (re-)joining")
            if not hb.subscribed_topic_names and not hb.subscribed_topic_regex:
                raise InvalidRequest("SubscribedTopicNames or SubscribedTopicRegex must be set in the first request")
        elif hb.member_epoch > 0 or hb.member_epoch == LEAVE_EPOCH:
            if not hb.member_id:
                raise InvalidRequest("MemberId can't be empty")
        elif hb.member_epoch == STATIC_LEAVE_EPOCH:
            if not hb.member_id or hb.instance_id is None:
                raise InvalidRequest("a static member leaving (epoch -2) must give its MemberId and InstanceId")
        else:
            raise InvalidRequest(f"MemberEpoch {hb.member_epoch} is invalid: 0 joins, -1 leaves, -2 leaves for a while "
                                 f"(static members), a positive epoch heartbeats")
        assignors = self.config.get("group.consumer.assignors")
        if hb.server_assignor is not None and hb.server_assignor not in assignors:
            raise UnsupportedAssignor(f"server assignor {hb.server_assignor!r} is not supported; this broker has "
                                      f"{', '.join(assignors)} (group.consumer.assignors)")
        if hb.subscribed_topic_regex:
            try:
                re.compile(hb.subscribed_topic_regex)
            except re.error as exc:
                raise InvalidRegularExpression(f"SubscribedTopicRegex {hb.subscribed_topic_regex!r}: {exc}") from None

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.store.groups.get(group_id)
        if classic is not None and classic.members:
            if not create:
                raise GroupIdNotFound(f"group {group_id!r} is a classic group; join it with member epoch 0")
            self._upgrade(classic)
            return self.groups[group_id]
        if not create:
            raise GroupIdNotFound(f"consumer group {group_id!r} does not exist; join with member epoch 0")
        return ConsumerGroup(group_id)  # (exists once its first records are replayed)

    def _upgrade(self, classic: Group) -> None:
        """KIP-848's online upgrade: a consumer-protocol member joins a live classic group of
        consumers. The group becomes a consumer group at its generation: each classic member a member
        at that epoch with the partitions it has, the target what they have; they go on speaking the
        classic protocol (classic_members.py) until each restarts with the consumer protocol. The
        classic group's metadata is tombstoned; its offsets stay."""
        if self._migration_policy() not in ("upgrade", "bidirectional"):
            raise GroupIdNotFound(f"cannot upgrade classic group {classic.group_id!r} to a consumer group: this "
                                  f"broker's group.consumer.migration.policy={self._migration_policy()} allows no "
                                  "online upgrade; join with the classic protocol")
        if classic.protocol_type != "consumer":
            raise GroupIdNotFound(f"group {classic.group_id!r} is a classic group of protocol type "
                                  f"{classic.protocol_type!r}, not of consumers: it cannot take a consumer member")
        if not classic.is_(GroupState.STABLE):
            raise CoordinatorNotAvailable(f"classic group {classic.group_id!r} is rebalancing "
                                          f"({classic.state.value}); it is upgraded once stable: retry")
        if len(classic.members) >= self.config.get("group.consumer.max.size"):
            raise GroupMaxSizeReached(f"group {classic.group_id!r} has more members than group.consumer.max.size")
        try:
            out = upgrade_records(classic, self.topic_ids)
        except ValueError as exc:
            raise GroupIdNotFound(f"group {classic.group_id!r} cannot be upgraded: {exc}") from None
        epoch, group_id = classic.generation, classic.group_id
        self.store.append(group_id, out)
        log.info("group %s: upgraded from the classic protocol at generation %d with %d member(s)", group_id, epoch,
                 len(self.groups[group_id].members))

    def _migration_policy(self) -> str:
        return self.config.get("group.consumer.migration.policy").lower()

    def topic_ids(self, by_name: dict[str, frozenset[int]]) -> Assignment:
        topics = self.metadata.topics
        return {topics[name].topic_id: ps for name, ps in by_name.items() if name in topics and ps}

    def topic_names(self, assignment: Assignment) -> dict[str, frozenset[int]]:
        named = {}
        for topic_id, ps in assignment.items():
            if (info := self.metadata.by_id(topic_id)) is not None:
                named[info.name] = ps
        return named

    def _member(self, group: ConsumerGroup, hb: Heartbeat,
                out: list[Record]) -> tuple[ConsumerMember, bool, str | None]:
        """(the member, whether it is new, the member id of the static member it replaces); the records
        removing that old incarnation go to `out`."""
        if hb.instance_id is None:
            member = group.members.get(hb.member_id)
            if member is None:
                if hb.member_epoch != 0:
                    raise UnknownMemberId(f"member {hb.member_id} is not in group {group.group_id!r}; rejoin with epoch 0")
                self._check_size(group)
                return ConsumerMember(hb.member_id), True, None
            if hb.member_epoch != 0:
                _check_epoch(member, hb.member_epoch, hb.owned)
            return member, False, None
        existing = group.static_member(hb.instance_id)
        if hb.member_epoch == 0:
            if existing is None:
                self._check_size(group)
                return ConsumerMember(hb.member_id, instance_id=hb.instance_id), True, None
            if existing.member_id == hb.member_id:
                return existing, False, None
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                raise UnreleasedInstanceId(f"instance id {hb.instance_id} of group {group.group_id!r} is held by "
                                           f"member {existing.member_id}, which has not left")
            out += removal_records(group.group_id, existing.member_id)
            return replace(existing, member_id=hb.member_id, member_epoch=0, previous_member_epoch=0), False, \
                existing.member_id
        if existing is None:
            raise UnknownMemberId(f"no static member with instance id {hb.instance_id} in group {group.group_id!r}")
        if existing.member_id != hb.member_id:
            raise FencedInstanceId(f"static member {hb.member_id} with instance id {hb.instance_id} was fenced by "
                                   f"member {existing.member_id}")
        _check_epoch(existing, hb.member_epoch, hb.owned)
        return existing, False, None

    def _check_size(self, group: ConsumerGroup) -> None:
        limit = self.config.get("group.consumer.max.size")
        if len(group.members) >= limit:
            raise GroupMaxSizeReached(f"group {group.group_id!r} has {limit} members (group.consumer.max.size)")

    def _resolve(self, pattern: str, describable: Callable[[str], bool] | None) -> frozenset[str]:
        """The topics `pattern` matches whole (internal ones aside) that `describable` lets through."""
        regex = re.compile(pattern)
        return frozenset(name for name, info in self.metadata.topics.items() if not info.internal
                         and regex.fullmatch(name) and (describable is None or describable(name)))

    def _regexes(self, group: ConsumerGroup, members: dict[str, ConsumerMember], resolved: Regexes,
                 out: list[Record]) -> dict[str, frozenset[str]]:
        """The group's regex resolutions once `members` are its members: `resolved` recorded where it
        changed, those of regexes no member subscribes with any more tombstoned (key 16)."""
        used = {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}
        for regex, topics in resolved.items():
            if group.resolved_regexes.get(regex) != topics:
                out.append((RegexKey(records.REGEX, group.group_id, regex), RegexValue(
                    topics=tuple(sorted(topics)), version=i64(-1), timestamp=i64(int(time.time() * 1000)))))
        out += [(RegexKey(records.REGEX, group.group_id, regex), None) for regex in sorted(group.resolved_regexes)
                if regex not in used]
        return {regex: topics for regex, topics in {**group.resolved_regexes, **resolved}.items() if regex in used}

    def _regex_topics(self, pattern: str, regexes: Regexes) -> frozenset[str]:
        """What `pattern` resolved to; a group recorded before key 16 was written has no resolution
        until its member's next heartbeat, and matches unfiltered meanwhile."""
        found = regexes.get(pattern)
        return found if found is not None else self._resolve(pattern, None)

    def _subscribed_topics(self, members: dict[str, ConsumerMember],
                           regexes: Regexes) -> dict[str, tuple[uuid.UUID, int]]:
        """The existing topics some member subscribes to, by name or regex: name → (id, partition count)."""
        topics = self.metadata.topics
        names = {name for m in members.values() for name in m.subscribed_topic_names}
        for pattern in {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}:
            names |= self._regex_topics(pattern, regexes)
        return {name: (topics[name].topic_id, topics[name].partitions) for name in sorted(names) if name in topics}

    def _member_topics(self, member: ConsumerMember, subscribed: dict[str, tuple[uuid.UUID, int]],
                       regexes: Regexes) -> frozenset:
        matched = self._regex_topics(member.subscribed_topic_regex, regexes) if member.subscribed_topic_regex else ()
        return frozenset(topic_id for name, (topic_id, _) in subscribed.items()
                         if name in member.subscribed_topic_names or name in matched)

    def assignor_name(self, members) -> str:
        """The assignor the members ask for most (`group.remote.assignor`), else the broker's first."""
        configured = self.config.get("group.consumer.assignors")
        wanted = Counter(m.server_assignor for m in members if m.server_assignor)
        if not wanted:
            return configured[0]
        return max(wanted, key=lambda name: (wanted[name], -configured.index(name)))

    def _assign(self, members: dict[str, ConsumerMember], subscribed: dict[str, tuple[uuid.UUID, int]],
                previous: dict[str, Assignment], regexes: Regexes) -> dict[str, Assignment]:
        """The target assignment of `members` by the group's assignor, sticky to `previous`."""
        return ASSIGNORS[self.assignor_name(members.values())](
            {m: self._member_topics(member, subscribed, regexes) for m, member in members.items()},
            {topic_id: count for topic_id, count in subscribed.values()}, previous)

    @staticmethod
    def _target_records(group_id: str, previous: dict[str, Assignment], targets: dict[str, Assignment],
                        epoch: int | None) -> list[Record]:
        """The records of the targets that changed, then (given an epoch) the target's new epoch."""
        out: list[Record] = [(MemberKey(records.TARGET_MEMBER, group_id, member_id),
                              records.TargetAssignmentMemberValue(topic_partitions=topic_partitions(target)))
                             for member_id, target in targets.items() if previous.get(member_id) != target]
        if epoch is not None:
            out.append((ConsumerGroupKey(records.TARGET_METADATA, group_id),
                        records.TargetAssignmentMetadataValue(assignment_epoch=i32(epoch))))
        return out

    # -- leaving, fencing ----------------------------------------------------------------------

    def _leave(self, hb: Heartbeat) -> HeartbeatResult:
        group = self._group(hb.group_id, create=False)
        if hb.instance_id is None:
            member = group.members.get(hb.member_id)
            if member is None:
                raise UnknownMemberId(f"member {hb.member_id} is not in group {group.group_id!r}")
        else:
            member = group.static_member(hb.instance_id)
            if member is None:
                raise UnknownMemberId(f"no static member with instance id {hb.instance_id} in group {group.group_id!r}")
            if member.member_id != hb.member_id:
                raise FencedInstanceId(f"static member {hb.member_id} with instance id {hb.instance_id} was fenced "
                                       f"by member {member.member_id}")
        if hb.member_epoch == STATIC_LEAVE_EPOCH:  # it keeps its partitions for its session
            left = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
            self.store.append(group.group_id, [(MemberKey(records.CURRENT_ASSIGNMENT, group.group_id, member.member_id),
                                                current_assignment_value(left))])
            log.info("group %s: static member %s (%s) left for now", group.group_id, member.member_id, hb.instance_id)
        else:
            self.fence(group, member.member_id, "left the group")
        return HeartbeatResult(hb.member_id, hb.member_epoch)

    def fence(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        """Remove a member: its records tombstoned, the group epoch bumped and the target recomputed for
        the others, who reconcile at their next heartbeats. If the last KIP-848 member goes and classic
        members remain, the group goes back to the classic protocol instead (`_downgrade`)."""
        if self._downgrade(group, member_id, reason):
            return
        out = removal_records(group.group_id, member_id)
        members = {m: member for m, member in group.members.items() if m != member_id}
        epoch = group.group_epoch + 1
        out.append((ConsumerGroupKey(records.GROUP_EPOCH, group.group_id), records.GroupMetadataValue(epoch=i32(epoch))))
        regexes = self._regexes(group, members, {}, out)
        subscribed = self._subscribed_topics(members, regexes)
        previous = {m: group.target[m] for m in members if m in group.target}
        out += self._target_records(group.group_id, previous, self._assign(members, subscribed, previous, regexes),
                                    epoch)
        try:
            self.store.append(group.group_id, out)
        except BrokerError as exc:
            log.error("group %s: cannot remove member %s (%s): %s", group.group_id, member_id, reason, exc)
            return
        group.subscribed_metadata = subscribed
        log.info("group %s: member %s %s; group epoch %d", group.group_id, member_id, reason, epoch)

    def _downgrade(self, group: ConsumerGroup, leaving: str, reason: str) -> bool:
        """KIP-848's online downgrade: the last KIP-848 member leaves a group whose other members all
        speak the classic protocol. The group becomes a classic group at the next epoch, each member with
        the partitions it has and the protocol they all support; the consumer group's records are
        tombstoned, and a rebalance starts (`classic_rebalance`). False when that is not the case."""
        if self._migration_policy() not in ("downgrade", "bidirectional"):
            return False        # (the classic members stay in the consumer group, as Kafka keeps them)
        planned = downgrade_records(group, leaving, self.topic_names)
        if planned is None:
            return False
        out, epoch = planned
        group_id, others = group.group_id, len(group.members) - 1
        try:
            self.store.append(group_id, out)
        except BrokerError as exc:
            log.error("group %s: cannot go back to the classic protocol as member %s %s: %s", group_id, leaving,
                      reason, exc)
            return True
        log.info("group %s: member %s %s; its %d other member(s) all classic: back to a classic group at "
                 "generation %d", group_id, leaving, reason, others, epoch)
        self.classic_rebalance(group_id, "the group came back from the consumer protocol")
        return True

    # -- sessions --------------------------------------------------------------------------------

    def touch(self, group: ConsumerGroup, member_id: str, session_ms: int) -> None:
        group.deadlines[member_id] = time.monotonic() + session_ms / 1000
        self.sweep_by(group.deadlines[member_id])

    def _watch_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if member.member_id not in group.revocation_deadlines:
                group.revocation_deadlines[member.member_id] = time.monotonic() + member.rebalance_timeout_ms / 1000
                self.sweep_by(group.revocation_deadlines[member.member_id])
        else:
            group.revocation_deadlines.pop(member.member_id, None)

    def await_classic(self, deadlines: dict[str, float], member: ConsumerMember, timeout_ms: int,
                      replace_pending: bool) -> None:
        """Give a classic member `timeout_ms` (its rebalance timeout) to send its next JoinGroup or SyncGroup:
        `deadlines` is the group's join_deadlines or sync_deadlines. A pending deadline stays unless
        `replace_pending` (as Kafka schedules the join timeout only if absent, the sync timeout always)."""
        if replace_pending or member.member_id not in deadlines:
            deadlines[member.member_id] = time.monotonic() + timeout_ms / 1000
            self.sweep_by(deadlines[member.member_id])

    def expire(self, now: float) -> None:
        """Fence the members whose session ended, that held on to revoked partitions too long, or (classic
        members) that did not rejoin or sync within their rebalance timeout. A member with no session yet
        (the group was just loaded) gets one from now."""
        for group in list(self.groups.values()):
            if not self.store.owns(group.group_id):
                continue
            session_ms = None
            for member_id, member in list(group.members.items()):
                if member_id not in group.members or group.group_id not in self.groups:
                    continue  # (gone with one fenced before it: the group went back to classic)
                if member_id not in group.deadlines:
                    session_ms = session_ms or self.group_config(group.group_id)["consumer.session.timeout.ms"]
                    group.deadlines[member_id] = now + (member.classic_session_timeout_ms or session_ms) / 1000
                if now >= group.deadlines[member_id]:
                    self.fence(group, member_id, "session timed out")
                elif now >= group.revocation_deadlines.get(member_id, float("inf")):
                    self.fence(group, member_id, "did not revoke its partitions within its rebalance timeout")
                elif now >= group.join_deadlines.get(member_id, float("inf")):
                    self.fence(group, member_id, "was told to rejoin (classic protocol) and did not within its "
                                                 "rebalance timeout")
                elif now >= group.sync_deadlines.get(member_id, float("inf")):
                    self.fence(group, member_id, "joined (classic protocol) and did not sync within its "
                                                 "rebalance timeout")

    def deadlines(self) -> list[float]:
        due = []
        for group in self.groups.values():
            for deadlines in (group.deadlines, group.revocation_deadlines, group.join_deadlines, group.sync_deadlines):
                due.extend(deadlines.values())
        return due

    # -- offsets and the other group APIs ------------------------------------------------------

    def check_commit(self, group_id: str, member_epoch: int, member_id: str) -> ErrorCode | None:
        """OffsetCommit's check for a consumer group (None: not one): a member at its current epoch, or
        a commit from outside (epoch -1) while the group has no members."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch > member.member_epoch:
            return ErrorCode.fenced_member_epoch
        if member_epoch < member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+: a member that names itself must be at its current epoch."""
        group = self.groups.get(group_id)
        if group is None or (member_epoch < 0 and not member_id):
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if member_epoch == member.member_epoch else ErrorCode.stale_member_epoch


def _check_epoch(member: ConsumerMember, received: int, owned: Assignment | None) -> None:
    """Kafka's rule: a newer epoch than the coordinator's is fenced; an older one too, unless it is the
    previous epoch and the member owns only partitions it still has (the response was lost)."""
    if received > member.member_epoch:
        raise FencedMemberEpoch(f"member {member.member_id} sent epoch {received}, newer than its {member.member_epoch}; "
                                f"it must give up its partitions and rejoin")
    if received < member.member_epoch:
        subset = owned is not None and all(ps <= member.assigned.get(t, frozenset()) for t, ps in owned.items())
        if received != member.previous_member_epoch or not subset:
            raise FencedMemberEpoch(f"member {member.member_id} sent epoch {received}, older than its "
                                    f"{member.member_epoch}; it must give up its partitions and rejoin")


__all__ = ["ConsumerGroups", "Heartbeat", "HeartbeatResult"]
