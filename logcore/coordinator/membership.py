"""Membership and the rebalance protocol of Kafka's classic consumer groups: JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, static members, sessions and rebalance timeouts. Only each generation's
outcome (protocol, leader, members and assignments) is logged, through the `GroupStore`; who has
rejoined and who waits for SyncGroup lives only in memory, as in Kafka.

Event loop only; no `await` between computing records and appending them. JoinGroup and SyncGroup
park on futures until the rebalance completes; `expire` (the coordinator's sweep) ends sessions,
pending member ids and rebalance timeouts, and `deadlines` says when it next has something to do.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..protocol.errors import BrokerError, ErrorCode
from .consumer_group import end_records
from .group import FencedByNewMember, Group, GroupState, Member
from .group_store import GroupStore
from .offsets_codec import GroupKey, GroupValue

log = logging.getLogger(__name__)

S = GroupState


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


class Membership:
    def __init__(self, store: GroupStore, config, sweep_by: Callable[[float], None]) -> None:
        self.store = store
        self.config = config
        self.sweep_by = sweep_by  # make the coordinator's sweep run by then (a time.monotonic())

    def touch(self, member: Member) -> None:
        """A sign of life from `member`: its session starts again, and the sweep is due when it ends."""
        member.heartbeat()
        self.sweep_by(member.deadline)

    # -- JoinGroup -----------------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        if not req.group_id:
            return JoinResult(ErrorCode.invalid_group_id, req.member_id)
        if not self.store.owns(req.group_id):
            return JoinResult(ErrorCode.not_coordinator, req.member_id)
        low, high = self.config.get("group.min.session.timeout.ms"), self.config.get("group.max.session.timeout.ms")
        if not low <= req.session_timeout_ms <= high:
            return JoinResult(ErrorCode.invalid_session_timeout, req.member_id)
        if (error := self._take_over_consumer_group(req.group_id)) is not None:
            return JoinResult(error, req.member_id)
        group = self.store.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return JoinResult(ErrorCode.unknown_member_id, req.member_id)
            group = self.store.groups[req.group_id] = Group(req.group_id)
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

    def _take_over_consumer_group(self, group_id: str) -> ErrorCode | None:
        """An empty KIP-848 group of that id ends so the classic group starts (one with members serves
        classic members itself: classic_members.py)."""
        group = self.store.consumer_groups.get(group_id)
        if group is None:
            return None
        try:
            self.store.append(group_id, end_records(group))
        except BrokerError as exc:
            return exc.code
        return None

    def _join_new(self, group: Group, req: JoinRequest, waiter: asyncio.Future) -> JoinResult | None:
        if len(group.members) + len(group.pending_members) >= self.config.get("group.max.size"):
            return JoinResult(ErrorCode.group_max_size_reached)
        member_id = f"{req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id and req.group_instance_id in group.static_members:
            return self._rejoin_static(group, req, member_id, waiter)
        if req.require_known_member_id and not req.group_instance_id:
            group.pending_members[member_id] = time.monotonic() + req.session_timeout_ms / 1000
            self.sweep_by(group.pending_members[member_id])
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
        self.touch(member)
        if not group.is_(S.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        return None

    def _add_and_rebalance(self, group: Group, req: JoinRequest, member_id: str, waiter: asyncio.Future) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocols, join_waiter=waiter)
        self.touch(member)
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
        self.touch(member)
        if group.is_(S.STABLE) and group.select_protocol() == group.protocol:
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            try:
                self.store.append(group.group_id, [(GroupKey(group.group_id), group.to_value(assignments))])
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

    def rebalance(self, group_id: str, reason: str) -> None:
        """A group just written as a stable generation (a KIP-848 group come back to the classic
        protocol) rebalances: its members get a session from now and rejoin."""
        group = self.store.groups[group_id]
        for member in group.members.values():
            self.touch(member)
        self._prepare_rebalance(group, reason)

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
        self.sweep_by(group.rebalance_deadline if group.join_not_before is None else group.join_not_before)
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
                self.store.append(group.group_id, [(GroupKey(group.group_id), value)])
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
            self.touch(member)
            if member.awaiting_join:
                _resolve(member.join_waiter, self._join_result(group, member))
            member.join_waiter = None

    # -- SyncGroup -----------------------------------------------------------------------------

    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes]) -> SyncResult:
        if not self.store.owns(group_id):
            return SyncResult(ErrorCode.not_coordinator)
        group = self.store.groups.get(group_id)
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
        self.touch(member)
        if group.is_leader(member_id):
            self._complete_sync(group, assignments)
        try:
            return await member.sync_waiter
        except FencedByNewMember:
            return SyncResult(ErrorCode.fenced_instance_id)

    def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        value = group.to_value(assignments)
        try:
            self.store.append(group.group_id, [(GroupKey(group.group_id), value)])
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
        if not self.store.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.store.groups.get(group_id)
        error = self._check_member(group, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return error
        self.touch(group.members[member_id])
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
        if not self.store.owns(group_id):
            return ErrorCode.not_coordinator, [ErrorCode.not_coordinator] * len(identities)
        group = self.store.groups.get(group_id)
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

    # -- sessions and timeouts (the coordinator's sweep) ---------------------------------------

    def expire(self, now: float) -> None:
        for group in list(self.store.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now >= deadline:
                    del group.pending_members[member_id]
            for member in list(group.members.values()):
                if now >= member.deadline and not (member.awaiting_join or member.awaiting_sync):
                    self._remove_member(group, member.member_id, "session timed out")
            self._maybe_complete_join(group)

    def deadlines(self) -> list[float]:
        """When a pending member id, a session, a rebalance timeout or an initial rebalance delay ends."""
        due = []
        for group in self.store.groups.values():
            due.extend(group.pending_members.values())
            due.extend(m.deadline for m in group.members.values())
            if group.is_(S.PREPARING_REBALANCE):
                due.append(group.rebalance_deadline)
                if group.join_not_before is not None:
                    due.append(group.join_not_before)
        return due


def not_coordinator(groups: Iterable[Group]) -> None:
    """Members parked in JoinGroup or SyncGroup hear NOT_COORDINATOR: find the group's new coordinator."""
    for group in groups:
        for member in group.members.values():
            _resolve(member.join_waiter, JoinResult(ErrorCode.not_coordinator))
            _resolve(member.sync_waiter, SyncResult(ErrorCode.not_coordinator))


def _resolve(waiter: asyncio.Future | None, result) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(result)
