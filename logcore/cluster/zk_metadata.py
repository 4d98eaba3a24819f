"""The topics of a ZooKeeper cluster, as the broker's topic lifecycle sees them: what
`LocalMetadataStore` answers for a broker alone, answered from what the cluster state learnt from
ZooKeeper. A new topic is written to ZooKeeper (its replica assignment and configs); the controller
then gives its partitions leaders, and each broker hosts its replicas when it learns their state.
Changes go the same way: new partitions extend the assignment, configs are rewritten, and a
deletion is a request the controller carries out.
"""

from __future__ import annotations

from . import zk_layout as layout
from .controller import add_partitions, create_topic, request_deletion, set_topic_configs
from .local import claim_data_dir
from .topics import TopicDirectory, TopicInfo
from .zk_cluster import ZooKeeperCluster


class ZooKeeperMetadataStore(TopicDirectory):
    def __init__(self, cluster: ZooKeeperCluster, data_dir: str, broker_id: int) -> None:
        self.cluster = cluster
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.cluster_id = ""

    def started(self) -> None:
        """Once connected: the data directory must belong to this broker and this cluster."""
        self.cluster_id = claim_data_dir(self.data_dir, self.broker_id, self.cluster.cluster_id)

    @property
    def topics(self) -> dict[str, TopicInfo]:
        return self.cluster.state.infos

    @property
    def brokers(self) -> set[int]:
        return {node.node_id for node in self.cluster.live_nodes()}

    def create(self, info: TopicInfo, assignment: dict[int, list[int]]) -> None:
        create_topic(self.cluster.zk, info.name, layout.encode_uuid(info.topic_id), assignment, info.configs)

    def add_partitions(self, info: TopicInfo, assignment: dict[int, list[int]]) -> None:
        """`assignment`: the replicas of the new partitions only."""
        current = self.cluster.state.topics().get(info.name, {})
        add_partitions(self.cluster.zk, info.name, layout.encode_uuid(info.topic_id), {**current, **assignment})

    def update(self, info: TopicInfo) -> None:
        """A topic's new configs (its partitions grow through `add_partitions`)."""
        set_topic_configs(self.cluster.zk, info.name, info.configs)

    def delete(self, name: str) -> TopicInfo:
        """Ask the controller to delete the topic; each broker drops its replicas when it is gone."""
        info = self.get(name)
        request_deletion(self.cluster.zk, name)
        return info
