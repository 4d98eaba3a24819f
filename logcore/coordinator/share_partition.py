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
from dataclasses import dataclass
from typing import Iterable, Iterator

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


@dataclass
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    deadline: float = 0.0  # the lock's end (time.monotonic()), while ACQUIRED


@dataclass(frozen=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    def __init__(self, start_offset: int, records: dict[int, InFlight] | None = None) -> None:
        self.start_offset = start_offset
        self.records: dict[int, InFlight] = records or {}
        self.end_offset = max(self.records, default=start_offset - 1) + 1
        self.state_epoch = 0  # bumped by an admin reset: what is in flight from before is void

    # -- acquiring ---------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first available record of the window, else its end."""
        available = [o for o, r in self.records.items() if r.state is RecordState.AVAILABLE]
        return min(available, default=self.end_offset)

    def acquire(self, batches: Iterable[BatchHeader], member: str, max_records: int, deadline: float,
                max_in_flight: int, archived: set[int] = frozenset()) -> tuple[list[Acquired], list[int]]:
        """Acquire for `member` what the `batches` (read from `next_fetch_offset()`, in order) hold that
        is available, up to about `max_records`: (the acquired ranges, the indexes of the batches that
        hold them). `archived`: offsets of batches to skip (aborted under read_committed)."""
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        chosen: list[int] = []
        for index, batch in enumerate(batches):
            if len(acquired) >= max_records:
                break
            if batch.last_offset < self.start_offset:
                continue
            if batch.base_offset >= self.end_offset:  # new records: the whole batch, or nothing
                if self.end_offset - self.start_offset >= max_in_flight:
                    break
                self._archive_gap(self.end_offset, batch.base_offset)
                skip = batch.is_control or batch.base_offset in archived
                for offset in range(batch.base_offset, batch.last_offset + 1):
                    if skip:
                        self.records[offset] = InFlight(RecordState.ARCHIVED)
                    else:
                        self.records[offset] = InFlight(RecordState.ACQUIRED, 1, member, deadline)
                        acquired.append((offset, 1))
                self.end_offset = batch.last_offset + 1
                if not skip:
                    chosen.append(index)
                continue
            took = False
            for offset in range(max(batch.base_offset, self.start_offset), batch.last_offset + 1):
                record = self.records.get(offset)
                if record is None or record.state is not RecordState.AVAILABLE or len(acquired) >= max_records:
                    continue
                record.state, record.member, record.deadline = RecordState.ACQUIRED, member, deadline
                record.delivery_count += 1
                acquired.append((offset, record.delivery_count))
                took = True
            if took:
                chosen.append(index)
        self.advance()
        return _ranges(acquired), chosen

    def _archive_gap(self, start: int, end: int) -> None:
        for offset in range(max(start, self.start_offset), end):
            self.records[offset] = InFlight(RecordState.ARCHIVED)

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
        for offset in range(first, last + 1):
            record = self.records.get(offset)
            if record is None or record.state is not RecordState.ACQUIRED or record.member != member:
                held = "not in flight" if record is None else f"{record.state.name} by {record.member}"
                raise InvalidRecordState(f"offset {offset} is {held}, not acquired by member {member}")
        for i, offset in enumerate(range(first, last + 1)):
            kind = kinds[0 if len(kinds) == 1 else i]
            record = self.records[offset]
            if kind is AckType.ACCEPT:
                self._settle(record, RecordState.ACKNOWLEDGED)
            elif kind is AckType.RELEASE:
                self._make_available(record, delivery_limit)
            else:
                self._settle(record, RecordState.ARCHIVED)
        self.advance()

    @staticmethod
    def _settle(record: InFlight, state: RecordState) -> None:
        record.state, record.member, record.deadline = state, None, 0.0

    def _make_available(self, record: InFlight, delivery_limit: int) -> None:
        self._settle(record, RecordState.ARCHIVED if record.delivery_count >= delivery_limit
                     else RecordState.AVAILABLE)

    def release_member(self, member: str, delivery_limit: int) -> bool:
        """`member` left: its locks go. Whether anything changed."""
        mine = [r for r in self.records.values() if r.state is RecordState.ACQUIRED and r.member == member]
        for record in mine:
            self._make_available(record, delivery_limit)
        self.advance()
        return bool(mine)

    def expire_locks(self, now: float, delivery_limit: int) -> bool:
        """Records whose lock ended go back (or to the archive). Whether any did."""
        ended = [r for r in self.records.values() if r.state is RecordState.ACQUIRED and r.deadline <= now]
        for record in ended:
            self._make_available(record, delivery_limit)
        self.advance()
        return bool(ended)

    def earliest_lock_end(self) -> float | None:
        return min((r.deadline for r in self.records.values() if r.state is RecordState.ACQUIRED), default=None)

    def advance(self) -> None:
        """Move the start offset past every leading record that is done with."""
        while self.start_offset < self.end_offset:
            record = self.records.get(self.start_offset)
            if record is None or record.state not in DONE:
                break
            del self.records[self.start_offset]
            self.start_offset += 1
        if self.start_offset >= self.end_offset:
            self.end_offset = self.start_offset

    def reset(self, offset: int) -> None:
        """An admin moved the start offset (AlterShareGroupOffsets, with no member fetching): the
        window is emptied and the state epoch bumped."""
        self.records.clear()
        self.start_offset = self.end_offset = offset
        self.state_epoch += 1

    # -- the durable form --------------------------------------------------------------------------

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """The window as runs (first, last, state, delivery count); an acquired record is written as
        available: after a restart its lock is gone, its delivery counted."""
        runs: list[list[int]] = []
        for offset in sorted(self.records):
            record = self.records[offset]
            state = RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state
            if runs and runs[-1][1] == offset - 1 and runs[-1][2] == state and runs[-1][3] == record.delivery_count:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset, int(state), record.delivery_count])
        return [tuple(run) for run in runs]

    @classmethod
    def restore(cls, start_offset: int, state_epoch: int, batches: Iterable[tuple[int, int, int, int]]) -> "SharePartition":
        records = {offset: InFlight(RecordState(state), count)
                   for first, last, state, count in batches for offset in range(max(first, start_offset), last + 1)}
        partition = cls(start_offset, records)
        partition.state_epoch = state_epoch
        return partition


def _ranges(acquired: list[tuple[int, int]]) -> list[Acquired]:
    """Consecutive offsets of one delivery count as one range."""
    out: list[Acquired] = []
    for offset, count in acquired:
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = Acquired(out[-1].first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out


def iter_batches(data: bytes) -> Iterator[tuple[BatchHeader, int, int]]:
    """(header, start, end) of each whole batch in `data`."""
    position = 0
    while position + HEADER_SIZE <= len(data):
        header = read_header(data, position)
        if position + header.size > len(data):
            return
        yield header, position, position + header.size
        position += header.size
