"""Child processes that die with the process that started them, even when it is SIGKILLed.

One contract, for both ways binlake starts children: `die_with_parent(parent)` runs *in the child*
and asks the kernel to SIGKILL it when `parent` (the pid of the process that started it) dies
(prctl PR_SET_PDEATHSIG); if `parent` is already gone by then, the child exits at once.

    subprocess.Popen(args, preexec_fn=functools.partial(die_with_parent, os.getpid()))
    context.Process(target=serve, args=(conn, os.getpid()))  # serve's first call: die_with_parent(parent)

Two rules the kernel sets: "parent" is the thread that forked, so start such children from the main
thread; and a change of user id clears the request, so a child that runs as another user must ask
after the change (Popen's `user=` is applied before `preexec_fn`, so that order holds). The broker's
cleaner processes use it, so none goes on writing into a log directory that a restarted broker owns;
the sandboxes and the demo too, so a killed test, benchmark or demo leaves no server behind.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a child started by `parent`: SIGKILL this process when `parent` dies; exit now if it has."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        os._exit(126)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
