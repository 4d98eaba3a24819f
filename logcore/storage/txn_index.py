"""`<base>.txnindex`: the aborted transactions whose abort marker sits in one segment, in Kafka's
format, so read_committed fetches can tell consumers which producers' data to skip.

Each entry is 34 bytes, big-endian:

    int16 version=0  int64 producer_id  int64 first_offset  int64 last_offset  int64 last_stable_offset

`last_offset` is the abort marker's offset; `last_stable_offset` is the partition's LSO right after
the abort. Like the other indexes it is a cache: the producer state rebuild writes it again from
the log. The file is created on the first abort, so most segments have none.

Owned by its Segment; event loop only.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self.damage = ""  # what `_read` found wrong with the file, for the log
        self.entries: list[AbortedTxn] = self._read()
        self._fd: int | None = None
        self._dirty = False

    def _read(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        usable = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is rebuilt from the log
        entries: list[AbortedTxn] = []
        for pos in range(0, usable, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            entry = AbortedTxn(*fields)
            if version != VERSION:
                self.damage = f"entry {len(entries)} (byte {pos}) has version {version}, not {VERSION}"
            elif entry.first_offset > entry.last_offset or (entries and entry.last_offset <= entries[-1].last_offset):
                self.damage = f"entry {len(entries)} (byte {pos}) is out of order: {entry}"
            if self.damage:
                break
            entries.append(entry)
        return entries

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def create(self) -> None:
        """Make the file exist, even empty (a cleaned segment's replaces the old one's)."""
        self._file()

    def append(self, entry: AbortedTxn) -> None:
        os.write(self._file(), _ENTRY.pack(VERSION, *entry))
        self.entries.append(entry)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose abort marker is at or after `offset`."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        os.ftruncate(self._file(), len(keep) * ENTRY_SIZE)
        self._dirty = True

    def flush(self) -> None:
        if self._fd is not None and self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def collect_aborted(segments, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """Aborted transactions a read_committed fetch of [fetch_offset, upper_offset) must report.
    An abort is indexed in its marker's segment, which may lie past `upper_offset`; as in Kafka the
    search ends at the first entry whose LSO reaches `upper_offset` (nothing later can overlap)."""
    found: list[AbortedTxn] = []
    for segment in segments:
        if segment.next_offset <= fetch_offset:
            continue
        for entry in segment.txn_index.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return found
    return found
