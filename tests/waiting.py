"""Waiting on a condition, never on a sleep sized for one machine."""

from __future__ import annotations

import time

WAIT_S = 60.0


def wait_for(condition, what: str, timeout: float = WAIT_S):
    """The first truthy value of `condition()`, polled until `timeout`; AssertionError naming `what` after it."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)
    return result
