"""KIP-932 share groups' membership: ShareGroupHeartbeat and ShareGroupDescribe. The share
coordinator does the work (logcore/coordinator/share_coordinator.py); these handlers only translate."""

from __future__ import annotations

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from ..security.acls import Operation, ResourceType
from . import handles
from .coordinator import GROUPS, SHARES, creating_topics_of
from .consumer_groups import NO_OPERATIONS, _topic_partitions

READ, DESCRIBE, DELETE = Operation.READ, Operation.DESCRIBE, Operation.DELETE
GROUP = ResourceType.GROUP


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
@creating_topics_of(GROUPS, SHARES)
async def share_group_heartbeat(ctx, request) -> dict:
    ctx.require(READ, GROUP, request.group_id)
    try:
        result = ctx.shares.heartbeat(
            request.group_id, request.member_id, request.member_epoch, request.rack_id,
            None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
            ctx.client_id or "", f"/{ctx.client_host}")
    except BrokerError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "member_id": request.member_id or None,
                "member_epoch": -1, "heartbeat_interval": 0}
    assignment = None if result.assignment is None else {"topic_partitions": [
        {"topic_id": topic, "partitions": sorted(ps)} for topic, ps in result.assignment.items()]}
    return {"error_code": ErrorCode.none, "member_id": result.member_id, "member_epoch": result.member_epoch,
            "heartbeat_interval": result.heartbeat_interval_ms, "assignment": assignment}


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def share_group_describe(ctx, request) -> dict:
    described = []
    for group_id in request.group_ids:
        answer = {"group_id": group_id, "error_code": ErrorCode.none, "group_state": "", "group_epoch": -1,
                  "assignment_epoch": -1, "assignor_name": "", "members": [], "authorized_operations": NO_OPERATIONS}
        group = ctx.shares.group(group_id)
        if not ctx.allowed(DESCRIBE, GROUP, group_id):
            answer["error_code"] = ErrorCode.group_authorization_failed
        elif not ctx.shares.owns(group_id):
            answer.update(error_code=ErrorCode.not_coordinator,
                          error_message=f"this broker does not coordinate group {group_id!r}")
        elif group is None and group_id in ctx.shares.group_ids():  # (known by its share-partitions alone)
            answer.update(group_state="Empty", group_epoch=0, assignment_epoch=0, assignor_name="simple")
        elif group is None:
            answer.update(error_code=ErrorCode.group_id_not_found, error_message=f"group {group_id!r} is not a share group")
        else:
            answer.update(
                group_state=group.state, group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                assignor_name="simple",
                members=[{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                          "client_id": m.client_id, "client_host": m.client_host,
                          "subscribed_topic_names": list(m.subscribed_topic_names),
                          "assignment": _topic_partitions(ctx, m.assigned)} for m in group.members.values()])
        if answer["error_code"] == ErrorCode.none and request.include_authorized_operations:
            answer["authorized_operations"] = ctx.authorized_operations((READ, DESCRIBE, DELETE), GROUP, group_id)
        described.append(answer)
    return {"groups": described}
