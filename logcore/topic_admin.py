"""Topic administration: create and delete topics, add partitions, replace a topic's configs.

Each change is planned (every check, nothing mutated) and then committed unless `validate_only`.
Where the partitions go is a placement's business, chosen once with the broker's mode
(`logcore.modes`): a broker alone makes their logs before the metadata names them (`HostHere`); in
a ZooKeeper cluster the replica assignment is written and every broker, this one included, hosts
its replicas when it learns of them (`AssignReplicas`).

Event loop only. A commit may await (a wide topic's logs are made in a worker thread, the loop
serving everything else meanwhile): the name it changes is held (`TopicAdmin.changing`) until it
ends, so no other create or partition change of that name starts in between, and what a commit
checked before its await is checked again after it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import uuid
from typing import Protocol

from .allocator import release_freed_memory
from .cluster.assignment import assign_replicas
from .cluster.topics import TopicInfo, check_assignment, check_topic_assignment
from .config import BrokerConfig, TopicConfig
from .protocol.errors import (InvalidConfig, InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor,
                              InvalidRequest, PolicyViolation, StorageError, TopicDeletionDisabled,
                              UnknownTopicOrPartition)

log = logging.getLogger(__name__)
# Each partition holds its active segment open. New partitions may not eat into this many of the
# process's descriptors, kept for connections, segment rolls and the coordinators' topics.
DESCRIPTOR_RESERVE = 1024


def _check_descriptors(partitions: int, topic: str) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    if in_use + partitions + DESCRIPTOR_RESERVE > limit:
        raise PolicyViolation(
            f"{topic}: {partitions:,} new partition(s) need as many open files, and the broker holds {in_use:,} of "
            f"its limit of {limit:,} (ulimit -n) with {DESCRIPTOR_RESERVE:,} kept for connections; raise the "
            f"limit and restart the broker, or create fewer partitions")


class DeletionListener(Protocol):
    def topics_deleted(self, topics: set[str]) -> None: ...


class Placement(Protocol):
    """Commits a planned change to where partitions live (the metadata write included)."""

    async def create(self, info: TopicInfo, assignments: dict[int, list[int]] | None,
                     topic_config: TopicConfig) -> None: ...

    async def add_partitions(self, before: TopicInfo, updated: TopicInfo, assignments: list[list[int]] | None,
                             topic_config: TopicConfig) -> None: ...

    def deleted(self, name: str) -> None: ...


class HostHere:
    """A broker alone hosts every partition: their logs are made (off the event loop) before the
    metadata names them, all or none, and served from the same loop step that names them; a deleted
    topic's logs go at once (its deletion listeners are told then)."""

    def __init__(self, metadata, replicas) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.deletion_listeners: list[DeletionListener] = []

    async def create(self, info: TopicInfo, assignments: dict[int, list[int]] | None,
                     topic_config: TopicConfig) -> None:
        made = await self._make_logs(info, range(info.partitions), topic_config)
        self.replicas.add(made)
        self.metadata.create(info)

    async def add_partitions(self, before: TopicInfo, updated: TopicInfo, assignments: list[list[int]] | None,
                             topic_config: TopicConfig) -> None:
        made = await self._make_logs(updated, range(before.partitions, updated.partitions), topic_config)
        now = self.metadata.topics.get(before.name)
        if now is None or now.topic_id != before.topic_id:  # (deleted, or deleted and created again)
            await self.replicas.discard(made)
            raise UnknownTopicOrPartition(f"topic {before.name} was deleted while its new partitions were "
                                          f"being made; none were added")
        self.replicas.add(made)
        self.metadata.update(updated)

    def deleted(self, name: str) -> None:
        self.replicas.unhost_topic(name)
        release_freed_memory()
        for listener in self.deletion_listeners:
            listener.topics_deleted({name})

    async def _make_logs(self, info: TopicInfo, indexes: range, topic_config: TopicConfig) -> list:
        """The new partitions, their logs made and led, not yet served; all or none."""
        _check_descriptors(len(indexes), info.name)
        made = await self.replicas.make_logs(info.name, indexes, topic_config)
        failed = next((p for p in made if p.offline_reason), None)
        if failed is not None:
            await self.replicas.discard(made)
            raise StorageError(f"cannot create the logs of {info.name} in {self.replicas.data_dir}: "
                               f"{failed.offline_reason}")
        return made


class AssignReplicas:
    """A ZooKeeper cluster: the replica assignment is written (given, or spread over the live brokers)
    and each broker hosts its replicas when it learns their state; on deletion every broker drops its
    replicas once the topic is gone (`Replication.topic_changed`)."""

    def __init__(self, metadata, view) -> None:
        self.metadata = metadata
        self.view = view

    async def create(self, info: TopicInfo, assignments: dict[int, list[int]] | None,
                     topic_config: TopicConfig) -> None:
        self.metadata.create(info, assignments or assign_replicas(self.view.live_nodes(), info.partitions,
                                                                  info.replication_factor))

    async def add_partitions(self, before: TopicInfo, updated: TopicInfo, assignments: list[list[int]] | None,
                             topic_config: TopicConfig) -> None:
        added = assign_replicas(self.view.live_nodes(), updated.partitions - before.partitions,
                                before.replication_factor, first_partition=before.partitions) \
            if assignments is None else {before.partitions + i: replicas for i, replicas in enumerate(assignments)}
        self.metadata.add_partitions(updated, added)

    def deleted(self, name: str) -> None:
        pass


class TopicAdmin:
    """CreateTopics, DeleteTopics, CreatePartitions and topic configs: checks here, commits by the placement."""

    def __init__(self, config: BrokerConfig, metadata, replicas, placement: Placement) -> None:
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
        self.placement = placement
        self.changing: set[str] = set()  # names a create or a partition change is committing

    def topic_config(self, info: TopicInfo) -> TopicConfig:
        return TopicConfig(self.config, info.configs)

    async def create(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     assignments: dict[int, list[int]] | None = None, configs: dict[str, str | None] | None = None,
                     validate_only: bool = False) -> TopicInfo:
        """CreateTopics for one topic; -1 means the broker default (num.partitions /
        default.replication.factor). `assignments` maps partition → brokers and replaces both counts."""
        self.metadata.check_new_name(name, being_created=self.changing)
        if assignments:
            if partitions != -1 or replication_factor != -1:
                raise InvalidRequest("give either num_partitions/replication_factor or a replica assignment, not both")
            partitions, replication_factor = check_topic_assignment(assignments, self.metadata.brokers)
        else:
            partitions = self.config.get("num.partitions") if partitions == -1 else partitions
            if replication_factor == -1:
                replication_factor = self.config.get("default.replication.factor")
            self._check_counts(partitions, replication_factor)
        configs = configs or {}
        nulls = sorted(key for key, value in configs.items() if value is None)
        if nulls:
            raise InvalidConfig(f"null values are not allowed for topic configs: {', '.join(nulls)}")
        info = TopicInfo(name, uuid.uuid4(), partitions, replication_factor, dict(configs))
        topic_config = self.topic_config(info)  # validates the configs
        if validate_only:
            return info
        async with self._holding(name):
            await self.placement.create(info, assignments, topic_config)
        log.info("created topic %s with %d partition(s)", name, partitions)
        return info

    def _check_counts(self, partitions: int, replication_factor: int) -> None:
        if partitions < 1:
            raise InvalidPartitions(f"number of partitions must be at least 1 (or -1 for the broker default), "
                                    f"got {partitions}")
        if replication_factor < 1:
            raise InvalidReplicationFactor(f"replication factor must be at least 1 (or -1 for the broker default), "
                                           f"got {replication_factor}")
        brokers = len(self.metadata.brokers)
        if replication_factor > brokers:
            raise InvalidReplicationFactor(
                f"replication factor {replication_factor} larger than available brokers {brokers}")

    def delete(self, name: str) -> TopicInfo:
        if not self.config.get("delete.topic.enable"):
            raise TopicDeletionDisabled("topic deletion is disabled on this broker (delete.topic.enable=false)")
        info = self.metadata.delete(name)
        self.placement.deleted(name)
        log.info("deleted topic %s", name)
        return info

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> TopicInfo:
        """Grow `name` to `count` partitions; `assignments` gives the brokers of each new one."""
        info = self.metadata.get(name)
        self._check_not_changing(name)
        if count < info.partitions:
            raise InvalidPartitions(f"topic {name} has {info.partitions} partitions, more than the requested {count}; "
                                    f"partitions can only be added")
        if count == info.partitions:
            raise InvalidPartitions(f"topic {name} already has {count} partitions")
        if assignments is not None:
            added = count - info.partitions
            if len(assignments) != added:
                raise InvalidReplicaAssignment(
                    f"adding {added} partition(s) needs {added} replica assignment(s), got {len(assignments)}")
            for replicas in assignments:
                check_assignment(replicas, self.metadata.brokers, info.replication_factor)
        updated = info.with_partitions(count)
        if validate_only:
            return updated
        async with self._holding(name):
            await self.placement.add_partitions(info, updated, assignments, self.topic_config(updated))
        log.info("topic %s now has %d partition(s)", name, count)
        return updated

    def _check_not_changing(self, name: str) -> None:
        if name in self.changing:
            raise InvalidRequest(f"partitions are being added to topic {name} by another request; "
                                 f"send this one again once it is answered")

    @contextlib.asynccontextmanager
    async def _holding(self, name: str):
        self.changing.add(name)
        try:
            yield
        finally:
            self.changing.discard(name)

    def set_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> TopicInfo:
        """Replace the topic's whole override set; the partition logs use it at once."""
        updated = self.metadata.get(name).with_configs(configs)
        self._check_not_changing(name)
        topic_config = self.topic_config(updated)  # validates
        if not validate_only:
            self.metadata.update(updated)
            self.replicas.reconfigure(name, topic_config)  # (in a cluster, the others when they hear of it)
            log.info("topic %s configs now %s", name, configs)
        return updated
