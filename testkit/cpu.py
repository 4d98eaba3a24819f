"""CPU time of a process and everything it started (testkit.memory.descendants): what a benchmark on a
shared, loaded machine can compare where wall-clock rates move with the other tenants' load."""

from __future__ import annotations

import contextlib
import os

from testkit.memory import descendants

_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its living descendants so far."""
    total = 0
    for process in descendants(pid):
        with contextlib.suppress(OSError), open(f"/proc/{process}/stat") as f:
            fields = f.read().rpartition(")")[2].split()   # (after the command, which may hold spaces)
            total += int(fields[11]) + int(fields[12])     # utime, stime: fields 14 and 15 of proc(5)
    return total / _TICKS
