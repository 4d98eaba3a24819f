"""ListOffsets (earliest, latest, by timestamp, max timestamp) and OffsetForLeaderEpoch."""

from ..protocol.codec import ApiKey, ErrorCode
from ..protocol.errors import BrokerError, FencedLeaderEpoch, UnknownLeaderEpoch, UnsupportedVersion
from ..security.acls import Operation, ResourceType
from . import handles

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
# The first ListOffsets version that may carry each special timestamp (Kafka refuses it below).
_SINCE_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}


def check_leader_epoch(partition, current_leader_epoch: int) -> None:
    """A client's idea of the leader epoch (-1: none) must match the leader's (KIP-320)."""
    if current_leader_epoch < 0 or current_leader_epoch == partition.leader_epoch:
        return
    if current_leader_epoch < partition.leader_epoch:
        raise FencedLeaderEpoch(f"leader epoch {current_leader_epoch} of {partition.topic}-{partition.index} "
                                f"is older than the current {partition.leader_epoch}; refresh metadata")
    raise UnknownLeaderEpoch(f"leader epoch {current_leader_epoch} of {partition.topic}-{partition.index} "
                             f"is newer than this broker's {partition.leader_epoch}; retry after metadata catches up")


def _list_offset(replicas, topic: str, index: int, timestamp: int, current_leader_epoch: int,
                 read_committed: bool = False) -> dict:
    partition = replicas.leader(topic, index)
    check_leader_epoch(partition, current_leader_epoch)
    log = partition.log
    if timestamp == LATEST:  # read_committed consumers end at the last stable offset
        end = partition.last_stable_offset if read_committed else partition.high_watermark
        return {"timestamp": -1, "offset": end, "leader_epoch": partition.leader_epoch}
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return {"timestamp": -1, "offset": log.log_start_offset, "leader_epoch": partition.leader_epoch}
    if timestamp == MAX_TIMESTAMP:
        offset, ts = log.max_timestamp()
        return {"timestamp": ts, "offset": offset, "leader_epoch": partition.leader_epoch}
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return {"timestamp": -1, "offset": -1, "leader_epoch": -1}  # no tiered storage: nothing uploaded
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= partition.high_watermark:
        return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
    offset, ts = found
    return {"timestamp": ts, "offset": offset, "leader_epoch": partition.leader_epoch}


@handles(ApiKey.LIST_OFFSETS, 1, 11)
async def list_offsets(ctx, request) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = {"partition_index": p.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                ctx.require(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
                if ctx.api_version < _SINCE_VERSION.get(p.timestamp, 0):
                    raise UnsupportedVersion(f"timestamp {p.timestamp} needs ListOffsets "
                                             f"v{_SINCE_VERSION[p.timestamp]} or later")
                result.update(_list_offset(ctx.replicas, topic.name, p.partition_index, p.timestamp,
                                           getattr(p, "current_leader_epoch", -1),
                                           getattr(request, "isolation_level", 0) == 1))
                result["error_code"] = ErrorCode.none
            except BrokerError as exc:
                result["error_code"] = exc.code
            partitions.append(result)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx, request) -> dict:
    if getattr(request, "replica_id", -1) >= 0:  # (a follower truncating its log)
        ctx.require(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            try:
                ctx.require(Operation.DESCRIBE, ResourceType.TOPIC, topic.topic)
                partition = ctx.replicas.leader(topic.topic, p.partition)
                check_leader_epoch(partition, p.current_leader_epoch)
                epoch, end = partition.end_offset_for_epoch(p.leader_epoch)
                result.update(error_code=ErrorCode.none, leader_epoch=epoch, end_offset=end)
            except BrokerError as exc:
                result["error_code"] = exc.code
            partitions.append(result)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"topics": topics}
