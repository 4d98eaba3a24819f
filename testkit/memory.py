"""Resident memory of a process and everything it started (the connector's fork server and source
process included), sampled in a thread: what the memory test and bench/cdc_memory.py measure."""

from __future__ import annotations

import contextlib
import os
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc/PID/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{current}/task/{task}/children") as f:
                    todo += [int(child) for child in f.read().split()]
    return found


def rss_by_process(pid: int) -> dict[int, int]:
    """Bytes resident in `pid` and in each of its descendants."""
    found = {}
    for process in descendants(pid):
        with contextlib.suppress(OSError), open(f"/proc/{process}/statm") as f:
            found[process] = int(f.read().split()[1]) * _PAGE
    return found


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants (pages shared between them counted in each: an upper bound)."""
    return sum(rss_by_process(pid).values())


class PeakRss:
    """Samples tree_rss(pid) every `every_s` in a thread from start() to stop(); `peak` is the largest."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self.pid, self.every_s = pid, every_s
        self.peak = 0
        self.peaks: dict[int, int] = {}      # per process
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def start(self) -> "PeakRss":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            found = rss_by_process(self.pid)
            self.peak = max(self.peak, sum(found.values()))
            for process, rss in found.items():
                self.peaks[process] = max(self.peaks.get(process, 0), rss)
            self._stop.wait(self.every_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak
