"""Embedded metadata store for a single broker with no ZooKeeper: topics kept in the data directory.

`meta.properties` holds the cluster and node ids (as Kafka's does); `topics.json` holds topic
descriptions, rewritten atomically (write, fsync, rename) on every change. Event loop only.
"""

from __future__ import annotations

import base64
import json
import os
import uuid

from ..storage.files import write_atomically
from .topics import TopicDirectory, TopicInfo


def read_properties(path: str) -> dict[str, str]:
    values = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
    return values


def claim_data_dir(data_dir: str, broker_id: int, cluster_id: str | None = None) -> str:
    """The cluster id of `data_dir` after checking it belongs to this broker (and, given `cluster_id`,
    to that cluster); a new directory is claimed in `meta.properties`, as Kafka does."""
    path = os.path.join(data_dir, "meta.properties")
    if os.path.exists(path):
        props = read_properties(path)
        stored = int(props.get("node.id", broker_id))
        if stored != broker_id:
            raise SystemExit(
                f"{path} says this data directory belongs to broker {stored}, not {broker_id}; "
                f"start with --broker-id {stored} or use another --data-dir"
            )
        if cluster_id is not None and props.get("cluster.id") != cluster_id:
            raise SystemExit(
                f"{path} says this data directory belongs to cluster {props.get('cluster.id')}, but ZooKeeper "
                f"holds cluster {cluster_id}; point --zookeeper at that cluster's ensemble or use another --data-dir")
        return props["cluster.id"]
    cluster_id = cluster_id or new_cluster_id()
    write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={broker_id}\n")
    return cluster_id


class LocalMetadataStore(TopicDirectory):
    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.cluster_id = claim_data_dir(data_dir, broker_id)
        self._path = os.path.join(data_dir, "topics.json")
        self.topics: dict[str, TopicInfo] = {}
        if os.path.exists(self._path):
            with open(self._path) as f:
                for item in json.load(f):
                    info = TopicInfo.from_json(item)
                    self.topics[info.name] = info

    def _save(self) -> None:
        write_atomically(self._path, json.dumps([t.to_json() for t in self.topics.values()], indent=1))

    @property
    def brokers(self) -> set[int]:
        """Ids of the live brokers that can hold replicas."""
        return {self.broker_id}

    def create(self, info: TopicInfo) -> None:
        self.topics[info.name] = info
        self._save()

    def update(self, info: TopicInfo) -> None:
        self.topics[info.name] = info
        self._save()

    def delete(self, name: str) -> TopicInfo:
        info = self.get(name)
        del self.topics[name]
        self._save()
        return info


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
