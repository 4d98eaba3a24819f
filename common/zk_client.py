"""Stopping a kazoo client without hanging (the brokers' cluster membership, Canal's HA).

When a client stops, kazoo fires every watch once more, and a DataWatch or ChildrenWatch reads its
znode again from kazoo's callback thread. A read queued just as the connection closes is never
answered, so `stop()`, which joins that thread, waits forever (seen in tests and in a broker's
controlled shutdown). `stop_client` stops the client on a thread of its own and, while it has not
finished, fails whatever requests are still queued, as kazoo does itself for a dropped connection.

With ZooKeeper itself gone (a whole cluster stopped at once), a watch retries its read forever and
`stop()` never ends. `stop_client` then gives up after a few seconds and takes back the exit hook
kazoo registered, which would otherwise wait for that thread when the process exits: the broker
hung after "stopped cleanly" until it was killed.
"""

from __future__ import annotations

import atexit
import logging
import threading

from kazoo.client import KazooClient
from kazoo.protocol.states import KeeperState

log = logging.getLogger(__name__)

UNSTICK_EVERY_S = 0.1
UNREACHABLE_TIMEOUT_S = 5.0  # how long to try when ZooKeeper is not even connected


def stop_client(zk: KazooClient, timeout_s: float = 30.0) -> None:
    def stop() -> None:
        zk.stop()
        zk.close()

    if not zk.connected:
        timeout_s = min(timeout_s, UNREACHABLE_TIMEOUT_S)
    stopper = threading.Thread(target=stop, name="kazoo-stop", daemon=True)
    stopper.start()
    for _ in range(int(timeout_s / UNSTICK_EVERY_S)):
        stopper.join(UNSTICK_EVERY_S)
        if not stopper.is_alive():
            return
        zk._notify_pending(KeeperState.CLOSED)  # (kazoo's own way to fail the requests of a lost connection)
    log.warning("the ZooKeeper client did not stop within %.0f s (is ZooKeeper gone?); leaving its threads", timeout_s)
    atexit.unregister(zk.handler.stop)
