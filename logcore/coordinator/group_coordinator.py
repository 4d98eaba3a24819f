"""Group coordinator: Kafka's classic consumer-group protocol over the `__consumer_offsets` topic.

What the log records — committed offsets and each generation's outcome (protocol, leader, members
and their assignments) — changes only through `replay`, which is also how the coordinator loads on
start: a request first computes its records without mutating anything, appends them through the
replica manager, then replays them. Membership while a rebalance is under way (who has rejoined,
who waits for SyncGroup) lives only in memory, as in Kafka, where only the outcome is logged.

Event loop only; no `await` between computing records and replaying them. JoinGroup and SyncGroup
park on futures until the rebalance completes. A sweep expires sessions, pending member ids and
rebalance timeouts, and now and then old offsets of empty groups; it runs when the earliest of those
falls due (at least every `MAX_SWEEP_WAIT_S`), not on a fixed tick, so an idle broker stays asleep.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ..protocol.errors import BrokerError, ErrorCode
from ..replication.partition import Partition
from .group import VALID_PREVIOUS, FencedByNewMember, Group, GroupState, Member
from .offsets_codec import (OFFSETS_TOPIC, GroupKey, GroupValue, OffsetKey, OffsetValue, decode, encode_key,
                            encode_value, partition_for)
from .state_topic import StateTopic

log = logging.getLogger(__name__)

MAX_SWEEP_WAIT_S = 1.0  # bounds how late a deadline set outside the sweep is noticed
S = GroupState
Record = tuple[OffsetKey | GroupKey, OffsetValue | GroupValue | None]


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str
    client_host: str
    require_known_member_id: bool  # JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED


@dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupCoordinator:
    def __init__(self, replicas, metadata, config, create_topic, alone: bool = True) -> None:
        self.config = config
        self.metadata = metadata
        self.topic = StateTopic(OFFSETS_TOPIC, config.get("offsets.topic.num.partitions"),
                                config.get("offsets.topic.segment.bytes"), replicas, metadata, create_topic,
                                config.get("offsets.topic.replication.factor"))
        self.groups: dict[str, Group] = {}
        # The partitions of __consumer_offsets whose groups this broker coordinates: in a cluster,
        # those it leads, once loaded; None for a broker alone, which coordinates every group.
        self.led: set[int] | None = None if alone else set()
        # Told (partition, True) when this broker loaded a partition's groups, (partition, False) when it dropped them.
        self.partition_listeners: list[Callable[[int, bool], None]] = []
        # Told which topics' offsets went (`gone(topic)`): transactional commits still pending for them go too.
        self.deletion_listeners: list[Callable[[Callable[[str], bool]], None]] = []
        self._running = False
        self._sweep_timer: asyncio.TimerHandle | None = None
        self.sweep_due = 0.0  # time.monotonic() of the next sweep
        self._next_retention_check = 0.0

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.load()
        self._running = True
        self._sweep_by(time.monotonic())

    async def stop(self) -> None:
        self._running = False
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        for group in self.groups.values():
            for member in group.members.values():
                _resolve(member.join_waiter, JoinResult(ErrorCode.not_coordinator))
                _resolve(member.sync_waiter, SyncResult(ErrorCode.not_coordinator))

    def load(self) -> None:
        """A broker alone: rebuild every group and offset by replaying `__consumer_offsets` from the
        start (in a cluster, partitions load as this broker comes to lead them)."""
        if not self.topic.exists or self.led is not None:
            return
        started = time.monotonic()
        records = self.topic.replay(lambda key, value: self.replay(*decode(key, value)))
        for group in self.groups.values():
            for member in group.members.values():
                member.heartbeat()  # loaded members get one session to find the new coordinator
        for partition in range(self.topic.partitions):
            self._notify(partition, True)
        self._remove_offsets_of_missing_topics(self.groups.values())
        log.info("loaded %d group(s) from %d %s record(s) in %.2fs", len(self.groups), records, OFFSETS_TOPIC,
                 time.monotonic() - started)

    def owns(self, group_id: str) -> bool:
        return self.led is None or partition_for(group_id, self.topic.partitions) in self.led

    def became_leader(self, partition: Partition) -> None:
        """In a cluster: this broker leads `partition` of __consumer_offsets from now on. Its groups
        load once it is committed (`StateTopic.load_when_committed`); until then their members hear
        NOT_COORDINATOR and retry."""
        self.topic.load_when_committed(partition, self.load_partition)

    async def replicated(self, group_id: str) -> ErrorCode:
        """Once what was written for `group_id` is in every in-sync replica (at once for a broker
        alone): an acknowledged commit survives its coordinator's death."""
        try:
            await self.topic.replicated(partition_for(group_id, self.topic.partitions),
                                        self.config.get("offsets.commit.timeout.ms") / 1000)
        except BrokerError as exc:
            return exc.code
        return ErrorCode.none

    def load_partition(self, partition: int) -> None:
        """This broker now leads `partition` (its log is committed up to here): take its groups."""
        if self.led is None or partition in self.led:
            return
        started = time.monotonic()
        records = self.topic.replay(lambda key, value: self.replay(*decode(key, value)), [partition])
        for group in self._groups_of(partition):
            for member in group.members.values():
                member.heartbeat()
        self.led.add(partition)
        self._notify(partition, True)
        self._remove_offsets_of_missing_topics(self._groups_of(partition))
        log.info("coordinating the groups of %s-%d (%d record(s) in %.2fs)", OFFSETS_TOPIC, partition, records,
                 time.monotonic() - started)

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads `partition`: its groups' members must find the new coordinator."""
        if self.led is None:
            return
        self.led.discard(partition)
        self._notify(partition, False)
        for group in self._groups_of(partition):
            for member in group.members.values():
                _resolve(member.join_waiter, JoinResult(ErrorCode.not_coordinator))
                _resolve(member.sync_waiter, SyncResult(ErrorCode.not_coordinator))
            del self.groups[group.group_id]

    def _notify(self, partition: int, loaded: bool) -> None:
        for listener in self.partition_listeners:
            listener(partition, loaded)

    def _groups_of(self, partition: int) -> list[Group]:
        count = self.topic.partitions
        return [g for g in self.groups.values() if partition_for(g.group_id, count) == partition]

    def ensure_topic(self) -> None:
        """Kafka creates `__consumer_offsets` on the first FindCoordinator for a group."""
        self.topic.ensure()

    # -- the only mutator of logged state ------------------------------------------------------

    def replay(self, key: OffsetKey | GroupKey, value: OffsetValue | GroupValue | None) -> None:
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
        self._apply_generation(group, value)

    def _apply_generation(self, group: Group, value: GroupValue) -> None:
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

    def _drop(self, group: Group) -> None:
        if group.offsets:  # offsets outlive the group's metadata; it becomes an offsets-only group
            group.state, group.protocol_type, group.protocol, group.leader_id = S.EMPTY, None, None, None
            group.members.clear()
            group.static_members.clear()
            return
        group.state = S.DEAD
        self.groups.pop(group.group_id, None)

    def _append(self, group_id: str, records: list[Record]) -> None:
        """Append then replay: the commit half of compute-then-commit. Raises the log's BrokerError."""
        partition = partition_for(group_id, self.topic.partitions)
        self.topic.append(partition, [(encode_key(k), encode_value(v)) for k, v in records])
        for key, value in records:
            self.replay(key, value)

    # -- JoinGroup -----------------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        if not req.group_id:
            return JoinResult(ErrorCode.invalid_group_id, req.member_id)
        if not self.owns(req.group_id):
            return JoinResult(ErrorCode.not_coordinator, req.member_id)
        low, high = self.config.get("group.min.session.timeout.ms"), self.config.get("group.max.session.timeout.ms")
        if not low <= req.session_timeout_ms <= high:
            return JoinResult(ErrorCode.invalid_session_timeout, req.member_id)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return JoinResult(ErrorCode.unknown_member_id, req.member_id)
            group = self.groups[req.group_id] = Group(req.group_id)
        if group.is_(S.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, req.member_id)
        if not group.supports(req.protocol_type, req.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
        waiter = asyncio.get_running_loop().create_future()
        if req.member_id:
            immediate = self._join_known(group, req, waiter)
        else:
            immediate = self._join_new(group, req, waiter)
        if immediate is not None:
            return immediate
        self._maybe_complete_join(group)
        try:
            return await waiter
        except FencedByNewMember:
            return JoinResult(ErrorCode.fenced_instance_id, req.member_id)

    def _join_new(self, group: Group, req: JoinRequest, waiter: asyncio.Future) -> JoinResult | None:
        if len(group.members) + len(group.pending_members) >= self.config.get("group.max.size"):
            return JoinResult(ErrorCode.group_max_size_reached)
        member_id = f"{req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id and req.group_instance_id in group.static_members:
            return self._rejoin_static(group, req, member_id, waiter)
        if req.require_known_member_id and not req.group_instance_id:
            group.pending_members[member_id] = time.monotonic() + req.session_timeout_ms / 1000
            self._sweep_by(group.pending_members[member_id])
            return JoinResult(ErrorCode.member_id_required, member_id)
        self._add_and_rebalance(group, req, member_id, waiter)
        return None

    def _join_known(self, group: Group, req: JoinRequest, waiter: asyncio.Future) -> JoinResult | None:
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            self._add_and_rebalance(group, req, req.member_id, waiter)
            return None
        member = group.members.get(req.member_id)
        if member is None or group.is_(S.EMPTY):
            return JoinResult(ErrorCode.unknown_member_id, req.member_id)
        if req.group_instance_id and group.static_members.get(req.group_instance_id) != req.member_id:
            return JoinResult(ErrorCode.fenced_instance_id, req.member_id)
        unchanged = member.same_protocols(req.protocols)
        if group.is_(S.COMPLETING_REBALANCE) and unchanged:
            return self._join_result(group, member)  # a lost JoinGroup response, asked again
        if group.is_(S.STABLE) and unchanged and not group.is_leader(member.member_id):
            return self._join_result(group, member)
        member.protocols = req.protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        member.join_waiter = waiter
        self._touch(member)
        if not group.is_(S.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        return None

    def _add_and_rebalance(self, group: Group, req: JoinRequest, member_id: str, waiter: asyncio.Future) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocols, join_waiter=waiter)
        self._touch(member)
        if not group.members:
            group.protocol_type = req.protocol_type
        group.add(member)
        if group.is_(S.PREPARING_REBALANCE):
            if group.join_not_before is not None:  # a join during the initial delay extends it
                delay = self.config.get("group.initial.rebalance.delay.ms") / 1000
                group.join_not_before = min(time.monotonic() + delay, group.rebalance_deadline)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")

    def _rejoin_static(self, group: Group, req: JoinRequest, member_id: str,
                       waiter: asyncio.Future) -> JoinResult | None:
        """A static member restarted: it takes over its old identity; a stable group does not rebalance
        unless the member's protocols would change the selected one."""
        old_leader = group.leader_id
        member = group.replace_static(req.group_instance_id, member_id)
        member.rebalance_timeout_ms, member.session_timeout_ms = req.rebalance_timeout_ms, req.session_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        old_protocols, member.protocols = member.protocols, req.protocols
        self._touch(member)
        if group.is_(S.STABLE) and group.select_protocol() == group.protocol:
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            try:
                self._append(group.group_id, [(GroupKey(group.group_id), group.to_value(assignments))])
            except BrokerError as exc:
                member.protocols = old_protocols
                return JoinResult(exc.code, member_id)
            # The old leader id keeps the new incarnation from computing an assignment that a stable
            # group would never hand out (Kafka does the same).
            return JoinResult(ErrorCode.none, member_id, group.generation, group.protocol_type, group.protocol,
                              old_leader or "")
        member.join_waiter = waiter
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"static member {req.group_instance_id} rejoined with new protocols")
        return None

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if group.is_leader(member.member_id):
            members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol)) for m in group.members.values()]
        return JoinResult(ErrorCode.none, member.member_id, group.generation, group.protocol_type, group.protocol,
                          group.leader_id or "", members)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                _resolve(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
        initial = group.is_(S.EMPTY)
        group.transition(S.PREPARING_REBALANCE)
        now = time.monotonic()
        group.rebalance_deadline = now + group.max_rebalance_timeout_ms() / 1000
        delay = self.config.get("group.initial.rebalance.delay.ms") / 1000
        group.join_not_before = min(now + delay, group.rebalance_deadline) if initial else None
        self._sweep_by(group.rebalance_deadline if group.join_not_before is None else group.join_not_before)
        log.info("group %s preparing to rebalance (generation %d): %s", group.group_id, group.generation, reason)

    def _maybe_complete_join(self, group: Group) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        now = time.monotonic()
        delayed = group.join_not_before is not None and now < group.join_not_before
        if (group.all_joined() and not delayed) or now >= group.rebalance_deadline:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in list(group.members.values()):
            if not member.awaiting_join and not member.group_instance_id:
                group.remove(member.member_id)  # dynamic members that did not rejoin in time
        group.join_not_before = None
        if not group.members:
            value = GroupValue(group.protocol_type or "", group.generation + 1, None, None, int(time.time() * 1000))
            try:
                self._append(group.group_id, [(GroupKey(group.group_id), value)])
            except BrokerError as exc:
                log.error("group %s: cannot record its empty generation: %s", group.group_id, exc)
                group.generation += 1
                group.transition(S.EMPTY)
            log.info("group %s is empty at generation %d", group.group_id, group.generation)
            return
        group.generation += 1
        group.protocol = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(S.COMPLETING_REBALANCE)
        log.info("group %s: generation %d with %d member(s), protocol %s", group.group_id, group.generation,
                 len(group.members), group.protocol)
        for member in group.members.values():
            self._touch(member)
            if member.awaiting_join:
                _resolve(member.join_waiter, self._join_result(group, member))
            member.join_waiter = None

    # -- SyncGroup -----------------------------------------------------------------------------

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes]) -> SyncResult:
        if not self.owns(group_id):
            return SyncResult(ErrorCode.not_coordinator)
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return SyncResult(error)
        if (protocol_type and protocol_type != group.protocol_type) or (protocol and protocol != group.protocol):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_(S.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.is_(S.STABLE):
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol, member.assignment)
        member.sync_waiter = asyncio.get_running_loop().create_future()
        self._touch(member)
        if group.is_leader(member_id):
            self._complete_sync(group, assignments)
        try:
            return await member.sync_waiter
        except FencedByNewMember:
            return SyncResult(ErrorCode.fenced_instance_id)

    def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        value = group.to_value(assignments)
        try:
            self._append(group.group_id, [(GroupKey(group.group_id), value)])
        except BrokerError as exc:
            log.error("group %s: cannot record generation %d: %s", group.group_id, group.generation, exc)
            for member in group.members.values():
                _resolve(member.sync_waiter, SyncResult(ErrorCode.coordinator_not_available))
            self._prepare_rebalance(group, "the assignment could not be written")
            return
        for member in group.members.values():
            _resolve(member.sync_waiter, SyncResult(ErrorCode.none, group.protocol_type, group.protocol,
                                                    member.assignment))

    # -- Heartbeat / LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return error
        self._touch(group.members[member_id])
        return ErrorCode.rebalance_in_progress if group.is_(S.PREPARING_REBALANCE) else ErrorCode.none

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation: int) -> ErrorCode:
        if group is None or group.is_(S.EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available
        if instance_id and group.static_members.get(instance_id) not in (None, member_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def leave(self, group_id: str, identities: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, [ErrorCode.not_coordinator] * len(identities)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, [ErrorCode.unknown_member_id] * len(identities)
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(identities)
        errors = []
        for member_id, instance_id in identities:
            if instance_id:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = known
            if group.pending_members.pop(member_id, None) is not None:
                errors.append(ErrorCode.none)
            elif member_id in group.members:
                self._remove_member(group, member_id, "left the group")
                errors.append(ErrorCode.none)
            else:
                errors.append(ErrorCode.unknown_member_id)
        self._maybe_complete_join(group)
        return ErrorCode.none, errors

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        log.info("group %s: member %s %s", group.group_id, member_id, reason)
        _resolve(member.join_waiter, JoinResult(ErrorCode.unknown_member_id, member_id))
        _resolve(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id))
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} {reason}")
        self._maybe_complete_join(group)

    # -- offsets -------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                       commits: list[OffsetCommit]) -> list[ErrorCode]:
        """One error per commit, in order."""
        if not self.owns(group_id):
            return [ErrorCode.not_coordinator] * len(commits)
        group = self.groups.get(group_id)
        error = self._check_commit(group, generation, member_id, instance_id)
        if error is not ErrorCode.none:
            return [error] * len(commits)
        errors, records = self.offset_records(group_id, commits)
        if records:
            try:
                self._append(group_id, records)
            except BrokerError as exc:
                return [exc.code if e is ErrorCode.none else e for e in errors]
        if group is not None and member_id in group.members:
            self._touch(group.members[member_id])  # a commit is as good as a heartbeat
        return errors

    def offset_records(self, group_id: str,
                       commits: list[OffsetCommit]) -> tuple[list[ErrorCode], list[tuple[OffsetKey, OffsetValue]]]:
        """One error per commit, in order (its partition must exist and its metadata fit
        offset.metadata.max.bytes), and the records of the commits that passed."""
        now_ms = int(time.time() * 1000)
        max_metadata = self.config.get("offset.metadata.max.bytes")
        errors, records = [], []
        for c in commits:
            info = self.metadata.topics.get(c.topic)
            if info is None or not 0 <= c.partition < info.partitions:
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif c.metadata and len(c.metadata.encode()) > max_metadata:
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                errors.append(ErrorCode.none)
                records.append((OffsetKey(group_id, c.topic, c.partition),
                                OffsetValue(c.offset, c.leader_epoch, c.metadata or "", now_ms)))
        return errors, records

    def _check_commit(self, group: Group | None, generation: int, member_id: str,
                      instance_id: str | None) -> ErrorCode:
        if group is None:
            # No group: only a commit from outside group management (generation -1) may create one.
            return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available
        if generation < 0 and group.is_(S.EMPTY):
            return ErrorCode.none
        if instance_id and group.static_members.get(instance_id) not in (None, member_id):
            return ErrorCode.fenced_instance_id
        if group.is_(S.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], OffsetValue | None]:
        """Committed offsets; `partitions` None means every partition the group has committed."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return dict(sorted(offsets.items()))
        return {tp: offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, []
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return ErrorCode.group_id_not_found, []
        subscribed: set[str] = set()
        if not group.is_(S.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, []
            subscribed = topics
        errors, records = [], []
        for topic, partition in partitions:
            if topic in subscribed:
                errors.append(ErrorCode.group_subscribed_to_topic)
                continue
            errors.append(ErrorCode.none)
            if (topic, partition) in group.offsets:
                records.append((OffsetKey(group_id, topic, partition), None))
        if records:
            try:
                self._append(group_id, records)
            except BrokerError as exc:
                return exc.code, []
        return ErrorCode.none, errors

    def delete_group(self, group_id: str) -> ErrorCode:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_(S.EMPTY):
            return ErrorCode.non_empty_group
        records: list[Record] = [(OffsetKey(group_id, t, p), None) for t, p in group.offsets]
        records.append((GroupKey(group_id), None))
        try:
            self._append(group_id, records)
        except BrokerError as exc:
            return exc.code
        return ErrorCode.none

    # -- describing ----------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        """The group, if this broker has it (in any state)."""
        return self.groups.get(group_id)

    def listed(self) -> list[Group]:
        return [g for g in self.groups.values() if not g.is_(S.DEAD)]

    # -- timers --------------------------------------------------------------------------------

    def _sweep_by(self, at: float) -> None:
        """Make the sweep run by `at` (a time.monotonic()), earlier than planned if need be."""
        if not self._running:
            return
        if self._sweep_timer is not None:
            if self.sweep_due <= at:
                return
            self._sweep_timer.cancel()
        self.sweep_due = at
        self._sweep_timer = asyncio.get_running_loop().call_later(max(at - time.monotonic(), 0), self._sweep_now)

    def _touch(self, member: Member) -> None:
        """A sign of life from `member`: its session starts again, and the sweep is due when it ends."""
        member.heartbeat()
        self._sweep_by(member.deadline)

    def _sweep_now(self) -> None:
        self._sweep_timer = None
        now = time.monotonic()
        try:
            self.sweep(now)
        except Exception:
            log.exception("group coordinator sweep failed")
        self._sweep_by(self._next_sweep(now))

    def _next_sweep(self, now: float) -> float:
        """The earliest moment after `now` at which the sweep has something to check, within MAX_SWEEP_WAIT_S."""
        due = [self._next_retention_check, now + MAX_SWEEP_WAIT_S]
        for group in self.groups.values():
            due.extend(group.pending_members.values())
            due.extend(m.deadline for m in group.members.values())
            if group.is_(S.PREPARING_REBALANCE):
                due.append(group.rebalance_deadline)
                if group.join_not_before is not None:
                    due.append(group.join_not_before)
        return min(t for t in due if t > now)

    def sweep(self, now: float) -> None:
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now >= deadline:
                    del group.pending_members[member_id]
            for member in list(group.members.values()):
                if now >= member.deadline and not (member.awaiting_join or member.awaiting_sync):
                    self._remove_member(group, member.member_id, "session timed out")
            self._maybe_complete_join(group)
        if now >= self._next_retention_check:
            self._next_retention_check = now + self.config.get("offsets.retention.check.interval.ms") / 1000
            self.expire_offsets(int(time.time() * 1000))

    def expire_offsets(self, now_ms: int) -> int:
        """Tombstone offsets past `offsets.retention.minutes`: all of an empty group's (counted from when
        it became empty), and a stable consumer group's for topics it no longer subscribes to."""
        retention_ms = self.config.get("offsets.retention.minutes") * 60_000
        expired_total = 0
        for group in list(self.groups.values()):
            if group.is_(S.EMPTY) and not group.pending_members:
                base = group.state_timestamp_ms
                expired = [tp for tp, v in group.offsets.items()
                           if now_ms - (base if base is not None else v.commit_timestamp) >= retention_ms]
            elif group.is_(S.STABLE) and (subscribed := group.subscribed_topics()) is not None:
                expired = [tp for tp, v in group.offsets.items()
                           if tp[0] not in subscribed and now_ms - v.commit_timestamp >= retention_ms]
            else:
                continue
            expired_total += self._tombstone(group, expired, "expired")
        if expired_total:
            log.info("expired %d committed offset(s)", expired_total)
        return expired_total

    # -- deleted topics ------------------------------------------------------------------------

    def topics_deleted(self, topics: set[str]) -> int:
        """Kafka's onPartitionsDeleted: a deleted topic's committed offsets leave every group this broker
        coordinates, as tombstones in __consumer_offsets, so a topic created again under the name starts
        with none and neither a reload nor the next coordinator brings them back. How many went."""
        return self._remove_offsets(list(self.groups.values()), topics.__contains__)

    def _remove_offsets_of_missing_topics(self, groups) -> None:
        """Loading: offsets of topics that no longer exist are of a deletion this coordinator did not see
        through (down at the time, not yet leading the partition, or its tombstones lost with a leader
        that died before its followers had them)."""
        self._remove_offsets(list(groups), lambda topic: topic not in self.metadata.topics)

    def _remove_offsets(self, groups: list[Group], gone: Callable[[str], bool]) -> int:
        for listener in self.deletion_listeners:
            listener(gone)
        removed = 0
        for group in groups:
            if doomed := [tp for tp in group.offsets if gone(tp[0])]:
                removed += self._tombstone(group, doomed, "deleted topics'")
        if removed:
            log.info("removed %d committed offset(s) of deleted topics", removed)
        return removed

    def _tombstone(self, group: Group, partitions: list[tuple[str, int]], why: str) -> int:
        """Tombstones for `group`'s offsets of `partitions`, and for the group itself when that leaves it
        empty with no offsets (Kafka's group then goes Dead). How many offsets went."""
        records: list[Record] = [(OffsetKey(group.group_id, t, p), None) for t, p in partitions]
        if group.is_(S.EMPTY) and not group.members and len(partitions) == len(group.offsets):
            records.append((GroupKey(group.group_id), None))
        if not records:
            return 0
        try:
            self._append(group.group_id, records)
        except BrokerError as exc:
            log.error("group %s: cannot write tombstones for its %s offsets: %s", group.group_id, why, exc)
            return 0
        return len(partitions)


def _resolve(waiter: asyncio.Future | None, result) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(result)
