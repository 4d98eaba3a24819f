"""What each broker's disk holds: a partition's replica read straight from its segment files (the
test runs on the same machine), whole batches only, while the broker may be appending. This is
"where the data was", independent of what any broker answers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from logcore.storage.batch import HEADER_SIZE, LOG_OVERHEAD, read_header
from logcore.storage.records import decode_batch


@dataclass(frozen=True)
class Entry:
    offset: int
    value: bytes | None
    leader_epoch: int
    control: bool
    producer_id: int
    producer_epoch: int = -1
    sequence: int = -1  # the record's sequence number (idempotent producers), else -1


def read_replica(data_dir: Path, topic: str, partition: int) -> list[Entry]:
    """Every record of the replica, in offset order; [] if the broker holds none."""
    directory = Path(data_dir) / f"{topic}-{partition}"
    if not directory.is_dir():
        return []
    entries: list[Entry] = []
    segments = sorted(p for p in directory.iterdir() if p.suffix == ".log" and p.stem.isdigit())
    for segment in segments:
        try:
            data = segment.read_bytes()
        except FileNotFoundError:  # deleted by retention or truncation meanwhile
            continue
        position = 0
        while position + HEADER_SIZE <= len(data):
            header = read_header(data, position)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > len(data):
                break  # a batch being written (or a torn tail a restart will truncate)
            batch = memoryview(data)[position:position + header.size]
            for record in decode_batch(batch):
                sequence = header.base_sequence + record.offset - header.base_offset \
                    if header.base_sequence >= 0 else -1
                entries.append(Entry(record.offset, record.value, header.leader_epoch, header.is_control,
                                     header.producer_id, header.producer_epoch, sequence))
            position += header.size
    entries.sort(key=lambda e: e.offset)
    deduped: list[Entry] = []
    for entry in entries:  # (a segment truncated and rewritten while read: keep the last read)
        if deduped and deduped[-1].offset == entry.offset:
            deduped[-1] = entry
        else:
            deduped.append(entry)
    return deduped


def values_on(data_dir: Path, topic: str, partitions: int) -> set[bytes]:
    """Every non-control value a broker's replicas of `topic` hold."""
    return {e.value for p in range(partitions) for e in read_replica(data_dir, topic, p)
            if not e.control and e.value is not None}


def exists(data_dir: Path) -> bool:
    return os.path.isdir(data_dir)
