"""Classic members of a KIP-848 consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
answered by the consumer group, as Kafka does during an online upgrade (a classic group becomes a
consumer group when its first member restarts with `group.protocol=consumer`, consumer_groups.py;
the others go on with the classic protocol until they restart too).

A classic member is a consumer group member like any other — the coordinator assigns its
partitions, it reconciles towards its target — that speaks through the classic requests:

    JoinGroup   takes its subscription (and, from a cooperative member, the partitions it still
                owns) and reconciles it; answers its member epoch as the generation, no leader, no
                members (the coordinator assigns, the member's assignor does not run)
    SyncGroup   answers its partitions as a ConsumerProtocolAssignment
    Heartbeat   REBALANCE_IN_PROGRESS while it has something to reconcile: it rejoins
    LeaveGroup  removes it, as a KIP-848 member's leave does

As Kafka's ConsumerGroup holds them, a classic member has its rebalance timeout (JoinGroup's) to
rejoin once a Heartbeat or SyncGroup told it to, and to send SyncGroup once it joined; past either
it is fenced like a member whose session ended, and its partitions go to the others.

Event loop only; no `await` between computing records and appending them.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from ..protocol.codec import ErrorCode
from ..protocol.consumer_protocol import decode_subscription, encode_assignment
from ..protocol.errors import BrokerError
from .consumer_group import ConsumerGroup, ConsumerMember, MemberState, removal_records
from .consumer_groups import ConsumerGroups
from .membership import JoinRequest, JoinResult, SyncResult


class ClassicMembers:
    def __init__(self, consumer: ConsumerGroups) -> None:
        self.consumer = consumer

    def serves(self, group_id: str) -> bool:
        """Is `group_id` a consumer group with members (so classic requests for it come here)?"""
        group = self.consumer.groups.get(group_id)
        return group is not None and bool(group.members)

    def join(self, req: JoinRequest) -> JoinResult:
        group = self.consumer.groups[req.group_id]
        if req.protocol_type != "consumer" or not req.protocols:
            return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except ValueError:
            return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
        member_id, out, replaced = req.member_id, [], None
        if not member_id:
            member_id = f"{req.client_id}-{uuid.uuid4()}"
            if req.require_known_member_id and not req.group_instance_id:
                return JoinResult(ErrorCode.member_id_required, member_id)
        member = group.members.get(member_id)
        static = group.static_member(req.group_instance_id) if req.group_instance_id else None
        if static is not None and static.member_id != member_id:  # a static member's new incarnation
            if req.member_id:
                return JoinResult(ErrorCode.fenced_instance_id, member_id)
            out += removal_records(group.group_id, static.member_id)
            member, replaced = replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0), \
                static.member_id
        elif member is None:  # (a new member, or one the group fenced meanwhile: it joins again)
            member = ConsumerMember(member_id, instance_id=req.group_instance_id)
        new = member_id not in group.members and replaced is None
        updated = replace(member, instance_id=req.group_instance_id or member.instance_id,
                          rack_id=subscription.rack_id or member.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
                          server_assignor=None, subscribed_topic_names=tuple(sorted(subscription.topics)),
                          subscribed_topic_regex=None, client_id=req.client_id, client_host=req.client_host,
                          classic_session_timeout_ms=req.session_timeout_ms, classic_protocols=tuple(req.protocols))
        owned = self.consumer.topic_ids(subscription.owned)
        try:
            reconciled = self.consumer.update(group, member, updated, new, replaced, owned, out)
        except BrokerError as exc:
            return JoinResult(exc.code, member_id)
        group = self.consumer.groups[req.group_id]
        self.consumer.touch(group, member_id, req.session_timeout_ms)
        group.join_deadlines.pop(member_id, None)
        self.consumer.await_classic(group.sync_deadlines, reconciled, req.rebalance_timeout_ms, replace_pending=True)
        return JoinResult(ErrorCode.none, member_id, reconciled.member_epoch, "consumer", req.protocols[0][0], "")

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol: str | None) -> SyncResult:
        group = self.consumer.groups[group_id]
        member, error = self._check(group, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return SyncResult(error)
        names = [name for name, _ in member.classic_protocols]
        if (protocol_type and protocol_type != "consumer") or (protocol and protocol not in names):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._rejoin(group, member)  # (a new epoch since it joined; revoking members finish first)
            return SyncResult(ErrorCode.rebalance_in_progress)
        group.sync_deadlines.pop(member_id, None)
        self.consumer.touch(group, member_id, member.classic_session_timeout_ms)
        return SyncResult(ErrorCode.none, "consumer", protocol or names[0],
                          encode_assignment(self.consumer.topic_names(member.assigned)))

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        group = self.consumer.groups[group_id]
        member, error = self._check(group, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return error
        self.consumer.touch(group, member_id, member.classic_session_timeout_ms)
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waits_on_others(group, member))):
            self._rejoin(group, member)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def _rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """The member is told to rejoin: it has its rebalance timeout to (counted from the first telling)."""
        self.consumer.await_classic(group.join_deadlines, member, member.rebalance_timeout_ms, replace_pending=False)

    def leave(self, group_id: str, identities: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.consumer.groups[group_id]
        errors = []
        for member_id, instance_id in identities:
            member = group.static_member(instance_id) if instance_id else group.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.unknown_member_id)
            elif instance_id and member_id and member.member_id != member_id:
                errors.append(ErrorCode.fenced_instance_id)
            else:
                self.consumer.fence(group, member.member_id, "left the group (LeaveGroup)")
                errors.append(ErrorCode.none)
        return ErrorCode.none, errors

    @staticmethod
    def _check(group: ConsumerGroup, member_id: str, instance_id: str | None,
               generation: int) -> tuple[ConsumerMember | None, ErrorCode]:
        member = group.members.get(member_id)
        if instance_id and (static := group.static_member(instance_id)) is not None and static.member_id != member_id:
            return None, ErrorCode.fenced_instance_id
        if member is None or not member.classic:
            return None, ErrorCode.unknown_member_id
        if generation != member.member_epoch:
            return None, ErrorCode.illegal_generation
        return member, ErrorCode.none


def _waits_on_others(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Is some partition of the member's target not yet its own because another member still owns it?
    (Then rejoining gains it nothing yet.)"""
    for topic, partitions in group.target.get(member.member_id, {}).items():
        mine = member.assigned.get(topic, frozenset())
        if any(group.partition_epoch(topic, p) != -1 for p in partitions - mine):
            return True
    return False
