"""A leader's ISR changes in a cluster (docs/cluster.md, "Replication"): a follower that has not
caught up for `replica.lag.time.max.ms` leaves the ISR, and one that has caught up comes back.
Each change is persisted first (`IsrStore.alter_isr`, a write conditional on the partition state
the leader holds) and takes effect only once it is: a leader the controller has replaced meanwhile
changes nothing. While it is being persisted the partition counts the larger of the two ISRs for
its high watermark (`Partition.propose_isr`): once the store may name a follower in sync, the
controller may elect it, so no write it lacks is acknowledged from then on (Kafka's maximal ISR).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from .manager import ReplicaManager
from .partition import Partition

log = logging.getLogger(__name__)

RETRY_S = 0.5  # between tries of an ISR write whose outcome is unknown


class IsrStore(Protocol):
    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        """Persist `isr` if `leader_epoch` is still the partition's and this broker leads it."""


class IsrKeeper:
    def __init__(self, replicas: ReplicaManager, store: IsrStore, max_lag_ms: int) -> None:
        self.replicas = replicas
        self.store = store
        self.max_lag_ms = max_lag_ms
        self._changing: set[tuple[str, int]] = set()  # partitions with a change in flight
        self._tasks: set[asyncio.Task] = set()
        replicas.on_caught_up = self._expand
        self.on_change: Callable[[int, int], None] | None = None
        """Called with the ISR's size before and after each change (the broker's metrics count them)."""
        self._task = asyncio.create_task(self._shrink_forever(), name="isr-shrink")

    async def stop(self) -> None:
        tasks = [self._task, *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

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
            partition.propose_isr(isr)  # before the write: the store may hold it from the moment it is sent
            task = asyncio.create_task(self._persist(partition, isr, why))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _persist(self, partition: Partition, isr: list[int], why: str) -> None:
        epoch = partition.leader_epoch
        applied = False
        try:
            if await self._write(partition, epoch, isr):
                if partition.is_leader and partition.leader_epoch == epoch:
                    log.info("%s-%d: ISR %s -> %s (%s)", partition.topic, partition.index, partition.isr, isr, why)
                    if self.on_change is not None:
                        self.on_change(len(partition.isr), len(isr))
                    partition.set_isr(isr)
                    applied = True
        finally:
            self._changing.discard((partition.topic, partition.index))
            if not applied:
                partition.abandon_isr(isr)

    async def _write(self, partition: Partition, epoch: int, isr: list[int]) -> bool:
        """Persist `isr`: True once written, False if the store refused it (the partition's state moved
        on). A write whose outcome is unknown (ZooKeeper unreachable mid-write) is tried again while
        this broker leads in `epoch`, the proposal counting meanwhile: the store may hold it."""
        while True:
            try:
                return await self.store.alter_isr(partition.topic, partition.index, epoch, isr)
            except Exception as exc:
                if not (partition.is_leader and partition.leader_epoch == epoch):
                    return False
                log.warning("%s-%d: ISR %s may or may not be written (%s: %s); trying again in %.1f s",
                            partition.topic, partition.index, isr, type(exc).__name__, exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
