"""ShareFetch and ShareAcknowledge (KIP-932): a share group member acquires records under a lock and
acknowledges them (ACCEPT, RELEASE, REJECT), in a share session (logcore/coordinator/share_sessions.py).

One ShareFetch: the session is checked and moved on, its piggybacked acknowledgements applied (each
partition's outcome is its acknowledge_error_code), then records are acquired from the session's
partitions, long-polling up to max_wait until some are (new data, or records released or unlocked).
The records go out as the log's batches; `acquired_records` says which offsets of them the member
holds, and with which delivery count. Epoch -1 closes the session and releases the member's locks.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, InvalidShareSessionEpoch, TopicAuthorizationFailed, UnknownTopicId
from ..protocol.share_state_records import SharePartitionKey
from ..security.acls import Operation, ResourceType
from . import handles
from .coordinator import SHARES, creating_topics_of

CLOSE_EPOCH, OPEN_EPOCH = -1, 0
# A member that still holds records here waits at most this long for more: what would free the window
# is often its own acknowledgement, which librdkafka sends with its next ShareFetch, not meanwhile.
HOLDING_WAIT_S = 0.05


def _name(ctx, topic_id: uuid.UUID) -> str:
    info = ctx.metadata.by_id(topic_id)
    if info is None:
        raise UnknownTopicId(f"no topic has id {topic_id}; refresh metadata")
    if not ctx.allowed(Operation.READ, ResourceType.TOPIC, info.name):
        raise TopicAuthorizationFailed(f"{ctx.principal} may not READ topic {info.name!r}")
    return info.name


def _leader(ctx, name: str | None, index: int) -> dict:
    """The partition's leader and its epoch as this broker knows them (unknown: -1), so that a
    member told NOT_LEADER_OR_FOLLOWER finds the new leader."""
    view = ctx.cluster.partition(name, index) if name is not None else None
    if view is None or view.leader < 0:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": view.leader, "leader_epoch": view.leader_epoch}


def _acknowledge(ctx, group_id: str, member_id: str, topics) -> dict[tuple[uuid.UUID, int], BrokerError | None]:
    """Each partition's acknowledgements applied (not yet written: `_written`): (topic id,
    partition) → its error, or None."""
    outcome = {}
    for topic in topics:
        for p in topic.partitions:
            if not p.acknowledgement_batches:
                continue
            try:
                _name(ctx, topic.topic_id)
                ctx.shares.acknowledge(group_id, member_id, topic.topic_id, p.partition_index,
                                       [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                        for b in p.acknowledgement_batches])
                outcome[(topic.topic_id, p.partition_index)] = None
            except BrokerError as exc:
                outcome[(topic.topic_id, p.partition_index)] = exc
    return outcome


async def _written(ctx, group_id: str, partitions) -> dict[tuple[uuid.UUID, int], BrokerError]:
    """Write the share-partitions these (topic id, partition)s changed; those that could not be,
    with the error a share consumer retries on (`_retried`)."""
    failed = await ctx.shares.flush([SharePartitionKey(group_id, *tp) for tp in partitions])
    return {(key.topic_id, key.partition): _retried(exc) for key, exc in failed.items()}


# The partition errors share consumers (Kafka's, librdkafka's) act on themselves (refresh metadata,
# fetch again, or report a lost authorization); any other reaches the application as a failure.
_CLIENT_HANDLED = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.kafka_storage_error,
                   ErrorCode.offset_not_available, ErrorCode.replica_not_available, ErrorCode.unknown_topic_or_partition,
                   ErrorCode.unknown_topic_id, ErrorCode.inconsistent_topic_id, ErrorCode.topic_authorization_failed,
                   ErrorCode.unknown_leader_epoch}


def _retried(exc: BrokerError) -> BrokerError:
    """A share-partition this leader could not read or write is answered with an error the member
    retries on: FENCED_LEADER_EPOCH when its state moved on without this leader (a newer leader, an
    admin reset: it is read again next time), KAFKA_STORAGE_ERROR when the share coordinator could
    not take it now (it moves, or its replicas lag)."""
    if exc.code in _CLIENT_HANDLED:
        return exc
    if exc.code == ErrorCode.fenced_state_epoch:
        return BrokerError(exc.message, ErrorCode.fenced_leader_epoch)
    return BrokerError(f"the share-partition's state could not be kept in __share_group_state: {exc.message}",
                       ErrorCode.kafka_storage_error)


def _failed(exc: BrokerError, **extra) -> dict:
    return {"error_code": exc.code, "error_message": exc.message, "responses": [], "node_endpoints": [], **extra}


def _by_topic(partitions: dict[tuple[uuid.UUID, int], dict]) -> list[dict]:
    topics: dict[uuid.UUID, list[dict]] = {}
    for (topic_id, _), data in partitions.items():
        topics.setdefault(topic_id, []).append(data)
    return [{"topic_id": topic_id, "partitions": data} for topic_id, data in topics.items()]


@handles(ApiKey.SHARE_FETCH, 1, 1)
@creating_topics_of(SHARES)
async def share_fetch(ctx, request) -> dict:
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    ctx.require(Operation.READ, ResourceType.GROUP, group_id)
    lock_ms = ctx.shares.group_config(group_id)["share.record.lock.duration.ms"]
    acknowledging = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    try:
        if epoch != CLOSE_EPOCH:
            ctx.shares.check_member(group_id, member_id)
        if epoch == OPEN_EPOCH:
            ctx.shares.opening_session(group_id)
        session = ctx.shares.sessions.update(
            group_id, member_id, epoch, [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions],
            [(t.topic_id, i) for t in request.forgotten_topics_data for i in t.partitions], acknowledging)
    except BrokerError as exc:
        return _failed(exc, acquisition_lock_timeout=lock_ms)
    acks = _acknowledge(ctx, group_id, member_id, request.topics)
    answers: dict[tuple[uuid.UUID, int], dict] = {}

    def answer(tp: tuple[uuid.UUID, int], name: str | None) -> dict:
        if tp not in answers:
            error = acks.get(tp)
            answers[tp] = {"partition_index": tp[1], "error_code": ErrorCode.none, "acknowledge_error_code":
                           ErrorCode.none if error is None else error.code,
                           "acknowledge_error_message": None if error is None else error.message,
                           "current_leader": _leader(ctx, name, tp[1]), "records": b"", "acquired_records": []}
        return answers[tp]

    if session is None:  # closed: the member's locks go
        ctx.shares.release(group_id, member_id)
        acks.update(await _written(ctx, group_id, [tp for tp, error in acks.items() if error is None]))
        for tp in acks:
            answer(tp, None)
        return {"error_code": ErrorCode.none, "acquisition_lock_timeout": lock_ms, "responses": _by_topic(answers),
                "node_endpoints": []}
    deadline = time.monotonic() + request.max_wait.total_seconds()
    order = session.fetch_order()
    touched = {tp for tp, error in acks.items() if error is None}
    while True:
        left, budget, waiting = request.max_records, request.max_bytes, []
        for tp in order:
            if left <= 0 or budget <= 0:
                break
            name = None
            try:
                name = _name(ctx, tp[0])
                got = await ctx.shares.acquire(group_id, member_id, name, tp[0], tp[1], left, budget)
            except BrokerError as exc:
                exc = _retried(exc)
                answer(tp, name).update(error_code=exc.code, error_message=exc.message)
                continue
            waiting.append((name, tp[1]))
            touched.add(tp)
            if got.acquired:
                answer(tp, name).update(records=got.records, acquired_records=[
                    {"first_offset": a.first_offset, "last_offset": a.last_offset, "delivery_count": a.delivery_count}
                    for a in got.acquired])
                left -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
                budget -= len(got.records)
        remaining = deadline - time.monotonic()
        if left < request.max_records or answers.keys() - acks.keys() or remaining <= 0 or not waiting:
            break
        if ctx.shares.holds_locks(group_id, member_id, order):  # (see HOLDING_WAIT_S)
            remaining = min(remaining, HOLDING_WAIT_S)
        await _wait(ctx, waiting, remaining)
    for tp, exc in (await _written(ctx, group_id, touched)).items():  # (what it acquired is not handed out)
        answer(tp, None).update(error_code=exc.code, error_message=exc.message, records=b"", acquired_records=[])
        if tp in acks:
            acks[tp] = exc
            answers[tp].update(acknowledge_error_code=exc.code, acknowledge_error_message=exc.message)
    for tp in acks:
        answer(tp, None)
    if epoch == OPEN_EPOCH:  # a full response names every partition of the session
        for tp in session.partitions:
            answer(tp, None)
    return {"error_code": ErrorCode.none, "acquisition_lock_timeout": lock_ms, "responses": _by_topic(answers),
            "node_endpoints": []}


async def _wait(ctx, partitions: list[tuple[str, int]], timeout_s: float) -> None:
    """Until new data on `partitions`, records released anywhere, or the timeout."""
    tasks = [asyncio.ensure_future(ctx.replicas.wait_for_data(partitions, timeout_s)),
             asyncio.ensure_future(ctx.shares.wait_for_available(timeout_s))]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 1)
@creating_topics_of(SHARES)
async def share_acknowledge(ctx, request) -> dict:
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    ctx.require(Operation.READ, ResourceType.GROUP, group_id)
    try:
        if epoch == OPEN_EPOCH:
            raise InvalidShareSessionEpoch("ShareAcknowledge cannot open a share session (epoch 0)")
        if epoch != CLOSE_EPOCH:
            ctx.shares.check_member(group_id, member_id)
        session = ctx.shares.sessions.update(group_id, member_id, epoch, acknowledging=True)
    except BrokerError as exc:
        return _failed(exc)
    acks = _acknowledge(ctx, group_id, member_id, request.topics)
    if session is None:
        ctx.shares.release(group_id, member_id)
    acks.update(await _written(ctx, group_id, [tp for tp, error in acks.items() if error is None]))
    partitions = {tp: {"partition_index": tp[1], "error_code": ErrorCode.none if error is None else error.code,
                       "error_message": None if error is None else error.message,
                       "current_leader": {"leader_id": ctx.broker_id, "leader_epoch": -1}}
                  for tp, error in acks.items()}
    return {"error_code": ErrorCode.none, "responses": _by_topic(partitions), "node_endpoints": []}
