"""A private network of Linux network namespaces for fault tests (root needed).

    with Net() as net:                        # reaps what a SIGKILLed test left, then builds a hub
        zk, b0 = net.add("zk"), net.add("b0") # one namespace each, an address on the hub's bridge
        proc = b0.popen(["binlake", "broker", ...])   # runs inside b0's namespace
        b0.cut(zk.address)                    # nftables inside b0: drop everything to/from zk
        b0.heal()

The bridge lives in a hub namespace of its own, so the machine's firewall (Docker's FORWARD rules,
br_netfilter) never sees the test's traffic; the test process itself reaches every node from the
root namespace through one veth into the hub (it is the "client" side, never cut). Each namespace's
name carries the owning process id (`blf-<pid>-<node>`): `reap()` removes the namespaces, their
processes and the small filesystems (`disk.py`) of owners that are gone, so a test killed with
SIGKILL leaves nothing behind past the next run. Processes started with `popen` die with the test
process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import signal
import subprocess
from functools import partial
from pathlib import Path

from common.lifetime import die_with_parent

PREFIX = "blf"
STATE_DIR = Path("/run/binlake-faults")  # <pid>.mounts: mount points to undo if that pid dies
_OWNED = re.compile(rf"^{PREFIX}-(\d+)-")
_ROOT_VETH = re.compile(rf"^{PREFIX}(\d+)(@|$)")
_NETS = itertools.count()  # Nets started by this process: each starts its search for a subnet elsewhere

RULESET = """
table inet fault {
    set cut { type ipv4_addr; }
    chain input { type filter hook input priority -10; policy accept; ip saddr @cut drop; }
    chain output { type filter hook output priority -10; policy accept; ip daddr @cut drop; }
}
"""


class NetError(RuntimeError):
    pass


def sh(*args: str, input: str | None = None, check: bool = True) -> str:
    done = subprocess.run(args, input=input, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def available() -> str | None:
    """Why fault tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("/usr/sbin/ip", "/usr/sbin/nft"):
        if not os.path.exists(tool):
            return f"{tool} is missing: run `make setup` (Debian packages iproute2 and nftables)"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def namespaces() -> list[str]:
    return [line.split()[0] for line in sh("ip", "netns", "list").splitlines() if line.strip()]


def _kill_inside(ns: str) -> None:
    for pid in sh("ip", "netns", "pids", ns, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _undo_mounts(owner: int) -> None:
    state = STATE_DIR / f"{owner}.mounts"
    if state.exists():
        for mount_point in reversed(state.read_text().split("\n")):
            if mount_point:
                sh("umount", "-l", mount_point, check=False)
        state.unlink()


def reap() -> list[str]:
    """Remove what owners that are no longer alive left: their namespaces (and the processes in
    them), root-side veths and mounts. Returns the namespaces removed."""
    removed = []
    for ns in namespaces():
        if (m := _OWNED.match(ns)) and not _alive(int(m.group(1))):
            _kill_inside(ns)
            sh("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    for line in sh("ip", "-o", "link", "show").splitlines():
        name = line.split(":")[1].strip()
        if (m := _ROOT_VETH.match(name)) and not _alive(int(m.group(1))):
            sh("ip", "link", "del", name.split("@")[0], check=False)
    if STATE_DIR.exists():
        for state in STATE_DIR.glob("*.mounts"):
            if not _alive(int(state.stem)):
                _undo_mounts(int(state.stem))
    return removed


def record_mount(mount_point: str) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / f"{os.getpid()}.mounts", "a") as f:
        f.write(mount_point + "\n")


def forget_mount(mount_point: str) -> None:
    state = STATE_DIR / f"{os.getpid()}.mounts"
    if state.exists():
        kept = [m for m in state.read_text().split("\n") if m and m != mount_point]
        state.write_text("".join(m + "\n" for m in kept))


def _free_subnet(owner: int, turn: int) -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no route of the machine overlaps, starting from one derived from
    the owner's pid (so that concurrent tests rarely even try the same one) and from how many Nets
    it started before (so that a client left over from the last one, e.g. a producer still closing,
    never reaches the nodes of the next at the same addresses)."""
    used = []
    for line in sh("ip", "-4", "route", "show", "table", "all").splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast"):
            word = line.split()[1]
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            pass
    for k in range(65536):
        n = (owner + (turn + k) * 7919) % 65536
        candidate = ipaddress.ip_network(f"10.{n >> 8}.{n & 255}.0/24")
        if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
            return candidate
    raise NetError("no free /24 in 10.0.0.0/8")


class Node:
    """One network namespace with an address on the hub's bridge and an nftables `cut` set."""

    def __init__(self, net: "Net", name: str, ns: str, address: str) -> None:
        self.net = net
        self.name = name
        self.ns = ns
        self.address = address
        self.cut_from: set[str] = set()

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        """Start `args` inside this namespace; it dies with the calling process."""
        return subprocess.Popen(["ip", "netns", "exec", self.ns, *args], preexec_fn=partial(die_with_parent, os.getpid()), **kwargs)

    def run(self, *args: str, input: str | None = None) -> str:
        return sh("ip", "netns", "exec", self.ns, *args, input=input)

    def cut(self, *addresses: str) -> None:
        """Drop every packet between this node and `addresses`, both ways, existing connections too."""
        new = [a for a in addresses if a not in self.cut_from]
        if new:
            self.run("nft", "add", "element", "inet", "fault", "cut", "{ " + ", ".join(new) + " }")
            self.cut_from.update(new)

    def heal(self) -> None:
        if self.cut_from:
            self.run("nft", "flush", "set", "inet", "fault", "cut")
            self.cut_from.clear()


class Net:
    """The hub (a bridge in a namespace of its own), the root namespace's veth into it, and nodes."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.tag = f"{PREFIX}-{self.owner}"
        self.hub = f"{self.tag}-hub"
        self.root_veth = f"{PREFIX}{self.owner}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.nodes: dict[str, Node] = {}
        self._created: list[str] = []

    @property
    def host_address(self) -> str:
        """The test process's address on the bridge (the root namespace's side)."""
        return str(self.subnet.network_address + 1)

    def start(self) -> "Net":
        if reason := available():
            raise NetError(reason)
        reap()
        self.subnet = _free_subnet(self.owner, next(_NETS))
        try:
            self._ns(self.hub)
            sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.hub, "link", "set", "br0", "up")
            sh("ip", "link", "add", self.root_veth, "type", "veth", "peer", "name", "root", "netns", self.hub)
            sh("ip", "-n", self.hub, "link", "set", "root", "master", "br0", "up")
            sh("ip", "addr", "add", f"{self.host_address}/{self.subnet.prefixlen}", "dev", self.root_veth)
            sh("ip", "link", "set", self.root_veth, "up")
        except Exception:
            self.close()
            raise
        return self

    def _ns(self, name: str) -> None:
        sh("ip", "netns", "add", name)
        self._created.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def add(self, name: str) -> Node:
        """A node: its namespace, a veth pair to the bridge, the next address, an empty `cut` set."""
        index = len(self.nodes) + 2
        ns, address = f"{self.tag}-{name}", str(self.subnet.network_address + index)
        self._ns(ns)
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"v{index}", "netns", self.hub)
        sh("ip", "-n", self.hub, "link", "set", f"v{index}", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=RULESET)
        node = self.nodes[name] = Node(self, name, ns, address)
        return node

    def partition(self, *groups: list[Node]) -> None:
        """Jepsen's grudge: each node drops the nodes of the other groups (nodes in no group are untouched)."""
        for group in groups:
            others = [n.address for g in groups if g is not group for n in g]
            for node in group:
                node.cut(*others)

    def heal(self) -> None:
        for node in self.nodes.values():
            node.heal()

    def close(self) -> None:
        """Kill what runs in the namespaces, delete them (their veths go with them)."""
        for ns in reversed(self._created):
            _kill_inside(ns)
            sh("ip", "netns", "del", ns, check=False)
        self._created.clear()
        sh("ip", "link", "del", self.root_veth, check=False)
        self.nodes.clear()

    def __enter__(self) -> "Net":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
