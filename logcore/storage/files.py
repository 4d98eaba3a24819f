"""Crash-safe small-file writes, shared by checkpoints, snapshots and metadata files."""

from __future__ import annotations

import os


def write_atomically(path: str, data: bytes | str, sync: bool = True) -> None:
    """Replace `path` with `data` so a crash leaves the old file or the new one, never a mix:
    write a temp file, fsync it, rename it over `path`, fsync the directory (for the rename).
    Not `sync`: no fsync, for a file whose directory is not durable yet either (whoever makes the
    directory durable fsyncs the file first); a killed process leaves the old file or the new one,
    a power loss may leave neither."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not sync:
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
