"""One timer for many deadlines (sessions, pending member ids, rebalance timeouts, offset expiry):
`sweep(now)` runs by the earliest moment anyone asked for (`by`), then at the next one `next_due(now)`
names. Not a fixed tick, so an idle broker stays asleep. Event loop only."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, sweep: Callable[[float], None], next_due: Callable[[float], float]) -> None:
        self._sweep = sweep
        self._next_due = next_due
        self._running = False
        self._timer: asyncio.TimerHandle | None = None
        self.due = 0.0  # time.monotonic() of the next sweep

    def start(self) -> None:
        self._running = True
        self.by(time.monotonic())

    def stop(self) -> None:
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def by(self, at: float) -> None:
        """Make the sweep run by `at` (a time.monotonic()), earlier than planned if need be."""
        if not self._running:
            return
        if self._timer is not None:
            if self.due <= at:
                return
            self._timer.cancel()
        self.due = at
        self._timer = asyncio.get_running_loop().call_later(max(at - time.monotonic(), 0), self._run)

    def _run(self) -> None:
        self._timer = None
        now = time.monotonic()
        try:
            self._sweep(now)
        except Exception:
            log.exception("group coordinator sweep failed")
        self.by(self._next_due(now))
