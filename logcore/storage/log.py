"""PartitionLog: the ordered segments of one partition, with log start offset and log end offset.

Owned by its Partition (replication layer), which decides the high watermark; event loop only,
no `await` inside any method, so validate → write → update happens atomically for other tasks.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import random
import shutil
import time
from dataclasses import dataclass

from ..config import TopicConfig
from ..protocol.codec import FileRegion
from ..protocol.errors import CorruptRecord, InvalidTimestamp, OffsetOutOfRange, RecordTooLarge, StorageError
from . import swap
from .batch import CODECS, BatchHeader, assign_offsets, validate_produce, whole_batches_length
from .compaction import CleanedGroup
from .epochs import LeaderEpochCache
from .producer_state import ProducerStateManager
from .records import CorruptRecords, decode_batch, recompress
from .retention import deletable_segments
from .segment import Segment, fsync_dir
from .txn_index import AbortedTxn, collect_aborted

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1  # relative offsets in the index are int32
# compression.type's codecs ("producer": as sent); Kafka names the absent one "uncompressed"
STORED_CODECS = {"uncompressed" if name == "none" else name: codec for codec, name in CODECS.items()}


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    next_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int


class PartitionLog:
    """Event loop only. `recovery_point`: every offset below it is on disk (fsynced); after a crash
    only the segments holding offsets at or past it need recovery."""

    def __init__(self, directory: str, topic: str, partition: int, config: TopicConfig) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[Segment] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.last_flush_ms = int(time.time() * 1000)
        # A new partition's directory entries are made durable at its first flush, not at creation:
        # until then it holds nothing acknowledged, and a topic of thousands of partitions is created
        # without an fsync per partition (Kafka flushes a new log's directory lazily too), its
        # leader-epoch checkpoint included (`LeaderEpochCache.sync_later`).
        self._unsynced_directory = False
        self._truncations = 0  # a background flush of sealed segments applies only if this did not change
        self.epochs = LeaderEpochCache(directory)
        self.leader_epoch = 0
        self.producers = ProducerStateManager(directory, f"{topic}-{partition}")
        self.first_dirty_offset = 0  # where the log cleaner's next clean starts (cleaner-offset-checkpoint)
        self.roll_jitter_ms = self._random_jitter()  # segment.jitter.ms: drawn again for each segment

    def __repr__(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self, log_start_offset: int, clean: bool, recovery_point: int = 0, lead: bool = False) -> None:
        """Load the segments. After a clean shutdown everything was flushed: trust the batches, check
        the indexes. Otherwise recover each segment holding offsets at or past `recovery_point`
        (the last checkpointed flush): validate, rebuild indexes, cut a torn tail, and drop the
        segments after a cut. Raises CorruptSegment for damage that is not a torn tail. `lead`:
        lead in the log's latest epoch from its end (a broker alone), its epoch file written once
        with the rest of the epochs' changes."""
        self.log_start_offset, self.recovery_point = log_start_offset, recovery_point
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory)
            self._unsynced_directory = self.epochs.sync_later = True
        swap.finish_swaps(self.directory)
        self._remove_orphan_indexes()
        interval = self.config["index.interval.bytes"]
        bases = sorted(int(name[:-4]) for name in os.listdir(self.directory)
                       if name.endswith(".log") and name[:-4].isdigit())
        self.segments = [Segment(self.directory, base, interval) for base in bases]
        first_unflushed = len(self.segments) if clean else self._first_segment_at(recovery_point)
        for segment in self.segments[:first_unflushed]:
            segment.load()
        recovered_epochs = self._recover(first_unflushed, recovery_point)
        for segment in self.segments[:-1]:
            segment.seal()  # a rebuilt index of an inactive segment ends like the one it replaces
        if not self.segments:
            self.segments.append(Segment.create(self.directory, max(log_start_offset, 0), interval))
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.recovery_point = self.log_end_offset
        with self.epochs.one_write():
            self._load_epochs(recovered_epochs, clean)
            if lead:
                self.assign_leader_epoch(self.leader_epoch)
        self.producers.load(self.segments, self.log_start_offset, self.log_end_offset)

    def _recover(self, first: int, recovery_point: int) -> list[tuple[int, int]]:
        """Recover segments[first:] after a crash, fsync what they keep; the (epoch, start offset)
        pairs their batches carry."""
        epochs: list[tuple[int, int]] = []
        batches = cut = 0
        i = first
        while i < len(self.segments):
            result = self.segments[i].recover(recovery_point)
            self.segments[i].flush()
            epochs += result.epochs
            batches, cut = batches + result.batches, cut + result.truncated_bytes
            if result.truncated_bytes:
                self._drop_after(i)
            i += 1
        if first < len(self.segments):
            log.info("%s: recovered %d segment(s) from offset %d (recovery point %d): %d valid batches, "
                     "%d bytes of torn tail cut; log end offset %d", self, len(self.segments) - first,
                     self.segments[first].base_offset, recovery_point, batches, cut, self.log_end_offset)
        return epochs

    def _remove_orphan_indexes(self) -> None:
        """Index files whose segment is gone (a deletion interrupted by a crash)."""
        names = set(os.listdir(self.directory))
        for name in names:
            stem, dot, suffix = name.partition(".")
            if suffix in ("index", "timeindex", "txnindex") and stem.isdigit() and f"{stem}.log" not in names:
                os.unlink(os.path.join(self.directory, name))

    def _drop_after(self, i: int) -> None:
        """Recovery cut segment i short: the segments after it hold offsets that no longer follow."""
        dropped = self.segments[i + 1 :]
        del self.segments[i + 1 :]
        for segment in dropped:
            log.warning("%s: deleting %s, which follows a truncated segment", self, segment.path)
            segment.delete()
            segment.close_fd()

    def _load_epochs(self, recovered: list[tuple[int, int]], clean: bool) -> None:
        """After a clean shutdown the file was written through up to it: an epoch that begins at the
        log end is one its leader began with nothing written yet, and stays (Kafka trusts the
        marker). Cut away, it would be assigned again as the partition is led: a write of the file
        for no change at every start of every idle partition. After a crash, or past the log end
        (a log cut since), epochs are cut as Kafka cuts them."""
        if self.epochs.load():
            for epoch, start in recovered:
                self.epochs.assign(epoch, start)
        else:
            self.epochs.reset(self._epochs_in_log())
        self.epochs.truncate_from_end(self.log_end_offset + 1 if clean else self.log_end_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        self.leader_epoch = max(self.epochs.latest_epoch, 0)

    def _epochs_in_log(self) -> list[tuple[int, int]]:
        """(epoch, first offset) wherever the batch headers' leader epoch grows: the cache, rebuilt."""
        entries: list[tuple[int, int]] = []
        for segment in self.segments:
            for _, header in segment.headers():
                if header.leader_epoch > (entries[-1][0] if entries else -1):
                    entries.append((header.leader_epoch, header.base_offset))
        return entries

    def assign_leader_epoch(self, epoch: int) -> None:
        """This replica leads from `epoch` on: its appends start there and carry it."""
        self.epochs.assign(epoch, self.log_end_offset)
        self.leader_epoch = epoch

    def close(self, flush: bool = True) -> None:
        """Shutdown: seal the active segment and fsync (not for a damaged log), then close."""
        if flush and self.segments:
            self.active.seal()
            self.flush()
            self.producers.take_snapshot(self.log_end_offset)  # the next start replays nothing
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        for segment in self.segments:
            segment.delete()
            _close_later(segment, self.config["file.delete.delay.ms"])
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
        headers = validate_produce(records, self.config["max.message.bytes"])
        if self.config["message.timestamp.type"] == "CreateTime":
            self._check_timestamps(headers, int(time.time() * 1000))
        return headers

    def _check_timestamps(self, headers: list[BatchHeader], now_ms: int) -> None:
        """message.timestamp.before.max.ms / after.max.ms, checked on each batch's first record's
        timestamp and its largest (the header's; records are not decoded on the produce path)."""
        before, after = self.config["message.timestamp.before.max.ms"], self.config["message.timestamp.after.max.ms"]
        for header in headers:
            if now_ms - header.base_timestamp > before:
                raise InvalidTimestamp(f"timestamp {header.base_timestamp} of a record to {self} is more than "
                                       f"message.timestamp.before.max.ms={before} in the past")
            if header.max_timestamp - now_ms > after:
                raise InvalidTimestamp(f"timestamp {header.max_timestamp} of a record to {self} is more than "
                                       f"message.timestamp.after.max.ms={after} in the future")

    def append(self, records: bytes, headers: list[BatchHeader], from_client: bool = True,
               transaction_version: int = 0) -> AppendResult:
        """Assign offsets to already validated batches and write them. No await inside. A batch an
        idempotent producer already wrote is answered with its original offset and not written;
        control batches (transaction markers) come only from the coordinator (`from_client=False`)."""
        now_ms = int(time.time() * 1000)
        append_time = now_ms if self.config["message.timestamp.type"] == "LogAppendTime" else None
        codec = STORED_CODECS.get(self.config["compression.type"])
        if from_client and codec is not None:
            try:
                records, headers = recompress(records, headers, codec)
            except CorruptRecords as exc:
                raise CorruptRecord(f"a batch to {self} does not decompress: {exc}") from None
            if (largest := max(h.size for h in headers)) > self.config["max.message.bytes"]:
                raise RecordTooLarge(f"a batch stored as {self.config['compression.type']} for {self} takes "
                                     f"{largest} bytes, over max.message.bytes={self.config['max.message.bytes']}")
        base = self.log_end_offset
        pending = self.producers.prepare(records, headers, base, from_client, transaction_version)  # raises only
        if pending is not None and pending.duplicate is not None:
            return AppendResult(pending.duplicate.first_offset, pending.duplicate.last_offset + 1, -1,
                                self.log_start_offset, 0)
        buf = bytearray(records)
        patched = assign_offsets(buf, headers, base, self.leader_epoch, append_time)
        try:
            self._maybe_roll(len(buf), patched[-1].last_offset, now_ms)
            self.active.append(buf, patched)
            self.producers.commit(pending, self.active)
            if self.active.unflushed >= self.config["flush.messages"]:
                self.flush()
        except OSError as exc:
            raise StorageError(f"cannot write {self.active.path}: {exc.strerror or exc}") from exc
        return AppendResult(base, self.log_end_offset, append_time if append_time is not None else -1,
                            self.log_start_offset, sum(h.record_count for h in headers))

    def append_replicated(self, records: bytes) -> int:
        """A follower's append: batches read from the leader's log at this log's end (or past it, where
        the leader's cleaner removed records), written as they are (offsets, leader epochs,
        timestamps); the epochs they carry enter the epoch cache. The
        number of records written. A batch cut off at the end of `records` is left for the next fetch."""
        records = records[:whole_batches_length(records)]
        if not records:
            return 0
        headers = validate_produce(records, len(records), cleaned=True)
        if headers[0].base_offset < self.log_end_offset:  # a gap is fine: the cleaner removed those offsets
            raise StorageError(f"{self}: the leader sent batches from offset {headers[0].base_offset}, "
                               f"before this replica's log end {self.log_end_offset}")
        now_ms = int(time.time() * 1000)
        try:
            self._maybe_roll(len(records), headers[-1].last_offset, now_ms)
            for header in headers:
                self.epochs.assign(header.leader_epoch, header.base_offset)
            self.active.append(records, headers)
            self.producers.apply_replicated(records, headers, self.active)
            if self.active.unflushed >= self.config["flush.messages"]:
                self.flush()
        except OSError as exc:
            raise StorageError(f"cannot write {self.active.path}: {exc.strerror or exc}") from exc
        self.leader_epoch = max(self.leader_epoch, self.epochs.latest_epoch)
        return sum(h.record_count for h in headers)

    def _maybe_roll(self, incoming: int, last_offset: int, now_ms: int) -> None:
        """Kafka's reasons to start a new segment before an append."""
        active = self.active
        if active.size == 0:
            return
        max_index_bytes = self.config["segment.index.bytes"]
        if (active.size + incoming > self.config["segment.bytes"]
                or now_ms - active.rolling_base_ms > self.config["segment.ms"] - self.roll_jitter_ms
                or active.index.size_bytes + active.index.ENTRY.size > max_index_bytes
                or active.time_index.size_bytes + active.time_index.ENTRY.size > max_index_bytes
                or last_offset - active.base_offset > INT32_MAX):
            self.roll()

    def _random_jitter(self) -> int:
        """Kafka's: uniform below segment.jitter.ms (and segment.ms), so that partitions created
        together do not all roll at the same moment."""
        jitter = min(self.config["segment.jitter.ms"], self.config["segment.ms"])
        return random.randrange(jitter) if jitter > 0 else 0

    def roll(self) -> Segment:
        """Seal the active segment and start a new one at the log end offset. The sealed segments are
        fsynced on a worker thread, as Kafka's roll schedules their flush: an fsync of a whole segment
        in the event loop held every client of the broker for as long as the disk took."""
        self.active.seal()
        segment = Segment.create(self.directory, self.log_end_offset, self.config["index.interval.bytes"])
        self._sync_directories()
        self.segments.append(segment)
        self.roll_jitter_ms = self._random_jitter()
        self.producers.take_snapshot(segment.base_offset)
        self._flush_sealed(segment.base_offset)
        log.info("%s: rolled new segment %s", self, segment.path)
        return segment

    def _flush_sealed(self, upto: int) -> None:
        """fsync the segments below `upto` past the recovery point in the background, then move the
        recovery point to `upto` (unless the log was truncated meanwhile: what is below it changed)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (tools, benchmarks): flush now
            self.flush()
            return
        sealed = self.segments[self._first_segment_at(self.recovery_point):-1]
        truncations = self._truncations

        def flushed(job: asyncio.Future) -> None:
            if job.cancelled():
                return
            if job.exception() is not None:
                log.warning("%s: could not fsync its sealed segments (they are flushed again at the next "
                            "flush or recovered after a crash): %s", self, job.exception())
            elif truncations == self._truncations:
                self.recovery_point = max(self.recovery_point, upto)
        loop.run_in_executor(None, _flush_segments, sealed).add_done_callback(flushed)

    def flush(self) -> None:
        """fsync every segment that may hold data past the recovery point, then move it to the end."""
        for segment in self.segments[self._first_segment_at(self.recovery_point):]:
            segment.flush()
        if self._unsynced_directory:
            self._sync_directories()
        self.recovery_point = self.log_end_offset
        self.last_flush_ms = int(time.time() * 1000)

    def _sync_directories(self) -> None:
        """Make the segment files' entries durable, and a new partition's own entry in the data directory
        (with the leader-epoch checkpoint it holds)."""
        self.epochs.make_durable()
        fsync_dir(self.directory)
        if self._unsynced_directory:
            fsync_dir(os.path.dirname(self.directory))
            self._unsynced_directory = False

    def flush_if_due(self, now_ms: int) -> None:
        """flush.ms: fsync data that has waited that long since the last flush."""
        if self.log_end_offset > self.recovery_point and now_ms - self.last_flush_ms >= self.config["flush.ms"]:
            self.flush()

    def _first_segment_at(self, offset: int) -> int:
        """Index of the first segment holding offsets at or past `offset`."""
        return max(bisect.bisect_right(self.segments, offset, key=_base_offset) - 1, 0)

    # -- reads ---------------------------------------------------------------------------------

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
        i = self._first_segment_at(offset)
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
            if min_one_batch:
                length = max(max_bytes, header.size)
            elif max_bytes < header.size:
                # Send a later partition whole batches or nothing: a record set holding only a cut
                # batch is refused by some clients (aiokafka: RecordTooLargeError). It comes first
                # in a later fetch and is then sent whole.
                return None
            else:
                length = max_bytes
        return FileRegion(segment.fd, position, length) if length > 0 else None

    def _position_of(self, segment: Segment, offset: int) -> int:
        if offset >= segment.next_offset:
            return segment.size
        found = segment.find_batch(offset)
        return found[0] if found else segment.size

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is ≥ `timestamp` (ListOffsets by
        time). The indexes find the batch; Kafka then decodes that one batch, and so do we."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            found = segment.find_timestamp(timestamp)
            if found:
                return _first_record(segment, *found, lambda r: r.timestamp >= timestamp
                                     and r.offset >= self.log_start_offset)
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record holding the largest timestamp (ListOffsets -3)."""
        best = max(self.segments, key=lambda s: s.max_timestamp)
        found = best.find_batch(best.offset_of_max_timestamp) if best.max_timestamp >= 0 else None
        if found is None:
            return -1, -1
        return _first_record(best, *found, lambda r: r.timestamp == best.max_timestamp)

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """What a read_committed fetch of [fetch_offset, upper_offset) must skip."""
        return collect_aborted(self.segments, fetch_offset, upper_offset)

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- deletion ------------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to `offset` (DeleteRecords) and drop whole segments below it."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(f"cannot delete records before {offset}: log end offset is {self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            below = 0
            while below + 1 < len(self.segments) and self.segments[below + 1].base_offset <= offset:
                below += 1
            self._delete_leading(below, f"log start offset {offset}")
            self.epochs.truncate_from_start(self.log_start_offset)
            self.producers.truncate_head(self.log_start_offset)
        return self.log_start_offset

    def apply_retention(self, high_watermark: int, now_ms: int | None = None) -> int:
        """Delete the leading segments past retention (see storage/retention.py); how many went."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        count, why = deletable_segments(self.segments, self.config, now_ms, self.log_start_offset,
                                        self.log_end_offset, high_watermark)
        if count == len(self.segments):
            self.roll()  # every segment goes, the active one too: keep the log end offset in a new one
        self._delete_leading(count, why)
        return count

    def _delete_leading(self, count: int, why: str) -> None:
        if not count:
            return
        gone, self.segments = self.segments[:count], self.segments[count:]
        for segment in gone:
            segment.delete()
            _close_later(segment, self.config["file.delete.delay.ms"])
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        self.producers.truncate_head(self.log_start_offset)
        log.info("%s: deleted %d segment(s) (%s); log start offset now %d", self, count, why, self.log_start_offset)

    # -- compaction ----------------------------------------------------------------------------

    def install_cleaned(self, group: CleanedGroup, cleaned_from: dict[int, Segment]) -> bool:
        """Swap a cleaned segment (storage/compaction.py) in for the segments it was cleaned from
        (`cleaned_from`, by base offset), crash-safe (storage/swap.py). False, and the cleaned files
        dropped, when those segments changed meanwhile (retention, truncation, deletion)."""
        old = [s for s in self.segments if group.base_offset <= s.base_offset < group.end]
        if (tuple(s.base_offset for s in old) != group.replaced or not old or old[-1] is self.active
                or any(cleaned_from.get(s.base_offset) is not s for s in old)):
            swap.remove_cleaned(self.directory, group.base_offset)
            return False
        swap.begin(self.directory, group.base_offset, group.end)
        for segment in old:
            segment.delete()
            _close_later(segment, self.config["file.delete.delay.ms"])
        swap.finish(self.directory, group.base_offset, group.end)
        cleaned = Segment(self.directory, group.base_offset, self.config["index.interval.bytes"])
        cleaned.load()
        first = self.segments.index(old[0])
        self.segments[first:first + len(old)] = [cleaned]
        # The replaced segments' snapshots go with them, as in Kafka. When markers went, the ones
        # before the range go too: such a snapshot may name a transaction whose marker is gone, and
        # loading from it would leave that transaction open forever.
        self.producers.delete_snapshots(0 if group.markers_removed else group.base_offset + 1, group.end)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after `offset` (a replica diverging from its leader)."""
        if offset >= self.log_end_offset:
            return
        self._truncations += 1
        if offset < self.segments[0].base_offset:
            self.restart_at(offset)
            return
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            segment = self.segments.pop()
            segment.delete()
            _close_later(segment, self.config["file.delete.delay.ms"])
        self.active.truncate_to(offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.first_dirty_offset = min(self.first_dirty_offset, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.producers.load(self.segments, self.log_start_offset, self.log_end_offset)

    def restart_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (also a follower behind its leader's log start)."""
        self._truncations += 1
        for segment in self.segments:
            segment.delete()
            _close_later(segment, self.config["file.delete.delay.ms"])
        self.segments = [Segment.create(self.directory, offset, self.config["index.interval.bytes"])]
        fsync_dir(self.directory)
        self.log_start_offset = self.recovery_point = self.first_dirty_offset = offset
        self.epochs.reset([])
        self.producers.load(self.segments, self.log_start_offset, self.log_end_offset)


def _base_offset(segment: Segment) -> int:
    return segment.base_offset


def _first_record(segment: Segment, position: int, header: BatchHeader, wanted) -> tuple[int, int]:
    """(offset, timestamp) of the first record of the batch at `position` that is `wanted`. A batch
    that does not decode (codec library missing) answers with its base offset and max timestamp."""
    try:
        records = decode_batch(os.pread(segment.fd, header.size, position))
    except CorruptRecords as exc:
        log.warning("%s: batch at byte %d does not decode (%s); answering with its base offset",
                    segment.path, position, exc)
        return header.base_offset, header.max_timestamp
    record = next((r for r in records if wanted(r)), None)
    return (record.offset, record.timestamp) if record else (header.base_offset, header.max_timestamp)


def _flush_segments(segments: list[Segment]) -> None:
    """A worker thread's fsync of sealed segments. One deleted meanwhile (retention, the cleaner's
    swap) needs none."""
    for segment in segments:
        try:
            segment.flush()
        except (OSError, ValueError):
            if os.path.exists(segment.path):
                raise


def _close_later(segment: Segment, delay_ms: int) -> None:
    """Deleted segments keep their descriptor for file.delete.delay.ms so in-flight fetches finish."""
    try:
        asyncio.get_running_loop().call_later(delay_ms / 1000, segment.close_fd)
    except RuntimeError:  # no loop: nothing can be sending from it
        segment.close_fd()
