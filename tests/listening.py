"""Which addresses a process and its children listen on, read from /proc (no library needed)."""

from __future__ import annotations

import ipaddress
import os


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it, as long as they run."""
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
        except OSError:
            continue
    return found


def listening(pid: int) -> set[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(address, port) of every TCP socket that `pid` or a process below it listens on."""
    inodes = set()
    for process in descendants(pid):
        try:
            for fd in os.listdir(f"/proc/{process}/fd"):
                target = os.readlink(f"/proc/{process}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.add(_address(fields[1]))
    return found


def _address(text: str):
    """/proc/net/tcp's `0100007F:1F90`: the address's 32-bit words in host (little-endian) order."""
    raw, port = text.split(":")
    packed = b"".join(bytes.fromhex(raw[i:i + 8])[::-1] for i in range(0, len(raw), 8))
    address = ipaddress.ip_address(packed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port, 16)
