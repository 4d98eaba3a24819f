"""Child processes that die with the process that started them, even when it is SIGKILLed.

`die_with_parent()` gives a `preexec_fn` for subprocess.Popen that asks the kernel to SIGKILL the
child when its parent dies (prctl PR_SET_PDEATHSIG); `die_with(parent)` asks the same from inside
a multiprocessing child. Two rules the kernel sets: "parent" is the
thread that forked, so start such children from the main thread; and a change of user id clears the
request, so a child that runs as another user must get it after the change (Popen's `user=` is
applied before `preexec_fn`, so that order holds).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None]:
    parent = os.getpid()
    return lambda: die_with(parent)


def die_with(parent: int) -> None:
    """In a child started by `parent` (a multiprocessing target's first call, or a `preexec_fn`)."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        os._exit(126)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
