"""The share-group admin APIs (KIP-932): DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets, over the share-partitions' start offsets (logcore/coordinator/share_coordinator.py).

A share group's "offset" on a partition is its start offset (SPSO): every record before it is done
with. Its lag is what is left after it: the high watermark less the start offset, less the records
of the in-flight window already acknowledged or archived. A partition the group has not read yet
answers start offset -1. Altering or deleting needs a group with no members (NON_EMPTY_GROUP).
"""

from __future__ import annotations

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, NotCoordinator, UnknownTopicOrPartition
from ..security.acls import Operation, ResourceType
from . import handles
from .coordinator import SHARES, creating_topics_of

GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


def _lag(ctx, topic: str, index: int, partition) -> int:
    """From this broker's replica of the partition, leader or follower (-1 if it has none)."""
    try:
        end = ctx.replicas.get(topic, index).high_watermark
    except BrokerError:
        return -1
    return max(end - partition.start_offset - partition.done_count(), 0)


async def _described_topic(ctx, group_id: str, name: str, partitions) -> dict:
    info = ctx.metadata.topics.get(name)
    out = []
    for index in partitions if partitions is not None else range(info.partitions if info else 0):
        answer = {"partition_index": index, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                  "error_code": ErrorCode.none}
        if info is None or not 0 <= index < info.partitions:
            answer.update(error_code=ErrorCode.unknown_topic_or_partition,
                          error_message=f"topic {name!r} has no partition {index}")
        else:
            try:
                sp = await ctx.shares.share_partition(group_id, info.topic_id, index)
            except BrokerError as exc:
                answer.update(error_code=exc.code, error_message=exc.message)
                sp = None
            if sp is not None:
                answer.update(start_offset=sp.start_offset, lag=_lag(ctx, name, index, sp))
        out.append(answer)
    return {"topic_name": name, "topic_id": info.topic_id if info else None, "partitions": out}


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(ctx, request) -> dict:
    groups = []
    for group in request.groups:
        answer = {"group_id": group.group_id, "topics": [], "error_code": ErrorCode.none}
        if not ctx.allowed(Operation.DESCRIBE, GROUP, group.group_id):
            answer["error_code"] = ErrorCode.group_authorization_failed
        elif not ctx.shares.owns(group.group_id):
            answer.update(error_code=ErrorCode.not_coordinator,
                          error_message=f"this broker does not coordinate group {group.group_id!r}")
        elif group.topics is None:  # every topic the group has read
            names = {}
            for topic_id, index in ctx.shares.known_partitions(group.group_id):
                info = ctx.metadata.by_id(topic_id)
                if info is not None and ctx.allowed(Operation.DESCRIBE, TOPIC, info.name):
                    names.setdefault(info.name, []).append(index)
            described = [await _described_topic(ctx, group.group_id, name, sorted(ps)) for name, ps in sorted(names.items())]
            for topic in described:  # (only the partitions it has read)
                topic["partitions"] = [p for p in topic["partitions"] if p["start_offset"] >= 0 or p["error_code"]]
            answer["topics"] = [t for t in described if t["partitions"]]
        else:
            answer["topics"] = [await _described_topic(ctx, group.group_id, t.topic_name, t.partitions)
                                for t in group.topics if ctx.allowed(Operation.DESCRIBE, TOPIC, t.topic_name)]
        groups.append(answer)
    return {"groups": groups}


def _unless_empty(ctx, group_id: str) -> dict | None:
    """The whole request's refusal while the group has members (or is coordinated elsewhere), else None."""
    try:
        if not ctx.shares.owns(group_id):
            raise NotCoordinator(f"this broker does not coordinate group {group_id!r}")
        ctx.shares.require_empty(group_id)
    except BrokerError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "responses": []}
    return None


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
@creating_topics_of(SHARES)
async def alter_share_group_offsets(ctx, request) -> dict:
    ctx.require(Operation.READ, GROUP, request.group_id)
    if (refused := _unless_empty(ctx, request.group_id)) is not None:
        return refused
    topics = []
    for topic in request.topics:
        info = ctx.metadata.topics.get(topic.topic_name)
        partitions = []
        for p in topic.partitions:
            answer = {"partition_index": p.partition_index, "error_code": ErrorCode.none}
            try:
                if not ctx.allowed(Operation.READ, TOPIC, topic.topic_name):
                    answer["error_code"] = ErrorCode.topic_authorization_failed
                    partitions.append(answer)
                    continue
                if info is None or not 0 <= p.partition_index < info.partitions:
                    raise UnknownTopicOrPartition(f"topic {topic.topic_name!r} has no partition {p.partition_index}")
                await ctx.shares.reset_offset(request.group_id, info.topic_id, p.partition_index, p.start_offset)
            except BrokerError as exc:
                answer.update(error_code=exc.code, error_message=exc.message)
            partitions.append(answer)
        topics.append({"topic_name": topic.topic_name, "topic_id": info.topic_id if info else None,
                       "partitions": partitions})
    return {"error_code": ErrorCode.none, "responses": topics}


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
@creating_topics_of(SHARES)
async def delete_share_group_offsets(ctx, request) -> dict:
    ctx.require(Operation.DELETE, GROUP, request.group_id)
    if (refused := _unless_empty(ctx, request.group_id)) is not None:
        return refused
    topics = []
    for topic in request.topics:
        info = ctx.metadata.topics.get(topic.topic_name)
        answer = {"topic_name": topic.topic_name, "topic_id": info.topic_id if info else None,
                  "error_code": ErrorCode.none}
        try:
            if not ctx.allowed(Operation.READ, TOPIC, topic.topic_name):
                answer["error_code"] = ErrorCode.topic_authorization_failed
            elif info is None:
                raise UnknownTopicOrPartition(f"no topic {topic.topic_name!r}")
            else:
                await ctx.shares.delete_offsets(request.group_id, info.topic_id)
        except BrokerError as exc:
            answer.update(error_code=exc.code, error_message=exc.message)
        topics.append(answer)
    return {"error_code": ErrorCode.none, "responses": topics}
