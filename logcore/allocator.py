"""Keep freed request buffers in the process instead of handing them back to the kernel.

Produce requests carry record sets of up to ~1 MB that pass through a few short-lived buffers
(socket read, frame, record set). glibc's malloc serves blocks that size with mmap, or trims them
off the heap top once freed, so every request page-faults fresh memory in again: on a 2-core VM
that made parsing a 1 MB produce request cost 5-8x the copying it does (see docs/benchmarks.md).
Fixed mmap and trim thresholds let those blocks be reused.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest allowed; bigger blocks still come from mmap
TRIM_THRESHOLD = 64 * 1024 * 1024  # free memory kept at the heap top before it is returned


def keep_freed_memory() -> bool:
    """Whether the C library took the settings (glibc does; elsewhere this changes nothing)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def release_freed_memory() -> None:
    """Hand free heap pages back to the kernel now (glibc's malloc_trim), after dropping a lot of
    state at once such as a deleted topic's partitions; the thresholds above would keep it."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
