"""PartitionLog: the ordered segments of one partition, with log start offset and log end offset.

Owned by its Partition (replication layer), which decides the high watermark; event loop only,
no `await` inside any method, so validate → write → update happens atomically for other tasks.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import shutil
import time
from dataclasses import dataclass

from ..config import TopicConfig
from ..protocol.codec import FileRegion
from ..protocol.errors import OffsetOutOfRange, StorageError
from .batch import BatchHeader, assign_offsets, validate_produce
from .segment import Segment

log = logging.getLogger(__name__)

DELETE_CLOSE_DELAY_S = 60  # keep deleted segments' descriptors open for in-flight fetches


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    next_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: TopicConfig) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[Segment] = []
        self.log_start_offset = 0
        self.leader_epoch = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self, log_start_offset: int, recover: bool) -> None:
        """Load segments; with `recover`, validate the tail segments (after an unclean shutdown)."""
        os.makedirs(self.directory, exist_ok=True)
        bases = sorted(int(name[:-4]) for name in os.listdir(self.directory)
                       if name.endswith(".log") and name[:-4].isdigit())
        interval = self.config["index.interval.bytes"]
        for base in bases:
            self.segments.append(Segment(self.directory, base, interval))
        for segment in self.segments:
            if recover and segment is self.segments[-1]:
                segment.recover()
            else:
                segment.load()
        if not self.segments:
            self.segments.append(Segment(self.directory, max(log_start_offset, 0), interval))
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        for segment in self.segments:
            segment.delete()
            _close_later(segment)
        self.segments = []
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- appends -------------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    def validate(self, records: bytes) -> list[BatchHeader]:
        return validate_produce(records, self.config["max.message.bytes"])

    def append(self, records: bytes, headers: list[BatchHeader]) -> AppendResult:
        """Assign offsets to already validated batches and write them. No await inside."""
        size = sum(h.size for h in headers)
        self._maybe_roll(size)
        now_ms = int(time.time() * 1000)
        append_time = now_ms if self.config["message.timestamp.type"] == "LogAppendTime" else None
        buf = bytearray(records)
        base = self.log_end_offset
        assign_offsets(buf, headers, base, self.leader_epoch, append_time)
        patched = [h._replace(base_offset=o, leader_epoch=self.leader_epoch,
                              max_timestamp=append_time if append_time is not None else h.max_timestamp)
                   for h, o in zip(headers, _base_offsets(headers, base))]
        try:
            self.active.append(buf, patched)
        except OSError as exc:
            raise StorageError(f"cannot write {self.active.path}: {exc.strerror or exc}") from exc
        if self.active.unflushed >= self.config["flush.messages"]:
            self.active.flush()
        return AppendResult(base, self.log_end_offset, append_time if append_time is not None else -1,
                            self.log_start_offset, sum(h.record_count for h in headers))

    def _maybe_roll(self, incoming: int) -> None:
        active = self.active
        if active.size == 0:
            return
        age_ms = time.time() * 1000 - active.created_ms
        if active.size + incoming > self.config["segment.bytes"] or age_ms > self.config["segment.ms"]:
            self.roll()

    def roll(self) -> Segment:
        self.active.flush()
        segment = Segment(self.directory, self.log_end_offset, self.config["index.interval.bytes"])
        self.segments.append(segment)
        return segment

    def flush(self) -> None:
        for segment in self.segments[-2:]:
            segment.flush()

    # -- reads ---------------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> int:
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        return max(i, 0)

    def read(self, offset: int, max_bytes: int, upper_offset: int, min_one_batch: bool) -> FileRegion | None:
        """Bytes of the batches from the one holding `offset` up to `upper_offset` (exclusive), cut
        at `max_bytes` (but the first batch whole when `min_one_batch`). None when nothing is there."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside {self.topic}-{self.partition}'s range "
                f"[{self.log_start_offset}, {self.log_end_offset}]"
            )
        if offset >= upper_offset:
            return None
        i = self._segment_for(offset)
        while i < len(self.segments):
            segment = self.segments[i]
            found = segment.find_batch(offset)
            if found is not None:
                break
            i += 1  # offset was removed by compaction or sits past this segment's end
        else:
            return None
        position, header = found
        if header.base_offset >= upper_offset:
            return None
        end = self._position_of(segment, upper_offset)
        length = end - position
        if length > max_bytes:
            length = max(max_bytes, header.size) if min_one_batch else max_bytes
        return FileRegion(segment.fd, position, length) if length > 0 else None

    def _position_of(self, segment: Segment, offset: int) -> int:
        if offset >= segment.next_offset:
            return segment.size
        found = segment.find_batch(offset)
        return found[0] if found else segment.size

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch whose max timestamp is ≥ `timestamp`. Like Kafka,
        the batch's base offset stands for the records inside (clients skip earlier ones)."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            found = segment.find_timestamp(timestamp)
            if found:
                _, header = found
                return max(header.base_offset, self.log_start_offset), header.max_timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the batch holding the largest timestamp (ListOffsets -3)."""
        best = (-1, -1)
        for segment in self.segments:
            if segment.max_timestamp > best[1]:
                found = segment.find_timestamp(segment.max_timestamp)
                if found:
                    best = (found[1].last_offset, segment.max_timestamp)
        return best

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- deletion ------------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to `offset` (DeleteRecords) and drop whole segments below it."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(f"cannot delete records before {offset}: log end offset is {self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._drop_segments(lambda s, nxt: nxt is not None and nxt.base_offset <= offset)
        return self.log_start_offset

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole segments past retention.ms / retention.bytes; returns how many went.
        The active segment is rolled first if it alone is past retention, as Kafka does."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        retention_ms = self.config["retention.ms"]
        retention_bytes = self.config["retention.bytes"]
        if "delete" not in self.config["cleanup.policy"]:
            return 0
        deleted = 0
        if retention_ms >= 0:
            expired = lambda s, nxt: s.size > 0 and now_ms - s.max_timestamp > retention_ms  # noqa: E731
            if expired(self.active, None) and all(expired(s, None) for s in self.segments):
                self.roll()
            deleted += self._drop_segments(lambda s, nxt: nxt is not None and expired(s, nxt))
        if retention_bytes >= 0:
            excess = self.size_bytes() - retention_bytes

            def too_big(s: Segment, nxt: Segment | None) -> bool:
                nonlocal excess
                if nxt is None or excess < s.size:
                    return False
                excess -= s.size
                return True

            deleted += self._drop_segments(too_big)
        return deleted

    def _drop_segments(self, predicate) -> int:
        """Delete leading segments while predicate(segment, next_segment) holds; never the active one."""
        dropped = 0
        while len(self.segments) > 1 and predicate(self.segments[0], self.segments[1]):
            segment = self.segments.pop(0)
            segment.delete()
            _close_later(segment)
            dropped += 1
        if dropped:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            log.info("%s-%d: deleted %d segment(s); log start offset now %d",
                     self.topic, self.partition, dropped, self.log_start_offset)
        return dropped

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after `offset` (replication truncation, recovery)."""
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            segment = self.segments.pop()
            segment.delete()
            _close_later(segment)
        self.active.truncate_to(offset)


def _base_offsets(headers: list[BatchHeader], first: int):
    offset = first
    for header in headers:
        yield offset
        offset += header.last_offset_delta + 1


def _close_later(segment: Segment) -> None:
    try:
        asyncio.get_running_loop().call_later(DELETE_CLOSE_DELAY_S, os.close, segment.fd)
    except RuntimeError:  # no loop: nothing can be sending from it
        os.close(segment.fd)
