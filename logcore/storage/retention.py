"""Retention for cleanup.policy=delete: which leading segments may go. Pure: reads segments, changes
nothing; PartitionLog deletes what this returns.

As Kafka's UnifiedLog: a segment goes when it is past retention.ms (its largest timestamp is older),
when the partition without it is still at least retention.bytes, or when the log start offset
(DeleteRecords) has passed it. Only a leading run of segments goes, and only segments wholly below
the high watermark; the active segment counts too (the log rolls first when every segment goes),
unless it is empty.
"""

from __future__ import annotations

from ..config import TopicConfig
from .segment import Segment


def deletable_segments(segments: list[Segment], config: TopicConfig, now_ms: int, log_start_offset: int,
                       log_end_offset: int, high_watermark: int) -> tuple[int, str]:
    """(how many leading segments may be deleted, why — for the log line)."""
    retention_ms = config["retention.ms"]
    retention_bytes = config["retention.bytes"]
    use_policy = "delete" in config["cleanup.policy"]
    excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else -1
    reasons: set[str] = set()
    count = 0
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        upper = log_end_offset if last else segments[i + 1].base_offset
        if upper > high_watermark or (last and segment.size == 0):
            break
        if upper <= log_start_offset:
            reasons.add("log start offset")
        elif use_policy and retention_ms >= 0 and now_ms - segment.largest_timestamp() > retention_ms:
            reasons.add(f"retention.ms={retention_ms}")
        elif use_policy and excess >= segment.size:
            reasons.add(f"retention.bytes={retention_bytes}")
        else:
            break
        excess -= segment.size
        count += 1
    return count, ", ".join(sorted(reasons))
