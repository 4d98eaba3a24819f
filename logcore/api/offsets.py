"""ListOffsets (earliest, latest, by timestamp, max timestamp) and OffsetForLeaderEpoch."""

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError
from . import handles

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


def _list_offset(replicas, topic: str, index: int, timestamp: int) -> dict:
    partition = replicas.get(topic, index)
    partition.check_online()
    log = partition.log
    if timestamp == LATEST:
        return {"timestamp": -1, "offset": partition.high_watermark, "leader_epoch": partition.leader_epoch}
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return {"timestamp": -1, "offset": log.log_start_offset, "leader_epoch": partition.leader_epoch}
    if timestamp == MAX_TIMESTAMP:
        offset, ts = log.max_timestamp()
        return {"timestamp": ts, "offset": offset, "leader_epoch": partition.leader_epoch}
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= partition.high_watermark:
        return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
    offset, ts = found
    return {"timestamp": ts, "offset": offset, "leader_epoch": partition.leader_epoch}


@handles(ApiKey.LIST_OFFSETS, 1, 8)
async def list_offsets(ctx, request) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = {"partition_index": p.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                result.update(_list_offset(ctx.broker.replicas, topic.name, p.partition_index, p.timestamp))
                result["error_code"] = ErrorCode.none
            except BrokerError as exc:
                result["error_code"] = exc.code
            partitions.append(result)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx, request) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            try:
                partition = ctx.broker.replicas.get(topic.topic, p.partition)
                partition.check_online()
                if p.current_leader_epoch > partition.leader_epoch:
                    result["error_code"] = ErrorCode.unknown_leader_epoch
                elif 0 <= p.current_leader_epoch < partition.leader_epoch:
                    result["error_code"] = ErrorCode.fenced_leader_epoch
                else:
                    epoch, end = partition.end_offset_for_epoch(p.leader_epoch)
                    result.update(error_code=ErrorCode.none, leader_epoch=epoch, end_offset=end)
            except BrokerError as exc:
                result["error_code"] = exc.code
            partitions.append(result)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"topics": topics}
