"""The distributed workers' shared state, kept in two compacted topics as Kafka Connect keeps it.

`config.storage.topic` (one partition, so every worker reads one total order):
    connector-NAME     → the connector's config (the same keys as a `connect run` YAML file), null = deleted
    target-state-NAME  → {"state": "STARTED" | "PAUSED" | "STOPPED"}
    restart-NAME       → {"task": id or null, "include_tasks": bool, "only_failed": bool}: a request,
                         acted on by the workers that run the connector when they read it live
`status.storage.topic`:
    status-connector-NAME / status-task-NAME-ID → {"state", "trace", "worker_id", "generation"}
    topic-TOPIC-NAME   → {"topic": {"name", "connector", "task", "discoverTimestamp"}}: a topic the
                         connector's tasks wrote to (KIP-558's active topics), null = reset

Every worker tails both topics into `ClusterState`; only the group's leader writes the config topic
(REST requests to other workers are forwarded to it), and each worker writes the status of what it runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from common.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)


@dataclass
class ClusterState:
    """What the config and status topics say, as far as this worker has read them."""

    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    target_states: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    config_offset: int = 0
    """The next offset to read in the config topic."""

    def target_state(self, name: str) -> str:
        return self.target_states.get(name, "STARTED")

    def connector_status(self, name: str) -> dict[str, Any] | None:
        return self.statuses.get(f"status-connector-{name}")

    def task_status(self, name: str, task: int) -> dict[str, Any] | None:
        return self.statuses.get(f"status-task-{name}-{task}")

    def active_topics(self, name: str) -> dict[str, str]:
        """{topic: its status record's key} for the topics the connector's tasks have written to."""
        return {value["topic"]["name"]: key for key, value in self.statuses.items()
                if key.startswith("topic-") and value["topic"]["connector"] == name}


ConfigListener = Callable[[str, Any], None]
"""Called with (key, decoded value) for each config record read after the worker caught up."""
TopicResetListener = Callable[[str, str], None]
"""Called with (connector, topic) when an active topic's record is deleted (a reset, KIP-558)."""


class StateTopics:
    """Tails the config and status topics into a `ClusterState` and writes records to them."""

    def __init__(self, bootstrap_servers: str | list[str], config_topic: str, status_topic: str,
                 on_config: ConfigListener, on_topic_reset: TopicResetListener,
                 security: KafkaSecurity = KafkaSecurity()) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self.config_topic = config_topic
        self.status_topic = status_topic
        self.state = ClusterState()
        self._on_config = on_config
        self._on_topic_reset = on_topic_reset
        self._live = False  # records read before the first catch-up are history, not requests
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._tail: asyncio.Task | None = None
        self._progress = asyncio.Condition()

    async def start(self, status_partitions: int) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                          auto_offset_reset="earliest", isolation_level="read_committed",
                                          **self.security.aiokafka())
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all",
                                          enable_idempotence=True, **self.security.aiokafka())
        await self._consumer.start()
        await self._producer.start()
        self._config_tp = TopicPartition(self.config_topic, 0)
        partitions = [self._config_tp] + [TopicPartition(self.status_topic, p) for p in range(status_partitions)]
        self._consumer.assign(partitions)
        await self._consumer.seek_to_beginning(*partitions)
        self._tail = asyncio.create_task(self._read_forever(), name="connect-state-reader")
        await self.catch_up()
        self._live = True

    async def stop(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            await asyncio.gather(self._tail, return_exceptions=True)
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()

    async def catch_up(self, config_offset: int | None = None) -> None:
        """Until the config topic is read up to `config_offset`, or to its end as it is now."""
        if config_offset is None:
            config_offset = (await self._consumer.end_offsets([self._config_tp]))[self._config_tp]
        async with self._progress:
            await self._progress.wait_for(lambda: self.state.config_offset >= config_offset
                                          or (self._tail is not None and self._tail.done()))
        if self._tail.done():
            self._tail.result()  # the reader died: say why

    async def write_config(self, key: str, value: Any) -> int:
        """Append to the config topic; returns the offset after it (catch up to it to see it applied)."""
        metadata = await (await self._producer.send(self.config_topic, _encode(value), key=key.encode(),
                                                    partition=0))
        return metadata.offset + 1

    async def write_status(self, key: str, value: dict[str, Any] | None) -> None:
        await self._producer.send(self.status_topic, _encode(value), key=key.encode())

    async def _read_forever(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=1000)
            for tp, messages in batches.items():
                for message in messages:
                    self._apply(tp.topic, message.key.decode() if message.key else "",
                                None if message.value is None else json.loads(message.value))
            position = await self._consumer.position(self._config_tp)
            async with self._progress:
                self.state.config_offset = position
                self._progress.notify_all()

    def _apply(self, topic: str, key: str, value: Any) -> None:
        state = self.state
        if topic == self.status_topic:
            if value is not None:
                state.statuses[key] = value
            elif (old := state.statuses.pop(key, None)) and "topic" in old:
                self._on_topic_reset(old["topic"]["connector"], old["topic"]["name"])
            return
        kind, name = split_config_key(key)
        if kind == "connector":
            if value is None:
                state.configs.pop(name, None)
                state.target_states.pop(name, None)
            else:
                state.configs[name] = value
        elif kind == "target-state":
            if value is None:
                state.target_states.pop(name, None)
            else:
                state.target_states[name] = value["state"]
        elif kind != "restart":
            log.warning("ignoring an unknown record in %s: %r", self.config_topic, key)
            return
        if self._live:
            try:
                self._on_config(key, value)
            except Exception:
                log.exception("acting on %s from %s failed", key, self.config_topic)


def split_config_key(key: str) -> tuple[str, str]:
    """`target-state-shop` → ("target-state", "shop"); an unknown kind → ("", key)."""
    for kind in ("connector", "target-state", "restart"):
        if key.startswith(kind + "-"):
            return kind, key[len(kind) + 1:]
    return "", key


def _encode(value: Any) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()
