"""`binlake dump-log`: print a partition's files (`.log`, `.index`, `.timeindex`, `.txnindex`,
`.snapshot`) like kafka-dump-log.sh.

Reads the files directly (the broker may be running or not); never writes. A `.log` prints one line
per batch, its CRC checked; `--records` decodes and decompresses the records too. Batches the log
cleaner rewrote show fewer records than their offset range (and a count of 0 for the empty batch
kept for a producer's sequence numbers), and `deleteHorizonMs` once their tombstones or marker may
go. Index files print their entries, and when the segment's `.log` sits next to them, flag entries
that do not match it. A `.txnindex` prints its aborted transactions, a `.snapshot` its producers.
"""

from __future__ import annotations

import bisect
import os
import string
from typing import Iterator

import click

from ..storage.batch import (DELETE_HORIZON, HEADER_SIZE, LOG_OVERHEAD, MAGIC, TIMESTAMP_TYPE_LOG_APPEND, BatchHeader,
                             crc_matches, read_header)
from ..storage.index import IndexFile, OffsetIndex, TimeIndex
from ..storage.producer_state import read_snapshot
from ..storage.records import CorruptRecords, control_marker, decode_batch
from ..storage.txn_index import VERSION as TXN_INDEX_VERSION
from ..storage.txn_index import TxnIndex

_PRINTABLE = set(string.printable) - set("\r\x0b\x0c")


def dump(path: str, records: bool = False) -> Iterator[str]:
    """The lines `dump-log` prints for one file."""
    name = os.path.basename(path)
    stem, _, suffix = name.partition(".")
    if not stem.isdigit() or suffix not in ("log", "index", "timeindex", "txnindex", "snapshot"):
        raise click.ClickException(f"{path}: not a partition file; expected <20-digit offset>.log, .index, "
                                   f".timeindex, .txnindex or .snapshot")
    yield f"Dumping {path}"
    base_offset = int(stem)
    if suffix == "log":
        yield from dump_log(path, base_offset, records)
    elif suffix == "txnindex":
        yield from dump_txn_index(path)
    elif suffix == "snapshot":
        yield from dump_snapshot(path)
    else:
        yield from dump_index(path, base_offset, OffsetIndex if suffix == "index" else TimeIndex)


# -- .log --------------------------------------------------------------------------------------

def dump_log(path: str, base_offset: int, records: bool) -> Iterator[str]:
    yield f"Log starting offset: {base_offset}"
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position < size:
            raw = os.pread(f.fileno(), HEADER_SIZE, position)
            header = read_header(raw) if len(raw) == HEADER_SIZE else None
            if header is None or header.magic != MAGIC or header.batch_length < HEADER_SIZE - LOG_OVERHEAD \
                    or position + header.size > size:
                yield f"Found {size - position} invalid bytes at the end of {os.path.basename(path)} " \
                      f"(position {position}): {_why_not_a_batch(header, position, size)}"
                return
            batch = os.pread(f.fileno(), header.size, position)
            yield _batch_line(header, position, crc_matches(batch, 0, header))
            if records:
                yield from _record_lines(header, batch)
            position += header.size


def _why_not_a_batch(header: BatchHeader | None, position: int, size: int) -> str:
    if header is None:
        return "shorter than a batch header"
    if header.magic != MAGIC:
        return f"magic {header.magic}"
    return f"batch length {header.batch_length} does not fit the {size - position} bytes left"


def _batch_line(h: BatchHeader, position: int, valid: bool) -> str:
    last_sequence = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
    time_type = "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_LOG_APPEND else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.leader_epoch} "
            f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
            f"position: {position} {time_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {h.compression} crc: {h.crc} isvalid: {_bool(valid)}"
            + (f" deleteHorizonMs: {h.base_timestamp}" if h.attributes & DELETE_HORIZON else ""))


def _record_lines(h: BatchHeader, batch: bytes) -> Iterator[str]:
    try:
        decoded = decode_batch(batch)
    except CorruptRecords as exc:
        yield f"| cannot decode the records: {exc}"
        return
    time_type = "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_LOG_APPEND else "CreateTime"
    for r in decoded:
        line = (f"| offset: {r.offset} {time_type}: {r.timestamp} keySize: {_size(r.key)} "
                f"valueSize: {_size(r.value)} sequence: {r.sequence} "
                f"headers: [{', '.join(f'{k}={_show(v)}' for k, v in r.headers)}]")
        marker = control_marker(r) if h.is_control else None
        if marker:
            line += f" endTxnMarker: {'COMMIT' if marker.commit else 'ABORT'} coordinatorEpoch: {marker.coordinator_epoch}"
        else:
            line += f" key: {_show(r.key)} payload: {_show(r.value)}"
        yield line


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _show(data: bytes | None) -> str:
    """Text when the bytes are printable UTF-8, else 0x-prefixed hex."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if all(c in _PRINTABLE or c.isprintable() for c in text) else "0x" + data.hex()


def _bool(value: bool) -> str:
    return "true" if value else "false"


# -- .txnindex / .snapshot --------------------------------------------------------------------

def dump_txn_index(path: str) -> Iterator[str]:
    index = TxnIndex(path)
    for entry in index.entries:
        yield (f"version: {TXN_INDEX_VERSION} producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
               f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}")
    if index.damage:
        yield f"(!) {index.damage}; the broker rebuilds this index from the log"


def dump_snapshot(path: str) -> Iterator[str]:
    try:
        producers = read_snapshot(path)
    except ValueError as exc:
        yield f"(!) not a usable producer snapshot: {exc}; the broker rebuilds producer state from the log"
        return
    for p in producers:
        last = p.batches[-1] if p.batches else None
        yield (f"producerId: {p.producer_id} producerEpoch: {p.epoch} coordinatorEpoch: {p.coordinator_epoch} "
               f"currentTxnFirstOffset: {p.txn_first_offset} lastTimestamp: {p.last_timestamp} "
               f"firstSequence: {last.first_seq if last else -1} lastSequence: {last.last_seq if last else -1} "
               f"lastOffset: {last.last_offset if last else -1}")


# -- .index / .timeindex -----------------------------------------------------------------------

def dump_index(path: str, base_offset: int, kind: type[IndexFile]) -> Iterator[str]:
    with open(path, "rb") as f:
        data = f.read()
    entry_size = kind.ENTRY.size
    if len(data) % entry_size:
        yield f"(!) {len(data)} bytes is not a whole number of {entry_size}-byte entries; the broker rebuilds this index"
    batches = _LogBatches.next_to(path, base_offset)
    previous = None
    for i, (key, value) in enumerate(kind.ENTRY.iter_unpack(data[: len(data) - len(data) % entry_size])):
        if i and key == 0 and value == 0:
            yield f"({(len(data) // entry_size) - i} preallocated empty entries follow)"
            return
        if kind is OffsetIndex:
            line = f"offset: {base_offset + key} position: {value}"
            problems = [batches.offset_entry_problem(base_offset + key, value) if batches else None]
        else:
            line = f"timestamp: {key} offset: {base_offset + value}"
            problems = [batches.time_entry_problem(key, base_offset + value) if batches else None]
        if previous is not None and not kind.in_order(*previous, key, value):
            problems.append("out of order with the entry before it")
        previous = (key, value)
        problems = [p for p in problems if p]
        yield line + (f" (!) {'; '.join(problems)}" if problems else "")


class _LogBatches:
    """Headers of the `.log` an index belongs to, to check index entries against."""

    def __init__(self, headers: list[tuple[int, BatchHeader]]) -> None:
        self.positions = {position: header for position, header in headers}
        self.headers = [header for _, header in headers]
        self.last_offsets = [header.last_offset for header in self.headers]

    @classmethod
    def next_to(cls, index_path: str, base_offset: int) -> "_LogBatches | None":
        log_path = os.path.join(os.path.dirname(index_path), f"{base_offset:020d}.log")
        if not os.path.exists(log_path):
            return None
        headers = []
        with open(log_path, "rb") as f:
            size, position = os.fstat(f.fileno()).st_size, 0
            while position + HEADER_SIZE <= size:
                header = read_header(os.pread(f.fileno(), HEADER_SIZE, position))
                if header.magic != MAGIC or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                    break
                headers.append((position, header))
                position += header.size
        return cls(headers)

    def offset_entry_problem(self, offset: int, position: int) -> str | None:
        header = self.positions.get(position)
        if header is None:
            return f"no batch starts at position {position} of the .log"
        if offset < header.base_offset:
            return f"the batch at position {position} starts at offset {header.base_offset}, after {offset}"
        return None

    def time_entry_problem(self, timestamp: int, offset: int) -> str | None:
        i = bisect.bisect_left(self.last_offsets, offset)
        if i == len(self.headers) or self.headers[i].base_offset > offset:
            return f"no batch holds offset {offset} in the .log"
        if self.headers[i].max_timestamp != timestamp:
            return f"the batch holding offset {offset} has max timestamp {self.headers[i].max_timestamp}"
        return None


@click.command("dump-log")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--records", "--print-data-log", "records", is_flag=True,
              help="decode each batch's records (decompressing them): offset, timestamp, key, value, headers")
def dump_log_command(files: tuple[str, ...], records: bool) -> None:
    """Print the batches of segment .log files, or the entries of .index, .timeindex, .txnindex and
    .snapshot files."""
    for path in files:
        for line in dump(path, records):
            click.echo(line)
