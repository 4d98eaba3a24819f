"""A leader's ISR changes in a cluster (docs/cluster.md, "Replication"): a follower that has not
caught up for `replica.lag.time.max.ms` leaves the ISR, and one that has caught up comes back.
Each change is persisted first (`IsrStore.alter_isr`, a write conditional on the partition state
the leader holds) and takes effect only once it is: a leader the controller has replaced meanwhile
changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from .manager import ReplicaManager
from .partition import Partition

log = logging.getLogger(__name__)


class IsrStore(Protocol):
    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        """Persist `isr` if `leader_epoch` is still the partition's and this broker leads it."""


class IsrKeeper:
    def __init__(self, replicas: ReplicaManager, store: IsrStore, max_lag_ms: int) -> None:
        self.replicas = replicas
        self.store = store
        self.max_lag_ms = max_lag_ms
        self._changing: set[tuple[str, int]] = set()  # partitions with a change in flight
        replicas.on_caught_up = self._expand
        self.on_change: Callable[[int, int], None] | None = None
        """Called with the ISR's size before and after each change (the broker's metrics count them)."""
        self._task = asyncio.create_task(self._shrink_forever(), name="isr-shrink")

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def _expand(self, partition: Partition, follower: int) -> None:
        isr = [b for b in partition.replicas if b in partition.isr or b == follower]
        self._change(partition, isr, f"broker {follower} caught up")

    async def _shrink_forever(self) -> None:
        while True:
            await asyncio.sleep(self.max_lag_ms / 2000)
            for partition in list(self.replicas.partitions.values()):
                if partition.is_leader and (lagging := partition.lagging_followers(self.max_lag_ms)):
                    self._change(partition, [b for b in partition.isr if b not in lagging],
                                 f"broker(s) {lagging} fell behind for more than {self.max_lag_ms} ms")

    def _change(self, partition: Partition, isr: list[int], why: str) -> None:
        tp = (partition.topic, partition.index)
        if tp not in self._changing:
            self._changing.add(tp)
            asyncio.create_task(self._persist(partition, isr, why))

    async def _persist(self, partition: Partition, isr: list[int], why: str) -> None:
        epoch = partition.leader_epoch
        try:
            if await self.store.alter_isr(partition.topic, partition.index, epoch, isr):
                if partition.is_leader and partition.leader_epoch == epoch:
                    log.info("%s-%d: ISR %s -> %s (%s)", partition.topic, partition.index, partition.isr, isr, why)
                    if self.on_change is not None:
                        self.on_change(len(partition.isr), len(isr))
                    partition.set_isr(isr)
        except Exception:
            log.exception("%s-%d: cannot change the ISR to %s", partition.topic, partition.index, isr)
        finally:
            self._changing.discard((partition.topic, partition.index))
