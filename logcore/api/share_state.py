"""The share coordinator's APIs (KIP-932, between brokers): a topic partition's leader reads
(ReadShareGroupState) and writes (WriteShareGroupState) its share-partitions' state at the broker that
coordinates their keys in `__share_group_state`; a group coordinator creates it
(InitializeShareGroupState), reads its start offset (ReadShareGroupStateSummary) and deletes it
(DeleteShareGroupState). logcore/coordinator/share_persister.py is the caller,
logcore/coordinator/share_state.py the store. Each partition answers its own error. Brokers only:
CLUSTER_ACTION on the cluster."""

from __future__ import annotations

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from ..protocol.share_state_records import SharePartitionKey
from ..security.acls import Operation, ResourceType
from ..coordinator.share_state import ADMIN, Snapshot
from . import handles
from .coordinator import SHARES, creating_topics_of


def _failed(exc: BrokerError) -> dict:
    return {"error_code": exc.code, "error_message": exc.message}


async def _each(ctx, request, answer) -> dict:
    ctx.require(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            try:
                out = await answer(SharePartitionKey(request.group_id, topic.topic_id, p.partition), p)
            except BrokerError as exc:
                out = _failed(exc)
            partitions.append({"partition": p.partition, "error_code": ErrorCode.none, **out})
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}


@handles(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
@creating_topics_of(SHARES)
async def read_share_group_state(ctx, request) -> dict:
    async def read(key, p) -> dict:
        got = ctx.shares.state.read(key, p.leader_epoch)
        return {"state_epoch": got.state_epoch, "start_offset": got.start_offset, "state_batches": [
            {"first_offset": f, "last_offset": l, "delivery_state": s, "delivery_count": c} for f, l, s, c in got.batches]}
    return await _each(ctx, request, read)


@handles(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 0)
@creating_topics_of(SHARES)
async def write_share_group_state(ctx, request) -> dict:
    async def write(key, p) -> dict:
        await ctx.shares.state.write(key, Snapshot(p.state_epoch, p.leader_epoch, p.start_offset, tuple(
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches)),
            from_elsewhere=True)
        return {}
    return await _each(ctx, request, write)


@handles(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
@creating_topics_of(SHARES)
async def delete_share_group_state(ctx, request) -> dict:
    async def delete(key, p) -> dict:
        await ctx.shares.state.write(key, None)
        return {}
    return await _each(ctx, request, delete)


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
@creating_topics_of(SHARES)
async def initialize_share_group_state(ctx, request) -> dict:
    async def initialize(key, p) -> dict:
        await ctx.shares.state.initialize(key, p.state_epoch, p.start_offset)
        return {}
    return await _each(ctx, request, initialize)


@handles(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 0)
async def read_share_group_state_summary(ctx, request) -> dict:
    async def summary(key, p) -> dict:
        got = ctx.shares.state.read(key, ADMIN)  # (a summary fences no leader, as Kafka's)
        return {"state_epoch": got.state_epoch, "leader_epoch": got.leader_epoch, "start_offset": got.start_offset}
    return await _each(ctx, request, summary)
