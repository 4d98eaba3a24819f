"""Kafka's checkpoint files: a version line (0), an entry count, then one entry per line.

Offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`) hold
`topic partition offset` entries; a partition's `leader-epoch-checkpoint` holds `epoch start-offset`.
Writes are atomic: temp file, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import threading

from .files import write_atomically

VERSION = "0"


class CheckpointError(ValueError):
    pass


def write_entries(path: str, entries: list[tuple], sync: bool = True) -> None:
    lines = [VERSION, str(len(entries))] + [" ".join(str(field) for field in entry) for entry in entries]
    write_atomically(path, "\n".join(lines) + "\n", sync)


def read_entries(path: str, fields: int) -> list[list[str]] | None:
    """The entries' whitespace-split fields, or None when the file does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: byte {exc.start} is not text (0x{data[exc.start]:02x})") from None
    if len(lines) < 2 or lines[0].strip() != VERSION or not lines[1].strip().isdigit():
        raise CheckpointError(f"{path}: not a version-{VERSION} checkpoint file")
    count = int(lines[1])
    entries = [line.split() for line in lines[2 : 2 + count]]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CheckpointError(f"{path}: expected {count} entries of {fields} fields")
    for number, entry in enumerate(entries, 3):
        if not all(field.lstrip("-").isdigit() for field in entry[-2:]):  # partition offset | epoch offset
            raise CheckpointError(f"{path}: line {number} is not {fields} whitespace-separated fields "
                                  f"ending in numbers: {' '.join(entry)!r}")
    return entries


def write_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_entries(path, [(t, p, o) for (t, p), o in sorted(offsets.items())])


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Offsets by (topic, partition); empty when the file does not exist."""
    try:
        return {(t, int(p)): int(o) for t, p, o in read_entries(path, 3) or []}
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


class CheckpointFile:
    """An offset checkpoint written from the event loop and from a worker thread: writes take turns
    (they share the temp file), and offsets read before those on disk are not written over them (a
    thread's write of older offsets can end after the loop wrote newer ones)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._turn = threading.Lock()
        self._written = -1  # when the offsets on disk were read, in the caller's count

    def write(self, offsets: dict[tuple[str, int], int], taken: int) -> None:
        """Write `offsets`, read at `taken` (a number that grows with each reading), unless newer are on disk."""
        with self._turn:
            if taken > self._written:
                write_checkpoint(self.path, offsets)
                self._written = taken
