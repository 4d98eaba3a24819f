"""Kafka's offset checkpoint files: a version line (0), an entry count, then `topic partition offset`."""

from __future__ import annotations

import os


def write_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))] + [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return {}
    if not lines or lines[0].strip() != "0":
        raise ValueError(f"{path}: unknown checkpoint version {lines[0]!r}")
    count = int(lines[1])
    result = {}
    for line in lines[2 : 2 + count]:
        topic, partition, offset = line.rsplit(" ", 2)
        result[(topic, int(partition))] = int(offset)
    return result
