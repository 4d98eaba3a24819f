"""Crash-safe small-file writes, shared by checkpoints, snapshots and metadata files."""

from __future__ import annotations

import os


def write_atomically(path: str, data: bytes | str) -> None:
    """Replace `path` with `data` so a crash leaves the old file or the new one, never a mix:
    write a temp file, fsync it, rename it over `path`, fsync the directory (for the rename)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
