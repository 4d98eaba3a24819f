"""Swapping a cleaned segment in for the segments it replaces, so that a crash at any moment leaves
either the old segments or the new one, never both and never neither.

1. The cleaner writes `<base>.{log,index,timeindex,txnindex}.cleaned` and fsyncs them.
2. `<base>.swap`, written atomically and holding the end of the replaced range, commits the swap:
   from here on, recovery finishes it instead of undoing it.
3. The replaced segments' files go (the first one's by being renamed over), each `.cleaned` file is
   renamed to its final name, the `.log` last.
4. `<base>.swap` goes.

On open, `finish_swaps` redoes step 3 for every `.swap` file left and deletes `.cleaned` files
that no `.swap` file commits (a clean interrupted before step 2).
"""

from __future__ import annotations

import logging
import os

from .files import write_atomically
from .segment import SUFFIXES, fsync_dir, segment_name

log = logging.getLogger(__name__)

CLEANED = ".cleaned"
SWAP = ".swap"


def cleaned_paths(directory: str, base_offset: int) -> list[str]:
    return [os.path.join(directory, segment_name(base_offset, suffix + CLEANED)) for suffix in SUFFIXES]


def remove_cleaned(directory: str, base_offset: int) -> None:
    for path in cleaned_paths(directory, base_offset):
        _unlink(path)


def begin(directory: str, base_offset: int, end: int) -> None:
    """Step 2: from now on the swap of [base_offset, end) happens, crash or not."""
    write_atomically(os.path.join(directory, segment_name(base_offset, SWAP)), f"{end}\n")


def finish(directory: str, base_offset: int, end: int) -> None:
    """Steps 3 and 4; safe to repeat after a crash at any point of them."""
    for name in os.listdir(directory):
        stem, dot, suffix = name.partition(".")
        if stem.isdigit() and base_offset < int(stem) < end and "." + suffix in SUFFIXES:
            _unlink(os.path.join(directory, name))
    for final_suffix in (".index", ".timeindex", ".txnindex", ".log"):
        final = os.path.join(directory, segment_name(base_offset, final_suffix))
        if os.path.exists(final + CLEANED):
            os.replace(final + CLEANED, final)
    fsync_dir(directory)
    _unlink(os.path.join(directory, segment_name(base_offset, SWAP)))
    fsync_dir(directory)


def finish_swaps(directory: str) -> None:
    """At open: complete committed swaps, drop uncommitted cleaner output."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith(SWAP) and name[: -len(SWAP)].isdigit():
            base = int(name[: -len(SWAP)])
            with open(os.path.join(directory, name)) as f:
                text = f.read().strip()
            if not text.isdigit():
                log.warning("%s: unreadable swap file %r; dropping the cleaned segment it names", name, text)
                remove_cleaned(directory, base)
                _unlink(os.path.join(directory, name))
                continue
            log.info("%s: finishing the swap of a cleaned segment for offsets [%d, %s)", directory, base, text)
            finish(directory, base, int(text))
    uncommitted = [name for name in os.listdir(directory) if name.endswith((CLEANED, SWAP + ".tmp"))]
    for name in uncommitted:
        _unlink(os.path.join(directory, name))
    if uncommitted:
        log.info("%s: removed %d file(s) of cleaned segments that no swap committed (a clean interrupted)",
                 directory, len(uncommitted))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
