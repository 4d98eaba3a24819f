"""Produce: append each partition's record set; errors stay per partition. Internal topics are
written by their coordinators only, as in Kafka. Transactional batches are checked with their
transaction's coordinator first (KIP-890, `coordinator/txn_verification.py`); from v12 that check
adds the partition to the transaction (transactions v2)."""

import asyncio

from ..cluster.topics import INTERNAL_TOPICS
from ..coordinator.txn_verification import TRANSACTIONS_V2, for_produce
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import (BrokerError, InvalidRequiredAcks, InvalidTopic, TopicAuthorizationFailed,
                               TransactionalIdAuthorizationFailed)
from ..security.acls import Operation, ResourceType
from ..storage.batch import HEADER_SIZE, read_header
from . import handles


@handles(ApiKey.PRODUCE, 3, 12)
async def produce(ctx, request) -> dict | None:
    replicas = ctx.replicas
    waits = []  # acks=all: (result, partition, end offset) to wait for the ISR on
    txn_allowed = request.transactional_id is None or ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                                  request.transactional_id)
    results: list[tuple[str, list[tuple[dict, bytes]]]] = []  # per topic: (result, records) per partition
    for topic in request.topic_data:
        allowed = txn_allowed and ctx.allowed(Operation.WRITE, ResourceType.TOPIC, topic.name)
        partitions = []
        for data in topic.partition_data:
            result = {"index": data.index, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
            try:
                if request.acks not in (0, 1, -1):
                    raise InvalidRequiredAcks(f"acks must be 0, 1 or -1, got {request.acks}")
                if not allowed:
                    raise (TopicAuthorizationFailed if txn_allowed else TransactionalIdAuthorizationFailed)()
                if topic.name in INTERNAL_TOPICS:
                    raise InvalidTopic(f"cannot append to internal topic {topic.name}: only its coordinator writes "
                                       f"it (commit offsets with OffsetCommit or TxnOffsetCommit)")
            except BrokerError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            partitions.append((result, data.records or b""))
        results.append((topic.name, partitions))
    if request.transactional_id is not None:
        await _verify(ctx, request.transactional_id, results)
    # From here to the appends, no await: a check's answer holds only until then.
    for name, partitions in results:
        for result, records in partitions:
            if "error_code" in result:
                continue
            try:
                appended = replicas.append(name, result["index"], records, required_acks=request.acks)
                ctx.metrics.appended(name, appended.records, len(records))
                result.update(error_code=ErrorCode.none, base_offset=appended.base_offset,
                              log_append_time=appended.log_append_time_ms,
                              log_start_offset=appended.log_start_offset)
                if request.acks == -1 and (partition := replicas.get(name, result["index"])).high_watermark < \
                        appended.next_offset:
                    waits.append((result, partition, appended.next_offset))
            except BrokerError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
    if waits:
        timeout_s = request.timeout.total_seconds()
        await asyncio.gather(*(_replicated(result, partition, end, timeout_s) for result, partition, end in waits))
    if request.acks == 0:
        return None
    return {"responses": [{"name": name, "partition_responses": [result for result, _ in partitions]}
                          for name, partitions in results]}


async def _verify(ctx, transactional_id: str, results) -> None:
    """KIP-890: transactional batches land only in their producer's open transaction, which the
    coordinator confirms (Produce v12+: transactions v2, where it adds the partition itself)."""
    batches: dict[tuple[int, int], list[tuple[tuple[str, int], dict]]] = {}  # (producer, epoch) -> partitions
    for name, partitions in results:
        for result, records in partitions:
            header = read_header(records) if "error_code" not in result and len(records) >= HEADER_SIZE else None
            if header is not None and header.is_transactional:  # (the log answers the malformed and the rest)
                batches.setdefault((header.producer_id, header.producer_epoch), []).append(
                    ((name, result["index"]), result))
    version = TRANSACTIONS_V2 if ctx.api_version >= 12 else 1
    for (producer_id, epoch), wanted in batches.items():
        refused = await ctx.txn_verifier.check(transactional_id, producer_id, epoch, [tp for tp, _ in wanted],
                                               version)
        for tp, result in wanted:
            if tp in refused:
                code, why = refused[tp]
                result.update(error_code=for_produce(code), error_message=why)


async def _replicated(result: dict, partition, end_offset: int, timeout_s: float) -> None:
    """acks=all: the write is acknowledged once the ISR has it (at once when the ISR is the leader alone)."""
    try:
        await partition.wait_until_replicated(end_offset, timeout_s)
    except BrokerError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
