"""Transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
WriteTxnMarkers, and the operator APIs DescribeTransactions, ListTransactions and DescribeProducers.
The transaction coordinator (and, for markers, each partition's producer state) does the work;
these translate.
"""

from __future__ import annotations

import datetime

from ..coordinator.group_coordinator import OffsetCommit
from ..coordinator.offsets_codec import OFFSETS_TOPIC, partition_for
from ..coordinator.transaction_log import TxnState
from ..coordinator.transaction_markers import Marker
from ..coordinator.txn_verification import TRANSACTIONS_V2
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, InvalidRequest
from ..security.acls import Operation, ResourceType
from . import handles
from .coordinator import GROUPS, TRANSACTIONS, creating_topics_of

TXN_ID, TOPIC = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC
GROUP, CLUSTER = ResourceType.GROUP, ResourceType.CLUSTER

# PRODUCER_FENCED (KIP-588) reaches only versions that know it; older ones get INVALID_PRODUCER_EPOCH.
_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                 ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3}


def _code(ctx, api_key: ApiKey, exc: BrokerError | ErrorCode) -> ErrorCode:
    code = exc if isinstance(exc, ErrorCode) else exc.code
    if code == ErrorCode.producer_fenced and ctx.api_version < _FENCED_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return code


def _ms(value: datetime.timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else value


@handles(ApiKey.INIT_PRODUCER_ID, 0, 6)
async def init_producer_id(ctx, request) -> dict:
    try:
        if request.transactional_id is not None:
            ctx.require(Operation.WRITE, TXN_ID, request.transactional_id)
        elif not (ctx.allowed(Operation.IDEMPOTENT_WRITE, CLUSTER) or ctx.allowed_on_some(Operation.WRITE, TOPIC)):
            ctx.require(Operation.IDEMPOTENT_WRITE, CLUSTER)  # (KIP-679: WRITE on some topic is enough)
        if getattr(request, "enable2_pc", False) or getattr(request, "keep_prepared_txn", False):
            raise InvalidRequest("two-phase commit with an external coordinator (KIP-939) is not supported; "
                                 "leave transaction.two.phase.commit.enable unset in the producer")
        pid, epoch = await ctx.transactions.init_producer_id(
            request.transactional_id, _ms(request.transaction_timeout),
            getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
    except BrokerError as exc:
        return {"error_code": _code(ctx, ApiKey.INIT_PRODUCER_ID, exc), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": epoch}


async def _add_partitions(ctx, transactional_id: str, producer_id: int, epoch: int, topics,
                          verify_only: bool = False) -> list[dict]:
    """Per-topic results: unknown partitions fail alone and the rest are not attempted, as in Kafka."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    txn_allowed = ctx.allowed(Operation.WRITE, TXN_ID, transactional_id)
    for topic, partition in wanted:
        info = ctx.metadata.topics.get(topic)
        if not txn_allowed:
            errors[(topic, partition)] = ErrorCode.transactional_id_authorization_failed
        elif not ctx.allowed(Operation.WRITE, TOPIC, topic):
            errors[(topic, partition)] = ErrorCode.topic_authorization_failed
        elif info is None or not 0 <= partition < info.partitions:
            errors[(topic, partition)] = ErrorCode.unknown_topic_or_partition
    if errors:
        for tp in wanted:
            errors.setdefault(tp, ErrorCode.operation_not_attempted)
    elif verify_only:
        coordinator = ctx.transactions
        for tp in wanted:
            errors[tp] = (ErrorCode.not_coordinator if not coordinator.owns(transactional_id) else ErrorCode.none
                          if coordinator.verify(producer_id, epoch, tp) else ErrorCode.invalid_txn_state)
    else:
        try:  # (v5 from a partition's leader: a producer of transactions v2 writes there first)
            await ctx.transactions.add_partitions(transactional_id, producer_id, epoch, wanted,
                                                  TRANSACTIONS_V2 if ctx.api_version >= 5 else 0)
            code = ErrorCode.none
        except BrokerError as exc:
            code = _code(ctx, ApiKey.ADD_PARTITIONS_TO_TXN, exc)
        errors = {tp: code for tp in wanted}
    results: dict[str, list[dict]] = {}
    for (topic, partition) in wanted:
        results.setdefault(topic, []).append({"partition_index": partition,
                                              "partition_error_code": errors[(topic, partition)]})
    return [{"name": name, "results_by_partition": parts} for name, parts in results.items()]


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
@creating_topics_of(TRANSACTIONS)
async def add_partitions_to_txn(ctx, request) -> dict:
    if hasattr(request, "transactions"):  # v4+: brokers batching several transactions
        return {"error_code": ErrorCode.none, "results_by_transaction": [
            {"transactional_id": t.transactional_id,
             "topic_results": await _add_partitions(ctx, t.transactional_id, t.producer_id, t.producer_epoch,
                                                    t.topics, t.verify_only)}
            for t in request.transactions]}
    return {"results_by_topic_v3_and_below": await _add_partitions(
        ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch, request.v3_and_below_topics)}


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx, request) -> dict:
    try:
        ctx.require(Operation.WRITE, TXN_ID, request.transactional_id)
        ctx.require(Operation.READ, GROUP, request.group_id)
        await ctx.groups.ensure_topic()
        partition = partition_for(request.group_id, ctx.groups.topic.partitions)
        await ctx.transactions.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                              [(OFFSETS_TOPIC, partition)])
    except BrokerError as exc:
        return {"error_code": _code(ctx, ApiKey.ADD_OFFSETS_TO_TXN, exc)}
    return {"error_code": ErrorCode.none}


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
@creating_topics_of(GROUPS, TRANSACTIONS)
async def txn_offset_commit(ctx, request) -> dict:
    asked = [OffsetCommit(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                          p.committed_metadata) for t in request.topics for p in t.partitions]
    refused = (ErrorCode.transactional_id_authorization_failed
               if not ctx.allowed(Operation.WRITE, TXN_ID, request.transactional_id)
               else ErrorCode.group_authorization_failed if not ctx.allowed(Operation.READ, GROUP, request.group_id)
               else ErrorCode.group_id_not_found if request.group_id in ctx.shares.group_ids()  # (a share group)
               else None)
    denied = {c.topic for c in asked if refused is None and not ctx.allowed(Operation.READ, TOPIC, c.topic)}
    commits = [c for c in asked if refused is None and c.topic not in denied]
    errors = await _commit_offsets(ctx, request, commits) if commits else []
    done = dict(zip(((c.topic, c.partition) for c in commits), errors))
    errors = [done.get((c.topic, c.partition), refused or ErrorCode.topic_authorization_failed) for c in asked]
    topics: dict[str, list[dict]] = {}
    for commit, error in zip(asked, errors):
        topics.setdefault(commit.topic, []).append(
            {"partition_index": commit.partition, "error_code": _code(ctx, ApiKey.TXN_OFFSET_COMMIT, error)})
    return {"topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


async def _commit_offsets(ctx, request, commits: list[OffsetCommit]) -> list[ErrorCode]:
    """The offsets' partition of `__consumer_offsets` is checked with the transaction's coordinator
    first (KIP-890; from v5, transactions v2, the check adds it to the transaction)."""
    partition = (OFFSETS_TOPIC, partition_for(request.group_id, ctx.groups.topic.partitions))
    refused = await ctx.txn_verifier.check(request.transactional_id, request.producer_id, request.producer_epoch,
                                           [partition], TRANSACTIONS_V2 if ctx.api_version >= 5 else 1)
    if refused:
        return [refused[partition][0]] * len(commits)
    return await ctx.transactions.offsets.commit(
        request.group_id, request.producer_id, request.producer_epoch,
        getattr(request, "generation_id", -1), getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None), commits)


@handles(ApiKey.END_TXN, 0, 5)
@creating_topics_of(TRANSACTIONS)
async def end_txn(ctx, request) -> dict:
    """From v5 (transactions v2) the answer carries the producer id and epoch to go on with."""
    try:
        ctx.require(Operation.WRITE, TXN_ID, request.transactional_id)
        producer_id, epoch = await ctx.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
            TRANSACTIONS_V2 if ctx.api_version >= 5 else 0)
    except BrokerError as exc:
        return {"error_code": _code(ctx, ApiKey.END_TXN, exc)}
    return {"error_code": ErrorCode.none, "producer_id": producer_id, "producer_epoch": epoch}


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def write_txn_markers(ctx, request) -> dict:
    """Markers from a coordinator, or from `binlake transactions abort` for a hanging transaction;
    each answered once its partition's ISR has it. v2 says which transaction version the marker
    ends (2: its epoch must be newer than the producer's on the partition)."""
    markers = ctx.txn_markers
    allowed = ctx.allowed(Operation.CLUSTER_ACTION, CLUSTER)
    results = []
    for m in request.markers:
        topics = []
        for topic in m.topics:
            partitions = []
            for index in topic.partition_indexes:
                try:
                    if not allowed:
                        ctx.require(Operation.CLUSTER_ACTION, CLUSTER)
                    await markers.write_here(Marker(m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                                    m.transaction_result, getattr(m, "transaction_version", 0)),
                                             topic.name, index)
                    code = ErrorCode.none
                except BrokerError as exc:
                    code = exc.code
                partitions.append({"partition_index": index, "error_code": code})
            topics.append({"name": topic.name, "partitions": partitions})
        results.append({"producer_id": m.producer_id, "topics": topics})
    return {"markers": results}


# -- operators ---------------------------------------------------------------------------------


def _topics(partitions) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": p} for t, p in by_topic.items()]


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx, request) -> dict:
    states = []
    for txn_id in request.transactional_ids:
        try:
            ctx.require(Operation.DESCRIBE, TXN_ID, txn_id)
            meta = ctx.transactions.describe(txn_id)
        except BrokerError as exc:
            states.append({"error_code": exc.code, "transactional_id": txn_id, "transaction_state": "",
                           "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                           "producer_epoch": 0, "topics": []})  # Kafka's defaults in an error entry
            continue
        states.append({"error_code": ErrorCode.none, "transactional_id": txn_id,
                       "transaction_state": meta.state.kafka_name, "transaction_timeout": meta.timeout_ms,
                       "transaction_start_time": meta.start_ms, "producer_id": meta.producer_id,
                       "producer_epoch": meta.producer_epoch, "topics": _topics(
                           tp for tp in meta.partitions if ctx.allowed(Operation.DESCRIBE, TOPIC, tp[0]))})
    return {"transaction_states": states}


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx, request) -> dict:
    known = {s.kafka_name: s for s in TxnState}
    unknown = [name for name in request.state_filters if name not in known]
    listed = ctx.transactions.listed(
        states={known[n] for n in request.state_filters if n in known} or None,
        producer_ids=set(request.producer_id_filters) or None,
        min_duration_ms=getattr(request, "duration_filter", -1),
        pattern=getattr(request, "transactional_id_pattern", None))
    if unknown and len(unknown) == len(request.state_filters):
        listed = []  # only unknown states asked for: nothing can match
    return {"error_code": ErrorCode.none, "unknown_state_filters": unknown, "transaction_states": [
        {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
         "transaction_state": m.state.kafka_name} for m in listed
        if ctx.allowed(Operation.DESCRIBE, TXN_ID, m.transactional_id)]}


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx, request) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            result = {"partition_index": index, "error_code": ErrorCode.none, "active_producers": []}
            try:
                ctx.require(Operation.READ, TOPIC, topic.name)
                partition = ctx.replicas.leader(topic.name, index)
                result["active_producers"] = [
                    {"producer_id": e.producer_id, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                     "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                     "current_txn_start_offset": e.txn_first_offset}
                    for e in partition.log.producers.active_producers()]
            except BrokerError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            partitions.append(result)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
