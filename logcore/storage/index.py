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


class IndexFile:
    """The file handling both indexes share: two parallel columns of ints, Kafka's fixed-size
    entries on disk, appends through one unbuffered descriptor, fsync only when written to."""

    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")  # what lookups search: relative offset / timestamp
        self.values = array("q")  # what they return: position / relative offset
        self._file = None
        self._dirty = False
        self.damage = ""  # why `load` refused the file, for the log

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def size_bytes(self) -> int:
        return len(self.keys) * self.ENTRY.size

    def load(self) -> bool:
        """Read the file; False when it is missing or its entries are not strictly ordered (then the
        segment rebuilds it). Trailing all-zero entries are Kafka's preallocation: cut off, so that
        appends follow the last real entry."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.damage = f"{self.path} is missing"
            return False
        if len(data) % self.ENTRY.size:
            self.damage = f"{self.path}: {len(data)} bytes is not a whole number of {self.ENTRY.size}-byte entries"
            return False
        keys, values = array("q"), array("q")
        for key, value in self.ENTRY.iter_unpack(data):
            if key == 0 and value == 0 and keys:
                break
            if keys and not self.in_order(keys[-1], values[-1], key, value):
                self.damage = (f"{self.path}: entry {len(keys)} (byte {len(keys) * self.ENTRY.size}) is out of "
                               f"order after the one before it")
                return False
            keys.append(key)
            values.append(value)
        self.keys, self.values = keys, values
        if len(keys) * self.ENTRY.size < len(data):
            self._truncate(len(keys))
        return True

    @staticmethod
    def in_order(key: int, value: int, next_key: int, next_value: int) -> bool:
        raise NotImplementedError

    def reset(self) -> None:
        """Empty the index (creating its file)."""
        self._truncate(0)

    def _truncate(self, entries: int) -> None:
        del self.keys[entries:]
        del self.values[entries:]
        self.close()
        with open(self.path, "ab") as f:
            f.truncate(entries * self.ENTRY.size)
        self._dirty = True

    def _append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        if self._file is None:
            self._file = open(self.path, "ab", buffering=0)
        self._file.write(self.ENTRY.pack(key, value))
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            fd = self._file.fileno() if self._file else os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                if self._file is None:
                    os.close(fd)
            self._dirty = False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class OffsetIndex(IndexFile):
    """Relative offset → file position of the batch holding it (Kafka writes the batch's last
    offset, binlake its base offset; a lookup works with either)."""

    ENTRY = struct.Struct(">ii")

    @staticmethod
    def in_order(rel: int, pos: int, next_rel: int, next_pos: int) -> bool:
        return next_rel > rel and next_pos > pos

    @property
    def last_position(self) -> int:
        return self.values[-1] if self.values else 0

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def slot(self, offset: int) -> int:
        """Which entry a lookup of `offset` uses: the last at or before it (-1 if none)."""
        return bisect.bisect_right(self.keys, offset - self.base_offset) - 1

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch at or before `offset` (0 if none)."""
        slot = self.slot(offset)
        return self.values[slot] if slot >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past `position`."""
        self._truncate(bisect.bisect_left(self.values, position))


class TimeIndex(IndexFile):
    """Timestamp → relative offset of the batch that first reached it. Kafka's meaning: an entry is
    the largest timestamp seen so far when the entry was written, so timestamps strictly grow."""

    ENTRY = struct.Struct(">qi")

    @staticmethod
    def in_order(ts: int, rel: int, next_ts: int, next_rel: int) -> bool:
        return next_ts > ts and next_rel >= rel

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the newest entry."""
        return (self.keys[-1], self.base_offset + self.values[-1]) if self.keys else None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) unless the index already reaches that timestamp."""
        if self.keys and timestamp <= self.keys[-1]:
            return
        self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is below `timestamp` (base offset if none): no
        batch up to it reaches `timestamp`, so a scan from there finds the first batch that does."""
        i = bisect.bisect_left(self.keys, timestamp)
        return self.base_offset + (self.values[i - 1] if i else 0)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or after `offset`."""
        self._truncate(bisect.bisect_left(self.values, offset - self.base_offset))
