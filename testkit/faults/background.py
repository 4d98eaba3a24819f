"""Seeded fault cycles in a thread, for a test whose own workload runs meanwhile (the whole pipeline:
MySQL → connector → cluster), and the heal that follows them:

    faults = Background(Nemesis(cluster, "shop.db.orders", seed=3), cycles=8).start()
    ...                                  # the workload, the connector: anything in the root namespace
    faults.wait_cycles(4)                # (something to do half-way)
    faults.finish()                      # the last cycle over; re-raises what failed in the thread
    heal(cluster)                        # every broker up, every partition of every topic whole

`nemesis.run` is the same loop around the queue and transactional workloads of workloads.py.
"""

from __future__ import annotations

import threading
import time

from .cluster import FaultCluster
from .nemesis import Cycle, Nemesis, wait_whole


class Background(threading.Thread):
    def __init__(self, nemesis: Nemesis, cycles: int, log=print) -> None:
        super().__init__(daemon=True, name="nemesis")
        self.nemesis, self.count, self.log = nemesis, cycles, log
        self.cycles: list[Cycle] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(self.count):
                self.cycles.append(self.nemesis.cycle())
                self.log(f"cycle {i + 1}/{self.count}: {self.cycles[-1].line()}")
        except BaseException as exc:  # (handed to the test by finish())
            self.error = exc

    def start(self) -> "Background":
        super().start()
        return self

    def wait_cycles(self, n: int) -> None:
        """Until `n` cycles are over (or the thread ended)."""
        while len(self.cycles) < n and self.is_alive():
            time.sleep(0.2)

    def finish(self, timeout: float = 600) -> list[Cycle]:
        self.join(timeout)
        if self.is_alive():
            raise TimeoutError(f"the fault cycles did not end within {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"fault cycle {len(self.cycles) + 1} failed") from self.error
        return self.cycles


def topics(cluster: FaultCluster) -> dict[str, int]:
    """Every topic in ZooKeeper and its partition count."""
    from logcore.cluster.zk_client import stop_client
    client = cluster.zk()
    try:
        return {t: len(client.get_children(f"/brokers/topics/{t}/partitions"))
                for t in client.get_children("/brokers/topics")}
    finally:
        stop_client(client)


def heal(cluster: FaultCluster, timeout: float = 120) -> None:
    """Lift every cut, start or resume every broker, and wait until every partition of every topic
    (the internal ones too) has all the brokers in its ISR."""
    cluster.heal()
    wait_whole(cluster, topics(cluster), timeout)
