"""Produce: append each partition's record set; errors stay per partition. Internal topics are
written by their coordinators only, as in Kafka."""

import asyncio

from ..cluster.topics import INTERNAL_TOPICS
from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import (BrokerError, InvalidRequiredAcks, InvalidTopic, TopicAuthorizationFailed,
                               TransactionalIdAuthorizationFailed)
from ..security.acls import Operation, ResourceType
from . import handles


@handles(ApiKey.PRODUCE, 3, 11)
async def produce(ctx, request) -> dict | None:
    replicas = ctx.replicas
    responses = []
    waits = []  # acks=all: (result, partition, end offset) to wait for the ISR on
    txn_allowed = request.transactional_id is None or ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                                  request.transactional_id)
    for topic in request.topic_data:
        partitions = []
        allowed = txn_allowed and ctx.allowed(Operation.WRITE, ResourceType.TOPIC, topic.name)
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
                if request.transactional_id is not None:  # KIP-890: only into an open transaction
                    ctx.transactions.check_produce(request.transactional_id, (topic.name, data.index),
                                                   data.records or b"")
                appended = replicas.append(topic.name, data.index, data.records or b"", required_acks=request.acks)
                ctx.metrics.appended(topic.name, appended.records, len(data.records))
                result.update(error_code=ErrorCode.none, base_offset=appended.base_offset,
                              log_append_time=appended.log_append_time_ms,
                              log_start_offset=appended.log_start_offset)
                if request.acks == -1 and (partition := replicas.get(topic.name, data.index)).high_watermark < \
                        appended.next_offset:
                    waits.append((result, partition, appended.next_offset))
            except BrokerError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            partitions.append(result)
        responses.append({"name": topic.name, "partition_responses": partitions})
    if waits:
        timeout_s = request.timeout.total_seconds()
        await asyncio.gather(*(_replicated(result, partition, end, timeout_s) for result, partition, end in waits))
    if request.acks == 0:
        return None
    return {"responses": responses}


async def _replicated(result: dict, partition, end_offset: int, timeout_s: float) -> None:
    """acks=all: the write is acknowledged once the ISR has it (at once when the ISR is the leader alone)."""
    try:
        await partition.wait_until_replicated(end_offset, timeout_s)
    except BrokerError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
