"""Child processes that must not outlive the process that started them."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn` or process initializer: the child gets SIGKILL when the process that started it
    dies, however it dies (Linux's PR_SET_PDEATHSIG). The broker's cleaner processes use it, so none
    goes on writing into a log directory that a restarted broker owns; the sandboxes too, so a killed
    test or benchmark leaves no server behind."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
