"""Canal's delivery semantics over a destination's entry log, for one (destination, client id), without I/O.

The stream holds the log's entries from the last ack on (a ring of at most `capacity` entries, as Canal's
memory store: while the client holds that many un-acked, reading waits). `take` hands out the next batch (up to
`fetch_size` entries, or `fetch_size * memunit` bytes in Canal's MEMSIZE mode) past the client's filter; a batch
covers a range of log offsets, the entries the filter dropped included. `ack` must name the oldest un-acked
batch (Canal's rule: acks in the order batches were handed out) and returns the offset to commit: the end of
that batch. With DDL isolation (Canal's get.ddl.isolation) a DDL entry ends the batch before it, or is the batch
when it comes first, as Canal's memory store cuts batches. `rollback` (of one batch, or 0: all) forgets every un-acked batch; the next `take` hands out the
same entries again, in order.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


class BatchError(Exception):
    """A client's ack or rollback names no batch it may ack; the message is Canal's."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    key: bytes | None        # b"db.table"; None: a transaction's BEGIN or END
    value: bytes             # a serialized Canal Entry
    ddl: bool = False        # a DDL's entry, put in a batch of its own (canal.instance.get.ddl.isolation)


@dataclass(frozen=True, slots=True)
class Batch:
    id: int
    start: int               # log offsets: the batch covers [start, end)
    end: int
    size: int                # entries handed out


def table_filter(text: str, transaction_entries: bool = True) -> Callable[[bytes | None], bool]:
    """Canal's subscription filter: `,`-separated regexes over `db.table`, whole and case-insensitive, none: all
    tables. Entries without a table (BEGIN, END) pass when `transaction_entries`."""
    patterns = [re.compile(p, re.IGNORECASE) for p in text.split(",") if p]
    cache: dict[bytes, bool] = {}

    def accepts(key: bytes | None) -> bool:
        if key is None:
            return transaction_entries
        hit = cache.get(key)
        if hit is None:
            name = key.decode("utf-8", "replace").lower()
            hit = cache[key] = not patterns or any(p.fullmatch(name) for p in patterns)
        return hit
    return accepts


class Stream:
    """One (destination, client id): entries from the last ack on, and the batches handed out. Event loop only;
    the reader appends, the client's requests take, ack and roll back."""

    def __init__(self, client: str, acked: int, capacity: int, next_id: Callable[[], int]) -> None:
        self.client = client
        self.acked = acked                      # the committed offset: the log offset the stream resumes at
        self.capacity = capacity
        self._next_id = next_id
        self.entries: deque[LogEntry] = deque()
        self.cursor = 0                         # index in `entries` of the next entry to hand out
        self.batches: deque[Batch] = deque()

    @property
    def room(self) -> int:
        return self.capacity - len(self.entries)

    @property
    def read_to(self) -> int:
        """The log offset the reader goes on from."""
        return self.entries[-1].offset + 1 if self.entries else self.acked

    def append(self, entries: list[LogEntry]) -> None:
        self.entries.extend(entries)

    def ready(self, accepts: Callable[[bytes | None], bool], wanted: int) -> bool:
        """Whether `wanted` entries past the filter wait beyond the cursor."""
        found = 0
        for i in range(self.cursor, len(self.entries)):
            if accepts(self.entries[i].key):
                found += 1
                if found >= wanted:
                    return True
        return False

    def take(self, fetch_size: int, accepts: Callable[[bytes | None], bool],
             max_bytes: int | None = None) -> tuple[Batch, list[bytes]] | None:
        """The next batch and its entries, or None when no entry past the filter waits. `max_bytes`: Canal's
        MEMSIZE mode (entries are taken while the batch holds at most that many bytes, so one may pass it)."""
        entries, values, size = self.entries, [], 0
        i, last = self.cursor, None
        while i < len(entries) and len(values) < fetch_size and (max_bytes is None or size <= max_bytes):
            entry = entries[i]
            if accepts(entry.key):
                if entry.ddl and values:        # (a DDL after other entries: the next batch's, alone)
                    break
                values.append(entry.value)
                size += len(entry.value)
                last = i
                if entry.ddl:
                    break
            i += 1
        if last is None:
            return None
        batch = Batch(self._next_id(), entries[self.cursor].offset, entries[last].offset + 1, len(values))
        self.batches.append(batch)
        self.cursor = last + 1
        return batch, values

    def ack(self, batch_id: int) -> int:
        """Ack the oldest batch; returns the offset to commit. BatchError for any other id."""
        if not self.batches or all(b.id != batch_id for b in self.batches):
            raise BatchError(f"ack error , clientId:{self.client} batchId:{batch_id} is not exist , please check")
        first = self.batches[0]
        if first.id != batch_id:
            raise BatchError(f"batchId:{batch_id} is not the firstly:{first.id}")
        self.batches.popleft()
        dropped = 0
        while self.entries and self.entries[0].offset < first.end:
            self.entries.popleft()
            dropped += 1
        self.cursor -= dropped
        self.acked = first.end
        return first.end

    def rollback(self, batch_id: int) -> None:
        """Forget every un-acked batch (batch_id 0, or an un-acked batch's id): they come again, in order."""
        if batch_id and all(b.id != batch_id for b in self.batches):
            raise BatchError(f"rollback error, clientId:{self.client} batchId:{batch_id} is not exist , please check")
        self.batches.clear()
        self.cursor = 0
