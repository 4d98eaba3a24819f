"""One segment: `<base>.log` plus its sparse `.index` and `.timeindex`.

Owned by its PartitionLog; event loop only. Appends are whole record-set writes; reads return
file positions so the fetch path can `sendfile` without reading records into Python.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from dataclasses import dataclass

from .batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchHeader, crc_matches, read_header
from .index import OffsetIndex, TimeIndex

log = logging.getLogger(__name__)


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class CorruptSegment(Exception):
    """A batch in the middle of a segment fails validation while valid batches follow it."""

    def __init__(self, path: str, position: int, offset: int | None, reason: str) -> None:
        where = f"byte {position}" + (f" (offset {offset})" if offset is not None else "")
        super().__init__(
            f"{path}: corrupt record batch at {where}: {reason}; valid batches follow, so it was not "
            f"truncated away. Inspect it with `binlake dump-log {path}`, then restore the partition from a "
            f"replica or backup, or truncate the file at byte {position} to accept the loss."
        )
        self.path, self.position, self.offset = path, position, offset


@dataclass
class RecoveryResult:
    truncated_bytes: int
    batches: int


class Segment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        self.path = os.path.join(directory, segment_name(base_offset, ".log"))
        self.index = OffsetIndex(os.path.join(directory, segment_name(base_offset, ".index")), base_offset)
        self.time_index = TimeIndex(os.path.join(directory, segment_name(base_offset, ".timeindex")), base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.created_ms = int(time.time() * 1000)
        self._bytes_since_index = 0
        self.unflushed = 0

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Open an existing segment after a clean shutdown: trust the file, reuse valid indexes."""
        self.created_ms = int(os.stat(self.path).st_mtime * 1000)
        if self.size == 0:
            self.index.reset()
            self.time_index.reset()
            return
        if not (self.index.load() and self.time_index.load()):
            log.warning("rebuilding indexes of %s", self.path)
            self.recover()
            return
        # The last batch's header gives the next offset; scan from the last index entry.
        position = self.index.positions[-1] if len(self.index.positions) else 0
        header = None
        for position, header in self.headers(position):
            pass
        self.next_offset = header.next_offset if header else self.base_offset

    def recover(self) -> RecoveryResult:
        """Validate every batch, rebuild both indexes and cut a torn tail. Raises CorruptSegment when
        an invalid batch has valid ones after it (that is damage, not an interrupted write)."""
        self.index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        batches = 0
        if self.size == 0:
            return RecoveryResult(0, 0)
        with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as data:
            position = 0
            while position < self.size:
                reason = self._invalid_reason(data, position)
                if reason:
                    if self._valid_batch_after(data, position):
                        header = read_header(data, position) if self.size - position >= HEADER_SIZE else None
                        raise CorruptSegment(self.path, position, header.base_offset if header else None, reason)
                    break
                header = read_header(data, position)
                self._index_batch(header, position)
                self.next_offset = header.next_offset
                position += header.size
                batches += 1
        truncated = self.size - position
        if truncated:
            log.warning("%s: truncating %d bytes of torn tail at byte %d (next offset %d)",
                        self.path, truncated, position, self.next_offset)
            os.ftruncate(self.fd, position)
            self.size = position
        return RecoveryResult(truncated, batches)

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
        if not crc_matches(data, position, header):
            return "CRC32C mismatch"
        return None

    def _valid_batch_after(self, data, position: int) -> bool:
        """Whether a well-formed batch starts anywhere after a bad one. Tries the bad batch's own
        length first (one corrupt payload), then searches for a plausible header."""
        if self.size - position >= HEADER_SIZE:
            header = read_header(data, position)
            nxt = position + header.size
            if header.batch_length > 0 and nxt + HEADER_SIZE <= self.size and self._plausible(data, nxt):
                return True
        magic_at = position + 1
        while True:
            magic_at = data.find(bytes([MAGIC]), magic_at + 1)
            if magic_at < 0 or magic_at - 16 + HEADER_SIZE > self.size:
                return False
            if self._plausible(data, magic_at - 16):
                return True

    def _plausible(self, data, position: int) -> bool:
        if position < 0 or self.size - position < HEADER_SIZE:
            return False
        header = read_header(data, position)
        return (header.magic == MAGIC and header.base_offset >= self.base_offset
                and HEADER_SIZE - LOG_OVERHEAD <= header.batch_length
                and position + header.size <= self.size and crc_matches(data, position, header))

    # -- writing -------------------------------------------------------------------------------

    def append(self, buf, headers: list[BatchHeader]) -> None:
        position = self.size
        written = os.write(self.fd, buf)
        if written != len(buf):
            os.ftruncate(self.fd, position)
            raise OSError(f"short write to {self.path}: {written} of {len(buf)} bytes")
        for header in headers:
            self._index_batch(header, position)
            position += header.size
        self.size = position
        self.next_offset = headers[-1].next_offset
        self.unflushed += sum(h.record_count for h in headers)

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_index > self.index_interval_bytes:
            self.index.append(header.base_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.time_index.maybe_append(header.max_timestamp, header.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after `offset` (which must be a batch boundary or past the end)."""
        found = self.find_batch(offset)
        if found is None:
            return
        position, _ = found
        os.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.next_offset = offset if position else self.base_offset

    def flush(self) -> None:
        os.fsync(self.fd)
        self.index.flush()
        self.time_index.flush()
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
        """Position and header of the batch holding `offset`, or the first batch after it."""
        if offset >= self.next_offset:
            return None
        for position, header in self.headers(self.index.lookup(offset)):
            if header.last_offset >= offset:
                return position, header
        return None

    def find_timestamp(self, timestamp: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose max timestamp is at least `timestamp`."""
        start_offset = self.time_index.lookup(timestamp)
        found = self.find_batch(start_offset)
        if found is None:
            return None
        for position, header in self.headers(found[0]):
            if header.max_timestamp >= timestamp:
                return position, header
        return None

    @property
    def max_timestamp(self) -> int:
        return self.time_index.max_timestamp

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        os.close(self.fd)

    def delete(self) -> None:
        """Unlink the files now; the caller closes the descriptor later so in-flight sendfiles finish."""
        self.index.close()
        self.time_index.close()
        for path in (self.path, self.index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
