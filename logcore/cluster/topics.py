"""Topic descriptions and Kafka's topic-name rules, shared by every metadata store."""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from ..protocol.errors import InvalidReplicaAssignment, InvalidTopic, TopicAlreadyExists, UnknownTopicOrPartition

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides, as strings (wire form)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def with_partitions(self, count: int) -> "TopicInfo":
        return replace(self, partitions=count)

    def with_configs(self, configs: dict[str, str]) -> "TopicInfo":
        return replace(self, configs=dict(configs))

    def to_json(self) -> dict:
        return {"name": self.name, "topic_id": str(self.topic_id), "partitions": self.partitions,
                "replication_factor": self.replication_factor, "configs": self.configs}

    @classmethod
    def from_json(cls, data: dict) -> "TopicInfo":
        return cls(data["name"], uuid.UUID(data["topic_id"]), data["partitions"],
                   data["replication_factor"], dict(data.get("configs", {})))


class TopicDirectory:
    """The questions every metadata store answers from its `topics` (name -> TopicInfo)."""

    topics: dict[str, TopicInfo]

    def get(self, name: str) -> TopicInfo:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist") from None

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def check_new_name(self, name: str, being_created: Collection[str] = ()) -> None:
        """Why a new topic cannot take `name` (Kafka's naming rules, existing and colliding topics,
        and topics `being_created` whose logs are being made)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        if name in being_created:
            raise TopicAlreadyExists(f"topic {name!r} is being created by another request")
        clash = next((t for t in (*self.topics, *being_created) if collision_key(t) == collision_key(name)), None)
        if clash:
            raise InvalidTopic(f"topic {name!r} collides with existing topic {clash!r}: "
                               f"'.' and '_' clash in metric names, so use one or the other")


def validate_topic_name(name: str) -> None:
    """Kafka's rules; InvalidTopic says which one the name breaks."""
    if not name:
        raise InvalidTopic("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(f"topic name is {len(name)} characters; the maximum is {MAX_NAME_LENGTH}")
    if not _LEGAL.match(name):
        raise InvalidTopic(f"topic name {name!r} is illegal: use only ASCII letters, digits, '.', '_' and '-'")


def collision_key(name: str) -> str:
    """Kafka refuses topics differing only in '.' versus '_' (they collide in metric names)."""
    return name.replace(".", "_")


def check_assignment(replicas: list[int], brokers: set[int], replication_factor: int | None = None) -> None:
    """One partition's manual replica list: known brokers, each once, `replication_factor` long."""
    if not replicas:
        raise InvalidReplicaAssignment("a manual replica assignment has an empty broker list")
    if len(set(replicas)) != len(replicas):
        raise InvalidReplicaAssignment(f"replica assignment {replicas} names a broker more than once")
    unknown = sorted(set(replicas) - brokers)
    if unknown:
        raise InvalidReplicaAssignment(
            f"replica assignment {replicas} names unknown broker(s) {unknown}; available brokers: {sorted(brokers)}")
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignment(
            f"replica assignment {replicas} has {len(replicas)} replica(s) but the topic's replication factor "
            f"is {replication_factor}")


def check_topic_assignment(assignments: dict[int, list[int]], brokers: set[int]) -> tuple[int, int]:
    """A new topic's manual assignment (partition → brokers); returns (partitions, replication factor)."""
    if sorted(assignments) != list(range(len(assignments))):
        raise InvalidReplicaAssignment(
            f"assigned partitions {sorted(assignments)} must be the consecutive sequence 0..{len(assignments) - 1}")
    replication_factor = len(assignments[0])
    for index in sorted(assignments):
        check_assignment(assignments[index], brokers)
        if len(assignments[index]) != replication_factor:
            raise InvalidReplicaAssignment(
                f"every partition needs the same number of replicas: partition 0 has {replication_factor}, "
                f"partition {index} has {len(assignments[index])}")
    return len(assignments), replication_factor
