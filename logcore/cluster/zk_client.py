"""Stopping a kazoo client without hanging.

When a client stops, kazoo fires every watch once more, and a DataWatch or ChildrenWatch reads its
znode again from kazoo's callback thread. A read queued just as the connection closes is never
answered, so `stop()`, which joins that thread, waits forever (seen in tests and in a broker's
controlled shutdown). `stop_client` stops the client on a thread of its own and, while it has not
finished, fails whatever requests are still queued, as kazoo does itself for a dropped connection.
"""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.protocol.states import KeeperState

UNSTICK_EVERY_S = 0.1


def stop_client(zk: KazooClient, timeout_s: float = 30.0) -> None:
    def stop() -> None:
        zk.stop()
        zk.close()

    stopper = threading.Thread(target=stop, name="kazoo-stop", daemon=True)
    stopper.start()
    for _ in range(int(timeout_s / UNSTICK_EVERY_S)):
        stopper.join(UNSTICK_EVERY_S)
        if not stopper.is_alive():
            return
        zk._notify_pending(KeeperState.CLOSED)  # (kazoo's own way to fail the requests of a lost connection)
