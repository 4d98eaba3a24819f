"""Metadata: brokers, controller and topic/partition leadership; auto-creates topics when allowed
(an internal topic through its coordinator, which knows its settings). DescribeTopicPartitions:
the same partitions, paged, for the admin clients of Kafka 3.8 and later."""

from ..coordinator.offsets_codec import OFFSETS_TOPIC
from ..coordinator.transaction_log import TRANSACTION_TOPIC
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import (BrokerError, InvalidRequest, TopicAlreadyExists, TopicAuthorizationFailed,
                               UnknownTopicId, UnknownTopicOrPartition)
from ..security.acls import Operation, ResourceType
from . import handles
from .cluster import CLUSTER_OPERATIONS, NOT_REQUESTED

TOPIC = ResourceType.TOPIC
TOPIC_OPERATIONS = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                    Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS)


def topic_metadata(ctx, name: str) -> dict:
    info = ctx.metadata.get(name)
    partitions = []
    for index in range(info.partitions):
        view = ctx.cluster.partition(name, index)
        error = ErrorCode.none
        if view is None or view.leader < 0:
            error = ErrorCode.leader_not_available
        elif view.leader == ctx.broker_id and ctx.replicas.is_offline(name, index):
            error = ErrorCode.kafka_storage_error
        partitions.append({
            "error_code": error,
            "partition_index": index,
            "leader_id": view.leader if view else -1,
            "leader_epoch": view.leader_epoch if view else -1,
            "replica_nodes": view.replicas if view else [],
            "isr_nodes": view.isr if view else [],
            "offline_replicas": view.offline_replicas if view else [],
        })
    return {"error_code": ErrorCode.none, "name": name, "topic_id": info.topic_id, "is_internal": info.internal,
            "partitions": partitions, "topic_authorized_operations": NOT_REQUESTED}


async def _auto_create(ctx, name: str) -> None:
    """Internal topics take their coordinator's settings (compacted, its partition count), never the
    defaults a client's topic gets."""
    coordinators = {OFFSETS_TOPIC: ctx.groups, TRANSACTION_TOPIC: ctx.transactions}
    if name in coordinators:
        await coordinators[name].ensure_topic()
    else:
        await ctx.topic_admin.create(name)


@handles(ApiKey.METADATA, 0, 13)
async def metadata(ctx, request) -> dict:
    auto_create = getattr(request, "allow_auto_topic_creation", True) and ctx.config.get("auto.create.topics.enable")
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        names = [name for name in sorted(ctx.metadata.topics) if ctx.allowed(Operation.DESCRIBE, TOPIC, name)]
    else:
        names = []
        for wanted in request.topics:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id is not None:
                info = ctx.metadata.by_id(topic_id)
                name = info.name if info else None
            names.append(name if name is not None else topic_id)
    topics = []
    for name in names:
        if not isinstance(name, str):
            topics.append({"error_code": UnknownTopicId.code, "name": None, "topic_id": name})
            continue
        try:
            if not ctx.allowed(Operation.DESCRIBE, TOPIC, name):
                raise TopicAuthorizationFailed()
            if name not in ctx.metadata.topics and auto_create:
                if not (ctx.allowed(Operation.CREATE, ResourceType.CLUSTER)
                        or ctx.allowed(Operation.CREATE, TOPIC, name)):
                    raise TopicAuthorizationFailed()
                await _auto_create(ctx, name)
            described = topic_metadata(ctx, name)
            if getattr(request, "include_topic_authorized_operations", False):
                described["topic_authorized_operations"] = ctx.authorized_operations(TOPIC_OPERATIONS, TOPIC, name)
            topics.append(described)
        except TopicAlreadyExists:
            # Another broker created it a moment ago and this one has not heard yet (a cluster): as Kafka,
            # a retriable LEADER_NOT_AVAILABLE, not an error the client would give up on.
            topics.append({"error_code": ErrorCode.leader_not_available, "name": name, "is_internal": False,
                           "partitions": []})
        except BrokerError as exc:
            topics.append({"error_code": exc.code, "name": name, "is_internal": False, "partitions": []})
    return {
        "error_code": ErrorCode.none,
        "brokers": [{"node_id": node.node_id, "host": address[0], "port": address[1], "rack": node.rack}
                    for node in ctx.cluster.live_nodes() if (address := node.address(ctx.listener)) is not None],
        "cluster_id": ctx.metadata.cluster_id,
        "controller_id": ctx.cluster.controller_id,
        "topics": topics,
        "cluster_authorized_operations": ctx.authorized_operations(CLUSTER_OPERATIONS, ResourceType.CLUSTER)
        if getattr(request, "include_cluster_authorized_operations", False) else NOT_REQUESTED,
    }


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx, request) -> dict:
    """KIP-966: topics (all when none are named) in name order, from `cursor` on, at most
    `response_partition_limit` partitions (and max.request.partition.size.limit) per response; the
    next cursor says where the following request starts. Never creates a topic."""
    limit = min(request.response_partition_limit, ctx.config.get("max.request.partition.size.limit"))
    names = sorted({t.name for t in request.topics}) if request.topics else [
        name for name in sorted(ctx.metadata.topics) if ctx.allowed(Operation.DESCRIBE, TOPIC, name)]
    cursor = request.cursor
    if cursor is not None:
        if request.topics and cursor.topic_name not in names:
            raise InvalidRequest(f"the cursor's topic {cursor.topic_name!r} is not among the topics asked for")
        names = [name for name in names if name >= cursor.topic_name]
    topics, next_cursor = [], None
    for name in names:
        if not ctx.allowed(Operation.DESCRIBE, TOPIC, name):
            topics.append({"error_code": TopicAuthorizationFailed.code, "name": name, "topic_id": None,
                           "partitions": []})
            continue
        if name not in ctx.metadata.topics:
            topics.append({"error_code": UnknownTopicOrPartition.code, "name": name, "topic_id": None,
                           "partitions": []})
            continue
        described = topic_metadata(ctx, name)
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        # Kafka's brokers send empty ELR lists, never null, and its Java admin client depends on that.
        partitions = [{**p, "eligible_leader_replicas": [], "last_known_elr": []} for p in described["partitions"][first:]]
        if len(partitions) > limit:
            next_cursor = {"topic_name": name, "partition_index": partitions[limit]["partition_index"]}
            partitions = partitions[:limit]
        limit -= len(partitions)
        topics.append({**described, "partitions": partitions})
        if next_cursor is not None:
            break
        if limit == 0 and name != names[-1]:
            next_cursor = {"topic_name": names[names.index(name) + 1], "partition_index": 0}
            break
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}
