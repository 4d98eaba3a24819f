"""Topic lifecycle: CreateTopics, DeleteTopics, CreatePartitions. Each topic succeeds or fails on
its own; a refused topic gets its error code and a message saying what to change."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

from ..config import TOPIC_CONFIGS, format_value
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import (BrokerError, InvalidPartitions, InvalidReplicaAssignment, InvalidRequest, RequestTimedOut,
                               UnknownTopicId)
from ..security.acls import Operation, ResourceType
from . import handles

ZERO_UUID = uuid.UUID(int=0)
# Kafka 4 refuses a CreateTopics or CreatePartitions request that would add more partitions than
# this, before placing any replica (KAFKA-17870); here it also keeps one request from making a
# million directories.
MAX_NEW_PARTITIONS = 10_000
LEADERS_POLL_S = 0.01


def split_repeated(items, name_of) -> tuple[list, list[dict]]:
    """(items named once, error results for names given more than once): like Kafka, a repeated
    name is refused outright rather than applied twice."""
    counts = Counter(name_of(item) for item in items)
    errors = [{"name": name, **error_fields(InvalidRequest(f"{name!r} appears more than once in the request"))}
              for name, count in counts.items() if count > 1]
    return [item for item in items if counts[name_of(item)] == 1], errors


def error_fields(exc: BrokerError) -> dict:
    return {"error_code": exc.code, "error_message": exc.message}


def created_topic(ctx, info, validate_only: bool) -> dict:
    """The v5+ description of a (would-be) created topic: counts, id and every config."""
    topic_config = ctx.topic_admin.topic_config(info)
    configs = []
    for key in sorted(TOPIC_CONFIGS):
        entry = topic_config.describe(key)
        configs.append({"name": key, "value": format_value(entry.value), "read_only": entry.read_only,
                        "config_source": entry.source, "is_sensitive": False})
    return {"name": info.name, "topic_id": ZERO_UUID if validate_only else info.topic_id,
            "error_code": ErrorCode.none, "error_message": None, "num_partitions": info.partitions,
            "replication_factor": info.replication_factor, "configs": configs}


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx, request) -> dict:
    topics, results = split_repeated(request.topics, lambda t: t.name)
    asked = sum(len(t.assignments) or max(t.num_partitions, 0) for t in topics)
    if asked > MAX_NEW_PARTITIONS:
        return {"topics": results + [{"name": t.name, **error_fields(_too_many(asked))} for t in topics]}
    created = []
    anywhere = ctx.allowed(Operation.CREATE, ResourceType.CLUSTER)  # (else CREATE on each topic's name)
    for topic in topics:
        try:
            if not anywhere:
                ctx.require(Operation.CREATE, ResourceType.TOPIC, topic.name)
            info = await ctx.topic_admin.create(
                topic.name, topic.num_partitions, topic.replication_factor,
                assignments=_assignments(topic.assignments),
                configs=_configs(topic.configs), validate_only=request.validate_only)
            results.append(created_topic(ctx, info, request.validate_only))
            created.append(info)
        except BrokerError as exc:
            results.append({"name": topic.name, **error_fields(exc)})
    if created and not request.validate_only:
        timeout_s = request.timeout.total_seconds()
        leaderless = await _without_leaders(ctx, created, timeout_s)
        for result in results:
            if result["name"] in leaderless:
                result.update(error_fields(RequestTimedOut(
                    f"topic {result['name']} was created, but not all its partitions had a leader within the "
                    f"request's timeout ({timeout_s:g} s); it will be usable once they do")))
    return {"topics": results}


async def _without_leaders(ctx, infos, timeout_s: float) -> set[str]:
    """As Kafka, a created topic is answered once its partitions have leaders in this broker's view of
    the cluster (at most the request's timeout): a client's next Metadata request then finds it whole
    (aiokafka, for one, drops a topic without leaders from its metadata until its next refresh, minutes
    later). In a cluster the controller elects them a moment after the topic is written; every broker
    learns them from the same ZooKeeper nodes. Returns the names of the topics still without."""
    deadline = time.monotonic() + max(timeout_s, 0)

    def leaderless() -> set[str]:
        return {info.name for info in infos for index in range(info.partitions)
                if (view := ctx.cluster.partition(info.name, index)) is None or view.leader < 0}
    while (waiting := leaderless()) and time.monotonic() < deadline:
        await asyncio.sleep(LEADERS_POLL_S)
    return waiting


def _too_many(asked: int) -> InvalidPartitions:
    return InvalidPartitions(f"this request would create {asked:,} partitions; one request may create at most "
                             f"{MAX_NEW_PARTITIONS:,}: split it")


def _assignments(entries) -> dict[int, list[int]]:
    assignments: dict[int, list[int]] = {}
    for entry in entries:
        if entry.partition_index in assignments:
            raise InvalidReplicaAssignment(f"partition {entry.partition_index} is assigned more than once")
        assignments[entry.partition_index] = list(entry.broker_ids)
    return assignments


def _configs(entries) -> dict[str, str | None]:
    configs: dict[str, str | None] = {}
    for entry in entries:
        if entry.name in configs:
            raise InvalidRequest(f"config {entry.name} is given more than once")
        configs[entry.name] = entry.value
    return configs


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx, request) -> dict:
    # v1-5 name topics in `topic_names`; v6 in `topics`, each by name or by id.
    wanted = ([(name, None) for name in request.topic_names] if hasattr(request, "topic_names")
              else [(t.name, t.topic_id if t.topic_id != ZERO_UUID else None) for t in request.topics])
    results = []
    for name, topic_id in wanted:
        result = {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": ErrorCode.none}
        try:
            if name is not None and topic_id is not None:
                raise InvalidRequest("name a topic by name or by id, not both")
            if topic_id is not None:
                info = ctx.metadata.by_id(topic_id)
                if info is None:
                    raise UnknownTopicId(f"no topic has id {topic_id}")
                name = result["name"] = info.name
            ctx.require(Operation.DELETE, ResourceType.TOPIC, name)
            result["topic_id"] = ctx.topic_admin.delete(name).topic_id
        except BrokerError as exc:
            result.update(error_fields(exc))
            if exc.code == ErrorCode.topic_deletion_disabled and ctx.api_version < 3:
                result["error_code"] = ErrorCode.invalid_request  # v0-2 predate TOPIC_DELETION_DISABLED
        results.append(result)
    return {"responses": results}


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx, request) -> dict:
    topics, results = split_repeated(request.topics, lambda t: t.name)
    asked = sum(max(t.count - info.partitions, 0) for t in topics if (info := ctx.metadata.topics.get(t.name)))
    if asked > MAX_NEW_PARTITIONS:
        return {"results": results + [{"name": t.name, **error_fields(_too_many(asked))} for t in topics]}
    for topic in topics:
        try:
            ctx.require(Operation.ALTER, ResourceType.TOPIC, topic.name)
            assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
            await ctx.topic_admin.create_partitions(topic.name, topic.count, assignments, validate_only=request.validate_only)
            results.append({"name": topic.name, "error_code": ErrorCode.none, "error_message": None})
        except BrokerError as exc:
            results.append({"name": topic.name, **error_fields(exc)})
    return {"results": results}
