"""Logging that stays readable under attack: bad input is counted, not logged line by line.

The first event of each kind in a window is logged in full, so a single bad client is easy to
diagnose; the rest are counted per peer host and kind, and one summary line per host closes the
window ("1,234 bad requests from 127.0.0.1 in the last 10 s: 1,000 buffer underflow, ..."). A
fuzzer that sends thousands of frames a second thus costs a few lines every ten seconds.
Event loop only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

WINDOW_S = 10.0


class BadInputLog:
    def __init__(self, log: logging.Logger, window_s: float = WINDOW_S) -> None:
        self.log = log
        self.window_s = window_s
        self._seen_kinds: set[str] = set()  # kinds already logged in full this window
        self._counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self._started = time.monotonic()
        self._flush_timer: asyncio.TimerHandle | None = None

    def report(self, host: str, kind: str, message: str, *args, level: int = logging.WARNING,
               exc_info: bool = False) -> None:
        """One bad event from `host`: logged in full if it is the first of its kind this window."""
        if self._flush_timer is None:  # the first event opens a window
            self._started = time.monotonic()
            self._flush_timer = asyncio.get_running_loop().call_later(self.window_s, self.flush)
        if kind not in self._seen_kinds:
            self._seen_kinds.add(kind)
            self.log.log(level, message + " (more of this kind are summarized every %d s)", *args,
                         int(self.window_s), exc_info=exc_info)
        else:
            self._counts[host][kind] += 1

    def flush(self) -> None:
        """Log one summary line per host for the window that ends now, and start a new window."""
        self._flush_timer = None
        elapsed = time.monotonic() - self._started
        for host, kinds in sorted(self._counts.items()):
            total = sum(kinds.values())
            detail = ", ".join(f"{count:,} {kind}" for kind, count in kinds.most_common())
            self.log.warning("%s more bad requests or connections from %s in the last %.0f s: %s",
                             f"{total:,}", host, elapsed, detail)
        self._counts.clear()
        self._seen_kinds.clear()

    def close(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self.flush()
