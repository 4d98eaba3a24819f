"""A small filesystem under a directory (a broker's data dir), to fill and free at will.

    disk = SmallDisk(path, "24m").mount()   # a tmpfs of 24 MiB at `path`, reaped if the test dies
    disk.fill()                             # a filler file takes every free byte: writes get ENOSPC
    disk.free()                             # the filler goes
    disk.unmount()

tmpfs, not a loop-mounted ext4: the kernel answers ENOSPC the same way, and nothing needs mkfs or a
loop device. (An honest slow fsync has no such trick: tmpfs has none, and a dm-delay device needs a
block device and device-mapper, so it is not here.)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .netns import forget_mount, record_mount, sh

FILLER = ".filler"


class SmallDisk:
    def __init__(self, path: Path, size: str = "24m") -> None:
        self.path = Path(path)
        self.size = size
        self.mounted = False

    def mount(self) -> "SmallDisk":
        self.path.mkdir(parents=True, exist_ok=True)
        record_mount(str(self.path))  # (first: a SIGKILL right after the mount still gets it undone)
        sh("mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0755", "tmpfs", str(self.path))
        self.mounted = True
        return self

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self) -> None:
        """Take every free byte (writes of any size then fail with ENOSPC)."""
        chunk = b"\0" * (1 << 20)
        with open(self.path / FILLER, "ab", buffering=0) as f:
            while True:
                try:
                    f.write(chunk if self.free_bytes() >= len(chunk) else chunk[:4096])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    return

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            sh("umount", "-l", str(self.path), check=False)
            forget_mount(str(self.path))
            self.mounted = False
