"""Leader epoch cache: the first offset of each leader epoch in one partition's log, kept in the
partition directory's `leader-epoch-checkpoint` (Kafka's format: `epoch start-offset` entries).

It answers OffsetForLeaderEpoch and tells a replica where its log diverges from a new leader's.
Like the indexes it is a cache of the batch headers' leader epochs: rebuilt from the log when the
file is missing or unreadable. Owned by its PartitionLog; event loop only; every change is
written through before the method returns, but those made together in `one_write`. A new log's
changes are not fsynced until its first flush makes its directory durable (`sync_later`,
`make_durable`): a crash before then recovers the whole log, and its epochs with it.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os

from .checkpoint import CheckpointError, read_entries, write_entries

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both strictly increasing
        self.sync_later = False  # a new log's: written through, fsynced by `make_durable`
        self._written: list[tuple[int, int]] | None = None  # the file's entries as last read or written
        self._deferred = False  # inside `one_write`

    def load(self) -> bool:
        """Read the file; False when it is missing or damaged (the log must then rebuild it)."""
        try:
            found = read_entries(self.path, 2)
        except CheckpointError as exc:
            log.warning("%s; rebuilding it from the log", exc)
            return False
        if found is None:
            return False
        entries = [(int(epoch), int(start)) for epoch, start in found]
        if any(a[0] >= b[0] or a[1] > b[1] for a, b in zip(entries, entries[1:])):
            log.warning("%s: epochs out of order; rebuilding it from the log", self.path)
            return False
        self.entries, self._written = entries, list(entries)
        return True

    @contextlib.contextmanager
    def one_write(self):
        """The changes made inside are written once, at the end, and only if the entries then differ
        from the file's: opening a log cuts an epoch that began at its end with nothing written
        yet, and leading it assigns that epoch again, which would cost two writes (each fsynced) for
        no change. Until the end the file holds what it held before (a crash meanwhile redoes them)."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False
        if self.entries != self._written and (self.entries or os.path.exists(self.path)):
            self._save()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` begins at `start_offset`; older or repeated epochs change nothing."""
        if epoch <= self.latest_epoch:
            return
        # A later epoch starting no later than an earlier one supersedes it (nothing was written in it).
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch ≤ `epoch`, the first offset after it), Kafka's answer to OffsetForLeaderEpoch:
        the latest epoch ends at the log end; an epoch past the latest is unknown (-1, -1)."""
        if epoch == UNDEFINED or not self.entries:
            return UNDEFINED, UNDEFINED
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return UNDEFINED, UNDEFINED
        floor = epochs[higher - 1] if higher else epoch
        return floor, self.entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at `end_offset`: forget epochs that start at or past it."""
        keep = [e for e in self.entries if e[1] < end_offset]
        if keep != self.entries:
            self.entries = keep
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop epochs wholly before it and move the first
        remaining one's start up to it."""
        i = bisect.bisect_right([start for _, start in self.entries], start_offset)
        if i == 0:
            return
        keep = [(self.entries[i - 1][0], start_offset)] + self.entries[i:]
        if keep != self.entries:
            self.entries = keep
            self._save()

    def reset(self, entries: list[tuple[int, int]]) -> None:
        self.entries = list(entries)
        if entries or os.path.exists(self.path):  # (a missing file already says "no epochs")
            self._save()

    def make_durable(self) -> None:
        """fsync what was written without (the log makes its directory durable next)."""
        if self.sync_later:
            if os.path.exists(self.path):
                with open(self.path, "rb") as f:
                    os.fsync(f.fileno())
            self.sync_later = False

    def _save(self) -> None:
        if self._deferred:
            return
        write_entries(self.path, self.entries, sync=not self.sync_later)
        self._written = list(self.entries)
