"""A broker's membership of a ZooKeeper cluster: its registration, the live brokers, and the
controller election (docs/cluster.md, "Controller").

- Registration: the ephemeral `/brokers/ids/N`, which lives as long as the broker's session. A
  session that expires (a broker paused longer than the session timeout) loses it; the broker
  registers again when it gets a new session, as Kafka's brokers do. A broker restarted right after
  it was killed finds its old registration still there until that session expires, and waits for
  that (Kafka's brokers give up at once) before it says the id is taken.
- The live brokers: the children of `/brokers/ids`, watched.
- The controller: the broker that creates the ephemeral `/controller` first. It then raises
  `/controller_epoch` by a write conditional on the version it read, so two controllers never share
  an epoch, and every decision it writes carries its epoch. The others watch `/controller` and try
  again when it goes.

kazoo runs watches and state listeners on its own thread: listeners (`add_listener`) are called
there, after the view here has changed; one on an event loop hands over with `call_soon_threadsafe`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from . import zk_layout as layout
from .view import Node

log = logging.getLogger(__name__)


REGISTER_RETRY_S = 0.2


class BrokerIdTaken(RuntimeError):
    """Another live broker registered this broker's id."""


class ZooKeeperMembership:
    def __init__(self, zk: KazooClient, node: Node) -> None:
        self.zk = zk
        self.node = node
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._live: dict[int, Node] = {}
        self.controller_id = -1
        self.controller_epoch = 0  # this broker's epoch while it is the controller
        self.controller_epoch_version = -1  # the version of /controller_epoch it wrote: its writes check it
        self._session_lost = False
        self.leaving = False  # a controlled shutdown: no registering or standing for controller again

    @property
    def is_controller(self) -> bool:
        return self.controller_id == self.node.node_id

    def add_listener(self, listener: Callable[[], None]) -> None:
        """`listener()` after each change of the live brokers or the controller."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # (an exception would end the kazoo watch that called: no more news)
                log.exception("a listener of broker %d's membership failed", self.node.node_id)

    def live_nodes(self) -> list[Node]:
        with self._lock:
            return sorted(self._live.values(), key=lambda n: n.node_id)

    def start(self, stale_wait_s: float = 0.0) -> None:
        """Register, then follow the live brokers and the controller (and stand for it). A
        registration of this id by another session is waited out for `stale_wait_s` first."""
        deadline = time.monotonic() + stale_wait_s
        waiting = False
        while True:
            try:
                self._register()
                break
            except BrokerIdTaken as taken:
                if time.monotonic() >= deadline:
                    raise
                if not waiting:
                    waiting = True
                    log.info("%s; waiting up to %.0f s in case it is this broker's own from before a crash",
                             taken, stale_wait_s)
                time.sleep(REGISTER_RETRY_S)
        self.zk.add_listener(self._on_session_state)
        ChildrenWatch(self.zk, layout.BROKER_IDS, self._on_brokers)
        DataWatch(self.zk, layout.CONTROLLER, self._on_controller)

    def leave(self) -> None:
        """A controlled shutdown's first step: withdraw the registration (and resign as controller),
        keeping the session, so the controller moves this broker's leaderships while it still
        answers, and its watches still say when they have moved."""
        self.leaving = True
        for path in (layout.broker_path(self.node.node_id), layout.CONTROLLER):
            try:
                _, stat = self.zk.get(path)
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    self.zk.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass  # (gone already, or not this session's)
        log.info("broker %d left the cluster's live brokers for a controlled shutdown", self.node.node_id)

    def _register(self) -> None:
        path = layout.broker_path(self.node.node_id)
        try:
            self.zk.create(path, layout.encode_broker(self.node, _now_ms()), ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return self._register()  # (the old registration expired in between: create it again)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return  # (registered in this session already)
            holder = layout.decode_broker(self.node.node_id, data)
            raise BrokerIdTaken(f"broker id {self.node.node_id} is already registered in ZooKeeper by the broker at "
                                f"{holder.host}:{holder.port}: give each broker its own --broker-id") from None
        log.info("registered as broker %d at %s", self.node.node_id, path)

    def _on_brokers(self, children: list[str]) -> None:
        live = {}
        for child in children:
            try:
                live[int(child)] = layout.decode_broker(int(child), self.zk.get(layout.broker_path(int(child)))[0])
            except NoNodeError:
                continue  # (gone between the listing and the read: the next watch event says so)
            except (ValueError, layout.LayoutError) as exc:
                log.warning("ignoring %s/%s: %s", layout.BROKER_IDS, child, exc)
        with self._lock:
            self._live = live
        self._changed()

    def _on_controller(self, data: bytes | None, _stat, _event=None) -> None:
        if data is None:
            self.controller_id = -1
            self._stand_for_controller()
        else:
            try:
                self.controller_id = layout.decode_controller(data)
            except layout.LayoutError as exc:
                log.error("%s; waiting for it to change", exc)
                self.controller_id = -1
        self._changed()

    def _stand_for_controller(self) -> None:
        if self.leaving:
            return
        try:
            self.zk.create(layout.CONTROLLER, layout.encode_controller(self.node.node_id, _now_ms()), ephemeral=True)
        except NodeExistsError:
            return  # another broker won; the watch reads who
        self.controller_epoch, self.controller_epoch_version = self._raise_controller_epoch()
        self.controller_id = self.node.node_id
        log.info("broker %d is the controller (epoch %d)", self.node.node_id, self.controller_epoch)

    def _raise_controller_epoch(self) -> tuple[int, int]:
        """The new epoch and the version of `/controller_epoch` that holds it."""
        while True:
            try:
                data, stat = self.zk.get(layout.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(layout.CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = layout.decode_controller_epoch(data) + 1
            try:
                written = self.zk.set(layout.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch, written.version
            except BadVersionError:
                continue  # another controller raised it in between: read again

    def _on_session_state(self, state: str) -> None:
        """A lost session took the registration (and /controller, if this broker held it) with it:
        register again on the next session. (Listeners must not block: the work goes to a thread.)"""
        if state == KazooState.LOST:
            self._session_lost = True
            self.controller_id = -1
            self.zk.handler.spawn(self._changed)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.zk.handler.spawn(self._rejoin)

    def _rejoin(self) -> None:
        if self.leaving:
            return
        try:
            self._register()
        except BrokerIdTaken as exc:
            log.error("%s", exc)
            return
        if self.zk.exists(layout.CONTROLLER) is None:
            self._stand_for_controller()
            self._changed()


def _now_ms() -> int:
    return int(time.time() * 1000)
