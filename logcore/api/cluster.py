"""DescribeCluster, DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders and the partition reassignment
APIs: who is in the cluster, what this broker keeps on disk, and leader elections and replica moves on
request (which the controller carries out)."""

from __future__ import annotations

import os

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from ..security.acls import Operation, ResourceType
from . import handles

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types

BROKERS_ENDPOINT = 1
NOT_REQUESTED = -2147483648  # the schema's "authorized operations were not asked for"
# The operations on the cluster resource; authorized operations are a bit field of those allowed
# (with no authorizer, all of them).
CLUSTER_OPERATIONS = (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                      Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def describe_cluster(ctx, request) -> dict:
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        return {"error_code": ErrorCode.unsupported_endpoint_type, "endpoint_type": endpoint_type,
                "error_message": f"this is a broker; endpoint type {endpoint_type} (controllers) is not served here"}
    return {
        "error_code": ErrorCode.none,
        "endpoint_type": endpoint_type,
        "cluster_id": ctx.metadata.cluster_id,
        "controller_id": ctx.cluster.controller_id,
        "brokers": [{"broker_id": node.node_id, "host": address[0], "port": address[1], "rack": node.rack,
                     "is_fenced": False} for node in ctx.cluster.live_nodes()
                    if (address := node.address(ctx.listener)) is not None],
        "cluster_authorized_operations": NOT_REQUESTED if not request.include_cluster_authorized_operations
        else ctx.authorized_operations(CLUSTER_OPERATIONS, ResourceType.CLUSTER),
    }


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 5)
async def describe_log_dirs(ctx, request) -> dict:
    ctx.require(Operation.DESCRIBE, ResourceType.CLUSTER)
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    described = ctx.replicas.describe_log_dir(wanted)
    topics: dict[str, list[dict]] = {}
    for replica in described.replicas:
        topics.setdefault(replica.topic, []).append({
            "partition_index": replica.index, "partition_size": replica.size_bytes,
            "offset_lag": replica.offset_lag, "is_future_key": False})
    return {"error_code": ErrorCode.none, "results": [{
        "error_code": ErrorCode.none,
        "log_dir": described.path,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
        "total_bytes": described.total_bytes,
        "usable_bytes": described.usable_bytes,
    }]}


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
async def alter_replica_log_dirs(ctx, request) -> dict:
    """A broker has one log directory, its data dir: a replica asked to live there already does (or
    will, when created: Kafka answers NONE for a replica it does not host yet). Any other path is
    LOG_DIR_NOT_FOUND; an offline replica, KAFKA_STORAGE_ERROR."""
    replicas = ctx.replicas
    here = os.path.realpath(replicas.data_dir)
    allowed = ctx.allowed(Operation.ALTER, ResourceType.CLUSTER)
    results: dict[str, list[dict]] = {}
    for log_dir in request.dirs:
        for topic in log_dir.topics:
            for index in topic.partitions:
                if not allowed:
                    error = ErrorCode.cluster_authorization_failed
                elif os.path.realpath(log_dir.path) != here:
                    error = ErrorCode.log_dir_not_found
                elif replicas.is_offline(topic.name, index):
                    error = ErrorCode.kafka_storage_error
                else:
                    error = ErrorCode.none
                results.setdefault(topic.name, []).append({"partition_index": index, "error_code": error})
    return {"throttle_time": 0, "results": [{"topic_name": name, "partitions": partitions}
                                            for name, partitions in results.items()]}


@handles(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx, request) -> dict:
    ctx.require(Operation.ALTER, ResourceType.CLUSTER)
    election = getattr(request, "election_type", PREFERRED)  # (v0: preferred only)
    if election not in (PREFERRED, UNCLEAN):
        return {"error_code": ErrorCode.invalid_request, "replica_election_results": []}
    wanted = None if request.topic_partitions is None else [
        (t.topic, p) for t in request.topic_partitions for p in t.partitions]
    try:
        results = await ctx.cluster.elect_leaders(wanted, election == UNCLEAN)
    except BrokerError as exc:  # (NOT_CONTROLLER: the client asks the controller)
        return {"error_code": exc.code, "replica_election_results": []}
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append({
            "partition_id": partition, "error_code": error.code if error else ErrorCode.none,
            "error_message": error.message if error else None})
    return {"error_code": ErrorCode.none, "replica_election_results": [
        {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()]}


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def alter_partition_reassignments(ctx, request) -> dict:
    ctx.require(Operation.ALTER, ResourceType.CLUSTER)
    changes = {(t.name, p.partition_index): None if p.replicas is None else list(p.replicas)
               for t in request.topics for p in t.partitions}
    try:
        results = await ctx.cluster.reassign(changes)
    except BrokerError as exc:  # (NOT_CONTROLLER: the client asks the controller)
        return {"error_code": exc.code, "error_message": exc.message, "responses": []}
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "error_code": error.code if error else ErrorCode.none,
                                               "error_message": error.message if error else None})
    return {"error_code": ErrorCode.none, "error_message": None,
            "responses": [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx, request) -> dict:
    ctx.require(Operation.DESCRIBE, ResourceType.CLUSTER)
    wanted = None if request.topics is None else {(t.name, p) for t in request.topics for p in t.partition_indexes}
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (replicas, adding, removing) in (await ctx.cluster.reassignments()).items():
        if wanted is None or (topic, partition) in wanted:
            by_topic.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas,
                                                   "adding_replicas": adding, "removing_replicas": removing})
    return {"error_code": ErrorCode.none, "error_message": None,
            "topics": [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}
