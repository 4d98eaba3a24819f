"""KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe. The group coordinator
does the work (logcore/coordinator/consumer_groups.py); these handlers only translate."""

from __future__ import annotations

import datetime

from ..coordinator.group_coordinator import Heartbeat
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from ..security.acls import Operation, ResourceType
from . import handles
from .coordinator import GROUPS, creating_topics_of

READ, DESCRIBE, DELETE = Operation.READ, Operation.DESCRIBE, Operation.DELETE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
NO_OPERATIONS = -2147483648
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's MemberType


def _ms(value: datetime.timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else value


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
@creating_topics_of(GROUPS)
async def consumer_group_heartbeat(ctx, request) -> dict:
    ctx.require(READ, GROUP, request.group_id)
    if request.group_id in ctx.shares.group_ids():
        return {"error_code": ErrorCode.group_id_not_found, "member_id": request.member_id or None, "member_epoch": -1,
                "heartbeat_interval": 0, "error_message": f"group {request.group_id!r} is a share group"}
    # As Kafka (KAFKA-18813): a subscription may name only topics the sender may describe; a regex
    # is resolved to those it may describe (the coordinator asks `describable`).
    hidden = sorted(name for name in request.subscribed_topic_names or () if not ctx.allowed(DESCRIBE, TOPIC, name))
    if hidden:
        return {"error_code": ErrorCode.topic_authorization_failed, "member_id": request.member_id or None,
                "member_epoch": -1, "heartbeat_interval": 0,
                "error_message": f"{ctx.principal} may not DESCRIBE topic(s) {', '.join(hidden)}"}
    owned = None if request.topic_partitions is None else {
        tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions if tp.partitions}
    try:
        result = ctx.groups.consumer_heartbeat(Heartbeat(
            group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=_ms(request.rebalance_timeout),
            subscribed_topic_names=None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
            subscribed_topic_regex=request.subscribed_topic_regex, server_assignor=request.server_assignor,
            owned=owned, client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}",
            describable=None if ctx.authorizer is None else lambda name: ctx.allowed(DESCRIBE, TOPIC, name)))
    except BrokerError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "member_id": request.member_id or None,
                "member_epoch": -1, "heartbeat_interval": 0}
    error = await ctx.groups.replicated(request.group_id)  # (acted on only once the ISR has it)
    if error is not ErrorCode.none:
        return {"error_code": error, "member_id": result.member_id, "member_epoch": -1, "heartbeat_interval": 0}
    assignment = None if result.assignment is None else {"topic_partitions": [
        {"topic_id": topic, "partitions": sorted(ps)} for topic, ps in result.assignment.items()]}
    return {"error_code": ErrorCode.none, "member_id": result.member_id, "member_epoch": result.member_epoch,
            "heartbeat_interval": result.heartbeat_interval_ms, "assignment": assignment}


def _topic_partitions(ctx, assignment) -> dict:
    named = []
    for topic, partitions in sorted(assignment.items(), key=lambda item: str(item[0])):
        info = ctx.metadata.by_id(topic)
        named.append({"topic_id": topic, "topic_name": info.name if info else "", "partitions": sorted(partitions)})
    return {"topic_partitions": named}


def _assigned_topics(ctx, group) -> set[str]:
    """The names of the topics in the members' assignments and targets."""
    topic_ids = {topic for m in group.members.values() for topic in (*m.assigned, *group.target.get(m.member_id, {}))}
    return {info.name for topic in topic_ids if (info := ctx.metadata.by_id(topic)) is not None}


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx, request) -> dict:
    described = []
    for group_id in request.group_ids:
        answer = {"group_id": group_id, "error_code": ErrorCode.none, "group_state": "", "group_epoch": -1,
                  "assignment_epoch": -1, "assignor_name": "", "members": [], "authorized_operations": NO_OPERATIONS}
        group = ctx.groups.consumer_group(group_id)
        if not ctx.allowed(DESCRIBE, GROUP, group_id):
            answer["error_code"] = ErrorCode.group_authorization_failed
        elif not ctx.groups.owns(group_id):
            answer["error_code"] = ErrorCode.not_coordinator
        elif group is None:  # (the admin client then asks DescribeGroups, for a classic group)
            answer.update(error_code=ErrorCode.group_id_not_found,
                          error_message=f"group {group_id!r} is not a consumer group")
        elif not all(ctx.allowed(DESCRIBE, TOPIC, name) for name in _assigned_topics(ctx, group)):
            answer.update(error_code=ErrorCode.topic_authorization_failed,  # (as Kafka: no member shown)
                          error_message="the group has topics the client may not DESCRIBE")
        else:
            answer.update(
                group_state=group.state, group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                assignor_name=ctx.groups.consumer_assignor(group),
                members=[{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                          "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                          "subscribed_topic_names": list(m.subscribed_topic_names),
                          "subscribed_topic_regex": m.subscribed_topic_regex,
                          "assignment": _topic_partitions(ctx, m.assigned),
                          "target_assignment": _topic_partitions(ctx, group.target.get(m.member_id, {})),
                          "member_type": CLASSIC_MEMBER if m.classic else CONSUMER_MEMBER}
                         for m in group.members.values()],
                authorized_operations=ctx.authorized_operations((READ, DESCRIBE, DELETE), GROUP, group_id)
                if request.include_authorized_operations else NO_OPERATIONS)
        described.append(answer)
    return {"groups": described}
