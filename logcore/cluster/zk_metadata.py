"""The topics of a ZooKeeper cluster, as the broker's topic lifecycle sees them: what
`LocalMetadataStore` answers for a broker alone, answered from what the cluster state learnt from
ZooKeeper. A new topic is written to ZooKeeper (its replica assignment and configs); the controller
then gives its partitions leaders, and each broker hosts its replicas when it learns their state.
"""

from __future__ import annotations

from ..protocol.errors import InvalidRequest
from . import zk_layout as layout
from .controller import create_topic
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

    def update(self, info: TopicInfo) -> None:
        raise InvalidRequest(f"{info.name}: changing a topic's partitions or configs in a ZooKeeper cluster is "
                             f"not built yet (docs/cluster.md)")

    def delete(self, name: str) -> TopicInfo:
        raise InvalidRequest(f"{name}: deleting a topic in a ZooKeeper cluster is not built yet (docs/cluster.md)")
