"""Compacting one partition: keep the latest record of every key, as Kafka's log cleaner does.

This is the work a cleaner process does (storage/log_cleaner.py schedules it, PartitionLog swaps
the result in); it reads sealed segments and writes new files beside them, and changes nothing the
broker serves. Two passes:

1. The offset map: every key of the *dirty* section (from the first dirty offset, where the last
   clean ended, to the first uncleanable offset) with the offset of its latest record. It holds at
   most `map_bytes`; when full, the clean stops at the batch where it filled and the next clean
   goes on from there.
2. The filter: every segment from the log start up to where the map ends, in groups that fit one
   segment, is copied to `<base>.log.cleaned` (indexes too), keeping a record unless
   - a later record of its key is in the map, or it has no key;
   - it belongs to an aborted transaction;
   - it is a tombstone (null value) whose batch's delete horizon has passed. A tombstone kept for
     the first time stamps its batch with a horizon of now + delete.retention.ms (KIP-534), so it
     survives that long after the cleaner reached it.
   A transaction marker stays while any batch of its transaction stays, then until its own delete
   horizon. The last batch of a producer the partition still tracks stays as an empty batch, so its
   sequence numbers survive a rebuild of the producer state. Offsets never change: a rewritten
   batch keeps its base offset and last offset delta. A batch whose records all stay is copied
   byte for byte; one that changes is written again with its own codec.

Records are read with aiokafka's compiled reader: this is the one loop in logcore that looks at
every record, and the pure-Python decoder is ten times slower.
"""

from __future__ import annotations

import bisect
import mmap
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .batch import (COMPRESSION_MASK, CONTROL, CRC_START, DELETE_HORIZON, HEADER_SIZE, LOG_OVERHEAD,
                    TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, BatchHeader, read_header)
from .records import assemble_batch, build_batch, decompress
from .segment import Segment, segment_name
from .swap import CLEANED, remove_cleaned
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from aiokafka.record.default_records import DefaultRecordBatch

INT32_MAX = 2**31 - 1
MAP_ENTRY_OVERHEAD = 104  # bytes a dict entry costs beyond its key: bytes object, int, slot
WRITE_BUFFER = 1 << 20


@dataclass(frozen=True)
class SegmentFile:
    base_offset: int
    next_offset: int
    size: int


@dataclass(frozen=True)
class CleanJob:
    """Everything a clean needs, taken on the event loop: the segments below the first uncleanable
    offset (all sealed), the partition's aborted transactions and its producers' last batches."""

    directory: str
    name: str  # topic-partition, for messages
    segments: tuple[SegmentFile, ...]
    first_dirty: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    max_index_bytes: int
    index_interval_bytes: int
    end: int  # the first uncleanable offset: the base of the segment after the last in `segments`
    map_bytes: int
    io_bytes_per_second: float
    aborted: tuple[AbortedTxn, ...] = ()
    producer_last_offsets: frozenset[int] = frozenset()  # last offset of each tracked producer's last batch


@dataclass(frozen=True)
class CleanedGroup:
    """One `.cleaned` segment, to replace the segments whose bases are `replaced` (all below `end`)."""

    base_offset: int
    end: int
    replaced: tuple[int, ...]
    size: int
    markers_removed: int


@dataclass
class CleanStats:
    records_read: int = 0
    records_kept: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    throttled_seconds: float = 0.0  # slept for log.cleaner.io.max.bytes.per.second


@dataclass
class CleanResult:
    groups: list[CleanedGroup]
    cleaned_to: int  # the next clean's first dirty offset
    stats: CleanStats = field(default_factory=CleanStats)
    next_delete_horizon: int | None = None  # when a kept tombstone or marker may go: clean again then


def clean(job: CleanJob, emit: Callable[[CleanedGroup], None] = lambda group: None) -> CleanResult:
    """Clean the job's segments; `emit` gets each cleaned group as soon as its files are written, so
    the broker swaps it in while the next one is cleaned (a clean never needs more spare disk than
    one segment's worth)."""
    started = time.monotonic()
    throttle = Throttle(job.io_bytes_per_second)
    stats = CleanStats()
    aborted = AbortedIndex(job.aborted)
    offset_map = build_offset_map(job, aborted, stats, throttle)
    mapped_to = offset_map.end
    cleaner = Filter(job, offset_map, aborted, stats)
    groups: list[CleanedGroup] = []
    grouped = group_segments([s for s in job.segments if s.base_offset < mapped_to], job)
    out: CleanedSegment | None = None
    try:
        for i, group in enumerate(grouped):
            out = out or CleanedSegment(job, group[0].base_offset)
            for segment in group:
                cleaner.copy(segment, out)
                throttle.account(segment.size)
            following = grouped[i + 1] if i + 1 < len(grouped) else None
            if out.empty and following and following[-1].next_offset - 1 - out.base_offset <= INT32_MAX:
                continue  # nothing kept: no file for that, the next group's output starts here instead
            end = following[0].base_offset if following else job.end
            cleaned = out.finish(end, stats, throttle)
            out = None
            if cleaned is not None:
                groups.append(cleaned)
                emit(cleaned)
    finally:
        if out is not None:
            out.abandon()
    stats.seconds = time.monotonic() - started
    stats.throttled_seconds = throttle.slept
    return CleanResult(groups, mapped_to, stats, cleaner.next_horizon)


# -- pass 1: the offset map --------------------------------------------------------------------------

@dataclass
class OffsetMap:
    """The dirty section's keys: `offsets` maps each to the offset of its latest record; `latest` is
    those offsets sorted, `tombstones` the offsets of its null values. [first, end) is the mapped part."""

    offsets: dict[bytes, int]
    tombstones: set[int]
    first: int
    end: int

    def __post_init__(self) -> None:
        self.latest = sorted(self.offsets.values())


def build_offset_map(job: CleanJob, aborted: "AbortedIndex", stats: CleanStats, throttle: "Throttle") -> OffsetMap:
    """Every key of the dirty section up to where the map outgrew `map_bytes` (at least one batch
    is mapped, so every clean makes progress)."""
    offsets: dict[bytes, int] = {}
    tombstones: set[int] = set()
    used = 0
    mapped_to = job.first_dirty
    for segment in job.segments:
        if segment.next_offset <= job.first_dirty:
            continue
        for header, raw in read_batches(job.directory, segment):
            if header.next_offset <= job.first_dirty:
                continue
            if used > job.map_bytes:
                return OffsetMap(offsets, tombstones, job.first_dirty, mapped_to)
            if not (header.is_control or header.record_count == 0 or aborted.holds(header)):
                keys_before = len(offsets)
                for record in records_of(header, raw):  # the hottest loop of the cleaner: keep it bare
                    offsets[record.key] = offset = record.offset
                    if record.value is None:
                        tombstones.add(offset)
                offsets.pop(None, None)  # records without a key are dropped, never mapped
                # Memory by the batch, not the record: keys of one topic are alike in length.
                used += (len(offsets) - keys_before) * (len(record.key or b"") + MAP_ENTRY_OVERHEAD)
            mapped_to = header.next_offset
        throttle.account(segment.size)
        mapped_to = max(mapped_to, segment.next_offset)
    return OffsetMap(offsets, tombstones, job.first_dirty, mapped_to)


class AbortedIndex:
    """Which transactional batches belong to an aborted transaction: per producer, the offset ranges
    from each aborted transaction's first batch to its abort marker."""

    def __init__(self, aborted: tuple[AbortedTxn, ...]) -> None:
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            self.ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        self.by_marker = {txn.last_offset: txn for txn in aborted}

    def holds(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        return any(first <= header.base_offset <= last for first, last in self.ranges.get(header.producer_id, ()))


# -- pass 2: the filter ------------------------------------------------------------------------------

def group_segments(segments: list[SegmentFile], job: CleanJob) -> list[list[SegmentFile]]:
    """Consecutive segments that together fit one segment (segment.bytes, an index of at most
    segment.index.bytes, int32 relative offsets): cleaned segments shrink, and grouping merges them."""
    groups: list[list[SegmentFile]] = []
    size = 0
    for segment in segments:
        if groups:
            group = groups[-1]
            merged = size + segment.size
            entries = merged // max(job.index_interval_bytes, 1) + len(group) + 1
            if (merged <= job.segment_bytes and entries * 12 <= job.max_index_bytes
                    and segment.next_offset - 1 - group[0].base_offset <= INT32_MAX):
                group.append(segment)
                size = merged
                continue
        groups.append([segment])
        size = segment.size
    return groups


class Filter:
    def __init__(self, job: CleanJob, offset_map: OffsetMap, aborted: AbortedIndex, stats: CleanStats) -> None:
        self.job = job
        self.map = offset_map
        self.aborted = aborted
        self.stats = stats
        self.horizon = job.now_ms + job.delete_retention_ms  # for tombstones and markers reached now
        self.open_txns: dict[int, int] = {}  # producer id -> batches of its current transaction kept so far
        self.next_horizon: int | None = None  # the earliest delete horizon still ahead among kept batches

    def copy(self, segment: SegmentFile, out: "CleanedSegment") -> None:
        """The kept batches of `segment`, appended to `out`."""
        out.replaced.append(segment.base_offset)
        for header, raw in read_batches(self.job.directory, segment):
            kept = self.filter_batch(header, raw)
            if kept is not raw:
                out.changed = True
            if kept is None:
                out.markers_removed += header.is_control
                continue
            written = out.write(kept, self.aborted.by_marker.get(header.base_offset) if header.is_control else None)
            self._note_horizon(written)

    def _note_horizon(self, header: BatchHeader) -> None:
        if header.attributes & DELETE_HORIZON and header.base_timestamp > self.job.now_ms:
            if self.next_horizon is None or header.base_timestamp < self.next_horizon:
                self.next_horizon = header.base_timestamp

    def filter_batch(self, header: BatchHeader, raw: bytes):
        """`raw` when the batch stays as it is, new bytes when it changes, None when it goes."""
        self.stats.records_read += header.record_count
        if header.is_control:
            return self._filter_marker(header, raw)
        pid = header.producer_id
        if self.aborted.holds(header):
            kept_records, tombstones = [], False
        elif self._in_map(header):
            kept = self._kept_mapped(header, raw)
            if kept is raw:
                self.stats.records_kept += header.record_count
                return raw
            kept_records, tombstones = kept
        else:
            kept_records, tombstones = self._kept_records(header, raw)
        self.stats.records_kept += len(kept_records)
        last_of_producer = pid >= 0 and header.last_offset in self.job.producer_last_offsets
        if kept_records or last_of_producer:
            if header.is_transactional:
                self.open_txns[pid] = self.open_txns.get(pid, 0) + 1
        if not kept_records:
            return self._rebuild(header, [], None) if last_of_producer else None
        stamp = tombstones and not header.attributes & DELETE_HORIZON
        if len(kept_records) == header.record_count and not stamp:
            return raw
        horizon = self.horizon if stamp else (header.base_timestamp if header.attributes & DELETE_HORIZON else None)
        return self._rebuild(header, kept_records, horizon)

    def _in_map(self, header: BatchHeader) -> bool:
        return (self.map.first <= header.base_offset and header.next_offset <= self.map.end
                and not header.attributes & DELETE_HORIZON)

    def _kept_mapped(self, header: BatchHeader, raw: bytes):
        """A batch of the mapped dirty section: its kept records are exactly the map's latest offsets
        within it, so most batches are decided without decoding them (none kept, or all). `raw` when
        all stay and none is a tombstone to stamp, else (kept records, whether a tombstone is kept)."""
        latest = self.map.latest
        lo = bisect.bisect_left(latest, header.base_offset)
        hi = bisect.bisect_right(latest, header.last_offset, lo)
        if lo == hi:
            return [], False
        tombstones = bool(self.map.tombstones) and any(o in self.map.tombstones for o in latest[lo:hi])
        if hi - lo == header.record_count and not tombstones:
            return raw
        wanted = set(latest[lo:hi])
        return [r for r in records_of(header, raw) if r.offset in wanted], tombstones

    def _kept_records(self, header: BatchHeader, raw: bytes) -> tuple[list, bool]:
        """The records that stay, and whether a tombstone is among them."""
        offsets = self.map.offsets
        expired = header.attributes & DELETE_HORIZON and header.base_timestamp <= self.job.now_ms
        kept, tombstones = [], False
        for record in records_of(header, raw):
            key = record.key
            if key is None or offsets.get(key, -1) > record.offset:
                continue
            if record.value is None:
                if expired:
                    continue
                tombstones = True
            kept.append(record)
        return kept, tombstones

    def _filter_marker(self, header: BatchHeader, raw: bytes):
        if self.open_txns.pop(header.producer_id, 0):
            return raw  # data of its transaction is still in the log
        if not header.attributes & DELETE_HORIZON:
            self.stats.records_kept += 1
            return self._rebuild(header, list(records_of(header, raw)), self.horizon)
        if header.base_timestamp > self.job.now_ms:
            self.stats.records_kept += 1
            return raw
        return None

    @staticmethod
    def _rebuild(header: BatchHeader, records: list, horizon: int | None) -> bytes:
        """The batch again with only `records`, its offsets, producer fields and codec unchanged."""
        kept_bits = TIMESTAMP_TYPE_LOG_APPEND | TRANSACTIONAL | CONTROL | (COMPRESSION_MASK if records else 0)
        attributes = header.attributes & kept_bits  # an empty batch is uncompressed, as Kafka writes it
        log_append_time = header.attributes & TIMESTAMP_TYPE_LOG_APPEND or not records
        fields = dict(base_offset=header.base_offset, leader_epoch=header.leader_epoch,
                      max_timestamp=header.max_timestamp if log_append_time else max(r.timestamp for r in records),
                      last_offset_delta=header.last_offset_delta, producer_id=header.producer_id,
                      producer_epoch=header.producer_epoch, base_sequence=header.base_sequence)
        if horizon is not None:
            return build_batch([(r.offset - header.base_offset, r.timestamp, r.key, r.value, r.headers)
                                for r in records], base_timestamp=horizon, attributes=attributes | DELETE_HORIZON,
                               **fields)
        if not records:
            return assemble_batch(b"", 0, base_timestamp=header.base_timestamp, attributes=attributes, **fields)
        # aiokafka's compiled builder encodes the records (seven times faster than build_batch); its
        # base timestamp is the first record's, as Kafka's cleaner writes it. (Imported here, at the
        # cleaner's first use: importing the aiokafka package costs 80 ms of CPU, at every broker start.)
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, INT32_MAX)
        for r in records:
            builder.append(r.offset - header.base_offset, r.timestamp, r.key, r.value, r.headers)
        built = builder.build()
        return assemble_batch(bytes(memoryview(built)[HEADER_SIZE:]), len(records), attributes=attributes,
                              base_timestamp=read_header(built).base_timestamp, **fields)


class CleanedSegment:
    """A `.cleaned` segment being written beside the log: the kept batches of one or more groups."""

    def __init__(self, job: CleanJob, base_offset: int) -> None:
        self.job = job
        self.base_offset = base_offset
        remove_cleaned(job.directory, base_offset)
        self.segment = Segment.create(job.directory, base_offset, job.index_interval_bytes, CLEANED)
        self.replaced: list[int] = []
        self.changed = False
        self.markers_removed = 0
        self._pending, self._headers = bytearray(), []

    @property
    def empty(self) -> bool:
        return self.segment.size == 0 and not self._pending

    def write(self, batch: bytes, aborted: AbortedTxn | None) -> BatchHeader:
        """One kept batch, and its header; `aborted`, the transaction an abort marker ends (its
        `.txnindex` entry)."""
        if aborted is not None:
            self.segment.txn_index.append(aborted)
        header = read_header(batch)
        self._pending += batch
        self._headers.append(header)
        if len(self._pending) >= WRITE_BUFFER:
            self._write_pending()
        return header

    def _write_pending(self) -> None:
        if self._pending:
            self.segment.append(self._pending, self._headers)
            self._pending, self._headers = bytearray(), []

    def finish(self, end: int, stats: CleanStats, throttle: "Throttle") -> CleanedGroup | None:
        """Sealed and fsynced, to replace the segments it was written from (up to `end`). None, and
        the files gone, when it is one segment's batches unchanged: there is nothing to swap."""
        try:
            self._write_pending()
            self.segment.txn_index.create()  # even when empty: it replaces the old segment's
            self.segment.seal()
            self.segment.flush()
        finally:
            self.segment.close()
        stats.bytes_written += self.segment.size
        throttle.account(self.segment.size)
        if len(self.replaced) == 1 and not self.changed:
            remove_cleaned(self.job.directory, self.base_offset)
            return None
        return CleanedGroup(self.base_offset, end, tuple(self.replaced), self.segment.size, self.markers_removed)

    def abandon(self) -> None:
        self.segment.close()
        remove_cleaned(self.job.directory, self.base_offset)


# -- files -------------------------------------------------------------------------------------------

def records_of(header: BatchHeader, raw: bytes) -> DefaultRecordBatch:
    """aiokafka's compiled reader over the batch's records, decompressed here: for gzip, ISA-L's
    inflate is a third faster than aiokafka's (and the cleaner inflates every batch twice)."""
    from aiokafka.record.default_records import DefaultRecordBatch  # (at first use, as the builder above)
    codec = header.attributes & COMPRESSION_MASK
    if not codec:
        return DefaultRecordBatch(raw)
    plain = bytearray(raw[:HEADER_SIZE])
    plain[CRC_START:CRC_START + 2] = (header.attributes & ~COMPRESSION_MASK).to_bytes(2, "big")  # (the attributes)
    plain += decompress(codec, raw[HEADER_SIZE:])
    return DefaultRecordBatch(bytes(plain))


def read_batches(directory: str, segment: SegmentFile):
    """(header, bytes) of each batch of a sealed segment, read through one mapping of its file."""
    path = os.path.join(directory, segment_name(segment.base_offset, ".log"))
    with open(path, "rb") as f:
        size = min(os.fstat(f.fileno()).st_size, segment.size)
        if size == 0:
            return
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as data:
            position = 0
            while position + HEADER_SIZE <= size:
                header = read_header(data, position)
                end = position + header.batch_length + LOG_OVERHEAD
                yield header, data[position:end]
                position = end


class Throttle:
    """log.cleaner.io.max.bytes.per.second: sleep whenever the bytes read and written run ahead of it."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self.started = time.monotonic()
        self.bytes = 0
        self.slept = 0.0

    def account(self, size: int) -> None:
        self.bytes += size
        if self.rate <= 0 or self.rate >= 1e300:
            return
        ahead = self.bytes / self.rate - (time.monotonic() - self.started)
        if ahead > 0.01:
            time.sleep(ahead)
            self.slept += ahead
