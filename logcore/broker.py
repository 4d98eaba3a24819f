"""Broker: wires the services (see `Broker`), starts and stops them, and runs background housekeeping."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import resource
import time

from .api import Services, load_handlers
from .cluster.view import Node
from .config import BrokerConfig
from .coordinator.group_coordinator import GroupCoordinator
from .coordinator.share_coordinator import ShareCoordinator
from .coordinator.share_state import SHARE_STATE_TOPIC
from .coordinator.offsets_codec import OFFSETS_TOPIC
from .coordinator.producer_ids import ProducerIdManager
from .coordinator.transaction_coordinator import TransactionCoordinator
from .coordinator.transaction_log import TRANSACTION_TOPIC
from .coordinator.transaction_markers import MarkerWriter
from .coordinator.txn_verification import TxnVerifier
from .metrics import BrokerMetrics
from .modes import mode_for
from .protocol import codec
from .protocol.codec import ApiKey
from .protocol.fetch_session import FetchSessionCache
from .replication.manager import ReplicaManager
from .replication.partition import Partition
from .security.authorizer import Authorizer
from .security.inter_broker import peer_security
from .security.listeners import Listener, listeners_from
from .security.per_listener import sasl_sessions, tls_context
from .server import KafkaServer, ServerLimits
from .topic_admin import TopicAdmin

log = logging.getLogger(__name__)

# Built ahead of the first request (`_prepare_codec`): what every client's first moments and the
# produce and fetch paths parse and answer.
PREPARED_APIS = (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.INIT_PRODUCER_ID, ApiKey.FIND_COORDINATOR,
                 ApiKey.PRODUCE, ApiKey.FETCH)


def raise_descriptor_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit (Kafka's docs ask for 100,000+); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Broker:
    """Wires the services: the replica manager, the mode (alone or in a ZooKeeper cluster, `logcore.modes`)
    and what it builds, topic administration, the coordinators, the authorizer, and one server per listener,
    whose request handlers get `services` and nothing else. Runs background housekeeping."""

    def __init__(self, data_dir: str, host: str = "127.0.0.1", port: int = 9092,
                 config: BrokerConfig | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.config = config or BrokerConfig()
        self.broker_id = self.config.get("broker.id")
        self.replicas = ReplicaManager(self.data_dir, self.broker_id, self.config)
        self.mode = mode_for(self.config, self.data_dir, self.broker_id, self.replicas, lambda: self.node)
        self.metadata = self.mode.metadata
        self.cluster = self.mode.view
        self.topic_admin = TopicAdmin(self.config, self.metadata, self.replicas, self.mode.placement)
        self.fetch_sessions = FetchSessionCache()  # KIP-227 incremental fetch sessions
        self.groups = GroupCoordinator(self.replicas, self.metadata, self.config, self.topic_admin.create,
                                       self.mode.group_configs, alone=self.mode.alone)
        self.mode.add_deletion_listener(self.groups)
        self.listeners, inter_broker = listeners_from(self.config, host, port)
        self.peer_security = peer_security(self.config, inter_broker)  # (None: PLAINTEXT between brokers)
        self.shares = ShareCoordinator(self.replicas, self.metadata, self.config, self.topic_admin.create,
                                       self.mode.group_configs, self.groups.store, self._other_group, self.cluster,
                                       alone=self.mode.alone, peer_security=self.peer_security)
        self.mode.add_deletion_listener(self.shares)
        self.txn_markers = MarkerWriter(self.replicas, self.metadata, self.cluster, self.peer_security)
        self.transactions = TransactionCoordinator(self.replicas, self.metadata, self.config, self.topic_admin.create,
                                                   ProducerIdManager(self.mode.id_blocks), self.txn_markers,
                                                   self.groups, alone=self.mode.alone)
        self.txn_verifier = TxnVerifier(self.transactions, self.replicas, self.cluster, self.peer_security)
        self.credentials = self.mode.credentials
        self.authorizer = Authorizer.from_config(  # None: no authorizer.class.name, every request is allowed
            self.config, self.mode.acl_store)
        self.metrics = BrokerMetrics(self.replicas, self.groups, self.transactions)
        self.services = Services(self.broker_id, self.config, self.replicas, self.metadata, self.cluster,
                                 self.topic_admin, self.groups, self.transactions, self.txn_markers,
                                 self.txn_verifier, self.fetch_sessions, self.authorizer, self.credentials, self.metrics,
                                 self.mode.group_configs, self.shares, self.mode.features)
        handlers, limits = load_handlers(), ServerLimits.from_config(self.config)
        self.servers = {listener.name: KafkaServer(self.services, listener.host, listener.port, handlers, limits, listener.name,
                                                   tls_context(self.config, listener),
                                                   sasl_sessions(self.config, listener, self.credentials))
                        for listener in self.listeners}
        self.server = self.servers[inter_broker.name]  # the one brokers replicate over, registered as host:port
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
        # The ports are bound first (in a cluster they are the ones registered), clients served once
        # the broker's partitions and coordinators are up.
        for server in self.servers.values():
            await server.start(serving=False)
        await self.mode.start(self.node, self.topic_admin.topic_config, self._coordinate, self.metrics.isr_changed,
                              self.peer_security)
        if self.authorizer is not None:
            await asyncio.to_thread(self.authorizer.store.start)  # (ZooKeeper reads block)
        await self.groups.start()
        await self.transactions.start()
        await self.shares.start()
        for server in self.servers.values():
            await server.serve()
        self.started_ms = int(time.time() * 1000)
        self.replicas.cleaner.start()
        if listener := self.config.get("prometheus.listener"):
            from .metrics_endpoint import serve_metrics  # aiohttp only for a broker that serves metrics
            self.metrics_endpoint = await serve_metrics(self.metrics.exposition, listener)
        self._tasks = [
            asyncio.create_task(self._prepare_codec(self.server.supported)),
            asyncio.create_task(self._every(self.config.get("log.retention.check.interval.ms"),
                                            self.replicas.apply_retention)),
            asyncio.create_task(self._every(self.config.get("log.flush.scheduler.interval.ms"),
                                            lambda: self.replicas.flush_due(int(time.time() * 1000)))),
            asyncio.create_task(self._every(max(self.config.get("log.flush.offset.checkpoint.interval.ms"), 1),
                                            self.replicas.checkpoint_in_background)),
        ]
        log.info("broker %d listening on %s (data dir %s)", self.broker_id, ", ".join(
            f"{l.name}://{host}:{port}" if len(self.listeners) > 1 else f"{host}:{port}"
            for l in self.listeners for host, port in [self.endpoint(l)]), self.data_dir)

    async def stop(self) -> None:
        if self.config.get("controlled.shutdown.enable"):
            await self.mode.leave(self.config.get("controlled.shutdown.max.retries")
                                  * self.config.get("controlled.shutdown.retry.backoff.ms") / 1000)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.replicas.cleaner.stop()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.cleanup()
        await self.groups.stop()
        await self.transactions.stop()
        await self.shares.stop()
        self.txn_verifier.close()
        for server in self.servers.values():
            await server.stop()
        await self.mode.stop()
        self.replicas.shutdown()
        log.info("broker %d stopped cleanly", self.broker_id)

    def _other_group(self, group_id: str) -> bool:
        """Is `group_id` a classic or consumer group's (so not free for a share group)?"""
        return self.groups.group(group_id) is not None or self.groups.consumer_group(group_id) is not None

    def _coordinate(self, partition: Partition) -> None:
        """In a cluster the coordinator of a partition of __consumer_offsets, __transaction_state or
        __share_group_state is its leader."""
        coordinator = {OFFSETS_TOPIC: self.groups, TRANSACTION_TOPIC: self.transactions,
                       SHARE_STATE_TOPIC: self.shares}.get(partition.topic)
        if coordinator is None:
            return
        if partition.is_leader:
            coordinator.became_leader(partition)
        else:
            coordinator.unload_partition(partition.index)

    @staticmethod
    async def _prepare_codec(supported: dict[int, tuple[int, int]]) -> None:
        """Build the codec of the newest versions of the APIs a client starts with and produces or
        fetches by, once serving, one per turn of the event loop, so the first client after a start
        does not wait for them (Kafka's Java clients ask for the newest version both sides have)."""
        for api_key in PREPARED_APIS:
            await asyncio.sleep(0)
            codec.prepare(api_key, supported[api_key][1])

    async def _every(self, interval_ms: int, job) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                if inspect.isawaitable(done := job()):
                    await done
            except Exception:
                log.exception("background job %s failed", job)
