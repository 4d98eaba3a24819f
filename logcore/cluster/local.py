"""Embedded metadata store for a single broker with no ZooKeeper: topics kept in the data directory.

`meta.properties` holds the cluster and node ids (as Kafka's does); `topics.json` holds topic
descriptions, rewritten atomically (write, fsync, rename) on every change. Event loop only.
"""

from __future__ import annotations

import base64
import json
import os
import uuid

from ..protocol.errors import InvalidTopic, TopicAlreadyExists, UnknownTopicOrPartition
from ..storage.files import write_atomically
from .topics import TopicInfo, collision_key, validate_topic_name


def read_properties(path: str) -> dict[str, str]:
    values = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
    return values


class LocalMetadataStore:
    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.cluster_id = self._load_identity()
        self._path = os.path.join(data_dir, "topics.json")
        self.topics: dict[str, TopicInfo] = {}
        if os.path.exists(self._path):
            with open(self._path) as f:
                for item in json.load(f):
                    info = TopicInfo.from_json(item)
                    self.topics[info.name] = info

    def _load_identity(self) -> str:
        path = os.path.join(self.data_dir, "meta.properties")
        if os.path.exists(path):
            props = read_properties(path)
            stored = int(props.get("node.id", self.broker_id))
            if stored != self.broker_id:
                raise SystemExit(
                    f"{path} says this data directory belongs to broker {stored}, not {self.broker_id}; "
                    f"start with --broker-id {stored} or use another --data-dir"
                )
            return props["cluster.id"]
        cluster_id = _short_uuid()
        write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.broker_id}\n")
        return cluster_id

    def _save(self) -> None:
        write_atomically(self._path, json.dumps([t.to_json() for t in self.topics.values()], indent=1))

    def get(self, name: str) -> TopicInfo:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist") from None

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    @property
    def brokers(self) -> set[int]:
        """Ids of the live brokers that can hold replicas."""
        return {self.broker_id}

    def check_new_name(self, name: str) -> None:
        """Why a new topic cannot take `name` (Kafka's naming rules, existing and colliding topics)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        clash = next((t for t in self.topics if collision_key(t) == collision_key(name)), None)
        if clash:
            raise InvalidTopic(f"topic {name!r} collides with existing topic {clash!r}: "
                               f"'.' and '_' clash in metric names, so use one or the other")

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


def _short_uuid() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
