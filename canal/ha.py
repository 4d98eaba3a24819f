"""Canal's high availability over ZooKeeper (`canal.zkServers`), with Canal 1.1.x's nodes, so that Canal's cluster
clients (`CanalConnectors.newClusterConnector(zkServers, destination, ...)`) find the server running a destination:

    /otter/canal/cluster/<ip:port>                        ephemeral: this server is up
    /otter/canal/destinations/<dest>/cluster/<ip:port>    ephemeral: this server can run <dest>
    /otter/canal/destinations/<dest>/running              ephemeral, {"active":true,"address":"<ip:port>"}: the
                                                          one server that runs <dest> (Canal's ServerRunningData)

Every server stands for each destination's running node (Canal's ServerRunningMonitor): the one that creates it
runs the destination (its connector, and serves its clients); the others stand by and watch the node. When it goes
(the server stopped, or died and its session expired), a server that held it takes it back at once, the others
after TAKEOVER_DELAY_S (Canal's delayTime: a ZooKeeper blip does not move destinations around).

Where Canal's monitor goes on running a destination whose node it lost (two servers then run it), a server here
stops running it as soon as it may have lost it: its session expired, or it has been cut from ZooKeeper for a
third of the session timeout (kazoo notices a silent connection after two thirds of it, and by the whole of it
ZooKeeper may hand the node to another). The log fences a connector left behind anyway (its transactional id).

The clients' own nodes (`<dest>/<clientId>/running`) are theirs (Canal's ClientRunningMonitor). No
`<dest>/<clientId>/cursor` is written: a client's position is its committed offset in the log, which every server
reads, so the server taking over resumes each client right after its last ack.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from common.zk_client import stop_client

log = logging.getLogger(__name__)

ROOT = "/otter/canal"
TAKEOVER_DELAY_S = 5.0          # Canal's ServerRunningMonitor.delayTime
REGISTER_RETRY_S = 1.0          # a node of ours still held by a killed predecessor's session: try again
CONNECT_TIMEOUT_S = 30.0


class ZooKeeperUnreachable(RuntimeError):
    """canal.zkServers did not answer at start."""


def cluster_path(address: str) -> str:
    return f"{ROOT}/cluster/{address}"


def destination_cluster_path(destination: str, address: str) -> str:
    return f"{ROOT}/destinations/{destination}/cluster/{address}"


def running_path(destination: str) -> str:
    return f"{ROOT}/destinations/{destination}/running"


def running_data(address: str) -> bytes:
    """Canal's ServerRunningData as fastjson2 writes it (fields sorted, the deprecated null `cid` left out)."""
    return json.dumps({"active": True, "address": address}, separators=(",", ":")).encode()


def running_address(data: bytes) -> str | None:
    try:
        return json.loads(data)["address"]
    except (ValueError, KeyError, TypeError):
        return None


def host_ip() -> str:
    """The address Canal registers when neither canal.register.ip nor canal.ip is set: the host's first address
    that is not a loopback one (Canal's AddressUtils.getHostIp), else 127.0.0.1."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    for *_, sockaddr in infos:
        if not sockaddr[0].startswith("127."):
            return sockaddr[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:       # (a UDP connect sends nothing)
        try:
            probe.connect(("192.0.2.1", 9))
            ip = probe.getsockname()[0]
        except OSError:
            ip = "127.0.0.1"
    if ip.startswith("127.") or ip == "0.0.0.0":
        log.warning("no address of this host but a loopback one: registering 127.0.0.1 (set canal.register.ip)")
        return "127.0.0.1"
    return ip


class RunningMonitor:
    """Which of `destinations` this server runs, kept with ZooKeeper; `on_change(destination, running)` is awaited
    after each change, one at a time. Event loop only: ZooKeeper is called from a worker thread in `_settle`,
    kazoo's watches and state changes only wake it."""

    def __init__(self, zk_servers: str, address: str, destinations: list[str],
                 on_change: Callable[[str, bool], Awaitable[None]], session_timeout_s: float) -> None:
        self.zk_servers, self.address = zk_servers, address
        self.destinations = list(destinations)
        self.session_timeout_s = session_timeout_s
        self.running: set[str] = set()
        self._on_change = on_change
        self._zk = KazooClient(hosts=zk_servers, timeout=session_timeout_s)
        self.holders: dict[str, str | None] = dict.fromkeys(self.destinations)
        """The address in each destination's running node when last seen (None: not seen yet)."""
        self._vacant_since: dict[str, float] = {}
        self._registered: set[str] = set()
        self._session: int | None = None
        self._cut_since: float | None = None          # not connected since; -inf: the session expired
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._changing = False          # an on_change is under way: a stop lets it finish

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._zk.start, CONNECT_TIMEOUT_S)
        except KazooTimeoutError:
            await asyncio.to_thread(stop_client, self._zk)
            raise ZooKeeperUnreachable(f"canal.zkServers: ZooKeeper at {self.zk_servers} did not answer within "
                                       f"{CONNECT_TIMEOUT_S:.0f} s") from None
        self._zk.add_listener(self._on_state)
        await asyncio.to_thread(self._zk.ensure_path, f"{ROOT}/cluster")
        log.info("ZooKeeper %s: standing for %s as %s (session timeout %.1f s)", self.zk_servers,
                 ", ".join(self.destinations), self.address, self.session_timeout_s)
        self._task = asyncio.create_task(self._run(), name="canal-running-monitor")

    async def stop(self) -> None:
        """No more changes (one under way finishes first): what runs here stays so (until `close`)."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            if not self._changing:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def close(self) -> None:
        """Close the session: this server's nodes go with it, so a standby takes its destinations over."""
        await self.stop()
        await asyncio.to_thread(stop_client, self._zk)

    # -- kazoo's threads ----------------------------------------------------------------------------------------
    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._cut_since = float("-inf")
        elif state == KazooState.SUSPENDED:
            self._cut_since = time.monotonic()
        else:
            self._cut_since = None
        self._wake_up()

    def _wake_up(self, _event=None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._wake.set)
        except RuntimeError:                    # (the loop has closed: nobody listens any more)
            pass

    # -- the event loop -----------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                running, again_at = await asyncio.to_thread(self._settle)
            except Exception as exc:            # (ZooKeeper's errors: the connection went meanwhile)
                log.warning("ZooKeeper %s: %r; trying again", self.zk_servers, exc)
                running, again_at = set(self.running), time.monotonic() + REGISTER_RETRY_S
            for destination in self.destinations:
                if (destination in running) != (destination in self.running) and not self._stopping:
                    if destination in running:
                        self.running.add(destination)
                        log.info("%s: running on this server, %s (%s)", destination, self.address,
                                 running_path(destination))
                    else:
                        self.running.discard(destination)
                        log.warning("%s: no longer running on this server, %s; standing by", destination,
                                    self.address)
                    self._changing = True
                    try:
                        await self._on_change(destination, destination in running)
                    finally:
                        self._changing = False
            timeout = None if again_at is None else max(0.0, again_at - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    # -- a worker thread ----------------------------------------------------------------------------------------
    def _settle(self) -> tuple[set[str], float | None]:
        """The destinations this server runs now (taking the vacant ones it may take), and when to look again
        (None: at the next watch event)."""
        now = time.monotonic()
        if self._zk.state != KazooState.CONNECTED:
            cut_until = (self._cut_since if self._cut_since is not None else now) + self.session_timeout_s / 3
            if now >= cut_until:
                return set(), None
            return set(self.running), cut_until
        session = self._zk.client_id[0]
        if session != self._session:
            self._session, self._registered = session, set()
        again = [self._register()]
        running = set()
        for destination in self.destinations:
            if self._stand(destination, session, now, again):
                running.add(destination)
        pending = [t for t in again if t is not None]
        return running, min(pending) if pending else None

    def _register(self) -> float | None:
        """This server's ephemeral nodes (again after a new session); when to retry one another session holds."""
        retry = None
        for path in [cluster_path(self.address),
                     *(destination_cluster_path(d, self.address) for d in self.destinations)]:
            if path in self._registered:
                continue
            try:
                self._zk.create(path, ephemeral=True, makepath=True)
                self._registered.add(path)
            except NodeExistsError:
                owner = self._zk.exists(path)
                if owner is not None and owner.ephemeralOwner == self._session:
                    self._registered.add(path)
                else:           # (this address's node from before a crash: it goes with that session)
                    retry = time.monotonic() + REGISTER_RETRY_S
        return retry

    def _stand(self, destination: str, session: int, now: float, again: list[float | None]) -> bool:
        """Whether this server holds `destination`'s running node, creating it when it is vacant and this server's
        turn has come."""
        path = running_path(destination)
        stat = self._zk.exists(path, watch=self._wake_up)
        if stat is not None:
            self._vacant_since.pop(destination, None)
            if stat.ephemeralOwner == session:
                self.holders[destination] = self.address
                return True
            try:
                data, _ = self._zk.get(path)
            except NoNodeError:
                again.append(now)
                return False
            self.holders[destination] = running_address(data)
            return False
        holder = self.holders[destination]
        if holder is not None and holder != self.address:       # another's: give it TAKEOVER_DELAY_S to come back
            since = self._vacant_since.setdefault(destination, now)
            if now < since + TAKEOVER_DELAY_S:
                again.append(since + TAKEOVER_DELAY_S)
                return False
        try:
            self._zk.create(path, running_data(self.address), ephemeral=True, makepath=True)
        except NodeExistsError:
            again.append(now)               # (another was quicker: read who)
            return False
        self._vacant_since.pop(destination, None)
        self.holders[destination] = self.address
        return True
