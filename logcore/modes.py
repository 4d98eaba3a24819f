"""A broker's mode, chosen once: alone (no ZooKeeper; its metadata in its data directory, every
partition hosted and led here) or a member of a ZooKeeper cluster (docs/cluster.md).

`mode_for` is the one place that asks which. A mode builds what differs between the two — the
metadata store, the cluster view the APIs answer from, where producer-id blocks, SCRAM credentials,
group configs and ACLs are kept, how a new topic's partitions are placed — and brings this broker's
partitions up and down. Everything above it takes what it built and never asks again.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from .cluster.local import LocalMetadataStore
from .cluster.topics import TopicInfo
from .cluster.view import Node, SingleBrokerView
from .cluster.zk_cluster import ZooKeeperCluster
from .cluster.zk_metadata import ZooKeeperMetadataStore
from .config import BrokerConfig, TopicConfig
from .coordinator.producer_ids import FileBlocks, ZooKeeperBlocks
from .features import FileFeatures, ZooKeeperFeatures
from .group_configs import FileGroupConfigs, ZooKeeperGroupConfigs
from .replication.cluster import Replication
from .replication.manager import ReplicaManager
from .replication.partition import Partition
from .security.acl_store import FileAcls, ZooKeeperAcls
from .security.credentials import FileCredentials, ZooKeeperCredentials
from .security.inter_broker import PeerSecurity
from .topic_admin import AssignReplicas, DeletionListener, HostHere



class Alone:
    """A broker with no ZooKeeper: a cluster of one, which it controls and coordinates entirely."""

    alone = True  # (its coordinators own every partition of their topics)

    def __init__(self, data_dir: str, broker_id: int, replicas: ReplicaManager, this_node: Callable[[], Node]) -> None:
        self.data_dir = data_dir
        self.replicas = replicas
        self.metadata = LocalMetadataStore(data_dir, broker_id)
        self.view = SingleBrokerView(broker_id, replicas, this_node)
        self.id_blocks = FileBlocks(data_dir, broker_id)
        self.credentials = FileCredentials(data_dir)
        self.group_configs = FileGroupConfigs(data_dir)
        self.features = FileFeatures(data_dir)
        self.placement = HostHere(self.metadata, replicas)

    def acl_store(self) -> FileAcls:
        return FileAcls(self.data_dir)

    def add_deletion_listener(self, listener: DeletionListener) -> None:
        """`listener.topics_deleted({topic})` once a deleted topic's logs are gone."""
        self.placement.deletion_listeners.append(listener)

    async def start(self, node: Node, topic_config: Callable[[TopicInfo], TopicConfig],
                    on_role_change: Callable[[Partition], None], on_isr_change: Callable[[int, int], None],
                    peer_security: PeerSecurity | None) -> None:
        """Open the log of every partition of every topic (and lead it)."""
        await self.replicas.open_existing([(info.name, index, config) for info in self.metadata.topics.values()
                                           for config in [topic_config(info)] for index in range(info.partitions)])
        self.replicas.started()

    async def leave(self, timeout_s: float) -> None:
        """Controlled shutdown: no other broker to hand leadership to."""

    async def stop(self) -> None:
        pass


class InCluster:
    """A broker of a ZooKeeper cluster: it hosts the replicas assigned to it and leads or follows
    each as the controller decides (`Replication`)."""

    alone = False  # (its coordinators own the partitions of their topics it leads, once loaded)

    def __init__(self, zookeeper: ZooKeeperCluster, data_dir: str, broker_id: int, replicas: ReplicaManager,
                 config: BrokerConfig) -> None:
        self.zookeeper = zookeeper
        self.replicas = replicas
        self.config = config
        self.metadata = ZooKeeperMetadataStore(zookeeper, data_dir, broker_id)
        self.view = zookeeper
        self.id_blocks = ZooKeeperBlocks(zookeeper.zk, broker_id)
        self.credentials = ZooKeeperCredentials(zookeeper.zk)
        self.group_configs = ZooKeeperGroupConfigs(zookeeper.zk)
        self.features = ZooKeeperFeatures(zookeeper.zk)
        self.placement = AssignReplicas(self.metadata, self.view)
        self.replication: Replication | None = None  # once started
        self._deletion_listeners: list[DeletionListener] = []

    def acl_store(self) -> ZooKeeperAcls:
        return ZooKeeperAcls(self.zookeeper.zk)

    def add_deletion_listener(self, listener: DeletionListener) -> None:
        """`listener.topics_deleted({topic})` on the event loop once the controller deleted a topic (any
        broker may coordinate groups that committed offsets on it)."""
        self._deletion_listeners.append(listener)

    async def start(self, node: Node, topic_config: Callable[[TopicInfo], TopicConfig],
                    on_role_change: Callable[[Partition], None], on_isr_change: Callable[[int, int], None],
                    peer_security: PeerSecurity | None) -> None:
        """Join the cluster as `node` (its listeners bound), then take the state of each replica assigned here."""
        loop = asyncio.get_running_loop()
        for listener in self._deletion_listeners:
            self.zookeeper.state.add_deletion_listener(
                lambda topic, listener=listener: loop.call_soon_threadsafe(listener.topics_deleted, {topic}))
        self.replication = Replication(self.zookeeper, self.metadata, self.replicas, topic_config, self.config,
                                       peer_security)
        self.replication.on_role_change = on_role_change
        await self.replication.start(node)
        self.replication.isr.on_change = on_isr_change

    async def leave(self, timeout_s: float) -> None:
        """Controlled shutdown: hand every leadership to an in-sync follower first."""
        if self.replication is not None:
            await self.replication.leave(timeout_s)

    async def stop(self) -> None:
        if self.replication is not None:
            await self.replication.stop()


def mode_for(config: BrokerConfig, data_dir: str, broker_id: int, replicas: ReplicaManager,
             this_node: Callable[[], Node]) -> Alone | InCluster:
    """In a ZooKeeper cluster when `zookeeper.connect` is set, else alone."""
    connect = config.get("zookeeper.connect")
    if not connect:
        return Alone(data_dir, broker_id, replicas, this_node)
    return InCluster(ZooKeeperCluster(connect, broker_id, config), data_dir, broker_id, replicas, config)
