"""DeleteRecords: move partitions' log start offsets forward (Kafka's low watermark)."""

from __future__ import annotations

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, OffsetOutOfRange, PolicyViolation
from ..security.acls import Operation, ResourceType
from . import handles

HIGH_WATERMARK = -1


def _delete_before(partition, offset: int) -> int:
    if offset < HIGH_WATERMARK:
        raise OffsetOutOfRange(f"cannot delete records before offset {offset}: give an offset "
                               f"≥ 0, or -1 for the high watermark")
    if "delete" not in partition.log.config["cleanup.policy"]:
        raise PolicyViolation(f"{partition.topic}-{partition.index} is compacted (cleanup.policy=compact); "
                              f"records can only be deleted from topics with cleanup.policy delete")
    return partition.delete_records_before(offset)


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx, request) -> dict:
    replicas = ctx.replicas
    moved = False
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": ErrorCode.none}
            try:
                ctx.require(Operation.DELETE, ResourceType.TOPIC, topic.name)
                partition = replicas.leader(topic.name, p.partition_index)
                before = partition.log.log_start_offset
                result["low_watermark"] = _delete_before(partition, p.offset)
                moved |= result["low_watermark"] != before
            except BrokerError as exc:
                result["error_code"] = exc.code
            partitions.append(result)
        topics.append({"name": topic.name, "partitions": partitions})
    if moved:
        replicas.checkpoint_log_starts()  # before answering: a restart must not bring the records back
    return {"topics": topics}
