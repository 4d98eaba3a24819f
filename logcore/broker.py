"""Broker: wires the configuration, the metadata store, the replica manager and the listener, and
owns topic lifecycle (create, delete, add partitions, alter configs) and background housekeeping.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
import uuid

from .allocator import release_freed_memory
from .api import load_handlers
from .cluster.local import LocalMetadataStore
from .metrics import BrokerMetrics
from .cluster.topics import TopicInfo, check_assignment, check_topic_assignment
from .cluster.assignment import assign_replicas
from .cluster.view import Node, SingleBrokerView
from .cluster.zk_cluster import ZooKeeperCluster
from .cluster.zk_metadata import ZooKeeperMetadataStore
from .config import BrokerConfig, TopicConfig
from .coordinator.group_coordinator import GroupCoordinator
from .coordinator.offsets_codec import OFFSETS_TOPIC
from .coordinator.producer_ids import FileBlocks, ProducerIdManager, ZooKeeperBlocks
from .coordinator.transaction_coordinator import TransactionCoordinator
from .coordinator.transaction_log import TRANSACTION_TOPIC
from .coordinator.transaction_markers import MarkerWriter
from .protocol.errors import (InvalidConfig, InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor,
                              InvalidRequest, PolicyViolation, StorageError, TopicDeletionDisabled)
from .protocol.fetch_session import FetchSessionCache
from .replication.cluster import Replication
from .replication.manager import ReplicaManager
from .replication.partition import Partition
from .security.acl_store import FileAcls, ZooKeeperAcls
from .security.authorizer import Authorizer
from .security.credentials import FileCredentials, ZooKeeperCredentials
from .security.inter_broker import peer_security
from .security.listeners import Listener, listeners_from
from .security.per_listener import sasl_sessions, tls_context
from .server import KafkaServer, ServerLimits

log = logging.getLogger(__name__)
# Each partition holds its active segment open. New partitions may not eat into this many of the
# process's descriptors, kept for connections, segment rolls and the coordinators' topics.
DESCRIPTOR_RESERVE = 1024


def raise_descriptor_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit (Kafka's docs ask for 100,000+); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _check_descriptors(partitions: int, topic: str) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    if in_use + partitions + DESCRIPTOR_RESERVE > limit:
        raise PolicyViolation(
            f"{topic}: {partitions:,} new partition(s) need as many open files, and the broker holds {in_use:,} of "
            f"its limit of {limit:,} (ulimit -n) with {DESCRIPTOR_RESERVE:,} kept for connections; raise the "
            f"limit and restart the broker, or create fewer partitions")


class Broker:
    def __init__(self, data_dir: str, host: str = "127.0.0.1", port: int = 9092,
                 config: BrokerConfig | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.config = config or BrokerConfig()
        self.broker_id = self.config.get("broker.id")
        self.replicas = ReplicaManager(self.data_dir, self.broker_id, self.config)
        connect = self.config.get("zookeeper.connect")
        self.zookeeper = ZooKeeperCluster(connect, self.broker_id, self.config) if connect else None
        if self.zookeeper is None:
            self.metadata = LocalMetadataStore(self.data_dir, self.broker_id)
            self.cluster = SingleBrokerView(self.broker_id, self.replicas, lambda: self.node)
            id_blocks = FileBlocks(self.data_dir, self.broker_id)
        else:
            self.metadata = ZooKeeperMetadataStore(self.zookeeper, self.data_dir, self.broker_id)
            self.cluster = self.zookeeper
            id_blocks = ZooKeeperBlocks(self.zookeeper.zk, self.broker_id)
        self.replication: Replication | None = None  # in a cluster, once started
        self.fetch_sessions = FetchSessionCache()  # KIP-227 incremental fetch sessions
        self.groups = GroupCoordinator(self.replicas, self.metadata, self.config, self.create_topic)
        self.listeners, inter_broker = listeners_from(self.config, host, port)
        self.peer_security = peer_security(self.config, inter_broker)  # (None: PLAINTEXT between brokers)
        self.txn_markers = MarkerWriter(self.replicas, self.metadata, self.cluster, self.peer_security)
        self.transactions = TransactionCoordinator(self.replicas, self.metadata, self.config, self.create_topic,
                                                   ProducerIdManager(id_blocks), self.txn_markers,
                                                   self.groups)
        if self.zookeeper is not None:  # (a cluster's coordinators load the partitions this broker leads)
            self.groups.led = set()
            self.transactions.led = set()
        self.credentials = FileCredentials(self.data_dir) if self.zookeeper is None \
            else ZooKeeperCredentials(self.zookeeper.zk)
        self.authorizer = Authorizer.from_config(  # None: no authorizer.class.name, every request is allowed
            self.config, lambda: FileAcls(self.data_dir) if self.zookeeper is None else ZooKeeperAcls(self.zookeeper.zk))
        handlers, limits = load_handlers(), ServerLimits.from_config(self.config)
        self.servers = {listener.name: KafkaServer(self, listener.host, listener.port, handlers, limits, listener.name,
                                                   tls_context(self.config, listener),
                                                   sasl_sessions(self.config, listener, self.credentials))
                        for listener in self.listeners}
        self.server = self.servers[inter_broker.name]  # the one brokers replicate over, registered as host:port
        self.metrics = BrokerMetrics(self)
        self.metrics_endpoint = None  # an aiohttp runner, when prometheus.listener is set
        self._tasks: list[asyncio.Task] = []
        self.started_ms = 0

    # -- addresses -----------------------------------------------------------------------------

    def endpoint(self, listener: Listener) -> tuple[str, int]:
        """Where clients of `listener` are told to connect: its advertised address, else the bound one."""
        server = self.servers[listener.name]
        return listener.advertised_host or server.host, listener.advertised_port or server.port

    @property
    def advertised(self) -> tuple[str, int]:
        return self.endpoint(next(l for l in self.listeners if self.servers[l.name] is self.server))

    @property
    def address(self) -> str:
        host, port = self.advertised
        return f"{host}:{port}"

    @property
    def node(self) -> Node:
        host, port = self.advertised
        endpoints = tuple((listener.name, *self.endpoint(listener)) for listener in self.listeners)
        return Node(self.broker_id, host, port, self.config.get("broker.rack"), endpoints)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        raise_descriptor_limit()
        if self.zookeeper is None:
            for info in self.metadata.topics.values():
                topic_config = self.topic_config(info)
                for index in range(info.partitions):
                    self.replicas.host(info.name, index, topic_config)
            self.replicas.started()
            if self.authorizer is not None:
                self.authorizer.store.start()
            await self.groups.start()
            await self.transactions.start()
            for server in self.servers.values():
                await server.start()
        else:
            # The ports are bound first (they are the ones registered), clients served once the broker has joined.
            for server in self.servers.values():
                await server.start(serving=False)
            # Any broker may coordinate groups that committed offsets on a topic the controller deletes.
            loop = asyncio.get_running_loop()
            self.zookeeper.state.add_deletion_listener(
                lambda topic: loop.call_soon_threadsafe(self.groups.topics_deleted, {topic}))
            self.replication = Replication(self.zookeeper, self.metadata, self.replicas, self.topic_config,
                                           self.config, self.peer_security)
            self.replication.on_role_change = self._coordinate
            await self.replication.start(self.node)
            self.replication.isr.on_change = self.metrics.isr_changed
            if self.authorizer is not None:
                await asyncio.to_thread(self.authorizer.store.start)
            await self.groups.start()
            await self.transactions.start()
            for server in self.servers.values():
                await server.serve()
        self.started_ms = int(time.time() * 1000)
        self.replicas.cleaner.start()
        if listener := self.config.get("prometheus.listener"):
            from .metrics_endpoint import serve_metrics  # aiohttp only for a broker that serves metrics
            self.metrics_endpoint = await serve_metrics(self.metrics.exposition, listener)
        self._tasks = [
            asyncio.create_task(self._every(self.config.get("log.retention.check.interval.ms"),
                                            self.replicas.apply_retention)),
            asyncio.create_task(self._every(self.config.get("log.flush.scheduler.interval.ms"),
                                            lambda: self.replicas.flush_due(int(time.time() * 1000)))),
            asyncio.create_task(self._every(max(self.config.get("log.flush.offset.checkpoint.interval.ms"), 1),
                                            self.replicas.checkpoint)),
        ]
        log.info("broker %d listening on %s (data dir %s)", self.broker_id, ", ".join(
            f"{l.name}://{host}:{port}" if len(self.listeners) > 1 else f"{host}:{port}"
            for l in self.listeners for host, port in [self.endpoint(l)]), self.data_dir)

    async def stop(self) -> None:
        if self.replication is not None and self.config.get("controlled.shutdown.enable"):
            await self.replication.leave(self.config.get("controlled.shutdown.max.retries")
                                         * self.config.get("controlled.shutdown.retry.backoff.ms") / 1000)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.replicas.cleaner.stop()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.cleanup()
        await self.groups.stop()
        await self.transactions.stop()
        for server in self.servers.values():
            await server.stop()
        if self.replication is not None:
            await self.replication.stop()
        self.replicas.shutdown()
        log.info("broker %d stopped cleanly", self.broker_id)

    def _coordinate(self, partition: Partition) -> None:
        """In a cluster the coordinator of a partition of __consumer_offsets or __transaction_state
        is its leader."""
        coordinator = {OFFSETS_TOPIC: self.groups, TRANSACTION_TOPIC: self.transactions}.get(partition.topic)
        if coordinator is None:
            return
        if partition.is_leader:
            coordinator.became_leader(partition)
        else:
            coordinator.unload_partition(partition.index)

    async def _every(self, interval_ms: int, job) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                job()
            except Exception:
                log.exception("background job %s failed", job)

    # -- topics --------------------------------------------------------------------------------
    # Each change is planned (every check, nothing mutated) and then committed unless `validate_only`.

    def topic_config(self, info: TopicInfo) -> TopicConfig:
        return TopicConfig(self.config, info.configs)

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     assignments: dict[int, list[int]] | None = None, configs: dict[str, str | None] | None = None,
                     validate_only: bool = False) -> TopicInfo:
        """CreateTopics for one topic; -1 means the broker default (num.partitions /
        default.replication.factor). `assignments` maps partition → brokers and replaces both counts."""
        self.metadata.check_new_name(name)
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
        if self.zookeeper is not None:  # each broker hosts its replicas when it learns their state
            self.metadata.create(info, assignments or assign_replicas(self.cluster.live_nodes(), partitions,
                                                                      replication_factor))
        else:
            self._host_new(info, range(partitions), topic_config)
            self.metadata.create(info)
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

    def _host_new(self, info: TopicInfo, indexes: range, topic_config: TopicConfig) -> None:
        """Open the new partitions' logs before the metadata names them; all or none."""
        _check_descriptors(len(indexes), info.name)
        try:
            for index in indexes:
                self.replicas.host(info.name, index, topic_config)
        except OSError as exc:
            for index in indexes:
                self.replicas.unhost(info.name, index)
            raise StorageError(f"cannot create the logs of {info.name} in {self.data_dir}: {exc}") from exc

    def delete_topic(self, name: str) -> TopicInfo:
        if not self.config.get("delete.topic.enable"):
            raise TopicDeletionDisabled("topic deletion is disabled on this broker (delete.topic.enable=false)")
        info = self.metadata.delete(name)
        if self.zookeeper is None:  # (in a cluster every broker does both once the topic is gone)
            self.replicas.unhost_topic(name)
            release_freed_memory()
            self.groups.topics_deleted({name})
        log.info("deleted topic %s", name)
        return info

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                          validate_only: bool = False) -> TopicInfo:
        """Grow `name` to `count` partitions; `assignments` gives the brokers of each new one."""
        info = self.metadata.get(name)
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
        if self.zookeeper is not None:
            added = assign_replicas(self.cluster.live_nodes(), count - info.partitions, info.replication_factor,
                                    first_partition=info.partitions) if assignments is None else \
                {info.partitions + i: replicas for i, replicas in enumerate(assignments)}
            self.metadata.add_partitions(updated, added)
        else:
            self._host_new(updated, range(info.partitions, count), self.topic_config(updated))
            self.metadata.update(updated)
        log.info("topic %s now has %d partition(s)", name, count)
        return updated

    def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> TopicInfo:
        """Replace the topic's whole override set; the partition logs use it at once."""
        updated = self.metadata.get(name).with_configs(configs)
        topic_config = self.topic_config(updated)  # validates
        if not validate_only:
            self.metadata.update(updated)
            self.replicas.reconfigure(name, topic_config)  # (in a cluster, the others when they hear of it)
            log.info("topic %s configs now %s", name, configs)
        return updated
