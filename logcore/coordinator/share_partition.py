"""One share-partition: the records of one topic partition as one share group consumes them (KIP-932,
Kafka's SharePartition). Pure state and rules; no I/O.

    start offset (SPSO)  every record before it is done with (acknowledged or archived)
    end offset           the next offset never handed out; [start, end) is the in-flight window

Each offset of the window has a state and a delivery count:

    AVAILABLE (0) ──acquire──▶ ACQUIRED (1) ──ACCEPT──▶ ACKNOWLEDGED (2)
        ▲                          │  ──REJECT──▶ ARCHIVED (4)
        └─RELEASE / lock timeout───┘  (ARCHIVED instead once the delivery count reached the limit)

A record is acquired by one member at a time, under a lock that ends at its deadline; acquiring
counts a delivery. The start offset moves past every leading record that is done. Offsets with no
record (control batches, offsets compacted away, aborted transactions under read_committed) are
archived as the window passes them. New records are acquired in whole batches, as Kafka does (a
batch may take a fetch past its max_records); released ones one by one.

Mutated on the event loop only, by the share coordinator (share_coordinator.py).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from ..protocol.errors import InvalidRecordState, InvalidRequest
from ..storage.batch import HEADER_SIZE, BatchHeader, read_header


class RecordState(enum.IntEnum):
    """As Kafka numbers them (also in `__share_group_state`)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """ShareFetch / ShareAcknowledge's acknowledge types."""

    GAP = 0       # no record at that offset (the client found none): done with
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_AVAILABLE, _ACQUIRED, _ACKNOWLEDGED, _ARCHIVED = (int(s) for s in RecordState)
_NOT_DONE = bytes(0 if i in DONE else 1 for i in range(256))  # (bytes.translate: 1 where a record is not done)


@dataclass(frozen=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    """The window [start offset, end offset) is kept as four parallel per-offset sequences (state
    bytes, delivery counts, holders, lock deadlines), so that a whole batch is acquired, a range
    acknowledged and the start offset moved with slice operations rather than an object per record."""

    def __init__(self, start_offset: int) -> None:
        self.start_offset = start_offset
        self.states = bytearray()
        self.counts: list[int] = []
        self.members: list[str | None] = []
        self.deadlines: list[float] = []  # a lock's end (time.monotonic()), while ACQUIRED
        self.state_epoch = 0  # bumped by an admin reset: what is in flight from before is void

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.states)

    def record(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, holder) of an offset of the window; None outside it."""
        i = offset - self.start_offset
        if not 0 <= i < len(self.states):
            return None
        return RecordState(self.states[i]), self.counts[i], self.members[i]

    def done_count(self) -> int:
        """Records of the window acknowledged or archived."""
        return len(self.states) - self.states.translate(_NOT_DONE).count(1)

    def _extend(self, state: int, n: int, count: int = 0, member: str | None = None, deadline: float = 0.0) -> None:
        self.states += bytes((state,)) * n
        self.counts += [count] * n
        self.members += [member] * n
        self.deadlines += [deadline] * n

    # -- acquiring ---------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first available record of the window, else its end."""
        i = self.states.find(_AVAILABLE)
        return self.end_offset if i < 0 else self.start_offset + i

    def acquire(self, batches: Iterable[BatchHeader], member: str, max_records: int, deadline: float,
                max_in_flight: int, skip: Callable[[BatchHeader], bool] = lambda header: False,
                ) -> tuple[list[Acquired], list[int]]:
        """Acquire for `member` what the `batches` (read from `next_fetch_offset()`, in order, taken
        lazily: no more than needed) hold that is available, up to about `max_records`: (the acquired
        ranges, the indexes of the batches that hold them). `skip(header)`, asked of each new batch in
        order: archive it instead (an aborted transaction's, under read_committed)."""
        ranges: list[list[int]] = []  # [first, last, delivery count]
        taken = 0
        chosen: list[int] = []
        for index, batch in enumerate(batches):
            if taken >= max_records:
                break
            if batch.last_offset < self.start_offset:
                continue
            took = 0
            start, end = self.start_offset, self.end_offset
            if batch.base_offset < end:  # released records in it, one by one
                hi = min(batch.last_offset + 1, end) - start
                i = self.states.find(_AVAILABLE, max(batch.base_offset, start) - start, hi)
                while i >= 0 and taken < max_records:
                    self.states[i], self.members[i], self.deadlines[i] = _ACQUIRED, member, deadline
                    self.counts[i] += 1
                    _add(ranges, start + i, self.counts[i])
                    taken, took = taken + 1, took + 1
                    i = self.states.find(_AVAILABLE, i + 1, hi)
            if batch.last_offset >= end:  # new records: the whole (rest of the) batch
                if end - start >= max_in_flight:
                    break
                if batch.base_offset > end:  # offsets with no record (compacted away)
                    self._extend(_ARCHIVED, batch.base_offset - end)
                first = max(batch.base_offset, end)
                n = batch.last_offset - first + 1
                if skip(batch) or batch.is_control:
                    self._extend(_ARCHIVED, n)
                else:
                    self._extend(_ACQUIRED, n, 1, member, deadline)
                    ranges.append([first, batch.last_offset, 1])
                    taken, took = taken + n, took + n
            if took:
                chosen.append(index)
        self.advance()
        return [Acquired(*r) for r in ranges], chosen

    # -- acknowledging -----------------------------------------------------------------------------

    def acknowledge(self, member: str, first: int, last: int, types: list[int], delivery_limit: int) -> None:
        """One acknowledgement batch of `member`: one type for every offset, or one per offset. All or
        nothing: raises InvalidRecordState (nothing changed) if any offset is not acquired by it."""
        if last < first or len(types) not in (1, last - first + 1):
            raise InvalidRequest(f"acknowledgement batch {first}-{last} has {len(types)} type(s): "
                                 f"give one, or one per offset")
        try:
            kinds = [AckType(t) for t in types]
        except ValueError:
            raise InvalidRequest(f"acknowledge types {types}: 0 (gap), 1 (accept), 2 (release) or 3 (reject)") from None
        lo, hi, n = first - self.start_offset, last - self.start_offset + 1, last - first + 1
        if lo < 0 or hi > len(self.states) or self.states.count(_ACQUIRED, lo, hi) != n \
                or self.members[lo:hi].count(member) != n:
            offset = next(o for o in range(first, last + 1) if (r := self.record(o)) is None
                          or r[0] is not RecordState.ACQUIRED or r[2] != member)
            held = self.record(offset)
            what = "not in flight" if held is None else f"{held[0].name} by {held[2]}"
            raise InvalidRecordState(f"offset {offset} is {what}, not acquired by member {member}")
        if len(kinds) == 1 and kinds[0] is not AckType.RELEASE:
            state = _ACKNOWLEDGED if kinds[0] is AckType.ACCEPT else _ARCHIVED
            self.states[lo:hi] = bytes((state,)) * n
            self.members[lo:hi] = [None] * n
        else:
            for i in range(lo, hi):
                kind = kinds[0 if len(kinds) == 1 else i - lo]
                if kind is AckType.RELEASE:
                    self._make_available(i, delivery_limit)
                else:
                    self.states[i] = _ACKNOWLEDGED if kind is AckType.ACCEPT else _ARCHIVED
                    self.members[i] = None
        self.advance()

    def _make_available(self, i: int, delivery_limit: int) -> None:
        self.states[i] = _ARCHIVED if self.counts[i] >= delivery_limit else _AVAILABLE
        self.members[i] = None

    def release_member(self, member: str, delivery_limit: int) -> bool:
        """`member` left: its locks go. Whether anything changed."""
        mine = [i for i, holder in enumerate(self.members) if holder == member and self.states[i] == _ACQUIRED]
        for i in mine:
            self._make_available(i, delivery_limit)
        self.advance()
        return bool(mine)

    def expire_locks(self, now: float, delivery_limit: int) -> bool:
        """Records whose lock ended go back (or to the archive). Whether any did."""
        if self.states.find(_ACQUIRED) < 0:
            return False
        ended = [i for i, state in enumerate(self.states) if state == _ACQUIRED and self.deadlines[i] <= now]
        for i in ended:
            self._make_available(i, delivery_limit)
        self.advance()
        return bool(ended)

    def earliest_lock_end(self) -> float | None:
        if self.states.find(_ACQUIRED) < 0:
            return None
        return min(self.deadlines[i] for i, state in enumerate(self.states) if state == _ACQUIRED)

    def advance(self) -> None:
        """Move the start offset past every leading record that is done with."""
        i = self.states.translate(_NOT_DONE).find(1)
        done = len(self.states) if i < 0 else i
        if done:
            del self.states[:done], self.counts[:done], self.members[:done], self.deadlines[:done]
            self.start_offset += done

    def reset(self, offset: int) -> None:
        """An admin moved the start offset (AlterShareGroupOffsets, with no member fetching): the
        window is emptied and the state epoch bumped."""
        self.states, self.counts, self.members, self.deadlines = bytearray(), [], [], []
        self.start_offset = offset
        self.state_epoch += 1

    # -- the durable form --------------------------------------------------------------------------

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """The window as runs (first, last, state, delivery count); an acquired record is written as
        available: after a restart its lock is gone, its delivery counted. (Written after every
        acquisition: a run of one state is found with `bytes.lstrip`, and a delivery count that holds to
        the run's end with one `list.count`, both in C.)"""
        runs: list[tuple[int, int, int, int]] = []
        written = self.states.replace(bytes((_ACQUIRED,)), bytes((_AVAILABLE,)))
        counts, base = self.counts, self.start_offset
        end = 0
        while end < len(written):
            i, state = end, written[end]
            rest = written[i:]
            end = i + len(rest) - len(rest.lstrip(bytes((state,))))
            while i < end:
                count = counts[i]
                j = end if counts[i:end].count(count) == end - i else next(
                    k for k in range(i + 1, end + 1) if k == end or counts[k] != count)
                runs.append((base + i, base + j - 1, state, count))
                i = j
        return runs

    @classmethod
    def restore(cls, start_offset: int, state_epoch: int, batches: Iterable[tuple[int, int, int, int]]) -> "SharePartition":
        """From a snapshot's runs (an offset of the window no run covers: available, never delivered)."""
        partition = cls(start_offset)
        partition.state_epoch = state_epoch
        for first, last, state, count in sorted(batches):
            first = max(first, partition.end_offset)
            if last < first:
                continue
            if first > partition.end_offset:
                partition._extend(_AVAILABLE, first - partition.end_offset)
            partition._extend(int(RecordState(state)), last - first + 1, count)
        return partition


def _add(ranges: list[list[int]], offset: int, count: int) -> None:
    """Add one acquired offset to `ranges`: consecutive offsets of one delivery count are one range."""
    if ranges and ranges[-1][1] == offset - 1 and ranges[-1][2] == count:
        ranges[-1][1] = offset
    else:
        ranges.append([offset, offset, count])


def region_batches(region, spans: list[tuple[int, int]]) -> Iterator[BatchHeader]:
    """The header of each whole batch of a log region (a FileRegion), read one header at a time as
    they are asked for, so a fetch that wants a few batches reads no more; each batch's (start, end)
    in the region is appended to `spans`."""
    position = 0
    while position + HEADER_SIZE <= region.length:
        header = read_header(os.pread(region.fd, HEADER_SIZE, region.position + position))
        if position + header.size > region.length:
            return
        spans.append((position, position + header.size))
        yield header
        position += header.size
