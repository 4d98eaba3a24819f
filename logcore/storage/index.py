"""Sparse segment indexes in Kafka's file format, held in memory and appended to their files.

`.index`: 8-byte entries (offset relative to the segment base: int32, file position: int32).
`.timeindex`: 12-byte entries (timestamp: int64, relative offset: int32).
Indexes are caches: `Segment` rebuilds them from the log whenever they are missing or inconsistent.
Owned by the segment that holds them; event loop only.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.relative_offsets = array("q")
        self.positions = array("q")
        self._file = None

    def load(self) -> bool:
        """Read the file; False when it is missing or not a valid index (then it must be rebuilt)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) % _OFFSET_ENTRY.size:
            return False
        last_offset = last_position = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel == 0 and pos == 0 and last_position >= 0:
                break  # Kafka preallocates index files with zeros
            if rel <= last_offset or pos <= last_position:
                return False
            self.relative_offsets.append(rel)
            self.positions.append(pos)
            last_offset, last_position = rel, pos
        return True

    def reset(self) -> None:
        self.relative_offsets = array("q")
        self.positions = array("q")
        self.close()
        with open(self.path, "wb"):
            pass

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        self.relative_offsets.append(rel)
        self.positions.append(position)
        self._open().write(_OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch at or before `offset` (0 if none)."""
        i = bisect.bisect_right(self.relative_offsets, offset - self.base_offset)
        return self.positions[i - 1] if i else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past `position` and rewrite the file."""
        i = bisect.bisect_left(self.positions, position)
        del self.relative_offsets[i:]
        del self.positions[i:]
        self._rewrite(b"".join(_OFFSET_ENTRY.pack(r, p) for r, p in zip(self.relative_offsets, self.positions)))

    def _rewrite(self, data: bytes) -> None:
        self.close()
        with open(self.path, "wb") as f:
            f.write(data)

    def _open(self):
        if self._file is None:
            self._file = open(self.path, "ab", buffering=0)
        return self._file

    def flush(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TimeIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.relative_offsets = array("q")
        self._file = None

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def load(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) % _TIME_ENTRY.size:
            return False
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if ts == 0 and rel == 0 and self.timestamps:
                break
            if self.timestamps and (ts <= self.timestamps[-1] or rel < self.relative_offsets[-1]):
                return False
            self.timestamps.append(ts)
            self.relative_offsets.append(rel)
        return True

    def reset(self) -> None:
        self.timestamps = array("q")
        self.relative_offsets = array("q")
        self.close()
        with open(self.path, "wb"):
            pass

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Record (timestamp → first offset of the batch reaching it) when the max timestamp grows."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        rel = offset - self.base_offset
        self.timestamps.append(timestamp)
        self.relative_offsets.append(rel)
        if self._file is None:
            self._file = open(self.path, "ab", buffering=0)
        self._file.write(_TIME_ENTRY.pack(timestamp, rel))

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is below `timestamp` (base offset if none): a
        scan from there finds the first batch whose max timestamp reaches `timestamp`."""
        i = bisect.bisect_left(self.timestamps, timestamp)
        return self.base_offset + (self.relative_offsets[i - 1] if i else 0)

    def truncate_to_offset(self, offset: int) -> None:
        i = bisect.bisect_left(self.relative_offsets, offset - self.base_offset)
        del self.timestamps[i:]
        del self.relative_offsets[i:]
        self.close()
        with open(self.path, "wb") as f:
            f.write(b"".join(_TIME_ENTRY.pack(t, r) for t, r in zip(self.timestamps, self.relative_offsets)))

    def flush(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
