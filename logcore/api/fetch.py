"""Fetch: record bytes straight from segment files, long-polling until min_bytes or max_wait.

Which partitions to read comes from the request, or from the client's incremental fetch session
(KIP-227, see `logcore.protocol.fetch_session`). Topics are named by name up to v12 and by topic
id from v13. Limits follow KIP-74: `max_bytes` for the response and `partition_max_bytes` per
partition, except that the first batch of the first partition with data is returned whole.
A partition error answers at once, as Kafka does, instead of waiting out max_wait.
"""

import itertools
import time
import uuid

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, TopicAuthorizationFailed, UnknownTopicId
from ..protocol.fetch_session import FINAL_EPOCH, FetchPartition
from ..replication.manager import CONSUMER
from ..security.acls import Operation, ResourceType
from . import handles
from .offsets import check_leader_epoch

NO_TOPIC_ID = uuid.UUID(int=0)
READ_COMMITTED = 1  # isolation_level: stop at the last stable offset, list aborted transactions


@handles(ApiKey.FETCH, 4, 17)
async def fetch(ctx, request) -> dict:
    context = ctx.fetch_sessions.context(getattr(request, "session_id", 0),
                                         getattr(request, "session_epoch", FINAL_EPOCH),
                                         _requested(request), _forgotten(request))
    names = {key: _topic_name(ctx, key) for key in {p.topic for p in context.partitions}}
    replica_id = getattr(request, "replica_id", CONSUMER)  # a follower's fetch (v15+ moved it: not sent there)
    if replica_id >= 0:
        ctx.require(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    denied = {name for name in names.values() if name and not ctx.allowed(Operation.READ, ResourceType.TOPIC, name)}
    wanted = [(names[p.topic], p.partition) for p in context.partitions
              if names[p.topic] and names[p.topic] not in denied]
    deadline = time.monotonic() + request.max_wait.total_seconds()
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_bytes = min(request.max_bytes, ctx.config.get("fetch.max.bytes"))  # KIP-541
    while True:
        results, total, failed = _read_all(ctx.replicas, context.partitions, names, denied, max_bytes,
                                           read_committed, replica_id)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or failed or remaining <= 0 or not wanted:
            break
        await ctx.replicas.wait_for_data(wanted, remaining)
    metrics = ctx.metrics
    for (key, _), result in results.items():
        if result["records"]:
            metrics.sent(names[key], len(result["records"]), to_follower=replica_id >= 0)
    chosen = context.respond(results)
    responses = []
    for key, group in itertools.groupby(chosen, key=lambda item: item[0].topic):
        responses.append({"topic": names[key] or "", "topic_id": _topic_id(ctx, key),
                          "partitions": [result for _, result in group]})
    return {"error_code": ErrorCode.none, "session_id": context.session_id, "responses": responses}


def _requested(request) -> list[FetchPartition]:
    return [FetchPartition(_topic_key(t), p.partition, p.fetch_offset, p.partition_max_bytes,
                           getattr(p, "current_leader_epoch", -1))
            for t in request.topics for p in t.partitions]


def _forgotten(request) -> list[tuple]:
    return [(_topic_key(t), index) for t in getattr(request, "forgotten_topics_data", ()) for index in t.partitions]


def _topic_key(topic):
    """How this request version names a topic: by id from v13, by name before."""
    return topic.topic_id if hasattr(topic, "topic_id") else topic.topic


def _topic_name(ctx, key) -> str | None:
    if isinstance(key, uuid.UUID):
        info = ctx.metadata.by_id(key)
        return info.name if info else None
    return key


def _topic_id(ctx, key) -> uuid.UUID:
    if isinstance(key, uuid.UUID):
        return key
    info = ctx.metadata.topics.get(key)
    return info.topic_id if info else NO_TOPIC_ID


def _read_all(replicas, partitions: list[FetchPartition], names: dict, denied: set[str], max_bytes: int,
              read_committed: bool, replica_id: int) -> tuple[dict, int, bool]:
    """({(topic key, partition): result}, bytes read, whether any partition failed)."""
    budget = max_bytes
    total = 0
    failed = False
    results = {}
    for p in partitions:
        result = {"partition_index": p.partition, "high_watermark": -1, "last_stable_offset": -1,
                  "log_start_offset": -1, "aborted_transactions": None, "records": b""}
        try:
            name = names[p.topic]
            if name is None:
                raise UnknownTopicId(f"no topic has id {p.topic}; refresh metadata")
            if name in denied:
                raise TopicAuthorizationFailed()
            check_leader_epoch(replicas.get(name, p.partition), p.current_leader_epoch)
            got = replicas.read(name, p.partition, p.fetch_offset, max(0, min(p.max_bytes, budget)),
                                min_one_batch=total == 0, read_committed=read_committed, replica_id=replica_id)
            result.update(error_code=ErrorCode.none, high_watermark=got.high_watermark,
                          last_stable_offset=got.last_stable_offset, log_start_offset=got.log_start_offset,
                          records=got.records or b"")
            if read_committed:
                result["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                                  for a in got.aborted or ()]
            budget -= got.size
            total += got.size
        except BrokerError as exc:
            result["error_code"] = exc.code
            failed = True
        results[p.key] = result
    return results, total, failed
