"""One segment: `<base>.log` plus its sparse `.index` and `.timeindex`, and its `.txnindex` of aborts.

Owned by its PartitionLog; event loop only. Appends are whole record-set writes; reads return
file positions so the fetch path can `sendfile` without reading records into Python.

Index entries follow Kafka's LogSegment: once more than `index.interval.bytes` have been appended
since the last entry, the next batch gets an offset-index entry, and the time index gets (largest
timestamp so far, offset of the batch holding it) if that timestamp grew. Sealing a segment (roll,
close) adds a last time-index entry so its largest timestamp survives a restart.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from dataclasses import dataclass, field

from .batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchHeader, crc_matches, read_header
from .index import OffsetIndex, TimeIndex
from .txn_index import TxnIndex

log = logging.getLogger(__name__)

PAGE = 4096
EVERYTHING_FLUSHED = 2**63 - 1  # a recovery point that treats every byte of a segment as durable


SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")  # the files of one segment


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def fsync_dir(path: str) -> None:
    """Make a created, renamed or deleted directory entry durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CorruptSegment(Exception):
    """A batch in the middle of a segment fails validation while valid batches follow it."""

    def __init__(self, path: str, position: int, offset: int, reason: str) -> None:
        super().__init__(
            f"{path}: corrupt record batch at byte {position} (where offset {offset} should start): {reason}; "
            f"valid batches follow it, so this is damage, not an interrupted write. Inspect it with "
            f"`binlake dump-log {path}`; then restore the partition from a replica or backup, or stop the broker "
            f"and run `truncate -s {position} {path}` to give up the batches of this segment from offset {offset} on."
        )
        self.path, self.position, self.offset = path, position, offset


@dataclass
class RecoveryResult:
    truncated_bytes: int
    batches: int
    epochs: list[tuple[int, int]] = field(default_factory=list)  # (leader epoch, its first offset here)


class Segment:
    """`suffix` names a segment being written beside the log (the cleaner's `.cleaned` output)."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int, suffix: str = "") -> None:
        self.base_offset = base_offset
        self.path = os.path.join(directory, segment_name(base_offset, ".log" + suffix))
        self.index = OffsetIndex(os.path.join(directory, segment_name(base_offset, ".index" + suffix)), base_offset)
        self.time_index = TimeIndex(os.path.join(directory, segment_name(base_offset, ".timeindex" + suffix)),
                                    base_offset)
        self.txn_index = TxnIndex(os.path.join(directory, segment_name(base_offset, ".txnindex" + suffix)))
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_base_ms: int | None = None  # segment.ms counts from here; None while empty
        self.unflushed = 0  # records appended since the last fsync
        self._bytes_since_index = 0

    @classmethod
    def create(cls, directory: str, base_offset: int, index_interval_bytes: int, suffix: str = "") -> "Segment":
        """A new, empty segment. Its index files exist from the start, so a missing one means damage."""
        segment = cls(directory, base_offset, index_interval_bytes, suffix)
        if segment.size:
            segment.close()
            raise FileExistsError(f"{segment.path} already holds {segment.size} bytes; cannot start a segment there")
        segment.index.reset()
        segment.time_index.reset()
        return segment

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Open after a clean shutdown: trust the log, keep the indexes if they agree with it,
        otherwise rebuild them (which also validates every batch)."""
        if self.index.load() and self.time_index.load() and self._scan_tail():
            return
        damage = self.index.damage or self.time_index.damage or "they disagree with the log's last batches"
        log.warning("%s: index files missing or inconsistent with the log; rebuilding them (%s)", self.path, damage)
        self.recover(EVERYTHING_FLUSHED)

    def _scan_tail(self) -> bool:
        """Next offset, largest timestamp and index spacing from the last offset-index entry on,
        reading batch headers only. False when the indexes or the file's end disagree with the log."""
        start = self.index.last_position
        if len(self.index) and start >= self.size:
            return False
        newest = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = newest if newest else (-1, self.base_offset)
        self.next_offset, end = self.base_offset, start
        for position, header in self.headers(start):
            if header.magic != MAGIC or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return False
            if position == start and len(self.index) and header.base_offset > self.base_offset + self.index.keys[-1]:
                return False
            self._track_timestamp(header)
            self.next_offset, end = header.next_offset, position + header.size
        if end != self.size or (len(self.index) and self.base_offset + self.index.keys[-1] >= self.next_offset):
            return False
        if newest and newest[1] >= self.next_offset:
            return False
        self._bytes_since_index = self.size - start
        self.rolling_base_ms = self._first_batch_time()
        return True

    def recover(self, recovery_point: int) -> RecoveryResult:
        """Validate every batch, rebuild both indexes and cut a torn tail. Raises CorruptSegment when
        an invalid batch has valid ones after it (damage, not an interrupted write) — except where a
        whole page of zeros sits at or past `recovery_point`: data the OS never wrote before a power
        loss, cut like a torn tail."""
        self.index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        result = RecoveryResult(0, 0)
        position = 0
        if self.size:
            with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as data:
                while position < self.size:
                    reason = self._invalid_reason(data, position)
                    if reason:
                        self._check_torn(data, position, reason, recovery_point)
                        break
                    header = read_header(data, position)
                    self._index_batch(header, position)
                    if header.leader_epoch >= 0 and (not result.epochs or header.leader_epoch > result.epochs[-1][0]):
                        result.epochs.append((header.leader_epoch, header.base_offset))
                    self.next_offset = header.next_offset
                    position += header.size
                    result.batches += 1
        result.truncated_bytes = self.size - position
        if result.truncated_bytes:
            log.warning("%s: truncating %d bytes of torn tail at byte %d (next offset %d)",
                        self.path, result.truncated_bytes, position, self.next_offset)
            os.ftruncate(self.fd, position)
            self.size = position
        self.rolling_base_ms = self._first_batch_time()
        return result

    def _check_torn(self, data, position: int, reason: str, recovery_point: int) -> None:
        """Return when the bytes from `position` on are a torn tail; raise CorruptSegment otherwise."""
        resume = self._next_valid_batch(data, position)
        if resume is None:
            return
        if self.next_offset >= recovery_point and _has_zero_page(data, position, resume):
            log.warning("%s: unwritten (zero) pages at byte %d, past the recovery point %d: the OS lost them "
                        "before a crash; dropping the %d bytes from there on", self.path, position,
                        recovery_point, self.size - position)
            return
        raise CorruptSegment(self.path, position, self.next_offset, reason)

    def _invalid_reason(self, data, position: int) -> str | None:
        if self.size - position < HEADER_SIZE:
            return "file ends inside a batch header"
        header = read_header(data, position)
        if header.magic != MAGIC:
            return f"magic {header.magic}"
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > self.size:
            return f"batch length {header.batch_length} runs past the end of the file"
        if header.base_offset < self.next_offset:
            return f"base offset {header.base_offset} goes backwards (expected {self.next_offset})"
        if header.record_count < 0 or header.last_offset_delta < header.record_count - 1:
            return f"record count {header.record_count}, last offset delta {header.last_offset_delta}"
        if not crc_matches(data, position, header):
            return "CRC32C mismatch"
        return None

    def _next_valid_batch(self, data, position: int) -> int | None:
        """Where a well-formed batch starts after a bad one, if anywhere. Tries the bad batch's own
        length first (one corrupt payload), then searches for a plausible header."""
        if self.size - position >= HEADER_SIZE:
            header = read_header(data, position)
            after = position + header.size
            if header.batch_length > 0 and self._plausible(data, after):
                return after
        magic_at = position + 16  # the bad batch's own magic byte: candidates start after it
        while True:
            magic_at = data.find(bytes([MAGIC]), magic_at + 1)
            if magic_at < 0 or magic_at - 16 + HEADER_SIZE > self.size:
                return None
            if self._plausible(data, magic_at - 16):
                return magic_at - 16

    def _plausible(self, data, position: int) -> bool:
        if position <= 0 or self.size - position < HEADER_SIZE:
            return False
        header = read_header(data, position)
        return (header.magic == MAGIC and header.base_offset >= self.next_offset
                and HEADER_SIZE - LOG_OVERHEAD <= header.batch_length
                and position + header.size <= self.size and crc_matches(data, position, header))

    def _first_batch_time(self) -> int | None:
        """Kafka rolls by the first batch's timestamp; the file's mtime when it has none."""
        if self.size < HEADER_SIZE:
            return None
        first = read_header(os.pread(self.fd, HEADER_SIZE, 0))
        return first.max_timestamp if first.max_timestamp >= 0 else int(os.fstat(self.fd).st_mtime * 1000)

    # -- writing -------------------------------------------------------------------------------

    def append(self, buf, headers: list[BatchHeader]) -> None:
        position = self.size
        written = os.write(self.fd, buf)
        if written != len(buf):
            os.ftruncate(self.fd, position)
            raise OSError(f"short write to {self.path}: {written} of {len(buf)} bytes")
        if self.rolling_base_ms is None:
            self.rolling_base_ms = int(time.time() * 1000)
        for header in headers:
            self._index_batch(header, position)
            position += header.size
        self.size = position
        self.next_offset = headers[-1].next_offset
        self.unflushed += sum(h.record_count for h in headers)

    def _track_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.base_offset

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        self._track_timestamp(header)
        if self._bytes_since_index > self.index_interval_bytes:
            self.index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size

    def seal(self) -> None:
        """The segment takes no more appends (rolled, or the broker stops): record its largest timestamp."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset at or after `offset`; the next offset becomes `offset`,
        or the base of a batch that straddled it."""
        found = self.find_batch(offset)
        if found is None:
            self.next_offset = min(self.next_offset, max(offset, self.base_offset))
            return
        position, first_dropped = found
        os.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(first_dropped.base_offset)
        self.txn_index.truncate_to(first_dropped.base_offset)
        self._scan_tail()
        self.next_offset = max(self.next_offset, min(offset, first_dropped.base_offset))

    def flush(self) -> None:
        os.fdatasync(self.fd)
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self.unflushed = 0

    # -- reading -------------------------------------------------------------------------------

    def headers(self, position: int = 0):
        """(position, header) of each batch from `position` on, reading only headers."""
        while position + HEADER_SIZE <= self.size:
            raw = os.pread(self.fd, HEADER_SIZE, position)
            if len(raw) < HEADER_SIZE:
                return
            header = read_header(raw)
            yield position, header
            position += header.size

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the batch holding `offset`, or the first batch after it.
        The index entry it starts from must point at the batch holding the entry's offset: an
        entry damaged on disk but still in order would otherwise skip records silently."""
        if offset >= self.next_offset:
            return None
        slot = self.index.slot(offset)
        position = self.index.values[slot] if slot >= 0 else 0
        for position, header in self.headers(position):
            if slot >= 0:
                indexed = self.base_offset + self.index.keys[slot]
                if header.magic != MAGIC or not header.base_offset <= indexed <= header.last_offset:
                    log.warning("%s: entry %d says offset %d is at byte %d, where the log holds no batch with "
                                "it; rebuilding the indexes of %s", self.index.path, slot, indexed, position, self.path)
                    self.recover(self.next_offset)
                    return self.find_batch(offset)
                slot = -1
            if header.last_offset >= offset:
                return position, header
        return None

    def find_timestamp(self, timestamp: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose max timestamp is at least `timestamp`."""
        found = self.find_batch(self.time_index.lookup(timestamp))
        if found is None:
            return None
        for position, header in self.headers(found[0]):
            if header.max_timestamp >= timestamp:
                return position, header
        return None

    def largest_timestamp(self) -> int:
        """What retention.ms compares with: the largest record timestamp, else the file's mtime."""
        return self.max_timestamp if self.max_timestamp >= 0 else int(os.fstat(self.fd).st_mtime * 1000)

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        self.close_fd()

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def paths(self) -> tuple[str, str, str, str]:
        """Its files, in SUFFIXES order."""
        return self.path, self.index.path, self.time_index.path, self.txn_index.path

    def delete(self) -> None:
        """Unlink the files now; the caller closes the descriptor later so in-flight sendfiles finish."""
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        for path in self.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _has_zero_page(data, start: int, end: int) -> bool:
    """Whether [start, end) holds a page that reads as zeros from `start` (or its own start) to its
    end: what a file shows where appended data never left the page cache."""
    page_end = min((start // PAGE + 1) * PAGE, len(data))
    while start < end:
        if not any(data[start:page_end]):
            return True
        start, page_end = page_end, min(page_end + PAGE, len(data))
    return False
