"""Consumer groups: membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed offsets
(OffsetCommit, OffsetFetch, OffsetDelete) and administration (ListGroups, DescribeGroups,
DeleteGroups). The group coordinator does the work; these handlers only translate."""

from __future__ import annotations

import datetime

from ..coordinator.group import GroupState
from ..coordinator.group_coordinator import JoinRequest, OffsetCommit
from ..protocol.codec import ApiKey, ErrorCode
from ..security.acls import Operation, ResourceType
from . import handles
from .coordinator import GROUPS, creating_topics_of

READ, DESCRIBE, DELETE = Operation.READ, Operation.DESCRIBE, Operation.DELETE
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER

NO_OPERATIONS = -2147483648  # authorized operations were not asked for


def _ms(value: datetime.timedelta | int | None) -> int | None:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value


def _topic_name(ctx, topic) -> str | None:
    """A request topic's name; v10-style requests name topics by id instead."""
    name = getattr(topic, "name", None)
    if name is None and getattr(topic, "topic_id", None) is not None:
        info = ctx.metadata.by_id(topic.topic_id)
        name = info.name if info else None
    return name


def _topic_ids(ctx, name: str) -> dict:
    info = ctx.metadata.topics.get(name)
    return {"name": name, "topic_id": info.topic_id if info else None}


@handles(ApiKey.JOIN_GROUP, 0, 9)
@creating_topics_of(GROUPS)
async def join_group(ctx, request) -> dict:
    ctx.require(READ, GROUP, request.group_id)  # (membership, commits: READ on the group, as in Kafka)
    if request.group_id in ctx.shares.group_ids():
        return {"error_code": ErrorCode.inconsistent_group_protocol, "generation_id": -1, "protocol_name": None,
                "leader": "", "member_id": request.member_id, "members": []}
    session_ms = _ms(request.session_timeout)
    result = await ctx.groups.join(JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", None)) or session_ms,  # v0 has none
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        require_known_member_id=ctx.api_version >= 4,
    ))
    return {
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": meta} for m, i, meta in result.members],
    }


@handles(ApiKey.SYNC_GROUP, 0, 5)
@creating_topics_of(GROUPS)
async def sync_group(ctx, request) -> dict:
    ctx.require(READ, GROUP, request.group_id)
    result = await ctx.groups.sync(
        request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None), getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments})
    error = result.error
    if error is ErrorCode.none:  # (the generation's assignment is in the ISR before anyone acts on it)
        error = await ctx.groups.replicated(request.group_id)
    return {"error_code": error, "protocol_type": result.protocol_type, "protocol_name": result.protocol,
            "assignment": result.assignment if error is ErrorCode.none else b""}


@handles(ApiKey.HEARTBEAT, 0, 4)
@creating_topics_of(GROUPS)
async def heartbeat(ctx, request) -> dict:
    ctx.require(READ, GROUP, request.group_id)
    error = ctx.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                 getattr(request, "group_instance_id", None))
    return {"error_code": error}


@handles(ApiKey.LEAVE_GROUP, 0, 5)
@creating_topics_of(GROUPS)
async def leave_group(ctx, request) -> dict:
    ctx.require(READ, GROUP, request.group_id)
    if ctx.api_version < 3:
        identities = [(request.member_id, None)]
    else:
        identities = [(m.member_id, m.group_instance_id) for m in request.members]
    error, errors = ctx.groups.leave(request.group_id, identities)
    if ctx.api_version < 3 and error is ErrorCode.none:
        error = errors[0]
    return {"error_code": error,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": e}
                        for (m, i), e in zip(identities, errors)]}


@handles(ApiKey.OFFSET_COMMIT, 2, 10)
@creating_topics_of(GROUPS)
async def offset_commit(ctx, request) -> dict:
    commits, slots = [], []  # slots: (topic index, partition index, position in commits or an error)
    topics = []
    group_allowed = ctx.allowed(READ, GROUP, request.group_id)
    share_group = group_allowed and request.group_id in ctx.shares.group_ids()  # (Kafka: "not a consumer group")
    for topic in request.topics:
        name = _topic_name(ctx, topic)
        topics.append({"name": name or "", "topic_id": getattr(topic, "topic_id", None), "partitions": []})
        refused = (ErrorCode.group_authorization_failed if not group_allowed
                   else ErrorCode.group_id_not_found if share_group
                   else ErrorCode.unknown_topic_id if name is None
                   else None if ctx.allowed(READ, TOPIC, name) else ErrorCode.topic_authorization_failed)
        for p in topic.partitions:
            if refused is not None:
                slots.append((len(topics) - 1, p.partition_index, refused))
                continue
            slots.append((len(topics) - 1, p.partition_index, len(commits)))
            commits.append(OffsetCommit(name, p.partition_index, p.committed_offset,
                                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    errors = ctx.groups.commit_offsets(request.group_id, request.generation_id_or_member_epoch,
                                       request.member_id, getattr(request, "group_instance_id", None),
                                       commits) if group_allowed and not share_group else []
    if ErrorCode.none in errors and (unreplicated := await ctx.groups.replicated(request.group_id)):
        errors = [unreplicated if error is ErrorCode.none else error for error in errors]
    for topic_index, partition, slot in slots:
        error = slot if isinstance(slot, ErrorCode) else errors[slot]
        topics[topic_index]["partitions"].append({"partition_index": partition, "error_code": error})
    return {"topics": topics}


def _fetch_group(ctx, group_id: str, topics, require_stable: bool = False, member_id: str | None = None,
                 member_epoch: int = -1) -> dict:
    if not ctx.allowed(DESCRIBE, GROUP, group_id):
        return {"group_id": group_id, "error_code": ErrorCode.group_authorization_failed, "topics": []}
    if not ctx.groups.owns(group_id):
        return {"group_id": group_id, "error_code": ErrorCode.not_coordinator, "topics": []}
    if group_id in ctx.shares.group_ids():  # (its offsets are DescribeShareGroupOffsets')
        return {"group_id": group_id, "error_code": ErrorCode.group_id_not_found, "topics": []}
    if (error := ctx.groups.check_offset_fetch(group_id, member_id, member_epoch)) is not ErrorCode.none:
        return {"group_id": group_id, "error_code": error, "topics": []}  # (v9+: a KIP-848 member's epoch)
    wanted = None
    if topics is not None:
        wanted = []
        for topic in topics:
            name = _topic_name(ctx, topic)
            wanted += [(name, p) for p in topic.partition_indexes]
    hidden = {name for name in ctx.metadata.topics if not ctx.allowed(DESCRIBE, TOPIC, name)} \
        if ctx.authorizer is not None else set()
    found = ctx.groups.fetch_offsets(group_id, [tp for tp in wanted if tp[0] is not None and tp[0] not in hidden]
                                     if wanted is not None else None)
    found = {tp: value for tp, value in found.items() if tp[0] not in hidden}  # (all asked for: the visible ones)
    unstable = ctx.transactions.offsets.unstable(group_id) if require_stable else set()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), value in found.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": value.offset if value else -1,
            "committed_leader_epoch": value.leader_epoch if value else -1,
            "metadata": value.metadata if value else "",
            # KIP-447: a transaction about to change this offset has not ended yet; ask again
            "error_code": ErrorCode.unstable_offset_commit if (topic, partition) in unstable else ErrorCode.none,
        })
    for name, partition in wanted or []:
        if name is None or name in hidden:
            by_topic.setdefault(name or "", []).append({
                "partition_index": partition, "committed_offset": -1,
                "error_code": ErrorCode.unknown_topic_id if name is None else ErrorCode.topic_authorization_failed})
    return {"group_id": group_id, "error_code": ErrorCode.none,
            "topics": [{**_topic_ids(ctx, name), "partitions": parts} for name, parts in by_topic.items()]}


@handles(ApiKey.OFFSET_FETCH, 1, 10)
async def offset_fetch(ctx, request) -> dict:
    if ctx.api_version >= 8:
        return {"groups": [_fetch_group(ctx, g.group_id, g.topics, request.require_stable,
                                        getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
                           for g in request.groups]}
    return _fetch_group(ctx, request.group_id, request.topics, getattr(request, "require_stable", False))


@handles(ApiKey.OFFSET_DELETE, 0, 0)
@creating_topics_of(GROUPS)
async def offset_delete(ctx, request) -> dict:
    ctx.require(DELETE, GROUP, request.group_id)
    asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    wanted = [(topic, partition) for topic, partition in asked if ctx.allowed(READ, TOPIC, topic)]
    error, errors = ctx.groups.delete_offsets(request.group_id, wanted)
    if error is not ErrorCode.none:
        return {"error_code": error, "topics": []}
    deleted = dict(zip(wanted, errors))
    topics: dict[str, list[dict]] = {}
    for topic, partition in asked:
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": deleted.get(
            (topic, partition), ErrorCode.topic_authorization_failed)})
    return {"error_code": ErrorCode.none,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx, request) -> dict:
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    every = ctx.allowed(DESCRIBE, CLUSTER)  # (else the groups it may describe, as Kafka lists them)
    listed = [(g.group_id, g.protocol_type or "", g.state.value, "classic") for g in ctx.groups.listed()]
    listed += [(g.group_id, "consumer", g.state, "consumer") for g in ctx.groups.consumer_groups()]
    listed += [(group_id, "share", ctx.shares.state_name(group_id), "share") for group_id in sorted(ctx.shares.group_ids())]
    groups = [{"group_id": group_id, "protocol_type": protocol_type, "group_state": state, "group_type": group_type}
              for group_id, protocol_type, state, group_type in listed
              if (not states or state.lower() in states) and (not types or group_type in types)
              and (every or ctx.allowed(DESCRIBE, GROUP, group_id))]
    return {"error_code": ErrorCode.none, "groups": groups}


@handles(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx, request) -> dict:
    described = []
    for group_id in request.groups:
        if not ctx.allowed(DESCRIBE, GROUP, group_id):
            described.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed,
                              "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                              "authorized_operations": NO_OPERATIONS})
            continue
        if not ctx.groups.owns(group_id):
            described.append({"group_id": group_id, "error_code": ErrorCode.not_coordinator, "group_state": "",
                              "protocol_type": "", "protocol_data": "", "members": [],
                              "authorized_operations": NO_OPERATIONS})
            continue
        group = ctx.groups.group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            missing = ctx.api_version >= 6  # (a KIP-848 group, as in Kafka: ConsumerGroupDescribe describes it)
            why = ("is a consumer group (KIP-848): describe it with ConsumerGroupDescribe"
                   if ctx.groups.consumer_group(group_id) else "does not exist")
            described.append({"group_id": group_id, "group_state": GroupState.DEAD.value,
                              "error_code": ErrorCode.group_id_not_found if missing else ErrorCode.none,
                              "error_message": f"group {group_id!r} {why}" if missing else None,
                              "protocol_type": "", "protocol_data": "", "members": [],
                              "authorized_operations": NO_OPERATIONS})
            continue
        stable = group.is_(GroupState.STABLE)  # as in Kafka, metadata and assignments only when stable
        described.append({
            "error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state.value,
            "protocol_type": group.protocol_type or "", "protocol_data": (group.protocol or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(group.protocol) if stable else b"",
                         "member_assignment": m.assignment if stable else b""} for m in group.members.values()],
            "authorized_operations": ctx.authorized_operations((READ, DESCRIBE, DELETE), GROUP, group_id)
            if getattr(request, "include_authorized_operations", False) else NO_OPERATIONS,
        })
    return {"groups": described}


@handles(ApiKey.DELETE_GROUPS, 0, 2)
@creating_topics_of(GROUPS)
async def delete_groups(ctx, request) -> dict:
    return {"results": [{"group_id": g, "error_code": await _delete_group(ctx, g)} for g in request.groups_names]}


async def _delete_group(ctx, group_id: str) -> ErrorCode:
    if not ctx.allowed(DELETE, GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if group_id in ctx.shares.group_ids():
        return await ctx.shares.delete_group(group_id)
    return ctx.groups.delete_group(group_id)
