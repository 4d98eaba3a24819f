"""Producer state of one partition: idempotence (dedupe, sequence order, epoch fencing) and the
transactions open on it (which give the last stable offset).

For each producer id: its epoch, the last five batches it wrote (first/last sequence and offset,
so a retried batch is answered with its original offset instead of being written twice), the epoch
of the coordinator that last wrote a marker for it, and the first offset of its open transaction.

Compute, then commit: `prepare` checks a produce (or a marker) against the current state and
returns the new entries without touching anything; `commit` installs them once the bytes are in
the log. Replaying the log through the same transition (`check=False`) rebuilds the state.

Snapshots use Kafka's `<offset>.snapshot` format (version 1), written when a segment rolls and at
clean shutdown; `load` starts from the newest snapshot and replays the log after it.

    int16 version=1  uint32 crc32c(everything after it)  int32 count  then per producer:
    int64 producer_id  int16 epoch  int32 last_sequence  int64 last_offset  int32 offset_delta
    int64 timestamp  int32 coordinator_epoch  int64 current_txn_first_offset

Owned by its PartitionLog; event loop only, no `await` between `prepare` and `commit`.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .crc import crc32c

from ..protocol.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
    UnknownProducerId,
)
from .batch import BatchHeader
from .files import write_atomically
from .records import ControlMarker, CorruptRecords, control_marker, decode_batch
from .txn_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .segment import Segment

log = logging.getLogger(__name__)

CACHED_BATCHES = 5  # Kafka's; idempotent clients keep at most 5 requests in flight per partition
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = -1
    batches: tuple[BatchMetadata, ...] = ()  # newest last, at most CACHED_BATCHES
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int = -1  # first offset of the open transaction; -1 when none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def duplicate_of(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        return next((b for b in self.batches if b.first_seq == first_seq and b.last_seq == last_seq), None)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(frozen=True)
class PendingAppend:
    """What `prepare` decided: the producer's entry to install and the transaction a marker ends, or
    the batch already in the log that this append repeats (then nothing is written)."""

    entry: ProducerEntry | None
    completed: CompletedTxn | None = None
    duplicate: BatchMetadata | None = None


def read_marker(batch) -> ControlMarker:
    """The commit/abort marker of a whole control batch."""
    records = decode_batch(batch)
    marker = control_marker(records[0]) if len(records) == 1 else None
    if marker is None:
        raise InvalidRecord("control batch holds no transaction marker")
    return marker


def next_sequence(seq: int, increment: int) -> int:
    """Sequence numbers wrap from INT32_MAX to 0."""
    return (seq + increment) % (INT32_MAX + 1)


class Check(enum.Enum):
    """How much of an append to check (Kafka's ValidationType)."""

    CLIENT = "client"  # everything: epoch, sequence order, duplicates, transaction state
    EPOCH = "epoch"  # a coordinator's own batches (offset commits, markers) carry no sequence
    NONE = "none"  # replaying the log


def transition(entry: ProducerEntry, header: BatchHeader, marker: ControlMarker | None, check: Check,
               tp: str = "", transaction_version: int = 0) -> tuple[ProducerEntry, CompletedTxn | None,
                                                                     BatchMetadata | None]:
    """(new entry, transaction the batch completes, duplicate batch) for one batch whose offsets are
    already assigned; raises the error the append deserves at the `check` level. A marker of
    transactions v2 (`transaction_version` 2) carries the epoch its transaction's end bumped, so it
    must be newer than the producer's epoch here (KIP-890: the same epoch means the producer's next
    transaction already wrote, and this marker is a late one)."""
    pid, epoch = header.producer_id, header.producer_epoch
    if marker is not None:
        return _apply_marker(entry, header, marker, check is not Check.NONE, tp, transaction_version)
    first_seq = header.base_sequence
    last_seq = next_sequence(first_seq, header.last_offset_delta)
    if check is not Check.NONE and epoch < entry.epoch:
        raise InvalidProducerEpoch(
            f"producer {pid} wrote to {tp} with epoch {epoch}, but epoch {entry.epoch} is current: "
            f"a newer instance of this producer has fenced this one; close it")
    if check is Check.CLIENT:
        duplicate = entry.duplicate_of(epoch, first_seq, last_seq)
        if duplicate is not None:
            return entry, None, duplicate
        _check_sequence(entry, epoch, first_seq, tp)
        if not header.is_transactional and entry.txn_first_offset >= 0:
            raise InvalidTxnState(
                f"producer {pid} sent a non-transactional batch to {tp} while its transaction from offset "
                f"{entry.txn_first_offset} is open; commit or abort it first")
    batches = entry.batches if epoch == entry.epoch else ()
    batch = BatchMetadata(first_seq, last_seq, header.base_offset, header.last_offset, header.max_timestamp)
    txn_first = entry.txn_first_offset
    if header.is_transactional and txn_first < 0:
        txn_first = header.base_offset
    updated = replace(entry, epoch=epoch, batches=(*batches, batch)[-CACHED_BATCHES:],
                      last_timestamp=header.max_timestamp, txn_first_offset=txn_first)
    return updated, None, None


def _check_sequence(entry: ProducerEntry, epoch: int, first_seq: int, tp: str) -> None:
    pid = entry.producer_id
    if epoch != entry.epoch:
        if first_seq == 0:
            return
        if entry.epoch < 0:
            raise UnknownProducerId(
                f"{tp} has no state for producer {pid} (its data was removed by retention or it expired); "
                f"the producer must reset its sequence numbers")
        raise OutOfOrderSequence(
            f"producer {pid} started epoch {epoch} on {tp} at sequence {first_seq}; a new epoch starts at 0")
    last = entry.last_seq
    if first_seq != next_sequence(last, 1):
        raise OutOfOrderSequence(
            f"producer {pid} sent sequence {first_seq} to {tp} but the next expected is {next_sequence(last, 1)}: "
            f"a batch in between was lost")


def _apply_marker(entry: ProducerEntry, header: BatchHeader, marker: ControlMarker, check: bool,
                  tp: str, transaction_version: int) -> tuple[ProducerEntry, CompletedTxn, None]:
    pid, epoch = header.producer_id, header.producer_epoch
    if check:
        if epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"transaction marker for producer {pid} on {tp} has epoch {epoch}, older than {entry.epoch}")
        if transaction_version >= 2 and epoch == entry.epoch:
            raise InvalidProducerEpoch(
                f"transaction marker (transactions v2) for producer {pid} on {tp} has epoch {epoch}, which the "
                f"producer already writes with: the marker is late, its transaction ended before this epoch")
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"marker for producer {pid} on {tp} comes from coordinator epoch {marker.coordinator_epoch}, "
                f"but epoch {entry.coordinator_epoch} already wrote one")
    first = entry.txn_first_offset if entry.txn_first_offset >= 0 else header.base_offset
    completed = CompletedTxn(pid, first, header.base_offset, aborted=not marker.commit)
    updated = replace(entry, epoch=epoch, batches=entry.batches if epoch == entry.epoch else (),
                      coordinator_epoch=marker.coordinator_epoch, last_timestamp=header.max_timestamp,
                      txn_first_offset=-1)
    return updated, completed, None


class ProducerStateManager:
    def __init__(self, directory: str, tp: str) -> None:
        self.directory = directory
        self.tp = tp
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.loaded = False

    # -- the produce path ------------------------------------------------------------------------

    def prepare(self, records, headers: list[BatchHeader], first_offset: int,
                from_client: bool = True, transaction_version: int = 0) -> PendingAppend | None:
        """Check batches about to be written at `first_offset`; None when none carries a producer id.
        Raises the partition's error (OutOfOrderSequence, InvalidProducerEpoch, ...). Mutates nothing.
        `transaction_version`: of the transaction a marker ends (see `transition`)."""
        for header in headers:
            if header.is_control and from_client:
                raise InvalidRecord(f"produce requests to {self.tp} may not carry control batches")
            if header.producer_id < 0 and header.is_transactional:
                raise InvalidRecord(f"transactional batch for {self.tp} carries no producer id")
        if not any(h.producer_id >= 0 for h in headers):
            return None
        if len(headers) > 1:
            raise InvalidRecord(f"a produce request for {self.tp} with a producer id must hold exactly one record "
                                f"batch, as Kafka requires")
        header = headers[0]._replace(base_offset=first_offset)
        marker = read_marker(records) if header.is_control else None
        current = self.producers.get(header.producer_id) or ProducerEntry(header.producer_id)
        entry, done, duplicate = transition(current, header, marker, Check.CLIENT if from_client else Check.EPOCH,
                                            self.tp, transaction_version)
        if duplicate is not None:
            return PendingAppend(None, duplicate=duplicate)
        return PendingAppend(entry, done)

    def commit(self, pending: PendingAppend | None, segment: "Segment") -> None:
        """Install a prepared append whose bytes are now in `segment`; index its aborted transactions."""
        if pending is None or pending.entry is None:
            return
        self._install(pending.entry)
        if pending.completed is not None and pending.completed.aborted:
            segment.txn_index.append(self._aborted_entry(pending.completed))

    def _install(self, entry: ProducerEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.txn_first_offset >= 0:
            self.ongoing[entry.producer_id] = entry.txn_first_offset
        else:
            self.ongoing.pop(entry.producer_id, None)

    def _aborted_entry(self, txn: CompletedTxn) -> AbortedTxn:
        # The LSO right after this transaction completed: the next open one, else past the marker.
        others = [first for pid, first in self.ongoing.items() if pid != txn.producer_id]
        lso = min(others) if others else txn.last_offset + 1
        return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)

    # -- queries ---------------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, which read_committed readers may not pass."""
        return min(self.ongoing.values()) if self.ongoing else None

    def in_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether this producer's transaction is open here at `epoch`."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.epoch == epoch and entry.txn_first_offset >= 0

    def active_producers(self) -> list[ProducerEntry]:
        return list(self.producers.values())

    # -- retention and expiry --------------------------------------------------------------------

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose last write fell below the new log start (retention, DeleteRecords):
        their next write with a non-zero sequence gets UNKNOWN_PRODUCER_ID."""
        gone = [pid for pid, e in self.producers.items()
                if e.last_data_offset < log_start_offset and e.txn_first_offset < 0]
        for pid in gone:
            del self.producers[pid]
        self.delete_snapshots(0, log_start_offset)

    def delete_snapshots(self, low: int, high: int) -> None:
        """Delete the snapshots at offsets in [low, high)."""
        for snapshot in self._snapshot_offsets():
            if low <= snapshot < high:
                _unlink(self._snapshot_path(snapshot))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Drop idle producers (producer.id.expiration.ms) without an open transaction."""
        gone = [pid for pid, e in self.producers.items()
                if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # -- snapshots and loading ------------------------------------------------------------------

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def _snapshot_offsets(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(n[: -len(SNAPSHOT_SUFFIX)]) for n in names
                      if n.endswith(SNAPSHOT_SUFFIX) and n[: -len(SNAPSHOT_SUFFIX)].isdigit())

    def take_snapshot(self, offset: int) -> None:
        """Write the state as of `offset` (the log end offset) to `<offset>.snapshot`, atomically."""
        if not self.loaded:
            return
        body = bytearray(struct.pack(">i", len(self.producers)))
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            body += _SNAPSHOT_ENTRY.pack(
                e.producer_id, e.epoch, last.last_seq if last else -1, last.last_offset if last else -1,
                (last.last_offset - last.first_offset) if last else 0, e.last_timestamp, e.coordinator_epoch,
                e.txn_first_offset)
        data = struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body
        write_atomically(self._snapshot_path(offset), data)

    def _read_snapshot(self, offset: int) -> list[ProducerEntry] | None:
        path = self._snapshot_path(offset)
        try:
            return read_snapshot(path)
        except ValueError as exc:
            log.warning("%s: ignoring corrupt producer snapshot (%s); rebuilding from the log", path, exc)
            _unlink(path)
            return None

    def load(self, segments: list["Segment"], log_start_offset: int, log_end_offset: int) -> None:
        """Rebuild from the newest usable snapshot plus the log after it (also after truncation)."""
        self.producers.clear()
        self.ongoing.clear()
        start = log_start_offset
        # A damaged .txnindex would show aborted records to read_committed consumers: replaying
        # the whole log (no snapshot) writes every transaction index again.
        for offset in reversed(self._snapshot_offsets() if self._txn_indexes_intact(segments, log_start_offset) else []):
            if offset > log_end_offset or offset < log_start_offset:
                _unlink(self._snapshot_path(offset))  # beyond a truncated tail, or below retention
                continue
            entries = self._read_snapshot(offset)
            if entries is not None:
                for entry in entries:
                    if entry.last_data_offset >= log_start_offset or entry.txn_first_offset >= 0:
                        self._install(entry)
                start = offset
                break
        replayed = self._replay(segments, start)
        self.loaded = True
        if replayed:
            log.info("%s: producer state rebuilt from offset %d (%d batches replayed, %d producers)",
                     self.tp, start, replayed, len(self.producers))

    def _txn_indexes_intact(self, segments: list["Segment"], log_start_offset: int) -> bool:
        """Whether every segment's aborted-transaction entries agree with the log: each names an
        abort marker of its producer in that segment, and that producer's batch where it began."""
        for segment in segments:
            index = segment.txn_index
            problem = index.damage
            for i, entry in enumerate(index.entries):
                if problem:
                    break
                problem = self._abort_problem(segments, segment, entry, log_start_offset)
                if problem:
                    problem = f"entry {i} (byte {i * TXN_ENTRY_SIZE}) {problem}"
            if problem:
                log.warning("%s: %s; rebuilding the transaction indexes of %s from the whole log", index.path,
                            problem, self.tp)
                return False
        return True

    @staticmethod
    def _abort_problem(segments: list["Segment"], segment: "Segment", entry, log_start_offset: int) -> str:
        found = segment.find_batch(entry.last_offset)
        header = found[1] if found else None
        if header is None or header.base_offset != entry.last_offset or not header.is_control \
                or header.producer_id != entry.producer_id:
            return f"names offset {entry.last_offset}, which holds no control batch of producer {entry.producer_id}"
        try:
            if read_marker(os.pread(segment.fd, header.size, found[0])).commit:
                return f"names offset {entry.last_offset}, a commit marker"
        except (CorruptRecords, InvalidRecord):
            return f"names offset {entry.last_offset}, whose control batch holds no marker"
        if entry.first_offset < log_start_offset:
            return ""
        holder = next((s for s in reversed(segments) if s.base_offset <= entry.first_offset), None)
        first = holder.find_batch(entry.first_offset) if holder else None
        if first is None or first[1].base_offset != entry.first_offset or first[1].producer_id != entry.producer_id:
            return f"says the transaction began at offset {entry.first_offset}, where producer {entry.producer_id} has no batch"
        return ""

    def _replay(self, segments: list["Segment"], start: int) -> int:
        replayed = 0
        for segment in segments:
            if segment.next_offset <= start:
                continue
            segment.txn_index.truncate_to(start)  # entries past `start` are rebuilt below
            found = segment.find_batch(start)
            if found is None:
                continue
            for position, header in segment.headers(found[0]):
                if header.last_offset < start:
                    continue
                replayed += 1
                if header.producer_id < 0:
                    continue
                marker = None
                if header.is_control:
                    try:
                        marker = read_marker(os.pread(segment.fd, header.size, position))
                    except (CorruptRecords, InvalidRecord) as exc:
                        log.error("%s: skipping undecodable control batch at offset %d: %s", self.tp,
                                  header.base_offset, exc)
                        continue
                self._apply_logged(header, marker, segment)
        return replayed

    def apply_replicated(self, records, headers: list[BatchHeader], segment: "Segment") -> None:
        """A follower's batches, copied from its leader's log into `segment`: they change producer
        state as a replay of the log does (the leader checked them)."""
        position = 0
        for header in headers:
            if header.producer_id >= 0:
                marker = read_marker(records[position:position + header.size]) if header.is_control else None
                self._apply_logged(header, marker, segment)
            position += header.size

    def _apply_logged(self, header: BatchHeader, marker: ControlMarker | None, segment: "Segment") -> None:
        current = self.producers.get(header.producer_id) or ProducerEntry(header.producer_id)
        entry, done, _ = transition(current, header, marker, Check.NONE, self.tp)
        self._install(entry)
        if done and done.aborted:
            segment.txn_index.append(self._aborted_entry(done))


def read_snapshot(path: str) -> list[ProducerEntry]:
    """The producers a `<offset>.snapshot` file holds; ValueError when it is damaged."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    except struct.error:
        raise ValueError(f"{len(data)} bytes is shorter than a snapshot header") from None
    if version != SNAPSHOT_VERSION or crc32c(data[6:]) != crc or len(data) != 10 + count * _SNAPSHOT_ENTRY.size:
        raise ValueError("bad version, CRC or length")
    entries = []
    for i in range(count):
        pid, epoch, seq, last_offset, delta, ts, coord_epoch, txn_first = _SNAPSHOT_ENTRY.unpack_from(
            data, 10 + i * _SNAPSHOT_ENTRY.size)
        batches = ()
        if last_offset >= 0:
            batches = (BatchMetadata(next_sequence(seq, -delta), seq, last_offset - delta, last_offset, ts),)
        entries.append(ProducerEntry(pid, epoch, batches, coord_epoch, ts, txn_first))
    return entries


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

