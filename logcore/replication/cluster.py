"""A broker's replicas in a ZooKeeper cluster (docs/cluster.md, "How brokers learn leadership"):
the partition states the controller writes reach this broker through ZooKeeper watches, and each
one assigned here becomes a leader (its ISR kept by `IsrKeeper`) or a follower (copied by the
replica fetchers). State changes hop from kazoo's thread to the event loop, where they are applied
in the order they came. The logs of replicas new here are made in a worker thread, those learnt
meanwhile together (a topic of thousands of partitions), and their states applied once they exist.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Callable

from kazoo.exceptions import KazooException

from ..cluster.election import NO_LEADER
from ..cluster.topics import TopicInfo
from ..cluster.view import Node
from ..cluster.zk_cluster import ZooKeeperCluster
from ..security.inter_broker import PeerSecurity
from ..cluster.zk_metadata import ZooKeeperMetadataStore
from ..config import BrokerConfig, TopicConfig
from .fetcher import ReplicaFetchers
from .isr import IsrKeeper
from .manager import ReplicaManager
from .partition import Partition

log = logging.getLogger(__name__)


class Replication:
    def __init__(self, cluster: ZooKeeperCluster, metadata: ZooKeeperMetadataStore, replicas: ReplicaManager,
                 topic_config: Callable[[TopicInfo], TopicConfig], config: BrokerConfig,
                 peer_security: PeerSecurity | None = None) -> None:
        self.cluster = cluster
        self.metadata = metadata
        self.replicas = replicas
        self.topic_config = topic_config
        self.config = config
        self.broker_id = replicas.broker_id
        self.fetchers = ReplicaFetchers(self.broker_id, cluster.address_of, config, peer_security)
        self.isr: IsrKeeper | None = None
        self._ready = False
        self._led_nothing: asyncio.Event | None = None  # set during a controlled shutdown
        # Told of each partition that became leader or stopped being it (the coordinators follow).
        self.on_role_change: Callable[[Partition], None] | None = None
        self._to_make: set[tuple[str, int]] = set()  # new replicas whose logs are to be made
        self._making: asyncio.Task | None = None

    async def start(self, node: Node) -> None:
        """Connect, open the replicas this broker already holds, join the live brokers, then take
        every state."""
        loop = asyncio.get_running_loop()
        self.cluster.state.add_listener(lambda topic, index: loop.call_soon_threadsafe(self.apply, topic, index))
        self.cluster.state.add_topic_listener(lambda topic: loop.call_soon_threadsafe(self.topic_changed, topic))
        self.cluster.membership.add_listener(lambda: loop.call_soon_threadsafe(self._check_led_nothing))
        await loop.run_in_executor(None, self.cluster.start, node)
        self.metadata.started()
        await self._open_existing()
        self.replicas.started()
        await loop.run_in_executor(None, self.cluster.register)
        self.isr = IsrKeeper(self.replicas, self.cluster, self.config.get("replica.lag.time.max.ms"))
        self._ready = True
        for topic in {topic for topic, _ in self.replicas.partitions}:
            self.topic_changed(topic)  # (deleted or reconfigured while the logs opened)
        for topic, partitions in self.cluster.state.topics().items():
            for index in partitions:
                self.apply(topic, index)

    async def leave(self, timeout_s: float) -> None:
        """Controlled shutdown (SIGTERM): leave the live brokers so that the controller moves every
        leadership this broker holds to an in-sync follower, and wait until it has; clients then
        see only retriable NOT_LEADER_OR_FOLLOWER answers and move to the new leaders. It copies
        nothing more meanwhile: a follower that kept fetching would rejoin the ISRs it is leaving, and
        acks=all writes would wait for it once it is gone (Kafka's controller stops its replicas too)."""
        self._led_nothing = asyncio.Event()
        for tp in list(self.replicas.partitions):
            self.fetchers.unfollow(tp)
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.cluster.membership.leave)
        except KazooException as exc:  # (ZooKeeper itself stopped first: nothing can move, stop at once)
            log.warning("controlled shutdown skipped: ZooKeeper cannot be reached (%s)", type(exc).__name__)
            return
        self._check_led_nothing()
        try:
            async with asyncio.timeout(timeout_s):
                await self._led_nothing.wait()
        except TimeoutError:
            led = [f"{p.topic}-{p.index}" for p in self.replicas.partitions.values() if p.is_leader]
            log.warning("controlled shutdown: still leading %s after %.0f s; stopping anyway", ", ".join(led),
                        timeout_s)

    def _check_led_nothing(self) -> None:
        """A controlled shutdown can stop waiting once this broker leads nothing, or once no other broker
        is live to take over (the whole cluster stopping at once)."""
        if self._led_nothing is None:
            return
        others = [n for n in self.cluster.live_nodes() if n.node_id != self.broker_id]
        if not others or not any(p.is_leader for p in self.replicas.partitions.values()):
            self._led_nothing.set()

    async def stop(self) -> None:
        self._ready = False
        if self._making is not None:
            self._making.cancel()
        await self.fetchers.stop()
        if self.isr is not None:
            await self.isr.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.cluster.stop)

    async def _open_existing(self) -> None:
        """The logs in the data directory of partitions still assigned here, with the checkpoints
        of the last shutdown (a log opened later would skip recovery)."""
        wanted = []
        for name in sorted(os.listdir(self.replicas.data_dir)):
            topic, _, index = name.rpartition("-")
            info = self.metadata.topics.get(topic)
            if not index.isdigit() or info is None or not os.path.isdir(os.path.join(self.replicas.data_dir, name)):
                continue
            if self.broker_id in self.cluster.state.replicas(topic, int(index)):
                wanted.append((topic, int(index), self.topic_config(info)))
        await self.replicas.open_existing(wanted, alone=False)

    def _make_log(self, topic: str, index: int) -> None:
        """A replica new here: its log is made off the event loop, then its state applied."""
        self._to_make.add((topic, index))
        if self._making is None or self._making.done():
            self._making = asyncio.create_task(self._make_logs())

    async def _make_logs(self) -> None:
        """Make the logs waiting, a topic at a time, until none wait. A replica whose topic went (or
        that was reassigned away) while its log was made is deleted again, never served."""
        while self._to_make:
            waiting = sorted(tp for tp in self._to_make if tp not in self.replicas.partitions)
            self._to_make.clear()
            for topic, indexes in itertools.groupby(waiting, key=lambda tp: tp[0]):
                info = self.metadata.topics.get(topic)
                if info is None:
                    continue
                indexes = [index for _, index in indexes]
                leading = {index: state.leader_epoch for index in indexes
                           if (state := self.cluster.state.state(topic, index)) and state.leader == self.broker_id}
                made = await self.replicas.make_logs(topic, indexes, self.topic_config(info), alone=False,
                                                     leader_epochs=leading)
                now = self.metadata.topics.get(topic)
                kept = [p for p in made if now is not None and now.topic_id == info.topic_id
                        and self.broker_id in self.cluster.state.replicas(topic, p.index)]
                self.replicas.add(kept)
                for partition in kept:
                    self.apply(topic, partition.index)
                await self.replicas.discard([p for p in made if p not in kept])

    def topic_changed(self, topic: str) -> None:
        """A deleted topic's replicas go; a changed one's logs take its configs."""
        if not self._ready:
            return
        info = self.metadata.topics.get(topic)
        if info is None:
            hosted = [tp for tp in self.replicas.partitions if tp[0] == topic]
            for tp in hosted:
                self.fetchers.unfollow(tp)
            if hosted:
                self.replicas.unhost_topic(topic)
                log.info("dropped the replicas of deleted topic %s", topic)
            self._check_led_nothing()
        else:
            self.replicas.reconfigure(topic, self.topic_config(info))

    def _drop_reassigned(self, topic: str, index: int, state) -> None:
        """A reassignment took this broker out of the partition's replicas: stop copying, delete it."""
        partition = self.replicas.partitions.get((topic, index))
        if partition is None:
            return
        self.fetchers.unfollow((topic, index))
        was_leading = partition.is_leader
        partition.become_follower(state.leader, state.leader_epoch, [], [])
        if was_leading and self.on_role_change is not None:
            self.on_role_change(partition)
        self.replicas.unhost(topic, index)
        log.info("%s-%d: no longer a replica here (reassigned); deleted its log", topic, index)
        self._check_led_nothing()

    def apply(self, topic: str, index: int) -> None:
        """Take the partition's latest state: lead it, follow its leader, or wait for one."""
        if not self._ready:
            return  # (`start` applies every state once it is ready)
        info = self.metadata.topics.get(topic)
        state = self.cluster.state.state(topic, index)
        replicas = self.cluster.state.replicas(topic, index)
        if info is None or state is None:
            return
        if self.broker_id not in replicas:
            self._drop_reassigned(topic, index, state)
            return
        partition = self.replicas.partitions.get((topic, index))
        if partition is None:
            self._make_log(topic, index)
            return
        if partition.offline_reason:
            return
        role = (partition.is_leader, partition.leader_epoch)
        if state.leader == self.broker_id:
            self.fetchers.unfollow((topic, index))
            if not partition.is_leader or partition.leader_epoch != state.leader_epoch:
                log.info("%s-%d: leading in epoch %d, ISR %s", topic, index, state.leader_epoch, list(state.isr))
            partition.become_leader(state.leader_epoch, replicas, list(state.isr))
        else:
            partition.become_follower(state.leader, state.leader_epoch, replicas, list(state.isr))
            if state.leader == NO_LEADER or self._led_nothing is not None:  # (no leader, or shutting down)
                self.fetchers.unfollow((topic, index))
            else:
                self.fetchers.follow(partition, state.leader, state.leader_epoch)
        if self.on_role_change is not None and (partition.is_leader, partition.leader_epoch) != role:
            self.on_role_change(partition)
        self._check_led_nothing()
