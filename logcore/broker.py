"""Broker: wires the configuration, the metadata store, the replica manager and the listener, and
owns topic lifecycle (create, delete, add partitions, alter configs) and background housekeeping.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid

from .api import load_handlers
from .cluster.local import LocalMetadataStore
from .cluster.topics import TopicInfo
from .config import BrokerConfig, TopicConfig, validate_topic_overrides
from .protocol.errors import InvalidPartitions, InvalidReplicationFactor, InvalidRequest
from .replication.manager import ReplicaManager
from .server import KafkaServer

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, data_dir: str, host: str = "127.0.0.1", port: int = 9092, broker_id: int = 0,
                 config: BrokerConfig | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.broker_id = broker_id
        self.config = config or BrokerConfig()
        self.metadata = LocalMetadataStore(self.data_dir, broker_id)
        self.replicas = ReplicaManager(self.data_dir, broker_id, self.config)
        self.server = KafkaServer(self, host, port, load_handlers(), self.config.get("socket.request.max.bytes"))
        self._tasks: list[asyncio.Task] = []
        self.started_ms = 0

    # -- addresses -----------------------------------------------------------------------------

    @property
    def advertised(self) -> tuple[str, int]:
        configured = self.config.get("advertised.listeners")
        if configured:
            host, _, port = configured.rpartition("//")[2].rpartition(":")
            return host, int(port)
        return self.server.host, self.server.port

    @property
    def address(self) -> str:
        host, port = self.advertised
        return f"{host}:{port}"

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        for info in self.metadata.topics.values():
            topic_config = self.topic_config(info)
            for index in range(info.partitions):
                self.replicas.host(info.name, index, topic_config)
        self.replicas.started()
        await self.server.start()
        self.started_ms = int(time.time() * 1000)
        self._tasks = [
            asyncio.create_task(self._every(self.config.get("log.retention.check.interval.ms"),
                                            self.replicas.apply_retention)),
            asyncio.create_task(self._every(self.config.get("log.flush.scheduler.interval.ms"),
                                            lambda: self.replicas.flush_due(int(time.time() * 1000)))),
        ]
        log.info("broker %d listening on %s (data dir %s)", self.broker_id, self.address, self.data_dir)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.stop()
        self.replicas.shutdown()
        log.info("broker %d stopped cleanly", self.broker_id)

    async def _every(self, interval_ms: int, job) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                job()
            except Exception:
                log.exception("background job %s failed", job)

    # -- topics --------------------------------------------------------------------------------

    def topic_config(self, info: TopicInfo) -> TopicConfig:
        return TopicConfig(self.config, info.configs)

    def check_new_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        """Every reason CreateTopics would refuse, without creating anything."""
        self.metadata.check_new(name, partitions)
        brokers = 1
        if replication_factor < 1:
            raise InvalidReplicationFactor(f"replication factor must be at least 1, got {replication_factor}")
        if replication_factor > brokers:
            raise InvalidReplicationFactor(
                f"replication factor {replication_factor} larger than available brokers {brokers}")
        validate_topic_overrides(configs)

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None) -> TopicInfo:
        partitions = partitions if partitions > 0 else self.config.get("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get("default.replication.factor")
        configs = {k: v for k, v in (configs or {}).items() if v is not None}
        self.check_new_topic(name, partitions, replication_factor, configs)
        info = TopicInfo(name, uuid.uuid4(), partitions, replication_factor, configs)
        self.metadata.create(info)
        topic_config = self.topic_config(info)
        for index in range(partitions):
            self.replicas.host(name, index, topic_config)
        log.info("created topic %s with %d partition(s)", name, partitions)
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        if not self.config.get("delete.topic.enable"):
            raise InvalidRequest("topic deletion is disabled (delete.topic.enable=false)")
        info = self.metadata.delete(name)
        self.replicas.unhost_topic(name)
        log.info("deleted topic %s", name)
        return info

    def check_partition_count(self, name: str, count: int) -> TopicInfo:
        info = self.metadata.get(name)
        if count <= info.partitions:
            raise InvalidPartitions(
                f"topic {name} has {info.partitions} partitions; the new count {count} must be larger")
        return info

    def create_partitions(self, name: str, count: int) -> None:
        info = self.check_partition_count(name, count)
        updated = info.with_partitions(count)
        self.metadata.update(updated)
        topic_config = self.topic_config(updated)
        for index in range(info.partitions, count):
            self.replicas.host(name, index, topic_config)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        info = self.metadata.get(name)
        validate_topic_overrides(configs)
        updated = info.with_configs(configs)
        self.metadata.update(updated)
        self.replicas.reconfigure(name, self.topic_config(updated))
